"""Container names, images and labels from the runtimes' state on disk; PID -> container.

Reads (all under the host root, none needs a daemon):
- Docker:     /var/lib/docker/containers/<id>/config.v2.json (Name, Config.Image,
              Config.Labels, incl. io.kubernetes.* under dockershim); the data root is
              taken from /etc/docker/daemon.json "data-root" when set.
- Podman:     /var/lib/containers/storage/<driver>-containers/containers.json (rootful;
              overlay, vfs, btrfs...) and ~/.local/share/containers/storage/<driver>-
              containers/containers.json of every home in /etc/passwd and under /home.
- containerd: /run/containerd/io.containerd.runtime.v2.task/<namespace>/<id>/config.json
              (the OCI spec; CRI annotations name the container, pod and sandbox).
- CRI-O:      /var/lib/containers/storage/<driver>-containers/<id>/userdata/config.json
              (annotations io.kubernetes.*).
- kubelet:    /var/log/pods/<namespace>_<pod>_<uid>/ (pod names by UID) and
              /var/log/containers/<pod>_<namespace>_<container>-<id>.log (container names).
- Docker API: GET /containers/<id>/json over /var/run/docker.sock, only for a Docker
              container whose state file can't be read (moved data root, no permission).
- /proc/<pid>/cgroup and /proc/<pid>/stat (start time) for PID lookups.

Names are cached by container ID; the caches are refreshed when a container ID appears
that they don't know (at most every few seconds), so a steady host costs no reads.
"""

from __future__ import annotations

import glob
import os
import re
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import orjson

from cgstat import parse
from cgstat.hostfs import HostFS, ReadError, read_text
from cgstat.identity import PathInfo

_REFRESH_MIN_S = 5.0
_REFRESH_UNKNOWN_S = 60.0
_K8S_LOG = re.compile(r"^(?P<pod>[^_]+)_(?P<ns>[^_]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log$")
_POD_DIR = re.compile(r"^(?P<ns>[^_]+)_(?P<pod>[^_]+)_(?P<uid>[0-9a-f-]{36})$")


class _Names:
    """What one refresh of the state files found."""

    def __init__(self) -> None:
        self.containers: Dict[str, Dict[str, Any]] = {}  # id -> name/image/labels/runtime/sandbox/pod
        self.pods: Dict[str, Tuple[str, str]] = {}  # uid -> (namespace, name)
        self.pod_containers: Dict[str, List[str]] = {}  # uid -> container names (log folders)
        self.denied: List[Tuple[str, str]] = []  # (folder, runtime) we were not allowed to read


def _load_json(local: str, names: Optional["_Names"] = None, runtime: str = "") -> Any:
    """A state file's JSON, or None when absent or junk; a denied read is noted."""
    try:
        return orjson.loads(read_text(local))
    except ReadError as exc:
        if exc.code == "permission_denied" and names is not None:
            names.denied.append((local, runtime))
        return None
    except orjson.JSONDecodeError:
        return None


def _str_dict(value: Any) -> Optional[Dict[str, str]]:
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items() if isinstance(v, (str, int, float))}


def _docker_root(fs: HostFS) -> str:
    conf = _load_json(fs.path("/etc/docker/daemon.json"))
    if isinstance(conf, dict) and isinstance(conf.get("data-root"), str):
        return conf["data-root"].rstrip("/")
    return "/var/lib/docker"


def _from_docker_config(obj: Any) -> Optional[Dict[str, Any]]:
    if not isinstance(obj, dict):
        return None
    config = obj.get("Config") if isinstance(obj.get("Config"), dict) else {}
    labels = _str_dict(config.get("Labels")) or {}
    name = obj.get("Name")
    entry = {
        "runtime": "docker",
        "name": name.lstrip("/") if isinstance(name, str) and name.strip("/") else None,
        "image": config.get("Image") if isinstance(config.get("Image"), str) else None,
        "labels": labels,
        "sandbox": labels.get("io.kubernetes.docker.type") == "podsandbox",
    }
    if "io.kubernetes.pod.name" in labels:
        entry["k8s_container"] = labels.get("io.kubernetes.container.name")
        entry["k8s_pod"] = (labels.get("io.kubernetes.pod.namespace"), labels.get("io.kubernetes.pod.name"))
    return entry


