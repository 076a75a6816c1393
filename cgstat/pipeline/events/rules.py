"""The event rules, one small class each, and the lists the detector runs them from.

A cgroup rule's `judge(case)` is called for every cgroup record of every tick; a GPU rule's
`judge(gpu_records, events)` once per tick with that tick's `type: "gpu"` records, keeping
its own state. A new rule is one class here, added to CGROUP_RULES or GPU_RULES, plus its
kind in cgstat/event.schema.json and docs/diagnostics.md. The rules on a GPU's own health
(XIDs, throttling, ECC, row remapping) and the GPU rules' base class are in gpu.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Tuple, Type

from cgstat.pipeline.events.case import Case
from cgstat.pipeline.events.event import Episode, cap, duration, make_event, who
from cgstat.pipeline.events.gpu import GPU_DEVICE_RULES, GpuRule
from cgstat.pipeline.events.kills import Rise
from cgstat.pipeline.events.thresholds import Thresholds
from cgstat.pipeline.events.window import FIELD, fit_line
from cgstat.pipeline.record import number_at
from cgstat.units import mib

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.records import EventRecord

# the record fields read by path (tests/test_fields.py checks each is in the field table;
# the table itself is not imported here: a cron run would build it for two paths)
_PIDS_CURRENT = ("pids", "current")
_PIDS_LIMIT = ("pids", "limit")

_HIGH = FIELD["memory_high_events"]


class CgroupRule:
    """Judges one cgroup record at a time (see Case)."""

    kind = ""

    def __init__(self, th: Thresholds):
        self.th = th

    def judge(self, c: Case) -> None:
        raise NotImplementedError


class OomKill(CgroupRule):
    """The OOM-kill counter went up between two samples of the same cgroup: the rise is
    kept for the end of the tick, where it and the kernel log's kills make one event per
    kill (events/kills.py)."""

    kind = "oom_kill"

    def judge(self, c: Case) -> None:
        s, before = c.sample, c.before
        kills_now = s.oom_kills_total
        kills_before = before.oom_kills_total if before is not None else None
        if before is not None and kills_now is not None and kills_before is not None and kills_now > kills_before:
            c.oom_rises.append(Rise(c.record["cgroup"], int(kills_now - kills_before), int(kills_now), c.record,
                                    s.limit_bytes, before.working_set_bytes, s.working_set_bytes))


class MemoryHighThrottled(CgroupRule):
    """Held at memory.high: the cgroup's own `high` count (memory.events.local) rose over
    the window and in the newest tick. Above memory.high the kernel makes every allocation
    reclaim first and puts the task to sleep (mem_cgroup_handle_over_high): a slowdown with
    no OOM kill and nothing in the job's log. Resolved once a whole window passes without."""

    kind = "memory_high_throttled"

    def judge(self, c: Case) -> None:
        window = c.window
        if window is None:
            return
        first, last = window.vs[0][_HIGH], window.vs[-1][_HIGH]
        if first is None or last is None or last < first:  # unknown, or a counter reset
            return
        if self.kind in c.history.open:
            if last == first:
                c.resolve(self.kind, "Throttling at memory.high", {"memory_high_events_total": int(last)})
            return
        before = c.before.memory_high_events if c.before is not None else None
        if last == first or before is None or last <= before:
            return
        s = c.sample
        times = int(last - first)
        span = window.span_s()
        msg = ("%s was held at its memory.high (%s, using %s) %d times over the last %s: the kernel throttles "
               "it and makes it reclaim its own memory, a slowdown with no OOM kill; raise memory.high "
               "(systemd MemoryHigh=, Kubernetes memoryThrottlingFactor) or lower what it holds "
               "(caches, batch size, workers)." % (
                   who(c.record), "unknown" if s.memory_high_bytes is None else mib(s.memory_high_bytes),
                   mib(s.working_set_bytes), times, duration(span)))
        c.raise_(self.kind, "warning", cap(msg),
                 {"memory_high_events": times, "memory_high_events_total": int(last),
                  "high_bytes": s.memory_high_bytes, "working_set_bytes": s.working_set_bytes,
                  "window_s": round(span, 3)})


