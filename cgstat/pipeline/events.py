"""Diagnostics events: the rules of thumb people apply to `docker stats` beside `nvidia-smi`,
turned into `type: "event"` records (docs/diagnostics.md has every rule and threshold).

`EventDetector.observe(records)` is called once per tick with that tick's records (cgroup,
pod and `type: "gpu"` records; others are ignored) and returns the events of that tick;
`watch(records)` does the same for records that come one at a time (stream), passing each
on and the events after them.
Each condition is raised once per episode; when it clears, one notice with
`kind: "resolved"` and `resolves: <the kind>` ends the episode (so counting events by kind
counts episodes). Nothing is raised every tick.

Time: each cgroup keeps its own monotonic clock, advanced by the record's `interval_s`
(the host's monotonic clock between two samples of the same cgroup); a record with a null
`interval_s` (first sample, cgroup recreated) starts the cgroup's history afresh. Callers
may pass `now` (monotonic seconds) instead.

Memory is bounded: per cgroup a ring of small tuples covering the window (thinned past
`Thresholds.max_samples`; values unchanged since the sample before are held once), and
cgroups that vanish from a tick are forgotten.

`judge_runs(previous, records)` judges what two separate runs can (`once --state`): OOM
kills between the runs and a working set that crossed the near-limit line.
"""

from __future__ import annotations

import array
import calendar
import itertools
import math
import operator
import time
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from cgstat.pipeline.record import number_at
from cgstat.records import EventRecord, JsonObject

EVENT_SCHEMA = 1

KINDS = ("oom_kill", "memory_near_limit", "memory_growth", "cpu_throttled", "gpu_idle_cpu_bound",
         "gpu_process_outside_container", "resolved")

MiB = 1024 * 1024


class Thresholds:
    """Every threshold of every rule, with its default (docs/diagnostics.md).

    window_s: the window sustained conditions must hold over (`--events-window`).
    coverage: the share of the window the history must span before a sustained rule judges.
    near_limit_percent / near_limit_clear_percent: working set vs the memory limit
        (raise above, resolve below: hysteresis so a value hovering at the line raises once).
    growth_min_bytes_per_second, growth_min_r2, growth_min_samples: a least-squares line
        through the working set over the window must climb at least this fast and fit this
        well (R², 1 = a straight line) over at least this many samples; it resolves when the
        slope falls below half the minimum or the fit below growth_clear_r2.
    throttled_fraction / throttled_clear_fraction: throttled periods / periods over the window.
    throttled_min_periods: CFS periods the window must hold (an idle quota'd cgroup has few).
    sustained_share: the share of the window's time (tick to tick) the throttling itself must
        be seen in (each tick's own throttled fraction >= throttled_fraction), so a burst
        at the end of an idle window (idle time has few periods) does not count.
    cpu_at_limit_fraction: CPU counts as "at its limit" at >= this share of limit_cores.
    gpu_idle_sm_percent: SM % (summed over the container's GPUs, 100 = one GPU) at or under
        which a GPU counts as idle; gpu_busy_sm_percent ends such an episode.
    oom_quiet_s: further OOM kills within this many seconds of the previous one belong to
        the same episode (no new event; the total comes with the resolved notice).
    max_samples: cap on the history kept per cgroup (thinned, never truncated).
    """

    def __init__(self, window_s: float = 60.0, coverage: float = 0.9,
                 near_limit_percent: float = 90.0, near_limit_clear_percent: float = 85.0,
                 growth_min_bytes_per_second: float = 256 * 1024, growth_min_r2: float = 0.8,
                 growth_clear_r2: float = 0.5, growth_min_samples: int = 5,
                 throttled_fraction: float = 0.5, throttled_clear_fraction: float = 0.25,
                 throttled_min_periods: int = 5, sustained_share: float = 0.75,
                 cpu_at_limit_fraction: float = 0.9,
                 gpu_idle_sm_percent: float = 5.0, gpu_busy_sm_percent: float = 20.0,
                 oom_quiet_s: Optional[float] = None, max_samples: int = 1024):
        if not window_s > 0:
            raise ValueError("window_s must be > 0")
        self.window_s = float(window_s)
        self.coverage = coverage
        self.near_limit_percent = near_limit_percent
        self.near_limit_clear_percent = min(near_limit_clear_percent, near_limit_percent)
        self.growth_min_bytes_per_second = growth_min_bytes_per_second
        self.growth_min_r2 = growth_min_r2
        self.growth_clear_r2 = growth_clear_r2
        self.growth_min_samples = max(3, int(growth_min_samples))
        self.throttled_fraction = throttled_fraction
        self.throttled_clear_fraction = min(throttled_clear_fraction, throttled_fraction)
        self.throttled_min_periods = throttled_min_periods
        self.sustained_share = sustained_share
        self.cpu_at_limit_fraction = cpu_at_limit_fraction
        self.gpu_idle_sm_percent = gpu_idle_sm_percent
        self.gpu_busy_sm_percent = max(gpu_busy_sm_percent, gpu_idle_sm_percent)
        self.oom_quiet_s = self.window_s if oom_quiet_s is None else float(oom_quiet_s)
        self.max_samples = max(16, int(max_samples))

    def as_dict(self) -> Dict[str, Any]:
        return dict(vars(self))


