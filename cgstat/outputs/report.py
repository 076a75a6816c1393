"""`cgstat report FILE.jsonl -o report.html`: one self-contained HTML file of a recorded stream.

Per workload: charts over time of CPU % against its quota, working set against the memory
limit, block IO rates and, where the stream has GPU figures, SM % and GPU memory; the
events of the stream (`type: "event"`) drawn on them (a line where an episode was raised,
a shaded span until its `resolved` notice); and a summary table (mean and peak per
workload, OOM kills, events). No network: hand-written SVG and a few lines of inline
JavaScript (sorting and filtering the summary), no fonts, no CDN.

Made for a day-long stream of hundreds of containers:

- the input is read line by line (plain or .gz), never loaded whole;
- every series goes into one shared time grid of buckets holding min, max and sum/count;
  when the grid would pass 2 x `points` buckets, neighbouring buckets are merged (the
  bucket width doubles), so memory stays bounded per workload whatever the duration;
- a chart draws at most `points` points (the min-max band and the mean line); with many
  workloads fewer (`point_budget` over all charts), so the file stays a few MiB;
- at most `max_workloads` workloads get charts (the first seen), and `max_summary` rows of
  summary; the rest are counted and said;
- event markers per workload are capped (`max_markers`).

Every name (cgroup paths, container names, messages) is untrusted: controls are escaped
(text.escape_controls) and everything is HTML-escaped before it is written.
"""

from __future__ import annotations

import gzip
import html
import math
import os
import stat
import tempfile
import time
from array import array
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Tuple

import orjson

from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.timestamps import parse_ts
from cgstat.pipeline.record import number_at
from cgstat.text import escape_controls

_MAX_LINE = 16 * 1024 * 1024

# Slots of a workload's bucket arrays, and how neighbouring buckets merge.
_SLOTS = ("cpu_min", "cpu_max", "cpu_sum", "cpu_n", "cpu_limit",
          "ws_min", "ws_max", "ws_sum", "ws_n", "mem_limit",
          "rd_sum", "rd_n", "rd_max", "wr_sum", "wr_n", "wr_max",
          "sm_min", "sm_max", "sm_sum", "sm_n", "gmem_max", "gmem_sum", "gmem_n")
_IDX = {name: i for i, name in enumerate(_SLOTS)}
_EMPTY = {"min": math.inf, "max": -math.inf, "sum": 0.0, "n": 0.0, "limit": -math.inf}


def _merge_kind(slot: str) -> str:
    return slot.rsplit("_", 1)[1]


class _Stat:
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


class _Workload:
    def __init__(self, index: int, cgroup: str, record: Dict[str, Any], charted: bool):
        self.index = index
        self.cgroup = cgroup
        self.name = _label(record)
        self.kind = _kind(record)
        self.charted = charted
        self.buckets: List[array] = [array("d") for _ in _SLOTS] if charted else []
        self.first_t: Optional[float] = None
        self.last_t: Optional[float] = None
        self.samples = 0
        self.cpu = _Stat()
        self.ws = _Stat()
        self.mem_pct = _Stat()
        self.rd = _Stat()
        self.wr = _Stat()
        self.sm = _Stat()
        self.gmem = _Stat()
        self.cpu_limit: Optional[float] = None
        self.mem_limit: Optional[float] = None
        self.oom_first: Optional[float] = None
        self.oom_last: Optional[float] = None
        self.oom_kills = 0
        self.has_gpu = False
        self.events: List[Tuple[float, str, str, str, Optional[str]]] = []  # t, kind, severity, message, resolves
        self.events_dropped = 0
        self.event_counts: Dict[str, int] = {}

    def bucket(self, i: int) -> None:
        """Make sure bucket i exists."""
        arrs = self.buckets
        missing = i + 1 - len(arrs[0])
        if missing > 0:
            for slot, arr in zip(_SLOTS, arrs):
                arr.extend([_EMPTY[_merge_kind(slot)]] * missing)

    def halve(self) -> None:
        """Merge neighbouring buckets (the grid's width doubled)."""
        for k, slot in enumerate(_SLOTS):
            a = self.buckets[k]
            if len(a) % 2:
                a.append(_EMPTY[_merge_kind(slot)])
            kind = _merge_kind(slot)
            even, odd = a[0::2], a[1::2]
            if kind == "min":
                self.buckets[k] = array("d", map(min, even, odd))
            elif kind in ("max", "limit"):
                self.buckets[k] = array("d", map(max, even, odd))
            else:
                self.buckets[k] = array("d", map(float.__add__, even, odd))


