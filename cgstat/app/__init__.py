"""The run modes (stream, serve, once, top, report, pid): each wires a Sampler, the one
Schedule, the events detector and the sinks or views into a run. The CLI calls these; the
layers below never import them."""
