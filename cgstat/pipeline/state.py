"""The state file of `cgstat once --state FILE`: the raw counters of the previous run (of the
cgroups it reported), read and replaced atomically under an flock on `FILE.lock`. FILE is
replaced only when it is provably cgstat's (see StateFile); a state that is corrupt, of
another format version, from another boot or dated in the future is reported and replaced.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from typing import Any, Dict, Optional, Tuple

import orjson

from cgstat.atomic import AtomicFile
from cgstat.safepath import Place, place
from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.pipeline.rates import Counters

# cgstat runs as root from cron, and FILE comes from a crontab or an environment variable
# where a typo is easy (`/etc/hosts`, `/dev/null`). So FILE is replaced only when it is
# provably cgstat's: missing, empty, or a regular file whose content starts with the state
# marker `{"cgstat":"once-state"` (a state written by cgstat 0.1, before the marker, is
# recognised by its four keys). Anything else is refused before anything is printed or
# written, leaving the path untouched: a symlink (never followed: cgstat writes through no
# link), a device, FIFO, socket or directory, or a non-empty file without the marker.
# `FILE.lock` follows the same rules (missing, or an empty regular file), and must be the
# running user's and closed to others (whoever can open a file can flock it): a lock another
# user holds is refused at once, not waited on. Both are reached through folders no other
# user can change (safepath.py); a file of another user's, or one others may write, is refused.
STATE_VERSION = 1
MARKER = b'{"cgstat":"once-state"'
_LEGACY_KEYS = {"version", "boot_id", "time_s", "cgroups"}
_MAX_BYTES = 64 * 1024 * 1024
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class StateError(CgstatError):
    """The state file or its lock can't be used; nothing was written."""


