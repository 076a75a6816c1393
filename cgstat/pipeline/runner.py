"""The tick loop of every long run (stream, serve, record): the sampler, the one Schedule,
the kernel log's place, the events and any number of sinks (pipeline/sinks.py), which the
run mode builds and hands over.

Each tick the records are made one at a time and pass every sink in turn (their `tee`s
chained; a sink that streams may end the chain), the tick's events after them; each record
is serialised at most once for all the sinks that want JSON lines (TickLines). A sink that
needs the tick whole keeps it itself (the default tee). So a tick is never held whole
unless a sink asks for it, whatever the combination of outputs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Optional, Sequence

from cgstat import sdnotify
from cgstat.gpu.beside import deadline_s as gpu_deadline_s
from cgstat.kernel.kmsg import started_usec
from cgstat.pipeline.schedule import Schedule, watchdog_heartbeat_s
from cgstat.pipeline.sinks import NO_INFO, ReaderGone, Sink, SinkError, TickEvents, TickInfo, TickLines

if TYPE_CHECKING:
    from cgstat.contract.types import JsonObject
    from cgstat.pipeline.sampler import Sampler


class Runner:
    """Ticks every `interval_s` on a drift-free schedule into `sinks`, the first one
    interval after start; `events` raised from the ticks go into the same ticks;
    `log_state`: the file keeping where the kernel log was read to (pipeline/logplace.py)."""

    def __init__(self, sampler: Sampler, sinks: Sequence[Sink], interval_s: float,
                 events: Optional[TickEvents] = None, log_state: Optional[str] = None):
        self.sampler = sampler
        self.sinks = list(sinks)
        self.interval_s = interval_s
        self.events = events
        self.log_state = log_state
        # the chain's last: a sink that streams and cannot pass the records on (it takes them as
        # an iterator); every other sink tees
        pulls = [s for s in self.sinks if s.streams and not s.tees]
        self.last: Optional[Sink] = pulls[-1] if pulls else None
        self.teeing = [s for s in self.sinks if s is not self.last]
        self._made_s = 0.0

    def run(self, count: Optional[int] = None) -> int:
        """Open every sink (one that can't be used fails the run now, CgstatError), then
        tick until stopped or `count` ticks are done; exit status 0."""
        sampler = self.sampler
        if self.log_state is not None:
            from cgstat.pipeline.logplace import LogPlace

            LogPlace(self.log_state, None).check()  # a path not ours fails the run before anything is written
        opened: List[Sink] = []
        try:
            for sink in self.sinks:
                sink.open()
                opened.append(sink)
        except BaseException:
            _close(opened)
            raise
        schedule = Schedule(self.interval_s, sampler.warner, watchdog_heartbeat_s()).install_signals()
        for sink in self.sinks:
            sink.watch_stop(lambda: schedule.stop)
        place = self._follow_kernel_log()
        sampler.track_exits()  # an exit record in the tick after a cgroup goes
        sampler.gpu_deadline(gpu_deadline_s(self.interval_s))  # a hung NVML call holds no cgroup record
        ended = False
        try:
            sampler.warm_up()  # the first batch, one interval later, has rates
            schedule.restart()
            sdnotify.ready()  # Type=notify: started once the first sample is in
            for _ in schedule.ticks(count):
                if schedule.take_reopen():
                    for sink in self.sinks:
                        sink.reopen()
                self.tick()
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
            _close(self.sinks)
        for sink in self.sinks:
            if ended and sink.dropped_lines:
                sampler.warner.warn("dropped", f"{sink.dropped_lines} lines dropped while the output failed")
        return 0

    def _follow_kernel_log(self) -> Any:
        """OOM kills: the kernel log after where the last agent of this boot stopped reading
        (`log_state`), else since this process started (a kill during start-up, which takes
        seconds on a slow host, is in the backlog); v2 counters read as they change (events
        and the exporter's kept counters). The LogPlace to save after each tick, or None."""
        sampler = self.sampler
        if self.events is None and not any(sink.uses_kills for sink in self.sinks):
            return None
        place = None
        seq = None
        if self.log_state is not None:
            from cgstat.pipeline.logplace import LogPlace

            place = LogPlace(self.log_state, sampler.host.boot_id)
            seq = place.load()
        if not sampler.follow_kernel_log(after_seq=seq, since_usec=started_usec() if seq is None else None):
            place = None
        sampler.watch_memory_events()
        return place

    def tick(self) -> None:
        """One tick through every sink."""
        sampler = self.sampler
        lines = TickLines()
        for sink in self.sinks:
            if sink.wants_lines:
                sink.share_lines(lines.line_of)
        stream: Iterable[JsonObject] = self._timed(iter(sampler.records()))
        if self.events is not None:
            # records, then the tick's events (the kernel log's kills are read after the records)
            stream = self.events.watch(stream, kills=lambda: sampler.kills, late=lambda: sampler.late_counts,
                                       same=sampler.same_record)
        for sink in self.teeing:
            stream = sink.tee(stream)
        try:
            if self.last is not None:
                self._write(self.last, stream)
            for _ in stream:  # what the last did not take (a tick it dropped): made, and passed on
                pass
        finally:
            if self.teeing:
                self._end(self.teeing)
            lines.clear()

    def _end(self, sinks: Sequence[Sink]) -> None:
        """The tick's end for the sinks that teed it, in order (the exporter first: a tick is
        served before the end of it is written elsewhere)."""
        # the sinks' kills are the shown cgroups' (the exposition makes no series of a kill
        # elsewhere); the events judge them all
        sampler = self.sampler
        info = TickInfo(self._made_s, [k for k in sampler.kills if k.selected], sampler.late_counts,
                        sampler.gpu_reads_late_total, sampler.gpu_call_errors)
        for sink in sinks:
            try:
                sink.end_tee(info)
            except SinkError as exc:
                sampler.warner.warn("sink", str(exc))

    def _timed(self, records: Iterator[JsonObject]) -> Iterator[JsonObject]:
        """`records`, the time spent making them kept (TickInfo.seconds: reading the tick,
        not what the sinks did with it)."""
        clock = time.monotonic
        spent = 0.0
        self._made_s = 0.0
        try:
            while True:
                began = clock()
                try:
                    record = next(records)
                except StopIteration:
                    spent += clock() - began
                    break
                spent += clock() - began
                yield record
        finally:
            self._made_s = spent
            close: Optional[Callable[[], None]] = getattr(records, "close", None)
            if close is not None:
                close()

    def _write(self, sink: Sink, records: Iterable[JsonObject]) -> None:
        try:
            sink.write(records, NO_INFO)
        except SinkError as exc:
            self.sampler.warner.warn("sink", str(exc))


def _close(sinks: Sequence[Sink]) -> None:
    """Close every sink, the last opened first (each writes what it holds first)."""
    for sink in reversed(sinks):
        sink.close()
