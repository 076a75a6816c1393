"""The one interface every output of a tick implements (Sink: its docstring is the
contract), what the runner (pipeline/runner.py) hands them each tick: the records, each
record's JSON line made once, what is known of the tick besides (TickInfo); and the
registry of the sink kinds a run may add (register). Reads no host file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from cgstat.errors import CgstatError
from cgstat.text import batch_lines, quote

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject

LineOf = Callable[["JsonObject"], Optional[bytes]]


class ReaderGone(Exception):
    """The output's reader went away for good (EPIPE on stdout): stop, successfully."""


class SinkError(CgstatError):
    """The output could not be opened or written this time; the tick is kept for the next try."""


class TickInfo(NamedTuple):
    """What is known about a tick besides its records (for the sinks that need it)."""

    seconds: Optional[float] = None  # how long making the tick's records took
    kills: Sequence[Any] = ()  # the kernel log's OOM kills of the shown cgroups read with it (Sampler.kills)
    late: Sequence[Any] = ()  # gone cgroups' counters read as they changed (Sampler.late_counts)
    gpu_reads_late_total: Optional[int] = None  # ticks that went on without their GPU read (gpu/beside.py)
    gpu_call_errors: Mapping[Tuple[str, str], int] = {}  # (GPU UUID, NVML call) -> failures so far


NO_INFO = TickInfo()


def line_or_say(line_of: LineOf, record: JsonObject, warn: Optional[Callable[[str, str], None]]) -> Optional[bytes]:
    """The record's JSON line; None, said through `warn`, for one that can't be serialised
    (a name nobody decoded, an integer past 64 bits: the tick goes on without it)."""
    line = line_of(record)
    if line is None and warn is not None:
        warn("unserialisable", f"{quote(str(record.get('cgroup')))}: record dropped: it cannot be written as JSON")
    return line


class TickLines:
    """The JSON line of each record of one tick, made once for every sink that asks: the
    line of the record asked for last is kept until another record is asked for (the sinks
    of the chain ask in turn as the record passes them)."""

    def __init__(self) -> None:
        self._make = batch_lines()
        self._record: Optional[JsonObject] = None
        self._line: Optional[bytes] = None

    def line_of(self, record: JsonObject) -> Optional[bytes]:
        if record is not self._record:
            self._line = self._make(record)
            self._record = record
        return self._line

    def clear(self) -> None:
        self._record = self._line = None


class TickEvents:
    """What judges a tick's records as they pass (the events detector): `watch` yields the
    records, then the tick's events. `kills` and `late` give the tick's OOM kills and gone
    cgroups' counters, read once the records are through; `same(path)`, whether a cgroup's
    record equals its last one but for ts and interval_s (Sampler.same_record)."""

    def watch(self, records: Iterable[Any], now: Optional[float] = None, kills: Any = None,
              late: Any = None, same: Optional[Callable[[str], bool]] = None) -> Iterator[Any]:
        raise NotImplementedError


class Sink:
    """An output of ticks. Python 3.7 has no typing.Protocol: the interface is this base class.

    The contract, which every implementation keeps:
    - `open()` at start: an output that can't be used fails the run now (CgstatError), not
      silently later.
    - A tick comes one of two ways. `tee(records)` passes the records on one at a time, each
      taken on the way, and `end_tee(tick)` after the last: the runner chains every sink's tee
      so that the records are made one at a time, however many sinks there are. The default
      tee keeps the tick's records and hands them to `write(records, tick)` at end_tee (a
      sink that needs the tick whole: the Prometheus exporter renders it again for a scrape).
      A sink that `streams` may instead be the chain's last: `write(records)` is then given the
      chain itself, an iterator. Either way a tick is written whole or not at all (never half
      a line): a tee whose records stopped coming (an error in the tick) writes nothing.
    - `records` is the tick's records then its events. A write that fails this time raises
      SinkError (said, and the run goes on); a reader gone for good raises ReaderGone (the
      run ends, exit 0).
    - A sink that `wants_lines` serialises records as JSON lines: `share_lines(line_of)`
      before each tick hands it the tick's `TickLines.line_of`, so that a record is
      serialised once a tick for all such sinks (take the line as the record passes).
    - `reopen()` on SIGHUP (logrotate's move-and-create), between two ticks.
    - `close()` at the end: whatever was written is out (flushed in order) before it returns;
      it never raises. `watch_stop(asked)`: how to know that a stop signal came.
    """

    #: write() may take the records as an iterator, made as they are taken (the chain's last)
    streams = False
    #: tee() passes the records on without keeping the tick (a streaming sink that can share a tick)
    tees = False
    #: takes each record's JSON line from share_lines' line_of instead of making it
    wants_lines = False
    #: wants the kernel log's OOM kills and the gone cgroups' late counters in TickInfo
    uses_kills = False
    #: lines lost for good (a backlog over its bound), said once by the run at its end
    dropped_lines = 0

    _teed: Optional[List[JsonObject]] = None

    def open(self) -> None:
        """Make sure the output can be used; CgstatError (one line) when it can't."""

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        raise NotImplementedError

    def tee(self, records: Iterable[JsonObject]) -> Iterator[JsonObject]:
        """`records` passed on, each taken on the way; this default keeps them for end_tee."""
        self._teed = None
        kept: List[JsonObject] = []
        for record in records:
            kept.append(record)
            yield record
        self._teed = kept

    def end_tee(self, tick: TickInfo = NO_INFO) -> None:
        """The tick taken by tee() is written (SinkError when it can't be); one whose
        records stopped coming is not."""
        kept, self._teed = self._teed, None
        if kept is not None:
            self.write(kept, tick)

    def share_lines(self, line_of: LineOf) -> None:
        """For a sink that `wants_lines`: the tick's records' lines come from `line_of`."""

    def reopen(self) -> None:
        """After SIGHUP: start again on the same path (a file logrotate moved away)."""

    def watch_stop(self, asked: Callable[[], bool]) -> None:
        """How to know that a stop signal came (SIGTERM, Ctrl-C): close() then waits for no
        peer that takes nothing (a stuck reader, a receiver that is down)."""

    def close(self) -> None:
        """Everything written is out; release what the sink holds. Never raises."""