def _label(r: Dict[str, Any]) -> str:
    c = r.get("container")
    if isinstance(c, dict) and c.get("name"):
        return str(c["name"])
    pod = r.get("pod")
    if r.get("type") == "pod" and isinstance(pod, dict) and pod.get("name"):
        return "%s/%s" % (pod.get("namespace") or "", pod["name"])
    if r.get("unit"):
        return str(r["unit"])
    return str(r.get("cgroup"))


def _kind(r: Dict[str, Any]) -> str:
    c = r.get("container")
    if isinstance(c, dict):
        return str(c.get("runtime") or "container")
    return "pod" if r.get("type") == "pod" else "cgroup"




# The mark of a report cgstat wrote: the only kind of existing file -o replaces.
_GENERATOR = '<meta name="generator" content="cgstat">'


def _open_stream(path: str) -> BinaryIO:
    """The stream file, opened without blocking on a FIFO or following the last link; only
    a regular file is read (a device such as /dev/zero would never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise CgstatError("cannot read %s: %s" % (escape_controls(path), os_reason(exc))) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CgstatError("cannot read %s: it is %s, not a stream file" % (escape_controls(path), file_kind(st.st_mode)))
    f = os.fdopen(fd, "rb")
    return gzip.GzipFile(fileobj=f, mode="rb") if path.endswith(".gz") else f  # type: ignore[return-value]


def _check_output(path: str) -> None:
    """-o replaces only a missing or empty file or an earlier report of cgstat's: never a
    link, device, FIFO or folder, and never a file of someone else's (a typo as root)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CgstatError("cannot write %s: %s" % (escape_controls(path), os_reason(exc))) from None
    if not stat.S_ISREG(st.st_mode):
        raise CgstatError("refusing to replace %s: it is %s (cgstat replaces only its own reports)"
                          % (escape_controls(path), file_kind(st.st_mode)))
    if st.st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            start = f.read(4096)
    except OSError as exc:
        raise CgstatError("cannot write %s: %s" % (escape_controls(path), os_reason(exc))) from None
    if _GENERATOR.encode() not in start:
        raise CgstatError("refusing to replace %s: it is not a report of cgstat's (cgstat replaces only "
                          "its own reports)" % escape_controls(path))


