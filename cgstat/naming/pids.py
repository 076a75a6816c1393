"""PID -> cgroups, for `cgstat pid` and for joining NVML's process list (naming/workload.py).

Reads /proc/<pid>/cgroup (v1 lines and the v2 '0::' line), /proc/<pid>/stat (the start
time, field 22, which tells a reused PID from the process we saw before) and
/proc/self/ns/pid for the PID namespace check.

NVML reports host PIDs (the driver ignores PID namespaces, nvidia-docker#1483), so this
must read the host's /proc: an agent in a container without the host PID namespace sees
none of them.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, NamedTuple, Optional, Tuple

from cgstat.kernel import parse
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import Gone, HostFS, ReadError
from cgstat.kernel.procs import pid_paths


class PidCgroups(NamedTuple):
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: clock ticks after boot
    cgroup: Optional[str]  # path in the anchor hierarchy (as records name cgroups)
    paths: Dict[str, str]  # hierarchy -> path


def start_ticks(fs: HostFS, pid: int) -> int:
    """Field 22 of /proc/<pid>/stat; comm (field 2) may hold spaces and ')'."""
    text = fs.read_text(f"/proc/{pid}/stat")
    rest = text[text.rindex(")") + 2:].split()
    return parse.parse_uint(rest[19])


def read_pid(fs: HostFS, layout: Layout, pid: int) -> PidCgroups:
    """Where `pid` sits in each hierarchy; raises Gone when there is no such process."""
    before = start_ticks(fs, pid)
    paths = pid_paths(fs, layout, pid)
    if start_ticks(fs, pid) != before:
        raise Gone(f"/proc/{pid}", "process exited and the PID was reused while reading")
    return PidCgroups(pid, before, paths.get(layout.anchor.name), paths)


class PidMapper:
    """Cached PID -> cgroups, never trusting a cache entry whose start time changed."""

    def __init__(self, fs: HostFS, layout: Layout):
        self.fs = fs
        self.layout = layout
        self._cache: Dict[int, Tuple[int, PidCgroups]] = {}

    def lookup(self, pid: int) -> PidCgroups:
        cached = self._cache.get(pid)
        if cached is not None:
            try:
                if start_ticks(self.fs, pid) == cached[0]:
                    return cached[1]
            except (ReadError, ValueError, IndexError):
                self._cache.pop(pid, None)
                raise Gone(f"/proc/{pid}", "no such process") from None
        try:
            found = read_pid(self.fs, self.layout, pid)
        except (ValueError, IndexError) as exc:
            raise ReadError(f"/proc/{pid}", f"unreadable: {exc}") from None
        if len(self._cache) > 65536:
            self._cache.clear()
        self._cache[pid] = (found.start_ticks, found)
        return found

    def retain(self, live: Iterable[int]) -> None:
        """Forget PIDs no longer asked about (the GPU join asks every tick)."""
        keep = set(live)
        self._cache = {k: v for k, v in self._cache.items() if k in keep}


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
