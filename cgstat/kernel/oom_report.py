"""The OOM killer's reports in the kernel log (mm/oom_kill.c, mm/memcontrol.c) as
OomReports. The names in a report are chosen by users: a line is read in every split the
kernel's format allows, and only one consistent with the rest of the report counts."""

from __future__ import annotations

import re
from typing import FrozenSet, Iterator, List, NamedTuple, Optional, Tuple

from cgstat.kernel.kmsg_record import Record, kernel_text, unescape

TASK_COMM_LEN = 15  # bytes of a task name the kernel prints (TASK_COMM_LEN 16 with the NUL)


class OomReport(NamedTuple):
    """One process killed by the OOM killer, as the kernel log tells it."""

    seq: int  # of the `Killed process` record
    usec: int
    pid: int
    task: str  # the process's name (comm)
    uid: Optional[int]
    task_memcg: Optional[str]  # memory-hierarchy path of the killed task's cgroup
    oom_memcg: Optional[str]  # the cgroup whose limit was hit; None: the global OOM killer
    constraint: Optional[str]  # CONSTRAINT_MEMCG, CONSTRAINT_NONE, ... (None before 4.19)
    global_oom: bool  # the machine ran out of memory (no memory cgroup limit)
    usage_bytes: Optional[int]  # the OOM cgroup's usage at the kill (`memory: usage`)
    limit_bytes: Optional[int]  # its limit
    anon_rss_bytes: Optional[int]
    file_rss_bytes: Optional[int]
    shmem_rss_bytes: Optional[int]
    summary: bool  # the report naming the cgroup was there (False: rate-limited away)
    ambiguous: bool  # the cgroup names allowed two readings: no cgroup given


# -- the lines ----------------------------------------------------------------------------
# Cgroup and task names are chosen by users, so a path may hold `,task_memcg=/...` or
# ` killed as a result of limit of `: each line is split at every place the kernel's format
# allows, and only a split consistent with the rest of the report counts (the task's cgroup
# at or below the OOM cgroup, the OOM cgroup as its stats line names it, the task name as
# the `Killed process` line gives it, at most 15 bytes). Two consistent splits naming
# different cgroups leave the kill without a cgroup rather than pick one.

_BEGIN = re.compile(r" invoked oom-killer: gfp_mask=0x[0-9a-f]+")
_USAGE = re.compile(r"^memory: usage (\d+)kB, limit (\d+)kB, failcnt \d+$")
_STATS = re.compile(r"^Memory cgroup stats for (/.*?):(?:(?: [a-z_]+:\d+KB)*)$")
_SUMMARY = re.compile(r"^oom-kill:constraint=(CONSTRAINT_[A-Z_]+),nodemask=(?:\(null\)|[0-9,-]*),cpuset=")
_TAIL = re.compile(r",pid=(\d+),uid=(\d+)$")
_NODES = re.compile(r"[0-9,-]*?(?=,oom_memcg=|,global_oom,task_memcg=)")
_LEGACY_TASK = "Task in "
_LEGACY_SEP = " killed as a result of limit of "
_KILL_OLD = re.compile(r"^(?:Memory cgroup out of memory|Out of memory(?: \([a-z_]+\))?): Kill process (\d+) "
                       r"\((.*)\) score \d+ or sacrifice child$")
_KILLED = re.compile(r"^(?:(Memory cgroup out of memory|Out of memory(?: \([a-z_]+\))?): )?Killed process (\d+) "
                     r"\((.*)\) total-vm:\d+kB, anon-rss:(\d+)kB, file-rss:(\d+)kB, shmem-rss:(\d+)kB"
                     r"(?:, UID:(\d+) pgtables:\d+kB oom_score_adj:-?\d+)?$")
_GROUP = re.compile(r"^Tasks in (/.*) are going to be killed due to memory\.oom\.group set$")
_SUPPRESSED = re.compile(r"^(oom_kill_process|dump_header): (\d+) callbacks suppressed$")


def _positions(text: str, token: str, start: int = 0) -> Iterator[int]:
    i = text.find(token, start)
    while i >= 0:
        yield i
        i = text.find(token, i + 1)