def _listable(local: str, names: "_Names", what: str) -> bool:
    """A state folder we may list; one we may not is noted for a one-time warning."""
    try:
        os.listdir(local)
        return True
    except PermissionError:
        names.denied.append((local, what))
    except OSError:
        pass  # absent: that runtime is not used on this host
    return False


def _read_docker(fs: HostFS, names: _Names) -> None:
    root = _docker_root(fs)
    if not _listable(fs.path(root + "/containers"), names, "Docker"):
        return
    for path in glob.glob(fs.path(root + "/containers/*/config.v2.json")):
        cid = os.path.basename(os.path.dirname(path))
        entry = _from_docker_config(_load_json(path, names, "Docker"))
        if entry:
            names.containers[cid] = entry


def _podman_files(fs: HostFS, names: "_Names") -> List[str]:
    """containers.json of every containers/storage store: rootful, and each user's."""
    stores = [fs.path("/var/lib/containers/storage")]
    homes = set(glob.glob(fs.path("/home/*"))) | {fs.path("/root")}
    for line in (fs.read_optional("/etc/passwd") or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 6 and parts[5].startswith("/") and parts[5] != "/":
            homes.add(fs.path(parts[5]))
    stores.extend(sorted(h + "/.local/share/containers/storage" for h in homes))
    out = []
    for store in stores:
        if not os.path.isdir(store) or not _listable(store, names, "Podman"):
            continue
        # one folder per storage driver: overlay-containers, vfs-containers, btrfs-...
        out.extend(sorted(glob.glob(store + "/*-containers/containers.json")))
    return out


def _read_podman(fs: HostFS, names: _Names) -> None:
    for path in _podman_files(fs, names):
        items = _load_json(path, names, "Podman")
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                continue
            meta: Dict[str, Any] = {}
            if isinstance(item.get("metadata"), str):
                try:
                    parsed = orjson.loads(item["metadata"])
                    meta = parsed if isinstance(parsed, dict) else {}
                except orjson.JSONDecodeError:
                    meta = {}
            nm = item.get("names")
            name = nm[0] if isinstance(nm, list) and nm and isinstance(nm[0], str) else meta.get("name")
            image = meta.get("image-name") if isinstance(meta.get("image-name"), str) else None
            # CRI-O keeps its containers in the same store: its metadata names the pod.
            runtime = "cri-o" if "pod-name" in meta else "podman"
            names.containers.setdefault(item["id"], {
                "runtime": runtime, "name": name if isinstance(name, str) else None,
                "image": image, "labels": None, "sandbox": False,
            })


# The CRI annotations each runtime puts in a container's OCI spec:
# (container type, container name, image, pod namespace, pod name)
_CRI_ANNOTATIONS = {
    "containerd": ("io.kubernetes.cri.container-type", "io.kubernetes.cri.container-name",
                   "io.kubernetes.cri.image-name", "io.kubernetes.cri.sandbox-namespace",
                   "io.kubernetes.cri.sandbox-name"),
    "cri-o": ("io.kubernetes.cri-o.ContainerType", "io.kubernetes.container.name",
              "io.kubernetes.cri-o.ImageName", "io.kubernetes.pod.namespace", "io.kubernetes.pod.name"),
}


def _from_oci_annotations(obj: Any, runtime: str) -> Optional[Dict[str, Any]]:
    if not isinstance(obj, dict):
        return None
    ann = _str_dict(obj.get("annotations")) or {}
    kind_key, name_key, image_key, ns_key, pod_key = _CRI_ANNOTATIONS[runtime]
    kind = ann.get(kind_key)
    if kind is None:
        # Not a CRI container: Podman keeps its own containers' OCI specs in the same
        # store as CRI-O (userdata/config.json); those are named from containers.json.
        return None
    return {
        "runtime": runtime, "name": ann.get(name_key), "image": ann.get(image_key), "labels": None,
        "sandbox": kind == "sandbox", "k8s_container": ann.get(name_key),
        "k8s_pod": (ann.get(ns_key), ann.get(pod_key)),
    }


def _read_oci(fs: HostFS, names: _Names) -> None:
    sources = (
        ("/run/containerd/io.containerd.runtime.v2.task/*/*/config.json", "containerd"),
        ("/var/lib/containers/storage/*-containers/*/userdata/config.json", "cri-o"),
    )
    for pattern, runtime in sources:
        for path in glob.glob(fs.path(pattern)):
            cid = path.split("/")[-2] if runtime == "containerd" else path.split("/")[-3]
            entry = _from_oci_annotations(_load_json(path, names, runtime), runtime)
            if entry:
                names.containers[cid] = entry


def _read_kubelet(fs: HostFS, names: _Names) -> None:
    for path in glob.glob(fs.path("/var/log/pods/*")):
        m = _POD_DIR.match(os.path.basename(path))
        if m:
            names.pods[m.group("uid")] = (m.group("ns"), m.group("pod"))
            try:
                names.pod_containers[m.group("uid")] = sorted(
                    d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d)))
            except OSError:
                pass
    for path in glob.glob(fs.path("/var/log/containers/*.log")):
        m = _K8S_LOG.match(os.path.basename(path))
        if m:
            entry = names.containers.setdefault(m.group("id"), {"runtime": None, "name": None, "image": None,
                                                                "labels": None, "sandbox": False})
            entry.setdefault("k8s_container", m.group("container"))
            if not entry.get("k8s_container"):
                entry["k8s_container"] = m.group("container")
            if not entry.get("name"):
                entry["name"] = m.group("container")


