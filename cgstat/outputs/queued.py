"""A sink that can block (stdout into a pipe, the store's fdatasync on a stalled disk, a
slow plug-in) written from its own thread, so a slow reader or disk never stalls the tick,
the other sinks, nor with them the systemd watchdog: the tick's thread queues the tick's
pieces, the sink's thread writes them in order (QueuedSink). Reads no host file.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, Iterable, Iterator, Optional, Tuple

from cgstat.outputs.threaded import ThreadedSink
from cgstat.pipeline.sinks import NO_INFO, ChunkSink, ReaderGone, SinkError, TickInfo

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject

# A reader may pause this long before ticks are dropped: at 100 cgroups a tick is about
# 0.2 MB (about 40 s of ticks), at 1,000 about 2 MB. A tick already begun may go past it.
QUEUE_MAX_BYTES = 8 * 1024 * 1024
CLOSE_STALL_S = 5.0
_CLOSE_POLL_S = 0.25  # how often close() looks whether the writer moved or a stop came


class _Mark:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


_END = _Mark("end of tick")
_ABORT = _Mark("tick abandoned")  # the records stopped coming (an exception in the tick's thread)
_REOPEN = _Mark("reopen")
_CLOSE = _Mark("close")
_Item = Any  # a piece of a tick (ChunkSink.chunks), or a _Mark


class _Aborted(Exception):
    pass


class QueuedSink(ThreadedSink):
    """`inner` written from a thread of its own, through a queue of at most `max_bytes`.

    The tick's thread serialises the tick (ChunkSink.chunker: the records may be made as they
    are taken, passed on to the run's other sinks as they go: `tee`) and puts its pieces in a
    queue; the sink's thread takes them and writes them in order (ChunkSink.write_chunks),
    with the inner sink's own rules (whole lines, a backlog on failure). Nothing here waits
    for the writer: the queue is bounded by its bytes, and a tick that begins while the queue
    is over the bound is dropped whole (its records are still made: rates, events and every
    other sink go on). So what goes out is whole ticks, in order, with gaps; a tick once begun
    is never cut. The drops are said on stderr once per episode (from the first tick dropped
    to the next one written), when it ends, with the count (episodes closer together than the
    diagnostics channel repeats a line are counted, not said); the episode still open at close
    is always said, with the run's total. A writer that falls more than a tick behind is said
    once per episode too: what it has queued is written as it catches up.
    """

    streams = True
    tees = True

    def __init__(self, inner: ChunkSink, warn: Optional[Callable[[str, str], None]] = None,
                 max_bytes: int = QUEUE_MAX_BYTES, close_stall_s: float = CLOSE_STALL_S):
        super().__init__()
        self.inner = inner
        self.warn = warn
        self.max_bytes = max_bytes
        self.close_stall_s = close_stall_s
        self.uses_kills = inner.uses_kills
        self.wants_lines = inner.wants_lines
        self._cond = threading.Condition()
        self._queue: Deque[_Item] = collections.deque()
        self._queued_bytes = 0
        self._taken = 0  # items the writer took: progress, for close()
        self._gone = False  # the writer met ReaderGone
        self.waiting = threading.Event()  # close() is waiting on a reader that takes nothing
        self._ended: Optional[Tuple[Any, ...]] = None  # what tee() left for end_tee()
        # the ticks queued and not yet written (their ends' times), and whether that was said
        self._behind: Deque[float] = collections.deque()
        self._lag_said = False
        # drops: the episode in progress, and all of them
        self._episode_ticks = 0
        self._episode_lines = 0
        self._episode_began = 0.0
        self.ticks_dropped = 0
        self.lines_dropped = 0
        self.ticks_written = 0  # ticks handed to the writer (not dropped)

    # -- the tick's thread ---------------------------------------------------------------

    def open(self) -> None:
        self.inner.open()
        self._start()

    def share_lines(self, line_of: Callable[[JsonObject], Optional[bytes]]) -> None:
        self.inner.share_lines(line_of)  # inner's chunker runs in the tick's thread: the shared lines are its

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        """Queue the tick, or drop it whole when the queue is full; never waits."""
        for _ in self.tee(records):
            pass
        self.end_tee(tick)

    def tee(self, records: Iterable[JsonObject]) -> Iterator[JsonObject]:
        """`records` passed on, each serialised on the way; its pieces queued, the last at end_tee."""
        self._ended = None
        self._say()
        if self._gone:
            raise ReaderGone()
        if self._thread is None:
            self.open()
        with self._cond:
            full = self._queued_bytes >= self.max_bytes
        if full:
            lines = 0
            for record in records:  # made all the same: the tick goes on everywhere else
                lines += 1
                yield record
            self._ended = ("dropped", lines)
            return
        chunker = self.inner.chunker()
        held = None  # the newest piece: queued when a newer one comes, or at the tick's end
        put = False
        try:
            for record in records:
                piece = chunker.add(record)
                if piece is not None:
                    if held is not None:
                        self._put(held)
                        put = True
                    held = piece
                yield record
            self._ended = ("written", held, chunker.end())
        except BaseException:
            if put:
                self._put(_ABORT)
            raise

    # The last piece of a tick is queued when the tick ends (`end_tee`): the sinks that take a
    # tick whole (the exporter) have it before the end of the tick goes out here.
    def end_tee(self, tick: TickInfo = NO_INFO) -> None:
        ended, self._ended = self._ended, None
        if ended is None:  # the records stopped coming: nothing (more) of this tick
            return
        if ended[0] == "dropped":
            self._drop(ended[1])
            return
        self._end_episode()
        self.ticks_written += 1
        for piece in ended[1:]:
            if piece is not None:
                self._put(piece)
        self._put(_END)
        self._say_lag()

    def _say_lag(self) -> None:
        with self._cond:
            behind = len(self._behind)
            oldest = self._behind[0] if self._behind else 0.0
        if behind <= 1:
            self._lag_said = False
        elif not self._lag_said:
            self._lag_said = True
            self._warn("lag", f"{self.inner.label} is behind: {behind} ticks queued, the oldest "
                       f"{time.monotonic() - oldest:.1f} s ago; they are written as it catches up (a queue "
                       f"over {self.max_bytes >> 20} MiB drops ticks whole)")

    # SIGHUP: `reopen()` is queued, so it happens between two ticks, after those before it.
    def reopen(self) -> None:
        self._put(_REOPEN)

    # close(): everything queued is written, in order, before it returns (the last lines of a
    # --count run or a Ctrl-C are not lost). At the end of a --count run the reader is waited
    # for as long as it takes (`| less`, read a screen at a time, gets every line, as with a
    # blocking write). After a stop signal (watch_stop: SIGTERM, Ctrl-C) a reader that takes
    # nothing for `close_stall_s` is not waited for longer: what was still queued is counted
    # on stderr and the run ends; the line the writer was in may then be cut, as a SIGKILL
    # of a write blocked on that reader would cut it.
    def close(self) -> None:
        """Write what is queued (see the comment above), then close the inner sink."""
        thread = self._take_thread()
        if thread is not None:
            self._put(_CLOSE)
            seen, moved = self._taken, time.monotonic()
            while True:
                thread.join(_CLOSE_POLL_S)
                if not thread.is_alive():
                    break
                now = time.monotonic()
                if self._taken != seen:
                    seen, moved = self._taken, now
                    continue
                self.waiting.set()
                if self._stop_asked() and now - moved >= self.close_stall_s:
                    self._abandon()  # stopped, and the reader took nothing for close_stall_s
                    return  # the writer still holds the inner sink: not closed under it
        self._say()
        self._end_episode(at_close=True)
        self.dropped_lines = self.inner.dropped_lines
        self.inner.close()

    def _drop(self, lines: int) -> None:
        if not self._episode_ticks:
            self._episode_began = time.monotonic()
        self._episode_ticks += 1
        self._episode_lines += lines
        self.ticks_dropped += 1
        self.lines_dropped += lines

    def _end_episode(self, at_close: bool = False) -> None:
        if not self._episode_ticks:
            return
        # The last line of a run carries its total: under a key of its own, an episode that
        # ends at close is never held back as a repeat of one said a moment before.
        key = "dropped at close" if at_close else "dropped"
        took = time.monotonic() - self._episode_began
        total = f"; {self.ticks_dropped} ticks in all" if self.ticks_dropped > self._episode_ticks else ""
        self._warn(key, f"{self.inner.label}: {self.inner.slow}: {self._episode_ticks} ticks "
                   f"({self._episode_lines} lines) dropped whole over {took:.0f} s, the lines written are "
                   f"complete{total}")
        self._episode_ticks = self._episode_lines = 0

    def _abandon(self) -> None:
        with self._cond:
            lines = sum(self.inner.piece_size(item)[1] for item in self._queue if not isinstance(item, _Mark))
            self._queue.clear()
            self._queue.append(_CLOSE)  # should the reader wake, the writer ends after the piece it is in
            self._queued_bytes = 0
            self._behind.clear()
        self._end_episode(at_close=True)
        self._warn("dropped", f"{self.inner.label}: the reader took nothing for {self.close_stall_s:g} s: "
                   f"{lines} lines not written at the end")

    def _put(self, item: _Item) -> None:
        with self._cond:
            if self._gone and item is not _CLOSE:
                return  # nobody reads any more
            self._queue.append(item)
            if item is _END:
                self._behind.append(time.monotonic())
            elif not isinstance(item, _Mark):
                self._queued_bytes += self.inner.piece_size(item)[0]
            self._cond.notify()

    # -- the writer's thread -------------------------------------------------------------

    def _take(self) -> _Item:
        with self._cond:
            while not self._queue:
                self._cond.wait()
            item = self._queue.popleft()
            if item is _END:
                self._behind.popleft()
            elif not isinstance(item, _Mark):
                self._queued_bytes -= self.inner.piece_size(item)[0]
            self._taken += 1
            return item

    def _untake(self, item: _Item) -> None:
        with self._cond:
            self._queue.appendleft(item)

    def _run(self) -> None:
        while True:
            item = self._take()
            if item is _CLOSE:
                return
            if item is _REOPEN:
                self._guarded(self.inner.reopen)
            elif not isinstance(item, _Mark):
                rest = _Tick(self, item)
                self._guarded(lambda: self.inner.write_chunks(iter(rest)))
                rest.skip()

    # A reader gone (EPIPE): the writer stops; the next write (or close) ends the run with
    # exit 0 (ReaderGone), as without a thread.
    # What the writer's thread has to say (a write that failed) is said by the tick's thread
    # at its next write: the diagnostics channel is used from one thread only.
    def _guarded(self, job: Callable[[], None]) -> None:
        try:
            job()
        except ReaderGone:
            with self._cond:
                self._gone = True
                self._queue = collections.deque(x for x in self._queue if x is _CLOSE)
                self._queued_bytes = 0
                self._behind.clear()
        except _Aborted:
            pass
        except SinkError as exc:
            self._tell("sink", str(exc))
        except Exception as exc:  # never a writer dead in silence: said, and the next tick is tried
            self._tell("sink", f"{self.inner.label}: {exc.__class__.__name__}: {exc}")


class _Tick:
    """One tick's pieces as the writer takes them: the first, then the queue's up to the
    tick's end."""

    def __init__(self, sink: QueuedSink, first: Any):
        self.sink = sink
        self.first: Any = first
        self.done = False

    def __iter__(self) -> Iterator[Any]:
        if self.first is not None:
            first, self.first = self.first, None
            yield first
        while not self.done:
            item = self.sink._take()
            if item is _END:
                self.done = True
            elif item is _ABORT:
                self.done = True
                raise _Aborted()
            elif not isinstance(item, _Mark):
                yield item
            else:  # close (after a reader gone: the tick's end was not queued); taken next
                self.sink._untake(item)
                self.done = True

    def skip(self) -> None:
        """Take what is left of the tick (a writer that stopped early: the reader gone)."""
        try:
            for _ in self:
                pass
        except _Aborted:
            pass
