"""Member processes for the v1 join: where one member of a cgroup sits in every hierarchy,
and when to ask a cgroup found empty again.

Reads `cgroup.procs` of an anchor folder and /proc/<pid>/cgroup of up to three of its
members (kernel/procs.py). A cgroup found empty is asked again after its own 5-15 s delay
(procs.recheck_after_s), without a rejoin unless it has members by then: runtimes
populate a new cgroup within milliseconds, and a slice stays empty for ever.
"""

from __future__ import annotations

import time
from typing import Dict, Iterable, Optional, Tuple

from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import HostFS, ReadError
from cgstat.kernel.procs import member_pids, pid_paths, recheck_after_s
from cgstat.kernel.tree import Folder

_MEMBERS_TRIED = 3  # members asked for their /proc/<pid>/cgroup before giving up (they exit)


class Membership:
    """Member paths of anchor folders, read once per folder per tick, and the timers of the
    cgroups found without members."""

    def __init__(self, fs: HostFS, layout: Layout):
        self.fs = fs
        self.layout = layout
        # anchor inode -> (when to ask it for members again, its folder): cgroups found empty
        self._memberless: Dict[int, Tuple[float, Folder]] = {}
        self._tick: Dict[int, Optional[Dict[str, str]]] = {}  # this tick's answers
        self.recheck_at = 0.0  # when an empty cgroup is to be asked again

    def start_tick(self) -> None:
        self._tick = {}

    def paths(self, folder: Folder) -> Optional[Dict[str, str]]:
        """Every hierarchy's path of one member process of `folder` (/proc/<pid>/cgroup),
        or None: no member (asked again when due) or none that could be read."""
        if folder.inode in self._tick:
            return self._tick[folder.inode]
        empty = self._memberless.get(folder.inode)
        if empty is not None and time.monotonic() < empty[0]:
            return None
        found: Optional[Dict[str, str]] = None
        try:
            pids = member_pids(folder.local)
        except (ReadError, ValueError):
            pids = []
        for pid in pids[:_MEMBERS_TRIED]:
            try:
                found = pid_paths(self.fs, self.layout, pid)
            except (ReadError, ValueError):
                continue  # exited meanwhile: try the next member
            break
        if found is None:
            self._memberless[folder.inode] = (time.monotonic() + recheck_after_s(folder.inode), folder)
        self._tick[folder.inode] = found
        return found

    def retain(self, live_inodes: Iterable[int]) -> None:
        """Forget the timers of cgroups that are gone, and this tick's answers (a join is done)."""
        live = set(live_inodes)
        self._memberless = {k: v for k, v in self._memberless.items() if k in live}
        self._tick = {}

    def joined(self) -> None:
        """A join was made: the next recheck is the earliest timer."""
        self.recheck_at = self._next_recheck()

    def _next_recheck(self) -> float:
        return min((due for due, _ in self._memberless.values()), default=float("inf"))

    def unchanged(self) -> bool:
        """Whether a rejoin would give the same cgroups as the last: True while no empty
        cgroup is due, or every one due is still empty (asked again later); False when one
        has members, or is gone or renamed (v1 allows it: the rejoin asks the tree's folder).
        With the delays spread a tick asks a few, much cheaper than a rejoin of them all."""
        now = time.monotonic()
        if now < self.recheck_at:
            return True
        memberless = self._memberless
        for inode, (due, folder) in list(memberless.items()):
            if now < due:
                continue
            try:
                if member_pids(folder.local):
                    return False
            except (ReadError, ValueError):
                return False
            memberless[inode] = (now + recheck_after_s(inode), folder)
        self.recheck_at = self._next_recheck()
        return True
