"""EventDetector: runs the rules (rules.py) over each tick's records, keeping each cgroup's
history between ticks and forgetting the cgroups that vanish."""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from cgstat.pipeline.events.case import Case, History
from cgstat.pipeline.events.event import deepest_only
from cgstat.pipeline.events.rules import CGROUP_RULES, GPU_RULES, GpuRule
from cgstat.pipeline.events.thresholds import Thresholds
from cgstat.pipeline.events.window import Sample
from cgstat.timestamps import parse_ts

_new_sample = tuple.__new__  # Sample(...) without the Python-level __new__: once per cgroup per tick


def _number(value: Any) -> Optional[float]:
    """record.number_at's rule for one value: a finite number, else None."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


class _Tick:
    """What observe() gathers over one tick's records."""

    __slots__ = ("events", "seen", "gpu_records", "hierarchical")

    def __init__(self) -> None:
        self.events: List[Dict[str, Any]] = []
        self.seen: Set[str] = set()
        self.gpu_records: List[Mapping[str, Any]] = []
        self.hierarchical: List[Tuple[str, Dict[str, Any]]] = []


class EventDetector:
    """Raises diagnostics events from the records of successive ticks (see the package doc)."""

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

    def _fresh_gpu_rules(self) -> List[GpuRule]:
        return [rule(self.th) for rule in GPU_RULES]

    def observe(self, records: Iterable[Mapping[str, Any]], now: Optional[float] = None) -> List[Dict[str, Any]]:
        """The events of one tick (possibly none), given that tick's records."""
        now = None if now is None else float(now)  # a sample's time is a float (Window)
        tick = _Tick()
        for r in records:
            self._feed(tick, r, now)
        return self._end(tick)

    def watch(self, records: Iterable[Mapping[str, Any]], now: Optional[float] = None) -> Iterator[Mapping[str, Any]]:
        """observe() for a tick whose records come one at a time: each record, observed as
        it passes, then the events of the tick. Holds no record once it has passed (GPU
        device records, few, until the end of the tick)."""
        now = None if now is None else float(now)  # a sample's time is a float (Window)
        tick = _Tick()
        for r in records:
            self._feed(tick, r, now)
            yield r
        yield from self._end(tick)

    def forget(self) -> None:
        """Drop every history and open episode (e.g. after the sampler was reset)."""
        self._cgroups.clear()
        self._gpu_rules = self._fresh_gpu_rules()

    def _feed(self, tick: _Tick, r: Mapping[str, Any], now: Optional[float]) -> None:
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
        self._observe_cgroup(path, r, now, tick)

    def _end(self, tick: _Tick) -> List[Dict[str, Any]]:
        events, seen = tick.events, tick.seen
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

    def _observe_cgroup(self, path: str, r: Mapping[str, Any], now: Optional[float], tick: _Tick) -> None:
        th = self.th
        h = self._cgroups.get(path)
        interval = _number(r.get("interval_s"))
        if h is None or interval is None:  # first sample, or a new life of the cgroup
            h = self._cgroups[path] = History()
            h.t = now if now is not None else (parse_ts(r.get("ts")) or 0.0)
        else:
            h.t = now if now is not None else h.t + (interval or 0.0)
        t = h.t
        gpu = r.get("gpu")
        sm = gprocs = None
        if isinstance(gpu, dict):
            sm = _number(gpu.get("sm_percent"))
            procs = gpu.get("processes")
            gprocs = len(procs) if isinstance(procs, list) else None
        # number_at's rules (a finite number, else None), one lookup of each object
        mem, cpu = r.get("memory"), r.get("cpu")
        if isinstance(mem, dict):
            ws, limit, kills = (_number(mem.get("working_set_bytes")), _number(mem.get("limit_bytes")),
                                _number(mem.get("oom_kills_total")))
        else:
            ws = limit = kills = None
        if isinstance(cpu, dict):
            usage, periods, throttled, cores = (
                _number(cpu.get("usage_seconds_total")), _number(cpu.get("periods_total")),
                _number(cpu.get("throttled_periods_total")), _number(cpu.get("limit_cores")))
        else:
            usage = periods = throttled = cores = None
        values = (ws, limit, kills, usage, periods, throttled, cores, sm, gprocs)
        sample: Sample = _new_sample(Sample, values)
        before, h.last = h.last, sample
        samples = h.samples
        samples.append(t, values)
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
        case = Case(r, t, sample, before, window, h, tick.events, tick.hierarchical)
        for rule in self._rules:
            rule.judge(case)
