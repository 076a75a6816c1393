"""Reading a store: the tick at a time, the ticks of a span, what the store holds.

A shard's first tick is in its name, so a time is found by opening the one shard that
was written last among those begun before it; in it, the index (checked against the
frames) gives the block, and the block is decoded from its first tick to the one wanted.
Damage is skipped and said once per shard: a torn tail (a write cut short: a kill or a
power cut), bad bytes (then reading goes on at the next block that reads well), a file
that is not a shard at all. Nothing is ever written here.
"""

from __future__ import annotations

import bisect
import time
import zlib
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

from cgstat.store.codec import Decoder
from cgstat.store.folder import ShardName, StoreError, StoreFolder
from cgstat.store.shard import Header, ShardFile, crc_ok, read_index
from cgstat.store.writer import stamp_seconds

Warn = Callable[[str, str], None]
# A tick answers for a time up to this long after it (or two of its intervals, if longer):
# past that, the store has no tick there.
SLACK_S = 60.0


def say_time(wall_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_s))


class Tick(NamedTuple):
    wall_s: float
    lines: List[str]  # as stream wrote them, without the newline


class _Shard:
    """One shard's blocks (time, offset) and last tick, found from its index and headers."""

    def __init__(self, name: ShardName, file: ShardFile, blocks: List[Tuple[float, int]], last_s: Optional[float]):
        self.name = name
        self.file = file
        self.blocks = blocks
        self.last_s = last_s

    @property
    def first_s(self) -> Optional[float]:
        return self.blocks[0][0] if self.blocks else None


