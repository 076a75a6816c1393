"""The pids controller's files of one cgroup, and its processes, as a PidsSample.

Reads pids.current, pids.max, pids.peak, cgroup.procs (not while pids.current is 0) and
pids.events (not again while pids.current stays 0).
"""

from __future__ import annotations

from typing import Optional

from cgstat.kernel import parse
from cgstat.kernel.controllers.files import FileReader
from cgstat.kernel.handles import MISSING, PIDS_EVENTS_IDLE
from cgstat.kernel.sample import PidsSample
from cgstat.kernel.tree import Folder


def pids_sample(folder: Folder, r: FileReader) -> PidsSample:
    current = r.get(folder, "pids.current", parse.parse_uint)
    limit = r.get(folder, "pids.max", parse.parse_max_or_uint)
    if current == 0 and "cgroup.procs" in folder.files:
        # pids.current counts the tasks of the cgroup and all its descendants (pids.rst):
        # at 0 its cgroup.procs is empty too, so an empty cgroup (most slices, every idle
        # pod parent) costs one file less. Read in the other order the two could disagree
        # just the same (a task may join between the reads); 0 and 0 is one moment's view.
        # A descriptor kept while it had tasks is closed: slots go to files read each tick.
        processes: Optional[int] = 0
        if r.keeping.get(folder.hierarchy.mount_dir):
            r.kept.release(folder, "cgroup.procs")
    else:
        processes = r.get(folder, "cgroup.procs", _count_pids)
    return PidsSample(current, limit, processes, r.opt(folder, "pids.peak", parse.parse_uint),
                      _pids_events_max(folder, r, current))


def _pids_events_max(folder: Folder, r: FileReader, current: Optional[int]) -> Optional[int]:
    """pids.events max. Only a fork in the cgroup's subtree can change it, and with no task
    there (pids.current 0) none can: the value read at a tick that already found it empty
    is kept until a task comes back (v1 raises no IN_MODIFY on the file, so it can't be a
    slow file). An empty cgroup, as most are, then costs no read of it."""
    if "pids.events" not in folder.files:
        return None
    if not r.keeping.get(folder.hierarchy.mount_dir):
        return r.get(folder, "pids.events", _pids_events)
    kept = r.kept
    if current != 0:
        kept.modified(folder, PIDS_EVENTS_IDLE)  # tasks: what was kept may change
        return r.get(folder, "pids.events", _pids_events)
    known = kept.cached(folder, PIDS_EVENTS_IDLE)
    if known is not MISSING:
        return known  # type: ignore[no-any-return,unused-ignore]
    kept.release(folder, "pids.events")  # read no more each tick: its slot goes to others
    value = r.read_once(folder, "pids.events", _pids_events)
    if value is not None:
        kept.keep(folder, PIDS_EVENTS_IDLE, value)
    return value


def _pids_events(text: str) -> Optional[int]:
    return parse.parse_flat_keyed(text, ("max",)).get("max")


def _count_pids(text: str) -> int:
    return len(parse.parse_pid_list(text))
