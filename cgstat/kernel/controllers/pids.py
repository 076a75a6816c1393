"""The pids controller's files of one cgroup, and its processes, as a PidsSample.

Reads pids.current, pids.max, pids.peak, pids.events and cgroup.procs (not while
pids.current is 0).
"""

from __future__ import annotations

from typing import Optional

from cgstat.kernel import parse
from cgstat.kernel.controllers.files import FileReader
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
    events = r.opt(folder, "pids.events", _pids_events)
    return PidsSample(current, limit, processes, r.opt(folder, "pids.peak", parse.parse_uint), events)


def _pids_events(text: str) -> Optional[int]:
    return parse.parse_flat_keyed(text, ("max",)).get("max")


def _count_pids(text: str) -> int:
    return len(parse.parse_pid_list(text))
