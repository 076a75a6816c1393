"""What two separate runs can judge (`once --state`): OOM kills between the runs (the
counters' rises and the kernel log's kills since the last run, kills.py) and a working set
that crossed the near-limit line; and what a run keeps for the next."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional

from cgstat.pipeline.events.event import cap, make_event, who
from cgstat.pipeline.events.kills import OomLedger, Rise
from cgstat.pipeline.events.thresholds import Thresholds
from cgstat.pipeline.record import number_at
from cgstat.timestamps import rfc3339
from cgstat.units import mib

if TYPE_CHECKING:
    from cgstat.records import EventRecord
    from cgstat.naming.kills import NamedKill

# the record fields read by path (tests/test_fields.py checks each is in the field table;
# the table itself is not imported here: a cron run would build it for three paths)
_MEMORY_LIMIT_BYTES = ("memory", "limit_bytes")
_MEMORY_OOM_KILLS_TOTAL = ("memory", "oom_kills_total")
_MEMORY_WORKING_SET_BYTES = ("memory", "working_set_bytes")


def state_extras(records: Iterable[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """What `once --state` should keep per cgroup for judge_runs next time (small, JSON-able)."""
    out: Dict[str, Dict[str, Any]] = {}
    for r in records:
        if r.get("type") in ("cgroup", "pod") and isinstance(r.get("cgroup"), str):
            out[r["cgroup"]] = {"oom_kills_total": number_at(r, *_MEMORY_OOM_KILLS_TOTAL),
                                "working_set_bytes": number_at(r, *_MEMORY_WORKING_SET_BYTES),
                                "limit_bytes": number_at(r, *_MEMORY_LIMIT_BYTES)}
    return out


def judge_runs(previous: Mapping[str, Mapping[str, Any]], records: Iterable[Mapping[str, Any]],
               thresholds: Optional[Thresholds] = None, kills: Optional[List[NamedKill]] = None) -> List[EventRecord]:
    """Events two separate runs can judge: `previous` maps cgroup path -> what state_extras
    kept last time (a full record is accepted too); `records` are this run's; `kills`: the
    kernel log's OOM kills since the last run (Sampler.kills), also of cgroups gone since.

    - oom_kill: one per kill the log reports, and the OOM-kill counter that went up between
      the runs for the kills the log didn't (only for a record with a non-null interval_s,
      i.e. the same life of the cgroup as last time): events/kills.py;
    - memory_near_limit: above the line now and not above it last time (or no figure then).
    No resolved notices: there is no episode across cron runs to end.
    """
    th = thresholds or Thresholds()
    events: List[EventRecord] = []
    rises: List[Rise] = []
    stamp: Optional[Mapping[str, Any]] = None
    for r in records:
        if r.get("type") not in ("cgroup", "pod") or not isinstance(r.get("cgroup"), str):
            continue
        stamp = stamp or r
        p = previous.get(r["cgroup"])
        if isinstance(p, Mapping) and "memory" in p:
            p = state_extras([p]).get(r["cgroup"])
        ws, limit = number_at(r, *_MEMORY_WORKING_SET_BYTES), number_at(r, *_MEMORY_LIMIT_BYTES)
        kills_now = number_at(r, *_MEMORY_OOM_KILLS_TOTAL)
        if isinstance(p, Mapping) and r.get("interval_s") is not None:
            before = p.get("oom_kills_total")
            if isinstance(kills_now, (int, float)) and isinstance(before, (int, float)) and kills_now > before:
                rises.append(Rise(r["cgroup"], int(kills_now - before), int(kills_now), r, limit,
                                  p.get("working_set_bytes"), ws))
        if ws is not None and limit:
            pct = ws / limit * 100.0
            was = None
            if isinstance(p, Mapping) and p.get("working_set_bytes") is not None and p.get("limit_bytes"):
                was = p["working_set_bytes"] / p["limit_bytes"] * 100.0
            if pct > th.near_limit_percent and (was is None or was <= th.near_limit_percent):
                events.append(make_event(r, "memory_near_limit", "warning", cap(
                    "%s uses %.0f %% of its memory limit (%s of %s): it will be OOM-killed if it grows further; "
                    "raise the limit or reduce the working set." % (who(r), pct, mib(ws), mib(limit))),
                    {"working_set_bytes": ws, "limit_bytes": limit, "percent": round(pct, 2),
                     "threshold_percent": th.near_limit_percent}))
    if rises or kills:
        ts = stamp.get("ts") if stamp is not None else rfc3339(time.time())
        events.extend(OomLedger().judge(rises, kills or [], ts, stamp.get("host") if stamp is not None else None))
    return events
