"""Containers' OCI specs: the annotations containerd and CRI-O write into config.json.

Reads <state>/io.containerd.runtime.v2.task/<namespace>/<id>/config.json (containerd; the
state folders are daemons.Daemons': /run/containerd, or a running containerd's --state or
its config's `state`) and <containers/storage>/<driver>-containers/<id>/userdata/config.json
(CRI-O; the store's layout is naming/runtimes/storage.py's); the CRI annotations name the
container, its image, its pod and whether it is the pod's sandbox. A containerd container
without them (nerdctl, `ctr run`, in any namespace but Docker's own "moby") is still a
containerd container: named by nerdctl's "nerdctl/name" annotation when it has one.
"""

from __future__ import annotations

from typing import Any, List, Optional

from cgstat.naming.runtimes.entry import ContainerEntry, str_dict
from cgstat.naming.runtimes.trust import LookupPass

DOCKER_NAMESPACE = "moby"  # dockerd's own containers: named from Docker's state
NERDCTL_NAME = "nerdctl/name"  # nerdctl's labels are copied into the spec's annotations

# The CRI annotations each runtime puts in a container's OCI spec:
# (container type, container name, image, pod namespace, pod name)
ANNOTATIONS = {
    "containerd": ("io.kubernetes.cri.container-type", "io.kubernetes.cri.container-name",
                   "io.kubernetes.cri.image-name", "io.kubernetes.cri.sandbox-namespace",
                   "io.kubernetes.cri.sandbox-name"),
    "cri-o": ("io.kubernetes.cri-o.ContainerType", "io.kubernetes.container.name",
              "io.kubernetes.cri-o.ImageName", "io.kubernetes.pod.namespace", "io.kubernetes.pod.name"),
}


def entry_from_spec(obj: Any, runtime: str) -> Optional[ContainerEntry]:
    """The entry of an OCI spec written by `runtime` ("containerd" or "cri-o"); None when
    it carries no CRI annotations."""
    if not isinstance(obj, dict):
        return None
    ann = str_dict(obj.get("annotations")) or {}
    kind_key, name_key, image_key, ns_key, pod_key = ANNOTATIONS[runtime]
    kind = ann.get(kind_key)
    if kind is None:
        # Not a CRI container: Podman keeps its own containers' OCI specs in the same
        # store as CRI-O (userdata/config.json); those are named from containers.json.
        return None
    return ContainerEntry(runtime=runtime, name=ann.get(name_key), image=ann.get(image_key),
                          sandbox=kind == "sandbox", k8s_container=ann.get(name_key),
                          k8s_pod=(ann.get(ns_key), ann.get(pod_key)))


def containerd_entry(lookup: LookupPass, tasks: str, namespaces: List[str],
                     cid: str) -> Optional[ContainerEntry]:
    """containerd's entry of cid in the last of its namespaces (`tasks`: local path) that
    has it with CRI annotations; else a plain containerd entry from another namespace."""
    entry = plain = None
    for ns in namespaces:
        spec = lookup.read(tasks, [ns, cid, "config.json"], "containerd")
        entry = entry_from_spec(spec, "containerd") or entry
        if entry is None and plain is None and ns != DOCKER_NAMESPACE and isinstance(spec, dict):
            ann = str_dict(spec.get("annotations")) or {}
            plain = ContainerEntry(runtime="containerd", name=ann.get(NERDCTL_NAME))
    return entry or plain


def crio_entry(lookup: LookupPass, storage: str, drivers: List[str], cid: str) -> Optional[ContainerEntry]:
    """CRI-O's entry of cid in the last driver folder of the store (local path) that has it."""
    entry = None
    for d in drivers:
        entry = entry_from_spec(lookup.read(storage, [d, cid, "userdata", "config.json"], "CRI-O"), "cri-o") or entry
    return entry
