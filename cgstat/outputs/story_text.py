"""`cgstat story`'s view: a workload's life (app/story.py's summary, plain figures) as text
for a person, or as one JSON object for tools.

The first line is the verdict: how it ended (OOM-killed at the kernel log's time of the
kill, at its limit, after growing so much an hour for so long; exited; still running at
the last record). Then one line per subject: when it was seen, its limits, memory (the
kernel's peak first, the sampled figures said as sampled), the kernel's memory.events
counts, CPU and throttling, throttling and pressure episodes, GPU held and busy, IO and
network, its events with their times, and how it ended with its lifetime totals (its exit
record). Names are hostile: controls escaped.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import orjson

from cgstat.outputs.clock import Clock, duration
from cgstat.text import escape_controls
from cgstat.units import binary_size

PEAK_FROM = {"memory.peak": "the kernel's memory.peak / max_usage_in_bytes", "highest_seen": "sampled",
             "kernel_log": "the kernel log's usage at the kill"}
Story = Dict[str, Any]


def size(v: Optional[float]) -> str:
    """"16 GiB", "1.2 GiB", "512 B"."""
    return "unknown" if v is None else binary_size(v).replace(".0 ", " ")


def rate(bytes_per_s: float, span_s: float) -> str:
    """Growth per hour over hours, per minute over minutes, else per second."""
    if span_s >= 7200:
        return "%s an hour" % size(bytes_per_s * 3600)
    if span_s >= 120:
        return "%s a minute" % size(bytes_per_s * 60)
    return "%s a second" % size(bytes_per_s)


def _times(n: int) -> str:
    return "once" if n == 1 else "%d times" % n


def verdict(s: Story, clock: Clock) -> str:
    """The first line: how the workload's life went, in one sentence."""
    end, mem, cpu = s["ending"], s["memory"], s["cpu"]
    slope, span = mem["growth_bytes_per_second"], mem["growth_seconds"]
    grew = " after growing %s for %s" % (rate(slope, span), duration(span)) if slope and span else ""
    kills = s["oom_kills"]
    if end["how"] == "oom_kill":
        at = " at its %s limit" % size(end["limit_bytes"]) if end["limit_bytes"] is not None else ""
        if end["global_oom"]:
            at = " when the machine ran out of memory"
        text = "OOM-killed at %s%s%s" % (clock.time(end["at"]), at, grew)
    elif end["how"] == "exit":
        lived = (s["exit"] or {}).get("lifetime_seconds")
        text = "Ended at %s after %s: its processes exited" % (clock.time(end["at"]), duration(lived))
        if kills:
            text += " (OOM-killed a process %s before, and lived on)" % _times(len(kills))
    else:
        text = "Still running at its last record (%s), seen for %s" % (clock.time(end["at"]),
                                                                       duration(s["seen_seconds"]))
        if kills:
            text += "; OOM-killed a process %s, last at %s" % (_times(len(kills)), clock.time(kills[-1]["at"]))
        if grew:
            text += "; growing %s" % rate(slope, span)
    share = cpu["throttled_percent"]
    if share is not None and share >= 25:
        text += "; throttled in %.0f %% of its CPU periods" % share
    return text


def _episodes(runs: List[Dict[str, Any]], clock: Clock) -> str:
    shown = ["%s to %s (up to %.0f %%)" % (clock.time(r["start"]), clock.time(r["end"]), r["peak_percent"])
             for r in runs[:5]]
    return ", ".join(shown) + (" and %d more" % (len(runs) - 5) if len(runs) > 5 else "")


