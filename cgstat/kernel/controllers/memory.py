"""The memory (and hugetlb) controller's files of one cgroup, as a MemorySample.

Reads (v2) memory.current, memory.max, memory.high, memory.low, memory.min, memory.peak,
memory.stat, memory.events, memory.events.local, memory.oom.group, memory.swap.current,
memory.swap.max, memory.swap.peak, memory.swap.events, memory.zswap.current,
hugetlb.<size>.current; (v1) memory.usage_in_bytes, memory.limit_in_bytes,
memory.max_usage_in_bytes, memory.failcnt, memory.soft_limit_in_bytes, memory.stat,
memory.oom_control.
"""

from __future__ import annotations

import functools
from typing import Dict, Optional, Tuple

from cgstat.contract.keys import MemoryStat
from cgstat.kernel import parse
from cgstat.kernel.cachekeys import KEYS
from cgstat.kernel.controllers.files import FileReader, key
from cgstat.kernel.sample import MemoryEvents, MemorySample, Problem, SwapEvents
from cgstat.kernel.tree import Folder


def _working_set(usage: Optional[int], inactive_file: Optional[int]) -> Optional[int]:
    # docker stats' MEM USAGE and cAdvisor's working set: usage minus inactive page
    # cache, clamped at 0 (docker/cli#2415, containers/common#2454).
    if usage is None or inactive_file is None:
        return None
    return max(0, usage - inactive_file)


# The memory.stat keys a record uses (the file has ~40-50; see parse_flat_keyed's `only`):
# those read here, and the counters the field table says are read as they are
# (contract/keys.py MemoryStat, made from it: a new one needs no code here).
_MEMORY_STAT_V1 = ("total_inactive_file", "total_rss", "total_cache", "total_shmem", "shmem",
                   "total_swap", "swap") + tuple(k for k in MemoryStat.V1 if k)
_MEMORY_STAT_V2 = ("inactive_file", "anon", "file", "shmem") + MemoryStat.V2
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


def _hugetlb_v2(folder: Folder, r: FileReader) -> Optional[int]:
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


@functools.lru_cache(maxsize=256)
def _hugetlb_names(files: frozenset) -> Tuple[str, ...]:
    # A pure function of a folder's names, memoised: folders share their sets of names.
    return tuple(sorted(
        n for n in files if n.startswith("hugetlb.") and n.endswith(".current") and n.count(".") == 2))


# A parsed memory.stat is its keys and the record's `stat` values in MemoryStat's order,
# made together: files that read the same share one parsed value (FileReader), so the
# idle cgroups' samples share one tuple too instead of making one a cgroup a tick.
_Stat = Tuple[Dict[str, Optional[int]], Tuple[Optional[int], ...]]


def _memory_stat_v1(text: str) -> _Stat:
    stat = parse.parse_flat_keyed(text, _MEMORY_STAT_V1)
    return stat, tuple(map(stat.get, MemoryStat.V1))


def _memory_stat_v2(text: str) -> _Stat:
    stat = parse.parse_flat_keyed(text, _MEMORY_STAT_V2)
    return stat, tuple(map(stat.get, MemoryStat.V2))


