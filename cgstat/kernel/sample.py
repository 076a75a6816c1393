"""Raw samples: what one cgroup's files said at one moment, converted to seconds and bytes.

Immutable, no rates: rates are derived from two samples (pipeline/rates.py). `None` means
unknown or unsupported, and `errors` says why: `Problem`s, which the record builder
(cgstat/pipeline/build.py) writes field by field as {"source", "error", "detail"} objects. The
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
    weight: Optional[int] = None  # v2 cpu.weight; v1 cpu.shares converted (parse.shares_to_weight)
    shares: Optional[int] = None  # v1 cpu.shares as written
    max_burst_us: Optional[int] = None  # v2 cpu.max.burst, v1 cpu.cfs_burst_us
    cpuset_cpus: Optional[str] = None  # effective CPUs, as the kernel writes the list
    cpuset_mems: Optional[str] = None  # effective memory nodes


class MemoryEvents(NamedTuple):
    """v2 memory.events / memory.events.local counts (None: a key this kernel lacks)."""
    low: Optional[int] = None
    high: Optional[int] = None
    max: Optional[int] = None
    oom: Optional[int] = None
    oom_kill: Optional[int] = None
    oom_group_kill: Optional[int] = None


class SwapEvents(NamedTuple):
    """v2 memory.swap.events counts."""
    high: Optional[int] = None
    max: Optional[int] = None
    fail: Optional[int] = None


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
    peak_bytes: Optional[int] = None  # v2 memory.peak, v1 memory.max_usage_in_bytes
    swap_peak_bytes: Optional[int] = None  # v2 memory.swap.peak (6.5+)
    high_bytes: Optional[int] = None  # v2 memory.high; None when "max"
    low_bytes: Optional[int] = None  # v2 memory.low, v1 memory.soft_limit_in_bytes
    min_bytes: Optional[int] = None  # v2 memory.min
    swap_limit_bytes: Optional[int] = None  # v2 memory.swap.max; None when "max"
    zswap_bytes: Optional[int] = None  # v2 memory.zswap.current
    events: Optional[MemoryEvents] = None  # v2 memory.events (this cgroup and below)
    events_local: Optional[MemoryEvents] = None  # v2 memory.events.local (this cgroup only)
    swap_events: Optional[SwapEvents] = None  # v2 memory.swap.events
    failcnt: Optional[int] = None  # v1 memory.failcnt: charges refused at the limit
    # the memory.stat counters read as the kernel writes them, in contract/keys.py MemoryStat's order
    # (None: no memory.stat); the field table declares them, the record names them
    stat: Optional[Tuple[Optional[int], ...]] = None
    hugetlb_bytes: Optional[int] = None  # v2 hugetlb.<size>.current summed
    oom_group: Optional[bool] = None  # v2 memory.oom.group


class DeviceIo(NamedTuple):
    device: str  # "MAJ:MIN"
    read_bytes_total: Optional[int] = None
    write_bytes_total: Optional[int] = None
    read_ops_total: Optional[int] = None
    write_ops_total: Optional[int] = None
    discard_bytes_total: Optional[int] = None
    discard_ops_total: Optional[int] = None


class DeviceLimit(NamedTuple):
    """One device's throttle limits (v2 io.max, v1 blkio.throttle.*_device); None: no limit."""
    device: str  # "MAJ:MIN"
    read_bytes_per_second: Optional[int] = None
    write_bytes_per_second: Optional[int] = None
    read_ops_per_second: Optional[int] = None
    write_ops_per_second: Optional[int] = None


class IoSample(NamedTuple):
    devices: Optional[Tuple[DeviceIo, ...]] = None  # None: no IO accounting here
    limits: Optional[Tuple[DeviceLimit, ...]] = None  # None: no limits file here

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
    peak: Optional[int] = None  # pids.peak (kernels that have it)
    events_max_total: Optional[int] = None  # pids.events max: forks refused at a pids.max


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