# -- small helpers ----------------------------------------------------------------------------


def parse_ts(ts: Any) -> Optional[float]:
    """RFC 3339 UTC `2026-11-29T20:10:12.807Z` -> epoch seconds (None when not that shape)."""
    if not isinstance(ts, str) or len(ts) < 20 or not ts.endswith("Z"):
        return None
    try:
        whole = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
        frac = ts[19:-1]
        return whole + (float(frac) if frac.startswith(".") and len(frac) > 1 else 0.0)
    except (ValueError, OverflowError):
        return None


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


def _number(value: Any) -> Optional[float]:
    """record.number_at's rule for one value: a finite number, else None."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _mib(n: Optional[float]) -> str:
    return "unknown" if n is None else "%.1f MiB" % (n / MiB)


def _name(record: Mapping[str, Any]) -> str:
    c = record.get("container")
    if isinstance(c, dict) and c.get("name"):
        return "container %s" % c["name"]
    if record.get("unit"):
        return "unit %s" % record["unit"]
    return "cgroup %s" % record.get("cgroup")


def _duration(s: float) -> str:
    if s < 120:
        return "%d s" % round(s)
    if s < 7200:
        return "%d min" % round(s / 60)
    return "%.1f h" % (s / 3600)


# Ring entries (plain tuples: a few hundred bytes per cgroup per window).
_T, _WS, _LIMIT, _OOM, _CPU, _PERIODS, _THROTTLED, _CORES, _SM, _GPROCS = range(10)


class _Open:
    """An open episode: when it was raised, with what, and its running figures."""

    __slots__ = ("ts", "t", "evidence", "extra")

    def __init__(self, ts: Any, t: float, evidence: Dict[str, Any]):
        self.ts = ts
        self.t = t
        self.evidence = evidence
        self.extra: Dict[str, Any] = {}


class _Ring:
    """One cgroup's samples over the window, oldest first, read as a sequence of
    (t, ws, limit, ...) tuples. Held as times and value tuples apart, a value tuple equal
    to the one before it (same types, same values) stored once: an idle cgroup's window
    (every value the same, tick after tick) costs a time per sample (8 bytes), not a tuple
    per sample (~170 bytes: ~20 MiB per minute of 1 s ticks at 1,000 cgroups)."""

    __slots__ = ("ts", "vs")

    def __init__(self) -> None:
        self.ts = array.array("d")  # 8 bytes a sample (times are floats: see observe)
        self.vs: List[tuple] = []

    def append(self, sample: tuple) -> None:
        values = sample[1:]
        vs = self.vs
        if vs and _same(vs[-1], values):
            values = vs[-1]
        self.ts.append(sample[0])
        vs.append(values)

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

    def points(self, field: int) -> List[Tuple[float, Any]]:
        """(t, value) of every sample where `field` is known."""
        i = field - 1
        return [(t, v[i]) for t, v in zip(self.ts, self.vs) if v[i] is not None]

    def latest(self, field: int) -> Any:
        """One field of the newest sample (ring[-1][field] without making the tuple)."""
        return self.ts[-1] if field == _T else self.vs[-1][field - 1]

    def __len__(self) -> int:
        return len(self.ts)

    def __getitem__(self, i: int) -> tuple:
        return (self.ts[i],) + self.vs[i]

    def __iter__(self) -> Iterator[tuple]:
        for t, v in zip(self.ts, self.vs):
            yield (t,) + v


def _same(a: tuple, b: tuple) -> bool:
    """Equal values of the same types (1 and 1.0, or 0.0 and -0.0, are not the same: a
    shared tuple must give back what each sample had)."""
    if a != b or list(map(type, a)) != list(map(type, b)):
        return False
    for x, y in zip(a, b):
        if x == 0 and type(x) is float and math.copysign(1.0, x) != math.copysign(1.0, y):
            return False
    return True


class _Cgroup:
    __slots__ = ("ring", "t", "open", "ws", "ws_since")

    def __init__(self) -> None:
        self.ring = _Ring()
        self.t = 0.0
        self.open: Dict[str, _Open] = {}
        self.ws: Optional[float] = None  # the last working set seen (not None)...
        self.ws_since = math.inf  # ...and the time of the first sample since which every one seen was it


class _Tick:
    """What observe() gathers over one tick's records."""

    __slots__ = ("events", "seen", "gpu_records", "oom_raised")

    def __init__(self) -> None:
        self.events: List[EventRecord] = []
        self.seen: Set[str] = set()
        self.gpu_records: List[Mapping[str, Any]] = []
        self.oom_raised: List[Tuple[str, EventRecord]] = []