def _lines(path: str) -> Iterator[bytes]:
    f = _open_stream(path)
    with f:
        try:
            while True:
                line = f.readline(_MAX_LINE)
                if not line:
                    return
                if len(line) >= _MAX_LINE and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # skip the rest of a giant line
                        line = f.readline(_MAX_LINE)
                    yield b"\x00"  # counted as a bad line
                    continue
                yield line
        except (OSError, EOFError) as exc:
            raise CgstatError("cannot read %s: %s" % (escape_controls(path), exc)) from None


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
        self.workloads: Dict[str, _Workload] = {}
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
                if w.charted:
                    w.halve()
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
        else:
            self.other += 1

    def _get(self, r: Dict[str, Any]) -> Optional[_Workload]:
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
            w = self.workloads[cg] = _Workload(len(self.workloads), cg, r, charted)
        return w

    def _workload(self, r: Dict[str, Any], t: float) -> None:
        host = r.get("host")
        if isinstance(host, str) and (host in self.hosts or len(self.hosts) < 64):
            self.hosts[host] = self.hosts.get(host, 0) + 1
        w = self._get(r)
        if w is None:
            return
        if w.name == w.cgroup and _label(r) != w.cgroup:
            w.name = _label(r)  # named later (state file appeared)
        w.samples += 1
        if w.first_t is None:
            w.first_t = t
        w.last_t = t
        cpu = number_at(r, "cpu", "percent")
        cores = number_at(r, "cpu", "limit_cores")
        ws = number_at(r, "memory", "working_set_bytes")
        limit = number_at(r, "memory", "limit_bytes")
        pct = number_at(r, "memory", "percent")
        rd = number_at(r, "io", "read_bytes_per_second")
        wr = number_at(r, "io", "write_bytes_per_second")
        oom = number_at(r, "memory", "oom_kills_total")
        gpu = r.get("gpu")
        sm = gmem = None
        if isinstance(gpu, dict):
            w.has_gpu = True
            sm = number_at(gpu, "sm_percent")
            gmem = number_at(gpu, "memory_bytes")
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
        w.bucket(i)
        b = w.buckets
        if cpu is not None:
            _minmaxsum(b, "cpu", i, cpu)
        if cores is not None:
            b[_IDX["cpu_limit"]][i] = max(b[_IDX["cpu_limit"]][i], cores * 100.0)
        if ws is not None:
            _minmaxsum(b, "ws", i, ws)
        if limit is not None:
            b[_IDX["mem_limit"]][i] = max(b[_IDX["mem_limit"]][i], limit)
        if rd is not None:
            b[_IDX["rd_sum"]][i] += rd
            b[_IDX["rd_n"]][i] += 1
            b[_IDX["rd_max"]][i] = max(b[_IDX["rd_max"]][i], rd)
        if wr is not None:
            b[_IDX["wr_sum"]][i] += wr
            b[_IDX["wr_n"]][i] += 1
            b[_IDX["wr_max"]][i] = max(b[_IDX["wr_max"]][i], wr)
        if sm is not None:
            _minmaxsum(b, "sm", i, sm)
        if gmem is not None:
            b[_IDX["gmem_max"]][i] = max(b[_IDX["gmem_max"]][i], gmem)
            b[_IDX["gmem_sum"]][i] += gmem
            b[_IDX["gmem_n"]][i] += 1

    def _event(self, r: Dict[str, Any], t: float) -> None:
        self.events += 1
        kind = str(r.get("kind"))
        resolves = r.get("resolves") if isinstance(r.get("resolves"), str) else None
        entry = (t, kind, str(r.get("severity")), str(r.get("message")), resolves)
        cg = r.get("cgroup")
        w = self.workloads.get(cg) if isinstance(cg, str) else None
        if w is None:
            if len(self.orphan_events) < self.max_markers:
                self.orphan_events.append(entry[:4])
            return
        key = resolves and "resolved" or kind
        w.event_counts[key] = w.event_counts.get(key, 0) + 1
        if len(w.events) < self.max_markers:
            w.events.append(entry)
        else:
            w.events_dropped += 1


def _minmaxsum(b: List[array], prefix: str, i: int, v: float) -> None:
    lo, hi, s, n = (b[_IDX[prefix + x]] for x in ("_min", "_max", "_sum", "_n"))
    if v < lo[i]:
        lo[i] = v
    if v > hi[i]:
        hi[i] = v
    s[i] += v
    n[i] += 1


# -- rendering --------------------------------------------------------------------------------

def _e(text: Any) -> str:
    return html.escape(escape_controls(str(text)), quote=True)


def _bytes(v: Optional[float]) -> str:
    if v is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (v, unit)
        v /= 1024.0
    return "–"


def _rate(v: Optional[float]) -> str:
    return "–" if v is None else _bytes(v) + "/s"


def _pct(v: Optional[float]) -> str:
    return "–" if v is None else "%.1f %%" % v


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def _reduce(values: List[float], factor: int, how: str) -> List[float]:
    if factor <= 1:
        return values
    out = []
    for k in range(0, len(values), factor):
        chunk = values[k:k + factor]
        if how == "min":
            out.append(min(chunk))
        elif how in ("max", "limit"):
            out.append(max(chunk))
        else:
            out.append(sum(chunk))
    return out