class PidsLimitHit(CgroupRule):
    """Forks refused at a pids.max: the pids.events max count went up between two samples
    of the same cgroup. Further refusals within pids_quiet_s of the last belong to the same
    episode, whose total the resolved notice gives. On kernels from 6.13 the v2 count is
    hierarchical (its ancestors count it too): of a tick's events only the deepest is kept."""

    kind = "pids_limit_hit"

    def judge(self, c: Case) -> None:
        s, before = c.sample, c.before
        ep = c.episode(self.kind)
        now = s.pids_limit_failures
        then = before.pids_limit_failures if before is not None else None
        if now is not None and then is not None and now > then:
            failures = int(now - then)
            if ep is None:
                limit = number_at(c.record, *_PIDS_LIMIT)
                msg = ("%s: %d fork%s refused because the cgroup reached its pids.max%s: new processes and "
                       "threads fail with EAGAIN (\"Resource temporarily unavailable\", \"can't start new "
                       "thread\"); raise the pids limit (docker --pids-limit, Kubernetes podPidsLimit) or find "
                       "what spawns so many (a fork loop, a thread per request)." % (
                           who(c.record), failures, "" if failures == 1 else "s",
                           "" if limit is None else " (%d)" % limit))
                ep = c.raise_(self.kind, "warning", cap(msg),
                              {"failures": failures, "pids_events_max_total": int(now), "limit": limit,
                               "current": number_at(c.record, *_PIDS_CURRENT)}, hierarchical=True)
                ep.extra["failures"] = failures
            else:
                ep.extra["failures"] += failures
            ep.extra["last"] = c.t
            return
        if ep is not None and c.t - ep.extra["last"] >= self.th.pids_quiet_s:
            total = ep.extra["failures"]
            if total > ep.evidence["failures"]:
                c.resolve(self.kind, "Fork failures at the pids limit",
                          {"failures": total, "pids_events_max_total": now})
            else:
                c.end(self.kind)


class MemoryNearLimit(CgroupRule):
    """The working set above near_limit_percent of the limit (hysteresis)."""

    kind = "memory_near_limit"

    def judge(self, c: Case) -> None:
        th = self.th
        ws, limit = c.sample.working_set_bytes, c.sample.limit_bytes
        pct = ws / limit * 100.0 if ws is not None and limit else None
        if self.kind in c.history.open:
            if pct is None or pct < th.near_limit_clear_percent:
                c.resolve(self.kind, "Memory pressure near the limit",
                          {"working_set_bytes": ws, "limit_bytes": limit,
                           "percent": None if pct is None else round(pct, 2)})
            return
        if pct is not None and pct > th.near_limit_percent:
            msg = ("%s uses %.0f %% of its memory limit (%s of %s): it will be OOM-killed if it grows further; "
                   "raise the limit or reduce the working set (batch size, caches, leaked tensors)."
                   % (who(c.record), pct, mib(ws), mib(limit)))
            c.raise_(self.kind, "warning", cap(msg),
                     {"working_set_bytes": ws, "limit_bytes": limit, "percent": round(pct, 2),
                      "threshold_percent": th.near_limit_percent})


