"""Container names, images and labels from the runtimes' state on disk; PID -> container.

Reads (all under the host root, none needs a daemon), only for the 64-hex IDs of live
cgroups that are not named yet, one file or one search per ID:
- Docker:     <data root>/containers/<id>/config.v2.json (Name, Config.Image,
              Config.Labels, incl. io.kubernetes.* under dockershim); the data root is
              /var/lib/docker, or /etc/docker/daemon.json "data-root" when set.
- containerd: /run/containerd/io.containerd.runtime.v2.task/<namespace>/<id>/config.json
              (the OCI spec; CRI annotations name the container, pod and sandbox).
- CRI-O:      /var/lib/containers/storage/<driver>-containers/<id>/userdata/config.json
              (annotations io.kubernetes.*).
- Podman:     /var/lib/containers/storage/<driver>-containers/containers.json (rootful),
              searched for the wanted IDs, never parsed whole.
- kubelet:    /var/log/pods/<namespace>_<pod>_<uid>/ (pod names by UID) and
              /var/log/containers/<pod>_<namespace>_<container>-<id>.log (container
              names), from file names only; entries of live pods and containers kept.
- Rootless:   ~/.local/share/containers/storage/<driver>-containers/containers.json
              (Podman) and ~/.local/share/docker/containers/<id>/config.v2.json (Docker)
              of the one user whose subtree holds the cgroup (see the trust rules).
- Docker API: GET /containers/<id>/json over /var/run/docker.sock, only for a system
              Docker container whose state file can't be read (moved data root, no
              permission); short timeouts, a budget per refresh, a pause after a failure.
- /proc/<pid>/comm of a pod's container (pause detection) and, in pids.py, /proc/<pid>/
  cgroup and /stat for PID lookups.

Trust rules (much of this is written by users and containers, the agent runs as root):
- Who may name what. systemd delegates /user.slice/user-<UID>.slice/user@<UID>.service to
  user UID, who may create any cgroup below it with any name (naming/paths.user_subtree_uid).
  A cgroup with a `user@<UID>.service` component is named ONLY from that user's own
  stores: the home of UID in /etc/passwd (without a passwd entry: the /home/* folders
  owned by UID; with no /etc/passwd at all, as in recorded trees, root-owned /home/*
  folders too). Everything else (Docker, rootful Podman, CRI-O, containerd, kubelet, the
  Docker API) names ONLY cgroups outside users' subtrees. A user who makes
  `user@1000.service/docker-<id>.scope` with a system container's ID gets no name, and a
  user's store never names another user's container. Names are cached per (uid, ID).
- Whose files. Every folder from the home down to a store, and the store file, must be
  owned by that user, by root (a user can't create root-owned files; recorded fixtures
  are checked out owned by root) or by the agent's own user, and must not be a link.
- How files are opened: hostfs.read_untrusted / open_dir_under only. O_NOFOLLOW on every
  component below a fixed base, O_NONBLOCK (a FIFO can't block), fstat() must say
  regular file, sizes capped before reading (4 MiB per spec/config, 64 MiB per
  containers.json, which is scanned in 1 MiB chunks: memory stays flat whatever its
  size). Folders are listed without following links; only the known storage-driver
  folders are read.
- How long: a refresh stops reading after _BUDGET_S (said once); the Docker API has its
  own budget and is left alone for _API_BACKOFF_S after a timeout or failed connect.
- When: a container ID seen for the first time is looked up at once (a container that
  lives 1.5 s is named); one still unknown after a lookup is retried every
  _RETRY_UNKNOWN_S only. Entries of containers that are gone are forgotten (retain).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

import orjson

from cgstat.kernel import parse
from cgstat.kernel.hostfs import (
    HostFS,
    ReadError,
    list_dir_fd,
    open_dir_under,
    open_untrusted,
    read_text,
    read_under,
    read_untrusted,
)
from cgstat.naming.paths import PathInfo
from cgstat.records import Container, Pod

_RETRY_UNKNOWN_S = 60.0  # an ID no state named is looked up again after this long
_BUDGET_S = 1.0  # reading runtime state, per refresh
_API_TIMEOUT_S = 0.5  # one Docker API call, connect to last byte
_API_BUDGET_S = 1.0  # Docker API calls, per refresh
_API_BACKOFF_S = 60.0  # no API call for this long after a timeout or failed connect
_CONFIG_MAX = 4 * 1024 * 1024  # config.v2.json, OCI config.json, an API answer
_STORE_MAX = 64 * 1024 * 1024  # containers.json: scanned, never held whole
_SCAN_CHUNK = 1024 * 1024
_OBJ_BACK = 64 * 1024  # how far before an ID's hit its object may start
_OBJ_MAX = 256 * 1024  # the largest containers.json entry decoded
_OBJ_TRIES = 16  # '{' candidates tried before an ID hit
# containers/storage keeps a store's containers in <graph root>/<driver>-containers with
# the driver names graphdriver registers (drivers/*: overlay and its alias overlay2, vfs,
# btrfs, zfs, aufs, devicemapper); fuse-overlayfs is overlay's mount program, not a name.
_DRIVERS = ("overlay", "overlay2", "vfs", "btrfs", "zfs", "aufs", "devicemapper")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_K8S_LOG = re.compile(r"^(?P<pod>[^_]+)_(?P<ns>[^_]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log$")
_POD_DIR = re.compile(r"^(?P<ns>[^_]+)_(?P<pod>[^_]+)_(?P<uid>[0-9a-f-]{36})$")
_CONTAINERD_TASKS = "/run/containerd/io.containerd.runtime.v2.task"
_STORAGE = "/var/lib/containers/storage"
_ROOTLESS_STORAGE = (".local", "share", "containers", "storage")
_ROOTLESS_DOCKER = (".local", "share", "docker", "containers")

Key = Tuple[Optional[int], str]  # (uid of the user subtree or None for the system, container ID)


class ContainerEntry(NamedTuple):
    """What a runtime's state says about one container."""

    runtime: Optional[str] = None
    name: Optional[str] = None
    image: Optional[str] = None
    labels: Optional[Dict[str, str]] = None
    sandbox: bool = False  # a pod's sandbox ("pause") container, by the runtime's own word
    k8s_container: Optional[str] = None  # the Kubernetes container name, for pod members
    k8s_pod: Optional[Tuple[Optional[str], Optional[str]]] = None  # (namespace, pod name)


