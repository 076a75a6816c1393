"""Docker's state: a container's config.v2.json, and where dockerd keeps it.

Reads <data root>/containers/<id>/config.v2.json (Name, Config.Image, Config.Labels, incl.
io.kubernetes.* under dockershim); the data roots are daemons.Daemons' (/var/lib/docker,
daemon.json "data-root", a running dockerd's --data-root, or --docker-data-root); a
changed file (docker rename) is re-read (watch.py says which; `signature` is its stat).
Rootless Docker:
~/.local/share/docker/containers/<id>/config.v2.json of the one user whose subtree holds
the cgroup (naming/runtimes/trust.py).
"""

from __future__ import annotations

import os
from typing import Any, Collection, Dict, Optional, Tuple

from cgstat.kernel.hostfs import ReadError, open_dir_under
from cgstat.naming.runtimes.entry import ContainerEntry, str_dict
from cgstat.naming.runtimes.trust import LookupPass

ROOTLESS = (".local", "share", "docker", "containers")  # below a user's home


def entry_from_config(obj: Any) -> Optional[ContainerEntry]:
    """The entry of a config.v2.json (or of the API's GET /containers/<id>/json: the same
    Name, Config.Image and Config.Labels); None when it isn't an object."""
    if not isinstance(obj, dict):
        return None
    config: Dict[str, Any] = obj["Config"] if isinstance(obj.get("Config"), dict) else {}
    labels = str_dict(config.get("Labels")) or {}
    name = obj.get("Name")
    k8s = "io.kubernetes.pod.name" in labels  # dockershim's labels
    return ContainerEntry(
        runtime="docker",
        name=name.lstrip("/") if isinstance(name, str) and name.strip("/") else None,
        image=config.get("Image") if isinstance(config.get("Image"), str) else None,
        labels=labels,
        sandbox=labels.get("io.kubernetes.docker.type") == "podsandbox",
        k8s_container=labels.get("io.kubernetes.container.name") if k8s else None,
        k8s_pod=(labels.get("io.kubernetes.pod.namespace"), labels.get("io.kubernetes.pod.name")) if k8s else None,
    )


CONFIG = "config.v2.json"
Signature = Tuple[int, int, int]  # (inode, mtime ns, size) of a state file


def signature(folder: str, name: str = CONFIG) -> Optional[Signature]:
    """The identity of <folder>/<name> (local path), the file's link not followed; None
    when it can't be seen."""
    try:
        fd = open_dir_under(folder, [])
    except ReadError:
        return None
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def system_entry(lookup: LookupPass, containers: str, cid: str) -> Optional[ContainerEntry]:
    """The system Docker's entry of cid; `containers` is <data root>/containers (local path)."""
    return entry_from_config(lookup.read(containers, [cid, CONFIG], "Docker"))


def rootless_entry(lookup: LookupPass, home: str, cid: str,
                   owners: Collection[int]) -> Optional[ContainerEntry]:
    """Rootless Docker's entry of cid in one user's home (local path), read under `owners`."""
    return entry_from_config(lookup.read(home, list(ROOTLESS) + [cid, "config.v2.json"],
                                         "rootless Docker", owners))
