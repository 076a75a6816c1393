"""Read one cgroup's controller files into a raw Sample.

Files read (cgroup v2, Documentation/admin-guide/cgroup-v2.rst):
  cpu.stat, cpu.max, cpu.max.burst, cpu.weight, cpuset.{cpus,mems}.effective,
  memory.current, memory.max, memory.high, memory.low, memory.min, memory.peak,
  memory.stat, memory.events, memory.events.local, memory.oom.group, memory.swap.current,
  memory.swap.max, memory.swap.peak, memory.swap.events, memory.zswap.current,
  hugetlb.<size>.current, io.stat, io.max, pids.current, pids.max, pids.peak, pids.events,
  {cpu,memory,io}.pressure
Files read (cgroup v1, Documentation/admin-guide/cgroup-v1/):
  cpuacct.usage, cpuacct.stat, cpu.stat, cpu.cfs_quota_us, cpu.cfs_period_us, cpu.shares,
  cpu.cfs_burst_us, memory.usage_in_bytes, memory.limit_in_bytes, memory.max_usage_in_bytes,
  memory.failcnt, memory.soft_limit_in_bytes, memory.stat, memory.oom_control,
  blkio.throttle.io_service_bytes_recursive, blkio.throttle.io_serviced_recursive
  (or the fallbacks below), blkio.throttle.{read,write}_{bps,iops}_device, pids.current,
  pids.max, pids.peak, pids.events
On hybrid hosts the cgroup2 hierarchy at /sys/fs/cgroup/unified adds cpu.stat (CPU time
when no cpuacct folder exists) and the pressure files.
Files some kernels lack (memory.peak before 5.19, memory.swap.peak before 6.5, pids.peak,
memory.zswap.current without CONFIG_ZSWAP, cpu.max.burst before 5.14) read as None with no
problem reported: a file the kernel doesn't have is not an error.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from cgstat.kernel import handles, parse
from cgstat.kernel.handles import FROZEN, KEPT, SLOW_FILES
from cgstat.kernel.hierarchy import Hierarchy, Layout
from cgstat.kernel.hostfs import Gone, ReadError, read_text
from cgstat.kernel.sample import (
    PRESSURE_RESOURCES,
    CpuSample,
    DeviceIo,
    DeviceLimit,
    IoSample,
    MemoryEvents,
    MemorySample,
    PidsSample,
    PressureSample,
    Problem,
    Sample,
    SwapEvents,
)
from cgstat.kernel.tree import Cgroup, Folder

T = TypeVar("T")
USER_HZ = 100  # cpuacct.stat is in USER_HZ ticks, 100 on every Linux ABI (see times(2))
NS = 1e9
US = 1e6

# v1 block IO statistics, in order of preference. The throttle files are filled by the
# blk-throttle layer for every IO scheduler; on kernel 6.x (mq-deadline) they stay at 0 for
# a device until some cgroup sets a throttle rule on it (see docs/metrics.md). The CFQ
# files exist only on old kernels, the BFQ ones only count when BFQ schedules the device.
_BLKIO_V1 = (
    ("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_serviced_recursive"),
    ("blkio.io_service_bytes_recursive", "blkio.io_serviced_recursive"),
    ("blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced"),
    ("blkio.bfq.io_service_bytes_recursive", "blkio.bfq.io_serviced_recursive"),
)


_kept_mounts: Dict[str, bool] = {}


def _keeps(folder: Folder) -> bool:
    """Whether this folder's files are read through kept descriptors (live cgroupfs only)."""
    mount = folder.hierarchy.mount_dir
    known = _kept_mounts.get(mount)
    if known is None:
        known = _kept_mounts[mount] = handles.ENABLED and handles.is_cgroupfs(mount)
    return known


