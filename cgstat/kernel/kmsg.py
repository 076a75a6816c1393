"""The kernel log, /dev/kmsg (Documentation/ABI/testing/dev-kmsg), followed without
blocking from a saved place: the OOM killer's reports (mm/oom_kill.c, mm/memcontrol.c) as
OomReports, the NVIDIA driver's XIDs as XidReports, and the records lost counted. The
names in a report are chosen by users: a line is read in every split the kernel's format
allows, and only one consistent with the rest of the report counts.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from typing import Callable, FrozenSet, Iterator, List, NamedTuple, Optional, Tuple

from cgstat.text import decode_bytes

KMSG = "/dev/kmsg"
READ_SIZE = 16384  # a record is at most ~1 KiB of text plus its dictionary (PRINTKRB_RECORD_MAX)
MAX_RECORDS_PER_READ = 20000  # a log flood is read over several ticks, not in one
TASK_COMM_LEN = 15  # bytes of a task name the kernel prints (TASK_COMM_LEN 16 with the NUL)


def wall_seconds(usec: int) -> float:
    """The wall time of a record's stamp: the boot's wall time (now less CLOCK_MONOTONIC)
    plus the stamp. The stamp is the kernel's local_clock, which runs with CLOCK_MONOTONIC
    (both stop in suspend) but is not slewed by NTP, so on a host up for months the two
    can drift apart by a few seconds; a record read a tick after it was written is off by
    much less (`dmesg -T` makes the same conversion, with the same caveat)."""
    return time.time() - time.monotonic() + usec / 1e6


class Record(NamedTuple):
    """One /dev/kmsg record."""

    facility: int  # 0: the kernel; userspace writes LOG_USER (1) or above
    level: int
    seq: int
    usec: int  # microseconds since boot (the kernel's local clock)
    continued: bool  # flag 'c': continues the record before (kernels before 5.10)
    text: str  # the message, escaped as the kernel writes it (ASCII)


def parse_record(raw: bytes) -> Optional[Record]:
    """A /dev/kmsg record, or None when it isn't one.

    One read() returns one record, `PRI,SEQ,USEC,FLAGS[,...];TEXT\\n`, then its dictionary
    (` KEY=value` lines). The kernel writes every byte of TEXT below 0x20, from 0x7f, and
    the backslash as `\\xNN`, so a record is ASCII and a newline in a message can't start
    a record."""
    head, sep, rest = raw.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    if len(fields) < 4:
        return None
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    if prio < 0 or seq < 0:
        return None
    text = rest.split(b"\n", 1)[0]  # the dictionary lines (" KEY=value") follow the text
    return Record(prio >> 3, prio & 7, seq, usec, fields[3].startswith(b"c"),
                  text.decode("ascii", "replace"))


_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def unescape(text: str) -> bytes:
    r"""The bytes the kernel printed: each `\xNN` back to its byte."""
    if "\\x" not in text:
        return text.encode("ascii", "replace")
    out = bytearray()
    last = 0
    for m in _ESCAPE.finditer(text):
        out += text[last:m.start()].encode("ascii", "replace")
        out.append(int(m.group(1), 16))
        last = m.end()
    out += text[last:].encode("ascii", "replace")
    return bytes(out)


def _text(escaped: str) -> str:
    """An escaped kernel string (a path, a task name) as cgstat writes names (text.decode_bytes):
    the same text as the walk's folder path of the same cgroup."""
    return decode_bytes(unescape(escaped))


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
            record.seq, record.usec, pid, _text(task), uid,
            None if task_memcg is None else _text(task_memcg),
            None if oom_memcg is None else _text(oom_memcg),
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


# -- the NVIDIA driver's XIDs ----------------------------------------------------------------


