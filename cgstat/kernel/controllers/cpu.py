"""The CPU controller's files of one cgroup, as a CpuSample.

Reads (v2) cpu.stat, cpu.max, cpu.weight, cpu.max.burst, cpuset.{cpus,mems}.effective;
(v1) cpuacct.usage, cpuacct.stat, cpu.stat, cpu.cfs_quota_us, cpu.cfs_period_us,
cpu.shares, cpu.cfs_burst_us, or on a hybrid host without cpuacct the cgroup2 cpu.stat.
"""

from __future__ import annotations

from typing import Optional, Tuple

from cgstat.kernel import parse
from cgstat.kernel.cachekeys import KEYS
from cgstat.kernel.controllers.files import NS, US, USER_HZ, FileReader, key, scaled
from cgstat.kernel.sample import CpuSample
from cgstat.kernel.tree import Folder

# Kept as values (kernel/cachekeys.py): limits and weights change only when written; the
# effective cpusets until the folder's rescan.
KEYS.slow_files("cpu.max", "cpu.weight", "cpu.max.burst", "cpuset.cpus.effective", "cpuset.mems.effective",
                "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares", "cpu.cfs_burst_us")
# the files _settings_v1 reads, kept as one value
CPU_SETTINGS_V1 = KEYS.derived("cpu settings", ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares",
                                                "cpu.cfs_burst_us"))


def cpu_v2(folder: Folder, r: FileReader) -> CpuSample:
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
    throttled_us = key(stat, "throttled_usec", r, "cpu.stat") if controller else None
    return CpuSample(
        usage_seconds_total=scaled(key(stat, "usage_usec", r, "cpu.stat"), US),
        user_seconds_total=scaled(key(stat, "user_usec", r, "cpu.stat"), US),
        system_seconds_total=scaled(key(stat, "system_usec", r, "cpu.stat"), US),
        limit_cores=limit,
        periods_total=key(stat, "nr_periods", r, "cpu.stat") if controller else None,
        throttled_periods_total=key(stat, "nr_throttled", r, "cpu.stat") if controller else None,
        throttled_seconds_total=scaled(throttled_us, US),
        quota_us=quota_us,
        period_us=period_us,
        weight=r.opt(folder, "cpu.weight", parse.parse_uint),
        max_burst_us=r.opt(folder, "cpu.max.burst", parse.parse_uint),
        cpuset_cpus=r.opt(folder, "cpuset.cpus.effective", parse.parse_cpuset_list),
        cpuset_mems=r.opt(folder, "cpuset.mems.effective", parse.parse_cpuset_list),
    )


def cpu_v1(acct: Optional[Folder], cpu: Optional[Folder], unified: Optional[Folder], r: FileReader) -> CpuSample:
    usage = user = system = weight = shares = burst = None
    if acct is not None:
        usage = scaled(r.get(acct, "cpuacct.usage", parse.parse_uint), NS)
        ticks = r.get(acct, "cpuacct.stat", parse.parse_flat_keyed)
        user = scaled(key(ticks, "user", r, "cpuacct.stat"), USER_HZ)
        system = scaled(key(ticks, "system", r, "cpuacct.stat"), USER_HZ)
    elif unified is not None:
        # Hybrid: the cgroup2 side always has cpu.stat with usage (kernel >= 4.15).
        stat = r.get(unified, "cpu.stat", parse.parse_flat_keyed)
        usage = scaled(key(stat, "usage_usec", r, "cpu.stat"), US)
        user = scaled(key(stat, "user_usec", r, "cpu.stat"), US)
        system = scaled(key(stat, "system_usec", r, "cpu.stat"), US)
    limit = periods = throttled = throttled_s = quota_us = period = None
    if cpu is not None:
        folder = cpu
        limit, quota_us, period, weight, shares, burst = r.derived(cpu, CPU_SETTINGS_V1, lambda: _settings_v1(folder, r))
        stat = r.get(cpu, "cpu.stat", parse.parse_flat_keyed)
        periods = key(stat, "nr_periods", r, "cpu.stat")
        throttled = key(stat, "nr_throttled", r, "cpu.stat")
        throttled_s = scaled(key(stat, "throttled_time", r, "cpu.stat"), NS)
    # cpusets: v1 keeps them in the cpuset hierarchy, which is not followed (null there).
    return CpuSample(usage, user, system, limit, periods, throttled, throttled_s, quota_us, period,
                     weight, shares, burst)



def _settings_v1(cpu: Folder, r: FileReader) -> Tuple[Optional[float], Optional[int], Optional[int],
                                                      Optional[int], Optional[int], Optional[int]]:
    """(limit in cores, quota_us, period_us, weight, shares, burst_us) from the v1 cpu files."""
    limit = quota_us = None
    quota = r.get(cpu, "cpu.cfs_quota_us", parse.parse_int)
    period = r.get(cpu, "cpu.cfs_period_us", parse.parse_uint)
    if quota is not None and quota > 0 and period:
        limit = quota / period  # quota -1 means no limit
        quota_us = quota
    shares = r.opt(cpu, "cpu.shares", parse.parse_uint)
    weight = None if shares is None else parse.shares_to_weight(shares)
    return limit, quota_us, period, weight, shares, r.opt(cpu, "cpu.cfs_burst_us", parse.parse_uint)