class _Reader:
    """Reads files of one folder, turning every failure into a Problem."""

    __slots__ = ("problems", "gone")

    def __init__(self, problems: List[Problem]):
        self.problems = problems
        self.gone = False

    def get(self, folder: Optional[Folder], name: str, parser: Callable[[str], T]) -> Optional[T]:
        if folder is None:
            return None
        if name not in folder.files:
            self.problems.append(Problem(name, "missing", f"no {name} in {folder.hierarchy.name}:{folder.path}"))
            return None
        keeps = _kept_mounts.get(folder.hierarchy.mount_dir)
        if keeps is None:
            keeps = _keeps(folder)
        if not keeps or name in SLOW_FILES:
            return self._uncached(folder, name, parser, keeps)
        # The common case, every tick for every file: one pread on a kept descriptor.
        try:
            text = KEPT.read(folder, name).decode()
        except ReadError as exc:
            self._failed(name, exc)
            return None
        except UnicodeDecodeError:
            self.problems.append(Problem(name, "malformed", "not UTF-8 text"))
            return None
        try:
            return parser(text)
        except ValueError as exc:
            self.problems.append(Problem(name, "malformed", str(exc)))
            return None

    def opt(self, folder: Optional[Folder], name: str, parser: Callable[[str], T]) -> Optional[T]:
        """get() for a file some kernels (or configurations) don't have: absent, None and
        no problem reported."""
        if folder is None or name not in folder.files:
            return None
        return self.get(folder, name, parser)

    def _uncached(self, folder: Folder, name: str, parser: Callable[[str], T], keeps: bool) -> Optional[T]:
        """A slow file (its value kept while the folder is watched, read with
        open/read/close when due: it never holds a descriptor), or any file of a recorded
        tree (no descriptor kept: tests and users replace its files by rename)."""
        slow = keeps and name in SLOW_FILES
        if slow:
            known = KEPT.cached(folder, name)
            if known is not handles.MISSING:
                return known  # type: ignore[no-any-return,unused-ignore]
        try:
            text = read_text(folder.local + "/" + name)
        except ReadError as exc:
            self._failed(name, exc)
            return None
        try:
            value = parser(text)
        except ValueError as exc:
            self.problems.append(Problem(name, "malformed", str(exc)))
            return None
        if slow:
            KEPT.keep(folder, name, value)
        return value

    def _failed(self, name: str, exc: ReadError) -> None:
        if isinstance(exc, Gone):
            self.gone = True
        self.problems.append(Problem(name, exc.code, exc.detail))


def _key(table: Optional[Dict[str, Optional[int]]], key: str, reader: _Reader, source: str) -> Optional[int]:
    """A key the record needs; absent or unparsable is reported as malformed."""
    if table is None:
        return None
    if key not in table:
        reader.problems.append(Problem(source, "malformed", f"missing key {key!r}"))
        return None
    value = table[key]
    if value is None:
        reader.problems.append(Problem(source, "malformed", f"bad value for key {key!r}"))
    return value


def _scaled(value: Optional[int], unit: float) -> Optional[float]:
    return None if value is None else value / unit


# -- CPU ---------------------------------------------------------------------------------


def _cpu_v2(folder: Folder, r: _Reader) -> CpuSample:
    stat = r.get(folder, "cpu.stat", parse.parse_flat_keyed)
    limit = quota_us = period_us = None
    # cpu.max exists only where the cpu controller is enabled; so do the throttling keys
    # of cpu.stat (usage_usec, user_usec and system_usec are always there). The root has
    # no cpu.max but may show the keys.
    controller = "cpu.max" in folder.files or (stat is not None and "nr_periods" in stat)
    if "cpu.max" in folder.files:
        quota_period = r.get(folder, "cpu.max", parse.parse_cpu_max)
        if quota_period is not None:
            quota_us, period_us = quota_period
            if quota_us is not None:
                limit = quota_us / period_us
    throttled_us = _key(stat, "throttled_usec", r, "cpu.stat") if controller else None
    return CpuSample(
        usage_seconds_total=_scaled(_key(stat, "usage_usec", r, "cpu.stat"), US),
        user_seconds_total=_scaled(_key(stat, "user_usec", r, "cpu.stat"), US),
        system_seconds_total=_scaled(_key(stat, "system_usec", r, "cpu.stat"), US),
        limit_cores=limit,
        periods_total=_key(stat, "nr_periods", r, "cpu.stat") if controller else None,
        throttled_periods_total=_key(stat, "nr_throttled", r, "cpu.stat") if controller else None,
        throttled_seconds_total=_scaled(throttled_us, US),
        quota_us=quota_us,
        period_us=period_us,
        weight=r.opt(folder, "cpu.weight", parse.parse_uint),
        max_burst_us=r.opt(folder, "cpu.max.burst", parse.parse_uint),
        cpuset_cpus=r.opt(folder, "cpuset.cpus.effective", parse.parse_cpuset_list),
        cpuset_mems=r.opt(folder, "cpuset.mems.effective", parse.parse_cpuset_list),
    )


