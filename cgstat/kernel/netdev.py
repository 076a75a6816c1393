"""A strict parser for /proc/<pid>/net/dev (the interfaces of one network namespace). No I/O.

Reads nothing itself (kernel/netns.py reads the file, once per namespace). The format, the
kernel's, and the name rules: parse_net_dev's docstring.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple, Union

from cgstat import text as text_mod
from cgstat.kernel import parse

U64_MAX = 2**64 - 1
IFNAMSIZ = 16

# The two header lines, split on '|' (a kernel that changes the columns must fail the parse
# rather than have its numbers attributed to the wrong counters).
_RX_COLUMNS = ("bytes", "packets", "errs", "drop", "fifo", "frame", "compressed", "multicast")
_TX_COLUMNS = ("bytes", "packets", "errs", "drop", "fifo", "colls", "carrier", "compressed")


class InterfaceCounters(NamedTuple):
    """One line of /proc/<pid>/net/dev: the kernel's counters of one interface since it was
    created (or moved into this namespace: counters travel with the device)."""

    name: str
    rx_bytes_total: int
    rx_packets_total: int
    rx_errors_total: int
    rx_dropped_total: int  # rx_dropped + rx_missed_errors
    rx_fifo_errors_total: int
    rx_frame_errors_total: int  # length + over + crc + frame errors
    rx_compressed_total: int
    rx_multicast_total: int
    tx_bytes_total: int
    tx_packets_total: int
    tx_errors_total: int
    tx_dropped_total: int
    tx_fifo_errors_total: int
    tx_collisions_total: int
    tx_carrier_errors_total: int  # carrier + aborted + window + heartbeat errors
    tx_compressed_total: int


COUNTER_FIELDS = InterfaceCounters._fields[1:]
assert len(COUNTER_FIELDS) == 16


def _check_header(lines) -> None:
    if len(lines) < 2:
        raise ValueError("missing header: fewer than two lines")
    first, second = lines[0], lines[1]
    if not first.startswith(b"Inter-|") or b"Receive" not in first or b"Transmit" not in first:
        raise ValueError(f"missing header: first line is {first[:40]!r}")
    parts = second.split(b"|")
    if len(parts) != 3 or parts[0].strip() != b"face":
        raise ValueError(f"missing header: second line is {second[:40]!r}")
    rx = tuple(c.decode("ascii", "replace") for c in parts[1].split())
    tx = tuple(c.decode("ascii", "replace") for c in parts[2].split())
    if rx != _RX_COLUMNS or tx != _TX_COLUMNS:
        raise ValueError(f"unknown columns: receive {rx}, transmit {tx}")


def _u64(field: bytes) -> int:
    # bytes.isdigit() is ASCII only; parse_uint bounds it to 2^64-1 like every counter
    if not field.isdigit():
        raise ValueError(f"not an unsigned integer: {field[:40]!r}")
    return parse.parse_uint(field.decode("ascii"))


def _name(raw: bytes) -> str:
    name = raw.strip(b" ")
    if not name:
        raise ValueError("empty interface name")
    if len(name) >= IFNAMSIZ:
        raise ValueError(f"interface name longer than {IFNAMSIZ - 1} bytes: {name[:40]!r}")
    if name in (b".", b"..") or b"/" in name or any(c in name for c in (b" ", b"\t", b"\n", b"\r", b"\v", b"\f", b"\0")):
        raise ValueError(f"not an interface name: {name!r}")
    return text_mod.decode_bytes(name)


def parse_net_dev(data: Union[bytes, str]) -> Tuple[InterfaceCounters, ...]:
    """Every interface of /proc/<pid>/net/dev, in the kernel's order.

    The kernel writes the file in net/core/net-procfs.c: `dev_seq_show` prints two header lines

        Inter-|   Receive                                                |  Transmit
         face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed

    then `dev_seq_printf_stats` one line per interface of the reader's network namespace:

        "%6s: %7llu %7llu %4llu %4llu %4llu %5llu %10llu %9llu %8llu %7llu %4llu %4llu %4llu %5llu %7llu %10llu\\n"

    name, then 8 receive and 8 transmit u64 counters. Some columns are sums of several
    rtnl_link_stats64 fields (rx "drop" = rx_dropped + rx_missed_errors; "frame" = length + over
    + crc + frame errors; tx "carrier" = carrier + aborted + window + heartbeat errors). The
    format has been the same since Linux 2.6 (2.4 printed "%6s:%8lu" with no space; splitting
    on whitespace after the colon reads both).

    Interface names (`dev_valid_name`, net/core/dev.c): 1 to 15 bytes (IFNAMSIZ - 1), not "."
    or "..", and no '/', ':' or whitespace. Old kernels let ':' through, so the name is what
    comes before the LAST colon on the line (the numbers never hold one); `%6s` pads short
    names on the left with spaces, which are stripped. A name is bytes and need not be UTF-8:
    it is decoded as cgroup names are (cgstat.text.decode_bytes: `\\xNN` for bad bytes).

    Raises ValueError on anything the kernel does not write: a missing or unknown header, a
    line without a colon, a row without exactly 16 counters, a counter that is not a
    decimal u64, an invalid or repeated interface name, a blank line, a file cut short (no
    final newline). A namespace with no interface listed gives an empty tuple.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    if not data:
        raise ValueError("empty")
    if not data.endswith(b"\n"):
        raise ValueError("cut short: no final newline")
    lines = data[:-1].split(b"\n")
    _check_header(lines)
    out = []
    seen = set()
    for number, line in enumerate(lines[2:], start=3):
        if not line.strip():
            raise ValueError(f"line {number}: blank")
        head, colon, rest = line.rpartition(b":")
        if not colon:
            raise ValueError(f"line {number}: no ':' after the interface name")
        name = _name(head)
        values = rest.split()
        if len(values) != 16:
            raise ValueError(f"line {number} ({name}): {len(values)} counters, not 16")
        if name in seen:
            raise ValueError(f"line {number}: interface {name!r} listed twice")
        seen.add(name)
        out.append(InterfaceCounters(name, *(_u64(v) for v in values)))
    return tuple(out)