def _str_dict(value: Any) -> Optional[Dict[str, str]]:
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items() if isinstance(v, (str, int, float))}


def _from_docker_config(obj: Any) -> Optional[ContainerEntry]:
    if not isinstance(obj, dict):
        return None
    config: Dict[str, Any] = obj["Config"] if isinstance(obj.get("Config"), dict) else {}
    labels = _str_dict(config.get("Labels")) or {}
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


# The CRI annotations each runtime puts in a container's OCI spec:
# (container type, container name, image, pod namespace, pod name)
_CRI_ANNOTATIONS = {
    "containerd": ("io.kubernetes.cri.container-type", "io.kubernetes.cri.container-name",
                   "io.kubernetes.cri.image-name", "io.kubernetes.cri.sandbox-namespace",
                   "io.kubernetes.cri.sandbox-name"),
    "cri-o": ("io.kubernetes.cri-o.ContainerType", "io.kubernetes.container.name",
              "io.kubernetes.cri-o.ImageName", "io.kubernetes.pod.namespace", "io.kubernetes.pod.name"),
}


def _from_oci_annotations(obj: Any, runtime: str) -> Optional[ContainerEntry]:
    if not isinstance(obj, dict):
        return None
    ann = _str_dict(obj.get("annotations")) or {}
    kind_key, name_key, image_key, ns_key, pod_key = _CRI_ANNOTATIONS[runtime]
    kind = ann.get(kind_key)
    if kind is None:
        # Not a CRI container: Podman keeps its own containers' OCI specs in the same
        # store as CRI-O (userdata/config.json); those are named from containers.json.
        return None
    return ContainerEntry(runtime=runtime, name=ann.get(name_key), image=ann.get(image_key),
                          sandbox=kind == "sandbox", k8s_container=ann.get(name_key),
                          k8s_pod=(ann.get(ns_key), ann.get(pod_key)))


