"""The pids controller's files of one cgroup, and its processes, as a PidsSample.

Reads pids.current, pids.max, cgroup.procs (not while pids.current is 0), pids.peak and
pids.events (not again while the cgroup stays empty and idle).
"""

from __future__ import annotations

from typing import Optional

from cgstat.kernel import parse
from cgstat.kernel.cachekeys import KEYS
from cgstat.kernel.controllers.files import FileReader
from cgstat.kernel.sample import PidsSample
from cgstat.kernel.tree import Folder

KEYS.slow_files("pids.max")  # a limit: changes only when written (kernel/cachekeys.py)
# counters that can't move while the cgroup is empty and idle (v1 raises no event on them)
PEAK_FROZEN = KEYS.frozen("pids.peak")
EVENTS_FROZEN = KEYS.frozen("pids.events")


def pids_sample(folder: Folder, r: FileReader, cpu_seconds: Optional[float]) -> PidsSample:
    """cpu_seconds: the cgroup's CPU time this tick (None: unknown), which tells an idle
    empty cgroup from one a short job ran in since the last tick."""
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
    # Only a task in the cgroup's subtree moves pids.peak and pids.events (a fork, refused
    # or not, or a move in). Empty now (pids.current 0) and its CPU time unchanged since
    # the value was read, found empty then too, no task has forked there in between (a
    # fork runs): an idle empty cgroup, as most are, costs no read of either.
    idle = cpu_seconds if current == 0 else None
    return PidsSample(current, limit, processes, r.counter(folder, PEAK_FROZEN, parse.parse_uint, idle),
                      r.counter(folder, EVENTS_FROZEN, _pids_events, idle))


def _pids_events(text: str) -> Optional[int]:
    return parse.parse_flat_keyed(text, ("max",)).get("max")


def _count_pids(text: str) -> int:
    return len(parse.parse_pid_list(text))
