"""Podman: its cgroups, and the runtime that names from containers/storage.

Paths: libpod-<id>.scope (systemd), /libpod_parent/libpod-<id> (cgroupfs); its monitor is
libpod-conmon-<id>.scope, or <parent>/conmon with the cgroupfs manager. State: the
store's containers.json (storage.py): rootful in /var/lib/containers/storage, scanned
once for every ID no per-ID read named; rootless in the one user's own home whose
subtree holds the cgroup, every folder and file owned by that user (trust.py).
"""

from __future__ import annotations

from typing import Any, Collection, Dict, Set

from cgstat.naming.runtimes import storage
from cgstat.naming.runtimes.entry import ID_PATTERN, ContainerEntry
from cgstat.naming.runtimes.runtime import SYSTEM, USER, Pass, Runtime


class PodmanRuntime(Runtime):
    name = "podman"
    scopes = (rf"^libpod-({ID_PATTERN})(?:\.scope)?$",)
    parents = ("libpod_parent",)
    monitors = (rf"^libpod-conmon-{ID_PATTERN}(?:\.scope)?$", r"^conmon$")
    trusts = frozenset({SYSTEM, USER})

    def begin(self, ctx: Pass) -> Any:
        return storage.system_store(ctx)

    def system_scan(self, ctx: Pass, places: Any, missing: Set[str]) -> Dict[str, ContainerEntry]:
        store, drivers = places
        out: Dict[str, ContainerEntry] = {}
        for d in drivers:
            if not missing:
                break
            for cid, entry in storage.scan(ctx.lookup, store, [d, "containers.json"], missing, None).items():
                out[cid] = entry
                missing.discard(cid)
        return out

    def user_entries(self, ctx: Pass, home: str, ids: Set[str],
                     owners: Collection[int]) -> Dict[str, ContainerEntry]:
        out: Dict[str, ContainerEntry] = {}
        missing = set(ids)
        listing = ctx.lookup.subdirs(home, storage.ROOTLESS_STORAGE, "rootless Podman", owners)
        for d in sorted(storage.driver_folders(listing)):
            found = storage.scan(ctx.lookup, home, list(storage.ROOTLESS_STORAGE) + [d, "containers.json"],
                                 missing, owners)
            for cid, entry in found.items():
                out[cid] = entry
                missing.discard(cid)
            if not missing:
                break
        return out