def _cpu_v1(acct: Optional[Folder], cpu: Optional[Folder], unified: Optional[Folder], r: _Reader) -> CpuSample:
    usage = user = system = weight = shares = burst = None
    if acct is not None:
        usage = _scaled(r.get(acct, "cpuacct.usage", parse.parse_uint), NS)
        ticks = r.get(acct, "cpuacct.stat", parse.parse_flat_keyed)
        user = _scaled(_key(ticks, "user", r, "cpuacct.stat"), USER_HZ)
        system = _scaled(_key(ticks, "system", r, "cpuacct.stat"), USER_HZ)
    elif unified is not None:
        # Hybrid: the cgroup2 side always has cpu.stat with usage (kernel >= 4.15).
        stat = r.get(unified, "cpu.stat", parse.parse_flat_keyed)
        usage = _scaled(_key(stat, "usage_usec", r, "cpu.stat"), US)
        user = _scaled(_key(stat, "user_usec", r, "cpu.stat"), US)
        system = _scaled(_key(stat, "system_usec", r, "cpu.stat"), US)
    limit = periods = throttled = throttled_s = quota_us = period = None
    if cpu is not None:
        quota = r.get(cpu, "cpu.cfs_quota_us", parse.parse_int)
        period = r.get(cpu, "cpu.cfs_period_us", parse.parse_uint)
        if quota is not None and quota > 0 and period:
            limit = quota / period  # quota -1 means no limit
            quota_us = quota
        stat = r.get(cpu, "cpu.stat", parse.parse_flat_keyed)
        periods = _key(stat, "nr_periods", r, "cpu.stat")
        throttled = _key(stat, "nr_throttled", r, "cpu.stat")
        throttled_s = _scaled(_key(stat, "throttled_time", r, "cpu.stat"), NS)
        shares = r.opt(cpu, "cpu.shares", parse.parse_uint)
        weight = None if shares is None else parse.shares_to_weight(shares)
        burst = r.opt(cpu, "cpu.cfs_burst_us", parse.parse_uint)
    # cpusets: v1 keeps them in the cpuset hierarchy, which is not followed (null there).
    return CpuSample(usage, user, system, limit, periods, throttled, throttled_s, quota_us, period,
                     weight, shares, burst)


# -- memory ------------------------------------------------------------------------------


def _working_set(usage: Optional[int], inactive_file: Optional[int]) -> Optional[int]:
    # docker stats' MEM USAGE and cAdvisor's working set: usage minus inactive page
    # cache, clamped at 0 (docker/cli#2415, containers/common#2454).
    if usage is None or inactive_file is None:
        return None
    return max(0, usage - inactive_file)


# The memory.stat keys a record uses (the file has ~40-50; see parse_flat_keyed's `only`).
_MEMORY_STAT_V1 = ("total_inactive_file", "total_rss", "total_cache", "total_shmem", "shmem",
                   "total_swap", "swap", "total_pgmajfault", "total_workingset_refault_anon",
                   "total_workingset_refault_file", "total_dirty", "total_writeback")
_MEMORY_STAT_V2 = ("inactive_file", "anon", "file", "shmem", "pgscan", "pgsteal", "pgmajfault",
                   "workingset_refault_anon", "workingset_refault_file", "file_dirty",
                   "file_writeback")