class EventDetector:
    """Raises diagnostics events from the records of successive ticks (see the module doc)."""

    def __init__(self, thresholds: Optional[Thresholds] = None, **overrides: Any):
        if thresholds is None:
            thresholds = Thresholds(**overrides)
        elif overrides:
            values = thresholds.as_dict()
            values.update(overrides)
            thresholds = Thresholds(**{k: v for k, v in values.items()})
        self.th = thresholds
        self._cgroups: Dict[str, _Cgroup] = {}
        self._gpu_procs: Dict[Tuple[str, int], _Open] = {}

    # -- the tick ------------------------------------------------------------------------------

    def observe(self, records: Iterable[Mapping[str, Any]], now: Optional[float] = None) -> List[EventRecord]:
        """The events of one tick (possibly none), given that tick's records."""
        now = None if now is None else float(now)  # a sample's time is a float (_Ring)
        tick = _Tick()
        for r in records:
            self._feed(tick, r, now)
        return self._end(tick)

    def watch(self, records: Iterable[Mapping[str, Any]], now: Optional[float] = None) -> Iterator[JsonObject]:
        """observe() for a tick whose records come one at a time: each record, observed as
        it passes, then the events of the tick. Holds no record once it has passed (GPU
        device records, few, until the end of the tick)."""
        now = None if now is None else float(now)  # a sample's time is a float (_Ring)
        tick = _Tick()
        for r in records:
            self._feed(tick, r, now)
            yield r
        yield from self._end(tick)

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
        self._observe_cgroup(path, r, now, tick.events, tick.oom_raised)

    def _end(self, tick: _Tick) -> List[EventRecord]:
        events, seen = tick.events, tick.seen
        # A kill counts in every ancestor's memory.events too (v2 is hierarchical): keep the
        # event of the deepest cgroup only.
        paths = [p for p, _ in tick.oom_raised]
        for p, ev in tick.oom_raised:
            prefix = p.rstrip("/") + "/"
            if not any(q != p and q.startswith(prefix) for q in paths):
                events.append(ev)
        for path in [p for p in self._cgroups if p not in seen]:
            del self._cgroups[path]  # vanished: its episodes end with it, silently
        if tick.gpu_records:
            events.extend(self._observe_gpu(tick.gpu_records))
        elif self._gpu_procs and seen:
            # The tick had cgroups but no GPU records: GPU metrics went away; forget.
            self._gpu_procs.clear()
        return events

    # -- per cgroup ----------------------------------------------------------------------------

    def _observe_cgroup(self, path: str, r: Mapping[str, Any], now: Optional[float],
                        events: List[EventRecord], oom_raised: List[Tuple[str, EventRecord]]) -> None:
        th = self.th
        st = self._cgroups.get(path)
        interval = _number(r.get("interval_s"))
        if st is None or interval is None:  # first sample, or a new life of the cgroup
            st = self._cgroups[path] = _Cgroup()
            st.t = now if now is not None else (parse_ts(r.get("ts")) or 0.0)
        else:
            st.t = now if now is not None else st.t + (interval or 0.0)
        t = st.t
        gpu = r.get("gpu")
        sm = gprocs = None
        if isinstance(gpu, dict):
            sm = number_at(gpu, "sm_percent")
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
        sample = (t, ws, limit, kills, usage, periods, throttled, cores, sm, gprocs)
        ring = st.ring
        prev = ring.vs[-1] if ring.vs else None  # the values of the sample before (no time)
        ring.append(sample)
        if ws is not None and ws != st.ws:
            st.ws, st.ws_since = ws, t
        ts = ring.ts  # popleft() changes it in place
        while len(ts) >= 2 and ts[1] <= t - th.window_s:
            ring.popleft()
        if len(ts) > th.max_samples:
            ring.thin()

        window = self._window(st)  # the same for every rule: none changes the ring
        self._oom(st, r, prev, sample, oom_raised, events)
        self._near_limit(st, r, sample, events)
        self._growth(st, r, sample, window, events)
        self._throttled(st, r, window, events)
        self._gpu_idle(st, r, window, events)

    def _window(self, st: _Cgroup) -> Optional[_Ring]:
        """The samples sustained rules judge (the ring itself: read it, never change it), or
        None while they don't cover enough of the window yet."""
        ring = st.ring
        if len(ring) < 2 or ring.ts[-1] - ring.ts[0] < self.th.coverage * self.th.window_s:
            return None
        return ring

    def _raise(self, st: _Cgroup, r: Mapping[str, Any], kind: str, severity: str, message: str,
               evidence: Dict[str, Any], events: List[EventRecord], t: float) -> EventRecord:
        ev = make_event(r, kind, severity, message, evidence)
        st.open[kind] = _Open(r.get("ts"), t, evidence)
        events.append(ev)
        return ev

    def _resolve(self, st: _Cgroup, r: Mapping[str, Any], kind: str, t: float, what: str,
                 evidence: Dict[str, Any], events: List[EventRecord]) -> None:
        ep = st.open.pop(kind)
        duration = max(0.0, t - ep.t)
        evidence = dict(evidence)
        evidence["duration_s"] = round(duration, 3)
        ev = make_event(r, "resolved", "info", "%s in %s ended after %s." % (what, _name(r), _duration(duration)),
                        evidence, resolves=kind, since=ep.ts)
        events.append(ev)

    # oom_kill: the counter went up between two samples of the same cgroup.
    def _oom(self, st: _Cgroup, r, prev, sample, oom_raised, events) -> None:
        # prev: the values of the sample before, without its time (index - 1)
        t = sample[_T]
        ep = st.open.get("oom_kill")
        now_kills, before = sample[_OOM], prev[_OOM - 1] if prev is not None else None
        if prev is not None and now_kills is not None and before is not None and now_kills > before:
            kills = int(now_kills - before)
            if ep is None:
                evidence = {"kills": kills, "oom_kills_total": int(now_kills), "limit_bytes": sample[_LIMIT],
                            "working_set_bytes_before": prev[_WS - 1], "working_set_bytes": sample[_WS]}
                ev = make_event(r, "oom_kill", "critical", oom_message(r, kills, sample[_LIMIT], prev[_WS - 1]),
                                evidence)
                ep = st.open["oom_kill"] = _Open(r.get("ts"), t, evidence)
                ep.extra["kills"] = kills
                ep.extra["last"] = t
                oom_raised.append((r["cgroup"], ev))
            else:
                ep.extra["kills"] += kills
                ep.extra["last"] = t
            return
        if ep is not None and t - ep.extra["last"] >= self.th.oom_quiet_s:
            total = ep.extra["kills"]
            if total > ep.evidence["kills"]:
                # More kills followed the first: say how many in all when the burst ends.
                self._resolve(st, r, "oom_kill", t, "A burst of %d OOM kills" % total,
                              {"kills": total, "oom_kills_total": sample[_OOM]}, events)
            else:
                st.open.pop("oom_kill")  # a single kill needs no second word

    # memory_near_limit: working set above near_limit_percent of the limit (hysteresis).
    def _near_limit(self, st: _Cgroup, r, sample, events) -> None:
        th = self.th
        ws, limit, t = sample[_WS], sample[_LIMIT], sample[_T]
        pct = ws / limit * 100.0 if ws is not None and limit else None
        if "memory_near_limit" in st.open:
            if pct is None or pct < th.near_limit_clear_percent:
                self._resolve(st, r, "memory_near_limit", t, "Memory pressure near the limit",
                              {"working_set_bytes": ws, "limit_bytes": limit,
                               "percent": None if pct is None else round(pct, 2)}, events)
            return
        if pct is not None and pct > th.near_limit_percent:
            msg = ("%s uses %.0f %% of its memory limit (%s of %s): it will be OOM-killed if it grows further; "
                   "raise the limit or reduce the working set (batch size, caches, leaked tensors)."
                   % (_name(r), pct, _mib(ws), _mib(limit)))
            self._raise(st, r, "memory_near_limit", "warning", _cap(msg),
                        {"working_set_bytes": ws, "limit_bytes": limit, "percent": round(pct, 2),
                         "threshold_percent": th.near_limit_percent}, events, t)

    # memory_growth: a steady least-squares climb of the working set over the window.
    def _growth(self, st: _Cgroup, r, sample, window: Optional[_Ring], events) -> None:
        th = self.th
        t = sample[_T]
        is_open = "memory_growth" in st.open
        if (not is_open and window is not None and st.ws_since <= window[0][_T]
                and th.growth_min_bytes_per_second >= 1.0):
            # Every working set in the window is the same value: the fit's slope is 0 (a
            # rounding residue far below a byte per second), never a climb. An idle
            # cgroup's whole window is not fitted again every tick.
            return
        points = window.points(_WS) if window is not None else []
        if window is None or len(points) < th.growth_min_samples:
            if is_open and sample[_WS] is None:
                self._resolve(st, r, "memory_growth", t, "Memory growth", {}, events)
            return
        slope, r2 = fit_line(points)
        ws, limit = sample[_WS], sample[_LIMIT]
        if is_open:
            if slope < th.growth_min_bytes_per_second / 2 or r2 < th.growth_clear_r2:
                self._resolve(st, r, "memory_growth", t, "Memory growth",
                              {"bytes_per_second": round(slope, 1), "r2": round(r2, 4), "working_set_bytes": ws},
                              events)
            return
        if slope >= th.growth_min_bytes_per_second and r2 >= th.growth_min_r2:
            span = points[-1][0] - points[0][0]
            to_limit = None
            if limit and ws is not None and limit > ws:
                to_limit = round((limit - ws) / slope, 1)
            msg = ("%s's working set grew steadily by %s/s over the last %s (now %s%s): a leak? "
                   "Look for tensors kept with their graph (losses appended without .item()/.detach()), "
                   "ever-growing lists or caches." % (
                       _name(r), _mib(slope), _duration(span), _mib(ws),
                       "" if limit is None else ", limit %s%s" % (
                           _mib(limit), "" if to_limit is None else ", reached in ~%s" % _duration(to_limit))))
            self._raise(st, r, "memory_growth", "warning", _cap(msg),
                        {"bytes_per_second": round(slope, 1), "r2": round(r2, 4), "window_s": round(span, 3),
                         "samples": len(points), "working_set_bytes": ws,
                         "working_set_bytes_start": points[0][1], "limit_bytes": limit,
                         "seconds_to_limit": to_limit}, events, t)

    # cpu_throttled: throttled in most CFS periods over the window.
    def _throttled(self, st: _Cgroup, r, window: Optional[_Ring], events) -> None:
        th = self.th
        t = st.ring.latest(_T)
        frac, periods, throttled = _throttle_fraction(window)
        is_open = "cpu_throttled" in st.open
        if is_open:
            if window is not None and (frac is None or frac < th.throttled_clear_fraction):
                self._resolve(st, r, "cpu_throttled", t, "CPU throttling",
                              {"throttled_fraction": None if frac is None else round(frac, 4)}, events)
            return
        if window is None or frac is None or periods < th.throttled_min_periods or frac < th.throttled_fraction:
            return
        if _throttled_share(window, th.throttled_fraction) < th.sustained_share:
            return
        cores = st.ring.latest(_CORES)
        cpu_pct = _cpu_percent(window)
        msg = ("%s was throttled in %.0f %% of its CPU periods over the last %s (using %s cores of its %s-core "
               "quota): it needs more CPU than its limit; raise the quota or use fewer threads/workers." % (
                   _name(r), frac * 100, _duration(window[-1][_T] - window[0][_T]),
                   "?" if cpu_pct is None else "%.2f" % (cpu_pct / 100), "?" if cores is None else "%g" % cores))
        self._raise(st, r, "cpu_throttled", "warning", _cap(msg),
                    {"throttled_fraction": round(frac, 4), "periods": periods, "throttled_periods": throttled,
                     "cpu_percent": None if cpu_pct is None else round(cpu_pct, 2), "limit_cores": cores,
                     "window_s": round(window[-1][_T] - window[0][_T], 3)}, events, t)

    # gpu_idle_cpu_bound: GPU processes at ~0 % SM while the CPU sits at its quota.
    def _gpu_idle(self, st: _Cgroup, r, window: Optional[_Ring], events) -> None:
        th = self.th
        is_open = "gpu_idle_cpu_bound" in st.open
        if not is_open and not st.ring.latest(_GPROCS):
            return  # raising needs GPU processes in every sample, this one included
        t = st.ring.latest(_T)
        cores = st.ring.latest(_CORES)
        sm_values = [s[_SM] for s in (window or ()) if s[_SM] is not None]
        has_procs = window is not None and all(s[_GPROCS] for s in window)
        cpu_pct = _cpu_percent(window)
        sm_mean = sum(sm_values) / len(sm_values) if sm_values else None
        if is_open:
            busy = sm_mean is not None and sm_mean >= th.gpu_busy_sm_percent
            no_gpu = st.ring.latest(_GPROCS) == 0 or st.ring.latest(_GPROCS) is None
            off_limit = (cpu_pct is not None and cores and cpu_pct < 0.5 * th.cpu_at_limit_fraction * cores * 100)
            if window is not None and (busy or no_gpu or off_limit):
                self._resolve(st, r, "gpu_idle_cpu_bound", t, "The input-bound GPU",
                              {"sm_percent": None if sm_mean is None else round(sm_mean, 2),
                               "cpu_percent": None if cpu_pct is None else round(cpu_pct, 2)}, events)
            return
        if (window is None or not has_procs or sm_mean is None or len(sm_values) < len(window)
                or sm_mean > th.gpu_idle_sm_percent or not cores or cpu_pct is None
                or cpu_pct < th.cpu_at_limit_fraction * cores * 100):
            return
        msg = ("%s's GPU sits idle (%.0f %% SM) while its CPU runs at its limit (%.2f of %g cores): the input "
               "pipeline starves the GPU; use more DataLoader workers (num_workers) and pin_memory=True, "
               "tf.data prefetch/parallel map, or raise the CPU quota." % (
                   _name(r), sm_mean, cpu_pct / 100, cores))
        self._raise(st, r, "gpu_idle_cpu_bound", "warning", _cap(msg),
                    {"sm_percent": round(sm_mean, 2), "cpu_percent": round(cpu_pct, 2), "limit_cores": cores,
                     "gpu_processes": st.ring.latest(_GPROCS), "window_s": round(window[-1][_T] - window[0][_T], 3)},
                    events, t)

    # -- GPU device records -------------------------------------------------------------------

    def _observe_gpu(self, gpu_records: List[Mapping[str, Any]]) -> List[EventRecord]:
        events: List[EventRecord] = []
        present: Dict[Tuple[str, int], Tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
        for g in gpu_records:
            dev: Mapping[str, Any] = g["gpu"] if isinstance(g.get("gpu"), dict) else {}
            uuid = str(dev.get("uuid") or dev.get("index"))
            for p in g.get("processes") or ():
                if not isinstance(p, dict) or p.get("container") is not None:
                    continue
                pid = p.get("pid")
                if isinstance(pid, int):
                    present[(uuid, pid)] = (g, p)
        for key, (g, p) in present.items():
            if key in self._gpu_procs:
                continue
            dev = g.get("gpu") or {}
            where = ("in cgroup %s" % p.get("cgroup")) if p.get("cgroup") else "whose cgroup is unknown (another PID namespace, or gone)"
            msg = ("GPU process %s (%s) on GPU %s runs outside any container, %s, using %s of GPU memory: "
                   "it competes with the containers' jobs unseen by their limits." % (
                       p.get("pid"), p.get("name") or "?", dev.get("index"), where, _mib(number_at(p, "memory_bytes"))))
            ev = make_event(g, "gpu_process_outside_container", "warning", _cap(msg),
                            {"pid": p.get("pid"), "name": p.get("name"), "gpu_index": dev.get("index"),
                             "gpu_uuid": dev.get("uuid"), "memory_bytes": p.get("memory_bytes"),
                             "sm_percent": p.get("sm_percent")},
                            cgroup=p.get("cgroup"), container=None)
            self._gpu_procs[key] = _Open(g.get("ts"), 0.0, ev["evidence"])
            events.append(ev)
        for key in [k for k in self._gpu_procs if k not in present]:
            ep = self._gpu_procs.pop(key)
            g = gpu_records[0]
            events.append(make_event(g, "resolved", "info",
                                     "GPU process %s outside any container is gone from GPU %s." % (
                                         key[1], ep.evidence.get("gpu_index")),
                                     {"pid": key[1], "gpu_uuid": ep.evidence.get("gpu_uuid")},
                                     cgroup=None, container=None, resolves="gpu_process_outside_container",
                                     since=ep.ts))
        return events

    def forget(self) -> None:
        """Drop every history and open episode (e.g. after the sampler was reset)."""
        self._cgroups.clear()
        self._gpu_procs.clear()


def _throttle_fraction(window: Optional[_Ring]) -> Tuple[Optional[float], int, int]:
    if window is None:
        return None, 0, 0
    first, last = window[0], window[-1]
    if None in (first[_PERIODS], last[_PERIODS], first[_THROTTLED], last[_THROTTLED]):
        return None, 0, 0
    periods = int(last[_PERIODS] - first[_PERIODS])
    throttled = int(last[_THROTTLED] - first[_THROTTLED])
    if periods <= 0 or throttled < 0:
        return None, max(periods, 0), 0
    return throttled / periods, periods, throttled


def _throttled_share(window: _Ring, fraction: float) -> float:
    """The share of the window's time whose tick-to-tick throttled fraction >= fraction."""
    total = hit = 0.0
    for a, b in zip(window, itertools.islice(window, 1, None)):
        dt = b[_T] - a[_T]
        total += dt
        if None in (a[_PERIODS], b[_PERIODS], a[_THROTTLED], b[_THROTTLED]):
            continue
        dp = b[_PERIODS] - a[_PERIODS]
        if dp > 0 and (b[_THROTTLED] - a[_THROTTLED]) / dp >= fraction:
            hit += dt
    return hit / total if total > 0 else 0.0


def _cpu_percent(window: Optional[_Ring]) -> Optional[float]:
    if window is None:
        return None
    first, last = window[0], window[-1]
    dt = last[_T] - first[_T]
    if first[_CPU] is None or last[_CPU] is None or dt <= 0 or last[_CPU] < first[_CPU]:
        return None
    return (last[_CPU] - first[_CPU]) / dt * 100.0


def _cap(msg: str, limit: int = 600) -> str:
    return msg if len(msg) <= limit else msg[:limit - 1] + "…"


_UNSET = object()


def make_event(r: Mapping[str, Any], kind: str, severity: str, message: str, evidence: Dict[str, Any],
               cgroup: Any = _UNSET, container: Any = _UNSET, resolves: Optional[str] = None,
               since: Any = None) -> EventRecord:
    """One event record (cgstat/event.schema.json), stamped with the record it was judged on."""
    return {
        "schema": EVENT_SCHEMA,
        "type": "event",
        "ts": r.get("ts"),
        "host": r.get("host"),
        "kind": kind,
        "severity": severity,
        "cgroup": r.get("cgroup") if cgroup is _UNSET else cgroup,
        "container": r.get("container") if container is _UNSET else container,
        "message": message,
        "evidence": evidence,
        "resolves": resolves,
        "since": r.get("ts") if since is None else since,
    }


def oom_message(r: Mapping[str, Any], kills: int, limit: Optional[float], ws_before: Optional[float]) -> str:
    return _cap("%s: the kernel OOM-killed %s in it (memory limit %s, working set before %s): a process that "
                "dies with \"Killed\" (exit 137) was this; raise the memory limit or lower what it holds "
                "(batch size, workers, caches)." % (
                    _name(r), "a process" if kills == 1 else "%d processes" % kills,
                    "none" if limit is None else _mib(limit), _mib(ws_before)))


# -- two runs (once --state) ------------------------------------------------------------------

def state_extras(records: Iterable[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """What `once --state` should keep per cgroup for judge_runs next time (small, JSON-able)."""
    out: Dict[str, Dict[str, Any]] = {}
    for r in records:
        if r.get("type") in ("cgroup", "pod") and isinstance(r.get("cgroup"), str):
            out[r["cgroup"]] = {"oom_kills_total": number_at(r, "memory", "oom_kills_total"),
                                "working_set_bytes": number_at(r, "memory", "working_set_bytes"),
                                "limit_bytes": number_at(r, "memory", "limit_bytes")}
    return out


def judge_runs(previous: Mapping[str, Mapping[str, Any]], records: Iterable[Mapping[str, Any]],
               thresholds: Optional[Thresholds] = None) -> List[EventRecord]:
    """Events two separate runs can judge: `previous` maps cgroup path -> what state_extras
    kept last time (a full record is accepted too); `records` are this run's.

    - oom_kill: the OOM-kill counter went up between the runs (only for a record with a
      non-null interval_s, i.e. the same life of the cgroup as last time);
    - memory_near_limit: above the line now and not above it last time (or no figure then).
    No resolved notices: there is no episode across cron runs to end.
    """
    th = thresholds or Thresholds()
    events: List[EventRecord] = []
    oom: List[Tuple[str, EventRecord]] = []
    for r in records:
        if r.get("type") not in ("cgroup", "pod") or not isinstance(r.get("cgroup"), str):
            continue
        p = previous.get(r["cgroup"])
        if isinstance(p, Mapping) and "memory" in p:
            p = state_extras([p]).get(r["cgroup"])
        ws, limit = number_at(r, "memory", "working_set_bytes"), number_at(r, "memory", "limit_bytes")
        kills_now = number_at(r, "memory", "oom_kills_total")
        if isinstance(p, Mapping) and r.get("interval_s") is not None:
            before = p.get("oom_kills_total")
            if isinstance(kills_now, (int, float)) and isinstance(before, (int, float)) and kills_now > before:
                kills = int(kills_now - before)
                oom.append((r["cgroup"], make_event(r, "oom_kill", "critical",
                                                    oom_message(r, kills, limit, p.get("working_set_bytes")),
                                                    {"kills": kills, "oom_kills_total": int(kills_now),
                                                     "limit_bytes": limit,
                                                     "working_set_bytes_before": p.get("working_set_bytes"),
                                                     "working_set_bytes": ws,
                                                     "interval_s": r.get("interval_s")})))
        if ws is not None and limit:
            pct = ws / limit * 100.0
            was = None
            if isinstance(p, Mapping) and p.get("working_set_bytes") is not None and p.get("limit_bytes"):
                was = p["working_set_bytes"] / p["limit_bytes"] * 100.0
            if pct > th.near_limit_percent and (was is None or was <= th.near_limit_percent):
                events.append(make_event(r, "memory_near_limit", "warning", _cap(
                    "%s uses %.0f %% of its memory limit (%s of %s): it will be OOM-killed if it grows further; "
                    "raise the limit or reduce the working set." % (_name(r), pct, _mib(ws), _mib(limit))),
                    {"working_set_bytes": ws, "limit_bytes": limit, "percent": round(pct, 2),
                     "threshold_percent": th.near_limit_percent}))
    paths = [q for q, _ in oom]
    for q, ev in oom:
        prefix = q.rstrip("/") + "/"
        if not any(o != q and o.startswith(prefix) for o in paths):
            events.append(ev)
    return events
