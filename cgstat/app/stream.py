"""`cgstat stream` (a batch every interval, into a sink, with events) and `cgstat serve`
(the same ticks into the Prometheus endpoint only); either also pushes them over OTLP
(cgstat/outputs/otlp/sink.py) when given an endpoint."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Tuple

from cgstat import sdnotify
from cgstat.kernel.kmsg import started_usec
from cgstat.outputs.sink import NO_INFO, ReaderGone, Sink, SinkError, TickInfo
from cgstat.events.gpuheld import DEFAULT_MEMORY_BYTES, DEFAULT_WINDOW_S
from cgstat.gpu.beside import deadline_s as gpu_deadline_s
from cgstat.pipeline.schedule import Schedule, watchdog_heartbeat_s

if TYPE_CHECKING:  # the exporter and events are imported by the runs that use them
    from cgstat.app.record import StoreOptions
    from cgstat.contract.types import JsonObject
    from cgstat.outputs.otlp.sink import OtlpOptions
    from cgstat.events import EventDetector
    from cgstat.pipeline.sampler import Sampler
    from cgstat.outputs.prometheus.budget import SeriesBudget


def stream(sampler: Sampler, interval_s: float, count: Optional[int], fmt: str, output: Optional[str],
           output_mode: int, events_window_s: Optional[float], listen: Optional[str],
           otlp: Optional[OtlpOptions] = None, store: Optional[StoreOptions] = None,
           gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES, gpu_idle_window_s: float = DEFAULT_WINDOW_S,
           log_state: Optional[str] = None, budget: Optional[SeriesBudget] = None,
           label_allow: Optional[str] = None, web_config: Optional[str] = None) -> int:
    """`cgstat stream`: the sink for `fmt` on `output` (stdout when None; one that can block
    on its own thread), events judged over `events_window_s` (None: no events), /metrics
    beside it when `listen`, an OTLP push beside it when `otlp`, every tick kept in `store`
    too when given (/metrics and the push within `budget`: its groups and --max-series); GPUs
    held idle: at least `gpu_idle_memory_bytes` for `gpu_idle_window_s`; where the kernel log
    was read to kept in `log_state`; container labels in /metrics only those `label_allow`
    matches, /metrics guarded by `web_config` (TLS, basic auth)."""
    from cgstat.outputs.formats import make_sink

    events = None
    if events_window_s is not None:
        from cgstat.events import EventDetector

        events = EventDetector(window_s=events_window_s, gpu_idle_memory_bytes=gpu_idle_memory_bytes,
                               gpu_idle_window_s=gpu_idle_window_s)
    sinks = [make_sink(fmt, output, output_mode, sampler.warner.warn, queue=True),
             *_otlp_sinks(sampler, otlp, budget)]
    if store is not None:
        sinks.append(store.sink(sampler.warner.warn))
    return run_stream(sampler, sinks, interval_s, count, events, listen, gpu_idle_memory_bytes=gpu_idle_memory_bytes,
                      log_state=log_state, budget=budget, label_allow=label_allow, web_config=web_config)


def serve(sampler: Sampler, listen: str, interval_s: float, count: Optional[int],
          otlp: Optional[OtlpOptions] = None, gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES,
          log_state: Optional[str] = None,
          budget: Optional[SeriesBudget] = None, label_allow: Optional[str] = None,
          web_config: Optional[str] = None) -> int:
    """`cgstat serve`: a stream whose only sinks are the endpoint (and an OTLP push)."""
    return run_stream(sampler, _otlp_sinks(sampler, otlp, budget), interval_s, count, None, listen,
                      gpu_idle_memory_bytes=gpu_idle_memory_bytes, log_state=log_state, budget=budget,
                      label_allow=label_allow, web_config=web_config)


def _otlp_sinks(sampler: Sampler, otlp: Optional[OtlpOptions], budget: Optional[SeriesBudget] = None) -> List[Sink]:
    """The OTLP push, when asked, bound by the same metric groups and --max-series as /metrics
    (its own count: data points, not the exposition's series)."""
    if otlp is None:
        return []
    from cgstat.outputs.otlp.sink import OtlpSink  # only when asked: protobuf costs a start-up
    from cgstat.outputs.otlp.budget import OtlpBudget

    own = OtlpBudget(budget.max_series, budget.off) if budget is not None else None
    return [OtlpSink(otlp, sampler.warner.warn, budget=own)]


def run_stream(sampler: Sampler, sinks: Sequence[Sink], interval_s: float, count: Optional[int],
               events: Optional[EventDetector] = None, listen: Optional[str] = None,
               gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES, log_state: Optional[str] = None,
               budget: Optional[SeriesBudget] = None, label_allow: Optional[str] = None,
               web_config: Optional[str] = None) -> int:
    """Ticks every interval on a drift-free schedule, each into every sink; the first one
    interval after start.

    `events`: diagnostics events raised from the ticks go into the same ticks. `listen`:
    the Prometheus endpoint (a sink too) served beside the others, first among them.
    `log_state`: the file keeping where the kernel log was read to (pipeline/logplace.py).
    `budget`: the endpoint's metric groups and series budget (None: every series).
    `label_allow`: the container labels the endpoint shows (None: none); `web_config`: its
    TLS and basic auth (outputs/prometheus/webconfig.py).
    """
    sinks = list(sinks)
    if log_state is not None:
        from cgstat.pipeline.logplace import LogPlace

        LogPlace(log_state, None).check()  # a path not ours fails the run before anything is written
    web = None
    if listen and web_config:
        from cgstat.outputs.prometheus.webconfig import load

        web = load(web_config)  # a file that can't be used fails the run before anything is written
    opened: List[Sink] = []
    try:
        for sink in sinks:
            sink.open()  # an output that can't be used fails the run now, not silently later
            opened.append(sink)
        if listen:
            from cgstat.outputs.prometheus.exporter import Exporter  # only when asked: HTTP costs a start-up

            from cgstat.outputs.labelallow import LabelAllow

            exporter = Exporter(listen, sampler.warner, stale_after_s=max(60.0, 5 * interval_s),
                                gpu_idle_memory_bytes=gpu_idle_memory_bytes, budget=budget,
                                label_allow=LabelAllow(label_allow), web=web)
            scheme = "https" if web is not None and web.tls is not None else "http"
            sampler.warner.once("serving", f"serving /metrics and /healthz on {scheme}://{exporter.address}/")
            exporter.open()  # /metrics answers (self-metrics) before the first tick
            opened.append(exporter)
            sinks.insert(0, exporter)  # first: a tick is served before a file is written
    except BaseException:
        _close(opened)
        raise
    tee = _tee(sinks)
    if tee is not None:
        tee[0].share_lines(tee[1].line_of)  # each record serialised once, by the store's tee
    schedule = Schedule(interval_s, sampler.warner, watchdog_heartbeat_s()).install_signals()
    for sink in sinks:
        sink.watch_stop(lambda: schedule.stop)
    # OOM kills: the kernel log after where the last agent of this boot stopped reading
    # (`log_state`), else since this process started (a kill during start-up, which takes
    # seconds on a slow host, is in the backlog); v2 counters read as they change (events
    # and the exporter's kept counters)
    place = None
    if events is not None or any(sink.uses_kills for sink in sinks):
        seq = None
        if log_state is not None:
            from cgstat.pipeline.logplace import LogPlace

            place = LogPlace(log_state, sampler.host.boot_id)
            seq = place.load()
        if not sampler.follow_kernel_log(after_seq=seq, since_usec=started_usec() if seq is None else None):
            place = None
        sampler.watch_memory_events()
    sampler.track_exits()  # an exit record in the tick after a cgroup goes
    sampler.gpu_deadline(gpu_deadline_s(interval_s))  # a hung NVML call holds no cgroup record
    ended = False
    try:
        sampler.warm_up()  # the first batch, one interval later, has rates
        schedule.restart()
        sdnotify.ready()  # Type=notify: started once the first sample is in
        for _ in schedule.ticks(count):
            if schedule.take_reopen():
                for sink in sinks:
                    sink.reopen()
            _stream_tick(sampler, sinks, events)
            if place is not None:  # after the tick's events were written: never ahead of them
                why = place.save(sampler.kernel_log_seq)
                if why:
                    sampler.warner.warn("log-state", f"{why}: a restart may miss or repeat OOM kills")
            sdnotify.watchdog()  # a tick finished: a hung read or write stops these
        ended = True
    except ReaderGone:
        return 0
    finally:
        sdnotify.stopping()
        _close(sinks)
    for sink in sinks:
        if ended and sink.dropped_lines:
            sampler.warner.warn("dropped", f"{sink.dropped_lines} lines dropped while the output failed")
    return 0


def _close(sinks: Sequence[Sink]) -> None:
    """Close every sink, the last opened first (each writes what it holds first)."""
    for sink in reversed(sinks):
        sink.close()


def _stream_tick(sampler: Sampler, sinks: Sequence[Sink], events: Optional[EventDetector]) -> None:
    """One tick of run_stream.

    A run whose only sink streams gets each record as it is made (through the events
    detector): a tick never holds its records all at once (~3.7 KiB each, 7 MiB at 1,000
    empty cgroups). Otherwise the tick is a list every sink is given (the exporter keeps
    it for its next scrape); its records die when this returns (a loop variable would keep
    them through the next tick).
    """
    tee = _tee(sinks)
    if (len(sinks) == 1 and sinks[0].streams) or tee is not None:
        stream: Iterable[JsonObject] = sampler.records()
        if events is not None:
            # records, then the tick's events (the kernel log's kills are read after the records)
            stream = events.watch(stream, kills=lambda: sampler.kills, late=lambda: sampler.late_counts)
        if tee is None:
            _write(sampler, sinks[0], stream, NO_INFO)
            return
        # `stream --store`: the store takes each record (and its line, made once) as it
        # passes to the other output; the records are made one at a time all the same
        output, store = tee
        passed = store.tee(stream)
        try:
            _write(sampler, output, passed, NO_INFO)
            for _ in passed:  # what the output did not take (a tick it dropped): made, and stored
                pass
        finally:
            try:
                store.end_tee()  # a tick whose records stopped coming is not stored
            except SinkError as exc:
                sampler.warner.warn("sink", str(exc))
        return
    began = time.monotonic()
    records: Sequence[JsonObject] = sampler.tick()
    # the sinks' kills are the shown cgroups' (the exposition makes no series of a kill
    # elsewhere); the events judge them all
    tick = TickInfo(time.monotonic() - began, [k for k in sampler.kills if k.selected], sampler.late_counts,
                    sampler.gpu_reads_late_total)
    if events is not None:
        records = [*records, *events.observe(records, kills=sampler.kills, late=sampler.late_counts)]
    for sink in sinks:
        _write(sampler, sink, records, tick)


def _tee(sinks: Sequence[Sink]) -> Optional[Tuple[Sink, Sink]]:
    """(the output, the store) when the run's sinks are one streaming output and a sink
    that tees (the store), else None."""
    if len(sinks) != 2:
        return None
    for output, store in (sinks, sinks[::-1]):
        if store.tees and output.streams and not output.tees:
            return output, store
    return None


def _write(sampler: Sampler, sink: Sink, records: Iterable[JsonObject], tick: TickInfo) -> None:
    try:
        sink.write(records, tick)
    except SinkError as exc:
        sampler.warner.warn("sink", str(exc))
