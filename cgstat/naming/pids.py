"""PID -> cgroups, for `cgstat pid` and for joining NVML's process list (naming/workload.py).

Reads /proc/<pid>/cgroup (v1 lines and the v2 '0::' line), /proc/<pid>/stat (the name,
field 2, and the start time, field 22, which tells a reused PID from the process we saw
before) and /proc/self/ns/pid for the PID namespace check.

NVML reports host PIDs (the driver ignores PID namespaces, nvidia-docker#1483), so this
must read the host's /proc: an agent in a container without the host PID namespace sees
none of them.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, NamedTuple, Optional

from cgstat import text
from cgstat.kernel import parse
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import Gone, HostFS, Malformed, ReadError, close_quietly, read_bytes, read_error
from cgstat.kernel.membership import pid_paths


class PidCgroups(NamedTuple):
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: clock ticks after boot
    cgroup: Optional[str]  # path in the anchor hierarchy (as records name cgroups)
    paths: Dict[str, str]  # hierarchy -> path
    name: Optional[str] = None  # /proc/<pid>/stat field 2 (comm) as last read


class ProcStat(NamedTuple):
    start_ticks: int  # field 22: clock ticks after boot; another value is another process
    comm: str  # field 2: what /proc/<pid>/comm says (both print the task's comm)


def read_stat(fs: HostFS, pid: int) -> ProcStat:
    """Fields 2 and 22 of /proc/<pid>/stat, from one read (raises ReadError)."""
    return _parse_stat(read_bytes(fs.path(f"/proc/{pid}/stat")), pid)


def _parse_stat(data: bytes, pid: int) -> ProcStat:
    """comm may hold any byte but NUL, spaces and ')' included: it is what lies between the
    first '(' and the last ')'. Bytes that are not UTF-8 become `\\xNN` (text.decode_bytes)."""
    try:
        close = data.rindex(b")")
        rest = data[close + 2:].split()
        return ProcStat(parse.parse_uint(rest[19].decode("ascii")),
                        text.decode_bytes(data[data.index(b"(") + 1:close]))
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise Malformed(f"/proc/{pid}/stat", f"unreadable: {exc}") from None


def start_ticks(fs: HostFS, pid: int) -> int:
    """Field 22 of /proc/<pid>/stat (raises ReadError)."""
    return read_stat(fs, pid).start_ticks


def read_pid(fs: HostFS, layout: Layout, pid: int) -> PidCgroups:
    """Where `pid` sits in each hierarchy; raises Gone when there is no such process.

    /proc/<pid>/stat is read before and after /proc/<pid>/cgroup: a PID that exits and is
    reused meanwhile is not given the new process's cgroup under the old one's start time."""
    before = read_stat(fs, pid)
    try:
        paths = pid_paths(fs, layout, pid)
    except (ValueError, IndexError) as exc:
        raise Malformed(f"/proc/{pid}/cgroup", f"unreadable: {exc}") from None
    after = read_stat(fs, pid)
    if after.start_ticks != before.start_ticks:
        raise Gone(f"/proc/{pid}", "process exited and the PID was reused while reading")
    return PidCgroups(pid, before.start_ticks, paths.get(layout.anchor.name), paths, after.comm)


# GPU processes whose /proc/<pid>/comm stays open between lookups. A procfs file opened for
# one process reads ESRCH once that process is gone (comm_show: no task is left on the
# struct pid the file was opened for), whatever process later gets the number: a kept
# file can't read a reused PID's successor, so while it reads, the process, its start
# time and (as cached) its cgroup hold; pread() at offset 0 spares an open() and close()
# per lookup, and comm is cheaper for the kernel to print than stat. Beyond this many
# processes, /proc/<pid>/stat is read by path and its start time compared.
KEPT_COMM_FILES = 256
_COMM_BYTES = 256  # TASK_COMM_LEN is 16; a kernel worker's name is at most 64


class PidMapper:
    """PID -> cgroups and name, kept while the process lives (its start time holds).

    A kept entry costs one read per lookup: of a kept /proc/<pid>/comm on the live /proc
    (see KEPT_COMM_FILES), else of /proc/<pid>/stat (name and start time at once).
    /proc/<pid>/cgroup is read again only for a PID that is new or whose process changed
    (the number was reused). The entries of PIDs not asked about in a `lookup_all` are dropped, so the map follows
    NVML's process list. `close()` releases the descriptors."""

    def __init__(self, fs: HostFS, layout: Layout):
        self.fs = fs
        self.layout = layout
        self._cache: Dict[int, PidCgroups] = {}
        # pid -> an open /proc/<pid>/comm of the process cached: only on the live /proc,
        # where the file says ESRCH once its process is gone (a copied tree's never does)
        self._fds: Dict[int, int] = {}
        self._said: Dict[int, bytes] = {}  # pid -> what its kept file read last
        self._keep = fs.is_slash

    def lookup(self, pid: int) -> PidCgroups:
        """Where `pid` is now; raises Gone or ReadError (the entry is then dropped)."""
        cached = self._cache.get(pid)
        if cached is not None:
            fd = self._fds.get(pid)
            if fd is not None:
                data = self._pread(fd)
                if data is not None:  # the same process (see KEPT_COMM_FILES)
                    if data != self._said.get(pid):  # renamed (prctl PR_SET_NAME)
                        self._said[pid] = data
                        cached = self._cache[pid] = cached._replace(name=_comm(data))
                    return cached
                # its process is gone; the number may have been reused: look it up afresh
            else:
                try:
                    now: Optional[ProcStat] = read_stat(self.fs, pid)
                except ReadError:
                    now = None
                if now is not None and now.start_ticks == cached.start_ticks:
                    if now.comm != cached.name:
                        cached = self._cache[pid] = cached._replace(name=now.comm)
                    return cached
                if now is None:
                    self._drop(pid)
                    raise Gone(f"/proc/{pid}", "no such process")
                # another start time: another process with the number
            self._drop(pid)
        found = self._read(pid)
        if len(self._cache) > 65536:
            self.close()
        self._cache[pid] = found
        return found

    def lookup_all(self, pids: Iterable[int]) -> Dict[int, Optional[PidCgroups]]:
        """Each PID looked up once (None: gone, unreadable, not in our PID namespace); the
        entries of every other PID are forgotten."""
        out: Dict[int, Optional[PidCgroups]] = {}
        fds, said, cache, pread = self._fds, self._said, self._cache, os.pread
        for pid in dict.fromkeys(pids):  # each once, in the order first listed
            # lookup()'s steady case inline (a tick asks this of every GPU process): the
            # kept file still reads, and the same bytes, so the same process and name
            fd = fds.get(pid)
            if fd is not None:
                try:
                    if pread(fd, _COMM_BYTES, 0) == said.get(pid):
                        out[pid] = cache[pid]
                        continue
                except OSError:
                    pass  # gone: lookup() reads it again, drops it and looks the PID up afresh
            try:
                out[pid] = self.lookup(pid)
            except ReadError:
                out[pid] = None
        if len(self._cache) > len(out):
            for pid in [k for k in self._cache if k not in out]:
                self._drop(pid)
        return out

    def close(self) -> None:
        """Forget every entry; close the kept files."""
        for fd in self._fds.values():
            close_quietly(fd)
        self._fds = {}
        self._said = {}
        self._cache = {}

    def _read(self, pid: int) -> PidCgroups:
        """A fresh lookup, keeping /proc/<pid>/comm open where it may."""
        if not self._keep or len(self._fds) >= KEPT_COMM_FILES:
            return read_pid(self.fs, self.layout, pid)
        path = self.fs.path(f"/proc/{pid}/comm")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise read_error(exc, path) from None
        try:
            found = read_pid(self.fs, self.layout, pid)
            data = self._pread(fd)  # after: the file is of the process read_pid saw
        except BaseException:
            close_quietly(fd)
            raise
        if data is None:
            close_quietly(fd)
            raise Gone(f"/proc/{pid}", "process exited and the PID was reused while reading")
        self._fds[pid] = fd
        self._said[pid] = data
        return found._replace(name=_comm(data))

    @staticmethod
    def _pread(fd: int) -> Optional[bytes]:
        """What a kept /proc/<pid>/comm reads; None once its process is gone (ESRCH)."""
        try:
            return os.pread(fd, _COMM_BYTES, 0)
        except OSError:
            return None

    def _drop(self, pid: int) -> None:
        self._cache.pop(pid, None)
        self._said.pop(pid, None)
        close_quietly(self._fds.pop(pid, None))


def _comm(data: bytes) -> str:
    """The name a read of /proc/<pid>/comm gives (it ends in a newline)."""
    return text.decode_bytes(data[:-1] if data.endswith(b"\n") else data)


# The initial PID namespace always has this inode (PROC_PID_INIT_INO, include/linux/proc_ns.h).
_INIT_PID_NS_INO = 0xEFFFFFFC


def pid_namespace_note(fs: HostFS) -> Optional[str]:
    """A warning when cgstat can't see the host's processes (runs in its own PID namespace).

    /proc/self/ns/pid of a process in the host's (initial) PID namespace has the fixed
    inode PROC_PID_INIT_INO; anything else is a container's namespace. (/proc/self/status
    NSpid can't tell: a container's own /proc shows one level only.)
    """
    if not fs.is_slash:
        # Reading a mounted host /proc: its PIDs are the host's, whatever our namespace.
        return None
    try:
        ino = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    if ino == _INIT_PID_NS_INO:
        return None
    return ("cgstat runs in its own PID namespace, so it sees only its container's processes: "
            "GPU processes (NVML reports host PIDs) and PID lookups will not be joined to "
            "containers. Run with --pid=host (docker/podman), hostPID: true (Kubernetes), or "
            "mount the host's / and pass --host-root.")
