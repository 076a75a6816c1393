"""The oom_kill events of a tick: one per process the kernel killed, from the kernel log's
reports (cgstat/naming/oom_victims.py) and the cgroups' OOM-kill counters (`memory.events`
oom_kill on v2, `memory.oom_control` oom_kill on v1) together: a kill seen by both is one
event (see OomLedger).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, NamedTuple, Optional

from cgstat.kernel.kmsg_record import wall_seconds
from cgstat.naming.oom_victims import NamedKill
from cgstat.events.event import cap, deepest_only, make_event, who
from cgstat.events.window import WindowSample
from cgstat.timestamps import rfc3339
from cgstat.units import mib

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import EventRecord

# Two witnesses of the same kill: the log (process, PID, limit and usage at the kill, also
# for a cgroup gone before any tick read it) and the counter (`memory.events` oom_kill on
# v2, hierarchical; `memory.oom_control` oom_kill on v1, the cgroup's own). The kernel
# raises the counter just before it prints `Killed process`, and the sampler reads the log
# after the cgroups, so a kill's two witnesses come in the same tick or the log one tick
# before the counter: each side keeps what it reported for `CREDIT_TICKS` ticks, and what
# the other side then sees of the same cgroup is taken off.
CREDIT_TICKS = 2


class Rise(NamedTuple):
    """A cgroup's OOM-kill counter went up between two samples of one life of it."""

    path: str
    kills: int
    total: int
    record: Mapping[str, Any]
    limit_bytes: Optional[float]
    working_set_bytes_before: Optional[float]
    working_set_bytes: Optional[float]
    exists: bool = True  # False: read as it changed, the cgroup gone by the tick (kernel/memevents.py)

    @classmethod
    def between(cls, record: Mapping[str, Any], before: Optional[WindowSample], total: Optional[float],
                working_set_bytes: Optional[float], limit_bytes: Optional[float], exists: bool = True,
                path: Optional[str] = None) -> Optional["Rise"]:
        """The counter's rise from `before` (the cgroup's sample before, of the same life) to
        `total`, or None where it did not rise or either is unknown (a counter already
        non-zero at the first sample is history, not a kill)."""
        then = before.oom_kills_total if before is not None else None
        if before is None or then is None or total is None or not total > then:
            return None
        return cls(record["cgroup"] if path is None else path, int(total - then), int(total), record, limit_bytes,
                   before.working_set_bytes, working_set_bytes, exists)


def _ancestors(path: str) -> List[str]:
    out = [path]
    while path not in ("", "/"):
        path = path.rsplit("/", 1)[0] or "/"
        out.append(path)
    return out


# - A log kill is one event (`source: "kernel_log"`), unless its cgroup's counter already
#   raised one for it; it credits its cgroup and that cgroup's ancestors (v2 counts a kill
#   in every ancestor).
# - A counter rise (deepest cgroup only, as the v2 counters are hierarchical) that no credit
#   covers: first paired with the log's kills that have no cgroup (a storm, where the
#   rate-limited report naming the cgroup is missing: `source: "kernel_log+counter"`,
#   `cgroup_by: "counter"`), then what is left is one event for that many kills
#   (`source: "counter"`: no readable log, or the log lost them).
# - Log kills with no cgroup and no counter to pair with: one event each, cgroup null.
class OomLedger:
    """Per tick: the rises of the counters and the log's kills in, the oom_kill events out."""

    def __init__(self) -> None:
        self._tick = 0
        self._log: Dict[str, List[int]] = {}  # cgroup path -> ticks of log kills not yet seen by its counter
        self._counter: Dict[str, List[int]] = {}  # cgroup path -> ticks of counter kills not yet seen in the log
        self._bare: List[int] = []  # ticks of cgroup-less log kills reported alone

    def judge(self, rises: List[Rise], kills: List[NamedKill], ts: Any, host: Any,
              first_totals: Optional[Mapping[str, float]] = None) -> List[EventRecord]:
        """`first_totals`: the OOM-kill counters of the cgroups first sampled in this tick
        (path -> count), which already count a kill in their first second."""
        self._tick += 1
        tick = self._tick
        for credits in (self._log, self._counter):
            for path in list(credits):
                credits[path] = [t for t in credits[path] if tick - t < CREDIT_TICKS]
                if not credits[path]:
                    del credits[path]
        self._bare = [t for t in self._bare if tick - t < CREDIT_TICKS]
        events: List[EventRecord] = []
        stamp = {"ts": ts, "host": host}
        bare: List[NamedKill] = []
        # what the cgroup's record says of its counter, with the kill counted: a rise in
        # this tick (the kernel raises it before it prints the kill), or a first sample
        counted: Dict[str, int] = {p: int(t) for p, t in (first_totals or {}).items()}
        counted.update((r.path, r.total) for r in rises)
        for k in kills:
            if k.cgroup is None:
                bare.append(k)
                continue
            if self._take(self._counter, k.cgroup):
                continue  # its counter told it a tick ago
            events.append(kill_event(stamp, k, None, counted.get(k.cgroup)))
            for p in _ancestors(k.cgroup):
                self._log.setdefault(p, []).append(tick)
        for r in deepest_only([(r.path, r) for r in rises]):
            left = r.kills
            while left and self._take(self._log, r.path):
                left -= 1
            while left and bare:
                events.append(kill_event(stamp, bare.pop(0), r))
                left -= 1
            while left and self._bare:
                self._bare.pop(0)  # reported last tick without a cgroup
                left -= 1
            if left:
                events.append(counter_event(r, left))
                self._counter.setdefault(r.path, []).extend([tick] * left)
        for k in bare:
            events.append(kill_event(stamp, k, None))
            self._bare.append(tick)
        return events

    @staticmethod
    def _take(credits: Dict[str, List[int]], path: str) -> bool:
        got = credits.get(path)
        if not got:
            return False
        got.pop(0)
        if not got:
            del credits[path]
        return True


