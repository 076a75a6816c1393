"""A cgroup's samples over the events window: the named sample the rules read (made from a
record in one place, sample_of), and the compact storage that keeps the window cheap at
1,000 cgroups (bench/README.md)."""

from __future__ import annotations

import array
import itertools
import math
import operator
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple

from cgstat.contract.keys import Cgroup
from cgstat.units import finite


class WindowSample(NamedTuple):
    """The values the rules read from one cgroup record (its time is kept by the Window).
    None where the record has no finite number."""

    working_set_bytes: Optional[float]
    limit_bytes: Optional[float]
    oom_kills_total: Optional[float]
    cpu_usage_seconds_total: Optional[float]
    cpu_periods_total: Optional[float]
    cpu_throttled_periods_total: Optional[float]
    cpu_limit_cores: Optional[float]
    gpu_sm_percent: Optional[float]
    gpu_processes: Optional[int]
    memory_high_events: Optional[float] = None  # memory.events.local high (v2; else memory.events high)
    memory_high_bytes: Optional[float] = None
    pids_limit_failures: Optional[float] = None  # pids.events max

    @classmethod
    def from_dict(cls, kept: Mapping[str, Any]) -> "WindowSample":
        """A sample kept by name (a `once --state` file: WindowSample._asdict()); a field it lacks
        (a state an older version wrote) or that is no finite number is None."""
        values: Dict[str, Any] = {name: finite(kept.get(name)) for name in cls._fields}
        return cls(**values)


# the keys sample_of reads (one lookup of each object: it runs once per cgroup per tick)
_GPU, _SM, _GPU_PROCS = Cgroup.GPU[0], Cgroup.GPU_SM_PERCENT[-1], Cgroup.GPU_PROCESSES[-1]
_MEM, _WS, _LIMIT, _KILLS = (Cgroup.MEMORY[0], Cgroup.MEMORY_WORKING_SET_BYTES[-1], Cgroup.MEMORY_LIMIT_BYTES[-1],
                             Cgroup.MEMORY_OOM_KILLS_TOTAL[-1])
_EVENTS_LOCAL, _EVENTS, _HIGH, _HIGH_BYTES = (Cgroup.MEMORY_EVENTS_LOCAL[-1], Cgroup.MEMORY_EVENTS[-1],
                                              Cgroup.MEMORY_EVENTS_HIGH[-1], Cgroup.MEMORY_HIGH_BYTES[-1])
_CPU, _USAGE_S, _PERIODS_N, _THROTTLED_N, _CORES = (Cgroup.CPU[0], Cgroup.CPU_USAGE_SECONDS_TOTAL[-1], Cgroup.CPU_PERIODS_TOTAL[-1],
                                                    Cgroup.CPU_THROTTLED_PERIODS_TOTAL[-1], Cgroup.CPU_LIMIT_CORES[-1])
_PIDS, _FORKS_REFUSED = Cgroup.PIDS[0], Cgroup.PIDS_EVENTS_MAX_TOTAL[-1]


def sample_of(r: Mapping[str, Any]) -> WindowSample:
    """The named sample of one cgroup record: a finite number, else None (number_at's rules)."""
    gpu, mem, cpu, pids = r.get(_GPU), r.get(_MEM), r.get(_CPU), r.get(_PIDS)
    sm = gprocs = None
    if isinstance(gpu, dict):
        sm = finite(gpu.get(_SM))
        procs = gpu.get(_GPU_PROCS)
        gprocs = len(procs) if isinstance(procs, list) else None
    ws = limit = kills = high = high_bytes = None
    if isinstance(mem, dict):
        ws, limit, kills = finite(mem.get(_WS)), finite(mem.get(_LIMIT)), finite(mem.get(_KILLS))
        # the cgroup's own count where v2 has one: memory.events moves in every ancestor too
        events = mem.get(_EVENTS_LOCAL) or mem.get(_EVENTS)
        if events.__class__ is dict:
            high, high_bytes = finite(events.get(_HIGH)), finite(mem.get(_HIGH_BYTES))
    usage = periods = throttled = cores = None
    if isinstance(cpu, dict):
        usage, periods, throttled, cores = (finite(cpu.get(_USAGE_S)), finite(cpu.get(_PERIODS_N)),
                                            finite(cpu.get(_THROTTLED_N)), finite(cpu.get(_CORES)))
    return WindowSample(working_set_bytes=ws, limit_bytes=limit, oom_kills_total=kills, cpu_usage_seconds_total=usage,
                  cpu_periods_total=periods, cpu_throttled_periods_total=throttled, cpu_limit_cores=cores,
                  gpu_sm_percent=sm, gpu_processes=gprocs, memory_high_events=high, memory_high_bytes=high_bytes,
                  pids_limit_failures=finite(pids.get(_FORKS_REFUSED)) if isinstance(pids, dict) else None)


# A stored sample's values are a plain tuple in WindowSample's order: a tuple subclass costs 8
# bytes more a sample and stays tracked by the garbage collector (a tuple of numbers is
# untracked), ~1 MiB and a longer full collection per 1,000 cgroups' minute of 1 s ticks.
_FIELD = {name: i for i, name in enumerate(WindowSample._fields)}
_USAGE = _FIELD["cpu_usage_seconds_total"]
_PERIODS = _FIELD["cpu_periods_total"]
_THROTTLED = _FIELD["cpu_throttled_periods_total"]


