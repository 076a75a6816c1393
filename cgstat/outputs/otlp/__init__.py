"""The OTLP push: records as OpenTelemetry metrics (names.py, encode.py) within the series
budget (budget.py), sent over HTTP (transport.py) by a queued sink (sink.py); its
--otlp-* options and the sink kind they make (options.py)."""
