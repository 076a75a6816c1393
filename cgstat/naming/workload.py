"""The naming stage: who each workload is, resolved once per cgroup per tick.

Reads, through naming/paths.py, naming/runtimes/, naming/devices.py and naming/pids.py:
runtime state files and the Docker socket, kubelet log folders, /proc/<pid>/comm of pod
members (pause detection), /proc/<pid>/cgroup and /proc/<pid>/stat (PID lookups),
/sys/dev/block and /proc/partitions (device names).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Collection, Dict, Iterable, List, NamedTuple, Optional, Tuple

from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import Gone, HostFS, ReadError
from cgstat.kernel.membership import UNKNOWN, Owner, member_pids, recheck_after_s
from cgstat.kernel.sample import Sample
from cgstat.kernel.tree import Cgroup
from cgstat.naming.devices import DeviceNames
from cgstat.naming.paths import PathInfo, classify, container_root
from cgstat.naming.pids import PidCgroups, PidMapper
from cgstat.naming.runtimes.daemons import DaemonConfig, Daemons
from cgstat.naming.runtimes.identities import Identities

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import Container, Pod


class Workload(NamedTuple):
    """Who one cgroup's workload is, as its record says it (a NamedTuple: one is made per
    record per tick)."""

    kind: str  # the record's type: "cgroup", or "pod" for a Kubernetes pod's cgroup
    unit: Optional[str]  # decoded systemd unit of the last path component
    container: Optional[Container]  # the record's container object (null: none)
    pod: Optional[Pod]  # the record's pod object (null: not in a pod)
    sandbox: bool  # a pod's sandbox ("pause") container
    device_names: Dict[str, Optional[str]]  # MAJ:MIN -> block device name, for its IO rows


# Everything a record says about a workload's identity comes from here: what its path says
# (naming/paths.py: container runtime and ID, pod UID and QoS, systemd unit, monitors), what
# the runtimes' state says (naming/runtimes/: names, images, labels, pods, sandboxes),
# block device names (naming/devices.py), and, for a PID, which cgroup and container it is
# in (naming/pids.py). This is the only stage that reads runtime state; the record builder
# (cgstat/pipeline/build.py) reads nothing.
class Namer:
    """Resolves workloads; caches runtime answers per container ID, pruned to live ones."""

    def __init__(self, fs: HostFS, layout: Layout, warn: Optional[Callable[[str, str], None]] = None,
                 read_state: bool = True, daemons: DaemonConfig = DaemonConfig()):
        self.fs = fs
        self.runtimes = Identities(fs, warn, read_state, Daemons(fs, daemons))
        self.devices = DeviceNames(fs)
        self.pids = PidMapper(fs, layout)
        self._sandbox: Dict[str, bool] = {}  # this tick: cgroup path -> is a pod sandbox
        self._classified: List[Tuple[Cgroup, PathInfo]] = []  # the last tick's cgroups...
        self._runtime: List[Tuple[Cgroup, PathInfo]] = []  # ...those of them with runtime state
        self._members: Dict[int, Tuple[Tuple[int, ...], Optional[bool]]] = {}  # folder inode -> PIDs chosen
        self.subtrees: Dict[str, bool] = {}  # the last member_pids: parents' PIDs from below (see there)
        self._empty: Dict[int, float] = {}  # folder inode -> when to look again (no process below it)
        self._named: List[Tuple[Cgroup, PathInfo]] = []  # the last tick's list, candidates promoted
        self._named_from: Optional[List[Tuple[Cgroup, PathInfo]]] = None  # ...made from this one
        self._named_paths: set = set()  # ...with these candidates promoted
        self._gpu_paths: Dict[str, PathInfo] = {}  # the last gpu_owners: cgroup -> owner_of(cgroup)

    def begin_tick(self, classified: List[Tuple[Cgroup, PathInfo]]) -> List[Tuple[Cgroup, PathInfo]]:
        """Look up what this tick's new containers and pods are; forget the gone ones.

        Returns `classified` with each candidate (a bare 64-hex folder under no known
        runtime's parent) that a runtime's state knows turned into a container: the same
        list object while that set does not change, so callers can keep what they made
        of it."""
        ids = self.runtimes
        if classified is not self._classified:
            # Only containers and pods have runtime state; the same list again (the
            # sampler's, for an unchanged tree) has the same ones: not every cgroup of the
            # host every tick.
            self._classified = classified
            self._runtime = [(cg, info) for cg, info in classified
                             if info.id or info.pod_uid or info.kind == "container"]
        runtime = self._runtime
        ids.retain(x for _, info in runtime for x in (info.id, info.pod_uid) if x)
        ids.refresh_if_new(info for _, info in runtime)
        ids.recheck()
        runtime = self._promote(classified, runtime)
        self._sandbox = {cg.path: ids.is_sandbox(info, cg.folders[0].local)
                         for cg, info in runtime if info.kind == "container"}
        ids.note_pod_members(info for cg, info in runtime
                             if info.pod_uid and not self._sandbox.get(cg.path, False))
        return self._named

    def _promote(self, classified: List[Tuple[Cgroup, PathInfo]],
                 runtime: List[Tuple[Cgroup, PathInfo]]) -> List[Tuple[Cgroup, PathInfo]]:
        """Candidates a runtime knows become containers (in this tick's lists)."""
        known = {cg.path: promoted for cg, info in runtime if info.kind == "candidate"
                 for promoted in (self.runtimes.promote(info),) if promoted is not None}
        if classified is not self._named_from or known.keys() != self._named_paths:
            self._named_from, self._named_paths = classified, set(known)
            self._named = [(cg, known.get(cg.path, info)) for cg, info in classified] if known else classified
        if not known:
            return runtime
        return [(cg, known.get(cg.path, info)) for cg, info in runtime]

    def promote(self, info: PathInfo) -> PathInfo:
        """`info`, or the container it is when it is a candidate that a runtime knows."""
        if info.kind != "candidate":
            return info
        self.runtimes.refresh_if_new([info])
        return self.runtimes.promote(info) or info

    def is_sandbox(self, cg: Cgroup, info: PathInfo) -> bool:
        """A pod's sandbox container (left out of the default selection)."""
        return self._sandbox.get(cg.path, False)

    def workload(self, cg: Cgroup, info: PathInfo, sample: Sample) -> Workload:
        sandbox = self._sandbox.get(cg.path, False)
        container = self.runtimes.container(info)
        if container is not None:
            container["sandbox"] = sandbox
        pod = container["pod"] if container is not None else self.runtimes.pod(info)
        names: Dict[str, Optional[str]] = {}
        for dev in sample.io.devices or ():
            names[dev.device] = self.devices.name(dev.device)
        for limit in sample.io.limits or ():  # a limited device may have no IO row yet
            if limit.device not in names:
                names[limit.device] = self.devices.name(limit.device)
        return Workload("pod" if info.kind == "pod" else "cgroup", info.unit, container, pod, sandbox, names)

    def lookup_pid(self, pid: int) -> PidCgroups:
        """Where a host PID is (checked against its start time); raises Gone or ReadError."""
        return self.pids.lookup(pid)

    def describe_pid(self, pid: int) -> Dict[str, Any]:
        """The JSON object `cgstat pid` prints for one PID: its cgroup path(s) and container."""
        try:
            found = self.pids.lookup(pid)
        except Gone:
            return _no_pid(pid, "no such process")
        except ReadError as exc:
            return _no_pid(pid, exc.detail)
        info = self.promote(self.owner_of(found.cgroup or "/"))
        self.runtimes.refresh_if_new([info])
        return {"pid": pid, "error": None, "cgroup": found.cgroup, "paths": found.paths,
                "unit": info.unit, "container": self.runtimes.container(info)}

    @staticmethod
    def owner_of(cgroup: str) -> PathInfo:
        """What a process's cgroup path says, rolled up to its container: a process in a
        container's own sub-cgroup (rootless Podman's "container" leaf) belongs to it. A
        Slurm step or task is named as itself (its job, step and task)."""
        info = classify(cgroup)
        if info.inside_container and info.id and info.kind != "container":
            info = classify(container_root(cgroup, info.id))
        return info

    def gpu_owners(self, pids: Iterable[int]) -> Dict[int, Owner]:
        """Name, cgroup and container of each GPU process (host PIDs from NVML), each PID
        once however many GPUs list it.

        A PID seen before costs one read of /proc/<pid>/stat (name and start time at once);
        its cgroup is read again only when the start time changed, so a PID that exits and
        is reused is given to the new process's cgroup, never to the old one's. A PID not
        in /proc (exited, or not in our PID namespace) is UNKNOWN: no cgroup claims it.
        PIDs not asked about this time are forgotten."""
        out: Dict[int, Owner] = {}
        containers: Dict[str, Optional[Container]] = {}  # this call: cgroup -> container object
        # owner_of() reads the path alone: kept from the last call for the cgroups still here
        paths, self._gpu_paths = self._gpu_paths, {}
        # one Owner per name and cgroup: its processes share the container object already
        made: Dict[Tuple[Optional[str], Optional[str]], Owner] = {}
        for pid, found in self.pids.lookup_all(pids).items():
            if found is None:
                out[pid] = UNKNOWN
                continue
            cgroup = found.cgroup or "/"
            if cgroup not in containers:
                path = self._gpu_paths[cgroup] = paths.get(cgroup) or self.owner_of(cgroup)
                info = self.promote(path)
                self.runtimes.refresh_if_new([info])
                containers[cgroup] = self.runtimes.container(info)
            key = (found.name, found.cgroup)
            owner = made.get(key)
            if owner is None:
                owner = made[key] = Owner(found.name, found.cgroup, containers[cgroup])
            out[pid] = owner
        return out

    def close(self) -> None:
        """Release what the runtime lookups hold (watches of state folders) and the PID
        lookups' kept files."""
        self.runtimes.close()
        self.pids.close()

    def member_pids(self, cgroups: Iterable[Cgroup], still: Collection[str] = ()) -> Dict[str, List[int]]:
        """Processes of each cgroup to find its network namespace by, by cgroup path.

        A cgroup's own first member; a cgroup without any (a pod, a slice, rootless
        Podman's container with its processes in a nested leaf) the first member of each
        cgroup below it that has some (not below those), breadth first: `subtrees` then
        says which cgroups those are, and whether every folder below was looked at, so
        that a parent over containers in several namespaces is not given one child's
        traffic (kernel/netns.NetnsReader.read). The choice is kept per folder inode
        while its processes live, so a steady host reads one `stat` per chosen process
        per tick, not cgroup.procs files. `still`: paths of cgroups none of whose tasks came
        or went since the last call (kernel/changes.py): their choice is kept unchecked.
        """
        out: Dict[str, List[int]] = {}
        kept: Dict[int, Tuple[Tuple[int, ...], Optional[bool]]] = {}
        empty: Dict[int, float] = {}
        subtrees: Dict[str, bool] = {}
        now = time.monotonic()
        for cg in cgroups:
            folder = cg.folders[0]
            choice = self._members.get(folder.inode)
            if choice is None or (cg.path not in still
                                  and not all(os.path.exists(self.fs.path(f"/proc/{pid}")) for pid in choice[0])):
                due = self._empty.get(folder.inode)
                if due is not None and now < due:
                    # found empty a moment ago (a slice stays empty for ever): not every tick
                    empty[folder.inode] = due
                    out[cg.path] = []
                    continue
                choice = _members_below(folder.local)
            pids, complete = choice
            if pids:
                kept[folder.inode] = choice
                out[cg.path] = list(pids)
                if complete is not None:
                    subtrees[cg.path] = complete
            else:
                empty[folder.inode] = now + recheck_after_s(folder.inode)
                out[cg.path] = []
        self._members, self._empty, self.subtrees = kept, empty, subtrees
        return out


_SUBTREE_FOLDERS = 32  # folders looked at below a cgroup without members of its own


def _members_below(local: str) -> Tuple[Tuple[int, ...], Optional[bool]]:
    """((first PID,), None) of a folder with processes; for one without, (the first PID
    of each folder below it that has processes, whether every folder below was looked
    at), breadth first, links not followed, at most _SUBTREE_FOLDERS folders."""
    queue = [local]
    seen = 0
    found: List[int] = []
    while queue and seen < _SUBTREE_FOLDERS:
        folder = queue.pop(0)
        seen += 1
        try:
            pids = member_pids(folder)
        except (ReadError, ValueError):
            continue
        if pids:
            if folder == local:
                return (pids[0],), None
            found.append(pids[0])
            continue  # below a cgroup with processes: that workload's own sub-cgroups
        try:
            # A cgroup folder's link count is 2 + its subfolders (kernfs_refresh_inode sets
            # nlink from kn->dir.subdirs): 2 says there is nothing below, sparing the listing
            # of its ~30-50 files. Elsewhere (a recorded tree) 2 says the same on the usual
            # filesystems; where dirs count 1 (btrfs) the folder is listed.
            if os.stat(folder, follow_symlinks=False).st_nlink == 2:
                continue
            with os.scandir(folder) as it:
                queue.extend(sorted(e.path for e in it if e.is_dir(follow_symlinks=False)))
        except OSError:
            continue
    return tuple(found), not queue


def _no_pid(pid: int, error: str) -> Dict[str, Any]:
    return {"pid": pid, "error": error, "cgroup": None, "paths": None, "unit": None, "container": None}