def _from_podman_item(item: Any) -> Optional[ContainerEntry]:
    """One containers.json entry: {"id", "names": [...], "metadata": "<JSON string>"}."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return None
    meta: Dict[str, Any] = {}
    if isinstance(item.get("metadata"), str) and len(item["metadata"]) <= _OBJ_MAX:
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
    return ContainerEntry(runtime=runtime, name=name if isinstance(name, str) else None, image=image)


class _Budget:
    """A deadline for one refresh; says once per agent that it ran out."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.ran_out = False

    def left(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.ran_out = True
        return not self.ran_out


class _Pass:
    """What one lookup pass found, and which state folders we were not allowed to read."""

    def __init__(self, budget: _Budget):
        self.budget = budget
        self.found: Dict[Key, ContainerEntry] = {}
        self.denied: Dict[str, str] = {}  # folder -> runtime, for the one-time warning

    def read(self, base: str, parts: Iterable[str], what: str, owners=None) -> Any:
        """A state file's JSON, or None when absent, refused or junk; a denied read is
        noted against `base`, so a 0700 store costs one warning, not one per ID."""
        try:
            return orjson.loads(read_under(base, parts, _CONFIG_MAX, owners))
        except ReadError as exc:
            if exc.code == "permission_denied":
                self.denied.setdefault(base, what)
            return None
        except orjson.JSONDecodeError:
            return None

    def subdirs(self, base: str, parts: Iterable[str], what: str, owners=None) -> List[str]:
        """Sub-folders (no links) of base/parts, [] when absent or refused."""
        try:
            fd = open_dir_under(base, parts, owners)
        except ReadError as exc:
            if exc.code == "permission_denied":
                self.denied.setdefault(base, what)
            return []
        try:
            return list_dir_fd(fd, base)
        except ReadError as exc:
            if exc.code == "permission_denied":
                self.denied.setdefault(base, what)
            return []
        finally:
            os.close(fd)

    def names(self, base: str, what: str) -> List[str]:
        """Every entry name of a folder (links included: kubelet names are links), never
        following one."""
        try:
            fd = open_dir_under(base, [])
        except ReadError as exc:
            if exc.code == "permission_denied":
                self.denied.setdefault(base, what)
            return []
        try:
            with os.scandir(fd) as it:
                return [e.name for e in it]
        except OSError:
            return []
        finally:
            os.close(fd)


def _object_around(fd: int, hit: int, cid: str) -> Optional[Dict[str, Any]]:
    """The JSON object around a hit of "<cid>" whose own "id" is cid, from a bounded window.

    Walks back over the '{' before the hit and decodes from each with raw_decode (on a
    latin-1 view, where byte offsets are character offsets) to find where that object
    ends, then decodes those exact bytes with orjson (real UTF-8). The ID may also appear
    as another field's value: the "id" check rejects those hits.
    """
    start = max(0, hit - _OBJ_BACK)
    window = os.pread(fd, hit - start + _OBJ_MAX, start)
    text = window.decode("latin-1")
    decoder = json.JSONDecoder()
    pos = hit - start
    for _ in range(_OBJ_TRIES):
        pos = text.rfind("{", 0, pos)
        if pos < 0:
            return None
        try:
            obj, end = decoder.raw_decode(text, pos)
        except ValueError:
            continue
        if end <= hit - start:
            continue  # an object that closes before the hit does not hold it
        if isinstance(obj, dict) and obj.get("id") == cid:
            try:
                real = orjson.loads(window[pos:end])
            except orjson.JSONDecodeError:
                return None
            return real if isinstance(real, dict) else None
    return None


def _scan_store(fd: int, wanted: Set[str], budget: _Budget) -> Dict[str, ContainerEntry]:
    """Entries of a containers.json for the wanted IDs, read in bounded chunks.

    The file is never parsed whole: a user's 16 MiB file of a million tiny entries took
    the agent from 32 to 580 MiB when it was. Each wanted ID is searched as the quoted
    string "<id>" (Go's encoding/json writes `"id":"<id>"`; whitespace is allowed), and
    only the object around a hit is decoded.
    """
    found: Dict[str, ContainerEntry] = {}
    needles = {cid: b'"' + cid.encode() + b'"' for cid in wanted}
    overlap = 65  # one byte short of a needle: a hit is never seen twice
    offset, tail = 0, b""
    while len(found) < len(needles) and offset < _STORE_MAX and budget.left():
        chunk = os.pread(fd, _SCAN_CHUNK, offset)
        if not chunk:
            break
        buf, base = tail + chunk, offset - len(tail)
        for cid, needle in needles.items():
            at = 0 if cid not in found else -1
            while at >= 0 and budget.left():
                at = buf.find(needle, at)
                if at < 0:
                    break
                item = _from_podman_item(_object_around(fd, base + at, cid))
                if item is not None:
                    found[cid] = item
                    break
                at += 1
        tail = buf[-overlap:]
        offset += len(chunk)
    return found


def _docker_root(fs: HostFS) -> str:
    try:
        conf = orjson.loads(read_untrusted(fs.path("/etc/docker/daemon.json"), _CONFIG_MAX))
    except (ReadError, orjson.JSONDecodeError):
        return "/var/lib/docker"
    root = conf.get("data-root") if isinstance(conf, dict) else None
    if isinstance(root, str) and root.startswith("/") and root.rstrip("/"):
        return root.rstrip("/")
    return "/var/lib/docker"


def _passwd_homes(fs: HostFS) -> Optional[Dict[int, List[str]]]:
    """uid -> home folders from /etc/passwd; None when there is no /etc/passwd."""
    try:
        text = read_untrusted(fs.path("/etc/passwd"), _CONFIG_MAX).decode("utf-8", "replace")
    except ReadError:
        return None
    homes: Dict[int, List[str]] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 6 and parts[2].isdigit() and parts[5].startswith("/") and parts[5] != "/":
            homes.setdefault(int(parts[2]), []).append(parts[5].rstrip("/"))
    return homes


def _homes_of(fs: HostFS, uid: int, passwd: Optional[Dict[int, List[str]]]) -> List[str]:
    """Host paths of the home folders of uid (see the trust rules in the docstring)."""
    if passwd and uid in passwd:
        return sorted(set(passwd[uid]))
    owned, root_owned = [], []
    try:
        with os.scandir(fs.path("/home")) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)  # lstat: a link is no home
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if st.st_uid == uid:
                        owned.append("/home/" + entry.name)
                    elif st.st_uid == 0:
                        root_owned.append("/home/" + entry.name)
    except OSError:
        return []
    if owned:
        return sorted(owned)
    # No /etc/passwd at all (a recorded tree): homes root made; a user can't make one.
    return sorted(root_owned) if passwd is None else []


