"""CRI-O: its cgroups, and the runtime that names from its containers' OCI specs.

Paths: crio-<id>.scope (systemd driver) or crio-<id> (cgroupfs); crio-conmon-<id>[.scope]
is its monitor. State: <containers/storage>/<driver>-containers/<id>/userdata/config.json
(the store's layout is storage.py's), read by cri.py. Trusts the host's state only.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from cgstat.naming.runtimes import cri, storage
from cgstat.naming.runtimes.entry import ID_PATTERN, ContainerEntry
from cgstat.naming.runtimes.runtime import SYSTEM, Pass, Runtime


class CrioRuntime(Runtime):
    name = "cri-o"
    scopes = (rf"^crio-({ID_PATTERN})(?:\.scope)?$",)
    monitors = (rf"^crio-conmon-{ID_PATTERN}(?:\.scope)?$",)
    trusts = frozenset({SYSTEM})

    def begin(self, ctx: Pass) -> Tuple[str, List[str]]:
        return storage.system_store(ctx)

    def system_entry(self, ctx: Pass, places: Any, cid: str) -> Optional[ContainerEntry]:
        store, drivers = places
        return cri.crio_entry(ctx.lookup, store, drivers, cid)
