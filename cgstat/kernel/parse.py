"""Pure parsers for the text of cgroup and proc files. No I/O here.

Each parser takes the file's text and returns plain values, or raises ValueError with a
short reason. Kernel formats follow Documentation/admin-guide/cgroup-v2.rst and
cgroup-v1/*.rst. Parsers are strict about what they use and lenient about what they
don't: unknown keys are ignored (new kernels add keys), a malformed line that carries a
value we need fails the parse.
"""

from __future__ import annotations

import re
from typing import Collection, Dict, List, Optional, Set, Tuple, Union

from cgstat import text as text_mod

U64_MAX = 2**64 - 1
# v1 memory.limit_in_bytes reads back PAGE_COUNTER_MAX * PAGE_SIZE when unlimited
# (9223372036854771712 with 4 KiB pages, less with 64 KiB pages); memory.memsw and
# kmem likewise. Anything at or past 2^62 bytes (4 EiB) is "no limit" in practice.
UNLIMITED_BYTES = 2**62


def parse_uint(text: str) -> int:
    """A single unsigned decimal integer (u64), surrounded by optional whitespace."""
    s = text.strip()
    if not s:
        raise ValueError("empty")
    if not s.isdigit() or not s.isascii():
        raise ValueError(f"not an unsigned integer: {s[:40]!r}")
    value = int(s)
    if value > U64_MAX:
        raise ValueError(f"larger than 2^64-1: {s[:40]!r}")
    return value


def parse_int(text: str) -> int:
    """A single signed decimal integer (s64), e.g. cpu.cfs_quota_us which may be -1."""
    s = text.strip()
    body = s[1:] if s.startswith("-") else s
    if not body or not body.isdigit() or not body.isascii():
        raise ValueError(f"not an integer: {s[:40]!r}" if s else "empty")
    value = int(s)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"out of s64 range: {s[:40]!r}")
    return value


def parse_max_or_uint(text: str) -> Optional[int]:
    """v2 limit files (memory.max, pids.max...): "max" is no limit (None)."""
    s = text.strip()
    if s == "max":
        return None
    return parse_uint(s)


def limit_bytes(value: int) -> Optional[int]:
    """A byte limit, or None when the value is the kernel's 'unlimited' sentinel."""
    return None if value >= UNLIMITED_BYTES else value


# At most 19 digits: below 10^19 < 2^64, so no range check on this path.
_FLAT_FILE = re.compile(r"(?:[!-~]+ [0-9]{1,19}\n)*")


