r"""Find every cgroup of the host, and join one workload's folders across v1 hierarchies.

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

Names: a cgroup name is bytes (the kernel takes any byte but '/' and NUL). Folders are
read through their real local path; the cgroup path in records and joins is printable
text (text.decode_name: `\xNN` for bytes that are not UTF-8), and /proc/<pid>/cgroup is
decoded the same way, so the two still join.

Volume: a user's delegated subtree (`user@<UID>.service`) may hold any number of cgroups;
only `max_user_cgroups` folders below it are walked per hierarchy (see Discoverer).
"""

from __future__ import annotations

import errno
import heapq
import os
import re
import time
import weakref
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

from cgstat.kernel import handles, inotify
from cgstat.kernel.handles import KEPT, is_cgroupfs
from cgstat.kernel.hierarchy import Hierarchy, Layout
from cgstat.kernel.hostfs import HostFS, ReadError
from cgstat.kernel.procs import member_pids, pid_paths, recheck_after_s
from cgstat.kernel.inotify import Inotify
from cgstat.kernel.tree import Cgroup, Folder
from cgstat.text import decode_name, quote

_MEMBERS_TRIED = 3

# systemd runs each user's manager as user@<UID>.service and delegates that subtree to the
# user (systemd.resource-control(5) Delegate=; "Control Group APIs and Delegation"): the
# user may create any number of cgroups below it. The first such path component is the
# delegation point (a folder of that name deeper down was made by the user).
_DELEGATED = re.compile(r"^user@[0-9]+\.service$")
MAX_USER_CGROUPS = 1000  # folders walked below one user@<UID>.service, per hierarchy
RESCAN_S = 60.0  # a full walk of followed hierarchies at least this often


class _Followed:
    """One hierarchy followed with inotify: its folders outside delegated subtrees."""

    __slots__ = ("h", "tree", "delegated", "ok", "changed", "rescan_at")

    def __init__(self, h: Hierarchy):
        self.h = h
        self.tree: Dict[str, Folder] = {}
        self.delegated: Dict[str, Tuple[str, int]] = {}  # user@UID.service path -> (local, inode)
        self.ok = True  # False: walked every tick (watch limit reached)
        self.changed = True
        self.rescan_at = 0.0  # when to walk it again (the safety net)


