"""The report's charts: hand-written SVG (min-max bands, mean lines, limits, event markers
and episode spans) from a workload's buckets."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from cgstat.outputs.report.accumulate import ReportData, Series, Workload
from cgstat.outputs.report.markup import clock, esc, rate, size


_W, _H, _PADL, _PADB, _PADT = 640, 130, 58, 16, 8


class Chart:
    """One SVG chart: bands, lines and event markers over a time axis."""

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
                              % (sev, esc(kind), esc(clock(t)), esc(kind), esc(message), x, x, _PADT,
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
                                                                         esc(self.fmt(v))))
        axis = ('<text class="ax" x="%d" y="%d" text-anchor="start">%s</text>'
                '<text class="ax" x="%d" y="%d">%s</text>' % (_PADL, _H - 3, esc(clock(self.t0)), _W - 4, _H - 3,
                                                              esc(clock(self.t1))))
        return ('<figure><figcaption>%s <span class="lg">%s</span></figcaption>'
                '<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">%s%s%s</svg></figure>'
                % (esc(self.title), legend, _W, _H, esc(self.title), "".join(grid), "".join(self.parts), axis))


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

    def chart(title, fmt):
        c = Chart(title, t0, t0 + (n - 1) * factor * d.width if n > 1 else t1, n, fmt)
        return c

    def banded(series: Series, title: str, fmt, css: str, legend: str, limit_of: Optional[Series] = None,
               events: Optional[list] = None) -> None:
        """One chart: the min-max band and mean of `series` per bucket, and its limit if any."""
        lo = series.lows(factor)
        hi = series.highs(factor)
        mean = series.means(factor)
        limit = limit_of.highs(factor) if limit_of is not None else None
        c = chart(title, fmt)
        c.see(hi, limit or [])
        c.band(lo, hi, "band " + css)
        if limit is not None:
            c.line(limit, "limit")
        c.line(mean, "mean " + css)
        c.events(w.events if events is None else events)
        out.append(c.svg(legend))

    percent = lambda v: "%.0f%%" % v  # noqa: E731
    banded(b.cpu, "CPU % (100 = one core)", percent, "cpu",
           '<i class="k cpu"></i>mean, band min–max <i class="k limit"></i>quota', b.cpu_limit)
    banded(b.ws, "Memory working set", size, "mem",
           '<i class="k mem"></i>working set <i class="k limit"></i>limit', b.mem_limit)

    rd = b.rd.means(factor)
    wr = b.wr.means(factor)
    if any(v is not None for v in rd + wr):
        c = chart("Block IO", rate)
        c.see(rd, wr)
        c.line(rd, "mean rd")
        c.line(wr, "mean wr")
        c.events([e for e in w.events if e[1] == "oom_kill"])
        out.append(c.svg('<i class="k rd"></i>read <i class="k wr"></i>write'))

    if w.has_gpu:
        banded(b.sm, "GPU SM % (100 = one GPU)", percent, "gpu", '<i class="k gpu"></i>SM %')
        gm = b.gmem.means(factor)
        c = chart("GPU memory", size)
        c.see(gm)
        c.line(gm, "mean gmem")
        out.append(c.svg('<i class="k gmem"></i>GPU memory'))
    return "".join(out)
