"""The OTLP push's series budget: the metric groups and `--max-series` of /metrics, applied
to a tick's resources (outputs/otlp/encode.py) with the same rules and code
(outputs/prometheus/budget.py): past `max_series` data points the least-used cgroup and pod
resources are folded into one `_other` resource (see OtlpBudget). Reads no host file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, List, Optional, Set, Tuple

from cgstat.outputs.otlp.names import Metric
from cgstat.outputs.otlp.resource import Resource
from cgstat.outputs.prometheus.budget import OTHER, carry_counters, choose_kept


FOLDED = Metric("cgstat.folded_cgroups", "", "1", False, group="cgstat")
_Key = Tuple[str, Tuple[Tuple[str, Any], ...]]  # (metric name, the data point's attributes)


# A series here is a data point's stream: a resource, a metric, the point's attributes. A
# group turned off leaves out its metrics (each OTLP metric is in its field's group, as its
# Prometheus series). Past `max_series` data points, the least-used cgroup and pod resources
# are folded into one resource, `cgstat.cgroup="_other"` and `container.name="_other"`
# (host.name as theirs), whose data points are the folded ones' sums, metric by metric and
# attribute set by attribute set (a device's, an interface's); it also has
# `cgstat.folded_cgroups`, how many are folded. GPU resources are never folded. Which cgroups
# keep their own resource, and how _other's counters stay monotone when a cgroup leaves it
# (what it had counted is carried), are prometheus/budget.py's choose_kept and
# carry_counters: the same code as the exposition's. _other's start time is when it first
# appeared, kept from then on (its carried counters keep counting from it).
class OtlpBudget:
    """What the push keeps from tick to tick to fold as /metrics does. `say(message)`: told
    once when folding first starts."""

    def __init__(self, max_series: int = 0, off: FrozenSet[str] = frozenset(),
                 say: Callable[[str], None] = lambda message: None):
        self.max_series = max_series  # 0: no budget
        self.off = off
        self.say = say
        self.kept: Set[str] = set()  # cgroups with their own resource last tick
        self.folded: Dict[str, Dict[_Key, Any]] = {}  # folded cgroups' counters, last tick
        self.last_keys: Set[_Key] = set()  # their series
        self.offsets: Dict[_Key, Any] = {}  # counters carried for cgroups gone from _other
        self.other_series = 0
        self.other_start_ns: Optional[int] = None
        self.told = False
        self.count = 0  # cgroups folded last tick

    @property
    def active(self) -> bool:
        return self.max_series > 0 or bool(self.off)

    def apply(self, resources: List[Resource]) -> List[Resource]:
        """The tick's resources within the budget (the list, changed in place, or a new one)."""
        if self.off:
            for res in resources:
                res.metrics = {name: kept for name, kept in res.metrics.items() if kept[0].group not in self.off}
            resources = [res for res in resources if res.metrics]
        if self.max_series <= 0:
            return resources
        counts = [sum(len(points) for _, points in res.metrics.values()) for res in resources]
        mine = [i for i, res in enumerate(resources) if res.path is not None]
        fixed = sum(counts) - sum(counts[i] for i in mine) + 1  # +1: cgstat.folded_cgroups
        if fixed - 1 + sum(counts[i] for i in mine) <= self.max_series and not self.folded and not self.offsets:
            self.kept = {str(resources[i].path) for i in mine}
            self.count = 0
            return resources
        paths = [str(resources[i].path) for i in mine]
        kept, folded, used = choose_kept(paths, [counts[i] for i in mine], [resources[i].usage for i in mine],
                                    self.kept, self.max_series - fixed, self.other_series)
        sums: Dict[_Key, Any] = {}
        metrics: Dict[str, Metric] = {}
        now: Dict[str, Dict[_Key, Any]] = {}
        for j in folded:
            now[paths[j]] = _add(resources[mine[j]], sums, metrics)
        keys = set(sums) | set(self.offsets) | self.last_keys
        while kept and fixed + used + len(keys) > self.max_series:
            j = kept.pop()
            used -= counts[mine[j]]
            folded.append(j)
            now[paths[j]] = _add(resources[mine[j]], sums, metrics)
            keys.update(sums)
        carry_counters(self.offsets, self.folded, now)
        self.folded = now
        self.last_keys = {key for key in sums if metrics[key[0]].monotonic}
        self.kept = {paths[j] for j in kept}
        self.count = len(folded)
        for key in self.offsets:
            metrics.setdefault(key[0], _carried(key[0]))
        keys = set(sums) | set(self.offsets)
        self.other_series = len(keys)
        if folded and not self.told:
            self.told = True
            self.say("OTLP: %d cgroups' data points past --max-series %d: the least used are folded into "
                     "cgstat.cgroup=\"%s\" (cgstat.folded_cgroups says how many)"
                     % (len(folded), self.max_series, OTHER))
        gone = {mine[j] for j in folded}
        out = [res for i, res in enumerate(resources) if i not in gone]
        out.append(self._other(resources, [mine[j] for j in folded], sums, metrics, sorted(keys)))
        return out

    def _other(self, resources: List[Resource], folded: List[int], sums: Dict[_Key, Any],
               metrics: Dict[str, Metric], keys: List[_Key]) -> Resource:

        host = next((v for res in resources for k, v in res.attributes if k == "host.name"), None)
        attributes = ((("host.name", host),) if host is not None else ()) + (
            ("cgstat.cgroup", OTHER), ("container.name", OTHER))
        times = [resources[i].time_ns for i in folded] or [max((res.time_ns for res in resources), default=0)]
        time_ns = max(times)
        if self.other_start_ns is None:
            self.other_start_ns = min(resources[i].start_ns for i in folded) if folded else time_ns
        other = Resource(attributes, attributes, time_ns, self.other_start_ns, OTHER)
        for key in keys:
            name, attrs = key
            metric = metrics[name]
            value = sums.get(key)
            if metric.monotonic:
                value = (value or 0) + self.offsets.get(key, 0)
            if value is None:
                continue
            other.metrics.setdefault(name, (metric, []))[1].append((attrs, value))
        other.metrics[FOLDED.name] = (FOLDED, [((), len(folded))])
        return other


def _add(res: Resource, sums: Dict[_Key, Any], metrics: Dict[str, Metric]) -> Dict[_Key, Any]:
    """Add one folded resource's data points to `sums`; its counters."""
    counters: Dict[_Key, Any] = {}
    get = sums.get
    for name, (metric, points) in res.metrics.items():
        if name not in metrics:
            metrics[name] = metric
        if metric.monotonic:
            for attrs, value in points:
                key = (name, attrs)
                sums[key] = get(key, 0) + value
                counters[key] = value
        else:
            for attrs, value in points:
                key = (name, attrs)
                sums[key] = get(key, 0) + value
    return counters


def _carried(name: str) -> Metric:
    """A counter carried for a metric no folded cgroup has this tick: its declaration."""
    from cgstat.outputs.otlp.names import CGROUP_METRICS, POD_METRICS

    return next(m for m in CGROUP_METRICS + POD_METRICS if m.name == name and m.monotonic)