def _refuse_unless_regular(path: str, st: os.stat_result, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise StateError(f"refusing {what} {path}: it is {file_kind(st.st_mode)}, not a state file of "
                         "cgstat's (cgstat replaces only its own files and writes through no link)")


def _is_ours(data: bytes) -> bool:
    if not data.strip() or data.startswith(MARKER):
        return True
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and _LEGACY_KEYS <= set(obj)


# Written atomically (a temporary file in the same folder, created before the run prints
# anything so an unwritable folder fails first, fsync, rename), so a crash or a full disk
# never leaves a half-written state behind; an flock on `FILE.lock` keeps two overlapping
# cron runs from interleaving. A state of cgstat's that is corrupt, of another format
# version, from another boot (counters restarted) or dated in the future is reported and
# replaced, never trusted: its rates would be garbage.
# The state keeps the counters of the cgroups the run reported (its selection): a run with
# another `--match` or `--all` finds no saved counters for the others, so their rates are
# null once.
class StateFile:
    """Checked, locked use of FILE for one run: `with StateFile(path) as s: s.load(); s.save()`.

    Entering checks FILE and FILE.lock, takes the lock (waiting at most `lock_wait_s`),
    reads FILE and creates the temporary file the new state will be written to, so every
    failure happens before the run prints anything. Leaving without `save` removes the
    temporary file and leaves FILE as it was.
    """

    def __init__(self, path: str, lock_wait_s: float = 30.0):
        self.path = path
        self.lock_path = path + ".lock"
        self.lock_wait_s = lock_wait_s
        self._lock_fd: Optional[int] = None
        self._where: Optional[Place] = None
        self._out: Optional[AtomicFile] = None
        self._data = b""
        self.extras: Dict[str, Any] = {}  # what the previous run kept for events (judge_runs)
        self.kernel_log_seq: Optional[int] = None  # the last kernel log record the previous run read
        self.other_boot = False  # the state is of another boot: this boot's log is all new
        self.gpu_marks: Dict[str, Any] = {}  # per GPU, where the previous run's utilization samples ended

    def __enter__(self) -> "StateFile":
        try:
            # every folder on the way checked (safepath.py), missing ones made 0700
            where = self._where = place(self.path, "--state", create=True)
            self._check(where, where.name, self.path, "--state")
            self._read()  # refuse a foreign file before creating anything (the lock)
            self._check(where, where.name + ".lock", self.lock_path, "lock file")
            self._lock()
            self._data = self._read()  # again, now that no other run can replace it
            self._out = AtomicFile(self.path, ".cgstat-state-", "--state", where)
            try:
                self._out.prepare()
            except OSError as exc:
                folder = os.path.dirname(os.path.abspath(self.path))
                raise StateError(f"cannot write state in {folder}: {os_reason(exc)}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._out is not None:
            self._out.discard()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None
        if self._where is not None:
            self._where.close()

    @staticmethod
    def _check(where: Place, name: str, path: str, what: str) -> None:
        st = where.lstat(name)
        if st is None:
            return
        _refuse_unless_regular(path, st, what)
        _check_owned(where, st, path, what)
        if what == "lock file" and st.st_size:
            raise StateError(f"refusing lock file {path}: it is not empty, so not a lock of cgstat's")

    def _lock(self) -> None:
        path = self.lock_path
        assert self._where is not None
        name = self._where.name + ".lock"
        try:
            try:
                fd = self._where.open(os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600, name)
            except FileExistsError:
                fd = self._where.open(os.O_RDWR | _OPEN_FLAGS, 0o600, name)
        except OSError as exc:
            raise StateError(f"cannot open lock file {path}: {_why(exc)}") from None
        self._lock_fd = fd
        st = os.fstat(fd)
        _refuse_unless_regular(path, st, "lock file")
        _check_owned(self._where, st, path, "lock file")
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                # Only root or this user can hold it (ours, 0600): another run of ours.
                if time.monotonic() > deadline:
                    raise StateError(f"another cgstat holds {path} for over {self.lock_wait_s:.0f} s") from None
                time.sleep(0.05)

    def _read(self) -> bytes:
        assert self._where is not None
        try:
            fd = self._where.open(os.O_RDONLY | _OPEN_FLAGS)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise StateError(f"cannot read --state {self.path}: {_why(exc)}") from None
        try:
            st = os.fstat(fd)
            _refuse_unless_regular(self.path, st, "--state")
            _check_owned(self._where, st, self.path, "--state")
            chunks = []
            total = 0
            while total <= _MAX_BYTES:
                chunk = os.read(fd, 1024 * 1024)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        except OSError as exc:
            raise StateError(f"cannot read --state {self.path}: {os_reason(exc)}") from None
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if not _is_ours(data):
            size = f"{len(data)} byte{'' if len(data) == 1 else 's'}"
            raise StateError(f"refusing --state {self.path}: a file of {size} without cgstat's state "
                             "marker, so not a state file of cgstat's (cgstat replaces only its own files)")
        return data

    def load(self, boot_id: Optional[str], now_s: float) -> Tuple[Dict[str, Counters], Optional[str]]:
        """The saved counters by cgroup path, and a reason when the file was not usable."""
        counters, why = parse_state(self._data, self.path, boot_id, now_s)
        if why is None and counters:
            try:
                extras = orjson.loads(self._data).get("events")
            except (orjson.JSONDecodeError, AttributeError):
                extras = None
            self.extras = extras if isinstance(extras, dict) else {}
        try:
            obj = orjson.loads(self._data) if self._data.strip() else {}
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and obj.get("version") == STATE_VERSION and "boot_id" in obj:
            self.other_boot = obj["boot_id"] != boot_id
        if why is None and isinstance(obj, dict):
            seq = obj.get("kernel_log_seq")
            # only from this boot (parse_state checked the boot id): a new boot's log numbers afresh
            self.kernel_log_seq = seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None
            marks = obj.get("gpu_utilization")
            self.gpu_marks = marks if isinstance(marks, dict) else {}
        return counters, why

    def save(self, boot_id: Optional[str], host_root: str, now_s: float,
             cgroups: Dict[str, Counters], extras: Optional[Dict[str, Any]] = None,
             kernel_log_seq: Optional[int] = None, gpu_marks: Optional[Dict[str, Any]] = None) -> None:
        obj = {
            "cgstat": "once-state",  # the marker: first key, so the file starts with MARKER
            "version": STATE_VERSION,
            "boot_id": boot_id,
            "host_root": host_root,
            "time_s": now_s,
            "cgroups": {k: v.to_json() for k, v in cgroups.items()},
            "events": extras or {},  # per cgroup, what the next run needs to judge events
            "kernel_log_seq": kernel_log_seq,  # where the next run reads the kernel log from (this boot)
            "gpu_utilization": gpu_marks or {},  # per GPU: lastSeen, this run's time, the sampling period (µs)
        }
        assert self._out is not None, "save() inside the with block"
        try:
            self._out.commit(orjson.dumps(obj))
        except OSError as exc:
            raise StateError(f"cannot write state {self.path}: {os_reason(exc)}") from None


def _check_owned(where: Place, st: os.stat_result, path: str, what: str) -> None:
    """Ours, and (a lock) not even readable by others: whoever can open a file can flock it,
    and a lock held by another user would stall every run."""
    where.check_owned(st, path=path, what=what)
    if what == "lock file" and stat.S_IMODE(st.st_mode) & 0o077:
        raise StateError(f"refusing lock file {path}: other users may open it (mode {stat.S_IMODE(st.st_mode):o}) "
                         "and so hold the lock; chmod 600 it")


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link (cgstat writes through no link)"
    return os_reason(exc)


def parse_state(data: bytes, path: str, boot_id: Optional[str],
                now_s: float) -> Tuple[Dict[str, Counters], Optional[str]]:
    """Counters from a state file's bytes (already known to be cgstat's), or why not."""
    if not data.strip():
        return {}, None  # first run
    try:
        obj = orjson.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        if obj.get("version") != STATE_VERSION:
            return {}, f"state {path} has format version {obj.get('version')!r}, not {STATE_VERSION}; replacing it"
        if obj.get("boot_id") != boot_id:
            return {}, f"state {path} is from another boot or host; rates restart"
        saved_at = float(obj["time_s"])
        if saved_at > now_s + 1.0:
            return {}, f"state {path} is dated in the future ({saved_at:.1f} s > now {now_s:.1f} s); replacing it"
        cgroups = obj["cgroups"]
        if not isinstance(cgroups, dict):
            raise ValueError("cgroups is not an object")
        return {str(k): Counters.from_json(v) for k, v in cgroups.items()}, None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, orjson.JSONDecodeError) as exc:
        return {}, f"state {path} is corrupt ({exc}); replacing it"