class DockerAPI:
    """GET /containers/<id>/json over the Docker socket, within a time budget.

    Never serial waits: each call has a deadline (connect to last byte), the calls of one
    refresh share a budget, and after a timeout or a failed connect the socket is left
    alone for _API_BACKOFF_S (a hung dockerd would otherwise cost every unknown ID a
    timeout, one after another: 20 IDs took a run 10.7 s).
    """

    def __init__(self, fs: HostFS):
        self.fs = fs
        self.paused_until = 0.0

    def lookup(self, cid: str, budget_deadline: float) -> Optional[ContainerEntry]:
        now = time.monotonic()
        if now < self.paused_until or now >= budget_deadline:
            return None
        status, body = _docker_get(self.fs, cid, min(_API_TIMEOUT_S, budget_deadline - now))
        if status is None:
            self.paused_until = time.monotonic() + _API_BACKOFF_S
            return None
        return _api_entry(status, body)


def _docker_get(fs: HostFS, cid: str, timeout_s: float) -> Tuple[Optional[int], bytes]:
    """(HTTP status, body) of GET /containers/<cid>/json; (None, b"") when the socket is
    absent, refuses, or does not answer in timeout_s.

    Plain HTTP/1.0 (the daemon answers without chunking and closes), read under one
    deadline: a server that sends a byte now and then can't keep us.
    """
    import socket  # only here: most runs never ask the API

    if not _HEX64.match(cid):
        return None, b""
    sock_path = fs.path("/var/run/docker.sock")
    deadline = time.monotonic() + timeout_s
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(sock_path)
        sock.sendall(f"GET /containers/{cid}/json HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        data = b""
        while len(data) <= _CONFIG_MAX + 65536:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, b""
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            length = _content_length(head) if sep else None
            if length is not None and len(body) >= length:
                break
    except OSError:
        return None, b""
    finally:
        sock.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if not sep or len(parts) < 2 or not parts[1].isdigit():
        return 0, b""
    length = _content_length(head)
    return int(parts[1]), body[:length] if length is not None else body


def _content_length(head: bytes) -> Optional[int]:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return None


def docker_api(fs: HostFS, cid: str, timeout_s: float = _API_TIMEOUT_S) -> Optional[ContainerEntry]:
    """One GET /containers/<id>/json (no budget, no pause): the entry, or None."""
    return _api_entry(*_docker_get(fs, cid, timeout_s))


def _api_entry(status: Optional[int], body: bytes) -> Optional[ContainerEntry]:
    """The entry in an answer of GET /containers/<id>/json, or None."""
    if status != 200:
        return None
    try:
        return _from_docker_config(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None


class Identities:
    """Fills the `container` object of records; caches what the state files said per ID."""

    def __init__(self, fs: HostFS, warn: Optional[Callable[[str, str], None]] = None,
                 read_state: bool = True):
        self.fs = fs
        self.warn = warn
        self.read_state = read_state  # False: IDs from paths only (what naming costs, bench/)
        self._names: Dict[Key, ContainerEntry] = {}
        self._tried: Dict[Key, float] = {}  # looked up, nothing found: when
        self._pods: Dict[str, Tuple[str, str]] = {}  # system pod uid -> (namespace, name)
        self._pod_dirs: Dict[str, List[str]] = {}  # pod uid -> kubelet container log folders
        self._pods_tried: Dict[str, float] = {}
        self._api = DockerAPI(fs)
        self._pause: Dict[Key, bool] = {}
        # (uid of the subtree, pod uid) -> this tick's application container IDs: a pod-like
        # cgroup a user makes can't change what a system pod's members are.
        self._pod_members: Dict[Tuple[Optional[int], str], set] = {}

    # -- lookups ------------------------------------------------------------------------

    def refresh_if_new(self, infos: Iterable[PathInfo]) -> None:
        """Look up the containers and pods we can't name yet.

        An ID seen for the first time is looked up at once; one that no state named is
        looked up again only every _RETRY_UNKNOWN_S. A steady host reads nothing.
        """
        if not self.read_state:
            return
        now = time.monotonic()
        todo: Dict[Key, Optional[str]] = {}
        pods: Set[str] = set()
        for info in infos:
            if info.kind == "container" and info.id and _HEX64.match(info.id):
                key = (info.user_uid, info.id)
                if key not in self._names and self._due(self._tried.get(key), now):
                    todo[key] = info.runtime
                    if info.pod_uid and info.user_uid is None:
                        pods.add(info.pod_uid)  # its log folder may be new
            if info.pod_uid and info.user_uid is None and info.pod_uid not in self._pods \
                    and self._due(self._pods_tried.get(info.pod_uid), now):
                pods.add(info.pod_uid)
        if todo or pods:
            self._lookup(todo, pods, now)

    def refresh(self) -> None:
        """Forget every answer: the next refresh_if_new looks everything up again."""
        self._names.clear()
        self._tried.clear()
        self._pods.clear()
        self._pod_dirs.clear()
        self._pods_tried.clear()

    @staticmethod
    def _due(tried_at: Optional[float], now: float) -> bool:
        return tried_at is None or now - tried_at >= _RETRY_UNKNOWN_S

    def _lookup(self, todo: Dict[Key, Optional[str]], pods: Set[str], now: float) -> None:
        lookup = _Pass(_Budget(_BUDGET_S))
        system = {cid: runtime for (uid, cid), runtime in todo.items() if uid is None}
        if system:
            self._lookup_system(lookup, system)
        if pods or system:
            self._lookup_kubelet(lookup, set(system), pods)
        users = sorted({uid for uid, _ in todo if uid is not None})
        if users:
            passwd = _passwd_homes(self.fs)
            for uid in users:
                if not lookup.budget.left():
                    break
                self._lookup_user(lookup, uid, {cid for u, cid in todo if u == uid}, passwd)
        api_deadline = time.monotonic() + _API_BUDGET_S
        for cid, runtime in sorted(system.items()):
            # Only Docker's own cgroups (docker-<id>.scope, /docker/<id>) outside users'
            # subtrees: those are the only IDs dockerd can know.
            if runtime == "docker" and (None, cid) not in lookup.found:
                entry = self._api.lookup(cid, api_deadline)
                if entry:
                    lookup.found[(None, cid)] = entry
        for key in todo:
            if key in lookup.found:
                self._names[key] = lookup.found[key]
                self._tried.pop(key, None)
            else:
                self._tried[key] = now
        for pod_uid in pods:
            if pod_uid not in self._pods:
                self._pods_tried[pod_uid] = now
        self._report(lookup)

    def _report(self, lookup: _Pass) -> None:
        if self.warn is None:
            return
        for path, runtime in sorted(lookup.denied.items()):
            self.warn(f"denied:{path}", f"cannot read {path} (permission denied): {runtime} container "
                      "names, images and labels will be missing; run as root or with CAP_DAC_READ_SEARCH")
        if lookup.budget.ran_out:
            self.warn("naming-budget", f"reading container runtime state took over {_BUDGET_S:g} s; "
                      "stopped there, some container names will be missing (looked up again "
                      f"after {_RETRY_UNKNOWN_S:g} s)")

    def _lookup_system(self, lookup: _Pass, ids: Dict[str, Optional[str]]) -> None:
        fs = self.fs
        docker = fs.path(_docker_root(fs) + "/containers")
        tasks = fs.path(_CONTAINERD_TASKS)
        storage = fs.path(_STORAGE)
        # No exists()/isdir() first: they say False on EACCES (a 0700 /var/lib/containers
        # as a non-root user), which hid the missing names; the open says "denied".
        namespaces = lookup.subdirs(tasks, [], "containerd")
        drivers = [d for d in lookup.subdirs(storage, [], "Podman and CRI-O")
                   if d in {x + "-containers" for x in _DRIVERS}]
        for cid in sorted(ids):
            if not lookup.budget.left():
                return
            # Later sources win, as CRI annotations say more than Docker's config.
            entry = _from_docker_config(lookup.read(docker, [cid, "config.v2.json"], "Docker"))
            for ns in namespaces:
                found = _from_oci_annotations(lookup.read(tasks, [ns, cid, "config.json"], "containerd"),
                                              "containerd")
                entry = found or entry
            for d in drivers:
                found = _from_oci_annotations(lookup.read(storage, [d, cid, "userdata", "config.json"],
                                                          "CRI-O"), "cri-o")
                entry = found or entry
            if entry:
                lookup.found[(None, cid)] = entry
        missing = {cid for cid in ids if (None, cid) not in lookup.found}
        for d in drivers:  # rootful Podman
            if not missing:
                break
            for cid, entry in self._scan(lookup, storage, [d, "containers.json"], missing, None).items():
                lookup.found[(None, cid)] = entry
                missing.discard(cid)

    def _scan(self, lookup: _Pass, base: str, parts: List[str], wanted: Set[str],
              owners) -> Dict[str, ContainerEntry]:
        try:
            fd_dir = open_dir_under(base, parts[:-1], owners)
        except ReadError as exc:
            if exc.code == "permission_denied":
                lookup.denied.setdefault(base, "Podman")
            return {}
        try:
            fd = open_untrusted(parts[-1], _STORE_MAX, owners, dir_fd=fd_dir)
        except ReadError as exc:
            if exc.code == "permission_denied":
                lookup.denied.setdefault(base, "Podman")
            return {}
        finally:
            os.close(fd_dir)
        try:
            return _scan_store(fd, wanted, lookup.budget)
        except OSError:
            return {}
        finally:
            os.close(fd)

    def _lookup_user(self, lookup: _Pass, uid: int, ids: Set[str],
                     passwd: Optional[Dict[int, List[str]]]) -> None:
        """Rootless Podman and Docker of user uid, from that user's own home only."""
        owners = {uid, 0, os.geteuid()}
        for home in _homes_of(self.fs, uid, passwd):
            local = self.fs.path(home)
            missing = {cid for cid in ids if (uid, cid) not in lookup.found}
            for cid in sorted(missing):
                if not lookup.budget.left():
                    return
                entry = _from_docker_config(lookup.read(local, list(_ROOTLESS_DOCKER) + [cid, "config.v2.json"],
                                                        "rootless Docker", owners))
                if entry:
                    lookup.found[(uid, cid)] = entry
                    missing.discard(cid)
            if not missing:
                continue
            names = {x + "-containers" for x in _DRIVERS}
            for d in sorted(set(lookup.subdirs(local, _ROOTLESS_STORAGE, "rootless Podman", owners)) & names):
                found = self._scan(lookup, local, list(_ROOTLESS_STORAGE) + [d, "containers.json"], missing, owners)
                for cid, entry in found.items():
                    lookup.found[(uid, cid)] = entry
                    missing.discard(cid)
                if not missing:
                    break

    def _lookup_kubelet(self, lookup: _Pass, ids: Set[str], pods: Set[str]) -> None:
        """Container names from /var/log/containers link names, pod names and container
        log folders from /var/log/pods folder names; only those of the IDs and pods asked."""
        fs = self.fs
        if ids and lookup.budget.left():
            for name in lookup.names(fs.path("/var/log/containers"), "kubelet"):
                m = _K8S_LOG.match(name)
                if not m or m.group("id") not in ids:
                    continue
                key = (None, m.group("id"))
                entry = lookup.found.get(key) or ContainerEntry()
                lookup.found[key] = entry._replace(k8s_container=entry.k8s_container or m.group("container"),
                                            name=entry.name or m.group("container"))
        if not pods or not lookup.budget.left():
            return
        base = fs.path("/var/log/pods")
        for name in lookup.subdirs(base, [], "kubelet"):
            m = _POD_DIR.match(name)
            if m and m.group("uid") in pods:
                self._pods[m.group("uid")] = (m.group("ns"), m.group("pod"))
                self._pod_dirs[m.group("uid")] = sorted(lookup.subdirs(base, [name], "kubelet"))

    # -- per tick -----------------------------------------------------------------------

    def note_pod_members(self, infos: Iterable[PathInfo]) -> None:
        """This tick's application containers of each pod (sandboxes already left out)."""
        members: Dict[Tuple[Optional[int], str], set] = {}
        for info in infos:
            if info.kind == "container" and info.pod_uid and info.id:
                members.setdefault((info.user_uid, info.pod_uid), set()).add(info.id)
        self._pod_members = members

    def _only_container_name(self, info: PathInfo) -> Optional[str]:
        """The kubelet's log folders name a pod's containers but not their IDs: when the
        pod has exactly one application container and one log folder, they are the same."""
        if info.user_uid is not None:
            return None
        dirs = self._pod_dirs.get(info.pod_uid or "", [])
        members = self._pod_members.get((info.user_uid, info.pod_uid or ""), set())
        if len(dirs) == 1 and members == {info.id}:
            return dirs[0]
        return None

    def retain(self, live_ids: Iterable[str]) -> None:
        """Forget everything about containers and pods that are gone (bounded under churn)."""
        live = set(live_ids)
        self._pause = {k: v for k, v in self._pause.items() if k[1] in live}
        self._names = {k: v for k, v in self._names.items() if k[1] in live}
        self._tried = {k: v for k, v in self._tried.items() if k[1] in live}
        self._pods = {k: v for k, v in self._pods.items() if k in live}
        self._pod_dirs = {k: v for k, v in self._pod_dirs.items() if k in live}
        self._pods_tried = {k: v for k, v in self._pods_tried.items() if k in live}

    def _entry(self, info: PathInfo) -> Optional[ContainerEntry]:
        return self._names.get((info.user_uid, info.id or ""))

    def is_sandbox(self, info: PathInfo, folder_local: Optional[str] = None) -> bool:
        """A pod's sandbox ("pause") container: plumbing, not an application container.

        The runtime's state says so (CRI annotations, dockershim labels); without state,
        a container of a pod whose every process is named "pause" is one.
        """
        if info.kind != "container" or not info.id:
            return False
        entry = self._entry(info)
        if entry is not None and (entry.sandbox or entry.k8s_container):
            return entry.sandbox
        if info.pod_uid is None or folder_local is None:
            return False
        key = (info.user_uid, info.id)
        if key not in self._pause:
            self._pause[key] = self._all_pause(folder_local)
        return self._pause[key]

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

    def pod(self, info: PathInfo) -> Optional[Pod]:
        if not info.pod_uid:
            return None
        # The kubelet's folders name system pods only: a pod-like cgroup a user made in
        # their own subtree gets no name from them.
        ns_name = self._pods.get(info.pod_uid) if info.user_uid is None else None
        return {"uid": info.pod_uid, "name": ns_name[1] if ns_name else None,
                "namespace": ns_name[0] if ns_name else None, "qos": info.qos}

    def container(self, info: PathInfo) -> Optional[Container]:
        if info.kind != "container":
            return None
        cid = info.id or ""
        entry = self._entry(info) or ContainerEntry()
        is_hex = len(cid) == 64
        pod = self.pod(info)
        if pod is not None and entry.k8s_pod and pod["name"] is None:
            ns, name = entry.k8s_pod
            pod["namespace"], pod["name"] = ns, name
        name = entry.k8s_container if pod is not None else None
        if pod is not None and name is None:
            name = self._only_container_name(info)
        name = name or entry.name or (None if is_hex else cid)
        out: Container = {
            "runtime": info.runtime or entry.runtime,
            "id": cid,
            "short_id": cid[:12] if is_hex else None,
            "name": name,
            "image": entry.image,
            "labels": entry.labels,
            "pod": pod,
            "sandbox": False,
        }
        return out
