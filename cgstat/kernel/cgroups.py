"""Read one cgroup's controller files into a raw Sample.

Files read (cgroup v2, Documentation/admin-guide/cgroup-v2.rst):
  cpu.stat, cpu.max, memory.current, memory.max, memory.stat, memory.events,
  memory.swap.current, io.stat, pids.current, pids.max, {cpu,memory,io}.pressure
Files read (cgroup v1, Documentation/admin-guide/cgroup-v1/):
  cpuacct.usage, cpuacct.stat, cpu.stat, cpu.cfs_quota_us, cpu.cfs_period_us,
  memory.usage_in_bytes, memory.limit_in_bytes, memory.stat, memory.oom_control,
  blkio.throttle.io_service_bytes_recursive, blkio.throttle.io_serviced_recursive
  (or the fallbacks below), pids.current, pids.max
On hybrid hosts the cgroup2 hierarchy at /sys/fs/cgroup/unified adds cpu.stat (CPU time
when no cpuacct folder exists) and the pressure files.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from cgstat.kernel import handles, parse
from cgstat.kernel.handles import KEPT, SLOW_FILES
from cgstat.kernel.hierarchy import Hierarchy, Layout
from cgstat.kernel.hostfs import Gone, ReadError, read_text
from cgstat.kernel.sample import (
    PRESSURE_RESOURCES,
    CpuSample,
    DeviceIo,
    IoSample,
    MemorySample,
    PidsSample,
    PressureSample,
    Problem,
    Sample,
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
        kept = _keeps(folder)
        slow = kept and name in SLOW_FILES
        if slow:
            known = KEPT.cached(folder.local, folder.inode, name)
            if known is not None:
                return known[0]  # type: ignore[no-any-return,unused-ignore]
        try:
            if kept and not slow:
                text = KEPT.read(folder.local, folder.inode, name).decode("utf-8")
            else:  # a recorded tree, or a file read once a minute: no descriptor kept
                text = read_text(folder.local + "/" + name)
        except ReadError as exc:
            if isinstance(exc, Gone):
                self.gone = True
            self.problems.append(Problem(name, exc.code, exc.detail))
            return None
        except UnicodeDecodeError:
            self.problems.append(Problem(name, "malformed", "not UTF-8 text"))
            return None
        try:
            value = parser(text)
        except ValueError as exc:
            self.problems.append(Problem(name, "malformed", str(exc)))
            return None
        if slow:
            KEPT.keep(folder.local, folder.inode, name, value)
        return value


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
    )


def _cpu_v1(acct: Optional[Folder], cpu: Optional[Folder], unified: Optional[Folder], r: _Reader) -> CpuSample:
    usage = user = system = None
    if acct is not None:
        usage = _scaled(r.get(acct, "cpuacct.usage", parse.parse_uint), NS)
        ticks = r.get(acct, "cpuacct.stat", parse.parse_flat_keyed)
        user = _scaled(_key(ticks, "user", r, "cpuacct.stat"), USER_HZ)
        system = _scaled(_key(ticks, "system", r, "cpuacct.stat"), USER_HZ)
    elif unified is not None:
        # Hybrid: the cgroup2 side always has cpu.stat with usage (kernel >= 4.15).
        u = _cpu_v2(unified, r)
        usage, user, system = u.usage_seconds_total, u.user_seconds_total, u.system_seconds_total
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
    return CpuSample(usage, user, system, limit, periods, throttled, throttled_s, quota_us, period)


# -- memory ------------------------------------------------------------------------------


def _working_set(usage: Optional[int], inactive_file: Optional[int]) -> Optional[int]:
    # docker stats' MEM USAGE and cAdvisor's working set: usage minus inactive page
    # cache, clamped at 0 (docker/cli#2415, containers/common#2454).
    if usage is None or inactive_file is None:
        return None
    return max(0, usage - inactive_file)


def _memory_v2(folder: Folder, r: _Reader) -> MemorySample:
    usage = r.get(folder, "memory.current", parse.parse_uint)
    limit = r.get(folder, "memory.max", parse.parse_max_or_uint)
    stat = r.get(folder, "memory.stat", parse.parse_flat_keyed)
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
    )


def _memory_v1(folder: Folder, r: _Reader) -> MemorySample:
    usage = r.get(folder, "memory.usage_in_bytes", parse.parse_uint)
    limit = r.get(folder, "memory.limit_in_bytes", parse.parse_uint)
    stat = r.get(folder, "memory.stat", parse.parse_flat_keyed)
    oom = r.get(folder, "memory.oom_control", parse.parse_flat_keyed)

    def hier(key: str) -> Optional[int]:
        # usage_in_bytes is hierarchical, so use the hierarchical total_* twins.
        return _key(stat, "total_" + key, r, "memory.stat")

    inactive = hier("inactive_file")
    # memory.oom_control gained oom_kill in kernel 4.13; older kernels have no kill count.
    kills = oom.get("oom_kill") if oom else None
    if oom is not None and kills is None:
        r.problems.append(Problem("memory.oom_control", "missing", "no oom_kill (kernel < 4.13)"))
    return MemorySample(
        usage_bytes=usage,
        working_set_bytes=_working_set(usage, inactive),
        limit_bytes=None if limit is None else parse.limit_bytes(limit),
        anon_bytes=hier("rss"),
        file_bytes=hier("cache"),
        inactive_file_bytes=inactive,
        shmem_bytes=stat.get("total_shmem", stat.get("shmem")) if stat else None,
        # total_swap exists only with swap accounting (swapaccount=1).
        swap_bytes=stat.get("total_swap", stat.get("swap")) if stat else None,
        oom_kills_total=kills,
        oom_events_total=None,
    )


# -- block IO ----------------------------------------------------------------------------


def _io_v2(folder: Folder, r: _Reader) -> IoSample:
    table = r.get(folder, "io.stat", parse.parse_io_stat)
    if table is None:
        return IoSample(None)
    devices = []
    for dev in sorted(table, key=_device_order):
        f = table[dev]
        devices.append(DeviceIo(dev, f.get("rbytes", 0), f.get("wbytes", 0), f.get("rios", 0),
                                f.get("wios", 0), f.get("dbytes"), f.get("dios")))
    # A device line with no keys carries no IO yet: its counters are 0, not unknown.
    return IoSample(tuple(devices))


def _io_v1(folder: Folder, r: _Reader) -> IoSample:
    for bytes_file, ops_file in _BLKIO_V1:
        if bytes_file in folder.files and ops_file in folder.files:
            nbytes = r.get(folder, bytes_file, parse.parse_blkio_v1)
            nops = r.get(folder, ops_file, parse.parse_blkio_v1)
            if nbytes is None or nops is None:
                return IoSample(None)
            devices = []
            for dev in sorted(set(nbytes) | set(nops), key=_device_order):
                b = nbytes.get(dev, {})
                o = nops.get(dev, {})
                devices.append(DeviceIo(dev, b.get("Read", 0), b.get("Write", 0), o.get("Read", 0),
                                        o.get("Write", 0), b.get("Discard"), o.get("Discard")))
            return IoSample(tuple(devices))
    r.problems.append(Problem("io", "missing", f"no blkio statistics files in blkio:{folder.path}"))
    return IoSample(None)


def _device_order(dev: str):
    major, _, minor = dev.partition(":")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (1 << 32, 0)


# -- pids, pressure ----------------------------------------------------------------------


def _pids(folder: Folder, r: _Reader) -> PidsSample:
    return PidsSample(r.get(folder, "pids.current", parse.parse_uint),
                      r.get(folder, "pids.max", parse.parse_max_or_uint),
                      r.get(folder, "cgroup.procs", _count_pids))


def _count_pids(text: str) -> int:
    return len(parse.parse_pid_list(text))


def _pressure(folder: Folder, resource: str, r: _Reader) -> Optional[PressureSample]:
    table = r.get(folder, resource + ".pressure", parse.parse_pressure)
    if table is None:
        return None
    some = table["some"]
    full = table.get("full")
    return PressureSample(
        some["avg10"], some["avg60"], some["avg300"], some["total"] / US,
        full["avg10"] if full else None, full["avg60"] if full else None,
        full["avg300"] if full else None, full["total"] / US if full else None,
    )


# -- one cgroup --------------------------------------------------------------------------


_by_layout: Dict[int, Tuple[Layout, Dict[str, Optional[Hierarchy]]]] = {}


def _controllers(layout: Layout) -> Dict[str, Optional[Hierarchy]]:
    """layout.find() of each controller read, computed once per layout."""
    known = _by_layout.get(id(layout))
    if known is None or known[0] is not layout:
        if len(_by_layout) > 16:
            _by_layout.clear()
        known = _by_layout[id(layout)] = (layout, {c: layout.find(c) for c in
                                                   ("cpu", "cpuacct", "memory", "blkio", "pids")})
    return known[1]


def read_cgroup(cg: Cgroup, layout: Layout, time_s: float, wall_s: float) -> Sample:
    problems: List[Problem] = []
    r = _Reader(problems)
    unified_h = layout.unified
    unified = cg.folder(unified_h) if unified_h else None

    found = _controllers(layout)

    def folder_of(controller: str) -> Optional[Folder]:
        h = found.get(controller)
        return cg.folder(h) if h is not None else None

    def absent(controller: str) -> None:
        problems.append(Problem(controller, "unavailable", f"no {controller} cgroup for {cg.path}"))

    def enabled(folder: Optional[Folder], marker: str, controller: str,
                read: Callable[[Folder, _Reader], T], empty: T) -> T:
        # v2 shows a controller's files only where the parent enables it in
        # cgroup.subtree_control: no marker file, no controller (null, with the reason).
        if folder is None:
            return empty
        if marker not in folder.files:
            absent(controller)
            return empty
        return read(folder, r)

    if layout.kind == "v2":
        cpu = _cpu_v2(unified, r) if unified else CpuSample()
        memory = enabled(unified, "memory.current", "memory", _memory_v2, MemorySample())
        io = enabled(unified, "io.stat", "io", _io_v2, IoSample(None))
        pids = enabled(unified, "pids.current", "pids", _pids, PidsSample())
    else:
        acct, cpu_f = folder_of("cpuacct"), folder_of("cpu")
        if acct is None and cpu_f is None and unified is None:
            absent("cpu")
        cpu = _cpu_v1(acct, cpu_f, unified, r)
        mem_f, blk_f, pids_f = folder_of("memory"), folder_of("blkio"), folder_of("pids")
        memory = _memory_v1(mem_f, r) if mem_f else MemorySample()
        io = _io_v1(blk_f, r) if blk_f else IoSample(None)
        pids = _pids(pids_f, r) if pids_f else PidsSample()
        for name, f in (("memory", mem_f), ("io", blk_f), ("pids", pids_f)):
            if f is None:
                absent(name)

    pressure: Dict[str, Optional[PressureSample]] = {}
    for resource in PRESSURE_RESOURCES:
        has = unified is not None and (resource + ".pressure") in unified.files
        pressure[resource] = _pressure(unified, resource, r) if unified is not None and has else None
    if not any(v is not None for v in pressure.values()) and not any(
        p.source.endswith(".pressure") for p in problems
    ):
        problems.append(Problem("pressure", "unavailable", "no PSI files for this cgroup (cgroup v1, or kernel without PSI)"))

    return Sample(cg.path, cg.paths, cg.inodes, time_s, wall_s, cpu, memory, io, pids,
                  pressure, tuple(problems), gone=r.gone)
