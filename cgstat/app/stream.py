"""`cgstat stream` (a batch every interval, into a sink, with events) and `cgstat serve`
(the same ticks into the Prometheus endpoint only)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

from cgstat import sdnotify
from cgstat.outputs.jsonl import JsonLinesSink, ReaderGone, SinkError
from cgstat.pipeline.schedule import Schedule, watchdog_heartbeat_s

if TYPE_CHECKING:  # the exporter and events are imported by the runs that use them
    from cgstat.records import JsonObject
    from cgstat.outputs.serve import Exporter
    from cgstat.pipeline.events import EventDetector
    from cgstat.pipeline.sampler import Sampler


def stream(sampler: Sampler, interval_s: float, count: Optional[int], fmt: str, output: Optional[str],
           output_mode: int, events_window_s: Optional[float], listen: Optional[str]) -> int:
    """`cgstat stream`: the sink for `fmt` on `output` (stdout when None), events judged
    over `events_window_s` (None: no events), /metrics beside it when `listen`."""
    from cgstat.outputs.formats import make_sink

    events = None
    if events_window_s is not None:
        from cgstat.pipeline.events import EventDetector

        events = EventDetector(window_s=events_window_s)
    sink = make_sink(fmt, output, output_mode, sampler.warner.warn)
    return run_stream(sampler, sink, interval_s, count, events, listen)


def serve(sampler: Sampler, listen: str, interval_s: float, count: Optional[int]) -> int:
    """`cgstat serve`: a stream with no sink, only the endpoint."""
    return run_stream(sampler, None, interval_s, count, None, listen)


def run_stream(sampler: Sampler, sink: Optional[JsonLinesSink], interval_s: float, count: Optional[int],
               events: Optional[EventDetector] = None, listen: Optional[str] = None) -> int:
    """Batches every interval on a drift-free schedule; the first one interval after start.

    `events`: diagnostics events raised from the ticks go into the same stream. `listen`:
    the Prometheus endpoint served beside the stream, from the same ticks. `sink` None:
    serve only (`cgstat serve`).
    """
    if sink is not None:
        sink.open()  # an output that can't be opened fails the run now, not silently later
    exporter = None
    if listen:
        from cgstat.outputs.serve import Exporter  # only when asked: HTTP costs a start-up

        exporter = Exporter(listen, sampler.warner, stale_after_s=max(60.0, 5 * interval_s))
        sampler.warner.once("serving", f"serving /metrics and /healthz on http://{exporter.address}/")
    schedule = Schedule(interval_s, sampler.warner, watchdog_heartbeat_s()).install_signals()
    # OOM kills: the kernel log from now on, v2 counters read as they change (events and
    # the exporter's kept counters)
    if events is not None or exporter is not None:
        sampler.follow_kernel_log()
        sampler.watch_memory_events()
    try:
        sampler.warm_up()  # the first batch, one interval later, has rates
        schedule.restart()
        if exporter is not None:
            exporter.publish([], None)  # /metrics answers (self-metrics) before the first tick
        sdnotify.ready()  # Type=notify: started once the first sample is in
        for _ in schedule.ticks(count):
            if schedule.take_reopen() and sink is not None:
                sink.reopen()
            _stream_tick(sampler, sink, events, exporter)
            sdnotify.watchdog()  # a tick finished: a hung read or write stops these
    except ReaderGone:
        return 0
    finally:
        sdnotify.stopping()
        if exporter is not None:
            exporter.close()
        if sink is not None:
            sink.close()
    if sink is None:
        return 0
    if sink.dropped_lines:
        sampler.warner.warn("dropped", f"{sink.dropped_lines} lines dropped while the output failed")
    return 0


def _stream_tick(sampler: Sampler, sink: Optional[JsonLinesSink], events: Optional[EventDetector],
                 exporter: Optional[Exporter]) -> None:
    """One tick of run_stream.

    Without an exporter, each record goes to the sink as it is made (through the events
    detector): a tick never holds its records all at once (~3.7 KiB each, 7 MiB at 1,000
    empty cgroups). The exporter renders a whole tick, so with one the tick is a list; its
    records die when this returns (a loop variable would keep them through the next tick).
    """
    if exporter is None and sink is not None:
        stream: Iterable[JsonObject] = sampler.records()
        if events is not None:
            # records, then the tick's events (the kernel log's kills are read after the records)
            stream = events.watch(stream, kills=lambda: sampler.kills, late=lambda: sampler.late_counts)
        try:
            sink.write(stream)
        except SinkError as exc:
            sampler.warner.warn("sink", str(exc))
        return
    began = time.monotonic()
    records = sampler.tick()
    if exporter is not None:
        # the exposition is of the shown cgroups: a kill elsewhere makes no series
        exporter.publish(records, time.monotonic() - began, [k for k in sampler.kills if k.selected],
                         sampler.late_counts)
    batch: Sequence[JsonObject] = records
    if events is not None:
        batch = [*records, *events.observe(records, kills=sampler.kills, late=sampler.late_counts)]  # a new list: the exporter keeps the first
    if sink is not None:
        try:
            sink.write(batch)
        except SinkError as exc:
            sampler.warner.warn("sink", str(exc))
