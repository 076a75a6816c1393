"""The report's one pass over a stream: per workload, exact means and peaks for the
summary, and a shared time grid of buckets (min, max, sum and count) for the charts.

Bounded whatever the stream's length: when the grid would pass 2 x `points` buckets,
neighbouring buckets merge (the width doubles); at most `max_workloads` workloads get
buckets, `max_summary` a summary row, and `max_markers` events each.
"""

from __future__ import annotations

import math
import time
from array import array
from typing import Any, Callable, Dict, List, Optional, Tuple

import orjson

from cgstat.errors import CgstatError
from cgstat.contract.keys import Cgroup
from cgstat.contract.display import display_name
from cgstat.outputs.report.source import BAD_LINE, lines
from cgstat.pipeline.build import number_at, value_at
from cgstat.text import escape_controls
from cgstat.timestamps import parse_ts


class Stat:
    """Exact mean and peak of one figure over the whole stream."""

    __slots__ = ("n", "sum", "peak")

    def __init__(self) -> None:
        self.n = 0
        self.sum = 0.0
        self.peak: Optional[float] = None

    def add(self, v: float) -> None:
        self.n += 1
        self.sum += v
        if self.peak is None or v > self.peak:
            self.peak = v

    @property
    def mean(self) -> Optional[float]:
        return self.sum / self.n if self.n else None


class Series:
    """One figure's buckets: `lo` and `hi` the least and greatest value in each bucket,
    `sum` and `n` for its mean; each an array of doubles (8 bytes a bucket), None where the
    charts don't draw it."""

    __slots__ = ("lo", "hi", "sum", "n")

    def __init__(self, lo: bool = False, hi: bool = False, mean: bool = False):
        self.lo: Optional[array] = array("d") if lo else None
        self.hi: Optional[array] = array("d") if hi else None
        self.sum: Optional[array] = array("d") if mean else None
        self.n: Optional[array] = array("d") if mean else None

    def _parts(self) -> List[Tuple[str, array]]:
        return [(name, getattr(self, name)) for name in self.__slots__ if getattr(self, name) is not None]

    def grow(self, size: int) -> None:
        """Buckets up to `size`, the new ones empty."""
        for name, a in self._parts():
            missing = size - len(a)
            if missing > 0:
                a.extend([_EMPTY[name]] * missing)

    def add(self, i: int, v: float) -> None:
        if self.lo is not None and v < self.lo[i]:
            self.lo[i] = v
        if self.hi is not None and v > self.hi[i]:
            self.hi[i] = v
        if self.sum is not None and self.n is not None:
            self.sum[i] += v
            self.n[i] += 1

    def halve(self) -> None:
        """Merge neighbouring buckets (the grid's width doubled)."""
        for name, a in self._parts():
            if len(a) % 2:
                a.append(_EMPTY[name])
            setattr(self, name, array("d", map(_MERGE[name], a[0::2], a[1::2])))

    def lows(self, factor: int) -> List[Optional[float]]:
        """Each run of `factor` buckets' least value (None where empty)."""
        assert self.lo is not None
        return _finite(_reduce(self.lo, factor, min))

    def highs(self, factor: int) -> List[Optional[float]]:
        assert self.hi is not None
        return _finite(_reduce(self.hi, factor, max))

    def means(self, factor: int) -> List[Optional[float]]:
        assert self.sum is not None and self.n is not None
        sums, ns = _reduce(self.sum, factor, sum), _reduce(self.n, factor, sum)
        return [s / n if n else None for s, n in zip(sums, ns)]


_EMPTY = {"lo": math.inf, "hi": -math.inf, "sum": 0.0, "n": 0.0}
_MERGE: Dict[str, Callable[[float, float], float]] = {"lo": min, "hi": max, "sum": float.__add__,
                                                   "n": float.__add__}


def _reduce(values: array, factor: int, how: Any) -> List[float]:
    if factor <= 1:
        return list(values)
    return [how(values[k:k + factor]) for k in range(0, len(values), factor)]