def docker_api(fs: HostFS, cid: str, timeout_s: float = 0.5) -> Optional[Dict[str, Any]]:
    """GET /containers/<id>/json over the Docker socket (plain HTTP on a unix socket)."""
    sock_path = fs.path("/var/run/docker.sock")
    if not os.path.exists(sock_path):
        return None
    import http.client  # only here: it costs a cron one-shot 14 ms to import
    import socket

    class _Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout_s)
            self.sock.connect(sock_path)

    try:
        conn = _Conn("localhost", timeout=timeout_s)
        conn.request("GET", f"/containers/{cid}/json")
        resp = conn.getresponse()
        body = resp.read(4 * 1024 * 1024)
        conn.close()
        if resp.status != 200:
            return None
        return _from_docker_config(orjson.loads(body))
    except (OSError, http.client.HTTPException, orjson.JSONDecodeError):
        return None


class Identities:
    """Fills the `container` object of records; caches state files between ticks."""

    def __init__(self, fs: HostFS, warn: Optional[Callable[[str, str], None]] = None,
                 read_state: bool = True):
        self.fs = fs
        self.warn = warn
        self.read_state = read_state  # False: IDs from paths only (what naming costs, bench/)
        self._names = _Names()
        self._loaded_at: Optional[float] = None
        self._asked_api: set = set()
        self._pause: Dict[str, bool] = {}
        self._unknown: set = set()  # IDs no state named at the last refresh
        self._pod_members: Dict[str, set] = {}  # pod uid -> application container IDs this tick

    def refresh(self) -> None:
        names = _Names()
        if not self.read_state:
            self._names, self._loaded_at = names, time.monotonic()
            return
        _read_docker(self.fs, names)
        _read_oci(self.fs, names)
        _read_podman(self.fs, names)
        _read_kubelet(self.fs, names)
        if self.warn is not None:
            for path, runtime in names.denied:
                self.warn(f"denied:{path}", f"cannot read {path} (permission denied): {runtime} container "
                          "names, images and labels will be missing; run as root or with CAP_DAC_READ_SEARCH")
        self._names = names
        self._loaded_at = time.monotonic()

    def refresh_if_new(self, infos: Iterable[PathInfo]) -> None:
        """Re-read the state files when a container or pod we can't name shows up.

        A new unknown ID triggers a refresh (at most every 5 s); IDs still unknown after
        one (a runc container without a runtime's state, unreadable state) only every
        60 s, so they don't make every tick re-read every state file.
        """
        now = time.monotonic()
        if self._loaded_at is None:
            self.refresh()
            return
        age = now - self._loaded_at
        if age < _REFRESH_MIN_S:
            return
        unknown = set()
        for info in infos:
            if info.kind == "container" and info.id not in self._names.containers:
                unknown.add(info.id)
            if info.pod_uid is not None and info.pod_uid not in self._names.pods:
                unknown.add(info.pod_uid)
        if (unknown - self._unknown) or (unknown and age >= _REFRESH_UNKNOWN_S):
            self.refresh()
            self._unknown = unknown

    def note_pod_members(self, infos: Iterable[PathInfo]) -> None:
        """This tick's application containers of each pod (sandboxes already left out)."""
        members: Dict[str, set] = {}
        for info in infos:
            if info.kind == "container" and info.pod_uid and info.id:
                members.setdefault(info.pod_uid, set()).add(info.id)
        self._pod_members = members

    def _only_container_name(self, info: PathInfo) -> Optional[str]:
        """The kubelet's log folders name a pod's containers but not their IDs: when the
        pod has exactly one application container and one log folder, they are the same."""
        dirs = self._names.pod_containers.get(info.pod_uid or "", [])
        members = self._pod_members.get(info.pod_uid or "", set())
        if len(dirs) == 1 and members == {info.id}:
            return dirs[0]
        return None

    def retain(self, live_ids: Iterable[str]) -> None:
        """Forget per-container answers of containers that are gone (bounded under churn)."""
        live = set(live_ids)
        self._pause = {k: v for k, v in self._pause.items() if k in live}
        self._asked_api &= live
        self._unknown &= live

    def is_sandbox(self, info: PathInfo, folder_local: Optional[str] = None) -> bool:
        """A pod's sandbox ("pause") container: plumbing, not an application container.

        The runtime's state says so (CRI annotations, dockershim labels); without state,
        a container of a pod whose every process is named "pause" is one.
        """
        if info.kind != "container" or not info.id:
            return False
        entry = self._names.containers.get(info.id)
        if entry is not None and (entry.get("sandbox") or entry.get("k8s_container")):
            return bool(entry.get("sandbox"))
        if info.pod_uid is None or folder_local is None:
            return False
        if info.id not in self._pause:
            self._pause[info.id] = self._all_pause(folder_local)
        return self._pause[info.id]

    def _all_pause(self, folder_local: str) -> bool:
        try:
            pids = parse.parse_pid_list(read_text(os.path.join(folder_local, "cgroup.procs")))
        except (ReadError, ValueError):
            return False
        comms = []
        for pid in pids[:8]:
            text = self.fs.read_optional(f"/proc/{pid}/comm")
            if text is not None:
                comms.append(text.strip())
        return bool(comms) and all(c == "pause" for c in comms)

    def pod(self, info: PathInfo) -> Optional[Dict[str, Any]]:
        if not info.pod_uid:
            return None
        ns_name = self._names.pods.get(info.pod_uid)
        return {"uid": info.pod_uid, "name": ns_name[1] if ns_name else None,
                "namespace": ns_name[0] if ns_name else None, "qos": info.qos}

    def container(self, info: PathInfo) -> Optional[Dict[str, Any]]:
        if info.kind != "container":
            return None
        cid = info.id or ""
        entry = self._names.containers.get(cid)
        if entry is None and info.runtime == "docker" and cid not in self._asked_api and self.read_state:
            self._asked_api.add(cid)  # ask once per container, never every tick
            entry = docker_api(self.fs, cid)
            if entry:
                self._names.containers[cid] = entry
        entry = entry or {}
        is_hex = len(cid) == 64
        pod = self.pod(info)
        if pod is not None and entry.get("k8s_pod") and pod["name"] is None:
            ns, name = entry["k8s_pod"]
            pod["namespace"], pod["name"] = ns, name
        name = entry.get("k8s_container") if pod is not None else None
        if pod is not None and name is None:
            name = self._only_container_name(info)
        name = name or entry.get("name") or (None if is_hex else cid)
        out = {
            "runtime": info.runtime or entry.get("runtime"),
            "id": cid,
            "short_id": cid[:12] if is_hex else None,
            "name": name,
            "image": entry.get("image"),
            "labels": entry.get("labels"),
            "pod": pod,
            "sandbox": False,
        }
        return out
