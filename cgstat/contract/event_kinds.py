"""Every kind of diagnostics event, once: the event schema's `kind` enum (cgstat/contract/fields.py)
and top's EVENTS column are made from this table, and each rule class
(cgstat/events/) names one of these kinds. Reads no file; imports nothing, so
that a cron run judging events does not build the field table for it."""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple


class EventKind(NamedTuple):
    name: str
    mark: str  # what `cgstat top` shows in its EVENTS column while an episode is open


TABLE: Tuple[EventKind, ...] = (
    EventKind("oom_kill", "oom"),
    EventKind("memory_near_limit", "near-limit"),
    EventKind("memory_growth", "mem-growth"),
    EventKind("cpu_throttled", "throttled"),
    EventKind("gpu_idle_cpu_bound", "input-bound"),
    EventKind("memory_high_throttled", "memory_high_throttled"),
    EventKind("pids_limit_hit", "pids_limit_hit"),
    EventKind("gpu_process_outside_container", "gpu-outside"),
    EventKind("gpu_held_idle", "gpu-held-idle"),
    EventKind("gpu_xid", "gpu_xid"),
    EventKind("gpu_throttled", "gpu_throttled"),
    EventKind("gpu_ecc_uncorrected", "gpu_ecc_uncorrected"),
    EventKind("gpu_row_remap_pending", "gpu_row_remap_pending"),
    EventKind("gpu_row_remap_failure", "gpu_row_remap_failure"),
)

EVENT_KINDS: Tuple[str, ...] = tuple(k.name for k in TABLE)
"""Every kind a rule raises, in the order a cgroup's (then a tick's GPU) events come in."""

RESOLVED = "resolved"  # the kind of the notice that ends an episode

MARKS: Dict[str, str] = {k.name: k.mark for k in TABLE}