class MemoryGrowth(CgroupRule):
    """A steady least-squares climb of the working set over the window."""

    kind = "memory_growth"

    def judge(self, c: Case) -> None:
        th = self.th
        window = c.window
        is_open = self.kind in c.history.open
        if (not is_open and window is not None and c.history.ws_since <= window.ts[0]
                and th.growth_min_bytes_per_second >= 1.0):
            # Every working set in the window is the same value: the fit's slope is 0 (a
            # rounding residue far below a byte per second), never a climb. An idle
            # cgroup's whole window is not fitted again every tick.
            return
        points = window.points("working_set_bytes") if window is not None else []
        ws, limit = c.sample.working_set_bytes, c.sample.limit_bytes
        if window is None or len(points) < th.growth_min_samples:
            if is_open and ws is None:
                c.resolve(self.kind, "Memory growth", {})
            return
        slope, r2 = fit_line(points)
        if is_open:
            if slope < th.growth_min_bytes_per_second / 2 or r2 < th.growth_clear_r2:
                c.resolve(self.kind, "Memory growth",
                          {"bytes_per_second": round(slope, 1), "r2": round(r2, 4), "working_set_bytes": ws})
            return
        if slope >= th.growth_min_bytes_per_second and r2 >= th.growth_min_r2:
            span = points[-1][0] - points[0][0]
            to_limit = None
            if limit and ws is not None and limit > ws:
                to_limit = round((limit - ws) / slope, 1)
            msg = ("%s's working set grew steadily by %s/s over the last %s (now %s%s): a leak? "
                   "Look for tensors kept with their graph (losses appended without .item()/.detach()), "
                   "ever-growing lists or caches." % (
                       who(c.record), mib(slope), duration(span), mib(ws),
                       "" if limit is None else ", limit %s%s" % (
                           mib(limit), "" if to_limit is None else ", reached in ~%s" % duration(to_limit))))
            c.raise_(self.kind, "warning", cap(msg),
                     {"bytes_per_second": round(slope, 1), "r2": round(r2, 4), "window_s": round(span, 3),
                      "samples": len(points), "working_set_bytes": ws,
                      "working_set_bytes_start": points[0][1], "limit_bytes": limit,
                      "seconds_to_limit": to_limit})


class CpuThrottled(CgroupRule):
    """Throttled in most CFS periods over the window, and for most of its time."""

    kind = "cpu_throttled"

    def judge(self, c: Case) -> None:
        th = self.th
        window = c.window
        frac, periods, throttled = window.throttle_fraction() if window is not None else (None, 0, 0)
        if self.kind in c.history.open:
            if window is not None and (frac is None or frac < th.throttled_clear_fraction):
                c.resolve(self.kind, "CPU throttling",
                          {"throttled_fraction": None if frac is None else round(frac, 4)})
            return
        if window is None or frac is None or periods < th.throttled_min_periods or frac < th.throttled_fraction:
            return
        if window.throttled_share(th.throttled_fraction) < th.sustained_share:
            return
        cores = c.sample.cpu_limit_cores
        cpu_pct = window.cpu_percent()
        msg = ("%s was throttled in %.0f %% of its CPU periods over the last %s (using %s cores of its %s-core "
               "quota): it needs more CPU than its limit; raise the quota or use fewer threads/workers." % (
                   who(c.record), frac * 100, duration(window.span_s()),
                   "?" if cpu_pct is None else "%.2f" % (cpu_pct / 100), "?" if cores is None else "%g" % cores))
        c.raise_(self.kind, "warning", cap(msg),
                 {"throttled_fraction": round(frac, 4), "periods": periods, "throttled_periods": throttled,
                  "cpu_percent": None if cpu_pct is None else round(cpu_pct, 2), "limit_cores": cores,
                  "window_s": round(window.span_s(), 3)})


