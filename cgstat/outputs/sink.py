"""The one interface every output of a tick implements: open, write a tick, reopen, close.

A run mode (app/stream.py, app/once.py) holds a list of `Sink`s and hands each tick to all
of them; it knows no concrete output. What implements it: the JSON-lines, table and CSV
sinks (jsonl.py, table.py), the Prometheus exporter (cgstat/outputs/prometheus/exporter.py), the HTML report
(report/sink.py), and a sink that can block wrapped in a `QueuedSink` (queued.py: its own
thread, a bounded queue, drops said on stderr). `formats.make_sink` makes the one `--format`
names, from a registry.

The contract, which every implementation keeps:
- `open()` at start: an output that can't be used fails the run now (CgstatError), not
  silently later.
- `write(records, tick)`: one tick, whole or not at all (never half a line, nothing torn).
  `records` is the tick's records then its events. It is an iterator, each record made as
  it is taken, only for a sink that says `streams` and is the run's only sink; otherwise a
  sequence the sink may keep (the exporter renders it again for an OpenMetrics scrape). A
  write that fails this time raises SinkError (said, and the run goes on); a reader gone
  for good raises ReaderGone (the run ends, exit 0).
- `reopen()` on SIGHUP (logrotate's move-and-create), between two ticks.
- `close()` at the end: whatever was written is out (flushed in order) before it returns;
  it never raises.
- A sink that `tees` (the store) may instead take a tick as it passes to the run's one
  other streaming sink: `tee(records)` is what that sink is given, `end_tee()` after it;
  `share_lines` hands the other sink the lines the tee made, so a record is serialised
  once.

Python 3.7 has no typing.Protocol: the interface is this base class, whose methods other
than write do nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence

from cgstat.errors import CgstatError

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject


class ReaderGone(Exception):
    """The output's reader went away for good (EPIPE on stdout): stop, successfully."""


class SinkError(CgstatError):
    """The output could not be opened or written this time; the tick is kept for the next try."""


class TickInfo(NamedTuple):
    """What is known about a tick besides its records (for the sinks that need it)."""

    seconds: Optional[float] = None  # how long reading the tick took; None when it was streamed
    kills: Sequence[Any] = ()  # the kernel log's OOM kills of the shown cgroups read with it (Sampler.kills)
    late: Sequence[Any] = ()  # gone cgroups' counters read as they changed (Sampler.late_counts)
    gpu_reads_late_total: Optional[int] = None  # ticks that went on without their GPU read (gpu/beside.py)


NO_INFO = TickInfo()


class Sink:
    """An output of ticks (see the module docstring for the contract)."""

    #: write() takes the records as an iterator, made as they are taken (no tick whole in memory)
    streams = False
    #: wants the kernel log's OOM kills and the gone cgroups' late counters in TickInfo
    uses_kills = False
    #: lines lost for good (a backlog over its bound), said once by the run at its end
    dropped_lines = 0
    #: takes a tick as it passes to another streaming output (tee, end_tee: the store)
    tees = False

    def open(self) -> None:
        """Make sure the output can be used; CgstatError (one line) when it can't."""

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        raise NotImplementedError

    def reopen(self) -> None:
        """After SIGHUP: start again on the same path (a file logrotate moved away)."""

    def share_lines(self, line_of: Callable[[JsonObject], Optional[bytes]]) -> None:
        """A sink that serialises records as JSON lines takes each record's line from
        `line_of` (a tee that made it already: the store's) instead of making it again."""

    def tee(self, records: Iterable[JsonObject]) -> Iterator[JsonObject]:
        """For a sink that `tees`: `records` passed on, each taken on the way."""
        raise NotImplementedError

    def line_of(self, record: JsonObject) -> Optional[bytes]:
        """For a sink that `tees`: the JSON line of the record it passed on last (what
        share_lines hands the other sink)."""
        raise NotImplementedError

    def end_tee(self) -> None:
        """For a sink that `tees`: the tick taken by tee() is written (SinkError when it can't be)."""

    def watch_stop(self, asked: Callable[[], bool]) -> None:
        """How to know that a stop signal came (SIGTERM, Ctrl-C): close() then waits for no
        peer that takes nothing (a stuck reader, a receiver that is down)."""

    def close(self) -> None:
        """Everything written is out; release what the sink holds. Never raises."""


class ChunkSink(Sink):
    """A sink whose write comes in two halves: serialising the tick into pieces of whole
    lines (`chunks`, in the tick's thread: the records may be made as they are taken) and
    writing those pieces, in order (`write_chunks`, in any one thread). QueuedSink runs the
    second half on its own thread. JsonLinesSink and the table/CSV sinks are ChunkSinks."""

    label = "the output"  # which output a message is about (stdout, the file's path)
    warn: Optional[Callable[[str, str], None]] = None  # the diagnostics channel's warn(key, message)

    def may_block(self) -> bool:
        """Whether a write may wait on someone else (a reader, a network peer): such a sink
        is written from its own thread in a stream (QueuedSink)."""
        return False

    def chunks(self, records: Iterable[JsonObject], quiet: bool = False) -> Iterator[bytes]:
        raise NotImplementedError

    def write_chunks(self, chunks: Iterator[bytes]) -> None:
        raise NotImplementedError
