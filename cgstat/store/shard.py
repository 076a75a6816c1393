"""One shard file's format: a header, then one frame per tick (the tick's codec.py payload,
deflated in a stream that runs through its block), and its index of blocks (`.index`),
which only makes finding a time fast; frames and index entries made (`frame`,
`index_entry`) and read back (`ShardFile`, `read_index`). store/writer.py writes them.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Iterator, List, NamedTuple, Optional, Tuple

# A frame is a 24-byte header (magic, flags, payload length, CRC-32 of the header's other
# fields and the payload, the tick's time) and its payload: the tick (codec.py) deflated
# (zlib) in a stream that runs through its block, flushed at every tick (Z_SYNC_FLUSH), so
# that each frame is complete on its own once written and the block's earlier ticks serve
# as the compressor's dictionary. A frame flagged BLOCK starts a new deflate stream and a
# new codec state: a block is self-contained. A frame is written (store/writer.py) with one
# write(2) to a file opened O_APPEND, then fdatasync'd: a process killed mid-write leaves at
# most that frame torn at the end, which the CRC and length show.
# The index (`.index`) lists each block's first tick: its time and offset, with a CRC of
# the entry. It only makes finding a time fast: a reader checks each entry against the
# shard's own frame header, and scans the headers of the rest (seek, read 24 bytes), so a
# missing, short or damaged index costs time, never data.
SHARD_MAGIC = b"cgstat shard 1\n\0"
INDEX_MAGIC = b"cgstat index 1\n\0"
FRAME = struct.Struct("<4sBxxxIId")  # magic, flags, payload length, crc, tick time
FRAME_MAGIC = b"CGt1"
BLOCK = 1
INDEX_ENTRY = struct.Struct("<dQI")  # block's first tick time, its frame's offset, crc of the two
MAX_PAYLOAD = 256 * 1024 * 1024


def frame(payload: bytes, wall_s: float, block: bool) -> bytes:
    flags = BLOCK if block else 0
    crc = zlib.crc32(payload, zlib.crc32(struct.pack("<BId", flags, len(payload), wall_s)))
    return FRAME.pack(FRAME_MAGIC, flags, len(payload), crc, wall_s) + payload


def index_entry(wall_s: float, offset: int) -> bytes:
    head = struct.pack("<dQ", wall_s, offset)
    return head + struct.pack("<I", zlib.crc32(head))


class Header(NamedTuple):
    offset: int
    flags: int
    length: int
    crc: int
    wall_s: float

    @property
    def block(self) -> bool:
        return bool(self.flags & BLOCK)

    @property
    def end(self) -> int:
        return self.offset + FRAME.size + self.length


class Damage(NamedTuple):
    offset: int
    torn: bool  # the file ends inside this frame (a write cut short), else bad bytes


def _header(data: bytes, offset: int) -> Optional[Header]:
    if len(data) < FRAME.size:
        return None
    magic, flags, length, crc, wall_s = FRAME.unpack_from(data)
    if magic != FRAME_MAGIC or length > MAX_PAYLOAD or flags & ~BLOCK:
        return None
    return Header(offset, flags, length, crc, wall_s)


def crc_ok(h: Header, payload: bytes) -> bool:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<BId", h.flags, h.length, h.wall_s))) == h.crc


class ShardFile:
    """A shard opened for reading (a descriptor of the folder's, see folder.StoreFolder)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.size = os.fstat(fd).st_size

    def valid(self) -> bool:
        return os.pread(self.fd, len(SHARD_MAGIC), 0) == SHARD_MAGIC

    def header_at(self, offset: int) -> Optional[Header]:
        return _header(os.pread(self.fd, FRAME.size, offset), offset)

    def headers(self, offset: int = len(SHARD_MAGIC)) -> Iterator[Tuple[Optional[Header], Optional[Damage]]]:
        """The frames' headers from `offset` on (payloads not read), and where the frames
        stop making sense: a torn end, or bad bytes (then the next block that reads well)."""
        while offset < self.size:
            h = self.header_at(offset)
            if h is not None and h.end <= self.size:
                yield h, None
                offset = h.end
                continue
            # nothing whole after it: the tail of a write cut short (or damage there: the same loss)
            found = self.next_block(offset + 1)
            yield None, Damage(offset, found is None)
            if found is None:
                return
            offset = found

    def next_block(self, offset: int) -> Optional[int]:
        """The offset of the next frame from `offset` that starts a block and reads whole."""
        chunk = 1 << 20
        while offset < self.size:
            data = os.pread(self.fd, chunk + FRAME.size, offset)
            at = data.find(FRAME_MAGIC)
            while at >= 0:
                h = self.header_at(offset + at)
                if h is not None and h.block and h.end <= self.size and crc_ok(h, self.payload(h)):
                    return h.offset
                at = data.find(FRAME_MAGIC, at + 1)
            offset += chunk
        return None

    def payload(self, h: Header) -> bytes:
        return os.pread(self.fd, h.length, h.offset + FRAME.size)

    def close(self) -> None:
        os.close(self.fd)


def read_index(data: Optional[bytes]) -> List[Tuple[float, int]]:
    """The index's entries up to the first one that doesn't check (a torn or bad tail)."""
    if not data or not data.startswith(INDEX_MAGIC):
        return []
    out = []
    for at in range(len(INDEX_MAGIC), len(data) - INDEX_ENTRY.size + 1, INDEX_ENTRY.size):
        wall_s, offset, crc = INDEX_ENTRY.unpack_from(data, at)
        if zlib.crc32(data[at:at + 16]) != crc:
            break
        out.append((wall_s, offset))
    return out
