"""Find every cgroup of the host, and join one workload's folders across v1 hierarchies.

Reads: the cgroup folders of each hierarchy (a directory walk), `cgroup.procs` of cgroups
being joined, and /proc/<pid>/cgroup of one of their member processes.

On cgroup v2 a cgroup is one folder. On v1 (and hybrid) a workload has one folder per
hierarchy, and the paths need not match: a runtime given a relative cgroup path creates it
below its own cgroup in each hierarchy, so a container can be `cpu:/x/docker/<id>` but
`memory:/base/x/docker/<id>` (seen on the machines cgstat is developed on; `podman stats`
then reported CPU 0 % and netdata dropped the memory side as a duplicate). The kernel's
own answer to "where is this workload in hierarchy H" is /proc/<pid>/cgroup of a member
process, so that is what joins folders here, not equal path strings.

Rules, per cgroup P of the anchor hierarchy and other hierarchy H:
1. P has member processes: take H's path Q from a member's /proc/<pid>/cgroup. Q is used
   when it is P itself or ends in the same folder name (the same workload under another
   base); a member sitting in an unrelated or shared H cgroup (H not delegated) is not a
   join, since that cgroup's figures are not this workload's.
2. P has no members (a slice, a pod parent, an empty container cgroup): the H folder
   holding most of P's joined children, when it is P itself or has P's folder name (the
   same subtree under another base); else P itself when it exists; else, when P's parent
   is joined to another path in H, the folder of P's name below that one. Joins climb
   from the deepest cgroups up, then the last rule runs from the top down.
3. Otherwise P has no folder in H, and that controller's figures are null.
H folders joined to nothing are reported as cgroups of their own, keyed by their H path.
Joins found through processes are cached by (folder inode) so membership is read once per
new cgroup, not every tick.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Tuple

from cgstat import parse
from cgstat.hierarchy import Hierarchy, Layout
from cgstat.hostfs import HostFS, ReadError, read_text

_MEMBERS_TRIED = 3
_EMPTY_RECHECK_S = 10.0


@dataclass(frozen=True)
class Folder:
    """One cgroup folder in one hierarchy."""

    hierarchy: Hierarchy
    path: str  # cgroup path in that hierarchy, "/" for its root
    local: str  # where to read it
    inode: int  # the folder's inode: a recreated cgroup gets a new one
    files: FrozenSet[str]


@dataclass(frozen=True)
class Cgroup:
    """One workload: its name (path) and its folder in each hierarchy it has one in."""

    path: str
    folders: Tuple[Folder, ...]

    def folder(self, hierarchy: Hierarchy) -> Optional[Folder]:
        for f in self.folders:
            if f.hierarchy is hierarchy:
                return f
        return None

    @property
    def identity(self) -> Tuple[Tuple[str, int], ...]:
        return tuple((f.hierarchy.name, f.inode) for f in self.folders)

    @property
    def paths(self) -> Dict[str, str]:
        return {f.hierarchy.name: f.path for f in self.folders}


def load_inode_manifest(fs: HostFS) -> Dict[str, int]:
    """A recorded tree's `inodes.txt` ("<inode> <path under /sys/fs/cgroup>").

    Copies of cgroup folders get new inodes, so a recording carries the real ones. Only
    read for a host root other than "/"; absent on live hosts.
    """
    if fs.is_slash:
        return {}
    text = fs.read_optional("/inodes.txt")
    out: Dict[str, int] = {}
    for line in (text or "").splitlines():
        ino, sep, path = line.partition(" ")
        if sep and ino.isdigit() and path.startswith("/"):
            out[path] = int(ino)
    return out


class Discoverer:
    """Walks the hierarchies each tick and keeps the process-derived joins."""

    def __init__(self, fs: HostFS, layout: Layout):
        self.fs = fs
        self.layout = layout
        self._manifest = load_inode_manifest(fs)
        self._cgroup_top = fs.path("/sys/fs/cgroup")
        # (anchor inode, hierarchy name) -> (target path, target inode)
        self._joins: Dict[Tuple[int, str], Tuple[str, int]] = {}
        self._memberless: Dict[int, float] = {}  # anchor inode -> when found empty
        self._tick_members: Dict[int, Optional[Dict[str, str]]] = {}

    # -- walking ---------------------------------------------------------------------

    def _inode(self, local: str, fallback: int) -> int:
        if self._manifest:
            rel = local[len(self._cgroup_top):] or "/"
            return self._manifest.get(rel, fallback)
        return fallback

    def walk(self, h: Hierarchy) -> Dict[str, Folder]:
        out: Dict[str, Folder] = {}
        try:
            root_ino = os.stat(h.mount_dir).st_ino
        except OSError:
            return out
        stack = [("/", h.mount_dir, root_ino)]
        while stack:
            path, local, ino = stack.pop()
            files = []
            try:
                with os.scandir(local) as it:
                    for entry in it:
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                        except OSError:
                            continue
                        if is_dir:
                            child = path + entry.name if path == "/" else path + "/" + entry.name
                            stack.append((child, entry.path, entry.inode()))
                        else:
                            files.append(entry.name)
            except OSError:
                # Removed while walking (ENOENT) or unreadable: not a cgroup this tick.
                continue
            out[path] = Folder(h, path, local, self._inode(local, ino), frozenset(files))
        return out

    # -- joining ---------------------------------------------------------------------

    def _member_paths(self, folder: Folder) -> Optional[Dict[str, str]]:
        """Every hierarchy's path of one member process of `folder` (/proc/<pid>/cgroup).

        Read once per cgroup per tick, however many hierarchies need it. A cgroup found
        empty is not asked again for a few seconds (runtimes populate a new cgroup within
        milliseconds; a slice stays empty for ever).
        """
        if folder.inode in self._tick_members:
            return self._tick_members[folder.inode]
        checked = self._memberless.get(folder.inode)
        if checked is not None and time.monotonic() - checked < _EMPTY_RECHECK_S:
            return None
        found: Optional[Dict[str, str]] = None
        try:
            pids = parse.parse_pid_list(read_text(os.path.join(folder.local, "cgroup.procs")))
        except (ReadError, ValueError):
            pids = []
        for pid in pids[:_MEMBERS_TRIED]:
            try:
                lines = parse.parse_proc_cgroup(self.fs.read_text(f"/proc/{pid}/cgroup"))
            except (ReadError, ValueError):
                continue  # exited meanwhile: try the next member
            found = {}
            for controllers, path in lines:
                names = set(controllers.split(","))
                for h in self.layout.hierarchies:
                    if (h.version == 2 and controllers == "") or (h.version == 1 and h.controllers & names):
                        found[h.name] = path
            break
        if found is None:
            self._memberless[folder.inode] = time.monotonic()
        self._tick_members[folder.inode] = found
        return found

    def join(self) -> List[Cgroup]:
        """All cgroups of this tick, anchor paths first, then folders joined to none."""
        layout = self.layout
        anchor = layout.anchor
        self._tick_members = {}
        trees = {h.name: self.walk(h) for h in layout.hierarchies}
        anchor_tree = trees[anchor.name]
        others = [h for h in layout.hierarchies if h is not anchor]
        if not others:
            return [Cgroup(p, (f,)) for p, f in sorted(anchor_tree.items())]

        joined: Dict[str, Dict[str, Folder]] = {p: {anchor.name: f} for p, f in anchor_tree.items()}
        claimed = {h.name: set() for h in others}
        live_keys = set()
        # Deepest first, so that rule 2 can look at joined descendants.
        order = sorted(anchor_tree, key=lambda p: (-p.count("/"), p))
        for h in others:
            tree = trees[h.name]
            # anchor path -> H parents of its children's targets (for rule 2)
            child_parents: Dict[str, List[str]] = {}
            for path in order:
                folder = anchor_tree[path]
                target = self._target(folder, h, tree, child_parents.get(path), live_keys)
                if target is None:
                    continue
                joined[path][h.name] = target
                claimed[h.name].add(target.path)
                if path != "/":
                    parent = path.rsplit("/", 1)[0] or "/"
                    child_parents.setdefault(parent, []).append(target.path.rsplit("/", 1)[0] or "/")
            # Rule 2, downwards: a cgroup still without a folder in H whose parent is joined
            # to another path there takes the folder of its own name below that one.
            for path in reversed(order):
                if path == "/" or h.name in joined[path]:
                    continue
                parent = path.rsplit("/", 1)[0] or "/"
                above = joined[parent].get(h.name)
                if above is None or above.path == parent:
                    continue
                candidate = tree.get(above.path.rstrip("/") + "/" + _leaf(path))
                if candidate is not None and candidate.path not in claimed[h.name]:
                    joined[path][h.name] = candidate
                    claimed[h.name].add(candidate.path)
        # Drop what we cached about cgroups that are gone.
        self._joins = {k: v for k, v in self._joins.items() if k in live_keys}
        live_inodes = {f.inode for f in anchor_tree.values()}
        self._memberless = {k: v for k, v in self._memberless.items() if k in live_inodes}
        self._tick_members = {}

        result = []
        for path in sorted(joined):
            by_name = joined[path]
            result.append(Cgroup(path, tuple(by_name[h.name] for h in layout.hierarchies if h.name in by_name)))
        # Folders of other hierarchies that joined no anchor cgroup: their own records.
        leftovers: Dict[str, List[Folder]] = {}
        for h in others:
            for path, folder in trees[h.name].items():
                if path in claimed[h.name] or path in joined:
                    continue
                leftovers.setdefault(path, []).append(folder)
        for path in sorted(leftovers):
            result.append(Cgroup(path, tuple(leftovers[path])))
        return result

    def _target(self, folder: Folder, h: Hierarchy, tree: Dict[str, Folder],
                child_parents: Optional[List[str]], live_keys: set) -> Optional[Folder]:
        path = folder.path
        if path == "/":
            return tree.get("/")
        key = (folder.inode, h.name)
        cached = self._joins.get(key)
        if cached is not None:
            target = tree.get(cached[0])
            if target is not None and target.inode == cached[1]:
                live_keys.add(key)
                return target
        members = self._member_paths(folder)
        member = members.get(h.name) if members else None
        if member is not None:
            target = tree.get(member)
            if target is not None and (member == path or _leaf(member) == _leaf(path)):
                self._joins[key] = (target.path, target.inode)
                live_keys.add(key)
                return target
            if target is not None:
                return None  # members sit in another H cgroup: its figures aren't ours
        if child_parents:
            # Rule 2: where most joined children sit in H, if that is this cgroup there.
            best = max(sorted(set(child_parents)), key=child_parents.count)
            if best in tree and (best == path or _leaf(best) == _leaf(path)):
                return tree[best]
        return tree.get(path)


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]