def _close_all(ino: Inotify, follow: Dict[str, _Followed]) -> None:
    """What a Discoverer holds, released when it is closed or collected."""
    ino.close()
    for f in follow.values():
        for folder in f.tree.values():
            KEPT.forget(folder)


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
    """Finds the hierarchies' folders each tick and keeps the process-derived joins.

    On a live cgroup filesystem the folders are walked once and then followed with inotify
    (kernel/inotify.py): a tick only applies the events queued since the last one (a child
    made or removed, a file written). A full walk runs again on IN_Q_OVERFLOW (events were
    lost), on IN_UNMOUNT, and every `rescan_s` seconds as a safety net (each hierarchy on
    its own turn, the turns spread over `rescan_s`). Where inotify can't
    be used (a recorded tree, no inotify, fs.inotify.max_user_watches reached) a hierarchy
    is walked every tick, as before. The joined cgroups are recomputed only when a tree
    changed or an empty cgroup, asked again for members when due, has some.

    `max_user_cgroups` bounds the folders walked below each user's delegated subtree
    (the first `user@<UID>.service` path component; the folder itself is not counted), per
    hierarchy and tick: a user may create tens of thousands of cgroups there, each of
    which would cost memory, time and a record. Once reached, the walk admits no more
    folders of that subtree; the folders it saw and left out are counted in `left_out`
    and, when `warn` is given, said through warn(key, message) (keys "capped:<subtree>";
    pass Warner.once). Which folders are kept does not depend on listing order: each
    listing admits its names in sorted order, the walk goes depth first in that order.
    None: no bound. Delegated subtrees are never watched (their owner could flood the
    queue): they are walked, capped, every tick.
    """

    def __init__(self, fs: HostFS, layout: Layout, max_user_cgroups: Optional[int] = MAX_USER_CGROUPS,
                 warn: Optional[Callable[[str, str], None]] = None, follow: Optional[bool] = None,
                 rescan_s: float = RESCAN_S):
        self.fs = fs
        self.layout = layout
        self.max_user_cgroups = max_user_cgroups
        self.warn = warn
        self.rescan_s = rescan_s
        self._manifest = load_inode_manifest(fs)
        self._cgroup_top = fs.path("/sys/fs/cgroup")
        # (anchor inode, hierarchy name) -> (target path, target inode)
        self._joins: Dict[Tuple[int, str], Tuple[str, int]] = {}
        # anchor inode -> (when to ask it for members again, its folder): cgroups found empty
        self._memberless: Dict[int, Tuple[float, Folder]] = {}
        self._tick_members: Dict[int, Optional[Dict[str, str]]] = {}
        # Folders of one hierarchy mostly have the same file names: one frozenset (and
        # one str per name) for all of them, instead of ~40 new str per folder per tick.
        self._file_sets: Dict[FrozenSet[str], FrozenSet[str]] = {}
        # Delegated subtree path -> folders seen and not walked in the last join (the
        # largest count over hierarchies).
        self.left_out: Dict[str, int] = {}
        # -- following (inotify) --
        if follow is None:
            follow = os.environ.get("CGSTAT_INOTIFY", "1") != "0"
        self._inotify: Optional[Inotify] = None
        self._follow: Dict[str, _Followed] = {}  # hierarchy name -> followed tree
        # watch -> the folder it was added for (its hierarchy and path; the tree holds the
        # folder as it is now)
        self._wd: Dict[int, Folder] = {}
        self._rescan_all = True  # walk every followed hierarchy (first tick, lost events)
        self._result: Optional[List[Cgroup]] = None  # the last join, while nothing changed
        self._result_key: Optional[Dict[str, Dict[str, Folder]]] = None  # delegated trees it used
        self._recheck_at = 0.0  # when an empty cgroup is to be asked again
        self.rescans = 0  # full walks of followed trees (first one included)
        if follow:
            try:
                for h in layout.hierarchies:
                    if is_cgroupfs(h.mount_dir):
                        self._follow[h.name] = _Followed(h)
                if self._follow:
                    self._inotify = Inotify()
                    self._finalizer = weakref.finalize(self, _close_all, self._inotify, self._follow)
            except OSError:
                self._follow = {}
                self._inotify = None

    def close(self) -> None:
        """Stop following (close the inotify descriptor) and close kept file descriptors."""
        fin = getattr(self, "_finalizer", None)
        if fin is not None:
            fin()
        self._inotify = None
        self._follow = {}
        self._wd = {}
        self._result = None

    @property
    def following(self) -> List[str]:
        """Names of the hierarchies followed by inotify (the others are walked each tick)."""
        return [name for name, f in self._follow.items() if f.ok]

    # -- walking ---------------------------------------------------------------------

    def _inode(self, local: str, fallback: int) -> int:
        if self._manifest:
            rel = local[len(self._cgroup_top):] or "/"
            return self._manifest.get(rel, fallback)
        return fallback

    def _files(self, names: List[str]) -> FrozenSet[str]:
        key = frozenset(names)
        shared = self._file_sets.get(key)
        if shared is None:
            if len(self._file_sets) >= 256:  # hostile file sets can't grow this for ever
                self._file_sets.clear()
            self._file_sets[key] = shared = key
        return shared

    def walk(self, h: Hierarchy, left_out: Optional[Dict[str, int]] = None) -> Dict[str, Folder]:
        """Every cgroup folder of `h`, by printable path (reads the folders' listings).

        Folders below a delegated subtree beyond `max_user_cgroups` are left out and
        counted into `left_out` (subtree path -> count).
        """
        out: Dict[str, Folder] = {}
        try:
            root_ino = os.stat(h.mount_dir).st_ino
        except OSError:
            return out
        self._walk(h, [("/", h.mount_dir, root_ino, None)], out, left_out, None)
        return out

    def _walk(self, h: Hierarchy, stack: List[Tuple[str, str, int, Optional[str]]], out: Dict[str, Folder],
              left_out: Optional[Dict[str, int]], follow: Optional["_Followed"],
              reuse: Optional[Dict[str, Folder]] = None) -> None:
        """Walk from the folders on `stack` into `out`. With `follow`, each folder outside
        a delegated subtree is watched before it is listed (so no child made meanwhile is
        missed), and delegated subtrees are not entered: their roots go to follow.delegated.
        `reuse`: folders of an earlier walk, kept where nothing about them changed (a rescan
        then allocates nothing for an unchanged tree)."""
        cap = self.max_user_cgroups
        used: Dict[str, int] = {}  # delegated subtree -> folders admitted so far
        # (printable path, local path, inode, delegated subtree above it or None)
        while stack:
            path, local, ino, subtree = stack.pop()
            wd = None
            if follow is not None and subtree is None:
                wd = self._watch(follow, local)
                if wd is None:
                    if not follow.ok:
                        return
                    continue  # gone meanwhile
            budget = None if subtree is None or cap is None else max(0, cap - used.get(subtree, 0))
            try:
                with os.scandir(local) as it:
                    listing = _Listing(it)
                    if budget is None or subtree is None:
                        children = list(listing.dirs())
                    else:
                        # The `budget` smallest names, holding no more than that many
                        # entries however long the listing is.
                        dirs = listing.dirs()
                        children = heapq.nsmallest(budget, dirs) if budget else []
                        for _ in dirs:  # the rest: file names and a count
                            pass
                        used[subtree] = used.get(subtree, 0) + len(children)
                        dropped = listing.dirs_seen - len(children)
                        if dropped and left_out is not None:
                            left_out[subtree] = left_out.get(subtree, 0) + dropped
            except OSError:
                # Removed while walking (ENOENT) or unreadable: not a cgroup this tick.
                if wd is not None and self._inotify is not None:
                    self._inotify.rm_watch(wd)
                continue
            inode = self._inode(local, ino)
            files = self._files(listing.files)
            folder = reuse.get(path) if reuse is not None else None
            if (folder is None or folder.inode != inode or folder.files is not files
                    or folder.watched != (wd is not None) or folder.local != local):
                folder = Folder(h, path, local, inode, files, wd is not None)
            out[folder.path] = folder
            if wd is not None:
                self._wd[wd] = folder
            if budget is not None:
                children.reverse()  # popped smallest first: a stable choice
            for name, child_local, child_ino in children:
                text = decode_name(name)
                child = path + text if path == "/" else path + "/" + text
                below = subtree
                if below is None and _DELEGATED.match(text):
                    below = child
                    if follow is not None:
                        follow.delegated[child] = (child_local, child_ino)
                        continue
                stack.append((child, child_local, child_ino, below))

    # -- following -------------------------------------------------------------------

    def _watch(self, f: "_Followed", local: str) -> Optional[int]:
        """Watch one folder: the watch, or None when it is gone or (f.ok False) past the
        watch limit. The caller maps the watch to the folder it then lists."""
        assert self._inotify is not None
        try:
            return self._inotify.add_watch(local)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            # ENOSPC (fs.inotify.max_user_watches) or anything else: walk it every tick.
            self._unfollow(f, f"cannot watch {quote(local)} ({os.strerror(exc.errno or 0)}): "
                              f"walking the {f.h.name} hierarchy every tick instead")
            return None

    def _watches(self, f: "_Followed") -> List[int]:
        return [wd for wd, folder in self._wd.items() if folder.hierarchy is f.h]

    def _unfollow(self, f: "_Followed", why: str) -> None:
        f.ok = False
        for wd in self._watches(f):
            del self._wd[wd]
            if self._inotify is not None:
                self._inotify.rm_watch(wd)
        f.tree = {}
        f.delegated = {}
        if self.warn is not None:
            self.warn("inotify:" + f.h.name, why)

    def _rescan(self, f: "_Followed") -> None:
        """Walk a followed hierarchy from its mount point again, watching every folder."""
        self.rescans += 1
        old = f.tree
        old_wds = self._watches(f)
        f.tree, f.delegated = {}, {}
        try:
            root_ino = os.stat(f.h.mount_dir).st_ino
        except OSError:
            root_ino = None
        if root_ino is not None:
            self._walk(f.h, [("/", f.h.mount_dir, root_ino, None)], f.tree, None, f, old)
        if not f.ok:
            return
        # inotify_add_watch of a watched inode gives its watch again, so the walk mapped
        # every watch still in use to a folder of the new tree; the others are stale.
        tree = f.tree
        for wd in old_wds:
            folder = self._wd.get(wd)
            if folder is not None and tree.get(folder.path) is not folder:
                del self._wd[wd]
                if self._inotify is not None:
                    self._inotify.rm_watch(wd)
        f.changed = True

    def _apply(self, events) -> None:
        """Apply queued inotify events to the followed trees."""
        removed: Dict[_Followed, List[str]] = {}
        for wd, mask, raw in events:
            if mask & (inotify.IN_Q_OVERFLOW | inotify.IN_UNMOUNT):
                self._rescan_all = True  # events were lost: walk everything again
                continue
            hit = self._wd.get(wd)
            if hit is None:
                continue
            if mask & inotify.IN_IGNORED:
                del self._wd[wd]
                continue
            f = self._follow[hit.hierarchy.name]
            path = hit.path
            parent = f.tree.get(path)
            if parent is None:
                continue
            if mask & (inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF):
                if path == "/":
                    self._rescan_all = True
                continue  # the parent's IN_DELETE / IN_MOVED_FROM says the rest
            name = os.fsdecode(raw)
            if not mask & inotify.IN_ISDIR:
                if mask & inotify.IN_MODIFY:
                    if name == "cgroup.subtree_control":
                        self._refresh_children_files(f, path)
                    elif name in handles.SLOW_FILES:
                        KEPT.modified(parent, name)
                continue
            text = decode_name(name)
            child = path + text if path == "/" else path + "/" + text
            if mask & (inotify.IN_DELETE | inotify.IN_MOVED_FROM | inotify.IN_CREATE | inotify.IN_MOVED_TO):
                # A made child may already be known (the walk listed it after watching
                # its parent): walk it again, it is cheap and the inode decides.
                removed.setdefault(f, []).append(child)
            if mask & (inotify.IN_CREATE | inotify.IN_MOVED_TO):
                self._drop_subtrees(f, removed.pop(f))
                child_local = parent.local + "/" + name
                try:
                    ino = os.stat(child_local, follow_symlinks=False).st_ino
                except OSError:
                    continue  # removed again already
                if _DELEGATED.match(text):
                    f.delegated[child] = (child_local, ino)
                else:
                    self._walk(f.h, [(child, child_local, ino, None)], f.tree, None, f)
                    if not f.ok:
                        return
                f.changed = True
        for f, paths in removed.items():
            self._drop_subtrees(f, paths)

    def _drop_subtrees(self, f: "_Followed", paths: List[str]) -> None:
        if not paths:
            return
        exact = set(paths)
        prefixes = tuple(p + "/" for p in paths)
        gone = [p for p in f.tree if p in exact or p.startswith(prefixes)]
        for p in gone:
            KEPT.forget(f.tree.pop(p))
        for p in [d for d in f.delegated if d in exact or d.startswith(prefixes)]:
            del f.delegated[p]
        f.changed = True

    def _refresh_children_files(self, f: "_Followed", path: str) -> None:
        """cgroup.subtree_control was written: the children's files may have changed (v2)."""
        prefix = "/" if path == "/" else path + "/"
        for p, folder in list(f.tree.items()):
            if p != "/" and p.startswith(prefix) and "/" not in p[len(prefix):]:
                try:
                    with os.scandir(folder.local) as it:
                        listing = _Listing(it)
                        for _ in listing.dirs():
                            pass
                except OSError:
                    continue
                files = self._files(listing.files)
                if files != folder.files:
                    f.tree[p] = Folder(folder.hierarchy, folder.path, folder.local, folder.inode, files,
                                       folder.watched)
                    f.changed = True

    def _trees(self, left_out: Dict[str, int]) -> Tuple[Dict[str, Dict[str, Folder]], bool]:
        """This tick's folders of every hierarchy, and whether any changed since the last."""
        changed = False
        following = [f for f in self._follow.values() if f.ok]
        if following and self._inotify is not None:
            now = time.monotonic()
            if not self._rescan_all:
                self._apply(self._inotify.events())
                following = [f for f in following if f.ok]  # a watch limit reached meanwhile
            if self._rescan_all:  # first tick, or events were lost (IN_Q_OVERFLOW)
                self._rescan_all = False
                self._inotify.events()  # what they say, the walk sees
                KEPT.drop_values()
                for i, f in enumerate(following):
                    self._rescan(f)
                    # The periodic rescans of the hierarchies are spread over rescan_s (a
                    # sixth of it apart on a hybrid host): one walk of them all at 1,000
                    # cgroups is ~150 ms and the next tick's limit files ~50 ms more, on one tick.
                    f.rescan_at = now + self.rescan_s * (i + 1) / len(following)
            else:
                for f in following:
                    if now >= f.rescan_at:
                        KEPT.drop_values(f.h.mount_dir)  # its limit files are read again
                        self._rescan(f)
                        f.rescan_at = now + self.rescan_s
        trees: Dict[str, Dict[str, Folder]] = {}
        delegated_trees: Dict[str, Dict[str, Folder]] = {}
        for h in self.layout.hierarchies:
            counts: Dict[str, int] = {}
            followed = self._follow.get(h.name)
            if followed is not None and followed.ok:
                f = followed
                tree = f.tree
                if f.delegated:
                    below: Dict[str, Folder] = {}
                    for path in sorted(f.delegated):
                        local, ino = f.delegated[path]
                        self._walk(h, [(path, local, ino, path)], below, counts, None)
                    delegated_trees[h.name] = below
                    tree = dict(tree)
                    tree.update(below)
                if f.changed:
                    changed = True
                    f.changed = False
            else:
                tree = self.walk(h, counts)
                delegated_trees[h.name] = tree
            trees[h.name] = tree
            for subtree, n in counts.items():
                left_out[subtree] = max(n, left_out.get(subtree, 0))
        if delegated_trees != self._result_key:
            changed = True
        self._result_key = delegated_trees
        return trees, changed

    # -- joining ---------------------------------------------------------------------

    def _member_paths(self, folder: Folder) -> Optional[Dict[str, str]]:
        """Every hierarchy's path of one member process of `folder` (/proc/<pid>/cgroup).

        Read once per cgroup per tick, however many hierarchies need it. A cgroup found
        empty is not asked again for a few seconds (runtimes populate a new cgroup within
        milliseconds; a slice stays empty for ever).
        """
        if folder.inode in self._tick_members:
            return self._tick_members[folder.inode]
        empty = self._memberless.get(folder.inode)
        if empty is not None and time.monotonic() < empty[0]:
            return None
        found: Optional[Dict[str, str]] = None
        try:
            pids = member_pids(folder.local)
        except (ReadError, ValueError):
            pids = []
        for pid in pids[:_MEMBERS_TRIED]:
            try:
                found = pid_paths(self.fs, self.layout, pid)
            except (ReadError, ValueError):
                continue  # exited meanwhile: try the next member
            break
        if found is None:
            self._memberless[folder.inode] = (time.monotonic() + recheck_after_s(folder.inode), folder)
        self._tick_members[folder.inode] = found
        return found

    def join(self) -> List[Cgroup]:
        """All cgroups of this tick, anchor paths first, then folders joined to none."""
        self._tick_members = {}
        left_out: Dict[str, int] = {}
        trees, changed = self._trees(left_out)
        self.left_out = left_out
        if self.warn is not None:
            for subtree, n in sorted(left_out.items()):
                self.warn("capped:" + subtree, capped_message(subtree, n, self.max_user_cgroups or 0))
        if not changed and self._result is not None and (
                time.monotonic() < self._recheck_at or self._still_memberless()):
            return list(self._result)
        result = self._join_trees(trees)
        self._result = result
        self._recheck_at = self._next_recheck()
        # Close what is kept for folders gone from the trees (also when walking every tick).
        KEPT.retain({h.mount_dir: trees[h.name] for h in self.layout.hierarchies})
        return list(result)

    def _next_recheck(self) -> float:
        return min((due for due, _ in self._memberless.values()), default=float("inf"))

    def _still_memberless(self) -> bool:
        """Ask the empty cgroups that are due whether they have members now, without a
        rejoin: True when every one is still empty (a rejoin would give the same cgroups;
        they are asked again later), False when one has members (rejoin now). With the
        delays spread (recheck_after_s) a tick asks a few, where a rejoin of 1,000 empty
        cgroups costs ~20 ms."""
        now = time.monotonic()
        memberless = self._memberless
        for inode, (due, folder) in list(memberless.items()):
            if now < due:
                continue
            try:
                if member_pids(folder.local):
                    return False
            except (ReadError, ValueError):
                return False  # gone or renamed (v1 allows it): the rejoin asks the tree's folder
            memberless[inode] = (now + recheck_after_s(inode), folder)
        self._recheck_at = self._next_recheck()
        return True

    def _join_trees(self, trees: Dict[str, Dict[str, Folder]]) -> List[Cgroup]:
        layout = self.layout
        anchor = layout.anchor
        anchor_tree = trees[anchor.name]
        others = [h for h in layout.hierarchies if h is not anchor]
        # The last join's cgroups, kept where their folders are the same: a rejoin (any
        # folder made or removed anywhere) then allocates little, and what readers derived
        # from a Cgroup (its plan, its inodes) stays.
        previous = {cg.path: cg for cg in self._result or ()}

        def cgroup(path: str, folders: Tuple[Folder, ...]) -> Cgroup:
            old = previous.get(path)
            if old is None or len(old.folders) != len(folders) or any(
                    a is not b for a, b in zip(old.folders, folders)):
                return Cgroup(path, folders)
            return old

        if not others:
            return [cgroup(p, (f,)) for p, f in sorted(anchor_tree.items())]

        # hierarchy name -> anchor path -> its folder there
        found: Dict[str, Dict[str, Folder]] = {anchor.name: anchor_tree}
        claimed: Dict[str, Set[str]] = {}
        live_keys: Set[Tuple[int, str]] = set()
        parent_of = {p: p.rsplit("/", 1)[0] or "/" for p in anchor_tree if p != "/"}
        # Deepest first, so that rule 2 can look at joined descendants.
        order = sorted(anchor_tree, key=lambda p: (-p.count("/"), p))
        target_fn = self._target
        for h in others:
            tree = trees[h.name]
            joined: Dict[str, Folder] = {}
            taken: Set[str] = set()
            # anchor path -> H parents of its children's targets (for rule 2)
            child_parents: Dict[str, List[str]] = {}
            for path in order:
                target = target_fn(anchor_tree[path], h, tree, child_parents.get(path), live_keys)
                if target is None:
                    continue
                joined[path] = target
                taken.add(target.path)
                if path != "/":
                    parent = parent_of[path]
                    up = child_parents.get(parent)
                    if up is None:
                        up = child_parents[parent] = []
                    up.append(target.path.rsplit("/", 1)[0] or "/")
            # Rule 2, downwards: a cgroup still without a folder in H whose parent is joined
            # to another path there takes the folder of its own name below that one.
            for path in reversed(order):
                if path == "/" or path in joined:
                    continue
                parent = parent_of[path]
                above = joined.get(parent)
                if above is None or above.path == parent:
                    continue
                candidate = tree.get(above.path.rstrip("/") + "/" + _leaf(path))
                if candidate is not None and candidate.path not in taken:
                    joined[path] = candidate
                    taken.add(candidate.path)
            found[h.name] = joined
            claimed[h.name] = taken
        # Drop what we cached about cgroups that are gone.
        self._joins = {k: v for k, v in self._joins.items() if k in live_keys}
        live_inodes = {f.inode for f in anchor_tree.values()}
        self._memberless = {k: v for k, v in self._memberless.items() if k in live_inodes}
        self._tick_members = {}

        result = []
        columns = [found[h.name] for h in layout.hierarchies]
        for path in sorted(anchor_tree):
            folders = tuple([f for f in [c.get(path) for c in columns] if f is not None])
            result.append(cgroup(path, folders))
        # Folders of other hierarchies that joined no anchor cgroup: their own records.
        leftovers: Dict[str, List[Folder]] = {}
        for h in others:
            taken = claimed[h.name]
            for path, folder in trees[h.name].items():
                if path in taken or path in anchor_tree:
                    continue
                leftovers.setdefault(path, []).append(folder)
        for path in sorted(leftovers):
            result.append(cgroup(path, tuple(leftovers[path])))
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


def capped_message(subtree: str, left_out: int, cap: int) -> str:
    """The warning for a delegated subtree whose folders were not all walked."""
    return (f"{quote(subtree)} holds more than {cap} cgroups: {left_out} of them (and "
            f"what lies below those) are left out of every tick (--max-user-cgroups)")


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]


class _Listing:
    """One folder's listing, read once: the names of its files, and its sub-folders as an
    iterator, counted as they go by."""

    def __init__(self, it):
        self.files: List[str] = []
        self.dirs_seen = 0
        self._it = it

    def dirs(self) -> Iterator[Tuple[str, str, int]]:
        """(name, local path, inode) of each sub-folder; symbolic links are never
        followed (a cgroup filesystem has none; a host root may)."""
        for entry in self._it:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                self.dirs_seen += 1
                yield entry.name, entry.path, entry.inode()
            else:
                self.files.append(entry.name)