def _at_or_below(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


class _Summary(NamedTuple):
    constraint: str
    pid: int
    uid: int
    readings: Tuple[Tuple[Optional[str], str, str], ...]  # (oom_memcg, task_memcg, task), escaped


def parse_summary(text: str) -> Optional[_Summary]:
    """The `oom-kill:` line, every split the kernel's format allows:
    constraint, nodemask, cpuset (a name: hostile), mems_allowed, oom_memcg (a path: hostile)
    or `global_oom`, task_memcg (hostile), task (hostile), pid, uid."""
    m = _SUMMARY.match(text)
    t = _TAIL.search(text)
    if m is None or t is None or t.start() < m.end():
        return None
    body = text[m.end():t.start()]  # cpuset,mems_allowed=..,(oom_memcg=..|global_oom),task_memcg=..,task=..
    readings: List[Tuple[Optional[str], str, str]] = []
    for i in _positions(body, ",mems_allowed="):
        after = i + len(",mems_allowed=")
        nodes = _NODES.match(body, after)
        if nodes is None:
            continue
        rest = body[nodes.end():]
        if rest.startswith(",global_oom,task_memcg="):
            for task_memcg, task in _task_splits(rest[len(",global_oom,task_memcg="):]):
                readings.append((None, task_memcg, task))
            continue
        rest = rest[len(",oom_memcg="):]
        for j in _positions(rest, ",task_memcg="):
            oom_memcg = rest[:j]
            for task_memcg, task in _task_splits(rest[j + len(",task_memcg="):]):
                if oom_memcg.startswith("/") and _at_or_below(task_memcg, oom_memcg):
                    readings.append((oom_memcg, task_memcg, task))
    if not readings:
        return None
    return _Summary(m.group(1), int(t.group(1)), int(t.group(2)), tuple(readings))


def _task_splits(text: str) -> Iterator[Tuple[str, str]]:
    for k in _positions(text, ",task="):
        path, task = text[:k], text[k + len(",task="):]
        if path.startswith("/") and len(unescape(task)) <= TASK_COMM_LEN:
            yield path, task


def parse_legacy(text: str) -> Tuple[Tuple[str, str], ...]:
    """`Task in <task cgroup> killed as a result of limit of <oom cgroup>` (before 4.19):
    every split with the task's cgroup at or below the OOM cgroup, as (oom_memcg, task_memcg)."""
    if not text.startswith(_LEGACY_TASK):
        return ()
    body = text[len(_LEGACY_TASK):]
    out = []
    for i in _positions(body, _LEGACY_SEP):
        task_memcg, oom_memcg = body[:i], body[i + len(_LEGACY_SEP):]
        if oom_memcg.startswith("/") and _at_or_below(task_memcg, oom_memcg):
            out.append((oom_memcg, task_memcg))
    return tuple(out)


def _kb(value: Optional[str]) -> Optional[int]:
    return None if value is None else int(value) * 1024


class OomParser:
    """Kernel records in, OomReports out: a small state machine over one report at a time.

    What a kill prints (mm/oom_kill.c, mm/memcontrol.c):
    - dump_header, rate-limited to 10 reports per 5 s machine-wide (oom_kill_process's
      DEFAULT_RATELIMIT): `<comm> invoked oom-killer: gfp_mask=...`, for a memcg OOM
      `memory: usage <n>kB, limit <n>kB, failcnt <n>` and `Memory cgroup stats for <path>:`,
      and since 4.19 the summary `oom-kill:constraint=...,oom_memcg=<path>,task_memcg=<path>,
      task=<comm>,pid=<n>,uid=<n>` (`global_oom` instead of oom_memcg for the global
      killer); before 4.19 `Task in <path> killed as a result of limit of <path>` and
      `... out of memory: Kill process <pid> (<comm>) score <n> or sacrifice child`.
    - always, not rate-limited: `Memory cgroup out of memory: Killed process <pid> (<comm>)
      total-vm:..., anon-rss:<n>kB, file-rss:<n>kB, shmem-rss:<n>kB[, UID:... ]` (`Out of
      memory:` for the global killer; no prefix before 4.19). In a storm only this line is
      left: the kill is reported with its process and no cgroup (OomReport.summary False).

    `feed(record)` returns the kill a `Killed process` record completes (or None). The
    lines before it (usage, stats, summary) belong to the report begun by the last
    `invoked oom-killer` line; a `Killed process` line with no summary before it (the
    report was rate-limited away, or a memory.oom.group kill's further tasks) is a kill of
    its own, with the group's cgroup where the kernel named one.
    """

    def __init__(self) -> None:
        self.suppressed = 0  # reports the kernel's rate limit left out (its own notice)
        self._group_pids: FrozenSet[int] = frozenset()  # killed since the last report began
        self._reset()

    def _reset(self) -> None:
        self._usage: Optional[Tuple[int, int]] = None
        self._stats: Optional[str] = None  # the OOM cgroup, as its stats line names it
        self._summary: Optional[_Summary] = None
        self._legacy: Tuple[Tuple[str, str], ...] = ()
        self._group: Optional[str] = None
        self._victim: Optional[Tuple[int, str]] = None  # pre-4.19 "Kill process" (pid, comm)

    def feed(self, record: Record) -> Optional[OomReport]:
        if record.facility != 0:
            # written by a process, not the kernel: what userspace writes to /dev/kmsg is
            # LOG_USER or above (devkmsg_write), so no process can forge a report
            return None
        text = record.text
        if _BEGIN.search(text) is not None:
            self._reset()
            self._group_pids = frozenset()
            return None
        if text.startswith("memory: usage "):
            m = _USAGE.match(text)
            if m is not None and self._usage is None:
                self._usage = (int(m.group(1)) * 1024, int(m.group(2)) * 1024)
            return None
        if text.startswith("Memory cgroup stats for "):
            m = _STATS.match(text)
            if m is not None and self._stats is None:
                self._stats = m.group(1)
            return None
        if text.startswith("oom-kill:"):
            self._summary = parse_summary(text)
            return None
        if text.startswith(_LEGACY_TASK):
            self._legacy = parse_legacy(text)
            return None
        if text.startswith("Tasks in "):
            m = _GROUP.match(text)
            if m is not None:
                self._group = m.group(1)
            return None
        m = _SUPPRESSED.match(text)
        if m is not None:
            self.suppressed += int(m.group(2))
            return None
        if "Kill process " in text:
            m = _KILL_OLD.match(text)
            if m is not None:
                self._victim = (int(m.group(1)), m.group(2))
            return None
        if "Killed process " in text:
            m = _KILLED.match(text)
            if m is not None:
                return self._killed(record, m)
        return None

    def _killed(self, record: Record, m) -> Optional[OomReport]:
        why, pid, task = m.group(1), int(m.group(2)), m.group(3)
        if pid in self._group_pids:
            # a memory.oom.group kill prints the chosen victim twice: once as the victim
            # (oom_kill_process), then again among the group's tasks (oom_kill_memcg_member
            # skips only unkillable ones, and the victim still has its mm): one kill
            return None
        uid = None if m.group(7) is None else int(m.group(7))
        summary, legacy, stats = self._summary, self._legacy, self._stats
        oom_memcg = task_memcg = constraint = None
        named = ambiguous = False
        if summary is not None:
            named = True
            constraint = summary.constraint
            uid = summary.uid if uid is None else uid
            readings = [r for r in summary.readings if r[2] == task or summary.pid != pid]
            if stats is not None:
                readings = [r for r in readings if r[0] is None or r[0] == stats]
            task_memcg, oom_memcg, ambiguous = _one(readings)
        elif legacy:
            named = True
            readings2 = [(o, t, "") for o, t in legacy if stats is None or o == stats]
            task_memcg, oom_memcg, ambiguous = _one(readings2)
        elif self._group is not None:
            named = True
            task_memcg = oom_memcg = self._group
        global_oom = (why is not None and why.startswith("Out of memory")) or (
            summary is not None and all(r[0] is None for r in summary.readings))
        usage = self._usage if not global_oom else None
        report = OomReport(
            record.seq, record.usec, pid, kernel_text(task), uid,
            None if task_memcg is None else kernel_text(task_memcg),
            None if oom_memcg is None else kernel_text(oom_memcg),
            constraint, global_oom,
            None if usage is None else usage[0], None if usage is None else usage[1],
            _kb(m.group(4)), _kb(m.group(5)), _kb(m.group(6)), named, ambiguous)
        # The summary and the usage name this report's victim only; a memory.oom.group kill's
        # further tasks keep the group's cgroup (their own Killed lines follow).
        group = self._group
        killed = self._group_pids
        self._reset()
        self._group = group
        self._group_pids = killed | {pid} if group is not None or summary is not None else killed
        return report


def _one(readings) -> Tuple[Optional[str], Optional[str], bool]:
    """(task_memcg, oom_memcg, ambiguous) of the consistent readings: the one task cgroup they
    all give, or none when they disagree."""
    tasks = {r[1] for r in readings}
    if len(tasks) != 1:
        return None, None, len(tasks) > 1
    ooms = {r[0] for r in readings}
    return tasks.pop(), ooms.pop() if len(ooms) == 1 else None, False
