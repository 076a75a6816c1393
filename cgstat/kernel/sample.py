"""Raw samples: what one cgroup's files said at one moment, converted to seconds and bytes.

Immutable, no rates: rates are derived from two samples (pipeline/rates.py). `None` means
unknown or unsupported, and `errors` says why: `Problem`s, which the record builder
(pipeline/record.py) writes field by field as {"source", "error", "detail"} objects. The
per-tick shapes are NamedTuples (a tick builds ~9 per cgroup; bench/README.md says why not
frozen dataclasses): read them by attribute only. Reads no file (kernel/cgroups.py does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional, Tuple


@dataclass(frozen=True)
class Problem:
    __slots__ = ("source", "error", "detail")  # a reader keeps a cgroup's "unavailable" ones
    source: str  # the file (e.g. "memory.stat") or the controller ("io") concerned
    error: str  # gone | unsupported | permission_denied | malformed | read_failed | missing | unavailable
    detail: str


class CpuSample(NamedTuple):
    usage_seconds_total: Optional[float] = None
    user_seconds_total: Optional[float] = None
    system_seconds_total: Optional[float] = None
    limit_cores: Optional[float] = None
    periods_total: Optional[int] = None
    throttled_periods_total: Optional[int] = None
    throttled_seconds_total: Optional[float] = None
    quota_us: Optional[int] = None  # CFS quota per period; None without a limit
    period_us: Optional[int] = None  # CFS period


class MemorySample(NamedTuple):
    usage_bytes: Optional[int] = None
    working_set_bytes: Optional[int] = None
    limit_bytes: Optional[int] = None
    anon_bytes: Optional[int] = None
    file_bytes: Optional[int] = None
    inactive_file_bytes: Optional[int] = None
    shmem_bytes: Optional[int] = None
    swap_bytes: Optional[int] = None
    oom_kills_total: Optional[int] = None
    oom_events_total: Optional[int] = None


class DeviceIo(NamedTuple):
    device: str  # "MAJ:MIN"
    read_bytes_total: Optional[int] = None
    write_bytes_total: Optional[int] = None
    read_ops_total: Optional[int] = None
    write_ops_total: Optional[int] = None
    discard_bytes_total: Optional[int] = None
    discard_ops_total: Optional[int] = None


class IoSample(NamedTuple):
    devices: Optional[Tuple[DeviceIo, ...]] = None  # None: no IO accounting here

    def total(self, field: str) -> Optional[int]:
        if self.devices is None:
            return None
        values = [getattr(d, field) for d in self.devices]
        if any(v is None for v in values):
            return None
        return sum(values)


class PidsSample(NamedTuple):
    current: Optional[int] = None  # tasks (threads), pids.current
    limit: Optional[int] = None
    processes: Optional[int] = None  # processes: the PIDs in its cgroup.procs


class PressureSample(NamedTuple):
    some_avg10: Optional[float] = None
    some_avg60: Optional[float] = None
    some_avg300: Optional[float] = None
    some_seconds_total: Optional[float] = None
    full_avg10: Optional[float] = None
    full_avg60: Optional[float] = None
    full_avg300: Optional[float] = None
    full_seconds_total: Optional[float] = None


PRESSURE_RESOURCES = ("cpu", "memory", "io")


class Sample(NamedTuple):
    path: str
    paths: Dict[str, str]  # hierarchy name -> path read there
    inodes: Tuple[Tuple[str, int], ...]  # (hierarchy, folder inode) pairs
    time_s: float  # host monotonic seconds (CLOCK_BOOTTIME)
    wall_s: float  # Unix time, for `ts` only
    cpu: CpuSample
    memory: MemorySample
    io: IoSample
    pids: PidsSample
    pressure: Dict[str, Optional[PressureSample]]
    errors: Tuple[Problem, ...]
    gone: bool = False  # a file vanished while reading: the cgroup may have been removed
