"""`cgstat serve`: the Prometheus endpoint, and the same endpoint beside `cgstat stream`.
The sampling loop renders the exposition once per tick and hands the bytes to the HTTP
server (outputs/prometheus/http.py), which serves the latest ones to every scrape: a scrape
never triggers a read of the kernel and never waits for a tick; a tick never waits for a
scraper. `Exporter(listen)` is the server plus the renderer, a Sink (pipeline/sinks.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, cast

from cgstat import __version__
from cgstat.errors import CgstatError
from cgstat.outputs.prometheus import exposition as prometheus
from cgstat.outputs.prometheus.http import DEFAULT_LISTEN, MetricsServer, address_note
from cgstat.outputs.prometheus.budget import SeriesBudget
from cgstat.outputs.prometheus.labels import LabelCache
from cgstat.outputs.prometheus.webconfig import WebConfig
from cgstat.outputs.labelallow import LabelAllow
from cgstat.outputs.prometheus.heldidle import HeldIdleSeconds
from cgstat.outputs.prometheus.retention import ExitRetention, OomRetention
from cgstat.events.gpuheld import DEFAULT_MEMORY_BYTES
from cgstat.pipeline.sinks import NO_INFO, Sink, TickInfo
from cgstat.diagnostics import Warner

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject, Sampled


# `open()` serves the exporter's own metrics before the first tick, `write(records, tick)`
# (or `publish(records, tick_seconds)`) once per tick, `close()` at the end. `stream
# --listen` has it beside its other sinks. `cgstat serve` is the pipeline's Runner with the
# exporter as its sink (and any sinks added): bind (a bad address fails now, exit 1), warm
# up, READY=1, then a tick per interval with WATCHDOG=1 after each; SIGTERM/SIGINT end it
# with exit 0.
class Exporter(Sink):
    """Renders each tick's records and serves them on `listen` ('ADDR:PORT').

    Raises CgstatError (one line) when the address is malformed or cannot be bound.
    `stale_after_s`: /healthz answers 503 when no tick was published for that long.
    """

    def __init__(self, listen: str = DEFAULT_LISTEN, warner: Optional[Warner] = None,
                 stale_after_s: float = 60.0, timestamps: bool = True,
                 gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES, budget: Optional[SeriesBudget] = None,
                 label_allow: Optional[LabelAllow] = None, web: Optional[WebConfig] = None):
        self.warner = warner or Warner()
        self.label_allow = label_allow or LabelAllow()  # container labels: none unless allowed
        warner_ = self.warner
        # the series budget: groups turned off, --max-series (None: every series, no fold)
        self.budget = budget if budget is not None and (budget.active or budget.dropped) else None
        if budget is not None:
            budget.say = lambda message: warner_.once("max-series", message)
        self.timestamps = timestamps
        self.ticks = 0
        self.render_s: Optional[float] = None
        self.labels = LabelCache()  # the last tick's workloads' labels, rendered
        self.retention = OomRetention()  # gone cgroups' OOM-kill counters
        self.held_idle = HeldIdleSeconds(gpu_idle_memory_bytes)  # GPU-seconds held idle, per cgroup
        self.exits = ExitRetention()  # gone cgroups' exit records
        try:
            self.server = MetricsServer(listen, stale_after_s=stale_after_s,
                                        on_error=lambda m: self.warner.warn("http", m), web=web)
        except ValueError as exc:
            raise CgstatError(str(exc)) from None
        try:
            self.server.start()
        except OSError as exc:
            raise CgstatError("cannot listen on %s: %s" % (listen, exc.strerror or exc)) from None
        host, port = self.server.address
        note = address_note(self.server.host) if web is None or not web.guarded else None
        if note:
            self.warner.once("listen", note)
        self.address = "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)

    uses_kills = True  # gone cgroups' OOM-kill counters are kept a while

    def open(self) -> None:
        self.publish([], None)  # /metrics answers (self-metrics) before the first tick

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        """One tick: its records (its events are skipped) and what reading it took."""
        batch = records if isinstance(records, (list, tuple)) else list(records)
        self.publish(cast("Sequence[Sampled]", batch), tick.seconds, tick.kills, tick.late,
                     tick.gpu_reads_late_total, tick.gpu_call_errors)

    def publish(self, records: Sequence[Sampled], tick_seconds: Optional[float] = None,
                kills: Iterable[Any] = (), late: Iterable[Any] = (),
                gpu_reads_late_total: Optional[int] = None,
                gpu_call_errors: Optional[Mapping[Tuple[str, str], int]] = None) -> None:
        """Render `records` (one tick) and make them what /metrics serves from now on.
        `kills`, `late`: the tick's kernel-log OOM kills and gone cgroups' counters read as they
        changed (Sampler.kills, .late_counts), for the gone cgroups' counters."""
        began = time.monotonic()
        records = cast("Sequence[Sampled]", self.label_allow.apply(records))
        self.ticks += 1
        own: Dict[str, Any] = {
            "version": __version__,
            "ticks_total": self.ticks,
            "tick_duration_seconds": tick_seconds,
            "render_duration_seconds": self.render_s,
            "last_tick_timestamp_seconds": round(time.time(), 3),
            "gpu_reads_late_total": gpu_reads_late_total,
            "gpu_call_errors_total": gpu_call_errors,
        }
        stamps = self.timestamps
        labels = self.labels
        retained = self.retention.update(records, kills, began, late)
        held = self.held_idle.update(records, began) if records else []
        exited = self.exits.update(records, began)
        fold = self.budget.tick() if self.budget is not None else None
        text = prometheus.render(records, prometheus.TEXT, own, stamps, labels, retained, held, exited, fold)

        def openmetrics() -> bytes:  # made on the first scrape that asks, in the server thread
            return prometheus.render(records, prometheus.OPENMETRICS, own, stamps, labels, retained, held, exited,
                                     fold)

        self.server.publish(text, openmetrics)
        self.render_s = time.monotonic() - began

    def close(self) -> None:
        self.server.close()