class XidReport(NamedTuple):
    """One `NVRM: Xid` line of the kernel log."""

    pci_bus_id: str  # as the driver prints it: domain:bus:device, hexadecimal ("0000:3b:00")
    xid: int
    pid: Optional[int]  # the process the driver blames, where it names one
    process: Optional[str]  # its name (comm)
    detail: str  # the rest of the line
    seq: int  # the /dev/kmsg sequence number


_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (\d{1,6})(?:, (.*))?$")
_XID_WHO = re.compile(r"pid=(\d+|'?<unknown>'?), name=([^,]*), ?(.*)$")


def parse_xid(record: Record) -> Optional[XidReport]:
    """The XID an `NVRM: Xid` record reports, or None (another record, or not the kernel's).

    The driver prints a GPU error (nv_report_error, kernel-open/nvidia) as
    `NVRM: Xid (PCI:<domain>:<bus>:<device>): <code>, pid=<PID>, name=<comm>, <details>`
    (the pid and name since driver 470; `pid='<unknown>'` where no process is to blame)."""
    if record.facility != 0 or "NVRM: Xid " not in record.text:
        return None
    m = _XID.search(record.text)
    if m is None:
        return None
    pid = name = None
    detail = m.group(3) or ""
    who = _XID_WHO.match(detail)
    if who is not None:
        pid = int(who.group(1)) if who.group(1).isdigit() else None
        name = None if "<unknown>" in who.group(2) else _text(who.group(2))
        detail = who.group(3)
    return XidReport(m.group(1).lower(), int(m.group(2)), pid, name, _text(detail), record.seq)


def same_pci_device(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two PCI addresses name one device: the driver's `0000:3b:00` and NVML's
    `00000000:3B:00.0` (domain width, case and the function number differ)."""
    if not a or not b:
        return False

    def parts(x: str) -> Optional[Tuple[int, int, int]]:
        f = x.split(".", 1)[0].split(":")
        try:
            return (int(f[-3], 16), int(f[-2], 16), int(f[-1], 16)) if len(f) >= 3 else None
        except ValueError:
            return None

    pa = parts(a)
    return pa is not None and pa == parts(b)


# -- following /dev/kmsg -------------------------------------------------------------------


class Batch(NamedTuple):
    """What one read of the log gave."""

    kills: List[OomReport]
    lost: int  # records overwritten before they were read (EPIPE, or a jump in the numbers)
    last_seq: Optional[int]  # the last record read (what `once --state` keeps)
    xids: Tuple[XidReport, ...] = ()  # the NVIDIA driver's XIDs


class KmsgUnavailable(Exception):
    """The log can't be read (no such device, permission denied): `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class KmsgFollower:
    """Follows /dev/kmsg from where it left off; `read()` returns the kills since.

    `after_seq`: start after this record (a saved position; the records up to it are
    skipped, and if the oldest left is past it the ones in between count as lost); None
    starts at the end: with `numbered`, by reading the backlog through unparsed, so that
    `last_seq` says where the end was even if nothing is written before it is saved (a
    cron run's state). `since_usec` (with neither): start at the oldest record and report
    the kills from that time on (kernel clock, microseconds since boot: `started_usec()`).
    `fd`: /dev/kmsg already open (passed by systemd: checked to be that device, char 1:11,
    and kept open by close()). Raises KmsgUnavailable when the log can't be opened. A
    sequence number that jumps, or EPIPE (our place was overwritten), counts the records
    lost.
    """

    def __init__(self, path: str = KMSG, after_seq: Optional[int] = None,
                 read_one: Optional[Callable[[], bytes]] = None, numbered: bool = False,
                 fd: Optional[int] = None, since_usec: Optional[int] = None):
        self.parser = OomParser()
        self.last_seq = after_seq
        self.since_usec = since_usec if after_seq is None and not numbered else None
        self.fd: Optional[int] = None
        self._open = True
        self._own = True
        if read_one is not None:  # records from elsewhere (tests, a recorded log)
            self._read_one = read_one
            return
        self._own = fd is None
        try:
            if fd is None:
                self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            else:
                st = os.fstat(fd)
                if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (1, 11):
                    raise KmsgUnavailable(f"descriptor {fd} passed as the kernel log is not /dev/kmsg")
                os.set_blocking(fd, False)
                self.fd = fd
            if self.since_usec is not None:
                os.lseek(self.fd, 0, os.SEEK_SET)
            else:
                os.lseek(self.fd, 0, os.SEEK_END if after_seq is None and not numbered else os.SEEK_SET)
        except OSError as exc:
            self.close()
            raise KmsgUnavailable(_why(exc, path)) from None
        fd = self.fd
        self._read_one = lambda: os.read(fd, READ_SIZE)
        if after_seq is None and numbered:
            self._skip_backlog()

    def _skip_backlog(self) -> None:
        while True:
            try:
                raw = self._read_one()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EINTR):
                    continue
                return
            head = raw.split(b",", 2)
            if len(head) == 3 and head[1].isdigit():
                self.last_seq = int(head[1])

    def read(self, limit: int = MAX_RECORDS_PER_READ) -> Batch:
        """Every record written since the last read (at most `limit`), parsed."""
        kills: List[OomReport] = []
        xids: List[XidReport] = []
        lost = 0
        if not self._open:
            return Batch(kills, 0, self.last_seq)
        parser = self.parser
        read_one = self._read_one
        for _ in range(limit):
            try:
                raw = read_one()
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # overwritten under us: the next read gives the oldest left (counted below)
                break
            if not raw:
                break
            last = self.last_seq
            if last is not None:
                # read before (a saved position: a cron run reads the backlog up to it)?
                # Told by the number alone, without parsing the record.
                head = raw.split(b",", 2)
                if len(head) == 3 and head[1].isdigit() and int(head[1]) <= last:
                    continue
            record = parse_record(raw)
            if record is None:
                continue
            if last is not None:
                if record.seq <= last:
                    continue  # read before (a saved position)
                lost += record.seq - last - 1
            self.last_seq = record.seq
            kill = parser.feed(record)
            if kill is not None:
                since = self.since_usec
                if since is None or kill.usec >= since:
                    kills.append(kill)
            elif "NVRM: Xid " in record.text:
                xid = parse_xid(record)
                if xid is not None:
                    xids.append(xid)
        return Batch(kills, lost, self.last_seq, tuple(xids))

    def close(self) -> None:
        self._open = False
        if self.fd is not None and self._own:
            os.close(self.fd)
        self.fd = None