def _finite(values: List[float]) -> List[Optional[float]]:
    return [v if math.isfinite(v) else None for v in values]


class Buckets:
    """A charted workload's series, bucket by bucket on the report's shared grid."""

    __slots__ = ("cpu", "cpu_limit", "ws", "mem_limit", "rd", "wr", "sm", "gmem")

    def __init__(self) -> None:
        self.cpu = Series(lo=True, hi=True, mean=True)  # CPU %
        self.cpu_limit = Series(hi=True)  # the quota, on the CPU % scale
        self.ws = Series(lo=True, hi=True, mean=True)  # working set, bytes
        self.mem_limit = Series(hi=True)
        self.rd = Series(mean=True)  # block IO, bytes per second
        self.wr = Series(mean=True)
        self.sm = Series(lo=True, hi=True, mean=True)  # GPU SM %
        self.gmem = Series(mean=True)  # GPU memory, bytes

    def __len__(self) -> int:
        lo = self.cpu.lo
        return len(lo) if lo is not None else 0

    def grow(self, size: int) -> None:
        for name in self.__slots__:
            getattr(self, name).grow(size)

    def halve(self) -> None:
        for name in self.__slots__:
            getattr(self, name).halve()


class Workload:
    def __init__(self, index: int, cgroup: str, record: Dict[str, Any], charted: bool):
        self.index = index
        self.cgroup = cgroup
        self.name = display_name(record)
        self.kind = _kind(record)
        self.charted = charted
        self.buckets: Optional[Buckets] = Buckets() if charted else None
        self.first_t: Optional[float] = None
        self.last_t: Optional[float] = None
        self.samples = 0
        self.cpu = Stat()
        self.ws = Stat()
        self.mem_pct = Stat()
        self.rd = Stat()
        self.wr = Stat()
        self.sm = Stat()
        self.gmem = Stat()
        self.cpu_limit: Optional[float] = None
        self.mem_limit: Optional[float] = None
        self.oom_first: Optional[float] = None
        self.oom_last: Optional[float] = None
        self.oom_kills = 0  # the rises of its OOM-kill counter
        self.oom_events = 0  # the kills its oom_kill events count (the kernel log's, a counter's)
        self.kernel_peak: Optional[float] = None  # memory.peak (v1 max_usage_in_bytes), its last reading
        self.exit: Optional[Dict[str, Any]] = None  # its exit record, when it ended in the span
        self.has_gpu = False
        self.gpu_held_s = 0.0  # GPU-seconds it held memory on a GPU (each GPU it held, each interval)
        self.gpu_busy_s = 0.0  # GPU-seconds of SM use (sm_percent / 100 over each interval)
        self.events: List[Tuple[float, str, str, str, Optional[str]]] = []  # t, kind, severity, message, resolves
        self.events_dropped = 0
        self.event_counts: Dict[str, int] = {}


def _kind(r: Dict[str, Any]) -> str:
    c = value_at(r, *Cgroup.CONTAINER)
    if isinstance(c, dict):
        return str(value_at(r, *Cgroup.CONTAINER_RUNTIME) or "container")
    return "pod" if value_at(r, *Cgroup.TYPE) == "pod" else "cgroup"


