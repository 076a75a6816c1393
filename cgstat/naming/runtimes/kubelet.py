"""The kubelet's log folders: pod names by UID and container names by ID, from names only.

Reads the entry names of /var/log/containers (<pod>_<namespace>_<container>-<id>.log, links
kept as links) and /var/log/pods (<namespace>_<pod>_<uid>/, one sub-folder per container
name); no file is opened. Only system pods are named from these (trust.py).
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Set

from cgstat.kernel.hostfs import HostFS
from cgstat.naming.runtimes.entry import ContainerEntry
from cgstat.naming.runtimes.trust import LookupPass

_LOG_NAME = re.compile(r"^(?P<pod>[^_]+)_(?P<ns>[^_]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log$")
_POD_DIR = re.compile(r"^(?P<ns>[^_]+)_(?P<pod>[^_]+)_(?P<uid>[0-9a-f-]{36})$")


class PodFolder(NamedTuple):
    """What /var/log/pods says about one pod."""

    namespace: str
    name: str
    containers: List[str]  # its container log folders (container names), sorted


def name_containers(lookup: LookupPass, fs: HostFS, ids: Set[str]) -> None:
    """Give the system containers of `ids` their Kubernetes container name from the
    /var/log/containers link names, into lookup.found (a name found elsewhere wins)."""
    for name in lookup.names(fs.path("/var/log/containers"), "kubelet"):
        m = _LOG_NAME.match(name)
        if not m or m.group("id") not in ids:
            continue
        key = (None, m.group("id"))
        entry = lookup.found.get(key) or ContainerEntry()
        lookup.found[key] = entry._replace(k8s_container=entry.k8s_container or m.group("container"),
                                           name=entry.name or m.group("container"))


def pod_folders(lookup: LookupPass, fs: HostFS, pods: Set[str]) -> Dict[str, PodFolder]:
    """pod UID -> its /var/log/pods folder's names, for the pods asked."""
    base = fs.path("/var/log/pods")
    out: Dict[str, PodFolder] = {}
    for name in lookup.subdirs(base, [], "kubelet"):
        m = _POD_DIR.match(name)
        if m and m.group("uid") in pods:
            out[m.group("uid")] = PodFolder(m.group("ns"), m.group("pod"),
                                            sorted(lookup.subdirs(base, [name], "kubelet")))
    return out