_EVENTS_KEYS = MemoryEvents._fields
_SWAP_EVENTS_KEYS = SwapEvents._fields


def _memory_events(text: str) -> MemoryEvents:
    """memory.events / memory.events.local; a key this kernel lacks (oom_group_kill before
    5.17) is None."""
    table = parse.parse_flat_keyed(text, _EVENTS_KEYS)
    return MemoryEvents(*map(table.get, _EVENTS_KEYS))


def _swap_events(text: str) -> SwapEvents:
    table = parse.parse_flat_keyed(text, _SWAP_EVENTS_KEYS)
    return SwapEvents(*map(table.get, _SWAP_EVENTS_KEYS))


def _max_bytes(value: Optional[int]) -> Optional[int]:
    return None if value is None else parse.limit_bytes(value)


def _hugetlb_v2(folder: Folder, r: _Reader) -> Optional[int]:
    """hugetlb.<size>.current summed over the page sizes, where the hugetlb controller is
    enabled (none of its files otherwise: None)."""
    names = _hugetlb_names(folder.files)
    if not names:
        return None
    total = 0
    for name in names:
        value = r.get(folder, name, parse.parse_uint)
        if value is None:
            return None
        total += value
    return total


_HUGETLB_NAMES: Dict[frozenset, Tuple[str, ...]] = {}


def _hugetlb_names(files: frozenset) -> Tuple[str, ...]:
    # One look at a folder's names per distinct set of names (folders share their sets).
    known = _HUGETLB_NAMES.get(files)
    if known is None:
        if len(_HUGETLB_NAMES) > 256:
            _HUGETLB_NAMES.clear()
        known = _HUGETLB_NAMES[files] = tuple(sorted(
            n for n in files if n.startswith("hugetlb.") and n.endswith(".current") and n.count(".") == 2))
    return known


def _memory_stat_v1(text: str) -> Dict[str, Optional[int]]:
    return parse.parse_flat_keyed(text, _MEMORY_STAT_V1)


def _memory_stat_v2(text: str) -> Dict[str, Optional[int]]:
    return parse.parse_flat_keyed(text, _MEMORY_STAT_V2)


def _memory_v2(folder: Folder, r: _Reader) -> MemorySample:
    usage = r.get(folder, "memory.current", parse.parse_uint)
    limit = r.get(folder, "memory.max", parse.parse_max_or_uint)
    stat = r.get(folder, "memory.stat", _memory_stat_v2)
    events = r.get(folder, "memory.events", parse.parse_flat_keyed)
    swap = r.get(folder, "memory.swap.current", parse.parse_uint)
    inactive = _key(stat, "inactive_file", r, "memory.stat")
    return MemorySample(
        usage_bytes=usage,
        working_set_bytes=_working_set(usage, inactive),
        limit_bytes=None if limit is None else parse.limit_bytes(limit),
        anon_bytes=_key(stat, "anon", r, "memory.stat"),
        file_bytes=_key(stat, "file", r, "memory.stat"),
        inactive_file_bytes=inactive,
        shmem_bytes=stat.get("shmem") if stat else None,
        swap_bytes=swap,
        # oom_kill appeared in 4.13; "oom" counts OOM situations, kills or not.
        oom_kills_total=_key(events, "oom_kill", r, "memory.events"),
        oom_events_total=events.get("oom") if events else None,
        peak_bytes=r.opt(folder, "memory.peak", parse.parse_uint),
        swap_peak_bytes=r.opt(folder, "memory.swap.peak", parse.parse_uint),
        high_bytes=_max_bytes(r.opt(folder, "memory.high", parse.parse_max_or_uint)),
        low_bytes=_max_bytes(r.opt(folder, "memory.low", parse.parse_max_or_uint)),
        min_bytes=_max_bytes(r.opt(folder, "memory.min", parse.parse_max_or_uint)),
        swap_limit_bytes=_max_bytes(r.opt(folder, "memory.swap.max", parse.parse_max_or_uint)),
        zswap_bytes=r.opt(folder, "memory.zswap.current", parse.parse_uint),
        events=None if events is None else MemoryEvents(*map(events.get, _EVENTS_KEYS)),
        events_local=r.opt(folder, "memory.events.local", _memory_events),
        swap_events=r.opt(folder, "memory.swap.events", _swap_events),
        pgscan_total=stat.get("pgscan") if stat else None,
        pgsteal_total=stat.get("pgsteal") if stat else None,
        pgmajfault_total=stat.get("pgmajfault") if stat else None,
        workingset_refault_anon_total=stat.get("workingset_refault_anon") if stat else None,
        workingset_refault_file_total=stat.get("workingset_refault_file") if stat else None,
        dirty_bytes=stat.get("file_dirty") if stat else None,
        writeback_bytes=stat.get("file_writeback") if stat else None,
        hugetlb_bytes=_hugetlb_v2(folder, r),
        oom_group=r.opt(folder, "memory.oom.group", parse.parse_bool01),
    )


