"""The store as a sink (`record`, `--store`): each tick's records, as the JSON lines
`stream` writes, kept in the flight recorder's store (cgstat/store), from a thread of its
own (store_sink). A tick that can't be written is said and lost (the store stays whole),
the run goes on. Reads no host file; writes the store through store/writer.py.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Hashable, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple

from cgstat.outputs import values
from cgstat.pipeline.sinks import (NO_INFO, Chunker, ChunkSink, LineOf, SinkContext, SinkError, SinkKind, SinkOption,
                                   TickInfo, line_or_say, register)
from cgstat.text import dumps_record
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:
    from cgstat.contract.types import JsonObject
    from cgstat.store.writer import Warn

# The tick's thread takes each record's line (made once for every sink, TickLines) and its
# key as the records pass; the store's thread compresses and writes the tick and waits for
# fdatasync (QueuedSink): a disk stalled by I/O pressure delays no output and no tick. Its
# queue holds STORE_QUEUE_BYTES of lines (about 8 s of ticks at 1,000 cgroups, minutes at
# 100): a stall shorter loses nothing; past it whole ticks are dropped, counted and said.
STORE_QUEUE_BYTES = 16 * 1024 * 1024
_PIECE_BYTES = 64 * 1024


# A record is matched from tick to tick by its type and cgroup (GPU records by their place
# among the tick's GPU records); events are kept whole.
def record_key(record: JsonObject, seen: Dict[str, int]) -> Hashable:
    kind = record.get("type")
    if kind == "event":
        return None
    cgroup = record.get("cgroup")
    if isinstance(cgroup, str):
        return (kind, cgroup)
    n = seen.get(str(kind), 0)
    seen[str(kind)] = n + 1
    return (kind, n)


class _Piece(NamedTuple):
    wall_s: float  # the tick's time (its first record's ts)
    lines: List[Tuple[Hashable, bytes]]  # (key, line)
    size: int


class _Lines(Chunker):
    """One tick's lines and keys, in pieces of about _PIECE_BYTES."""

    def __init__(self, line_of: LineOf, warn: Optional[Warn]):
        self.line_of = line_of
        self.warn = warn
        self.seen: Dict[str, int] = {}
        self.wall_s: Optional[float] = None
        self.lines: List[Tuple[Hashable, bytes]] = []
        self.size = 0

    def add(self, record: JsonObject) -> Optional[_Piece]:
        line = line_or_say(self.line_of, record, self.warn)
        if line is None:
            return None
        if self.wall_s is None:
            wall_s = parse_ts(record.get("ts"))
            self.wall_s = wall_s if wall_s is not None else time.time()
        self.lines.append((record_key(record, self.seen), line))
        self.size += len(line)
        return self.end() if self.size >= _PIECE_BYTES else None

    def end(self) -> Optional[_Piece]:
        if not self.lines or self.wall_s is None:
            return None
        piece = _Piece(self.wall_s, self.lines, self.size)
        self.lines = []
        self.size = 0
        return piece


class StoreSink(ChunkSink):
    """Every tick into the store at `path` (writer.Recorder: --retain, --max-size)."""

    streams = True  # a tick's records are taken one at a time; only the lines are kept
    wants_lines = True
    slow = "the disk did not keep up"

    def __init__(self, path: str, retain_s: Optional[float], max_bytes: Optional[int],
                 warn: Optional[Warn] = None, sync: bool = True):
        from cgstat.store.writer import Recorder

        self.recorder = Recorder(path, retain_s, max_bytes, warn, sync=sync)
        self.warn = warn
        self.label = f"the store {path}"
        self._line_of: LineOf = dumps_record

    def open(self) -> None:
        from cgstat.store.folder import StoreError

        try:
            self.recorder.open()
        except StoreError as exc:
            raise SinkError(str(exc)) from None

    def may_block(self) -> bool:
        return self.recorder.sync  # fdatasync waits for the disk

    def share_lines(self, line_of: LineOf) -> None:
        self._line_of = line_of

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        self.write_chunks(self.chunks(records))

    def chunker(self, quiet: bool = False) -> Chunker:
        return _Lines(self._line_of, None if quiet else self.warn)

    def piece_size(self, piece: Any) -> Tuple[int, int]:
        return piece.size, len(piece.lines)

    def write_chunks(self, chunks: Iterator[Any]) -> None:
        """One tick's pieces, written as one frame (SinkError when it can't be); a tick
        whose pieces stopped coming is not written."""
        from cgstat.store.folder import StoreError

        recorder = self.recorder
        begun = False
        try:
            for piece in chunks:
                if not begun:
                    recorder.begin(piece.wall_s)
                    begun = True
                for key, line in piece.lines:
                    recorder.add(key, line)
            if begun:
                recorder.finish()
        except StoreError as exc:
            recorder.abandon()
            raise SinkError(str(exc)) from None
        except BaseException:
            recorder.abandon()
            raise

    def close(self) -> None:
        try:
            self.recorder.close()
        except OSError:
            pass


def store_sink(path: str, retain_s: Optional[float], max_bytes: Optional[int], warn: Optional[Warn]) -> Any:
    """The store's sink for a run: written from its own thread (QueuedSink)."""
    from cgstat.outputs.queued import QueuedSink

    return QueuedSink(StoreSink(path, retain_s, max_bytes, warn), warn, max_bytes=STORE_QUEUE_BYTES)


RETAIN = SinkOption("--retain", "Remove shards older than SPAN (N s, min, h or d; none: keep them).",
                    values.span_or_none, "7d", metavar="SPAN")
MAX_SIZE = SinkOption("--max-size", "Keep the store within SIZE (K, M, G: powers of 1024; none: no bound), "
                                    "removing the oldest shards first.", values.store_size, "2G", metavar="SIZE")


def _make(given: Mapping[str, Any], context: SinkContext) -> Any:
    return store_sink(given["store"], given["retain"], given["max_size"], context.warn)


register(SinkKind("store", (
    SinkOption("--store", "Also keep every tick in the store DIR (see cgstat record).", values.not_empty,
               envvar="CGSTAT_STORE", metavar="DIR"),
    RETAIN, MAX_SIZE), _make))
