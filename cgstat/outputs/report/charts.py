"""The report's charts: hand-written SVG (min-max bands, mean lines, limits, event markers
and episode spans) from a workload's buckets."""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Tuple

from cgstat.outputs.report.accumulate import ReportData, Series, Workload
from cgstat.outputs.report.axis import BYTES, PERCENT, RATE, axis, text_width
from cgstat.outputs.report.markup import clock, esc


_W, _H, _PADB, _PADT, _FONT = 640, 130, 16, 8, 10.0


class Chart:
    """One SVG chart: bands, lines and event markers over a time axis. Drawing waits for
    svg(): the y axis (and the left margin its labels need) is known once every series is in."""

    def __init__(self, title: str, t0: float, t1: float, n: int, unit: str):
        self.title = title
        self.t0, self.t1, self.n = t0, t1, max(n, 1)
        self.unit = unit
        self.parts: List[str] = []
        self.ops: List[Tuple[bool, Callable[[], None]]] = []  # (a series?, its drawing)
        self.vmax = 0.0
        self.has_data = False  # a value in a series other than a limit
        self.padl = 0.0
        self.top = 1.0

    def x(self, i: float) -> float:
        return self.padl + (_W - self.padl - 4) * (i / max(self.n - 1, 1))

    def xt(self, t: float) -> float:
        span = max(self.t1 - self.t0, 1e-9)
        return self.padl + (_W - self.padl - 4) * min(max((t - self.t0) / span, 0.0), 1.0)

    def y(self, v: float) -> float:
        h = _H - _PADB - _PADT
        return _PADT + h - h * min(max(v / self.top, 0.0), 1.0)

    def _see(self, values: List[Optional[float]], data: bool) -> None:
        for v in values:
            if v is not None:
                self.has_data = self.has_data or data
                if v > self.vmax:
                    self.vmax = v

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
        self._see(hi, True)
        self.ops.append((True, lambda: self._band(lo, hi, cls)))

    def _band(self, lo: List[Optional[float]], hi: List[Optional[float]], cls: str) -> None:
        pairs = [None if a is None or b is None else (a, b) for a, b in zip(lo, hi)]
        for run in self._runs([None if p is None else 0.0 for p in pairs]):
            top = " ".join("%.1f,%.1f" % (self.x(i), self.y(pairs[i][1])) for i, _ in run)  # type: ignore[index]
            bottom = " ".join("%.1f,%.1f" % (self.x(i), self.y(pairs[i][0])) for i, _ in reversed(run))  # type: ignore[index]
            self.parts.append('<polygon class="%s" points="%s %s"/>' % (cls, top, bottom))

    def line(self, values: List[Optional[float]], cls: str, limit: bool = False) -> None:
        """A series' line; a limit's counts towards the scale but is no data of its own."""
        self._see(values, not limit)
        self.ops.append((True, lambda: self._line(values, cls)))

    def _line(self, values: List[Optional[float]], cls: str) -> None:
        for run in self._runs(values):
            if len(run) == 1:
                i, v = run[0]
                self.parts.append('<circle class="%s" cx="%.1f" cy="%.1f" r="1.5"/>' % (cls, self.x(i), self.y(v)))
                continue
            d = "M" + " L".join("%.1f %.1f" % (self.x(i), self.y(v)) for i, v in run)
            self.parts.append('<path class="%s" d="%s"/>' % (cls, d))

    def events(self, events: List[Tuple[float, str, str, str, Optional[str]]]) -> None:
        self.ops.append((False, lambda: self._events(events)))

    def _events(self, events: List[Tuple[float, str, str, str, Optional[str]]]) -> None:
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
                              % (sev, esc(kind), esc(clock(t)), esc(kind), esc(message), x, x, _PADT,
                                 _H - _PADB, x, _PADT + 7))
        for start in open_at.values():  # still open at the end of the stream
            x0 = self.xt(start)
            self.parts.append('<rect class="episode" x="%.1f" y="%d" width="%.1f" height="%d"/>' % (
                x0, _PADT, max(_W - 4 - x0, 1.0), _H - _PADB - _PADT))

    def svg(self, legend: str) -> str:
        grid = []
        if self.has_data:
            ax = axis(self.vmax, self.unit)
            self.top = ax.top
            # the labels end 4 units left of the plot and start 3 or more in from the edge
            self.padl = max(30.0, math.ceil(max(text_width(label, _FONT) for _, label in ax.ticks)) + 7)
            for v, label in ax.ticks:
                y = self.y(v)
                grid.append('<line class="grid" x1="%.1f" x2="%d" y1="%.1f" y2="%.1f"/>'
                            '<text class="ax y" x="%.1f" y="%.1f">%s</text>' % (
                                self.padl, _W - 4, y, y, self.padl - 4, y + 3, esc(label)))
        else:
            self.padl = 30.0
            grid.append('<text class="nodata" x="%.1f" y="%.1f">no data</text>' % (
                (self.padl + _W - 4) / 2, (_PADT + _H - _PADB) / 2 + 4))
        for series, draw in self.ops:
            if self.has_data or not series:
                draw()
        axis_t = ('<text class="ax s" x="%.1f" y="%d">%s</text>'
                  '<text class="ax" x="%d" y="%d">%s</text>' % (self.padl, _H - 3, esc(clock(self.t0)), _W - 4,
                                                                _H - 3, esc(clock(self.t1))))
        return ('<figure><figcaption>%s <span class="lg">%s</span></figcaption>'
                '<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">%s%s%s</svg></figure>'
                % (esc(self.title), legend, _W, _H, esc(self.title), "".join(grid), "".join(self.parts), axis_t))


