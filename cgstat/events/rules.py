"""The event rules on cgroups, one small class each (CgroupRule): each judges a stream's
window and a pair of `once --state` runs. The GPU rules' base class (GpuRule) and the GPU
rules on processes, held memory and XIDs are in gpu.py, those on a GPU's own health
(throttling, ECC, row remapping) in gpu_health.py; KINDS lists every event kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Tuple, Type

from cgstat.contract.event_kinds import EVENT_KINDS, RESOLVED
from cgstat.contract.keys import Cgroup
from cgstat.events.case import Case
from cgstat.events.event import Episode, cap, duration, make_event, who
from cgstat.events.gpu import GPU_RULES, GpuRule
from cgstat.events.gpu_health import GpuThrottled  # noqa: F401  (defining the health rules registers them, after gpu.py's)
from cgstat.events.kills import Rise
from cgstat.events.thresholds import Thresholds
from cgstat.events.window import fit_line
from cgstat.pipeline.build import number_at
from cgstat.units import mib

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import EventRecord


# A cgroup rule's `judge(case)` is called for every cgroup record of every tick of a stream;
# its `judge_runs(case)` for every cgroup record of a `once --state` run, the case holding
# the previous run's sample (`before`), a window of the two and no open episode (nothing is
# kept between cron runs but the samples). A GPU rule's `judge(gpu_records, events)` runs
# once per tick with that tick's `type: "gpu"` records, keeping its own state;
# `judge_runs(gpu_records, xids, events)` once per cron run with the kernel log's XIDs.
# A new rule is one class: defining a subclass with a `kind` registers it (CGROUP_RULES,
# GPU_RULES, in the order they are defined, which is the order a cgroup's events come in);
# its thresholds go in thresholds.py, its kind in cgstat/contract/event_kinds.py (from which
# the event schema is made) and docs/events.md.
CGROUP_RULES: List[Type["CgroupRule"]] = []
"""Every cgroup rule, in the order they were defined (a cgroup's events come in this order)."""


class CgroupRule:
    """Judges one cgroup record at a time (see Case): `judge` in a stream, `judge_runs`
    across two `once --state` runs (by default nothing: a rule that needs a window of
    ticks has nothing to judge from two samples; `judge_runs = judge` where the stream's
    judging reads only the sample before and the window's ends)."""

    kind = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind"):
            CGROUP_RULES.append(cls)

    def __init__(self, th: Thresholds):
        self.th = th

    def judge(self, c: Case) -> None:
        raise NotImplementedError

    def judge_runs(self, c: Case) -> None:
        """Two `once --state` runs: c.before is the previous run's sample (None: none, or
        another life of the cgroup), c.window the two samples, c.history holds no episode."""


class OomKill(CgroupRule):
    """The OOM-kill counter went up between two samples of the same cgroup: the rise is
    kept for the end of the tick, where it and the kernel log's kills make one event per
    kill (events/kills.py)."""

    kind = "oom_kill"

    def judge(self, c: Case) -> None:
        s, before = c.sample, c.before
        if before is None:
            if s.oom_kills_total is not None:
                c.first_totals[c.record["cgroup"]] = s.oom_kills_total
        elif s.oom_kills_total != before.oom_kills_total:  # (most ticks: the same count)
            rise = Rise.between(c.record, before, s.oom_kills_total, s.working_set_bytes, s.limit_bytes)
            if rise is not None:
                c.oom_rises.append(rise)

    judge_runs = judge


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
            self._raise(c, ws, limit, pct)

    def judge_runs(self, c: Case) -> None:
        """Above the line now and not above it at the previous run (or no figure then)."""
        th = self.th
        ws, limit = c.sample.working_set_bytes, c.sample.limit_bytes
        pct = ws / limit * 100.0 if ws is not None and limit else None
        b = c.before
        was = None
        if b is not None and b.working_set_bytes is not None and b.limit_bytes:
            was = b.working_set_bytes / b.limit_bytes * 100.0
        if pct is not None and pct > th.near_limit_percent and (was is None or was <= th.near_limit_percent):
            self._raise(c, ws, limit, pct)

    def _raise(self, c: Case, ws: Any, limit: Any, pct: float) -> None:
        msg = ("%s uses %.0f %% of its memory limit (%s of %s): it will be OOM-killed if it grows further; "
               "raise the limit or reduce the working set (batch size, caches, leaked tensors)."
               % (who(c.record), pct, mib(ws), mib(limit)))
        c.raise_(self.kind, "warning", cap(msg),
                 {"working_set_bytes": ws, "limit_bytes": limit, "percent": round(pct, 2),
                  "threshold_percent": self.th.near_limit_percent})


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
    """Throttled in most CFS periods over the window, and for most of its time; a cgroup
    born while watched and younger than the window, over its whole life (Case.young)."""

    kind = "cpu_throttled"

    def judge(self, c: Case) -> None:
        th = self.th
        window = c.window if c.window is not None else c.young
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
        msg = ("%s was throttled in %.0f %% of its CPU periods over the last %s%s (using %s cores of its %s-core "
               "quota): it needs more CPU than its limit; raise the quota or use fewer threads/workers." % (
                   who(c.record), frac * 100, duration(window.span_s()),
                   " (its whole life so far)" if c.window is None else "",
                   "?" if cpu_pct is None else "%.2f" % (cpu_pct / 100), "?" if cores is None else "%g" % cores))
        c.raise_(self.kind, "warning", cap(msg),
                 {"throttled_fraction": round(frac, 4), "periods": periods, "throttled_periods": throttled,
                  "cpu_percent": None if cpu_pct is None else round(cpu_pct, 2), "limit_cores": cores,
                  "window_s": round(window.span_s(), 3)})

    judge_runs = judge  # the window is the two runs (the time between them, one interval)


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
        first, last = window.ends("memory_high_events")
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

    judge_runs = judge  # the window is the two runs: one rise between them is one event


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
                limit = number_at(c.record, *Cgroup.PIDS_LIMIT)
                msg = ("%s: %d fork%s refused because the cgroup reached its pids.max%s: new processes and "
                       "threads fail with EAGAIN (\"Resource temporarily unavailable\", \"can't start new "
                       "thread\"); raise the pids limit (docker --pids-limit, Kubernetes podPidsLimit) or find "
                       "what spawns so many (a fork loop, a thread per request)." % (
                           who(c.record), failures, "" if failures == 1 else "s",
                           "" if limit is None else " (%d)" % limit))
                ep = c.raise_(self.kind, "warning", cap(msg),
                              {"failures": failures, "pids_events_max_total": int(now), "limit": limit,
                               "current": number_at(c.record, *Cgroup.PIDS_CURRENT)}, hierarchical=True)
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

    judge_runs = judge  # no episode between runs: a rise since the last run is one event


KINDS = EVENT_KINDS + (RESOLVED,)