_W, _H, _PADL, _PADB, _PADT = 640, 130, 58, 16, 8


class _Chart:
    def __init__(self, title: str, t0: float, t1: float, n: int, fmt):
        self.title = title
        self.t0, self.t1, self.n = t0, t1, max(n, 1)
        self.fmt = fmt
        self.parts: List[str] = []
        self.ymax = 0.0

    def x(self, i: float) -> float:
        return _PADL + (_W - _PADL - 4) * (i / max(self.n - 1, 1))

    def xt(self, t: float) -> float:
        span = max(self.t1 - self.t0, 1e-9)
        return _PADL + (_W - _PADL - 4) * min(max((t - self.t0) / span, 0.0), 1.0)

    def y(self, v: float) -> float:
        h = _H - _PADB - _PADT
        return _PADT + h - h * (v / self.ymax if self.ymax > 0 else 0.0)

    def see(self, *series: List[Optional[float]]) -> None:
        for s in series:
            for v in s:
                if v is not None and v > self.ymax:
                    self.ymax = v

    def _runs(self, values: List[Optional[float]]) -> List[List[Tuple[int, float]]]:
        runs: List[List[Tuple[int, float]]] = []
        cur: List[Tuple[int, float]] = []
        for i, v in enumerate(values):
            if v is None:
                if cur:
                    runs.append(cur)
                cur = []
            else:
                cur.append((i, v))
        if cur:
            runs.append(cur)
        return runs

    def band(self, lo: List[Optional[float]], hi: List[Optional[float]], cls: str) -> None:
        pairs = [None if a is None or b is None else (a, b) for a, b in zip(lo, hi)]
        for run in self._runs([None if p is None else 0.0 for p in pairs]):
            top = " ".join("%.1f,%.1f" % (self.x(i), self.y(pairs[i][1])) for i, _ in run)  # type: ignore[index]
            bottom = " ".join("%.1f,%.1f" % (self.x(i), self.y(pairs[i][0])) for i, _ in reversed(run))  # type: ignore[index]
            self.parts.append('<polygon class="%s" points="%s %s"/>' % (cls, top, bottom))

    def line(self, values: List[Optional[float]], cls: str) -> None:
        for run in self._runs(values):
            if len(run) == 1:
                i, v = run[0]
                self.parts.append('<circle class="%s" cx="%.1f" cy="%.1f" r="1.5"/>' % (cls, self.x(i), self.y(v)))
                continue
            d = "M" + " L".join("%.1f %.1f" % (self.x(i), self.y(v)) for i, v in run)
            self.parts.append('<path class="%s" d="%s"/>' % (cls, d))

    def events(self, events: List[Tuple[float, str, str, str, Optional[str]]]) -> None:
        open_at: Dict[str, float] = {}
        for t, kind, severity, message, resolves in events:
            if resolves:
                start = open_at.pop(resolves, None)
                if start is not None:
                    x0, x1 = self.xt(start), self.xt(t)
                    self.parts.append('<rect class="episode" x="%.1f" y="%d" width="%.1f" height="%d"/>' % (
                        x0, _PADT, max(x1 - x0, 1.0), _H - _PADB - _PADT))
                continue
            open_at[kind] = t
            x = self.xt(t)
            sev = severity if severity in ("info", "warning", "critical") else "info"
            self.parts.append('<g class="ev %s" data-kind="%s"><title>%s %s: %s</title>'
                              '<line x1="%.1f" x2="%.1f" y1="%d" y2="%d"/><path d="M%.1f %d l-4 -7 h8 z"/></g>'
                              % (sev, _e(kind), _e(_clock(t)), _e(kind), _e(message), x, x, _PADT,
                                 _H - _PADB, x, _PADT + 7))
        for start in open_at.values():  # still open at the end of the stream
            x0 = self.xt(start)
            self.parts.append('<rect class="episode" x="%.1f" y="%d" width="%.1f" height="%d"/>' % (
                x0, _PADT, max(_W - 4 - x0, 1.0), _H - _PADB - _PADT))

    def svg(self, legend: str) -> str:
        if self.ymax <= 0:
            self.ymax = 1.0
        self.ymax *= 1.05
        grid = []
        for frac in (0.0, 0.5, 1.0):
            v = self.ymax * frac / 1.05 if frac else 0.0
            y = self.y(v)
            grid.append('<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>'
                        '<text class="ax" x="%d" y="%.1f">%s</text>' % (_PADL, _W - 4, y, y, _PADL - 4, y + 3,
                                                                         _e(self.fmt(v))))
        axis = ('<text class="ax" x="%d" y="%d" text-anchor="start">%s</text>'
                '<text class="ax" x="%d" y="%d">%s</text>' % (_PADL, _H - 3, _e(_clock(self.t0)), _W - 4, _H - 3,
                                                              _e(_clock(self.t1))))
        return ('<figure><figcaption>%s <span class="lg">%s</span></figcaption>'
                '<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">%s%s%s</svg></figure>'
                % (_e(self.title), legend, _W, _H, _e(self.title), "".join(grid), "".join(self.parts), axis))


