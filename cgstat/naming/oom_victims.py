"""Who an OOM kill from the kernel log (kernel/oom_report.py's reports, read by kernel/kmsg.py)
hit: its cgroup, container and pod, named by the same join and naming stage the records use.
Reads: the memory folder of a killed task's cgroup (a stat), runtime state (through Namer).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Dict, Iterable, List, NamedTuple, Optional, Tuple

from cgstat.kernel.hierarchy import Hierarchy, Layout
from cgstat.kernel.oom_report import OomReport
from cgstat.kernel.tree import Cgroup
from cgstat.naming.paths import PathInfo, classify
from cgstat.naming.workload import Namer

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import Container, Pod

KEEP_S = 600.0  # how long a gone cgroup's name is kept for a kill reported late
MAX_GONE = 4096


class NamedKill(NamedTuple):
    """One OOM kill with who it hit."""

    report: OomReport
    cgroup: Optional[str]  # the record's cgroup path; the memory path when never seen; None: unknown
    container: Optional[Container]  # as the record's container object
    pod: Optional[Pod]
    unit: Optional[str]
    exists: Optional[bool]  # the killed task's cgroup still there when the log was read
    named_by: str  # "live", "seen" (gone, named as it was), "state", "path", "none"
    selected: bool  # in what this run reports (--match, --all, the default selection)


class LateCount(NamedTuple):
    """A gone cgroup's OOM-kill counter as read the moment it changed (kernel/memevents.py),
    with what it was called while alive."""

    cgroup: str
    oom_kills_total: int
    container: Optional[Container]
    pod: Optional[Pod]
    unit: Optional[str]


class _Gone(NamedTuple):
    cgroup: str
    container: Optional[Container]
    pod: Optional[Pod]
    unit: Optional[str]
    selected: bool
    when: float


def memory_hierarchy(layout: Layout) -> Optional[Hierarchy]:
    """The hierarchy whose paths the kernel log's memcg paths are: v1 memory, else cgroup2."""
    return layout.find("memory") or layout.unified


# The log names the killed task's memory-hierarchy path (`task_memcg`). In order:
# 1. a cgroup of this tick whose memory folder is at that path: the record's cgroup path
#    (on v1 the CPU hierarchy's, through the join) and its container, as its record says;
# 2. a cgroup seen alive in an earlier tick and gone since: what it was called then (the
#    naming stage forgets a gone container; this keeps `keep_s` of them, at most `max_gone`);
# 3. else what its runtime's state still says (naming/runtimes/), else the runtime and ID
#    the path says (naming/paths.py); the cgroup is then the memory path itself (on v1 the
#    CPU hierarchy's path of a cgroup never seen can't be known).
# Whether the cgroup still exists is one stat of its memory folder when the log is read.
class KillNamer:
    """Names the kills of each tick; remembers the names of cgroups that went."""

    def __init__(self, layout: Layout, namer: Namer, keep_s: float = KEEP_S, max_gone: int = MAX_GONE):
        self.memory = memory_hierarchy(layout)
        self.namer = namer
        self.keep_s = keep_s
        self.max_gone = max_gone
        self._gone: "OrderedDict[str, _Gone]" = OrderedDict()  # memory path -> as it was

    def note_gone(self, gone: Iterable[Tuple[Cgroup, PathInfo]], selected: Iterable[str]) -> None:
        """Cgroups of the last tick that are not in this one, named while the naming stage
        still knows them (call before Namer.begin_tick). `selected`: last tick's reported paths."""
        if self.memory is None:
            return
        now = time.monotonic()
        chosen = set(selected)
        runtimes = self.namer.runtimes
        for cg, info in gone:
            folder = cg.folder(self.memory)
            if folder is None:
                continue
            container = runtimes.container(info)
            pod = container["pod"] if container is not None else runtimes.pod(info)
            self._gone[folder.path] = _Gone(cg.path, container, pod, info.unit, cg.path in chosen, now)
            self._gone.move_to_end(folder.path)
        while self._gone and (len(self._gone) > self.max_gone
                              or now - next(iter(self._gone.values())).when > self.keep_s):
            self._gone.popitem(last=False)

    def late(self, counts: Dict[str, int], live: Iterable[str]) -> List[LateCount]:
        """The counts (cgroup path -> oom_kill read as it changed) of cgroups not in `live`
        (this tick's reported paths), named as they were; v2, where the record's path is
        the memory path."""
        alive = set(live)
        out = []
        for path, total in counts.items():
            gone = self._gone.get(path)
            if path not in alive and gone is not None and gone.selected:
                out.append(LateCount(gone.cgroup, total, gone.container, gone.pod, gone.unit))
        return out

    def name(self, reports: List[OomReport], classified: List[Tuple[Cgroup, PathInfo]],
             selected: Iterable[str], select_path) -> List[NamedKill]:
        """The kills of `reports`. `classified`: this tick's cgroups; `selected`: the paths
        this tick reports; `select_path(path, info)`: whether a cgroup not seen now would be."""
        if not reports:
            return []
        live: Dict[str, Tuple[Cgroup, PathInfo]] = {}
        if self.memory is not None:
            for cg, info in classified:
                folder = cg.folder(self.memory)
                if folder is not None:
                    live.setdefault(folder.path, (cg, info))
        chosen = set(selected)
        return [self._one(r, live, chosen, select_path) for r in reports]

    def _one(self, report: OomReport, live: Dict[str, Tuple[Cgroup, PathInfo]], chosen, select_path) -> NamedKill:
        path = report.task_memcg
        if path is None:
            return NamedKill(report, None, None, None, None, None, "none", True)
        exists = self._exists(path)
        hit = live.get(path)
        if hit is not None:
            cg, info = hit
            # a container's own sub-cgroup (rootless Podman's leaf) belongs to the container
            parent = path
            while info.inside_container and "/" in parent.strip("/"):
                parent = parent.rsplit("/", 1)[0]
                if parent in live:
                    cg, info = live[parent]
            runtimes = self.namer.runtimes
            container = runtimes.container(info)
            if container is not None:
                container["sandbox"] = self.namer.is_sandbox(cg, info)
            pod = container["pod"] if container is not None else runtimes.pod(info)
            return NamedKill(report, cg.path, container, pod, info.unit, exists, "live", cg.path in chosen)
        gone = self._gone.get(path)
        if gone is not None:
            return NamedKill(report, gone.cgroup, gone.container, gone.pod, gone.unit, exists, "seen", gone.selected)
        info = Namer.owner_of(path)
        runtimes = self.namer.runtimes
        runtimes.refresh_if_new([info])
        container = runtimes.container(info)
        pod = container["pod"] if container is not None else runtimes.pod(info)
        named_by = "state" if container is not None and (container.get("image") or container.get("name")) else "path"
        return NamedKill(report, path, container, pod, info.unit, exists, named_by,
                         bool(select_path(path, classify(path))))

    def _exists(self, path: str) -> Optional[bool]:
        if self.memory is None:
            return None
        local = self.memory.mount_dir + ("" if path == "/" else path)
        return os.path.isdir(local)