def workload_charts(d: ReportData, w: Workload, points: int) -> str:
    """A workload's charts, at most `points` points each: CPU against its quota, memory
    against its limit, block IO, and with GPU figures SM % and GPU memory."""
    b = w.buckets
    if b is None or d.t0 is None or not len(b):
        return ""
    n_buckets = len(b)
    factor = max(1, math.ceil(n_buckets / points))
    t0 = d.t0
    n = math.ceil(n_buckets / factor)
    t1 = t0 + n * factor * d.width
    out = []

    def chart(title: str, unit: str) -> Chart:
        return Chart(title, t0, t0 + (n - 1) * factor * d.width if n > 1 else t1, n, unit)

    def banded(series: Series, title: str, unit: str, css: str, legend: str, limit_of: Optional[Series] = None,
               events: Optional[list] = None) -> None:
        """One chart: the min-max band and mean of `series` per bucket, and its limit if any."""
        lo = series.lows(factor)
        hi = series.highs(factor)
        mean = series.means(factor)
        limit = limit_of.highs(factor) if limit_of is not None else None
        c = chart(title, unit)
        c.band(lo, hi, "band " + css)
        if limit is not None:
            c.line(limit, "limit", limit=True)
        c.line(mean, "mean " + css)
        c.events(w.events if events is None else events)
        out.append(c.svg(legend))

    banded(b.cpu, "CPU % (100 = one core)", PERCENT, "cpu",
           '<i class="k cpu"></i>mean, band min–max <i class="k limit"></i>quota', b.cpu_limit)
    banded(b.ws, "Memory working set", BYTES, "mem",
           '<i class="k mem"></i>working set <i class="k limit"></i>limit', b.mem_limit)

    rd = b.rd.means(factor)
    wr = b.wr.means(factor)
    if any(v is not None for v in rd + wr):
        c = chart("Block IO", RATE)
        c.line(rd, "mean rd")
        c.line(wr, "mean wr")
        c.events([e for e in w.events if e[1] == "oom_kill"])
        out.append(c.svg('<i class="k rd"></i>read <i class="k wr"></i>write'))

    if w.has_gpu:
        banded(b.sm, "GPU SM % (100 = one GPU)", PERCENT, "gpu", '<i class="k gpu"></i>SM %')
        gm = b.gmem.means(factor)
        c = chart("GPU memory", BYTES)
        c.line(gm, "mean gmem")
        out.append(c.svg('<i class="k gmem"></i>GPU memory'))
    return "".join(out)
