"""Slurm: a job's cgroups, named from their paths and, where readable, slurmd's spool.
Reads slurm.conf (/etc/slurm/ or /etc/slurm-llnl/, size-bounded) for SlurmdSpoolDir,
lstat()s the job's batch script there (its owner is the job's uid), and reads the host's
/etc/passwd for user names. Not for cgroups in a user's delegated subtree (trust.py): those
are named from their paths alone.
"""

from __future__ import annotations

import os
import re
import stat
import time
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from cgstat.kernel.hostfs import ReadError, close_quietly, open_dir_under, read_untrusted
from cgstat.naming.runtimes.runtime import Runtime, WorkloadPath

if TYPE_CHECKING:
    from cgstat.kernel.hostfs import HostFS
    from cgstat.naming.runtimes.runtime import PathInfo
    from cgstat.contract.types import ContainerSlurm

_V1_ROOT = re.compile(r"^slurm(?:_.+)?$")
_V2_ROOT = re.compile(r"^(?:.+_)?slurmstepd\.scope$")
# Paths (slurmd's cgroup plugins; the job's folder is the workload, its steps and tasks
# are its own sub-cgroups):
# - cgroup v1: .../slurm[_<node>]/uid_<U>/job_<J>/step_<S>/task_<T>
# - cgroup v2: .../[<node>_]slurmstepd.scope/job_<J>/step_<S>/user/task_<T>, with the step's
#   slurmstepd in step_<S>/slurm (no uid level: the user comes from the spool)
# Steps are a number, `batch`, `extern` or `interactive`; tasks a number or `special`.
_UID = re.compile(r"^uid_([0-9]{1,10})$")
_JOB = re.compile(r"^job_([0-9]{1,10})$")
_STEP = re.compile(r"^step_([0-9]{1,10}(?:\+[0-9]{1,10})?|batch|extern|interactive)$")
_TASK = re.compile(r"^task_([0-9]{1,10}|special)$")
_UINT32 = 1 << 32

# State: the job's batch script, which slurmstepd writes as root to
# <SlurmdSpoolDir>/job<J, 5 digits>/slurm_script and then chowns to the job's user (the job
# folder stays root's). Only lstat()ed, never opened: its owner is the job's uid. The spool
# folder is SlurmdSpoolDir of slurm.conf (_CONFS; a size-bounded read), else the
# defaults (/var/spool/slurmd, Debian's /var/lib/slurm/slurmd).
CONF_MAX = 1024 * 1024  # slurm.conf
PASSWD_MAX = 4 * 1024 * 1024
_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")
_SPOOLS = ("/var/spool/slurmd", "/var/lib/slurm/slurmd")
_RETRY_S = 60.0  # a job whose user the spool did not say is looked up again after this long


class SlurmPath(NamedTuple):
    """What a Slurm cgroup's path says."""

    job_id: int
    step: Optional[str]  # None: the job's own folder
    task: Optional[str]  # None: above the tasks (a job, a step, the step's slurmstepd)
    uid: Optional[int]  # v1's uid_<U> level; None on v2


def parse_path(parts: Sequence[str]) -> Optional[WorkloadPath]:
    """The job a cgroup path (its components) is or is below, or None."""
    for i in range(len(parts) - 1):
        comp = parts[i]
        uid: Optional[int] = None
        if _V1_ROOT.match(comp) and i + 2 < len(parts):
            m = _UID.match(parts[i + 1])
            if m is None:
                continue
            uid = int(m.group(1))
            j = i + 2
        elif _V2_ROOT.match(comp):
            j = i + 1
        else:
            continue
        job = _JOB.match(parts[j])
        if job is None or int(job.group(1)) >= _UINT32 or (uid is not None and uid >= _UINT32):
            continue
        step = task = None
        rest = parts[j + 1:]
        if rest:
            m = _STEP.match(rest[0])
            if m is None:
                continue  # not a folder slurmd makes: leave the path alone
            step = m.group(1)
            below = rest[1:]
            if uid is None and below and below[0] == "user":
                below = below[1:]  # v2: the step's tasks are in its "user" folder
            if below:
                t = _TASK.match(below[0])
                task = t.group(1) if t else None
        return WorkloadPath(j, job.group(1), SlurmPath(int(job.group(1)), step, task, uid))
    return None


