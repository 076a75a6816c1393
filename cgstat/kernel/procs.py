"""Processes and cgroups: the members of a cgroup, and where a process sits in each hierarchy.

Reads `cgroup.procs` of a cgroup folder and /proc/<pid>/cgroup (v1 lines
"ID:controllers:path" and the v2 line "0::path"). Used by the cross-hierarchy join
(kernel/membership.py), pod sandbox detection and PID lookups (naming/); `Owner` is what a
process lookup answers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional

from cgstat.kernel import parse
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import HostFS, read_bytes, read_text

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.records import Container


@dataclass(frozen=True)
class Owner:
    """Who a process is, as the naming stage finds it (naming/workload.py) for the GPU join
    (gpu/join.py): here, below both, as neither layer imports the other."""

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
