"""The report's table of the workloads that ended in its span: one row per exit record
(workload, start, end, lifetime, CPU seconds, throttled, peak memory and where it is from,
OOM kills, IO, GPU seconds, how it ended), times in UTC as the rest of the page."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from cgstat.contract.display import display_name
from cgstat.outputs.report.markup import esc, size, span
from cgstat.pipeline.build import number_at
from cgstat.timestamps import parse_ts

PEAK_FROM = {"memory.peak": "kernel", "highest_seen": "sampled", "kernel_log": "kernel log"}
HEAD = ("workload", "start", "end", "lifetime", "CPU s", "throttled s", "peak memory", "OOM kills", "IO read",
        "IO written", "GPU s", "ended by")


def _day(ts: Any) -> str:
    t = parse_ts(ts)
    return "–" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _fixed(v: Optional[float], digits: int) -> str:
    return "–" if v is None else "%.*f" % (digits, v)


def ended_table(exits: List[Dict[str, Any]], dropped: int) -> str:
    """The section (empty when nothing ended)."""
    if not exits:
        return ""
    rows = []
    for r in exits:
        peak = number_at(r, "memory_peak_bytes")
        source = PEAK_FROM.get(str(r.get("memory_peak_source")))
        lived = number_at(r, "lifetime_seconds")
        kills = number_at(r, "oom_kills_total")
        cells = [esc(display_name(r)), esc(_day(r.get("started"))), esc(_day(r.get("ended"))),
                 esc(span(lived)) if lived is not None else "–", _fixed(number_at(r, "cpu_seconds_total"), 2),
                 _fixed(number_at(r, "cpu_throttled_seconds_total"), 2),
                 "–" if peak is None else "%s%s" % (esc(size(peak)), " (%s)" % source if source else ""),
                 "–" if kills is None else "%d" % kills,
                 esc(size(number_at(r, "io_read_bytes_total"))), esc(size(number_at(r, "io_write_bytes_total"))),
                 _fixed(number_at(r, "gpu_seconds_total"), 1), esc(r.get("ended_by") or "–")]
        rows.append('<tr class="exit" data-name="%s"><td class="n" title="%s">%s</td>%s</tr>' % (
            esc(display_name(r) + " " + str(r.get("cgroup"))), esc(r.get("cgroup")), cells[0],
            "".join("<td>%s</td>" % c for c in cells[1:])))
    more = '<p class="note">%d more exit records are left out.</p>' % dropped if dropped else ""
    return ('<h2 id="ended">Workloads that ended</h2><p class="note">One row per exit record: the totals of its '
            'last record (the kernel frees a cgroup&#39;s counters with it), the peak memory from the kernel '
            '(memory.peak, v1 max_usage_in_bytes) where it has it, else sampled. Times UTC.</p>'
            '<div class="scroll"><table id="exits"><thead><tr>%s</tr></thead><tbody>%s</tbody></table></div>%s' % (
                "".join('<th class="n">%s</th>' % esc(h) if i == 0 else "<th>%s</th>" % esc(h)
                        for i, h in enumerate(HEAD)), "".join(rows), more))
