"""What /metrics keeps of cgroups that are gone: their OOM-kill counters, for a while.

A kill that ends its container (runc removes the cgroup as its init dies) leaves no
record to render container_oom_events_total from; OomRetention keeps the last value (and
the kernel log's kills of cgroups never read) so an alert rule still sees the increase.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, cast

from cgstat.contract.keys import Cgroup
from cgstat.outputs.prometheus.labels import base_labels
from cgstat.pipeline.build import value_at

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import CgroupRecord, Sampled

RETAIN_OOM_S = 900.0  # how long a gone cgroup's OOM-kill counter is still exposed


class OomRetention:
    """The OOM-kill counters (container_oom_events_total) of cgroups that are gone, kept
    `keep_s` after the last tick that had them, so that a kill that ended its container
    (runc removes the cgroup as its init dies) is still there for an alert rule.

    `update(records, kills, now_ts)` once per tick: `kills` are the tick's kernel-log kills
    (cgstat/naming/oom_victims.py NamedKill). A cgroup that had a record last tick and has none now
    keeps its last value; a kill the log reports for a cgroup with no record this tick (gone,
    or never read: killed in its first second) adds 1, from 0 when there was no series (the
    series then first appears at 1: the alert rule handles that, deploy/prometheus/rules.yml).
    The value never changes otherwise, so increase() over any range counts only the real
    kills; when the series ends it just goes stale, which increase() doesn't read as a reset,
    and a cgroup that comes back under the same labels starts from its own counter (read as
    a reset, counted from 0). Memory: one entry per cgroup gone within keep_s, the last
    tick's records (held by the exporter anyway).
    """

    def __init__(self, keep_s: float = RETAIN_OOM_S):
        self.keep_s = keep_s
        self._last: Dict[str, Any] = {}  # path -> last tick's record
        self._kept: Dict[str, List[Any]] = {}  # path -> [labels, value, until (monotonic)]

    def update(self, records: Sequence[Sampled], kills: Iterable[Any], now: float,
               late: Iterable[Any] = ()) -> List[Tuple[str, int]]:
        """(labels, value) of every kept series this tick. `late`: gone cgroups' counters
        read as they changed (cgstat/naming/oom_victims.py LateCount): the value is at least that."""
        current: Dict[str, Any] = {}
        for rec in records:
            r: Any = rec  # a cgroup, pod or GPU record
            if isinstance(r, dict) and r.get("type") in ("cgroup", "pod") and isinstance(r.get("cgroup"), str):
                current[r["cgroup"]] = r
        kept = self._kept
        for path, r in self._last.items():
            if path not in current:
                value = _oom_total(r)
                if value is not None and path not in kept:
                    kept[path] = [base_labels(r), value, now + self.keep_s]
        for k in kills:
            where = getattr(k, "cgroup", None)
            if not isinstance(where, str) or where in current:
                continue  # a live cgroup's own counter has it
            entry = kept.get(where)
            if entry is None:
                like: Any = {"cgroup": where, "container": k.container, "pod": k.pod}  # what labels need of a record
                entry = kept[where] = [base_labels(like), 0, 0.0]
            entry[1] += 1
            entry[2] = now + self.keep_s
        for lc in late:
            if lc.cgroup in current:
                continue
            entry = kept.get(lc.cgroup)
            if entry is None:
                seen: Any = {"cgroup": lc.cgroup, "container": lc.container, "pod": lc.pod}
                entry = kept[lc.cgroup] = [base_labels(seen), 0, 0.0]
            entry[1] = max(entry[1], lc.oom_kills_total)
            entry[2] = now + self.keep_s
        for path in [p for p, e in kept.items() if p in current or e[2] <= now]:
            del kept[path]
        self._last = current
        return [(e[0], e[1]) for e in kept.values()]


class ExitRetention:
    """The exit records (type "exit", pipeline/exits.py) of cgroups that are gone, kept
    `keep_s` after the tick that made them, as the OOM-kill counters are: the
    cgstat_exited_* gauges say what a finished workload used in all until a scrape has
    seen it. A cgroup back under the same path (a new life) drops its predecessor's."""

    def __init__(self, keep_s: float = RETAIN_OOM_S):
        self.keep_s = keep_s
        self._kept: Dict[str, List[Any]] = {}  # path -> [labels, exit record, until (monotonic)]

    def update(self, records: Sequence[Any], now: float) -> List[Tuple[str, Any]]:
        """(labels with ended_by, exit record) of every kept exit this tick."""
        kept = self._kept
        for r in records:
            if not isinstance(r, dict) or not isinstance(r.get("cgroup"), str):
                continue
            kind = r.get("type")
            if kind == "exit":
                labels = base_labels(cast("CgroupRecord", r))  # the same cgroup, container and pod keys
                ended = 'ended_by="%s"' % (r.get("ended_by") or "")
                kept[r["cgroup"]] = [labels + "," + ended if labels else ended, r, now + self.keep_s]
            elif kind in ("cgroup", "pod"):
                kept.pop(r["cgroup"], None)
        for path in [p for p, e in kept.items() if e[2] <= now]:
            del kept[path]
        return [(e[0], e[1]) for e in kept.values()]


def _oom_total(record: Any) -> Optional[int]:
    value = value_at(record, *Cgroup.MEMORY_OOM_KILLS_TOTAL)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
