"""Events between two separate runs (`once --state`): each rule's own `judge_runs` over
this run's records against what the previous run kept, and the kernel log since then.

A run keeps, per cgroup, its named sample (state_extras: window.WindowSample by name, small and
JSON-able); the next run judges every cgroup record that has one of the same life of the
cgroup (a non-null `interval_s`) as a window of those two samples, the time between them
its span (rules.py, gpu.py). So a cron run reports each counter event since the last run
once: the OOM kills (the counters' rises and the kernel log's reports, events/kills.py,
also of cgroups gone in between), forks refused at pids.max, throttling at memory.high and
at the CPU quota, a working set that crossed the near-limit line, and the XIDs the NVIDIA
driver logged. No resolved notices: nothing but the samples is kept between runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Tuple

from cgstat.events.case import Case, History
from cgstat.events.event import deepest_only
from cgstat.events.kills import OomLedger, Rise
from cgstat.events.rules import CGROUP_RULES, GPU_RULES
from cgstat.events.thresholds import Thresholds
from cgstat.events.window import WindowSample, Window, sample_of
from cgstat.units import finite
from cgstat.timestamps import rfc3339

if TYPE_CHECKING:
    from cgstat.kernel.xid_report import XidReport
    from cgstat.naming.oom_victims import NamedKill
    from cgstat.contract.types import EventRecord


def _cgroup_records(records: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    return (r for r in records if r.get("type") in ("cgroup", "pod") and isinstance(r.get("cgroup"), str))


def state_extras(records: Iterable[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """What `once --state` keeps per cgroup for judge_runs next time: its sample, by name."""
    return {r["cgroup"]: sample_of(r)._asdict() for r in _cgroup_records(records)}


def _kept(p: Any) -> Optional[WindowSample]:
    """The previous run's sample: as state_extras kept it, or a whole record."""
    if not isinstance(p, Mapping):
        return None
    return sample_of(p) if "memory" in p or "cpu" in p else WindowSample.from_dict(p)


def judge_runs(previous: Mapping[str, Mapping[str, Any]], records: Iterable[Mapping[str, Any]],
               thresholds: Optional[Thresholds] = None, kills: Optional[List[NamedKill]] = None,
               xids: Optional[List[XidReport]] = None) -> List[EventRecord]:
    """The events between two runs: `previous` maps cgroup path -> what state_extras kept
    last time (a full record is accepted too); `records` are this run's (cgroup, pod and
    GPU records); `kills`: the kernel log's OOM kills since the last run (Sampler.kills),
    also of cgroups gone since; `xids`: the XIDs it carried (Sampler.xids)."""
    th = thresholds or Thresholds()
    rules = [rule(th) for rule in CGROUP_RULES]
    events: List[EventRecord] = []
    rises: List[Rise] = []
    first_totals: Dict[str, float] = {}
    hierarchical: List[Tuple[str, EventRecord]] = []
    gpu_records: List[Mapping[str, Any]] = []
    stamp: Optional[Mapping[str, Any]] = None
    for r in records:
        if r.get("type") == "gpu":
            gpu_records.append(r)
            continue
        if r.get("type") not in ("cgroup", "pod") or not isinstance(r.get("cgroup"), str):
            continue
        stamp = stamp or r
        sample = sample_of(r)
        interval = finite(r.get("interval_s"))
        before = _kept(previous.get(r["cgroup"])) if interval is not None else None
        span = interval if interval is not None and interval > 0 else 0.0
        window = Window.of([(0.0, before), (span, sample)]) if before is not None and span > 0 else None
        case = Case(r, span, sample, before, window, History(), events, rises, hierarchical, first_totals)
        for rule in rules:
            rule.judge_runs(case)
    events.extend(deepest_only(hierarchical))
    ts = stamp.get("ts") if stamp is not None else rfc3339(time.time())
    host = stamp.get("host") if stamp is not None else None
    if rises or kills:
        events.extend(OomLedger().judge(rises, kills or [], ts, host, first_totals))
    if xids:
        at = stamp or (gpu_records[0] if gpu_records else {"ts": ts, "host": host})
        for gpu_rule in GPU_RULES:
            gpu_rule(th).judge_runs(gpu_records, list(xids), at, events)
    return events
