"""The shapes of a cgroup tree: one folder in one hierarchy, and one workload's folders.

Plain data built by the walk (kernel/discover.py) and read by the sampler
(kernel/cgroups.py); nothing here reads files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Tuple

from cgstat.kernel.hierarchy import Hierarchy


@dataclass(frozen=True)
class Folder:
    """One cgroup folder in one hierarchy."""

    __slots__ = ("hierarchy", "path", "local", "inode", "files")  # one per folder per tick
    hierarchy: Hierarchy
    path: str  # cgroup path in that hierarchy, "/" for its root; printable (text.decode_name)
    local: str  # where to read it: the real name (undecodable bytes surrogate-escaped)
    inode: int  # the folder's inode: a recreated cgroup gets a new one
    files: FrozenSet[str]  # shared between folders with the same file names


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
    def inodes(self) -> Tuple[Tuple[str, int], ...]:
        """(hierarchy, folder inode) of each folder: what tells one life of a cgroup from
        the next one at the same path (rates never span two)."""
        # Computed once: a Cgroup lives as long as its folders (the walk keeps it from
        # tick to tick while nothing changed).
        known = self.__dict__.get("_inodes")
        if known is None:
            known = self.__dict__["_inodes"] = tuple((f.hierarchy.name, f.inode) for f in self.folders)
        return known  # type: ignore[no-any-return,unused-ignore]

    @property
    def paths(self) -> Dict[str, str]:
        return {f.hierarchy.name: f.path for f in self.folders}