def _memory_v1(folder: Folder, r: _Reader) -> MemorySample:
    usage = r.get(folder, "memory.usage_in_bytes", parse.parse_uint)
    limit = r.get(folder, "memory.limit_in_bytes", parse.parse_uint)
    stat = r.get(folder, "memory.stat", _memory_stat_v1)
    oom = r.get(folder, "memory.oom_control", parse.parse_flat_keyed)

    def hier(key: str) -> Optional[int]:
        # usage_in_bytes is hierarchical, so use the hierarchical total_* twins.
        return _key(stat, "total_" + key, r, "memory.stat")

    inactive = hier("inactive_file")
    # memory.oom_control gained oom_kill in kernel 4.13; older kernels have no kill count.
    kills = oom.get("oom_kill") if oom else None
    if oom is not None and kills is None:
        r.problems.append(Problem("memory.oom_control", "missing", "no oom_kill (kernel < 4.13)"))
    limit_value = None if limit is None else parse.limit_bytes(limit)
    return MemorySample(
        usage_bytes=usage,
        working_set_bytes=_working_set(usage, inactive),
        limit_bytes=limit_value,
        anon_bytes=hier("rss"),
        file_bytes=hier("cache"),
        inactive_file_bytes=inactive,
        shmem_bytes=stat.get("total_shmem", stat.get("shmem")) if stat else None,
        # total_swap exists only with swap accounting (swapaccount=1).
        swap_bytes=stat.get("total_swap", stat.get("swap")) if stat else None,
        oom_kills_total=kills,
        oom_events_total=None,
        peak_bytes=r.opt(folder, "memory.max_usage_in_bytes", parse.parse_uint),
        # docker run --memory-reservation (runc's Memory.Reservation) writes this file on
        # v1 and memory.low on v2; cAdvisor's reservation on v1 is this file too.
        low_bytes=_max_bytes(r.opt(folder, "memory.soft_limit_in_bytes", parse.parse_uint)),
        # A charge is refused (failcnt) only at this cgroup's own limit (page_counter_try_charge
        # counts the failure on the counter whose max it hit): frozen without a limit.
        failcnt=_counter(folder, r, "memory.failcnt", parse.parse_uint,
                         "no limit" if limit is not None and limit_value is None else None),
        pgmajfault_total=stat.get("total_pgmajfault") if stat else None,
        # total_workingset_refault_* since 5.9 (older kernels: absent, None)
        workingset_refault_anon_total=stat.get("total_workingset_refault_anon") if stat else None,
        workingset_refault_file_total=stat.get("total_workingset_refault_file") if stat else None,
        dirty_bytes=stat.get("total_dirty") if stat else None,
        writeback_bytes=stat.get("total_writeback") if stat else None,
    )


# -- block IO ----------------------------------------------------------------------------


_IO_MAX_KEYS = ("rbps", "wbps", "riops", "wiops")


def _io_limits_v2(folder: Folder, r: _Reader) -> Optional[Tuple[DeviceLimit, ...]]:
    table = r.opt(folder, "io.max", parse.parse_io_max)
    if table is None:
        return None
    return tuple(DeviceLimit(dev, *(table[dev].get(k) for k in _IO_MAX_KEYS))
                 for dev in sorted(table, key=_device_order))