class Window:
    """One cgroup's samples, oldest first: their times in `ts` (an array of doubles, 8 bytes
    a sample) and their values in `vs`, values equal to the sample before (same types, same
    values) stored once, so an idle cgroup's window costs a time per sample, not a tuple."""

    __slots__ = ("ts", "vs")

    def __init__(self) -> None:
        self.ts = array.array("d")
        self.vs: List[tuple] = []

    @classmethod
    def of(cls, samples: Iterable[Tuple[float, WindowSample]]) -> "Window":
        """A window of these (time, sample) pairs, oldest first (two `once --state` runs)."""
        w = cls()
        for t, s in samples:
            w.append(t, s)
        return w

    def append(self, t: float, sample: WindowSample) -> None:
        vs = self.vs
        # kept as a plain tuple (see above), the one before when the values are the same
        values = vs[-1] if vs and _same(vs[-1], sample) else tuple(sample)
        self.ts.append(t)
        vs.append(values)

    def again(self, t: float) -> None:
        """append() of a sample with the newest one's values."""
        self.ts.append(t)
        self.vs.append(self.vs[-1])

    def popleft(self) -> None:
        del self.ts[0]
        del self.vs[0]

    def thin(self) -> None:
        """Every other sample, the first and the newest kept."""
        n = len(self.ts)
        keep = list(range(0, n, 2))
        if keep[-1] != n - 1:
            keep.append(n - 1)
        self.ts = array.array("d", [self.ts[i] for i in keep])
        self.vs = [self.vs[i] for i in keep]

    def span_s(self) -> float:
        return self.ts[-1] - self.ts[0]

    def ends(self, field: str) -> Tuple[Any, Any]:
        """One WindowSample field of the oldest and of the newest sample."""
        i = _FIELD[field]
        return self.vs[0][i], self.vs[-1][i]

    def column(self, field: str) -> List[Any]:
        """One WindowSample field of every sample, oldest first."""
        i = _FIELD[field]
        return [v[i] for v in self.vs]

    def points(self, field: str) -> List[Tuple[float, Any]]:
        """(t, value) of every sample where `field` is known."""
        i = _FIELD[field]
        return [(t, v[i]) for t, v in zip(self.ts, self.vs) if v[i] is not None]

    def __len__(self) -> int:
        return len(self.ts)

    def __iter__(self) -> Iterator[Tuple[float, WindowSample]]:
        return ((t, WindowSample._make(v)) for t, v in zip(self.ts, self.vs))

    # -- what the sustained rules measure over the window -------------------------------------

    def cpu_percent(self) -> Optional[float]:
        """CPU used over the window, 100 = one core."""
        first, last = self.vs[0][_USAGE], self.vs[-1][_USAGE]
        dt = self.span_s()
        if first is None or last is None or dt <= 0 or last < first:
            return None
        return (last - first) / dt * 100.0

    def throttle_fraction(self) -> Tuple[Optional[float], int, int]:
        """Throttled periods / periods over the window, with both counts."""
        first, last = self.vs[0], self.vs[-1]
        p0, p1, h0, h1 = first[_PERIODS], last[_PERIODS], first[_THROTTLED], last[_THROTTLED]
        if p0 is None or p1 is None or h0 is None or h1 is None:
            return None, 0, 0
        periods = int(p1 - p0)
        throttled = int(h1 - h0)
        if periods <= 0 or throttled < 0:
            return None, max(periods, 0), 0
        return throttled / periods, periods, throttled

    def throttled_share(self, fraction: float) -> float:
        """The share of the window's time whose tick-to-tick throttled fraction >= fraction."""
        total = hit = 0.0
        ts, vs = self.ts, self.vs
        for ta, tb, a, b in zip(ts, itertools.islice(ts, 1, None), vs, itertools.islice(vs, 1, None)):
            dt = tb - ta
            total += dt
            pa, pb, ha, hb = a[_PERIODS], b[_PERIODS], a[_THROTTLED], b[_THROTTLED]
            if pa is None or pb is None or ha is None or hb is None:
                continue
            dp = pb - pa
            if dp > 0 and (hb - ha) / dp >= fraction:
                hit += dt
        return hit / total if total > 0 else 0.0


def _same(a: tuple, b: tuple) -> bool:
    """Equal values of the same types (1 and 1.0, or 0.0 and -0.0, are not the same: a
    shared tuple must give back what each sample had)."""
    if a != b or list(map(type, a)) != list(map(type, b)):
        return False
    for x, y in zip(a, b):
        if x == 0 and type(x) is float and math.copysign(1.0, x) != math.copysign(1.0, y):
            return False
    return True


def fit_line(points: List[Tuple[float, float]]) -> Tuple[float, float]:
    """Least-squares slope and R² of (x, y) points (R² = 1 for a flat or perfect line)."""
    n = len(points)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx = sum(xs) / n
    my = sum(ys) / n
    # Two passes (deviations from the means, the stable way), the loops in C: run every
    # tick on every changing cgroup's window.
    dx = [x - mx for x in xs]
    dy = [y - my for y in ys]
    sxx = sum(map(pow, dx, itertools.repeat(2)))
    sxy = sum(map(operator.mul, dx, dy))
    syy = sum(map(pow, dy, itertools.repeat(2)))
    if sxx <= 0:
        return 0.0, 0.0
    slope = sxy / sxx
    if syy <= 0:
        return slope, 1.0
    return slope, (sxy * sxy) / (sxx * syy)