class Chunker:
    """One tick serialised into pieces as its records come: `add(record)` returns a piece
    when one is complete, `end()` the last (None: nothing more)."""

    def add(self, record: JsonObject) -> Optional[Any]:
        raise NotImplementedError

    def end(self) -> Optional[Any]:
        return None


# A sink that can block (a pipe, a disk, a network peer) is written from a thread of its
# own behind a bounded queue (outputs/queued.py) so that it never delays the tick or the
# other sinks; ChunkSink is the two halves such a sink is made of.
class ChunkSink(Sink):
    """A sink whose write comes in two halves: serialising the tick into pieces (`chunks`,
    in the tick's thread: the records may be made as they are taken) and writing those
    pieces, in order (`write_chunks`, in any one thread). QueuedSink (outputs/queued.py)
    runs the second half on its own thread. A piece is bytes of whole lines unless
    `piece_size` says how to measure another kind."""

    label = "the output"  # which output a message is about (stdout, the file's path)
    slow = "the reader did not keep up"  # what a queue that fills says of it
    warn: Optional[Callable[[str, str], None]] = None  # the diagnostics channel's warn(key, message)

    def may_block(self) -> bool:
        """Whether a write may wait on someone else (a reader, a disk, a network peer):
        such a sink is written from its own thread in a stream (QueuedSink)."""
        return False

    def chunker(self, quiet: bool = False) -> Chunker:
        """The serialiser of one tick: `quiet`, no warning for a record dropped (a tick
        serialised again)."""
        raise NotImplementedError

    def chunks(self, records: Iterable[JsonObject], quiet: bool = False) -> Iterator[Any]:
        """The tick's pieces, made as the records are taken."""
        chunker = self.chunker(quiet)
        for record in records:
            piece = chunker.add(record)
            if piece is not None:
                yield piece
        piece = chunker.end()
        if piece is not None:
            yield piece

    def write_chunks(self, chunks: Iterator[Any]) -> None:
        raise NotImplementedError

    def piece_size(self, piece: Any) -> Tuple[int, int]:
        """(bytes, lines) of a piece chunks() made: what a queue of them is bounded by."""
        return len(piece), piece.count(b"\n")


# -- the registry of sink kinds -------------------------------------------------------------

class SinkOption(NamedTuple):
    """A command-line option of a sink kind."""

    flag: str  # "--otlp-endpoint"
    help: str
    parse: Optional[Callable[[str], Any]] = None  # text -> value; ValueError: a usage error (exit 2)
    default: Optional[str] = None  # as it would be given (parsed as a given value is); None: not given
    envvar: Optional[str] = None
    metavar: str = "VALUE"
    multiple: bool = False  # repeatable: the value is a tuple of the values given

    @property
    def key(self) -> str:
        """The option's name in the values a kind's `make` is given ("otlp_endpoint")."""
        return self.flag.lstrip("-").replace("-", "_")


class SinkContext(NamedTuple):
    """What a sink kind's `make` is given besides its own options' values."""

    warn: Callable[[str, str], None]  # the diagnostics channel's warn(key, message), one line on stderr
    budget: Any = None  # the metric groups and --max-series of /metrics and the push (SeriesBudget), or None
    label_allow: Optional[str] = None  # --label-allow: the container labels made series labels (None: none)


# Sink kinds a run may add beside its own output (`--store`, `--otlp-endpoint`, a plug-in's)
# are registered here (`register(SinkKind(...))`): a name, the command-line options that
# configure it and the function that makes it; the command line offers every registered
# kind's options on `stream` and `serve` (app/sinks.py loads the built-in kinds and the
# plug-ins; docs/sinks.md).
class SinkKind(NamedTuple):
    """A kind of sink a run may add: made when its first option is given."""

    name: str
    options: Tuple[SinkOption, ...]
    make: Callable[[Mapping[str, Any], SinkContext], Sink]

    def wanted(self, values: Mapping[str, Any]) -> bool:
        value = values.get(self.options[0].key)
        return value is not None and value != ()


_KINDS: Dict[str, SinkKind] = {}


def register(kind: SinkKind) -> SinkKind:
    """Add a sink kind (again under the same name: replaced). Its options' flags must be
    new: ValueError when another kind, or the command line, has one of them."""
    taken = {o.flag for k in _KINDS.values() if k.name != kind.name for o in k.options}
    clash = [o.flag for o in kind.options if o.flag in taken]
    if clash or not kind.options:
        raise ValueError(f"sink kind {kind.name!r}: " + (f"{', '.join(clash)} taken by another kind" if clash
                                                         else "no option turns it on"))
    _KINDS[kind.name] = kind
    return kind


def registered() -> List[SinkKind]:
    """The kinds registered, in the order they were."""
    return list(_KINDS.values())
