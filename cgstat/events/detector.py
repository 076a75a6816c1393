"""EventDetector: runs the rules (rules.py) over each tick's records, keeping each cgroup's
history between ticks and forgetting the cgroups that vanish; at the end of a tick, the OOM
counters' rises and the kernel log's kills make the oom_kill events (kills.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple, Union

from cgstat.events.case import Case, History
from cgstat.events.event import deepest_only
from cgstat.events.kills import OomLedger, Rise
from cgstat.events.rules import CGROUP_RULES, GPU_RULES, GpuRule
from cgstat.events.thresholds import Thresholds
from cgstat.events.window import sample_of
from cgstat.units import finite
from cgstat.pipeline.sinks import TickEvents
from cgstat.timestamps import rfc3339
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:
    from cgstat.contract.types import EventRecord, JsonObject
    from cgstat.naming.oom_victims import LateCount, NamedKill

    Kills = Union[None, List[NamedKill], Callable[[], List[NamedKill]]]
    Late = Union[None, List[LateCount], Callable[[], List[LateCount]]]

class _Tick:
    """What observe() gathers over one tick's records."""

    __slots__ = ("events", "seen", "gpu_records", "oom_rises", "first_totals", "stamp", "hierarchical")

    def __init__(self) -> None:
        self.events: List[EventRecord] = []
        self.seen: Set[str] = set()
        self.gpu_records: List[Mapping[str, Any]] = []
        self.oom_rises: List[Rise] = []
        self.first_totals: Dict[str, float] = {}  # OOM-kill counters of cgroups first sampled in the tick
        self.stamp: Optional[Mapping[str, Any]] = None  # a record of the tick (its ts and host)
        self.hierarchical: List[Tuple[str, EventRecord]] = []  # Case.raise_(hierarchical=True)