def kill_event(stamp: Mapping[str, Any], k: NamedKill, rise: Optional[Rise],
               oom_kills_total: Optional[int] = None) -> EventRecord:
    """The event of one kill the log reported (`rise`: the counter that names its cgroup;
    `oom_kills_total`: its cgroup's counter with this kill counted, where known)."""
    rep = k.report
    cgroup, container, pod, unit, exists = k.cgroup, k.container, k.pod, k.unit, k.exists
    if rise is not None:
        r = rise.record
        cgroup, container, pod, unit, exists = (
            rise.path, r.get("container"), r.get("pod"), r.get("unit"), rise.exists)
    limit = rep.limit_bytes if rep.limit_bytes is not None else (rise.limit_bytes if rise else None)
    rss = None
    if rep.anon_rss_bytes is not None:
        rss = rep.anon_rss_bytes + (rep.file_rss_bytes or 0) + (rep.shmem_rss_bytes or 0)
    name = who({"container": container, "unit": unit, "cgroup": cgroup}) if cgroup else "an unknown cgroup"
    if rep.global_oom:
        why = ("the machine ran out of memory (the global OOM killer: no cgroup limit was hit) and the kernel "
               "killed process %s (PID %d), %s, holding %s" % (rep.task, rep.pid, "in " + name if cgroup else
                                                                "whose cgroup the log doesn't name", mib(rss)))
    else:
        why = "the kernel OOM-killed process %s (PID %d) in %s at %s (usage %s; the process held %s)" % (
            rep.task, rep.pid, name, "its memory limit of " + mib(limit) if limit is not None else "its memory limit",
            mib(rep.usage_bytes), mib(rss))
    gone = " The cgroup is gone." if exists is False else ""
    unnamed = ""
    if cgroup is None:
        unnamed = (" The kernel's report naming the cgroup is missing (it is rate-limited to 10 per 5 s "
                   "machine-wide" + ("; the names it allowed were ambiguous" if rep.ambiguous else "") + ").")
    msg = ("%s%s: a process that dies with \"Killed\" (exit 137) was this; raise the memory limit or lower what it "
           "holds (batch size, workers, caches).%s%s" % (why[0].upper(), why[1:], gone, unnamed))
    evidence = {
        "kills": 1,
        "pid": rep.pid,
        "process": rep.task,
        "uid": rep.uid,
        "memory_cgroup": rep.task_memcg,
        "oom_cgroup": rep.oom_memcg,
        "global_oom": rep.global_oom,
        "constraint": rep.constraint,
        "limit_bytes": limit,
        "usage_bytes": rep.usage_bytes,
        "anon_rss_bytes": rep.anon_rss_bytes,
        "file_rss_bytes": rep.file_rss_bytes,
        "shmem_rss_bytes": rep.shmem_rss_bytes,
        "cgroup_exists": exists,
        "pod": pod,
        "named_by": "counter" if rise is not None else k.named_by,
        "source": "kernel_log" if rise is None else "kernel_log+counter",
        "oom_kills_total": rise.total if rise is not None else oom_kills_total,
        "kernel_seq": rep.seq,
        "kernel_ts": rfc3339(wall_seconds(rep.usec)),  # the kill's own time; ts is the tick's
    }
    return make_event(stamp, "oom_kill", "critical", cap(msg), evidence, cgroup=cgroup, container=container)


def counter_event(r: Rise, kills: int) -> EventRecord:
    """The event of kills only a counter saw (no readable log, or the log lost them)."""
    rec = r.record
    name = who(rec)
    msg = ("%s: the kernel OOM-killed %s in it (memory limit %s, working set before %s): a process that dies "
           "with \"Killed\" (exit 137) was this; raise the memory limit or lower what it holds (batch size, "
           "workers, caches)." % (name[0].upper() + name[1:], "a process" if kills == 1 else "%d processes" % kills,
                                   "none" if r.limit_bytes is None else mib(r.limit_bytes),
                                   mib(r.working_set_bytes_before)))
    evidence = {"kills": kills, "oom_kills_total": r.total, "limit_bytes": r.limit_bytes,
                "working_set_bytes_before": r.working_set_bytes_before, "working_set_bytes": r.working_set_bytes,
                "cgroup_exists": r.exists, "pod": rec.get("pod"), "source": "counter"}
    return make_event(rec, "oom_kill", "critical", cap(msg), evidence)
