"""One /dev/kmsg record (Documentation/ABI/testing/dev-kmsg): its fields, its escaped text
back to bytes, and its stamp as wall time; what the OOM and XID readers parse."""

from __future__ import annotations

import re
import time
from typing import NamedTuple, Optional

from cgstat.text import decode_bytes


def wall_seconds(usec: int) -> float:
    """The wall time of a record's stamp: the boot's wall time (now less CLOCK_MONOTONIC)
    plus the stamp. The stamp is the kernel's local_clock, which runs with CLOCK_MONOTONIC
    (both stop in suspend) but is not slewed by NTP, so on a host up for months the two
    can drift apart by a few seconds; a record read a tick after it was written is off by
    much less (`dmesg -T` makes the same conversion, with the same caveat)."""
    return time.time() - time.monotonic() + usec / 1e6


class Record(NamedTuple):
    """One /dev/kmsg record."""

    facility: int  # 0: the kernel; userspace writes LOG_USER (1) or above
    level: int
    seq: int
    usec: int  # microseconds since boot (the kernel's local clock)
    continued: bool  # flag 'c': continues the record before (kernels before 5.10)
    text: str  # the message, escaped as the kernel writes it (ASCII)


def parse_record(raw: bytes) -> Optional[Record]:
    """A /dev/kmsg record, or None when it isn't one.

    One read() returns one record, `PRI,SEQ,USEC,FLAGS[,...];TEXT\\n`, then its dictionary
    (` KEY=value` lines). The kernel writes every byte of TEXT below 0x20, from 0x7f, and
    the backslash as `\\xNN`, so a record is ASCII and a newline in a message can't start
    a record."""
    head, sep, rest = raw.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    if len(fields) < 4:
        return None
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    if prio < 0 or seq < 0:
        return None
    text = rest.split(b"\n", 1)[0]  # the dictionary lines (" KEY=value") follow the text
    return Record(prio >> 3, prio & 7, seq, usec, fields[3].startswith(b"c"),
                  text.decode("ascii", "replace"))


_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def unescape(text: str) -> bytes:
    r"""The bytes the kernel printed: each `\xNN` back to its byte."""
    if "\\x" not in text:
        return text.encode("ascii", "replace")
    out = bytearray()
    last = 0
    for m in _ESCAPE.finditer(text):
        out += text[last:m.start()].encode("ascii", "replace")
        out.append(int(m.group(1), 16))
        last = m.end()
    out += text[last:].encode("ascii", "replace")
    return bytes(out)


def kernel_text(escaped: str) -> str:
    """An escaped kernel string (a path, a task name) as cgstat writes names (text.decode_bytes):
    the same text as the walk's folder path of the same cgroup."""
    return decode_bytes(unescape(escaped))