class GpuIdleCpuBound(CgroupRule):
    """The container's GPU processes at ~0 % SM while its CPU sits at its quota."""

    kind = "gpu_idle_cpu_bound"

    def judge(self, c: Case) -> None:
        th = self.th
        is_open = self.kind in c.history.open
        gprocs = c.sample.gpu_processes
        if not is_open and not gprocs:
            return  # raising needs GPU processes in every sample, this one included
        window = c.window
        cores = c.sample.cpu_limit_cores
        sm_values = [v for v in window.column("gpu_sm_percent") if v is not None] if window is not None else []
        has_procs = window is not None and all(window.column("gpu_processes"))
        cpu_pct = window.cpu_percent() if window is not None else None
        sm_mean = sum(sm_values) / len(sm_values) if sm_values else None
        if is_open:
            busy = sm_mean is not None and sm_mean >= th.gpu_busy_sm_percent
            no_gpu = not gprocs
            off_limit = (cpu_pct is not None and cores and cpu_pct < 0.5 * th.cpu_at_limit_fraction * cores * 100)
            if window is not None and (busy or no_gpu or off_limit):
                c.resolve(self.kind, "The input-bound GPU",
                          {"sm_percent": None if sm_mean is None else round(sm_mean, 2),
                           "cpu_percent": None if cpu_pct is None else round(cpu_pct, 2)})
            return
        if (window is None or not has_procs or sm_mean is None or len(sm_values) < len(window)
                or sm_mean > th.gpu_idle_sm_percent or not cores or cpu_pct is None
                or cpu_pct < th.cpu_at_limit_fraction * cores * 100):
            return
        msg = ("%s's GPU sits idle (%.0f %% SM) while its CPU runs at its limit (%.2f of %g cores): the input "
               "pipeline starves the GPU; use more DataLoader workers (num_workers) and pin_memory=True, "
               "tf.data prefetch/parallel map, or raise the CPU quota." % (
                   who(c.record), sm_mean, cpu_pct / 100, cores))
        c.raise_(self.kind, "warning", cap(msg),
                 {"sm_percent": round(sm_mean, 2), "cpu_percent": round(cpu_pct, 2), "limit_cores": cores,
                  "gpu_processes": gprocs, "window_s": round(window.span_s(), 3)})


class GpuProcessOutsideContainer(GpuRule):
    """A process on a GPU that belongs to no container; resolved when it is gone."""

    kind = "gpu_process_outside_container"

    def __init__(self, th: Thresholds):
        super().__init__(th)
        self.open: Dict[Tuple[str, int], Episode] = {}

    def judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
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
            if key in self.open:
                continue
            dev = g.get("gpu") or {}
            where = ("in cgroup %s" % p.get("cgroup")) if p.get("cgroup") else "whose cgroup is unknown (another PID namespace, or gone)"
            msg = ("GPU process %s (%s) on GPU %s runs outside any container, %s, using %s of GPU memory: "
                   "it competes with the containers' jobs unseen by their limits." % (
                       p.get("pid"), p.get("name") or "?", dev.get("index"), where, mib(number_at(p, "memory_bytes"))))
            ev = make_event(g, self.kind, "warning", cap(msg),
                            {"pid": p.get("pid"), "name": p.get("name"), "gpu_index": dev.get("index"),
                             "gpu_uuid": dev.get("uuid"), "memory_bytes": p.get("memory_bytes"),
                             "sm_percent": p.get("sm_percent")},
                            cgroup=p.get("cgroup"), container=None)
            self.open[key] = Episode(g.get("ts"), 0.0, ev["evidence"])
            events.append(ev)
        for key in [k for k in self.open if k not in present]:
            ep = self.open.pop(key)
            events.append(make_event(gpu_records[0], "resolved", "info",
                                     "GPU process %s outside any container is gone from GPU %s." % (
                                         key[1], ep.evidence.get("gpu_index")),
                                     {"pid": key[1], "gpu_uuid": ep.evidence.get("gpu_uuid")},
                                     cgroup=None, container=None, resolves=self.kind, since=ep.ts))


# Every rule, in the order a tick's events come in (a cgroup's events in this order).
CGROUP_RULES: List[Type[CgroupRule]] = [OomKill, MemoryNearLimit, MemoryGrowth, CpuThrottled, GpuIdleCpuBound,
                                         MemoryHighThrottled, PidsLimitHit]
GPU_RULES: List[Type[GpuRule]] = [GpuProcessOutsideContainer] + GPU_DEVICE_RULES

KINDS = tuple(r.kind for r in CGROUP_RULES) + tuple(r.kind for r in GPU_RULES) + ("resolved",)
