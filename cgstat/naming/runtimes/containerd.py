"""containerd: its cgroups, and the runtime that names from its containers' OCI specs.

Paths: cri-containerd-<id>.scope (Kubernetes, systemd driver), nerdctl-<id>.scope and
/nerdctl/<id> (nerdctl). State: <state>/io.containerd.runtime.v2.task/<namespace>/<id>/
config.json in every namespace (the state folders are daemons.Daemons': /run/containerd,
or a running containerd's --state or its config's `state`), read by cri.py. Trusts the
host's state only.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from cgstat.naming.runtimes import cri
from cgstat.naming.runtimes.daemons import CONTAINERD_TASKS
from cgstat.naming.runtimes.entry import ID_PATTERN, ContainerEntry
from cgstat.naming.runtimes.runtime import SYSTEM, Pass, Runtime


class ContainerdRuntime(Runtime):
    name = "containerd"
    scopes = (rf"^cri-containerd-({ID_PATTERN})\.scope$", rf"^nerdctl-({ID_PATTERN})\.scope$")
    parents = ("nerdctl",)
    trusts = frozenset({SYSTEM})

    def begin(self, ctx: Pass) -> List[Tuple[str, List[str]]]:
        """(the tasks folder, its namespaces) of each state folder."""
        tasks = [ctx.fs.path(state + "/" + CONTAINERD_TASKS) for state in ctx.daemons.containerd_states()]
        # No exists()/isdir() first: they say False on EACCES, which hid the missing
        # names; the open says "denied".
        return [(t, ctx.subdirs(t, (), "containerd")) for t in tasks]

    def system_entry(self, ctx: Pass, places: Any, cid: str) -> Optional[ContainerEntry]:
        entry = None
        for tasks, namespaces in places:
            found = cri.containerd_entry(ctx.lookup, tasks, namespaces, cid)
            if found and self.replaces(entry, found):
                entry = found
        return entry

    def replaces(self, earlier: Optional[ContainerEntry], found: ContainerEntry) -> bool:
        # CRI annotations say more than Docker's config; a plain containerd entry (no CRI
        # annotations) only names what nothing else does.
        return earlier is None or found.k8s_pod is not None
