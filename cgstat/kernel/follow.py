"""The inotify follower: hierarchies walked once, then kept up to date from inotify events.

Reads inotify events (kernel/inotify.py) on every followed folder: a child made or removed
(IN_CREATE, IN_DELETE, IN_MOVED_*), a file written (IN_MODIFY: cgroup.subtree_control, the
limit files), the queue overflowing or the hierarchy unmounted (then `lost`: the rescans
walk everything again), and the listings of folders that appear or change. Delegated
subtrees are never watched (their owner could flood the queue); past the watch limit a
hierarchy is unfollowed and walked every tick. Folders that go are forgotten by the
descriptor cache (kernel/handles.py) at once.
"""

from __future__ import annotations

import errno
import os
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from cgstat.kernel import inotify
from cgstat.kernel.delegated import DELEGATED
from cgstat.kernel.cachekeys import SLOW
from cgstat.kernel.handles import KeptFiles
from cgstat.kernel.hierarchy import Hierarchy
from cgstat.kernel.inotify import Event, Inotify
from cgstat.kernel.tree import Folder
from cgstat.kernel.tree import Listing
from cgstat.kernel.walk import Walker, Watcher
from cgstat.text import decode_name, quote


class Followed(Watcher):
    """One hierarchy followed with inotify: its folders outside delegated subtrees."""

    __slots__ = ("h", "follower", "tree", "delegated", "ok", "changed", "rescan_at")

    def __init__(self, h: Hierarchy, follower: Follower):
        self.h = h
        self.follower = follower
        self.tree: Dict[str, Folder] = {}
        self.delegated: Dict[str, Tuple[str, int]] = {}  # user@UID.service path -> (local, inode)
        self.ok = True  # False: walked every tick (watch limit reached)
        self.changed = True
        self.rescan_at = 0.0  # when to walk it again (the safety net, kernel/rescan.py)

    def watch(self, local: str) -> Optional[int]:
        return self.follower.watch(self, local)

    def unwatch(self, wd: int) -> None:
        self.follower.inotify.rm_watch(wd)

    def watched(self, wd: int, folder: Folder) -> None:
        self.follower.wd[wd] = folder

    def delegated_root(self, path: str, local: str, inode: int) -> None:
        self.delegated[path] = (local, inode)


class Follower:
    """The followed hierarchies, their watches, and the events applied to their trees.

    Raises OSError when inotify can't be used (the caller then walks every tick).
    """

    def __init__(self, walker: Walker, hierarchies: Iterable[Hierarchy], kept: KeptFiles,
                 warn: Optional[Callable[[str, str], None]]):
        self.walker = walker
        self.kept = kept
        self.warn = warn
        self.followed: Dict[str, Followed] = {h.name: Followed(h, self) for h in hierarchies}
        self.inotify = Inotify()
        # watch -> the folder it was added for (its hierarchy and path; the tree holds the
        # folder as it is now)
        self.wd: Dict[int, Folder] = {}
        self.lost = True  # walk every followed hierarchy again (first tick, lost events)
        self.rescans = 0  # full walks of followed trees (first one included; kernel/rescan.py)

    def close(self) -> None:
        """Close the inotify descriptor and what is kept for the followed folders."""
        self.inotify.close()
        for f in self.followed.values():
            for folder in f.tree.values():
                self.kept.forget(folder)

    @property
    def following(self) -> List[Followed]:
        """The hierarchies still followed (the others are walked each tick)."""
        return [f for f in self.followed.values() if f.ok]

    def watch(self, f: Followed, local: str) -> Optional[int]:
        """Watch one folder: the watch, or None when it is gone or (f.ok False) past the
        watch limit. The caller maps the watch to the folder it then lists."""
        try:
            return self.inotify.add_watch(local)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            # ENOSPC (fs.inotify.max_user_watches) or anything else: walk it every tick.
            self._unfollow(f, f"cannot watch {quote(local)} ({os.strerror(exc.errno or 0)}): "
                              f"walking the {f.h.name} hierarchy every tick instead")
            return None

    def watches(self, f: Followed) -> List[int]:
        return [wd for wd, folder in self.wd.items() if folder.hierarchy is f.h]

    def _unfollow(self, f: Followed, why: str) -> None:
        f.ok = False
        for wd in self.watches(f):
            del self.wd[wd]
            self.inotify.rm_watch(wd)
        f.tree = {}
        f.delegated = {}
        if self.warn is not None:
            self.warn("inotify:" + f.h.name, why)

    def apply(self, events: List[Event]) -> None:
        """Apply queued inotify events to the followed trees."""
        removed: Dict[Followed, List[str]] = {}
        for wd, mask, raw in events:
            if mask & (inotify.IN_Q_OVERFLOW | inotify.IN_UNMOUNT):
                self.lost = True  # events were lost: walk everything again
                continue
            hit = self.wd.get(wd)
            if hit is None:
                continue
            if mask & inotify.IN_IGNORED:
                del self.wd[wd]
                continue
            f = self.followed[hit.hierarchy.name]
            path = hit.path
            parent = f.tree.get(path)
            if parent is None:
                continue
            if mask & (inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF):
                if path == "/":
                    self.lost = True
                continue  # the parent's IN_DELETE / IN_MOVED_FROM says the rest
            name = os.fsdecode(raw)
            if not mask & inotify.IN_ISDIR:
                if mask & inotify.IN_MODIFY:
                    if name == "cgroup.subtree_control":
                        self._refresh_children_files(f, path)
                    elif name in SLOW:
                        self.kept.modified(parent, name)
                        self.kept.written.add(path)
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
                if DELEGATED.match(text):
                    f.delegated[child] = (child_local, ino)
                else:
                    self.walker.walk_into(f.h, [(child, child_local, ino, None)], f.tree, None, f)
                    if not f.ok:
                        return
                f.changed = True
        for f, paths in removed.items():
            self._drop_subtrees(f, paths)

    def _drop_subtrees(self, f: Followed, paths: List[str]) -> None:
        if not paths:
            return
        exact = set(paths)
        prefixes = tuple(p + "/" for p in paths)
        gone = [p for p in f.tree if p in exact or p.startswith(prefixes)]
        for p in gone:
            self.kept.forget(f.tree.pop(p))
        for p in [d for d in f.delegated if d in exact or d.startswith(prefixes)]:
            del f.delegated[p]
        f.changed = True

    def _refresh_children_files(self, f: Followed, path: str) -> None:
        """cgroup.subtree_control was written: the children's files may have changed (v2)."""
        prefix = "/" if path == "/" else path + "/"
        for p, folder in list(f.tree.items()):
            if p != "/" and p.startswith(prefix) and "/" not in p[len(prefix):]:
                try:
                    with os.scandir(folder.local) as it:
                        listing = Listing(it)
                        for _ in listing.dirs():
                            pass
                except OSError:
                    continue
                files = self.walker.files(listing.files)
                if files != folder.files:
                    f.tree[p] = Folder(folder.hierarchy, folder.path, folder.local, folder.inode, files,
                                       folder.watched)
                    f.changed = True
