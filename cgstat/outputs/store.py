"""The store as a sink (`record`, `--store`): each tick's records, as the JSON lines
`stream` writes, kept in the flight recorder's store (cgstat/store): made into a frame as
they pass, written from a thread of its own (store_sink). A tick that can't be written is
said and lost (the store stays whole), the run goes on. Reads no host file; writes the
store through store/writer.py.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Hashable, Iterable, Iterator, Mapping, Optional, Tuple

from cgstat.outputs import values
from cgstat.pipeline.sinks import (NO_INFO, Chunker, ChunkSink, LineOf, SinkContext, SinkError, SinkKind, SinkOption,
                                   TickInfo, line_or_say, register)
from cgstat.text import dumps_record
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:
    from cgstat.contract.types import JsonObject
    from cgstat.store.writer import Frame, Recorder, Warn

# The tick's thread encodes and compresses each record's line (made once for every sink,
# TickLines) as the records pass, as before the store had a thread: a line lives no longer
# than its record (orjson's bytes pin the ~16 KiB buffer they grew in, so a tick's lines
# held until another thread took them cost 1.4 MiB of peak RSS at 100 idle cgroups), and
# the codec's and zlib's buffers stay in the one heap. The store's thread only writes each
# tick's frame and waits for fdatasync (QueuedSink): a disk stalled by I/O pressure delays no
# output and no tick. Its queue holds STORE_QUEUE_BYTES of frames (about 15 min of ticks at
# 100 busy containers, 1.5 min at 1,000); past it whole ticks are dropped, counted and said.
STORE_QUEUE_BYTES = 16 * 1024 * 1024


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


class _Frames(Chunker):
    """One tick's lines and keys into the recorder's codec as they come; the tick's frame
    at the end (writer.Frame)."""

    def __init__(self, recorder: Recorder, line_of: LineOf, warn: Optional[Warn]):
        self.recorder = recorder
        self.line_of = line_of
        self.warn = warn
        self.seen: Dict[str, int] = {}
        self.begun = False

    def add(self, record: JsonObject) -> None:
        line = line_or_say(self.line_of, record, self.warn)
        if line is None:
            return None
        if not self.begun:
            wall_s = parse_ts(record.get("ts"))
            self.recorder.begin(wall_s if wall_s is not None else time.time())
            self.begun = True
        self.recorder.add(record_key(record, self.seen), line)
        return None

    def end(self) -> Optional[Frame]:
        if not self.begun:
            return None
        self.begun = False
        return self.recorder.encode()


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

    # The chunker runs in the tick's thread, write_chunks in the store's (QueuedSink): the
    # recorder's making half in the one, its writing half in the other (store/writer.py).
    def chunker(self, quiet: bool = False) -> Chunker:
        return _Frames(self.recorder, self._line_of, None if quiet else self.warn)

    def piece_size(self, piece: Any) -> Tuple[int, int]:
        return len(piece.data), piece.lines

    def write_chunks(self, chunks: Iterator[Any]) -> None:
        """One tick's frame written (SinkError when it can't be); a tick whose records
        stopped coming made none."""
        from cgstat.store.folder import StoreError

        try:
            for made in chunks:
                self.recorder.put(made)
        except StoreError as exc:
            raise SinkError(str(exc)) from None

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
