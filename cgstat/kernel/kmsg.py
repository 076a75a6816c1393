"""The kernel log, /dev/kmsg (Documentation/ABI/testing/dev-kmsg), followed without
blocking from a saved place: each record parsed (kmsg_record.py), the OOM killer's reports
(oom_report.py) and the NVIDIA driver's XIDs (xid_report.py) taken from them, and the
records lost counted.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from typing import Callable, List, NamedTuple, Optional, Tuple

from cgstat.kernel.kmsg_record import parse_record
from cgstat.kernel.oom_report import OomParser, OomReport
from cgstat.kernel.xid_report import XidReport, parse_xid

KMSG = "/dev/kmsg"
READ_SIZE = 16384  # a record is at most ~1 KiB of text plus its dictionary (PRINTKRB_RECORD_MAX)
MAX_RECORDS_PER_READ = 20000  # a log flood is read over several ticks, not in one


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