class EventDetector(TickEvents):
    """Raises diagnostics events from the records of successive ticks (cgroup, pod and
    `type: "gpu"`). Each condition is raised once per episode and ended by one
    `kind: "resolved"` notice. Each cgroup keeps its own clock, advanced by the record's
    `interval_s` (a null one starts its history afresh), and a bounded window of named
    samples; vanished cgroups are forgotten."""

    def __init__(self, thresholds: Optional[Thresholds] = None, **overrides: Any):
        if thresholds is None:
            thresholds = Thresholds(**overrides)
        elif overrides:
            values = thresholds.as_dict()
            values.update(overrides)
            thresholds = Thresholds(**{k: v for k, v in values.items()})
        self.th = thresholds
        self._rules = [rule(thresholds) for rule in CGROUP_RULES]
        self._cgroups: Dict[str, History] = {}
        self._gpu_rules = self._fresh_gpu_rules()
        self._oom = OomLedger()
        self._host: Any = None  # the last host seen, for a tick whose cgroups are all gone
        self._ticks = 0  # ticks ended: a cgroup first seen after the first was born while watched

    def _fresh_gpu_rules(self) -> List[GpuRule]:
        return [rule(self.th) for rule in GPU_RULES]

    def observe(self, records: Iterable[Mapping[str, Any]], now: Optional[float] = None,
                kills: Kills = None, late: Late = None) -> List[EventRecord]:
        """The events of one tick (possibly none), given that tick's records. `kills`: the
        tick's OOM kills from the kernel log (Sampler.kills), or a function giving them;
        `late`: gone cgroups' OOM-kill counters read as they changed (Sampler.late_counts)."""
        now = None if now is None else float(now)  # a sample's time is a float (Window)
        tick = _Tick()
        for r in records:
            self._feed(tick, r, now)
        return self._end(tick, kills, late)

    def watch(self, records: Iterable[Mapping[str, Any]], now: Optional[float] = None,
              kills: Kills = None, late: Late = None,
              same: Optional[Callable[[str], bool]] = None) -> Iterator[JsonObject]:
        """observe() for a tick whose records come one at a time: each record, observed as
        it passes, then the events of the tick. Holds no record once it has passed (GPU
        device records, few, until the end of the tick). `kills` as for observe(); a
        function is called once the records are through (the sampler reads the log then).
        `same(path)`: whether the cgroup's record equals its last one but for ts and
        interval_s (its window sample is then the last one, not made again)."""
        now = None if now is None else float(now)  # a sample's time is a float (Window)
        tick = _Tick()
        for r in records:
            self._feed(tick, r, now, same)
            yield r
        yield from self._end(tick, kills, late)

    def forget(self) -> None:
        """Drop every history and open episode (e.g. after the sampler was reset)."""
        self._cgroups.clear()
        self._gpu_rules = self._fresh_gpu_rules()

    def _feed(self, tick: _Tick, r: Mapping[str, Any], now: Optional[float],
              same: Optional[Callable[[str], bool]] = None) -> None:
        kind = r.get("type")
        if kind == "gpu":
            tick.gpu_records.append(r)
            return
        if kind not in ("cgroup", "pod") or not isinstance(r.get("cgroup"), str):
            return
        path = r["cgroup"]
        if path in tick.seen:
            return
        tick.seen.add(path)
        if tick.stamp is None:
            tick.stamp = r
        self._observe_cgroup(path, r, now, tick, same is not None and same(path))

    def _end(self, tick: _Tick, kills: Kills = None, late: Late = None) -> List[EventRecord]:
        events, seen = tick.events, tick.seen
        self._ticks += 1
        found = (kills() if callable(kills) else kills) or []
        stamp = tick.stamp
        if stamp is not None:
            self._host = stamp.get("host")
        ts = stamp.get("ts") if stamp is not None else rfc3339(time.time())
        for lc in (late() if callable(late) else late) or ():
            # a cgroup gone by this tick whose counter moved after its last record
            h = self._cgroups.get(lc.cgroup)
            last = h.last if h is not None else None
            if lc.cgroup in seen or last is None:
                continue
            rec = {"type": "cgroup", "cgroup": lc.cgroup, "container": lc.container, "pod": lc.pod,
                   "unit": lc.unit, "ts": ts, "host": self._host}
            rise = Rise.between(rec, last, lc.oom_kills_total, None, last.limit_bytes, exists=False)
            if rise is not None:
                tick.oom_rises.append(rise)
        if tick.oom_rises or found:
            events.extend(self._oom.judge(tick.oom_rises, found, ts, self._host, tick.first_totals))
        events.extend(deepest_only(tick.hierarchical))
        for path in [p for p in self._cgroups if p not in seen]:
            del self._cgroups[path]  # vanished: its episodes end with it, silently
        if tick.gpu_records:
            for rule in self._gpu_rules:
                rule.judge(tick.gpu_records, events)
        elif seen:
            # The tick had cgroups but no GPU records: GPU metrics went away; forget.
            self._gpu_rules = self._fresh_gpu_rules()
        return events

    def _observe_cgroup(self, path: str, r: Mapping[str, Any], now: Optional[float], tick: _Tick,
                        same: bool = False) -> None:
        th = self.th
        h = self._cgroups.get(path)
        interval = finite(r.get("interval_s"))
        if h is None or interval is None:  # first sample, or a new life of the cgroup
            h = self._cgroups[path] = History(born=self._ticks > 0)
            h.t = now if now is not None else (parse_ts(r.get("ts")) or 0.0)
            same = False
        else:
            h.t = now if now is not None else h.t + (interval or 0.0)
        t = h.t
        before = h.last
        samples = h.samples
        if same and before is not None and samples.ts:
            sample = before  # what sample_of(r) gives: the record is the last one but for its time
            samples.again(t)
        else:
            sample = h.last = sample_of(r)
            samples.append(t, sample)
        ws = sample.working_set_bytes
        if ws is not None and ws != h.ws:
            h.ws, h.ws_since = ws, t
        ts = samples.ts  # popleft() changes it in place
        while len(ts) >= 2 and ts[1] <= t - th.window_s:
            samples.popleft()
        if len(ts) > th.max_samples:
            samples.thin()
            ts = samples.ts
        # The window the sustained rules judge, the same for every rule: none changes it.
        window = samples if len(ts) >= 2 and ts[-1] - ts[0] >= th.coverage * th.window_s else None
        young = samples if window is None and h.born and len(ts) >= 2 and ts[-1] - ts[0] >= th.young_min_s else None
        case = Case(r, t, sample, before, window, h, tick.events, tick.oom_rises, tick.hierarchical,
                    tick.first_totals, young)
        for rule in self._rules:
            rule.judge(case)
