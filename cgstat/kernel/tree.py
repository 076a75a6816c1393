"""The shapes of a cgroup tree: one folder in one hierarchy, and one workload's folders.

Plain data built by the walk (kernel/walk.py) and read by the sampler
(kernel/cgroups.py), and the walk's one pass over a folder's entries (Listing); nothing
here opens files.

There is one Folder per cgroup folder of every hierarchy walked (six per cgroup on a
hybrid host, also for cgroups no record shows), kept from tick to tick: both shapes use
__slots__, and a Folder's local path is stored only where it is not simply the mount
point followed by the printable path (a name that is not printable UTF-8).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
import os
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Tuple

from cgstat.kernel.hierarchy import Hierarchy


class Folder:
    """One cgroup folder in one hierarchy. Immutable."""

    __slots__ = ("hierarchy", "path", "inode", "files", "watched", "_local")
    hierarchy: Hierarchy
    path: str  # cgroup path in that hierarchy, "/" for its root; printable (text.decode_name)
    inode: int  # the folder's inode: a recreated cgroup gets a new one
    files: FrozenSet[str]  # shared between folders with the same file names
    watched: bool  # an inotify watch follows it (its limit files' values may be kept)
    _local: Optional[str]

    def __init__(self, hierarchy: Hierarchy, path: str, local: str, inode: int, files: FrozenSet[str],
                 watched: bool = False):
        set_ = object.__setattr__
        set_(self, "hierarchy", hierarchy)
        set_(self, "path", path)
        set_(self, "inode", inode)
        set_(self, "files", files)
        set_(self, "watched", watched)
        # Where to read it: the real name (undecodable bytes surrogate-escaped). Stored only
        # where it differs from what `local` derives.
        set_(self, "_local", None if local == _derived(hierarchy, path) else local)

    @property
    def local(self) -> str:
        """The folder's local path (under the host root), to open its files."""
        local = self._local
        return _derived(self.hierarchy, self.path) if local is None else local

    def mount_relative(self) -> Optional[str]:
        """The folder's local path below its mount point without the leading "/" ("" for
        the root), or None where the local path is not the mount point + the printable path
        (a name that is not printable UTF-8)."""
        if self._local is not None:
            return None
        return self.path[1:]

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _key(self) -> Tuple[Hierarchy, str, Optional[str], int, FrozenSet[str], bool]:
        return (self.hierarchy, self.path, self._local, self.inode, self.files, self.watched)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Folder:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Folder(hierarchy={self.hierarchy!r}, path={self.path!r}, local={self.local!r}, "
                f"inode={self.inode!r}, files={self.files!r}, watched={self.watched!r})")


def _derived(hierarchy: Hierarchy, path: str) -> str:
    return hierarchy.mount_dir if path == "/" else hierarchy.mount_dir + path


@dataclass(frozen=True)
class Cgroup:
    """One workload: its name (path) and its folder in each hierarchy it has one in."""

    __slots__ = ("path", "folders", "_inodes", "_paths", "_memo")
    path: str
    folders: Tuple[Folder, ...]

    @property
    def memo(self) -> Any:
        """What a reader derived from this cgroup's folders (kernel/cgroups.py), or None."""
        return getattr(self, "_memo", None)

    def remember(self, value: Any) -> None:
        """Set `memo` (a derived value: the cgroup itself stays immutable)."""
        object.__setattr__(self, "_memo", value)

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
        known: Optional[Tuple[Tuple[str, int], ...]] = getattr(self, "_inodes", None)
        if known is None:
            known = tuple((f.hierarchy.name, f.inode) for f in self.folders)
            object.__setattr__(self, "_inodes", known)
        return known

    @property
    def paths(self) -> Dict[str, str]:
        """hierarchy name -> its folder's path: one dict per Cgroup, shared by its samples
        and records (read only)."""
        known: Optional[Dict[str, str]] = getattr(self, "_paths", None)
        if known is None:
            known = {f.hierarchy.name: f.path for f in self.folders}
            object.__setattr__(self, "_paths", known)
        return known


class Listing:
    """One folder's listing, read once: the names of its files, and its sub-folders as an
    iterator, counted as they go by."""

    def __init__(self, it: Iterator[os.DirEntry]):
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
