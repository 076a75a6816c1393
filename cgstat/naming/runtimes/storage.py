"""containers/storage (Podman's store, shared with CRI-O): containers.json, searched by ID.

Reads <graph root>/<driver>-containers/containers.json: /var/lib/containers/storage for
rootful Podman, ~/.local/share/containers/storage of the one user whose subtree holds the
cgroup for rootless Podman. The file can be huge and is written by users: it is scanned in
bounded chunks for the wanted IDs and never parsed whole.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Collection, Dict, List, Optional, Set, Tuple

import orjson

from cgstat.kernel.hostfs import ReadError, open_dir_under, open_untrusted
from cgstat.naming.runtimes.entry import ContainerEntry
from cgstat.naming.runtimes.trust import Budget, LookupPass

if TYPE_CHECKING:
    from cgstat.naming.runtimes.runtime import Pass

STORAGE = "/var/lib/containers/storage"
ROOTLESS_STORAGE = (".local", "share", "containers", "storage")  # below a user's home
# containers/storage keeps a store's containers in <graph root>/<driver>-containers with
# the driver names graphdriver registers (drivers/*: overlay and its alias overlay2, vfs,
# btrfs, zfs, aufs, devicemapper); fuse-overlayfs is overlay's mount program, not a name.
DRIVERS = ("overlay", "overlay2", "vfs", "btrfs", "zfs", "aufs", "devicemapper")
DRIVER_FOLDERS = frozenset(x + "-containers" for x in DRIVERS)
STORE_MAX = 64 * 1024 * 1024  # containers.json: scanned, never held whole
SCAN_CHUNK = 1024 * 1024
_OBJ_BACK = 64 * 1024  # how far before an ID's hit its object may start
_OBJ_MAX = 256 * 1024  # the largest containers.json entry decoded
_OBJ_TRIES = 16  # '{' candidates tried before an ID hit


def system_store(ctx: Pass) -> Tuple[str, List[str]]:
    """The host's store (local path) and its driver folders (listed once a pass: CRI-O and
    rootful Podman share it)."""
    store = ctx.fs.path(STORAGE)
    return store, driver_folders(ctx.subdirs(store, (), "Podman and CRI-O"))


def driver_folders(listing: List[str]) -> List[str]:
    """The storage-driver folders of a graph root's listing (only those are read)."""
    return [d for d in listing if d in DRIVER_FOLDERS]


def entry_from_item(item: Any) -> Optional[ContainerEntry]:
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
    # a container made from a root folder (podman run --rootfs) has "image-name": ""
    image = meta.get("image-name") if isinstance(meta.get("image-name"), str) and meta["image-name"] else None
    # CRI-O keeps its containers in the same store: its metadata names the pod.
    runtime = "cri-o" if "pod-name" in meta else "podman"
    return ContainerEntry(runtime=runtime, name=name if isinstance(name, str) else None, image=image)


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


def scan_store(fd: int, wanted: Set[str], budget: Budget) -> Dict[str, ContainerEntry]:
    """Entries of an open containers.json for the wanted IDs, read in bounded chunks, so
    memory stays flat whatever the file's size (docs/security.md).

    Each wanted ID is searched as the quoted string "<id>" (Go's encoding/json writes
    `"id":"<id>"`; whitespace is allowed), and only the object around a hit is decoded.
    """
    found: Dict[str, ContainerEntry] = {}
    needles = {cid: b'"' + cid.encode() + b'"' for cid in wanted}
    overlap = 65  # one byte short of a needle: a hit is never seen twice
    offset, tail = 0, b""
    while len(found) < len(needles) and offset < STORE_MAX and budget.left():
        chunk = os.pread(fd, SCAN_CHUNK, offset)
        if not chunk:
            break
        buf, base = tail + chunk, offset - len(tail)
        for cid, needle in needles.items():
            at = 0 if cid not in found else -1
            while at >= 0 and budget.left():
                at = buf.find(needle, at)
                if at < 0:
                    break
                item = entry_from_item(_object_around(fd, base + at, cid))
                if item is not None:
                    found[cid] = item
                    break
                at += 1
        tail = buf[-overlap:]
        offset += len(chunk)
    return found


def scan(lookup: LookupPass, base: str, parts: List[str], wanted: Set[str],
         owners: Optional[Collection[int]]) -> Dict[str, ContainerEntry]:
    """scan_store of the containers.json at base/parts (local path; no link below base,
    owned by one of `owners` when given); {} when absent or refused."""
    try:
        fd_dir = open_dir_under(base, parts[:-1], owners)
    except ReadError as exc:
        lookup.refused(base, "Podman", exc)
        return {}
    try:
        fd = open_untrusted(parts[-1], STORE_MAX, owners, dir_fd=fd_dir)
    except ReadError as exc:
        lookup.refused(base, "Podman", exc)
        return {}
    finally:
        os.close(fd_dir)
    try:
        return scan_store(fd, wanted, lookup.budget)
    except OSError:
        return {}
    finally:
        os.close(fd)