class SlurmRuntime(Runtime):
    name = "slurm"
    workload_path = staticmethod(parse_path)

    def __init__(self, fs: HostFS, daemons: Any):
        super().__init__(fs, daemons)
        self._uids: Dict[int, Tuple[Optional[int], float]] = {}  # job -> (uid from the spool, when)
        self._spool: Optional[Tuple[Optional[str], float]] = None  # (spool folder, when found)
        self._names: Dict[int, str] = {}  # uid -> user name (/etc/passwd)
        self._names_at: Optional[float] = None

    def describe(self, info: PathInfo) -> Optional[ContainerSlurm]:
        """The record's container.slurm object of a cgroup whose path is a Slurm job's."""
        path = info.detail
        if not isinstance(path, SlurmPath):
            return None
        uid = path.uid
        if uid is None and info.user_uid is None:
            uid = self._spool_uid(path.job_id)
        return {"job_id": path.job_id, "step": path.step, "task": path.task, "uid": uid,
                "user": self._user(uid) if uid is not None else None}

    def retain(self, live: Set[str]) -> None:
        self._uids = {job: v for job, v in self._uids.items() if str(job) in live}

    def forget(self) -> None:
        self._uids.clear()
        self._spool = None
        self._names_at = None

    # -- the spool ------------------------------------------------------------------------

    def _spool_uid(self, job_id: int) -> Optional[int]:
        now = time.monotonic()
        kept = self._uids.get(job_id)
        if kept is not None and (kept[0] is not None or now - kept[1] < _RETRY_S):
            return kept[0]
        spool = self._spool_dir(now)
        uid = script_owner(self.fs.path(spool), job_id) if spool else None
        self._uids[job_id] = (uid, now)
        return uid

    def _spool_dir(self, now: float) -> Optional[str]:
        if self._spool is None or now - self._spool[1] >= _RETRY_S:
            found = None
            for spool in _conf_spools(self.fs) + list(_SPOOLS):
                if os.path.isdir(self.fs.path(spool)):
                    found = spool
                    break
            self._spool = (found, now)
        return self._spool[0]

    def _user(self, uid: int) -> Optional[str]:
        name = self._names.get(uid)
        now = time.monotonic()
        if name is None and (self._names_at is None or now - self._names_at >= _RETRY_S):
            self._names_at = now
            self._names = passwd_names(self.fs)
            name = self._names.get(uid)
        return name


def script_owner(spool: str, job_id: int) -> Optional[int]:
    """The owner of <spool>/job<J>/slurm_script (lstat, never opened), or None.

    The job folder must be a folder (no link) owned by root or by the agent's own user:
    slurmstepd makes it as root, so nobody else can have put a script there."""
    try:
        fd = open_dir_under(spool, ["job%05d" % job_id])
    except ReadError:
        return None
    try:
        if os.fstat(fd).st_uid not in (0, os.geteuid()):
            return None
        st = os.stat("slurm_script", dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        close_quietly(fd)
    return st.st_uid if stat.S_ISREG(st.st_mode) else None


def _conf_spools(fs: HostFS) -> List[str]:
    """SlurmdSpoolDir of slurm.conf, where it names one absolute folder (no %n patterns)."""
    for conf in _CONFS:
        try:
            text = read_untrusted(fs.path(conf), CONF_MAX).decode("utf-8", "replace")
        except ReadError:
            continue
        for line in text.splitlines():
            key, _, value = line.split("#", 1)[0].partition("=")
            if key.strip().lower() == "slurmdspooldir":
                value = value.strip()
                if value.startswith("/") and "%" not in value and "\x00" not in value:
                    return [value.rstrip("/") or "/"]
        return []
    return []


def passwd_names(fs: HostFS) -> Dict[int, str]:
    """uid -> user name from the host's /etc/passwd (the first entry of a uid)."""
    try:
        text = read_untrusted(fs.path("/etc/passwd"), PASSWD_MAX).decode("utf-8", "replace")
    except ReadError:
        return {}
    out: Dict[int, str] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit() and parts[0]:
            out.setdefault(int(parts[2]), parts[0])
    return out
