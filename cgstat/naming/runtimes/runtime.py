"""What a container runtime is to cgstat (Runtime): the cgroup paths it makes, how its state
names a container, and whose state it trusts. One module per runtime implements it
(docker.py, containerd.py, crio.py, podman.py, lxc.py, slurm.py); registry.py lists them in
lookup order. No I/O here: the interface, and the per-pass context every runtime reads
through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Collection, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Set, Tuple

from cgstat.naming.runtimes.entry import ContainerEntry, Key
from cgstat.naming.runtimes.trust import LookupPass

if TYPE_CHECKING:
    from cgstat.kernel.hostfs import HostFS
    from cgstat.naming.runtimes.daemons import Daemons

SYSTEM = "system"  # the host's state: names cgroups outside users' subtrees only
USER = "user"  # a user's own store, in that user's home: names that user's subtree only


class PathInfo(NamedTuple):
    """What a cgroup path says (naming/paths.py classify)."""

    kind: Optional[str] = None  # "container", "pod", "monitor", "candidate" or None
    runtime: Optional[str] = None
    id: Optional[str] = None  # 64-hex container ID, or the LXC container name
    pod_uid: Optional[str] = None  # dashed form
    qos: Optional[str] = None  # guaranteed | burstable | besteffort
    unit: Optional[str] = None  # decoded systemd unit name of the last component
    inside_container: bool = False  # a cgroup below a container (its own sub-cgroups)
    # The uid of the systemd user manager whose delegated subtree holds this cgroup
    # (a `user@<UID>.service` component), None outside users' subtrees. See classify.
    user_uid: Optional[int] = None
    # What a runtime's own path parser said beyond the ID (Slurm: step, task, uid), for its
    # describe(); None for every other runtime.
    detail: Any = None


class WorkloadPath(NamedTuple):
    """A workload found by a runtime's own path parser (`Runtime.workload_path`)."""

    depth: int  # the index, among the path's components, of the workload's own folder
    id: str  # the record's container.id
    detail: Any  # what else the path says, for the runtime's `describe` (PathInfo.detail)


class Pass:
    """One lookup pass: the budget and findings (LookupPass), the host, the daemons' places,
    and the folder listings already made in it (two runtimes sharing a store list it once)."""

    def __init__(self, lookup: LookupPass, fs: HostFS, daemons: Daemons,
                 warn: Optional[Callable[[str, str], None]] = None):
        self.lookup = lookup
        self.fs = fs
        self.daemons = daemons
        self.warn = warn
        self._listed: Dict[Tuple[str, Tuple[str, ...]], List[str]] = {}

    def subdirs(self, base: str, parts: Tuple[str, ...], what: str) -> List[str]:
        """LookupPass.subdirs of a system folder, once per pass."""
        key = (base, parts)
        if key not in self._listed:
            self._listed[key] = self.lookup.subdirs(base, list(parts), what)
        return self._listed[key]


# - Paths (`scopes`, `parents`, `named_parents`, `monitors`): regular expressions over one
#   cgroup folder name; naming/paths.py classifies with the union of every runtime's. A
#   runtime whose workload is several folder levels deep (Slurm: job, step, task) parses
#   the whole path instead (`workload_path`), and says what else the path means in the
#   record (`describe`).
# - Naming from state: `begin(ctx)` once per lookup pass (list the stores: what is there),
#   then `system_entry(ctx, places, cid)` per container ID, in registry order, where a
#   later runtime's entry replaces an earlier one when `replaces` says so; then
#   `system_scan(ctx, places, missing)` for the IDs no per-ID read named (a store that is
#   one file for every container, scanned once). `user_entries` names a user's own
#   containers from that user's home.
# - Trust (`trusts`): SYSTEM, the host's own state (root's daemons) names only cgroups
#   outside users' subtrees; USER, a user's store in that user's home names only cgroups in
#   that user's delegated subtree (naming/runtimes/trust.py has the rules every read keeps).
#   A runtime that trusts neither is named from its paths alone.
class Runtime:
    """A container runtime (see the comment above); the defaults name nothing."""

    name = ""  # the record's container.runtime
    scopes: Tuple[str, ...] = ()  # a container's own folder name; group 1 is its ID
    parents: Tuple[str, ...] = ()  # cgroupfs parents whose bare 64-hex children are its containers
    named_parents: Tuple[str, ...] = ()  # parents whose every child is a container of that name
    monitors: Tuple[str, ...] = ()  # its per-container monitor's folder (a process of no container)
    trusts: FrozenSet[str] = frozenset()

    def __init__(self, fs: HostFS, daemons: Daemons):
        self.fs = fs
        self.daemons = daemons

    @staticmethod
    def workload_path(parts: Sequence[str]) -> Optional[WorkloadPath]:
        """The workload a cgroup path (its components) is or is below, for a runtime
        whose workloads are not one folder name (see the comment above the class); None: not one."""
        return None

    def describe(self, info: PathInfo) -> Any:
        """The record's object for this runtime's workload (container.<name>), or None."""
        return None

    def begin(self, ctx: Pass) -> Any:
        """What this pass reads (the stores' places and listings); None: nothing to read."""
        return None

    def system_entry(self, ctx: Pass, places: Any, cid: str) -> Optional[ContainerEntry]:
        return None

    def replaces(self, earlier: Optional[ContainerEntry], found: ContainerEntry) -> bool:
        """Whether `found` (this runtime's) wins over an earlier runtime's entry of the ID."""
        return True

    def system_scan(self, ctx: Pass, places: Any, missing: Set[str]) -> Dict[str, ContainerEntry]:
        return {}

    def user_entries(self, ctx: Pass, home: str, ids: Set[str],
                     owners: Collection[int]) -> Dict[str, ContainerEntry]:
        """Entries of `ids` in one user's home (local path), every file owned by `owners`."""
        return {}

    def finish(self, ctx: Pass, asked: Dict[str, Optional[str]]) -> None:
        """After every runtime's state and the kubelet's were read for the system IDs
        `asked` (ID -> the runtime its path says): a last resort for those still unnamed
        (into ctx.lookup.found), and what to say about them."""

    # kept between passes (a runtime that follows its state files for changes)

    def changed(self) -> List[Key]:
        """The keys whose state changed since the last tick (cheap: no file is read)."""
        return []

    def reread(self, ctx: Pass, keys: List[Key]) -> Dict[Key, ContainerEntry]:
        """The entries of `keys` read again (those still there)."""
        return {}

    def retain(self, live: Set[str]) -> None:
        """Forget what is kept about containers not in `live`."""

    def forget(self) -> None:
        """Forget everything kept."""

    def close(self) -> None:
        """Release what is held (watches)."""