_BLKIO_LIMIT_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                      "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device")


def _io_limits_v1(folder: Folder, r: _Reader) -> Optional[Tuple[DeviceLimit, ...]]:
    tables = [r.opt(folder, name, parse.parse_blkio_device_values) for name in _BLKIO_LIMIT_FILES]
    if any(t is None for t in tables):
        return None
    devices = set().union(*tables)  # type: ignore[arg-type]
    return tuple(DeviceLimit(dev, *(t.get(dev) for t in tables))  # type: ignore[union-attr]
                 for dev in sorted(devices, key=_device_order))


def _io_v2(folder: Folder, r: _Reader) -> IoSample:
    table = r.get(folder, "io.stat", parse.parse_io_stat)
    limits = _io_limits_v2(folder, r)
    if table is None:
        return IoSample(None, limits)
    devices = []
    for dev in sorted(table, key=_device_order):
        f = table[dev]
        devices.append(DeviceIo(dev, f.get("rbytes", 0), f.get("wbytes", 0), f.get("rios", 0),
                                f.get("wios", 0), f.get("dbytes"), f.get("dios")))
    # A device line with no keys carries no IO yet: its counters are 0, not unknown.
    return IoSample(tuple(devices), limits)


def _io_v1(folder: Folder, r: _Reader) -> IoSample:
    limits = _io_limits_v1(folder, r)
    for bytes_file, ops_file in _BLKIO_V1:
        if bytes_file in folder.files and ops_file in folder.files:
            nbytes = r.get(folder, bytes_file, parse.parse_blkio_v1)
            nops = r.get(folder, ops_file, parse.parse_blkio_v1)
            if nbytes is None or nops is None:
                return IoSample(None, limits)
            devices = []
            for dev in sorted(set(nbytes) | set(nops), key=_device_order):
                b = nbytes.get(dev, {})
                o = nops.get(dev, {})
                devices.append(DeviceIo(dev, b.get("Read", 0), b.get("Write", 0), o.get("Read", 0),
                                        o.get("Write", 0), b.get("Discard"), o.get("Discard")))
            return IoSample(tuple(devices), limits)
    r.problems.append(Problem("io", "missing", f"no blkio statistics files in blkio:{folder.path}"))
    return IoSample(None, limits)


def _device_order(dev: str):
    major, _, minor = dev.partition(":")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (1 << 32, 0)


# -- pids, pressure ----------------------------------------------------------------------


def _pids(folder: Folder, r: _Reader, cpu_seconds: Optional[float]) -> PidsSample:
    current = r.get(folder, "pids.current", parse.parse_uint)
    limit = r.get(folder, "pids.max", parse.parse_max_or_uint)
    if current == 0 and "cgroup.procs" in folder.files:
        # pids.current counts the tasks of the cgroup and all its descendants (pids.rst):
        # at 0 its cgroup.procs is empty too, so an empty cgroup (most slices, every idle
        # pod parent) costs one file less. Read in the other order the two could disagree
        # just the same (a task may join between the reads); 0 and 0 is one moment's view.
        # A descriptor kept while it had tasks is closed: slots go to files read each tick.
        processes: Optional[int] = 0
        if _kept_mounts.get(folder.hierarchy.mount_dir):
            KEPT.release(folder, "cgroup.procs")
    else:
        processes = r.get(folder, "cgroup.procs", _count_pids)
    # Only a task in the cgroup's subtree moves pids.peak and pids.events (a fork, refused
    # or not, or a move in). Empty now (pids.current 0) and its CPU time unchanged since
    # the value was read, found empty then too, no task has forked there in between (a
    # fork runs): an idle empty cgroup, as most are, costs no read of either.
    idle = cpu_seconds if current == 0 else None
    return PidsSample(current, limit, processes, _counter(folder, r, "pids.peak", parse.parse_uint, idle),
                      _counter(folder, r, "pids.events", _pids_events, idle))