class ReportData:
    """What a single pass over the stream keeps (bounded; see the module doc)."""

    def __init__(self, points: int, max_workloads: int, max_summary: int, max_markers: int):
        self.points = points
        self.max_buckets = 2 * points
        self.max_workloads = max_workloads
        self.max_summary = max_summary
        self.max_markers = max_markers
        self.t0: Optional[float] = None
        self.t_end: Optional[float] = None
        self.width = 1.0  # seconds per bucket
        self.workloads: Dict[str, Workload] = {}
        self.charted = 0
        self.not_summarised = set()  # type: ignore[var-annotated]
        self.not_summarised_count = 0
        self.lines = 0
        self.records = 0
        self.bad_lines = 0
        self.other = 0
        self.hosts: Dict[str, int] = {}
        self.events = 0
        self.orphan_events: List[Tuple[float, str, str, str]] = []
        self.exits: List[Dict[str, Any]] = []  # the exit records of the span (at most max_summary)
        self.exits_dropped = 0
        self._ts_cache: Tuple[Any, Optional[float]] = (None, None)

    def _t(self, ts: Any) -> Optional[float]:
        if ts == self._ts_cache[0]:
            return self._ts_cache[1]
        t = parse_ts(ts)
        self._ts_cache = (ts, t)
        return t

    def _index(self, t: float) -> int:
        if self.t0 is None:
            self.t0 = t
        i = int((t - self.t0) // self.width) if t >= self.t0 else 0
        while i >= self.max_buckets:
            self.width *= 2
            for w in self.workloads.values():
                if w.buckets is not None:
                    w.buckets.halve()
            i = int((t - self.t0) // self.width)
        return i

    def feed(self, line: bytes) -> None:
        self.lines += 1
        line = line.strip()
        if not line:
            return
        try:
            r = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.bad_lines += 1
            return
        if not isinstance(r, dict) or r.get("schema") != 1:
            self.bad_lines += 1
            return
        typ = r.get("type")
        t = self._t(r.get("ts"))
        if t is None:
            self.bad_lines += 1
            return
        self.records += 1
        if self.t_end is None or t > self.t_end:
            self.t_end = t
        if typ in ("cgroup", "pod"):
            self._workload(r, t)
        elif typ == "event":
            self._event(r, t)
        elif typ == "exit":
            self._exit(r)
        else:
            self.other += 1

    def _get(self, r: Dict[str, Any]) -> Optional[Workload]:
        cg = r.get("cgroup")
        if not isinstance(cg, str):
            return None
        w = self.workloads.get(cg)
        if w is None:
            if len(self.workloads) >= self.max_summary:
                self.not_summarised_count += 1 if cg not in self.not_summarised else 0
                if len(self.not_summarised) < 100000:
                    self.not_summarised.add(cg)
                return None
            charted = self.charted < self.max_workloads
            self.charted += charted
            w = self.workloads[cg] = Workload(len(self.workloads), cg, r, charted)
        return w

    def _workload(self, r: Dict[str, Any], t: float) -> None:
        host = r.get("host")
        if isinstance(host, str) and (host in self.hosts or len(self.hosts) < 64):
            self.hosts[host] = self.hosts.get(host, 0) + 1
        w = self._get(r)
        if w is None:
            return
        if w.name == w.cgroup and display_name(r) != w.cgroup:
            w.name = display_name(r)  # named later (state file appeared)
        w.samples += 1
        if w.first_t is None:
            w.first_t = t
        w.last_t = t
        cpu = number_at(r, *Cgroup.CPU_PERCENT)
        cores = number_at(r, *Cgroup.CPU_LIMIT_CORES)
        ws = number_at(r, *Cgroup.MEMORY_WORKING_SET_BYTES)
        limit = number_at(r, *Cgroup.MEMORY_LIMIT_BYTES)
        pct = number_at(r, *Cgroup.MEMORY_PERCENT)
        rd = number_at(r, *Cgroup.IO_READ_BYTES_PER_SECOND)
        wr = number_at(r, *Cgroup.IO_WRITE_BYTES_PER_SECOND)
        oom = number_at(r, *Cgroup.MEMORY_OOM_KILLS_TOTAL)
        peak = number_at(r, *Cgroup.MEMORY_PEAK_BYTES)
        if peak is not None:
            w.kernel_peak = peak
        gpu = value_at(r, *Cgroup.GPU)
        sm = gmem = None
        if isinstance(gpu, dict):
            w.has_gpu = True
            sm = number_at(r, *Cgroup.GPU_SM_PERCENT)
            gmem = number_at(r, *Cgroup.GPU_MEMORY_BYTES)
            dt = number_at(r, *Cgroup.INTERVAL_S)
            devices = value_at(r, *Cgroup.GPU_DEVICES)
            if dt is not None and dt > 0:
                if gmem and isinstance(devices, list):
                    w.gpu_held_s += len(devices) * dt
                if sm is not None:
                    w.gpu_busy_s += sm / 100.0 * dt
        for acc, v in ((w.cpu, cpu), (w.ws, ws), (w.mem_pct, pct), (w.rd, rd), (w.wr, wr), (w.sm, sm),
                        (w.gmem, gmem)):
            if v is not None:
                acc.add(v)
        if cores is not None:
            w.cpu_limit = cores
        if limit is not None:
            w.mem_limit = limit
        if oom is not None:
            if w.oom_last is not None and oom > w.oom_last:
                w.oom_kills += int(oom - w.oom_last)
            w.oom_last = oom
        if not w.charted:
            return
        i = self._index(t)
        b = w.buckets
        assert b is not None  # charted
        b.grow(i + 1)
        for series, v in ((b.cpu, cpu), (b.cpu_limit, None if cores is None else cores * 100.0), (b.ws, ws),
                          (b.mem_limit, limit), (b.rd, rd), (b.wr, wr), (b.sm, sm), (b.gmem, gmem)):
            if v is not None:
                series.add(i, v)

    def _event(self, r: Dict[str, Any], t: float) -> None:
        self.events += 1
        kind = str(r.get("kind"))
        resolves = r.get("resolves") if isinstance(r.get("resolves"), str) else None
        message = str(r.get("message"))
        kernel = parse_ts(value_at(r, "evidence", "kernel_ts"))
        if kernel is not None:  # an OOM kill's own time, from the kernel log (the event's is the tick's)
            message = "[the kernel log's %s UTC] %s" % (time.strftime("%H:%M:%S", time.gmtime(kernel)), message)
        entry = (t, kind, str(r.get("severity")), message, resolves)
        cg = r.get("cgroup")
        w = self.workloads.get(cg) if isinstance(cg, str) else None
        if w is None:
            if len(self.orphan_events) < self.max_markers:
                self.orphan_events.append(entry[:4])
            return
        if kind == "oom_kill":
            kills = number_at(r, "evidence", "kills")
            w.oom_events += int(kills) if kills is not None else 1
        key = resolves and "resolved" or kind
        w.event_counts[key] = w.event_counts.get(key, 0) + 1
        if len(w.events) < self.max_markers:
            w.events.append(entry)
        else:
            w.events_dropped += 1

    def _exit(self, r: Dict[str, Any]) -> None:
        """A workload that ended: its record for the table of those, its kernel peak and
        kills for its summary row."""
        if len(self.exits) < self.max_summary:
            self.exits.append(r)
        else:
            self.exits_dropped += 1
        cg = r.get("cgroup")
        w = self.workloads.get(cg) if isinstance(cg, str) else None
        if w is None:
            return
        w.exit = r
        peak = number_at(r, "memory_peak_bytes")
        if peak is not None and r.get("memory_peak_source") == "memory.peak":
            w.kernel_peak = peak

    def oom_kills(self, w: Workload) -> int:
        """Its OOM kills: the most any witness counted (the counter's rises miss a kill in
        its first sample or once its memory figures are gone; the events miss none the log
        or a counter saw; the exit record has its counter's last reading)."""
        gone = number_at(w.exit, "oom_kills_total") if w.exit is not None else None
        return max(w.oom_kills, w.oom_events, int(gone) if gone is not None else 0)


def read_stream(input_path: str, points: int = 500, max_workloads: int = 400, max_summary: int = 5000,
                max_markers: int = 200) -> ReportData:
    """One streaming pass over a JSON-lines file (plain or .gz) into bounded report data."""
    d = ReportData(points, max_workloads, max_summary, max_markers)
    for line in lines(input_path):
        if line == BAD_LINE:
            d.bad_lines += 1
            continue
        d.feed(line)
    if not d.workloads:
        if d.records:
            raise CgstatError("%s: no cgroup records to report on" % escape_controls(input_path))
        raise CgstatError("%s: not a cgstat JSON-lines stream (no records found in %d lines)" % (
            escape_controls(input_path), d.lines))
    return d
