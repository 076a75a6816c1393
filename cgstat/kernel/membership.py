"""Cgroup membership: which processes a cgroup holds, where a process sits in each
hierarchy, and when to ask a cgroup found empty again.

Reads `cgroup.procs` of a cgroup folder and /proc/<pid>/cgroup (v1 lines
"ID:controllers:path" and the v2 line "0::path"). Used by the cross-hierarchy join (the
v1 join asks up to three members of an anchor folder where they sit), pod sandbox detection
and PID lookups (naming/); `Owner` is what a process lookup answers. A cgroup found empty
is asked again after its own 5-15 s delay (recheck_after_s), without a rejoin unless it has
members by then: runtimes populate a new cgroup within milliseconds, and a slice stays
empty for ever.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Tuple

from cgstat.kernel import parse
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import HostFS, ReadError, read_bytes, read_text
from cgstat.kernel.tree import Folder

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import Container


@dataclass(frozen=True)
class Owner:
    """Who a process is, as the naming stage finds it (naming/workload.py) for the GPU join
    (cgstat/gpu/attribution.py): here, below both, as neither layer imports the other."""

    name: Optional[str]  # /proc/<pid>/comm
    cgroup: Optional[str]  # its cgroup path as records name cgroups, null when unattributed
    container: Optional[Container]  # the record's container object, null when none


UNKNOWN = Owner(None, None, None)  # exited, or not in our PID namespace: no cgroup claims it


EMPTY_RECHECK_S = 10.0  # a cgroup found without processes is asked again after this, on average


def recheck_after_s(inode: int) -> float:
    """Seconds after which a cgroup found without processes is asked for members again: 5
    to 15, fixed per folder (its inode, hashed; cgroupfs numbers new folders in order).
    Cgroups found empty on the same tick (every one at start) would otherwise all be asked
    again on one tick every 10 s: at 1,000 empty cgroups that tick cost ~80 % more than
    the others. Spread, each tick asks a share."""
    return EMPTY_RECHECK_S * (0.5 + ((inode * 2654435761) & 1023) / 1024)


def member_pids(folder_local: str) -> List[int]:
    """The PIDs in a cgroup folder (its own members, not its children's).

    Raises ReadError (gone, denied...) or ValueError (malformed)."""
    return parse.parse_pid_list(read_text(os.path.join(folder_local, "cgroup.procs")))


def pid_paths(fs: HostFS, layout: Layout, pid: int) -> Dict[str, str]:
    """Hierarchy name -> the path of `pid` in it, for the hierarchies cgstat reads.

    Read as bytes: a cgroup name need not be UTF-8, and parse decodes paths the way the
    walk decodes folder names, so the two still match. Raises ReadError or ValueError.
    """
    lines = parse.parse_proc_cgroup(read_bytes(fs.path(f"/proc/{pid}/cgroup")))
    found: Dict[str, str] = {}
    for controllers, path in lines:
        names = set(controllers.split(","))
        for h in layout.hierarchies:
            if (h.version == 2 and controllers == "") or (h.version == 1 and h.controllers & names):
                found[h.name] = path
    return found

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
