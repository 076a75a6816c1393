"""The report's page: the HTML around the charts (title, notes, the sortable summary, a
section per workload with its events), its CSS and the few lines of inline JavaScript that
sort and filter the summary. No network: no fonts, no CDN."""

from __future__ import annotations

import math
import time
from typing import Optional

from cgstat.outputs.report.accumulate import ReportData
from cgstat.outputs.report.charts import workload_charts
from cgstat.outputs.report.ended import ended_table
from cgstat.outputs.report.markup import clock, esc, pct, rate, size, span

# The mark of a report cgstat wrote: the only kind of existing file -o replaces.
GENERATOR = '<meta name="generator" content="cgstat">'

_CSS = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 4px;word-break:break-all}
.meta,.note{color:#5b6474}.note{margin:4px 0}
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e3e6eb;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#f4f6f9;position:sticky;top:0;white-space:normal}th[data-c]{cursor:pointer}th.g{text-align:center;
border-bottom:1px solid #c9ced6}td.n,th.n{text-align:left}
td.n:first-child{max-width:18em;white-space:normal;overflow-wrap:anywhere}
td.e,th.e{text-align:left}td.e{white-space:normal;min-width:8em;max-width:16em}
section.w{border-top:1px solid #d5d9e0;margin-top:12px}.charts{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;width:640px;max-width:100%}figcaption{font-weight:600;font-size:12px}
svg.chart{width:100%;height:auto;background:#fbfcfd;border:1px solid #e3e6eb}
.grid{stroke:#e6e9ee;stroke-width:1}.ax{font-size:10px;fill:#5b6474;text-anchor:end}.ax.s{text-anchor:start}
.nodata{font-size:13px;fill:#8a93a3;text-anchor:middle}
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
t.tHead.addEventListener('click',function(e){var th=e.target.closest('th[data-c]');if(!th)return;var i=+th.dataset.c,
d=th.dataset.d=th.dataset.d==='a'?'d':'a',rows=[].slice.call(b.rows);rows.sort(function(x,y){
var p=x.cells[i].dataset.v,q=y.cells[i].dataset.v,r;if(p!==undefined&&q!==undefined){r=(+p)-(+q);}else{
r=x.cells[i].textContent.localeCompare(y.cells[i].textContent);}return d==='a'?r:-r;});
rows.forEach(function(r){b.appendChild(r);});});
var f=document.getElementById('filter');f.addEventListener('input',function(){var q=f.value.toLowerCase();
[].forEach.call(document.querySelectorAll('[data-name]'),function(el){el.style.display=
el.dataset.name.toLowerCase().indexOf(q)<0?'none':'';});});})();
"""


# Two header rows, the figures grouped under what they measure, so that the table fits a
# 1,400-pixel window; each sortable header knows its column (data-c), as cellIndex counts
# only the cells of its own row.
_GROUPS = (("CPU", ("mean", "peak", "limit")), ("memory", ("mean", "peak", "limit", "peak %")),
           ("block IO mean", ("read", "write")), ("GPU", ("SM mean", "SM peak", "mem peak", "held h", "busy h")))


def _summary_head() -> str:
    top = ['<th class="n" rowspan="2" data-c="0">workload</th><th class="n" rowspan="2" data-c="1">kind</th>']
    sub = []
    c = 2
    for group, names in _GROUPS:
        top.append('<th class="g" colspan="%d">%s</th>' % (len(names), group))
        for name in names:
            sub.append('<th data-c="%d">%s</th>' % (c, name))
            c += 1
    top.append('<th rowspan="2" data-c="%d">OOM kills</th>'
               '<th class="e" rowspan="2" data-c="%d">events</th>' % (c, c + 1))
    return "<tr>%s</tr><tr>%s</tr>" % ("".join(top), "".join(sub))


_SUMMARY_HEAD = _summary_head()


def _cores(n: Optional[float]) -> str:
    return "–" if n is None else "%g core%s" % (n, "" if n == 1 else "s")


def _td(text: str, value: Optional[float] = None, cls: str = "") -> str:
    v = "" if value is None else ' data-v="%r"' % float(value)
    c = ' class="%s"' % cls if cls else ""
    return "<td%s%s>%s</td>" % (c, v, text)


def _gpu_hours(seconds: float, has_gpu: bool) -> str:
    """GPU-hours (one GPU for an hour), "–" without GPU metrics."""
    if not has_gpu:
        return _td("–")
    return _td("%.2f" % (seconds / 3600.0), seconds / 3600.0)


def render(d: ReportData, title: str, point_budget: int) -> str:
    workloads = list(d.workloads.values())
    charted = [w for w in workloads if w.charted]
    points = max(60, min(d.points, point_budget // max(len(charted), 1)))
    start = d.t0 or 0.0
    end = d.t_end or start
    head = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">' + GENERATOR +
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            '<title>%s</title><style>%s</style></head><body>' % (esc(title), _CSS))
    out = [head, "<h1>%s</h1>" % esc(title)]
    hosts = ", ".join(esc(h) for h in sorted(d.hosts)) or "–"
    out.append('<p class="meta">Host %s · %s → %s UTC (%s) · %d workloads · %d records · %d events · '
               'charts: %d points at most, %s per point</p>' % (
                   hosts, esc(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start))),
                   esc(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(end))), esc(span(end - start)),
                   len(workloads), d.records, d.events, points,
                   esc(span(d.width * max(1, math.ceil(max((len(w.buckets) for w in charted if w.buckets is not None), default=1)
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
        out.append('<p class="note">%s</p>' % esc(n))
    out.append('<input id="filter" type="search" placeholder="filter by name or cgroup" aria-label="filter">')

    # summary
    out.append('<h2>Summary</h2><div class="scroll"><table id="summary"><thead>%s</thead><tbody>' % _SUMMARY_HEAD)
    for w in workloads:
        name_attr = esc(w.name + " " + w.cgroup)
        link = '<a href="#w%d">%s</a>' % (w.index, esc(w.name)) if w.charted else esc(w.name)
        evs = ", ".join("%s %d" % (esc(k), n) for k, n in sorted(w.event_counts.items()) if k != "resolved")
        n_events = sum(n for k, n in w.event_counts.items() if k != "resolved")
        # the kernel's peak where it has one (what the job needed, between samples too), else sampled
        peak: Optional[float]
        if w.kernel_peak is not None:
            peak, peak_text = w.kernel_peak, size(w.kernel_peak) + " (kernel)"
            peak_pct = 100.0 * w.kernel_peak / w.mem_limit if w.mem_limit else None
        else:
            peak, peak_text, peak_pct = w.ws.peak, size(w.ws.peak) + " (sampled)", w.mem_pct.peak
        kills = d.oom_kills(w)
        out.append('<tr data-name="%s"><td class="n" title="%s">%s</td><td class="n">%s</td>%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s</tr>' % (
            name_attr, esc(w.cgroup), link, esc(w.kind),
            _td(pct(w.cpu.mean), w.cpu.mean), _td(pct(w.cpu.peak), w.cpu.peak),
            _td(_cores(w.cpu_limit), w.cpu_limit),
            _td(size(w.ws.mean), w.ws.mean), _td(peak_text, peak),
            _td(size(w.mem_limit) if w.mem_limit is not None else "–", w.mem_limit),
            _td(pct(peak_pct), peak_pct),
            _td(rate(w.rd.mean), w.rd.mean), _td(rate(w.wr.mean), w.wr.mean),
            _td(pct(w.sm.mean), w.sm.mean), _td(pct(w.sm.peak), w.sm.peak),
            _td(size(w.gmem.peak), w.gmem.peak), _gpu_hours(w.gpu_held_s, w.has_gpu),
            _gpu_hours(w.gpu_busy_s, w.has_gpu), _td("%d" % kills, kills),
            _td(evs or "–", n_events, "e")))
    out.append("</tbody></table></div>")
    out.append('<p class="note">Memory peak: the kernel\'s (memory.peak, v1 max_usage_in_bytes: usage with the page '
               'cache, between samples too) where it has it, else the highest working set sampled. Means, CPU '
               'and GPU figures are sampled.</p>')
    out.append(ended_table(d.exits, d.exits_dropped))

    # per workload: those with events first, then the rest in stream order
    for w in sorted(charted, key=lambda w: (0 if w.events else 1, w.index)):
        out.append('<section class="w" id="w%d" data-name="%s"><h2>%s <span class="meta">%s · %s</span></h2>' % (
            w.index, esc(w.name + " " + w.cgroup), esc(w.name), esc(w.kind), esc(w.cgroup)))
        if w.events:
            items = []
            for t, kind, severity, message, resolves in w.events:
                items.append('<li class="%s">%s <b>%s</b> %s</li>' % (
                    esc(severity), esc(clock(t)), esc(resolves and "resolved " + resolves or kind), esc(message)))
            more = ' <li>… %d more</li>' % w.events_dropped if w.events_dropped else ""
            out.append('<ul class="events">%s%s</ul>' % ("".join(items), more))
        out.append('<div class="charts">%s</div></section>' % workload_charts(d, w, points))
    if d.orphan_events:
        out.append('<h2>Other events</h2><ul class="events">%s</ul>' % "".join(
            '<li class="%s">%s <b>%s</b> %s</li>' % (esc(s), esc(clock(t)), esc(k), esc(m))
            for t, k, s, m in d.orphan_events))
    out.append("<script>%s</script></body></html>\n" % _JS)
    return "".join(out)