def lines(s: Story, clock: Clock) -> List[Tuple[str, str]]:
    """(subject, text) pairs, in the order told."""
    out: List[Tuple[str, str]] = []
    w = s["workload"]
    ident = ["%s %s" % (w["kind"], w["name"])]
    if w["kind"] != "cgroup":
        ident.append("cgroup %s" % w["cgroup"])
    if w.get("host"):
        ident.append("host %s" % w["host"])
    out.append(("workload", ", ".join(ident)))
    if s["samples"]:
        out.append(("seen", "%s to %s (%s, %d records)" % (clock.day(s["first_seen"]), clock.day(s["last_seen"]),
                                                           duration(s["seen_seconds"]), s["samples"])))
        lim = s["limits"]
        out.append(("limits", "memory %s, CPU %s, pids %s" % (
            size(lim["memory_bytes"]) if lim["memory_bytes"] is not None else "none",
            "%g cores" % lim["cpu_cores"] if lim["cpu_cores"] is not None else "none",
            "%d" % lim["pids"] if lim["pids"] is not None else "none")))
    else:
        out.append(("seen", "never read: known from the kernel log only (it lived less than a tick)"))
    for ch in s["limit_changes"][:5]:
        mem = ch["limit"] == "memory"
        out.append(("", "at %s its %s limit went from %s to %s" % (
            clock.time(ch["ts"]), ch["limit"], size(ch["from"]) if mem else ch["from"],
            size(ch["to"]) if mem else ch["to"])))
    m = s["memory"]
    told = ["peak %s%s (%s)" % (size(m["peak_bytes"]), " = %d B" % m["peak_bytes"] if m["peak_bytes"] else "",
                                PEAK_FROM.get(m["peak_source"], m["peak_source"]))]
    if m["sampled_peak_bytes"] is not None and m["peak_source"] != "highest_seen":
        told.append("highest usage sampled %s at %s" % (size(m["sampled_peak_bytes"]), clock.time(m["sampled_peak_at"])))
    if m["working_set_first_bytes"] is not None:
        told.append("working set %s at first, %s at last (sampled)" % (size(m["working_set_first_bytes"]),
                                                                        size(m["working_set_last_bytes"])))
    if m["growth_bytes_per_second"] and m["growth_seconds"]:
        told.append("grew %s for %s" % (rate(m["growth_bytes_per_second"], m["growth_seconds"]),
                                        duration(m["growth_seconds"])))
    out.append(("memory", "; ".join(told)))
    ev = m["events"]
    if isinstance(ev, dict) and ev:
        out.append(("", "memory.events (the kernel's counts): " + ", ".join(
            "%s %s" % (k, ev[k]) for k in ("low", "high", "max", "oom", "oom_kill") if k in ev)))
    c = s["cpu"]
    if c["seconds_total"] is not None:
        cpu = "%.2f s in all (the kernel's count)" % c["seconds_total"]
        if c["cores_average"] is not None:
            cpu += ", %.2f cores on average" % c["cores_average"]
        if c["peak_percent"] is not None:
            cpu += ", highest %.0f %% at %s (sampled)" % (c["peak_percent"], clock.time(c["peak_at"]))
        if c["throttled_percent"] is not None:
            cpu += "; throttled %.2f s, in %d of %d periods (%.0f %%)" % (
                c["throttled_seconds_total"] or 0.0, c["throttled_periods_total"], c["periods_total"],
                c["throttled_percent"])
        out.append(("CPU", cpu))
    if s["throttled_episodes"]:
        out.append(("throttled", _episodes(s["throttled_episodes"], clock) + " (sampled: 25 % of periods or more)"))
    pressure = ["%s %s" % (res, _episodes(runs, clock)) for res, runs in s["pressure_episodes"].items() if runs]
    if pressure:
        out.append(("pressure", "; ".join(pressure) + " (some avg10 of 25 % or more, sampled)"))
    elif s["pressure_peaks"]:
        out.append(("pressure", "highest some avg10: " + ", ".join(
            "%s %.1f %%" % (res, p["some_avg10"]) for res, p in s["pressure_peaks"].items()) + " (sampled)"))
    g = s["gpu"]
    if g["held_bytes"] is not None or g["busy_seconds"] is not None:
        gpu = "held %s at most (at %s), memory on a GPU for %.0f GPU-seconds" % (
            size(g["held_bytes"]), clock.time(g["held_at"]), g["held_seconds"])
        if g["busy_seconds"] is not None:
            gpu += ", busy %.1f GPU-seconds (SM %%, sampled)" % g["busy_seconds"]
        if g["devices"]:
            gpu += " on " + " ".join(g["devices"])
        out.append(("GPU", gpu))
    io = s["io"]
    if io["read_bytes_total"] is not None or io["write_bytes_total"] is not None:
        text = "read %s, written %s" % (size(io["read_bytes_total"]), size(io["write_bytes_total"]))
        if io["network_rx_bytes_total"] is not None:
            text += "; network in %s, out %s" % (size(io["network_rx_bytes_total"]), size(io["network_tx_bytes_total"]))
        out.append(("IO", text))
    kernel = {k["ts"]: k["at"] for k in s["oom_kills"] if k["clock"] == "kernel log"}
    for e in s["events"]:
        stamp = clock.day(e.get("ts"))
        if e.get("kind") == "oom_kill" and e.get("ts") in kernel:
            stamp += " (the kernel log's %s)" % clock.time(kernel[e["ts"]])
        out.append(("event", "%s %s %s: %s" % (stamp, e.get("severity"), e.get("kind"), e.get("message"))))
    gone = s["exit"]
    if gone:
        totals = ["lifetime %s" % duration(gone.get("lifetime_seconds"))]
        if gone.get("cpu_seconds_total") is not None:
            totals.append("CPU %.2f s" % gone["cpu_seconds_total"])
        if gone.get("cpu_throttled_seconds_total") is not None:
            totals.append("throttled %.2f s in %s periods" % (gone["cpu_throttled_seconds_total"],
                                                              gone.get("cpu_throttled_periods_total")))
        totals.append("peak memory %s (%s)" % (size(gone.get("memory_peak_bytes")),
                                               PEAK_FROM.get(str(gone.get("memory_peak_source")), "unknown")))
        totals.append("OOM kills %s" % gone.get("oom_kills_total"))
        if gone.get("gpu_seconds_total") is not None:
            totals.append("GPU %.1f s" % gone["gpu_seconds_total"])
        out.append(("ended", "%s by %s (found gone then; totals as of its last record at %s): %s" % (
            clock.day(gone.get("ended")), gone.get("ended_by") or "unknown", clock.time(gone.get("last_seen")),
            ", ".join(totals))))
    else:
        out.append(("ended", "no exit record: running at the end of what was read, or its end not recorded"))
    return out


def story_text(s: Story, clock: Clock) -> str:
    zone = clock.zone_at(s["last_seen"] or s["ending"]["at"])
    head = "%s: %s (times in %s)" % (escape_controls(str(s["workload"]["name"])), verdict(s, clock), zone)
    told = lines(s, clock)
    width = max(len(subject) for subject, _ in told)
    return "\n".join([head] + ["  %-*s  %s" % (width, subject, escape_controls(str(text)))
                               for subject, text in told]) + "\n"


def story_json(s: Story) -> str:
    """One JSON object: the summary's figures and the verdict (times RFC 3339 UTC)."""
    return orjson.dumps(dict(s, verdict=verdict(s, Clock(utc=True)))).decode() + "\n"