def memory_v2(folder: Folder, r: FileReader) -> MemorySample:
    usage = r.get(folder, "memory.current", parse.parse_uint)
    limit = r.get(folder, "memory.max", parse.parse_max_or_uint)
    parsed = r.get(folder, "memory.stat", _memory_stat_v2)
    stat, stat_values = (None, None) if parsed is None else parsed
    events = r.get(folder, "memory.events", parse.parse_flat_keyed)
    swap = r.get(folder, "memory.swap.current", parse.parse_uint)
    inactive = key(stat, "inactive_file", r, "memory.stat")
    settings = r.derived(folder, SETTINGS_V2, lambda: _settings_v2(folder, r))
    return MemorySample(
        usage_bytes=usage,
        working_set_bytes=_working_set(usage, inactive),
        limit_bytes=None if limit is None else parse.limit_bytes(limit),
        anon_bytes=key(stat, "anon", r, "memory.stat"),
        file_bytes=key(stat, "file", r, "memory.stat"),
        inactive_file_bytes=inactive,
        shmem_bytes=stat.get("shmem") if stat else None,
        swap_bytes=swap,
        # oom_kill appeared in 4.13; "oom" counts OOM situations, kills or not.
        oom_kills_total=key(events, "oom_kill", r, "memory.events"),
        oom_events_total=events.get("oom") if events else None,
        peak_bytes=r.opt(folder, "memory.peak", parse.parse_uint),
        swap_peak_bytes=r.opt(folder, "memory.swap.peak", parse.parse_uint),
        high_bytes=settings[0],
        low_bytes=settings[1],
        min_bytes=settings[2],
        swap_limit_bytes=settings[3],
        zswap_bytes=r.opt(folder, "memory.zswap.current", parse.parse_uint),
        events=None if events is None else MemoryEvents(*map(events.get, _EVENTS_KEYS)),
        events_local=r.opt(folder, "memory.events.local", _memory_events),
        swap_events=r.opt(folder, "memory.swap.events", _swap_events),
        stat=stat_values,
        hugetlb_bytes=_hugetlb_v2(folder, r),
        oom_group=settings[4],
    )


# Kept as values (kernel/cachekeys.py): limits and protections change only when written;
# the kernel notifies memory.events.local and memory.swap.events on every change.
KEYS.slow_files("memory.max", "memory.high", "memory.low", "memory.min", "memory.swap.max", "memory.oom.group",
                "memory.events.local", "memory.swap.events", "memory.limit_in_bytes", "memory.soft_limit_in_bytes")
# the files _settings_v2 reads, kept as one value
SETTINGS_V2 = KEYS.derived("memory settings", ("memory.high", "memory.low", "memory.min", "memory.swap.max",
                                               "memory.oom.group"))
# v1 memory.failcnt while the cgroup has no limit: nothing can fail a charge
FAILCNT_FROZEN = KEYS.frozen("memory.failcnt")


def _settings_v2(folder: Folder, r: FileReader) -> Tuple[Optional[int], Optional[int], Optional[int],
                                                         Optional[int], Optional[bool]]:
    """memory.high, .low, .min and .swap.max in bytes (None: no limit or no file), and
    memory.oom.group."""
    return (_max_bytes(r.opt(folder, "memory.high", parse.parse_max_or_uint)),
            _max_bytes(r.opt(folder, "memory.low", parse.parse_max_or_uint)),
            _max_bytes(r.opt(folder, "memory.min", parse.parse_max_or_uint)),
            _max_bytes(r.opt(folder, "memory.swap.max", parse.parse_max_or_uint)),
            r.opt(folder, "memory.oom.group", parse.parse_bool01))


def memory_v1(folder: Folder, r: FileReader) -> MemorySample:
    usage = r.get(folder, "memory.usage_in_bytes", parse.parse_uint)
    limit = r.get(folder, "memory.limit_in_bytes", parse.parse_uint)
    parsed = r.get(folder, "memory.stat", _memory_stat_v1)
    stat, stat_values = (None, None) if parsed is None else parsed
    oom = r.get(folder, "memory.oom_control", parse.parse_flat_keyed)

    def hier(name: str) -> Optional[int]:
        # usage_in_bytes is hierarchical, so use the hierarchical total_* twins.
        return key(stat, "total_" + name, r, "memory.stat")

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
        peak_bytes=r.opt(folder, "memory.max_usage_in_bytes", parse.parse_uint),
        # docker run --memory-reservation (runc's Memory.Reservation) writes this file on
        # v1 and memory.low on v2; cAdvisor's reservation on v1 is this file too.
        low_bytes=_max_bytes(r.opt(folder, "memory.soft_limit_in_bytes", parse.parse_uint)),
        # A charge is refused (failcnt) only at this cgroup's own limit (page_counter_try_charge
        # counts the failure on the counter whose max it hit): it can't move without a limit.
        failcnt=r.counter(folder, FAILCNT_FROZEN, parse.parse_uint,
                          "no limit" if limit is not None and parse.limit_bytes(limit) is None else None),
        # the hierarchical total_* twins (total_workingset_refault_* since 5.9: older kernels
        # lack them, None); "" for a counter v1 does not have
        stat=stat_values,
    )
