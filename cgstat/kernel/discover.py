"""Find every cgroup of the host each tick: the walk or the inotify follower per hierarchy,
then the join of one workload's folders across v1 hierarchies.

Composes kernel/walk.py (the walk), follow.py and rescan.py (trees followed with inotify
and walked again when events were lost or on each hierarchy's turn), delegated.py (the cap
below users' delegated subtrees), membership.py and join.py (the v1 join), and decides
when what the descriptor cache (handles.KeptFiles) keeps is closed. Reads, through them,
the cgroup folders' listings, cgroup.procs of cgroups joined and /proc/<pid>/cgroup.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Callable, Dict, List, Optional, Tuple

from cgstat.kernel.delegated import MAX_USER_CGROUPS, capped_message
from cgstat.kernel.follow import Follower
from cgstat.kernel.handles import KeptFiles
from cgstat.kernel.statfs import is_cgroupfs
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.join import Joins, join_trees
from cgstat.kernel.membership import Membership
from cgstat.kernel.rescan import RESCAN_S, Rescans
from cgstat.kernel.tree import Cgroup, Folder
from cgstat.kernel.walk import Walker


class Discoverer:
    """Finds the hierarchies' folders each tick and keeps the process-derived joins.

    On a live cgroup filesystem the folders are walked once and then followed with inotify
    (kernel/follow.py): a tick only applies the events queued since the last one. A full
    walk runs again on lost events and every `rescan_s` seconds (kernel/rescan.py). Where
    inotify can't be used (a recorded tree, no inotify, fs.inotify.max_user_watches
    reached) a hierarchy is walked every tick. The joined cgroups are recomputed only when
    a tree changed or an empty cgroup, asked again for members when due, has some.

    `kept`: the readers' descriptor cache (kernel/handles.py), told here when folders go.

    `max_user_cgroups` bounds the folders walked below each user's delegated subtree, per
    hierarchy and tick (kernel/delegated.py); the folders it saw and left out are counted
    in `left_out` and, when `warn` is given, said through warn(key, message) (keys
    "capped:<subtree>"; pass Warner.once). None: no bound. Delegated subtrees are never
    watched (their owner could flood the queue): they are walked, capped, every tick.
    """

    def __init__(self, fs: HostFS, layout: Layout, max_user_cgroups: Optional[int] = MAX_USER_CGROUPS,
                 warn: Optional[Callable[[str, str], None]] = None, follow: Optional[bool] = None,
                 rescan_s: float = RESCAN_S, kept: Optional[KeptFiles] = None):
        self.fs = fs
        self.layout = layout
        self.max_user_cgroups = max_user_cgroups
        self.warn = warn
        # The descriptor cache the readers use: the discoverer closes what it keeps for
        # folders that go. Its own when none is given (only the discovery then closes it).
        self.kept = kept if kept is not None else KeptFiles()
        self.walker = Walker(fs, max_user_cgroups)
        self.members = Membership(fs, layout)
        self.rescan_schedule = Rescans(rescan_s)
        self._joins: Joins = {}
        # Delegated subtree path -> folders seen and not walked in the last join (the
        # largest count over hierarchies).
        self.left_out: Dict[str, int] = {}
        self._result: Optional[List[Cgroup]] = None  # the last join, while nothing changed
        self._result_key: Optional[Dict[str, Dict[str, Folder]]] = None  # delegated trees it used
        if follow is None:
            follow = os.environ.get("CGSTAT_INOTIFY", "1") != "0"
        self.follower: Optional[Follower] = None
        if follow:
            try:
                hierarchies = [h for h in layout.hierarchies if is_cgroupfs(h.mount_dir)]
                if hierarchies:
                    self.follower = Follower(self.walker, hierarchies, self.kept, warn)
                    self._finalizer = weakref.finalize(self, self.follower.close)
            except OSError:
                self.follower = None

    def close(self) -> None:
        """Stop following (close the inotify descriptor) and close kept file descriptors."""
        fin = getattr(self, "_finalizer", None)
        if fin is not None:
            fin()
        self.follower = None
        self._result = None

    @property
    def following(self) -> List[str]:
        """Names of the hierarchies followed by inotify (the others are walked each tick)."""
        return [f.h.name for f in self.follower.following] if self.follower is not None else []

    @property
    def rescans(self) -> int:
        """Full walks of followed trees (the first one included)."""
        return self.follower.rescans if self.follower is not None else 0

    def _trees(self, left_out: Dict[str, int]) -> Tuple[Dict[str, Dict[str, Folder]], bool]:
        """This tick's folders of every hierarchy, and whether any changed since the last."""
        changed = False
        follower = self.follower
        if follower is not None and follower.following:
            self.rescan_schedule.run(follower, time.monotonic())
        followed = follower.followed if follower is not None else {}
        walker = self.walker
        trees: Dict[str, Dict[str, Folder]] = {}
        delegated_trees: Dict[str, Dict[str, Folder]] = {}
        for h in self.layout.hierarchies:
            counts: Dict[str, int] = {}
            f = followed.get(h.name)
            if f is not None and f.ok:
                tree = f.tree
                if f.delegated:
                    below: Dict[str, Folder] = {}
                    for path in sorted(f.delegated):
                        local, ino = f.delegated[path]
                        walker.walk_into(h, [(path, local, ino, path)], below, counts)
                    delegated_trees[h.name] = below
                    tree = dict(tree)
                    tree.update(below)
                if f.changed:
                    changed = True
                    f.changed = False
            else:
                tree = walker.walk(h, counts)
                delegated_trees[h.name] = tree
            trees[h.name] = tree
            for subtree, n in counts.items():
                left_out[subtree] = max(n, left_out.get(subtree, 0))
        if delegated_trees != self._result_key:
            changed = True
        self._result_key = delegated_trees
        return trees, changed

    def join(self) -> List[Cgroup]:
        """All cgroups of this tick, anchor paths first, then folders joined to none."""
        members = self.members
        members.start_tick()
        left_out: Dict[str, int] = {}
        trees, changed = self._trees(left_out)
        self.left_out = left_out
        if self.warn is not None:
            for subtree, n in sorted(left_out.items()):
                self.warn("capped:" + subtree, capped_message(subtree, n, self.max_user_cgroups or 0))
        if not changed and self._result is not None and members.unchanged():
            return list(self._result)
        layout = self.layout
        joined = join_trees(layout, trees, members.paths, self._joins, self._result or ())
        if len(layout.hierarchies) > 1:
            self._joins = joined.joins
            members.retain(f.inode for f in trees[layout.anchor.name].values())
        self._result = joined.cgroups
        members.joined()
        # Close what is kept for folders gone from the trees (also when walking every tick).
        self.kept.retain({h.mount_dir: trees[h.name] for h in layout.hierarchies})
        return list(joined.cgroups)
