"""The OTLP push as a sink kind: its --otlp-* options, declared once for every command that
offers them, and the sink they make (otlp/sink.py, imported only when a push is asked
for: protobuf, ssl and http.client cost a start-up)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from cgstat.outputs import values
from cgstat.pipeline.sinks import SinkContext, SinkKind, SinkOption, register

if TYPE_CHECKING:
    from cgstat.pipeline.sinks import Sink


def _endpoint(value: Any) -> str:
    """Checked before anything starts: a bad URL is a usage error (exit 2)."""
    from cgstat.outputs.otlp.transport import parse_endpoint

    parse_endpoint(str(value))
    return str(value)


def _header(value: Any) -> Any:
    from cgstat.outputs.otlp.transport import parse_header

    return parse_header(str(value))


OPTIONS = (
    SinkOption("--otlp-endpoint", "Also push every tick's metrics to this OTLP/HTTP receiver (http:// or https://; "
                                  "a URL without a path gets /v1/metrics). See docs/otlp.md.",
               _endpoint, envvar="CGSTAT_OTLP_ENDPOINT", metavar="URL"),
    SinkOption("--otlp-encoding", "protobuf (needs pip install 'cgstat[otlp]') or json (OTLP's JSON mapping).",
               values.one_of("protobuf", "json"), "protobuf", metavar="protobuf|json"),
    SinkOption("--otlp-header", "A header sent with every push (X-Scope-OrgID=tenant); repeatable. Credentials go "
                                "in OTEL_EXPORTER_OTLP_HEADERS, --otlp-headers-file or the systemd credential "
                                "otlp-headers: a command line is readable by every local user.",
               _header, metavar="NAME=VALUE", multiple=True),
    SinkOption("--otlp-buffer", "How long ticks are kept while the receiver is down or slow (300, 5m, 1h); past "
                                "it the oldest are dropped, said on stderr.", values.duration, "5m",
               metavar="DURATION"),
    SinkOption("--otlp-timeout", "Seconds a push may take before it is retried.", values.seconds(0.1, 600.0), "10",
               metavar="S"),
    SinkOption("--otlp-compression", "Content-Encoding of the pushes.", values.one_of("gzip", "none"), "gzip",
               metavar="gzip|none"),
    SinkOption("--otlp-ca-file", "The CA certificates an https:// receiver's certificate is checked against "
                                 "(env OTEL_EXPORTER_OTLP_CERTIFICATE; default: the system's).", values.not_empty,
               metavar="FILE"),
    SinkOption("--otlp-headers-file", "Headers sent with every push, NAME=VALUE by line or comma (auth: "
                                      "Authorization=Bearer TOKEN); the file must be yours and mode 0600.",
               values.not_empty, envvar="CGSTAT_OTLP_HEADERS_FILE", metavar="FILE"),
    SinkOption("--otlp-client-certificate", "Client certificate (PEM) for mTLS to an https:// receiver "
                                            "(env OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE).",
               values.not_empty, metavar="FILE"),
    SinkOption("--otlp-client-key", "The client certificate's private key (PEM; env OTEL_EXPORTER_OTLP_CLIENT_KEY).",
               values.not_empty, metavar="FILE"),
)


def make(given: Mapping[str, Any], context: SinkContext) -> Sink:
    """The push, bound by the same metric groups and --max-series as /metrics (its own
    count: data points, not the exposition's series)."""
    from cgstat.outputs.otlp.sink import OtlpOptions, OtlpSink
    from cgstat.outputs.otlp.budget import OtlpBudget

    options = OtlpOptions(given["otlp_endpoint"], given["otlp_encoding"], tuple(given["otlp_header"] or ()),
                          given["otlp_buffer"], given["otlp_timeout"], given["otlp_compression"],
                          given["otlp_ca_file"], given["otlp_headers_file"], given["otlp_client_certificate"],
                          given["otlp_client_key"], context.label_allow)
    budget = context.budget
    own = OtlpBudget(budget.max_series, budget.off) if budget is not None else None
    return OtlpSink(options, context.warn, budget=own)


register(SinkKind("otlp", OPTIONS, make))