def parse_flat_keyed(text: str, only: Optional[Collection[str]] = None) -> Dict[str, Optional[int]]:
    """'key value' lines (cpu.stat, memory.stat, memory.events, cpuacct.stat...).

    A line whose value is not an unsigned integer (junk, cut mid-line) maps its key to
    None rather than failing the file: new kernels add keys, and one bad line must not
    hide the good ones. Callers treat None for a key they need as malformed. A duplicated
    key fails the whole file: the kernel never prints one, so the file is not what we
    think it is.

    `only`: return just these keys (those present); the whole file is checked the same.
    v1 memory.stat has ~40 keys and a tick needs 5: converting only those halves its cost.
    """
    # The kernel's own shape, "key N\n" lines, checked and converted in C; anything else
    # (and any doubt: a long number, a repeated key) takes the line-by-line path below.
    if _FLAT_FILE.fullmatch(text) is not None:
        tokens = text.split()
        if only is None:
            fast: Dict[str, Optional[int]] = dict(zip(tokens[0::2], map(int, tokens[1::2])))
            if len(fast) * 2 == len(tokens):
                return fast
        else:
            strings = dict(zip(tokens[0::2], tokens[1::2]))
            if len(strings) * 2 == len(tokens):
                return {key: int(strings[key]) for key in only if key in strings}
    if only is not None:
        full = parse_flat_keyed(text)
        return {key: full[key] for key in only if key in full}
    out: Dict[str, Optional[int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        key = parts[0]
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        value: Optional[int] = None
        if len(parts) == 2:
            raw = parts[1]
            if raw.isdigit() and raw.isascii():
                value = int(raw)
                if value > U64_MAX:
                    value = None
        out[key] = value
    return out


def parse_cpu_max(text: str) -> Tuple[Optional[int], int]:
    """v2 cpu.max: '$MAX $PERIOD' in microseconds; MAX may be 'max'."""
    parts = text.split()
    if len(parts) == 1:
        # "If only one number is written, $MAX is updated" - the file always shows both,
        # but be lenient: default period 100000 us.
        parts.append("100000")
    if len(parts) != 2:
        raise ValueError(f"expected '$MAX $PERIOD': {text.strip()[:40]!r}")
    quota = parse_max_or_uint(parts[0])
    period = parse_uint(parts[1])
    if period == 0:
        raise ValueError("period is 0")
    return quota, period


def parse_nested_keyed(text: str) -> Dict[str, Dict[str, float]]:
    """'name key=value key=value' lines (io.stat, *.pressure). Values parsed as numbers.

    io.stat: "8:0 rbytes=90430464 wbytes=299008000 rios=8950 wios=1252 dbytes=50331648 dios=3021"
    A device line with no keys at all is legal (seen after a device's stats were reset).
    """
    out: Dict[str, Dict[str, float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        name = parts[0]
        if "=" in name:
            raise ValueError(f"line without a name: {line[:60]!r}")
        if name in out:
            raise ValueError(f"duplicate line {name!r}")
        fields: Dict[str, float] = {}
        for item in parts[1:]:
            key, sep, raw = item.partition("=")
            if not sep or not key:
                raise ValueError(f"not key=value: {item[:40]!r}")
            if key in fields:
                raise ValueError(f"duplicate key {key!r} in {name!r}")
            fields[key] = _number(raw)
        out[name] = fields
    return out


def _number(raw: str) -> float:
    if "." in raw:
        whole, _, frac = raw.partition(".")
        if not (whole.isdigit() and frac.isdigit() and raw.isascii()):
            raise ValueError(f"not a number: {raw[:40]!r}")
        return float(raw)
    return parse_uint(raw)


_PSI_LINE = re.compile(
    r"(some|full) avg10=(\d+\.\d+) avg60=(\d+\.\d+) avg300=(\d+\.\d+) total=(\d+)(?: \S+)*"
)


PSI_FILE = re.compile(  # the kernel's own two lines (cgroups.py parses these straight to a sample)
    r"some avg10=(\d+\.\d+) avg60=(\d+\.\d+) avg300=(\d+\.\d+) total=(\d+)\n"
    r"full avg10=(\d+\.\d+) avg60=(\d+\.\d+) avg300=(\d+\.\d+) total=(\d+)\n", re.ASCII
)


def parse_pressure(text: str) -> Dict[str, Dict[str, float]]:
    """PSI file: 'some avg10=0.00 avg60=0.00 avg300=0.00 total=0' and a 'full' line.

    total is cumulative stall time in microseconds. The 'full' line is absent for cpu on
    kernels before 5.13. (Format: Documentation/accounting/psi.rst; keys beyond these four
    are tolerated.)
    """
    m = PSI_FILE.fullmatch(text)
    if m is not None:  # the kernel's own two lines, in one match
        g = m.groups()
        some_total, full_total = int(g[3]), int(g[7])
        if some_total <= U64_MAX and full_total <= U64_MAX:
            return {"some": {"avg10": float(g[0]), "avg60": float(g[1]), "avg300": float(g[2]),
                             "total": some_total},
                    "full": {"avg10": float(g[4]), "avg60": float(g[5]), "avg300": float(g[6]),
                             "total": full_total}}
    table: Dict[str, Dict[str, float]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _PSI_LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"bad pressure line: {line[:60]!r}")
        name = m.group(1)
        if name in table:
            raise ValueError(f"duplicate line {name!r}")
        total = int(m.group(5))
        if total > U64_MAX:
            raise ValueError("total larger than 2^64-1")
        table[name] = {"avg10": float(m.group(2)), "avg60": float(m.group(3)),
                       "avg300": float(m.group(4)), "total": total}
    if "some" not in table:
        raise ValueError("no 'some' line")
    return table


def parse_blkio_v1(text: str) -> Dict[str, Dict[str, int]]:
    """v1 blkio.*io_service_bytes* / *io_serviced* rows: 'MAJ:MIN Op N' and 'Total N'.

    Returns {"MAJ:MIN": {"Read": n, "Write": n, "Discard": n, ...}}; the closing 'Total'
    line (and per-device 'Total' rows) are dropped: totals are summed by us.
    """
    out: Dict[str, Dict[str, int]] = {}
    total_seen = False
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if total_seen:
            raise ValueError("lines after the closing 'Total'")
        if parts[0] == "Total" and len(parts) == 2:
            parse_uint(parts[1])
            total_seen = True
            continue
        if len(parts) != 3:
            raise ValueError(f"bad line: {line[:60]!r}")
        device, op, raw = parts
        if not _is_device(device):
            raise ValueError(f"bad device {device[:20]!r}")
        value = parse_uint(raw)
        if op == "Total":
            continue
        row = out.setdefault(device, {})
        if op in row:
            raise ValueError(f"duplicate {op} for {device}")
        row[op] = value
    if not total_seen:
        # The kernel always ends these files with "Total N" (blkcg_print_stat): without it
        # the file was cut short, and the rows we have may be missing some.
        raise ValueError("no closing 'Total' line (truncated?)")
    return out


def _is_device(text: str) -> bool:
    major, sep, minor = text.partition(":")
    return bool(sep) and major.isdigit() and minor.isdigit() and text.isascii()


def parse_io_stat(text: str) -> Dict[str, Dict[str, int]]:
    """v2 io.stat parsed as key=value (never by position: keys come and go by kernel)."""
    table = parse_nested_keyed(text)
    out: Dict[str, Dict[str, int]] = {}
    for device, fields in table.items():
        if not _is_device(device):
            raise ValueError(f"bad device {device[:20]!r}")
        row: Dict[str, int] = {}
        for key, value in fields.items():
            if isinstance(value, float):
                raise ValueError(f"{device} {key}: not an integer")
            row[key] = value
        out[device] = row
    return out


def parse_pid_list(text: str) -> List[int]:
    """cgroup.procs: one PID per line."""
    return [parse_uint(line) for line in text.split()]


def parse_proc_cgroup(data: Union[str, bytes]) -> List[Tuple[str, str]]:
    r"""/proc/<pid>/cgroup: 'ID:controllers:path' lines -> [(controllers, path)].

    v2 is '0::/path'; v1 lines name their controllers ('4:memory:/x', '2:cpu,cpuacct:/y',
    '1:name=systemd:/z'). A path may contain ':' so split at most twice.

    Given bytes (as read), paths are decoded like the walk decodes folder names
    (text.decode_bytes: `\xNN` for bytes that are not UTF-8), so the two join. The kernel
    prints a cgroup path raw, and a cgroup name may hold a newline: a user can make a
    nested folder 'a\n5:memory:' / 'system.slice' / ... so that one line reads as two.
    The kernel prints each hierarchy once, so a repeated hierarchy ID, controller or v2
    line means forged lines and fails the parse (no join, rather than a join to another
    workload's cgroup).
    """
    text = text_mod.decode_bytes(data) if isinstance(data, bytes) else data
    out = []
    ids = set()
    controllers_seen: Set[str] = set()
    # Only '\n' ends a line here: str.splitlines() would also split a name at U+0085,
    # U+2028 or a form feed, all legal in a cgroup name.
    for line in text.split("\n"):
        if not line:
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            raise ValueError(f"bad line: {line[:60]!r}")
        hid, controllers, path = parts
        if not path.startswith("/"):
            raise ValueError(f"path not absolute: {path[:60]!r}")
        names = controllers.split(",") if controllers else [""]
        if hid in ids or controllers_seen.intersection(names):
            raise ValueError(f"hierarchy {hid}:{controllers[:40]} listed twice")
        ids.add(hid)
        controllers_seen.update(names)
        out.append((controllers, path))
    return out


def parse_meminfo(text: str) -> Dict[str, int]:
    """/proc/meminfo: 'MemTotal:       24576000 kB' -> bytes."""
    out = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        parts = rest.split()
        if not parts or not parts[0].isdigit():
            continue
        value = int(parts[0])
        if len(parts) > 1 and parts[1] == "kB":
            value *= 1024
        out[key.strip()] = value
    return out


def parse_cpu_list(text: str) -> int:
    """/sys/devices/system/cpu/online: '0-3,8-11' -> 8."""
    count = 0
    s = text.strip()
    if not s:
        raise ValueError("empty")
    for part in s.split(","):
        lo, sep, hi = part.partition("-")
        first = parse_uint(lo)
        last = parse_uint(hi) if sep else first
        if last < first:
            raise ValueError(f"bad range {part!r}")
        count += last - first + 1
    return count


def unescape_mount_field(text: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as \040 \011 \012 \134."""
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 3 < len(text) + 0 and text[i + 1 : i + 4].isdigit():
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> List[Tuple[str, str, str, str, str]]:
    """/proc/<pid>/mountinfo -> [(dev 'MAJ:MIN', root, mount point, fstype, super options)].

    Format (proc(5)): 'id parent maj:min root mountpoint opts [optional...] - fstype source superopts'.
    """
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        left, sep, right = line.partition(" - ")
        if not sep:
            raise ValueError(f"no separator: {line[:60]!r}")
        lf = left.split()
        rf = right.split()
        if len(lf) < 6 or len(rf) < 2:
            raise ValueError(f"short line: {line[:60]!r}")
        superopts = rf[2] if len(rf) > 2 else ""
        out.append(
            (lf[2], unescape_mount_field(lf[3]), unescape_mount_field(lf[4]), rf[0], superopts)
        )
    return out


def parse_bool01(text: str) -> bool:
    """A '0' or '1' file (v2 memory.oom.group)."""
    s = text.strip()
    if s not in ("0", "1"):
        raise ValueError(f"not 0 or 1: {s[:40]!r}")
    return s == "1"


_CPUSET_LIST = re.compile(r"(?:[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*)?", re.ASCII)


def parse_cpuset_list(text: str) -> str:
    """cpuset.cpus.effective / cpuset.mems.effective (v1 cpuset.effective_cpus): a list
    such as '0-3,8', kept as the kernel writes it (Documentation/admin-guide/cgroup-v2.rst,
    "Cpuset Interface Files"); an empty list is legal."""
    s = text.strip()
    if _CPUSET_LIST.fullmatch(s) is None:
        raise ValueError(f"not a CPU or node list: {s[:40]!r}")
    return s


def parse_io_max(text: str) -> Dict[str, Dict[str, Optional[int]]]:
    """v2 io.max: 'MAJ:MIN rbps=N wbps=N riops=N wiops=N' lines, 'max' for no limit (None).

    Only devices with a limit set are listed; the kernel writes all four keys."""
    out: Dict[str, Dict[str, Optional[int]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        device = parts[0]
        if not _is_device(device):
            raise ValueError(f"bad device {device[:20]!r}")
        if device in out:
            raise ValueError(f"duplicate line {device!r}")
        row: Dict[str, Optional[int]] = {}
        for item in parts[1:]:
            key, sep, raw = item.partition("=")
            if not sep or not key or key in row:
                raise ValueError(f"bad key=value {item[:40]!r} in {device!r}")
            row[key] = parse_max_or_uint(raw)
        out[device] = row
    return out


def parse_blkio_device_values(text: str) -> Dict[str, int]:
    """v1 blkio.throttle.{read,write}_{bps,iops}_device: 'MAJ:MIN N' lines (only devices
    with a rule; empty when none)."""
    out: Dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not _is_device(parts[0]):
            raise ValueError(f"bad line: {line[:60]!r}")
        if parts[0] in out:
            raise ValueError(f"duplicate device {parts[0]!r}")
        out[parts[0]] = parse_uint(parts[1])
    return out


def shares_to_weight(shares: int) -> int:
    """v1 cpu.shares as a v2 cpu.weight, the way the kernel itself maps the two.

    Under v2 the kernel keeps the scheduler's v1 share (1024 = one default task group) and
    shows it as cpu.weight = round(shares * 100 / 1024) (kernel/sched/core.c,
    cpu_weight_read_u64: DIV_ROUND_CLOSEST_ULL(shares * CGROUP_WEIGHT_DFL, 1024)), so the
    defaults meet (1024 <-> 100); systemd converts CPUShares= the same way. Clamped to
    cpu.weight's range [1, 10000]. runc and crun used to map [2, 262144] linearly onto
    [1, 10000] (1024 -> 39), which is not what the scheduler does with the share.
    """
    return max(1, min(10000, (shares * 100 + 512) // 1024))