def _counter(folder: Folder, r: _Reader, name: str, parser: Callable[[str], Optional[int]],
             frozen: Any) -> Optional[int]:
    """A counter file (absent: None, no problem) that can't move while the cgroup stays in
    the state `frozen` names (None: it may move). The value read in a state is kept and
    served while the cgroup is found in that same state, read again when it is not. v1
    raises no IN_MODIFY on these files, so they can't be slow files; this spares their
    read on most ticks."""
    if name not in folder.files:
        return None
    if not _kept_mounts.get(folder.hierarchy.mount_dir):
        return r.get(folder, name, parser)
    kept_as = FROZEN[name]
    if frozen is None:
        KEPT.modified(folder, kept_as)  # it may move now: what was kept is stale
        return r.get(folder, name, parser)
    known = KEPT.cached(folder, kept_as)
    if known is not handles.MISSING and known[0] == frozen:
        return known[1]  # type: ignore[no-any-return,unused-ignore]
    KEPT.release(folder, name)  # read no more each tick: its slot goes to others
    value = r._uncached(folder, name, parser, False)
    if value is not None:
        KEPT.keep(folder, kept_as, (frozen, value))
    return value


def _pids_events(text: str) -> Optional[int]:
    return parse.parse_flat_keyed(text, ("max",)).get("max")


def _count_pids(text: str) -> int:
    return len(parse.parse_pid_list(text))


def _pressure_sample(text: str) -> PressureSample:
    """A PSI file as a PressureSample (seconds for the totals); ValueError as parse_pressure."""
    m = parse.PSI_FILE.fullmatch(text)
    if m is not None:  # the kernel's own two lines: no intermediate tables
        g = m.groups()
        some_total, full_total = int(g[3]), int(g[7])
        if some_total <= parse.U64_MAX and full_total <= parse.U64_MAX:
            # Most averages read 0.00 (no stall in the last 10 s to 5 min): one shared float.
            a = [0.0 if x == "0.00" else float(x) for x in g]
            return PressureSample(a[0], a[1], a[2], some_total / US if some_total else 0.0,
                                  a[4], a[5], a[6], full_total / US if full_total else 0.0)
    table = parse.parse_pressure(text)
    some = table["some"]
    full = table.get("full")
    return PressureSample(
        some["avg10"], some["avg60"], some["avg300"], some["total"] / US,
        full["avg10"] if full else None, full["avg60"] if full else None,
        full["avg300"] if full else None, full["total"] / US if full else None,
    )


# -- one cgroup --------------------------------------------------------------------------

_PRESSURE_FILES = tuple((resource, resource + ".pressure") for resource in PRESSURE_RESOURCES)
_NO_CPU = CpuSample()
_NO_MEMORY = MemorySample()
_NO_IO = IoSample(None)
_NO_PIDS = PidsSample()
_NO_PRESSURE: Dict[str, Optional[PressureSample]] = {resource: None for resource in PRESSURE_RESOURCES}

_NO_PSI = Problem("pressure", "unavailable", "no PSI files for this cgroup (cgroup v1, or kernel without PSI)")

_NOT_ABSENT = Problem("", "", "")  # in a plan's place of a controller the cgroup has; never reported
# A controller the cgroup has no folder for (v1), or that its parent does not enable (v2).
# One shared Problem per controller: the record names the cgroup, and a copy per cgroup
# with its path in the text was ~0.45 KiB kept per cgroup (0.9 MiB at 1,000 empty ones).
_ABSENT = {c: Problem(c, "unavailable", f"no {c} cgroup at this path") for c in ("cpu", "memory", "io", "pids")}
_ABSENT_TUPLES: Dict[Tuple[str, ...], Tuple[Problem, ...]] = {}

# (layout, cpuacct, cpu, unified, memory, blkio, pids folder, the "unavailable" problem of
# cpu, memory, io and pids) of one cgroup
_Plan = Tuple[Layout, Optional[Folder], Optional[Folder], Optional[Folder], Optional[Folder],
              Optional[Folder], Optional[Folder], Tuple[Problem, ...]]