def _series(w: _Workload, slot: str, factor: int) -> List[float]:
    return _reduce(list(w.buckets[_IDX[slot]]), factor, _merge_kind(slot))


def _mean(sums: List[float], ns: List[float]) -> List[Optional[float]]:
    return [s / n if n else None for s, n in zip(sums, ns)]


def _finite(values: List[float]) -> List[Optional[float]]:
    return [v if math.isfinite(v) else None for v in values]


def _charts(d: ReportData, w: _Workload, points: int) -> str:
    if not w.charted or d.t0 is None or not w.buckets[0]:
        return ""
    n_buckets = len(w.buckets[0])
    factor = max(1, math.ceil(n_buckets / points))
    t0 = d.t0
    n = math.ceil(n_buckets / factor)
    t1 = t0 + n * factor * d.width
    out = []

    def chart(title, fmt):
        c = _Chart(title, t0, t0 + (n - 1) * factor * d.width if n > 1 else t1, n, fmt)
        return c

    def banded(key: str, title: str, fmt, css: str, legend: str, limit_key: Optional[str] = None,
               events: Optional[list] = None) -> None:
        """One chart: the min-max band and mean of `key` per bucket, and its limit if any."""
        lo = _finite(_series(w, key + "_min", factor))
        hi = _finite(_series(w, key + "_max", factor))
        mean = _mean(_series(w, key + "_sum", factor), _series(w, key + "_n", factor))
        limit = _finite(_series(w, limit_key, factor)) if limit_key else None
        c = chart(title, fmt)
        c.see(hi, limit or [])
        c.band(lo, hi, "band " + css)
        if limit is not None:
            c.line(limit, "limit")
        c.line(mean, "mean " + css)
        c.events(w.events if events is None else events)
        out.append(c.svg(legend))

    percent = lambda v: "%.0f%%" % v  # noqa: E731
    banded("cpu", "CPU % (100 = one core)", percent, "cpu",
           '<i class="k cpu"></i>mean, band min–max <i class="k limit"></i>quota', "cpu_limit")
    banded("ws", "Memory working set", _bytes, "mem",
           '<i class="k mem"></i>working set <i class="k limit"></i>limit', "mem_limit")

    rd = _mean(_series(w, "rd_sum", factor), _series(w, "rd_n", factor))
    wr = _mean(_series(w, "wr_sum", factor), _series(w, "wr_n", factor))
    if any(v is not None for v in rd + wr):
        c = chart("Block IO", _rate)
        c.see(rd, wr)
        c.line(rd, "mean rd")
        c.line(wr, "mean wr")
        c.events([e for e in w.events if e[1] == "oom_kill"])
        out.append(c.svg('<i class="k rd"></i>read <i class="k wr"></i>write'))

    if w.has_gpu:
        banded("sm", "GPU SM % (100 = one GPU)", percent, "gpu", '<i class="k gpu"></i>SM %')
        gm = _mean(_series(w, "gmem_sum", factor), _series(w, "gmem_n", factor))
        c = chart("GPU memory", _bytes)
        c.see(gm)
        c.line(gm, "mean gmem")
        out.append(c.svg('<i class="k gmem"></i>GPU memory'))
    return "".join(out)


