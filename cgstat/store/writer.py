"""Writing a store: ticks into the current shard, shards rotated and removed.

A new shard begins at each UTC hour, at an eighth of --max-size, when the clock goes
back (said once: the shards then overlap in time, and the later written is believed),
and at every start (a shard is never appended to by a second run, so a torn tail from a
kill stays where it is, the last thing in its shard). A block (codec.py) begins every
`block_ticks` ticks or 16 MiB of lines. Before each tick, the oldest shards go until the
store, with room for two of its largest frames, fits --max-size; shards whose next shard
began more than --retain ago go too; each removal is said on stderr. A tick is made into
its frame (`begin`, `add`, `encode`: the codec and zlib) and the frame written (`put`: the
shard's files, fdatasync) in two halves, which may run in two threads (outputs/store.py).
"""

from __future__ import annotations

import os
import time
import zlib
from typing import Callable, Hashable, List, NamedTuple, Optional, Sequence, Tuple

from cgstat.errors import os_reason
from cgstat.store.folder import MARKER, ShardName, StoreError, StoreFolder, shard_name
from cgstat.store.codec import Encoder
from cgstat.store.shard import INDEX_MAGIC, SHARD_MAGIC, frame, index_entry

Warn = Callable[[str, str], None]
BLOCK_TICKS = 60
_BLOCK_LINE_BYTES = 16 * 1024 * 1024
_LEVEL = 5  # zlib: 6 made 5 % smaller ticks for 30 % more of its CPU (bench/README.md)


class Frame(NamedTuple):
    """One tick made ready to write: its frame's bytes (shard.frame, compressed)."""

    wall_s: float
    data: bytes
    block: bool  # it begins a block (decodes without the ticks before it)
    shard: bool  # it begins a shard (a block too)
    lines: int


def stamp(wall_s: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall_s))


