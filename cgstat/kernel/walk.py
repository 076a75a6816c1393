r"""The walk: every cgroup folder of a hierarchy, by printable path, from directory listings.

Reads the folders' listings (os.scandir, links never followed) below a hierarchy's mount
point, and a recorded tree's /inodes.txt. A cgroup name is bytes (the kernel takes any
byte but '/' and NUL): folders are read through their real local path, and named in
records by printable text (text.decode_name: `\xNN` for bytes that are not UTF-8).
Below a user's delegated subtree only what kernel/delegated.py admits is walked.
"""

from __future__ import annotations

import os
from sys import intern
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

from cgstat.kernel.delegated import DELEGATED, SubtreeCaps
from cgstat.kernel.hierarchy import Hierarchy
from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.tree import Folder, Listing
from cgstat.text import decode_name

# What the walk's stack holds: (printable path, local path, inode, delegated subtree above it or None)
Todo = Tuple[str, str, int, Optional[str]]


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


class Watcher:
    """What a followed walk asks of its follower (kernel/follow.py): a watch on each folder
    outside delegated subtrees before it is listed (so no child made meanwhile is missed),
    and the roots of delegated subtrees, which are not entered."""

    __slots__ = ()
    ok = True  # False: past the watch limit, the walk stops

    def watch(self, local: str) -> Optional[int]:
        """A watch of the folder, or None when it is gone or (ok False) can't be watched."""
        raise NotImplementedError

    def unwatch(self, wd: int) -> None:
        """The folder watched could not be listed after all."""
        raise NotImplementedError

    def watched(self, wd: int, folder: Folder) -> None:
        """The folder that watch `wd` was added for, as the walk made it."""
        raise NotImplementedError

    def delegated_root(self, path: str, local: str, inode: int) -> None:
        """A delegated subtree's root, left for the caller to walk (capped, unwatched)."""
        raise NotImplementedError


class Walker:
    """Walks hierarchies; keeps what every walk shares (the inode manifest, file-name sets).

    `max_user_cgroups` bounds the folders walked below each user's delegated subtree (the
    first `user@<UID>.service` path component; the folder itself is not counted), per
    hierarchy and walk; None: no bound. The walk goes depth first in sorted order there.
    """

    def __init__(self, fs: HostFS, max_user_cgroups: Optional[int]):
        self.max_user_cgroups = max_user_cgroups
        self._manifest = load_inode_manifest(fs)
        self._cgroup_top = fs.path("/sys/fs/cgroup")
        # Folders of one hierarchy mostly have the same file names: one frozenset (and
        # one str per name) for all of them, instead of ~40 new str per folder per tick.
        self._file_sets: Dict[FrozenSet[str], FrozenSet[str]] = {}

    def inode(self, local: str, fallback: int) -> int:
        """The folder's inode: a recorded tree's real one, else what the listing said."""
        if self._manifest:
            rel = local[len(self._cgroup_top):] or "/"
            return self._manifest.get(rel, fallback)
        return fallback

    def files(self, names: List[str]) -> FrozenSet[str]:
        """The file names of a folder, as a set shared with every folder holding the same."""
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
        self.walk_into(h, [("/", h.mount_dir, root_ino, None)], out, left_out)
        return out

    def walk_into(self, h: Hierarchy, stack: List[Todo], out: Dict[str, Folder],
                  left_out: Optional[Dict[str, int]], watcher: Optional[Watcher] = None,
                  reuse: Optional[Dict[str, Folder]] = None) -> None:
        """Walk from the folders on `stack` into `out`. With `watcher`, each folder outside
        a delegated subtree is watched before it is listed, and delegated subtrees are not
        entered (their roots go to watcher.delegated_root). `reuse`: folders of an earlier
        walk, kept where nothing about them changed (a rescan then allocates nothing for
        an unchanged tree)."""
        caps = SubtreeCaps(self.max_user_cgroups, left_out)
        capped = caps.cap is not None
        delegated = DELEGATED.match
        while stack:
            path, local, ino, subtree = stack.pop()
            wd = None
            if watcher is not None and subtree is None:
                wd = watcher.watch(local)
                if wd is None:
                    if not watcher.ok:
                        return
                    continue  # gone meanwhile
            try:
                with os.scandir(local) as it:
                    listing = Listing(it)
                    if subtree is None or not capped:
                        children = list(listing.dirs())
                    else:
                        children = caps.admit(subtree, listing)
            except OSError:
                # Removed while walking (ENOENT) or unreadable: not a cgroup this tick.
                if wd is not None and watcher is not None:
                    watcher.unwatch(wd)
                continue
            inode = self.inode(local, ino)
            files = self.files(listing.files)
            folder = reuse.get(path) if reuse is not None else None
            if (folder is None or folder.inode != inode or folder.files is not files
                    or folder.watched != (wd is not None) or folder.local != local):
                folder = Folder(h, path, local, inode, files, wd is not None)
            out[folder.path] = folder
            if wd is not None and watcher is not None:
                watcher.watched(wd, folder)
            for name, child_local, child_ino in children:
                text = decode_name(name)
                # one string for the path in every hierarchy (a hybrid host has it in up to
                # six): the folders, their cgroup and the kept files' trees share it
                child = intern(path + text if path == "/" else path + "/" + text)
                below = subtree
                if below is None and delegated(text):
                    below = child
                    if watcher is not None:
                        watcher.delegated_root(child, child_local, child_ino)
                        continue
                stack.append((child, child_local, child_ino, below))

