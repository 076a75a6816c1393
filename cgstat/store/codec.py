"""A tick's JSON lines as a small payload: each record against its own previous tick. No I/O.
A record's line (the bytes `stream` writes) is cut at its commas; only the pieces that
differ from the same workload's line in the tick before are kept, so zlib (shard.py) finds
a moving counter again in the ticks before it. Joining the pieces gives back the line byte
for byte. A block begins with no previous records (`Encoder.reset` starts one).
"""

from __future__ import annotations

from itertools import compress
from operator import itemgetter, ne
from typing import Any, Dict, Hashable, List, Sequence, Tuple, Union

import orjson

dumps = orjson.dumps


# A record's first pieces (its type, time, identity, paths, interval: what moves on an idle
# workload) are compared one by one, the rest of the line as one piece first: an idle
# record then costs a short split and one memcmp, not ~120 pieces made and compared.
_HEAD = 24


# A record's line (`text.dumps_record`) is cut at its commas into pieces
# (`"usage_seconds_total":15.772`; a string holding a comma is cut too: the cut needs no
# meaning, only to be undone by joining). Within a block of ticks a record is compared with
# the record of the same workload in the tick before: when both have as many pieces, only
# the pieces that differ are kept, with their places (`[id, places, pieces]`); otherwise the
# whole line (`[id, line]`). A constant (a name, a limit, a null) then costs nothing, a
# moving counter its own piece, which zlib (shard.py) finds again in the ticks before it.
# Joining the pieces gives back the line byte for byte: the stored precision is the
# stream's own.
# A cut at commas costs a C split and a comparison of two lists made in C (map, compress,
# itemgetter), where a JSON tokeniser in Python costs ten times as much: the store must
# stay cheap at 1,000 cgroups a second.
# A block begins with no previous records (self-contained: reading a tick decodes from its
# block's first tick); `Encoder.reset` starts one.
class Encoder:
    """Ticks into payloads (JSON bytes), each record against its previous one in the
    block. `reset()` begins a block: the next tick is encoded whole. A tick is `begin()`,
    `add()` for each line as it is made (no tick's lines held at once), `finish()`."""

    def __init__(self) -> None:
        self.reset()
        self._out = bytearray()

    def reset(self) -> None:
        self._keys: Dict[Hashable, int] = {}
        # kid -> its previous line: the bytes (it changed at most in its head), or its
        # pieces (it changed further on: they are compared again next tick)
        self._previous: Dict[int, Union[bytes, List[bytes]]] = {}

    def encode(self, wall_s: float, lines: Sequence[Tuple[Hashable, bytes]]) -> bytes:
        """The payload of one tick: its lines (`(key, line)`, UTF-8 as dumps_record makes
        them: a key names the same workload from tick to tick; None for a line compared
        with nothing), in order."""
        self.begin()
        for key, line in lines:
            self.add(key, line)
        return self.finish(wall_s)

    def begin(self) -> None:
        # each entry as its JSON at once, each followed by a comma: no tick's lists held
        # until finish(), nor orjson's bytes (each keeps the buffer it grew in)
        self._out = bytearray()

    def add(self, key: Hashable, line: bytes) -> None:
        """One line of the tick. Lines are cut and compared as bytes: only what is kept is
        decoded."""
        out = self._out
        if key is None:
            out += dumps([-1, line.decode("utf-8")])
            out += b","
            return
        keys, previous = self._keys, self._previous
        kid = keys.get(key)
        if kid is None:
            kid = keys[key] = len(keys)
        old = previous.get(kid)
        if old is None:
            previous[kid] = _compact(line)
            out += dumps([kid, line.decode("utf-8")])
            out += b","
            return
        if old.__class__ is bytes:
            if old == line:
                out += b"[%d,[],[]]," % kid
                return
            head = line.split(b",", _HEAD)
            old_head = old.split(b",", _HEAD)
            if len(head) == len(old_head) == _HEAD + 1 and head[_HEAD] == old_head[_HEAD]:
                previous[kid] = _compact(line)
                out += dumps(_entry(kid, list(compress(range(_HEAD), map(ne, old_head, head))), head))
                out += b","
                return
            old = old.split(b",")
        pieces = line.split(b",")
        if len(old) != len(pieces):
            previous[kid] = _compact(line)
            out += dumps([kid, line.decode("utf-8")])
            out += b","
            return
        changed = list(compress(range(len(pieces)), map(ne, old, pieces)))  # in C: no loop here
        previous[kid] = pieces if changed and changed[-1] >= _HEAD else _compact(line)
        out += dumps(_entry(kid, changed, pieces))
        out += b","

    def finish(self, wall_s: float) -> bytes:
        """The tick's payload; the encoder is ready for the next tick."""
        out, self._out = self._out, bytearray()
        if out:
            out[-1:] = b"]"  # the last entry's comma
        else:
            out += b"]"
        return b"".join((b"[", dumps(wall_s), b",[", out, b"]"))


def _compact(line: bytes) -> bytes:
    """A copy of `line` of its own length: orjson's bytes keep the buffer it grew while
    writing (~16 KiB for a 3 KB record), which a line kept for a tick would pin."""
    return memoryview(line).tobytes()


def _entry(kid: int, changed: List[int], pieces: List[bytes]) -> List[Any]:
    if len(changed) > 1:
        kept = b",".join(itemgetter(*changed)(pieces)).decode("utf-8").split(",")
    elif changed:
        kept = [pieces[changed[0]].decode("utf-8")]
    else:
        kept = []
    return [kid, changed, kept]


class Decoder:
    """Payloads back into lines, frame after frame of one block; `reset()` at a block's start."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._previous: Dict[int, List[str]] = {}

    def decode(self, payload: bytes, lines: bool = True) -> Tuple[float, List[str]]:
        """The tick's time and its lines (without newlines); `lines=False`: only the state
        advanced (a tick before the one wanted). ValueError when the payload is not one
        this block can decode."""
        try:
            wall_s, entries = orjson.loads(payload)
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            raise ValueError(f"not a tick: {exc}") from None
        previous = self._previous
        out: List[str] = []
        try:
            for entry in entries:
                kid = entry[0]
                if len(entry) == 2:
                    data = entry[1]
                    if data.__class__ is not str:
                        raise ValueError("a whole line that is not text")
                    if kid >= 0:
                        previous[kid] = data.split(",")
                    if lines:
                        out.append(data)
                    continue
                pieces = list(previous[kid])
                for i, piece in zip(entry[1], entry[2]):
                    pieces[i] = piece
                previous[kid] = pieces
                if lines:
                    out.append(",".join(pieces))
        except (IndexError, TypeError, KeyError, ValueError, AttributeError) as exc:
            raise ValueError(f"a tick that does not decode: {exc}") from None
        return float(wall_s), out
