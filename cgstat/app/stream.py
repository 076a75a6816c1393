"""`cgstat stream` (a batch every interval into its output, with events) and `cgstat serve`
(the same ticks into the Prometheus endpoint only); either also feeds the sinks of every
kind asked for (the store, an OTLP push, a plug-in: app/sinks.py). The tick loop is the
pipeline's Runner: a run mode builds its sinks and hands them over."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from cgstat.app.sinks import make_sinks
from cgstat.events.gpuheld import DEFAULT_MEMORY_BYTES, DEFAULT_WINDOW_S
from cgstat.pipeline.runner import Runner
from cgstat.pipeline.schedule import Schedule
from cgstat.pipeline.sinks import Sink, SinkContext

if TYPE_CHECKING:  # the exporter and events are imported by the runs that use them
    from cgstat.outputs.prometheus.budget import SeriesBudget
    from cgstat.events import EventDetector
    from cgstat.pipeline.sampler import Sampler

__all__ = ["Schedule", "run_stream", "serve", "stream"]  # Schedule: what tests hold still


def stream(sampler: Sampler, interval_s: float, count: Optional[int], fmt: str, output: Optional[str],
           output_mode: int, events_window_s: Optional[float], listen: Optional[str],
           added: Mapping[str, Any] = {}, gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES,
           gpu_idle_window_s: float = DEFAULT_WINDOW_S, log_state: Optional[str] = None,
           budget: Optional[SeriesBudget] = None, label_allow: Optional[str] = None,
           web_config: Optional[str] = None) -> int:
    """`cgstat stream`: the sink for `fmt` on `output` (stdout when None; one that can block
    on its own thread), events judged over `events_window_s` (None: no events), /metrics
    beside it when `listen`, the sinks of the kinds in `added` (their options' values: the
    store, an OTLP push, a plug-in), /metrics and the push within `budget` (its groups and
    --max-series); GPUs held idle: at least `gpu_idle_memory_bytes` for `gpu_idle_window_s`;
    where the kernel log was read to kept in `log_state`; container labels in /metrics only
    those `label_allow` matches, /metrics guarded by `web_config` (TLS, basic auth)."""
    from cgstat.outputs.formats import make_sink

    events = None
    if events_window_s is not None:
        from cgstat.events import EventDetector

        events = EventDetector(window_s=events_window_s, gpu_idle_memory_bytes=gpu_idle_memory_bytes,
                               gpu_idle_window_s=gpu_idle_window_s)
    warn = sampler.warner.warn
    sinks = [make_sink(fmt, output, output_mode, warn, queue=True),
             *make_sinks(added, SinkContext(warn, budget, label_allow))]
    return run_stream(sampler, sinks, interval_s, count, events, listen, gpu_idle_memory_bytes=gpu_idle_memory_bytes,
                      log_state=log_state, budget=budget, label_allow=label_allow, web_config=web_config)


def serve(sampler: Sampler, listen: str, interval_s: float, count: Optional[int], added: Mapping[str, Any] = {},
          gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES, log_state: Optional[str] = None,
          budget: Optional[SeriesBudget] = None, label_allow: Optional[str] = None,
          web_config: Optional[str] = None) -> int:
    """`cgstat serve`: a stream whose sinks are the endpoint and those of the kinds in `added`."""
    sinks = make_sinks(added, SinkContext(sampler.warner.warn, budget, label_allow))
    return run_stream(sampler, sinks, interval_s, count, None, listen, gpu_idle_memory_bytes=gpu_idle_memory_bytes,
                      log_state=log_state, budget=budget, label_allow=label_allow, web_config=web_config)


def run_stream(sampler: Sampler, sinks: Sequence[Sink], interval_s: float, count: Optional[int],
               events: Optional[EventDetector] = None, listen: Optional[str] = None,
               gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES, log_state: Optional[str] = None,
               budget: Optional[SeriesBudget] = None, label_allow: Optional[str] = None,
               web_config: Optional[str] = None) -> int:
    """The Runner over `sinks`, with the Prometheus endpoint first among them when `listen`
    (a tick is served before the end of it is written elsewhere): `budget`, its metric
    groups and series budget (None: every series); `label_allow`, the container labels it
    shows (None: none); `web_config`, its TLS and basic auth (outputs/prometheus/webconfig.py)."""
    sinks = list(sinks)
    if listen:
        from cgstat.outputs.labelallow import LabelAllow
        from cgstat.outputs.prometheus.exporter import Exporter  # only when asked: HTTP costs a start-up

        web = None
        if web_config:
            from cgstat.outputs.prometheus.webconfig import load

            web = load(web_config)  # a file that can't be used fails the run before anything is written
        exporter = Exporter(listen, sampler.warner, stale_after_s=max(60.0, 5 * interval_s),
                            gpu_idle_memory_bytes=gpu_idle_memory_bytes, budget=budget,
                            label_allow=LabelAllow(label_allow), web=web)
        scheme = "https" if web is not None and web.tls is not None else "http"
        sampler.warner.once("serving", f"serving /metrics and /healthz on {scheme}://{exporter.address}/")
        sinks.insert(0, exporter)
    return Runner(sampler, sinks, interval_s, events, log_state).run(count)