def _plan(cg: Cgroup, layout: Layout) -> _Plan:
    """The cgroup's folder for each controller read, and the problems that say which it
    has none of, found once per Cgroup (the walk keeps a Cgroup from tick to tick while
    its folders, and so their file names, stay the same)."""
    plan: Optional[_Plan] = cg.memo
    if plan is not None and plan[0] is layout:
        return plan

    def folder_of(controller: str) -> Optional[Folder]:
        h = layout.find(controller)
        return cg.folder(h) if h is not None else None

    unified_h = layout.unified
    acct, cpu, mem, blk, pids = (folder_of(c) for c in ("cpuacct", "cpu", "memory", "blkio", "pids"))
    unified = cg.folder(unified_h) if unified_h else None
    if layout.kind == "v2":
        # v2 shows a controller's files only where the parent enables it in
        # cgroup.subtree_control: no marker file, no controller.
        files = unified.files if unified is not None else None
        missing = [c for c, marker in (("memory", "memory.current"), ("io", "io.stat"), ("pids", "pids.current"))
                   if files is not None and marker not in files]
    else:
        missing = [c for c, f in (("cpu", acct or cpu or unified), ("memory", mem), ("io", blk), ("pids", pids))
                   if f is None]
    # A tuple (cpu, memory, io, pids) rather than a dict: one per cgroup read, kept.
    key = tuple(missing)
    absent = _ABSENT_TUPLES.get(key)
    if absent is None:  # at most 16 of them, shared by every cgroup missing the same
        absent = _ABSENT_TUPLES[key] = tuple(_ABSENT[c] if c in missing else _NOT_ABSENT
                                             for c in ("cpu", "memory", "io", "pids"))
    plan = (layout, acct, cpu, unified, mem, blk, pids, absent)
    cg.remember(plan)
    return plan


def read_cgroup(cg: Cgroup, layout: Layout, time_s: float, wall_s: float) -> Sample:
    problems: List[Problem] = []
    r = _Reader(problems)
    _layout, acct, cpu_f, unified, mem_f, blk_f, pids_f, absent = _plan(cg, layout)

    if layout.kind == "v2":
        # A controller not enabled for this cgroup: null, with the reason (see _plan).
        cpu = _cpu_v2(unified, r) if unified else _NO_CPU
        memory, io, pids = _NO_MEMORY, _NO_IO, _NO_PIDS
        if unified is not None:
            files = unified.files
            if "memory.current" in files:
                memory = _memory_v2(unified, r)
            else:
                problems.append(absent[1])
            if "io.stat" in files:
                io = _io_v2(unified, r)
            else:
                problems.append(absent[2])
            if "pids.current" in files:
                pids = _pids(unified, r, cpu.usage_seconds_total)
            else:
                problems.append(absent[3])
    else:
        if acct is None and cpu_f is None and unified is None:
            problems.append(absent[0])
        cpu = _cpu_v1(acct, cpu_f, unified, r)
        memory = _memory_v1(mem_f, r) if mem_f else _NO_MEMORY
        io = _io_v1(blk_f, r) if blk_f else _NO_IO
        pids = _pids(pids_f, r, cpu.usage_seconds_total) if pids_f else _NO_PIDS
        if mem_f is None:
            problems.append(absent[1])
        if blk_f is None:
            problems.append(absent[2])
        if pids_f is None:
            problems.append(absent[3])

    pressure: Dict[str, Optional[PressureSample]] = _NO_PRESSURE  # read only (record.py)
    any_pressure = False
    if unified is not None:
        pressure = {}
        for resource, name in _PRESSURE_FILES:
            value = None
            if name in unified.files:
                value = r.get(unified, name, _pressure_sample)
                any_pressure = any_pressure or value is not None
            pressure[resource] = value
    if not any_pressure and not any(p.source.endswith(".pressure") for p in problems):
        problems.append(_NO_PSI)

    return Sample(cg.path, cg.paths, cg.inodes, time_s, wall_s, cpu, memory, io, pids,
                  pressure, tuple(problems), gone=r.gone)