def started_usec(proc_stat: str = "/proc/self/stat") -> Optional[int]:
    """When this process started, on the kernel log's clock (microseconds since boot,
    suspend excluded), or None where /proc doesn't say.

    /proc/<pid>/stat's starttime (field 22, clock ticks) counts from boot including
    suspend (the task's start_boottime), the log's timestamps don't: the process's age on
    CLOCK_BOOTTIME is taken back from CLOCK_MONOTONIC now."""
    try:
        with open(proc_stat, "rb") as f:
            data = f.read()
        ticks = int(data[data.rindex(b")") + 2:].split()[19])
        hz = os.sysconf("SC_CLK_TCK")
        boottime = getattr(time, "CLOCK_BOOTTIME", None)
        if boottime is None:
            return None
        age_s = time.clock_gettime(boottime) - ticks / hz
        return max(0, int((time.monotonic() - age_s) * 1e6))
    except (OSError, ValueError, IndexError):
        return None


def _why(exc: OSError, path: str) -> str:
    if exc.errno == errno.EPERM:
        # devkmsg_open's check_syslog_permissions, or a container's device cgroup
        return (f"cannot read {path} (not permitted: under kernel.dmesg_restrict=1 it needs CAP_SYSLOG, "
                "and a container's device list must allow it)")
    if exc.errno == errno.EACCES:
        return f"cannot read {path} (permission denied)"
    return f"cannot read {path}: {exc.strerror}"