def stamp_seconds(stamp_text: str) -> Optional[float]:
    import calendar

    try:
        return float(calendar.timegm(time.strptime(stamp_text, "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return None


def _say_time(wall_s: Optional[float]) -> str:
    return "?" if wall_s is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(wall_s))


# A tick's frame is made in one half (begin, add, encode: the codec's and zlib's state, which
# tick every frame depends on) and written in the other (put: the shard's files, the
# removals, fdatasync). Between the two a frame may wait in a queue (outputs/store.py): the
# making half decides alone where a block and a shard begin (a shard always begins with a
# block), from the ticks' times and the frames' sizes it made. A frame that could not be
# written leaves the frames made after it without the tick they are told against: `put`
# writes none of them until the next block, which the making half begins at its next tick
# (`_restart`, set by put; a flag either thread may see late, never wrongly).
class Recorder:
    """The writer of one store folder, for one run: open(), write() each tick (or begin(),
    add() its lines, finish(); or encode() in one thread and put() in another), close()."""

    def __init__(self, path: str, retain_s: Optional[float], max_bytes: Optional[int], warn: Optional[Warn] = None,
                 block_ticks: int = BLOCK_TICKS, sync: bool = True):
        self.path = path
        self.retain_s = retain_s
        self.max_bytes = max_bytes
        self.warn = warn
        self.block_ticks = block_ticks
        self.sync = sync
        self.folder: Optional[StoreFolder] = None
        self._closed: List[Tuple[ShardName, int]] = []  # older shards (name, bytes with index), oldest first
        self._current: Optional[ShardName] = None
        self._fd = -1
        self._index_fd = -1
        self._size = 0  # the current shard's, with its index
        self._shard_size = 0
        self._other = 0  # the marker's bytes
        self._hour = -1
        self._last_wall: Optional[float] = None
        self._seq = 0
        self._encoder = Encoder()
        self._compressor = zlib.compressobj(_LEVEL)
        self._block_ticks = 0
        self._block_bytes = 0
        self._largest = 0
        self._ticks = 0
        self._tick_s: Optional[float] = None  # the tick begun and not yet finished
        self._block = False  # it starts a block
        self._shard = False  # it starts a shard
        self._made_bytes = 0  # the frames made for the current shard, with its magic: when to begin one
        self._lines = 0
        self._restart = True  # put() wrote no frame yet, or failed one: the next tick made begins a block
        self._broken = False  # put() failed a frame: the frames until the next block are not written

    # -- the run ---------------------------------------------------------------------------

    def open(self) -> None:
        self.folder = StoreFolder.open(self.path, writing=True)
        self.path = self.folder.path
        for name in self.folder.shards():
            self._closed.append((name, self.folder.size(name.name) + self.folder.size(name.index_name)))
            self._seq = max(self._seq, name.seq)
        self._other = self.folder.size(MARKER)

    def write(self, wall_s: float, lines: Sequence[Tuple[Hashable, bytes]]) -> None:
        """One tick; StoreError when it can't be written (the store stays whole, the next
        tick starts a block)."""
        self.begin(wall_s)
        for key, line in lines:
            self.add(key, line)
        self.finish()

    # -- making a tick's frame -------------------------------------------------------------

    def begin(self, wall_s: float) -> None:
        """A tick at `wall_s` begins: its lines follow (`add`), then `encode()` makes its
        frame (or `finish()` writes it)."""
        self.abandon()  # a tick begun and never finished
        shard = self._made_bytes == 0  # none begun yet, or the tick that began it was abandoned
        if self._last_wall is not None and wall_s < self._last_wall:
            if self.warn is not None:
                self.warn("store-clock", f"the clock went back from {_say_time(self._last_wall)} to "
                                         f"{_say_time(wall_s)}: the store begins a new shard (replay shows the "
                                         "later recorded of two ticks at one time)")
            shard = True
        self._last_wall = wall_s
        hour = int(wall_s // 3600)
        if hour != self._hour or (self.max_bytes and self._made_bytes >= self.max_bytes // 8):
            shard = True
        if self._restart:
            self._restart = False
            self._block_ticks = 0
        block = (shard or self._block_ticks == 0 or self._block_ticks >= self.block_ticks
                 or self._block_bytes >= _BLOCK_LINE_BYTES)
        if block:
            self._encoder.reset()
            self._compressor = zlib.compressobj(_LEVEL)
            self._block_ticks = 0
            self._block_bytes = 0
        if shard:
            self._hour = hour
            self._made_bytes = len(SHARD_MAGIC)
        self._block = block
        self._shard = shard
        self._lines = 0
        self._encoder.begin()
        self._tick_s = wall_s

    def add(self, key: Hashable, line: bytes) -> None:
        """A line of the tick begun (see Encoder.encode for `key`)."""
        self._encoder.add(key, line)
        self._lines += 1

    def abandon(self) -> None:
        """The tick begun is not to be written (its lines stopped coming): the next begins a
        block (the codec's state has this tick), and the shard this one was to begin."""
        if self._tick_s is not None:
            self._tick_s = None
            self._block_ticks = 0
            if self._shard:
                self._made_bytes = 0

    def encode(self) -> Frame:
        """The frame of the tick begun, compressed: to be written by `put`, in the order made."""
        wall_s = self._tick_s
        assert wall_s is not None, "begin() first"
        self._tick_s = None
        payload = self._encoder.finish(wall_s)
        data = frame(self._compressor.compress(payload) + self._compressor.flush(zlib.Z_SYNC_FLUSH), wall_s,
                     self._block)
        self._block_ticks += 1
        self._block_bytes += len(payload)
        self._made_bytes += len(data)
        return Frame(wall_s, data, self._block, self._shard, self._lines)

    def finish(self) -> None:
        """Write the tick begun (encode, then put)."""
        self.put(self.encode())

    # -- writing the frames -----------------------------------------------------------------

    def put(self, made: Frame) -> None:
        """Write a frame: one write(2), fdatasync'd. StoreError when it can't be written
        (the store stays whole; the frames made after it are not written, up to the block
        the next tick made begins)."""
        assert self.folder is not None, "open() first"
        if self._broken and not made.block:
            raise StoreError(f"the store {self.path}: a tick not written: it is told against a tick that "
                             "could not be")
        self._broken = False
        wall_s = made.wall_s
        try:
            if made.shard or self._current is None:
                self._close_shard()
                self._make_room(wall_s)
                self._open_shard(wall_s)
            else:
                self._make_room(wall_s)
        except StoreError:
            self._failed()
            raise
        data = made.data
        offset = self._shard_size
        try:
            _write_all(self._fd, data)
            if self.sync:
                os.fdatasync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, offset)
            except OSError:
                pass
            self._failed()
            raise StoreError(f"cannot write to the store {self.path}: {os_reason(exc)}") from None
        self._shard_size += len(data)
        self._size += len(data)
        self._largest = max(self._largest, len(data))
        if made.block:
            self._index(wall_s, offset)
        self._ticks += 1
        if self.max_bytes and self._total() > self.max_bytes:
            self._make_room(wall_s, reserve=0)

    def _failed(self) -> None:
        # the codec's state has the frame not written: the next tick made begins a block
        self._broken = True
        self._restart = True

    def close(self) -> None:
        self._close_shard()
        if self.folder is not None:
            self.folder.close()
            self.folder = None

    # -- shards ----------------------------------------------------------------------------

    def _open_shard(self, wall_s: float) -> None:
        assert self.folder is not None
        self._seq += 1
        name = shard_name(self._seq, stamp(wall_s))
        self._fd = self.folder.create(name.name)
        try:
            _write_all(self._fd, SHARD_MAGIC)
        except OSError as exc:
            os.close(self._fd)
            self._fd = -1
            self.folder.remove(name.name)
            raise StoreError(f"cannot write to the store {self.path}: {os_reason(exc)}") from None
        self._current = name
        self._shard_size = len(SHARD_MAGIC)
        self._size = self._shard_size
        try:
            self._index_fd = self.folder.create(name.index_name)
            _write_all(self._index_fd, INDEX_MAGIC)
            self._size += len(INDEX_MAGIC)
        except (OSError, StoreError) as exc:
            self._index_failed(exc)

    def _index(self, wall_s: float, offset: int) -> None:
        if self._index_fd < 0:
            return
        entry = index_entry(wall_s, offset)
        try:
            _write_all(self._index_fd, entry)
            self._size += len(entry)
        except OSError as exc:
            self._index_failed(exc)

    def _index_failed(self, exc: Exception) -> None:
        # The index only speeds up finding a time: the shard is read without it.
        if self._index_fd >= 0:
            os.close(self._index_fd)
            self._index_fd = -1
        if self.warn is not None:
            reason = os_reason(exc) if isinstance(exc, OSError) else str(exc)
            self.warn("store-index", f"the store's index can't be written ({reason}): reading finds times "
                                     "more slowly")

    def _close_shard(self) -> None:
        for fd in (self._fd, self._index_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._index_fd = -1
        if self._current is not None:
            self._closed.append((self._current, self._size))
        self._current = None
        self._size = self._shard_size = 0

    def _total(self) -> int:
        return self._other + self._size + sum(size for _, size in self._closed)

    def _make_room(self, wall_s: float, reserve: Optional[int] = None) -> None:
        """Remove the oldest shards: past --retain, and until --max-size has room for
        `reserve` more (two of the largest frames yet, or 1 MiB before the first)."""
        if self.retain_s is not None:
            while len(self._closed) > 1 or (self._closed and self._current is not None):
                following = self._closed[1][0] if len(self._closed) > 1 else self._current
                assert following is not None
                ended = stamp_seconds(following.stamp)
                if ended is None or ended >= wall_s - self.retain_s:
                    break
                self._remove_oldest(f"older than --retain {_duration(self.retain_s)}")
        if not self.max_bytes:
            return
        room = (2 * self._largest if self._largest else 1 << 20) if reserve is None else 0
        while self._closed and self._total() + room > self.max_bytes:
            self._remove_oldest(f"the store reached --max-size {_size_words(self.max_bytes)}")

    def _remove_oldest(self, why: str) -> None:
        assert self.folder is not None
        name, size = self._closed.pop(0)
        self.folder.remove(name.name)
        self.folder.remove(name.index_name)
        ended = self._closed[0][0].stamp if self._closed else (self._current.stamp if self._current else None)
        if self.warn is not None:
            began = _say_time(stamp_seconds(name.stamp))
            until = _say_time(stamp_seconds(ended)) if ended else "now"
            self.warn(f"store-removed:{name.name}", f"store {self.path}: removed its oldest shard {name.name} "
                                                    f"({began} to {until}, {size / 1e6:.1f} MB): {why}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _size_words(size: int) -> str:
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size} bytes"
