"""The ways cgstat runs: stream (a batch every interval), serve (the Prometheus endpoint),
once (one batch, for cron and scripts) and pid (PID -> cgroup and container). Each drives
a Sampler, the one Schedule, the events detector and its outputs; none holds logic of its
own beyond that order of events.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence

from cgstat import sdnotify
from cgstat.outputs.jsonl import JsonLinesSink, ReaderGone, SinkError, StdoutSink
from cgstat.pipeline.schedule import Schedule, watchdog_heartbeat_s
from cgstat.records import JsonObject

if TYPE_CHECKING:  # the state file and events are imported by the runs that use them
    from cgstat.outputs.serve import Exporter
    from cgstat.pipeline.events import EventDetector
    from cgstat.pipeline.sampler import Sampler


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
        from cgstat.outputs.serve import Exporter  # only when asked: HTTP costs a cron run start-up

        exporter = Exporter(listen, sampler.warner, stale_after_s=max(60.0, 5 * interval_s))
    schedule = Schedule(interval_s, sampler.warner, watchdog_heartbeat_s()).install_signals()
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
            stream = events.watch(stream, kills=lambda: sampler.kills)
        try:
            sink.write(stream)
        except SinkError as exc:
            sampler.warner.warn("sink", str(exc))
        return
    began = time.monotonic()
    records = sampler.tick()
    if exporter is not None:
        exporter.publish(records, time.monotonic() - began, sampler.kills)
    batch: Sequence[JsonObject] = records
    if events is not None:
        batch = [*records, *events.observe(records, kills=sampler.kills)]  # a new list: the exporter keeps the first
    if sink is not None:
        try:
            sink.write(batch)
        except SinkError as exc:
            sampler.warner.warn("sink", str(exc))


def run_once(sampler: Sampler, sink: JsonLinesSink, state_path: Optional[str], window_s: float,
             events: bool = True) -> int:
    """One batch: rates against the saved state, or over a window of two samples.

    SIGTERM/SIGINT during the window end the run quietly (nothing written); during the
    write they let the batch finish, so a killed cron run never leaves half a line.
    """
    schedule = Schedule(window_s or 1.0, sampler.warner).install_signals()
    try:
        sink.open()
        if state_path:
            from cgstat.pipeline import state as statefile
            from cgstat.pipeline.events import judge_runs, state_extras

            # Checked, locked and ready to be replaced before anything is printed.
            with statefile.StateFile(state_path) as state:
                previous, why = state.load(sampler.host.boot_id, sampler.clock.monotonic())
                if why:
                    sampler.warner.warn("state", why)
                # The kernel log since the last run of this boot (a first run starts at its
                # end; another boot's state: from this boot's first record).
                if events:
                    seq = state.kernel_log_seq
                    sampler.follow_kernel_log(seq if seq is not None else (-1 if state.other_boot else None), numbered=True)
                records, current = sampler.render(sampler.collect(), previous)
                batch: Sequence[JsonObject] = records
                if events:
                    # what two runs can judge (an OOM kill between them), from what the
                    # previous run kept and the kernel log
                    batch = [*records, *judge_runs(state.extras if not why else {}, records, kills=sampler.kills)]
                sink.write(batch)
                state.save(sampler.host.boot_id, sampler.fs.root, sampler.clock.monotonic(), current,
                           state_extras(records), sampler.kernel_log_seq)
        else:
            if window_s > 0:
                sampler.warm_up()
                schedule.sleep_until(time.monotonic() + window_s)
                if schedule.stop:
                    return 0
            sink.write(sampler.records())  # each record to the output as it is made
    except ReaderGone:
        return 0
    finally:
        sink.close()
    return 0


def run_pid(sampler: Sampler, pids: List[int]) -> int:
    """One JSON object per PID on stdout."""
    try:
        StdoutSink(sampler.warner.warn).write([sampler.namer.describe_pid(pid) for pid in pids])
    except ReaderGone:
        return 0
    return 0