_CSS = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 4px;word-break:break-all}
.meta,.note{color:#5b6474}.note{margin:4px 0}
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e3e6eb;padding:3px 8px;text-align:right;white-space:nowrap}
th{cursor:pointer;background:#f4f6f9;position:sticky;top:0}td.n,th.n{text-align:left;max-width:28em;overflow:hidden;
text-overflow:ellipsis}
section.w{border-top:1px solid #d5d9e0;margin-top:12px}.charts{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;width:640px;max-width:100%}figcaption{font-weight:600;font-size:12px}
svg.chart{width:100%;height:auto;background:#fbfcfd;border:1px solid #e3e6eb}
.grid{stroke:#e6e9ee;stroke-width:1}.ax{font-size:10px;fill:#5b6474;text-anchor:end}
.band{stroke:none;opacity:.25}.mean{fill:none;stroke-width:1.5}circle.mean{stroke:none}
.cpu{fill:#2f6fde;stroke:#2f6fde}.band.cpu{fill:#2f6fde}.mem{fill:#1a9b6c;stroke:#1a9b6c}.band.mem{fill:#1a9b6c}
path.cpu,path.mem,path.rd,path.wr,path.gpu,path.gmem{fill:none}
.rd{stroke:#7b4fd6;fill:#7b4fd6}.wr{stroke:#d68a1a;fill:#d68a1a}.gpu{fill:#c2367a;stroke:#c2367a}
.band.gpu{fill:#c2367a}.gmem{stroke:#8a3a9c;fill:#8a3a9c}
.limit{fill:none;stroke:#d43c3c;stroke-width:1.5;stroke-dasharray:5 3}circle.limit{fill:#d43c3c}
.episode{fill:#f2b233;opacity:.14}
.ev line{stroke-width:1.5;stroke-dasharray:2 2}.ev.critical line{stroke:#c0162c}.ev.critical path{fill:#c0162c}
.ev.warning line{stroke:#d98200}.ev.warning path{fill:#d98200}.ev.info line{stroke:#5b6474}.ev.info path{fill:#5b6474}
.lg{font-weight:400;color:#5b6474;margin-left:8px}i.k{display:inline-block;width:10px;height:3px;margin:0 3px 3px 8px;
background:currentColor}i.k.cpu{background:#2f6fde}i.k.mem{background:#1a9b6c}i.k.limit{background:#d43c3c}
i.k.rd{background:#7b4fd6}i.k.wr{background:#d68a1a}i.k.gpu{background:#c2367a}i.k.gmem{background:#8a3a9c}
ul.events{margin:4px 0;padding-left:18px;max-height:12em;overflow:auto}li.critical{color:#a0102a}
li.warning{color:#8a5200}input{margin:6px 0;padding:3px 6px;width:20em}
"""

# Sort the summary by a clicked header; filter workloads by name (no data leaves the page).
_JS = """
(function(){var t=document.getElementById('summary');if(!t)return;var b=t.tBodies[0];
t.tHead.addEventListener('click',function(e){var th=e.target.closest('th');if(!th)return;var i=th.cellIndex,
d=th.dataset.d=th.dataset.d==='a'?'d':'a',rows=[].slice.call(b.rows);rows.sort(function(x,y){
var p=x.cells[i].dataset.v,q=y.cells[i].dataset.v,r;if(p!==undefined&&q!==undefined){r=(+p)-(+q);}else{
r=x.cells[i].textContent.localeCompare(y.cells[i].textContent);}return d==='a'?r:-r;});
rows.forEach(function(r){b.appendChild(r);});});
var f=document.getElementById('filter');f.addEventListener('input',function(){var q=f.value.toLowerCase();
[].forEach.call(document.querySelectorAll('[data-name]'),function(el){el.style.display=
el.dataset.name.toLowerCase().indexOf(q)<0?'none':'';});});})();
"""


def _td(text: str, value: Optional[float] = None, cls: str = "") -> str:
    v = "" if value is None else ' data-v="%r"' % float(value)
    c = ' class="%s"' % cls if cls else ""
    return "<td%s%s>%s</td>" % (c, v, text)


def render(d: ReportData, title: str, point_budget: int) -> str:
    workloads = list(d.workloads.values())
    charted = [w for w in workloads if w.charted]
    points = max(60, min(d.points, point_budget // max(len(charted), 1)))
    start = d.t0 or 0.0
    end = d.t_end or start
    head = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">' + _GENERATOR +
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            '<title>%s</title><style>%s</style></head><body>' % (_e(title), _CSS))
    out = [head, "<h1>%s</h1>" % _e(title)]
    hosts = ", ".join(_e(h) for h in sorted(d.hosts)) or "–"
    out.append('<p class="meta">Host %s · %s → %s UTC (%s) · %d workloads · %d records · %d events · '
               'charts: %d points at most, %s per point</p>' % (
                   hosts, _e(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start))),
                   _e(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(end))), _e(_span(end - start)),
                   len(workloads), d.records, d.events, points,
                   _e(_span(d.width * max(1, math.ceil(max((len(w.buckets[0]) for w in charted), default=1)
                                                        / points))))))
    notes = []
    if d.bad_lines:
        notes.append("%d lines were not cgstat records and were skipped." % d.bad_lines)
    if d.not_summarised_count:
        notes.append("%d more workloads are left out (more than %d)." % (d.not_summarised_count, d.max_summary))
    if len(workloads) > len(charted):
        notes.append("Charts for the first %d workloads only; the summary has all %d." % (len(charted), len(workloads)))
    if d.orphan_events:
        notes.append("%d events concern no workload in the stream (e.g. GPU processes outside containers): "
                     "listed at the end." % len(d.orphan_events))
    for n in notes:
        out.append('<p class="note">%s</p>' % _e(n))
    out.append('<input id="filter" type="search" placeholder="filter by name or cgroup" aria-label="filter">')

    # summary
    out.append('<h2>Summary</h2><div class="scroll"><table id="summary"><thead><tr><th class="n">workload</th><th class="n">kind</th>'
               '<th>CPU mean</th><th>CPU peak</th><th>CPU limit</th><th>mem mean</th><th>mem peak</th>'
               '<th>mem limit</th><th>mem peak %</th><th>read mean</th><th>write mean</th><th>GPU SM mean</th>'
               '<th>GPU SM peak</th><th>GPU mem peak</th><th>OOM kills</th><th>events</th></tr></thead><tbody>')
    for w in workloads:
        name_attr = _e(w.name + " " + w.cgroup)
        link = '<a href="#w%d">%s</a>' % (w.index, _e(w.name)) if w.charted else _e(w.name)
        evs = ", ".join("%s %d" % (_e(k), n) for k, n in sorted(w.event_counts.items()) if k != "resolved")
        n_events = sum(n for k, n in w.event_counts.items() if k != "resolved")
        out.append('<tr data-name="%s"><td class="n" title="%s">%s</td><td class="n">%s</td>%s%s%s%s%s%s%s%s%s%s%s%s%s%s</tr>' % (
            name_attr, _e(w.cgroup), link, _e(w.kind),
            _td(_pct(w.cpu.mean), w.cpu.mean), _td(_pct(w.cpu.peak), w.cpu.peak),
            _td("–" if w.cpu_limit is None else "%g cores" % w.cpu_limit, w.cpu_limit),
            _td(_bytes(w.ws.mean), w.ws.mean), _td(_bytes(w.ws.peak), w.ws.peak),
            _td(_bytes(w.mem_limit) if w.mem_limit is not None else "–", w.mem_limit),
            _td(_pct(w.mem_pct.peak), w.mem_pct.peak),
            _td(_rate(w.rd.mean), w.rd.mean), _td(_rate(w.wr.mean), w.wr.mean),
            _td(_pct(w.sm.mean), w.sm.mean), _td(_pct(w.sm.peak), w.sm.peak),
            _td(_bytes(w.gmem.peak), w.gmem.peak), _td("%d" % w.oom_kills, w.oom_kills),
            _td(evs or "–", n_events)))
    out.append("</tbody></table></div>")

    # per workload: those with events first, then the rest in stream order
    for w in sorted(charted, key=lambda w: (0 if w.events else 1, w.index)):
        out.append('<section class="w" id="w%d" data-name="%s"><h2>%s <span class="meta">%s · %s</span></h2>' % (
            w.index, _e(w.name + " " + w.cgroup), _e(w.name), _e(w.kind), _e(w.cgroup)))
        if w.events:
            items = []
            for t, kind, severity, message, resolves in w.events:
                items.append('<li class="%s">%s <b>%s</b> %s</li>' % (
                    _e(severity), _e(_clock(t)), _e(resolves and "resolved " + resolves or kind), _e(message)))
            more = ' <li>… %d more</li>' % w.events_dropped if w.events_dropped else ""
            out.append('<ul class="events">%s%s</ul>' % ("".join(items), more))
        out.append('<div class="charts">%s</div></section>' % _charts(d, w, points))
    if d.orphan_events:
        out.append('<h2>Other events</h2><ul class="events">%s</ul>' % "".join(
            '<li class="%s">%s <b>%s</b> %s</li>' % (_e(s), _e(_clock(t)), _e(k), _e(m))
            for t, k, s, m in d.orphan_events))
    out.append("<script>%s</script></body></html>\n" % _JS)
    return "".join(out)


def _span(seconds: float) -> str:
    if seconds < 120:
        return "%.1f s" % seconds
    if seconds < 7200:
        return "%.1f min" % (seconds / 60)
    return "%.1f h" % (seconds / 3600)


def read_stream(input_path: str, points: int = 500, max_workloads: int = 400, max_summary: int = 5000,
                max_markers: int = 200) -> ReportData:
    """One streaming pass over a JSON-lines file (plain or .gz) into bounded report data."""
    d = ReportData(points, max_workloads, max_summary, max_markers)
    for line in _lines(input_path):
        if line == b"\x00":
            d.bad_lines += 1
            continue
        d.feed(line)
    if not d.workloads:
        if d.records:
            raise CgstatError("%s: no cgroup records to report on" % escape_controls(input_path))
        raise CgstatError("%s: not a cgstat JSON-lines stream (no records found in %d lines)" % (
            escape_controls(input_path), d.lines))
    return d


def build_report(input_path: str, output_path: str, title: Optional[str] = None, points: int = 500,
                 max_workloads: int = 400, point_budget: int = 60000, max_summary: int = 5000,
                 max_markers: int = 200) -> None:
    """Write the HTML report of the stream at `input_path` to `output_path`.

    Raises CgstatError (one line) when the input can't be read or holds no cgroup records,
    or the output can't be used. The output is written to a temporary file beside it and
    renamed into place, mode 0600; what is at the path already must be nothing, an empty
    file or an earlier report (see _check_output).
    """
    if points < 10:
        raise CgstatError("points: at least 10")
    _check_output(output_path)
    d = read_stream(input_path, points, max_workloads, max_summary, max_markers)
    text = render(d, title or "cgstat report: %s" % os.path.basename(input_path), point_budget)
    folder = os.path.dirname(os.path.abspath(output_path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cgstat-report-", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise CgstatError("cannot write %s: %s" % (escape_controls(output_path), exc.strerror or exc)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8", "backslashreplace"))
        os.chmod(tmp, 0o600)  # names and labels may come from root-only runtime state
        os.replace(tmp, output_path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CgstatError("cannot write %s: %s" % (escape_controls(output_path), exc.strerror or exc)) from None
