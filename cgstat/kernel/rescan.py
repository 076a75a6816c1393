"""The rescans: followed hierarchies walked again from their mount points, and when.

A followed tree is walked again on lost events (IN_Q_OVERFLOW, IN_UNMOUNT: all at once)
and, as a safety net, each hierarchy every `rescan_s` on its own turn, the turns spread
over `rescan_s` (one walk of them all on one tick was the slowest tick). With each rescan
the descriptor cache reads that hierarchy's limit files again. Reads the folders'
listings (kernel/walk.py), re-adding every watch.
"""

from __future__ import annotations

import os

from cgstat.kernel.follow import Followed, Follower

RESCAN_S = 60.0  # a full walk of followed hierarchies at least this often


def rescan(follower: Follower, f: Followed) -> None:
    """Walk a followed hierarchy from its mount point again, watching every folder."""
    follower.rescans += 1
    old = f.tree
    old_wds = follower.watches(f)
    f.tree, f.delegated = {}, {}
    try:
        root_ino = os.stat(f.h.mount_dir).st_ino
    except OSError:
        root_ino = None
    if root_ino is not None:
        follower.walker.walk_into(f.h, [("/", f.h.mount_dir, root_ino, None)], f.tree, None, f, old)
    if not f.ok:
        return
    # inotify_add_watch of a watched inode gives its watch again, so the walk mapped
    # every watch still in use to a folder of the new tree; the others are stale.
    tree = f.tree
    wds = follower.wd
    for wd in old_wds:
        folder = wds.get(wd)
        if folder is not None and tree.get(folder.path) is not folder:
            del wds[wd]
            follower.inotify.rm_watch(wd)
    f.changed = True


class Rescans:
    """When each followed hierarchy is walked again."""

    def __init__(self, rescan_s: float = RESCAN_S):
        self.rescan_s = rescan_s

    def run(self, follower: Follower, now: float) -> None:
        """Apply the queued events, then walk again what is due: every followed hierarchy
        after lost events (or on the first tick), else those whose turn has come."""
        if not follower.lost:
            follower.apply(follower.inotify.events())
        following = follower.following  # a watch limit reached meanwhile leaves some out
        if follower.lost:
            follower.lost = False
            follower.inotify.events()  # what they say, the walk sees
            follower.kept.drop_values()
            for i, f in enumerate(following):
                rescan(follower, f)
                # Spread over rescan_s (a sixth of it apart on a hybrid host): a walk of
                # them all, and the next tick's limit files, on one tick made the slowest
                # tick (bench/README.md).
                f.rescan_at = now + self.rescan_s * (i + 1) / len(following)
        else:
            for f in following:
                if now >= f.rescan_at:
                    follower.kept.drop_values(f.h.mount_dir)  # its limit files are read again
                    rescan(follower, f)
                    f.rescan_at = now + self.rescan_s