class StoreReader:
    """A store opened for reading (StoreError when the folder can't be used)."""

    def __init__(self, path: str, warn: Optional[Warn] = None):
        self.folder = StoreFolder.open(path, writing=False)
        self.path = self.folder.path
        self.warn = warn
        self.names = self.folder.shards()
        self._open: Dict[int, Optional[_Shard]] = {}
        self._said: Set[Tuple[str, str]] = set()

    def close(self) -> None:
        for shard in self._open.values():
            if shard is not None:
                shard.file.close()
        self._open.clear()
        self.folder.close()

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what it holds ---------------------------------------------------------------------

    def span(self) -> Optional[Tuple[float, float]]:
        """The first and last tick's times, None when the store holds none."""
        firsts = [s for s in map(self._shard, self.names) if s is not None and s.first_s is not None]
        if not firsts:
            return None
        return min(s.blocks[0][0] for s in firsts), max(s.last_s or s.blocks[0][0] for s in firsts)

    def holds(self) -> str:
        span = self.span()
        if span is None:
            return f"the store {self.path} holds no ticks"
        return f"the store {self.path} holds {say_time(span[0])} to {say_time(span[1])}"

    # -- finding ---------------------------------------------------------------------------

    def at(self, wall_s: float) -> Tick:
        """The last tick at or before `wall_s` (the later written where the clock went
        back); StoreError saying what the store holds when there is none near it."""
        for name in sorted(self.names, key=lambda n: n.seq, reverse=True):
            began = stamp_seconds(name.stamp)
            if began is None or began > wall_s + 1:
                continue
            shard = self._shard(name)
            if shard is None or not shard.blocks or shard.blocks[0][0] > wall_s:
                continue
            found = self._tick_in(shard, wall_s)
            if found is not None:
                return found
            break
        raise StoreError(f"no tick at {say_time(wall_s)}: {self.holds()}")

    def _tick_in(self, shard: _Shard, wall_s: float) -> Optional[Tick]:
        times = [t for t, _ in shard.blocks]
        i = max(0, bisect.bisect_right(times, wall_s) - 1)
        # the frame wanted, from the headers alone; then only its lines are made
        target: Optional[Header] = None
        before: Optional[float] = None
        for h, _ in shard.file.headers(shard.blocks[i][1]):
            if h is None:
                continue
            if h.wall_s > wall_s:
                break
            before = target.wall_s if target is not None else before
            target = h
        if target is None:
            return None
        step = target.wall_s - before if before is not None else 0.0
        if wall_s - target.wall_s > max(SLACK_S, 2 * step):
            return None
        found = target.offset
        for tick in self._ticks(shard, shard.blocks[i][1], want=lambda h: h.offset == found, stop_after=wall_s):
            return tick
        return None

    def ticks(self, since: float, until: float) -> Iterator[Tick]:
        """Every tick from `since` to `until`, in the order written."""
        for name in self.names:
            shard = self._shard(name)
            if shard is None or not shard.blocks or shard.last_s is None:
                continue
            if shard.last_s < since or shard.blocks[0][0] > until:
                continue
            times = [t for t, _ in shard.blocks]
            i = max(0, bisect.bisect_right(times, since) - 1)
            yield from self._ticks(shard, shard.blocks[i][1], want=lambda h: since <= h.wall_s <= until,
                                   stop_after=until)

    # -- reading a shard -------------------------------------------------------------------

    def _say(self, shard: ShardName, kind: str, message: str) -> None:
        if (shard.name, kind) in self._said:
            return
        self._said.add((shard.name, kind))
        if self.warn is not None:
            self.warn(f"store-{kind}:{shard.name}", f"store {self.path}: shard {shard.name} {message}")

    def _shard(self, name: ShardName) -> Optional[_Shard]:
        if name.seq in self._open:
            return self._open[name.seq]
        shard = None
        fd = self.folder.open_read(name.name)
        if fd is not None:
            file = ShardFile(fd)
            if file.size == 0 or not file.valid():
                self._say(name, "garbage", "is not a shard of cgstat's (skipped)")
                file.close()
            else:
                shard = self._scan(name, file)
        self._open[name.seq] = shard
        return shard

    def _scan(self, name: ShardName, file: ShardFile) -> _Shard:
        blocks: List[Tuple[float, int]] = []
        offset = None
        for wall_s, at in read_index(self.folder.read_small(name.index_name, 1 << 24)):
            h = file.header_at(at)
            if h is None or not h.block or h.wall_s != wall_s or (blocks and at <= blocks[-1][1]):
                break
            blocks.append((wall_s, at))
        last = None
        if blocks:
            offset = blocks[-1][1]
            blocks.pop()  # found again by the scan below
        kwargs = {} if offset is None else {"offset": offset}
        for h, damage in file.headers(**kwargs):
            if damage is not None:
                self._damage(name, damage.offset, damage.torn)
                continue
            assert h is not None
            if h.block:
                blocks.append((h.wall_s, h.offset))
            if blocks:
                last = h.wall_s
        return _Shard(name, file, blocks, last)

    def _damage(self, name: ShardName, offset: int, torn: bool) -> None:
        if torn:
            self._say(name, "torn", f"ends in a tick cut short at byte {offset} (a write stopped by a kill or a "
                                    "power cut): skipped")
        else:
            self._say(name, "damaged", f"is damaged at byte {offset}: skipped to its next whole block")

    def _ticks(self, shard: _Shard, offset: int, want: Callable[[Header], bool],
               stop_after: float) -> Iterator[Tick]:
        decoder = Decoder()
        inflate = None
        for h, damage in shard.file.headers(offset):
            if damage is not None:
                self._damage(shard.name, damage.offset, damage.torn)
                inflate = None
                continue
            assert h is not None
            if h.block:
                if h.wall_s > stop_after:
                    return
                decoder.reset()
                inflate = zlib.decompressobj()
            if inflate is None:
                continue  # inside a block whose start was damaged
            payload = shard.file.payload(h)
            try:
                if not crc_ok(h, payload):
                    raise ValueError("bad checksum")
                wanted = want(h)
                wall_s, lines = decoder.decode(inflate.decompress(payload), lines=wanted)
            except (ValueError, zlib.error):
                self._damage(shard.name, h.offset, False)
                inflate = None
                continue
            if wall_s > stop_after:
                return
            if wanted:
                yield Tick(wall_s, lines)
