"""The descriptor cache: cgroup files kept open and re-read with pread(fd, n, 0) each tick.

A cgroupfs file is a seq_file: a read at offset 0 regenerates it, so an open descriptor can
be read again and again, saving the path lookup, open and close of every file every tick.
`KeptFiles` owns every descriptor (its rules: its docstring): made by the sampler, passed
to the readers (kernel/cgroups.py) and to the discoverer, which says when folders go.
What it keeps as a value instead of a descriptor is declared in kernel/cachekeys.py; only
on a live cgroupfs (kernel/statfs.py). Reads the cgroup files it is asked for.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, TypeVar

from cgstat.kernel.cachekeys import KEYS, SLOW, Key
from cgstat.kernel.hostfs import Malformed, read_bytes, read_error
from cgstat.kernel.rlimits import nofile_soft_limit
from cgstat.kernel.statfs import is_cgroupfs

if TYPE_CHECKING:
    from cgstat.kernel.tree import Folder

_READ = 65536  # one pread; a cgroup file larger than this is read the slow way
_MAX_RECORDS_BYTES = 16 * 1024 * 1024  # as hostfs reads any file: past it, Malformed
_SAME_BYTES = 256 * 1024  # the file contents read_parsed keeps to share values by (then it starts again)
# the same where no value is kept per file (the change reader keeps whole Samples, their equal
# parts shared: kernel/changes.py): sharing then only spares parsing, which a small table does
_SAME_BYTES_UNREMEMBERED = 32 * 1024
DEFAULT_CAP = 16384
PIN_ESTIMATE = 4608  # bytes of kernel memory per kept descriptor (file, kernfs/seq_file, one page)

T = TypeVar("T")
_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def default_cap() -> int:
    """The descriptor cap for this process now: CGSTAT_MAX_KEPT_FDS, else DEFAULT_CAP but
    never more than three quarters of RLIMIT_NOFILE's soft limit (the last quarter left to
    everything else)."""
    env = os.environ.get("CGSTAT_MAX_KEPT_FDS")
    if env is not None and env.strip().isdigit():
        return int(env)
    soft = nofile_soft_limit()
    return max(0, min(DEFAULT_CAP, soft // 4 * 3 - 64, soft - 256))


MISSING = object()  # cached(): no value kept


class Kept(List[Any]):
    """What is kept for one life of a folder: its inode, the names of the files kept (a
    tuple shared by every folder keeping the same names) and, as the list itself, four
    slots per name in the order of `names`: its descriptor or, for a slow file, its parsed
    value; then, for a file read through a descriptor, the hash of the bytes last read,
    the parser and what it made of them (see read_parsed). One object per folder rather
    than an object, a tuple of values and a list of last reads: a host has thousands of
    folders."""

    __slots__ = ("inode", "names")

    def __init__(self, inode: int) -> None:
        super().__init__()
        self.inode = inode
        self.names: Tuple[Key, ...] = ()

    def value(self, name: Key) -> Any:
        return self[4 * self.names.index(name)]

    def values(self) -> List[Any]:
        return self[::4]

    def fds(self) -> List[int]:
        return [v for n, v in zip(self.names, self[::4]) if n not in SLOW]


class EntryView:
    """What is kept for one folder, as entries() shows it: `kept` by file name (a
    descriptor, or a slow file's value) and fds()."""

    __slots__ = ("kept",)

    def __init__(self, entry: Kept):
        self.kept: Dict[Key, Any] = dict(zip(entry.names, entry.values()))

    def fds(self) -> List[int]:
        return [v for n, v in self.kept.items() if n not in SLOW]


def _close_everything(mounts: Dict[str, Dict[str, Kept]], dirs: Dict[str, Tuple[int, float]]) -> None:
    """Close every descriptor of a KeptFiles (close_all, or its finalizer when it is collected)."""
    for kept in mounts.values():
        for entry in kept.values():
            for fd in entry.fds():
                _close(fd)
    mounts.clear()
    for fd, _checked in dirs.values():
        _close(fd)
    dirs.clear()


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


# Files of many records (a seq_file with its own iterator: kernel/cgroup/cgroup.c
# cgroup_procs_start): a read returns whole records up to seq_file's buffer, a page at first,
# so a short read is not the end of them. Every other cgroup file is one record, which a
# read returns whole (fs/seq_file.c seq_read_iter grows its buffer to fit one record).
_MANY_RECORDS = frozenset(("cgroup.procs", "cgroup.threads", "tasks"))


def _whole(data: bytes, path: str) -> bytes:
    """`data` read in one go, or the file read again chunked and capped when it filled the
    buffer (a cgroup file larger than _READ)."""
    return read_bytes(path) if len(data) >= _READ else data


def _rest_of_records(fd: int, data: bytes, path: str) -> bytes:
    """A file of many records read on from `data` (pread at 0 returned it) to its end:
    seq_file goes on from where the last read stopped when the next starts there."""
    chunks = [data]
    total = len(data)
    while data:
        data = os.pread(fd, _READ, total)
        chunks.append(data)
        total += len(data)
        if total > _MAX_RECORDS_BYTES:
            raise Malformed(path, f"larger than {_MAX_RECORDS_BYTES} bytes")
    return b"".join(chunks)


class KeptFiles:
    """Descriptors (and slow values) by folder (mount point, then cgroup path).

    `cap` None: sized from RLIMIT_NOFILE when made; `enabled` None: unless
    CGSTAT_KEEP_FDS=0. Closed by close_all(), or when collected. Rules:
    - Only on a real cgroup filesystem (statfs magic), never on a recorded tree, whose files
      tests and users replace by rename (a kept descriptor would read the old file).
    - A descriptor belongs to one life of a folder: kept by mount point and cgroup path with
      the folder's inode; a new inode (removed and made again) closes the old descriptors. A
      read that fails (ENODEV: removed under an open file) closes that folder's descriptors.
    - Capped (`cap`, sized from RLIMIT_NOFILE): past it a file is read with open/read/close
      relative to a descriptor of its mount point; nothing is evicted (every tick reads the
      same files in the same order, where an LRU would only churn). A file no longer read
      gives its slot back (release()).
    - Slow files (kernel/cachekeys.py) change only when written, which shows as IN_MODIFY on a watched
      folder; the kernel raises IN_MODIFY itself on the v2 event counters it notifies
      (memory.events.local, memory.swap.events). For a watched folder their
      parsed value is kept instead, until modified() or drop_values() (lost events, the
      hierarchy's rescan). They never hold a descriptor.
    """

    __slots__ = ("cap", "enabled", "count", "overflowed", "keeping", "written", "remember", "_mounts", "_dirs", "_names",
                 "_same", "_same_bytes", "__weakref__")

    def __init__(self, cap: Optional[int] = None, enabled: Optional[bool] = None):
        self.cap = default_cap() if cap is None else cap
        self.enabled = os.environ.get("CGSTAT_KEEP_FDS", "1") != "0" if enabled is None else enabled
        self.count = 0  # descriptors open now
        self.overflowed = 0  # reads done with open/read/close because of the cap
        # mount point -> whether its files are read through kept descriptors (see keeps());
        # read directly by the readers' inner loop
        self.keeping: Dict[str, bool] = {}
        # the folder paths whose slow files were written (IN_MODIFY, kernel/follow.py) since
        # the change reader (kernel/changes.py) last looked: it reads their cgroups in full
        self.written: Set[str] = set()
        # whether read_parsed keeps each file's value to give again while its bytes stay
        # the same (off where the change reader keeps the cgroups' Samples instead)
        self.remember = True
        self._mounts: Dict[str, Dict[str, Kept]] = {}  # mount_dir -> cgroup path -> entry
        self._dirs: Dict[str, Tuple[int, float]] = {}  # mount_dir -> (O_PATH descriptor, checked at)
        self._names: Dict[Tuple[Key, ...], Tuple[Key, ...]] = {}  # the shared names tuples
        # parser -> file bytes -> the value made of them: files that read the same (the
        # pressure, cpu.stat and memory.stat of idle cgroups) share one value
        self._same: Dict[Callable[[str], Any], Dict[bytes, Any]] = {}
        self._same_bytes = 0  # the bytes _same holds, bounded by _SAME_BYTES
        weakref.finalize(self, _close_everything, self._mounts, self._dirs)

    def keeps(self, mount_dir: str) -> bool:
        """Whether the files of folders below this mount point are read through kept
        descriptors (live cgroupfs only); asked once per mount point."""
        known = self.keeping.get(mount_dir)
        if known is None:
            known = self.keeping[mount_dir] = self.enabled and is_cgroupfs(mount_dir)
        return known

    # -- reading ---------------------------------------------------------------------

    def _lookup(self, folder: Folder) -> Optional[Kept]:
        """What is kept for this life of the folder (its inode), or None."""
        tree = self._mounts.get(folder.hierarchy.mount_dir)
        if tree is None:
            return None
        entry = tree.get(folder.path)
        if entry is None or entry.inode != folder.inode:
            return None
        return entry

    def _shared(self, names: Tuple[Key, ...]) -> Tuple[Key, ...]:
        known = self._names.get(names)
        if known is None:
            if len(self._names) >= 1024:  # odd file sets can't grow this for ever
                self._names.clear()
            known = self._names[names] = names
        return known

    def _put(self, folder: Folder, name: Key, value: Any) -> None:
        """Keep name -> value for this life of the folder; a new inode closes the old one's."""
        tree = self._mounts.get(folder.hierarchy.mount_dir)
        if tree is None:
            tree = self._mounts[folder.hierarchy.mount_dir] = {}
        entry = tree.get(folder.path)
        if entry is None or entry.inode != folder.inode:
            if entry is not None:
                self._close(entry)
            entry = tree[folder.path] = Kept(folder.inode)
        names = entry.names
        if name in names:
            entry[4 * names.index(name)] = value
        else:
            entry.names = self._shared(names + (name,))
            # grown in one step from empty: a list that grows by appending keeps up to
            # an eighth more slots than it holds, while an empty one extended to a
            # multiple of four holds exactly as many (list_resize, CPython 3.9 and later)
            slots = entry + [value, None, None, None]
            entry.clear()
            entry.extend(slots)

    def _drop(self, folder: Folder, entry: Kept, name: Key) -> None:
        """Keep nothing more for `name` (its descriptor, if any, is the caller's to close)."""
        names = entry.names
        i = names.index(name)
        if len(names) == 1:
            del self._mounts[folder.hierarchy.mount_dir][folder.path]
            return
        entry.names = self._shared(names[:i] + names[i + 1:])
        del entry[4 * i:4 * i + 4]

    def _pread_kept(self, folder: Folder, name: str) -> Optional[Tuple[Kept, int, bytes]]:
        """(its entry, the name's place in it, the file's bytes) read through the descriptor
        kept for it, or None when none is kept (a slow file never has one); raises ReadError
        like read_bytes."""
        entry = self._lookup(folder)
        if entry is None:
            return None
        names = entry.names
        if name not in names or name in SLOW:
            return None
        i = names.index(name)
        fd = entry[4 * i]
        try:
            data = os.pread(fd, _READ, 0)
            if name in _MANY_RECORDS:
                return entry, i, _rest_of_records(fd, data, folder.local + "/" + name)
        except OSError as exc:
            # ENODEV: removed under us. Whatever it was, don't keep a descriptor that fails.
            self.forget(folder)
            raise read_error(exc, folder.local + "/" + name) from None
        return entry, i, (data if len(data) < _READ else _whole(data, folder.local + "/" + name))

    def read(self, folder: Folder, name: str) -> bytes:
        """The bytes of a file of `folder` through a kept descriptor; raises ReadError like
        read_bytes. Slow files are read with open/read/close (they never hold a slot)."""
        kept = self._pread_kept(folder, name)
        return self._open(folder, name) if kept is None else kept[2]

    def read_parsed(self, folder: Folder, name: str, parser: Callable[[str], T]) -> T:
        """parser(the file's text), read as read() does; raises ReadError like read(), and
        UnicodeDecodeError or the parser's ValueError. Through a kept descriptor, bytes equal
        to the last read's give the value made of them then, unparsed: most files of an idle
        cgroup read the same from tick to tick, and a parser is a pure function of the text
        (the values are shared, so the readers never change them).

        The bytes are known by their hash(), not kept (a file's bytes are most of what is
        kept per file): bytes' hash is SipHash under a key drawn per process (unless
        PYTHONHASHSEED fixes it), so two readings of one file that differ yet hash the same
        (the previous value given again) happen by chance one time in 2^64, and can't be
        aimed at by a workload steering its counters, which does not know the key."""
        kept = self._pread_kept(folder, name)
        if kept is None:
            return parser(self._open(folder, name).decode())
        entry, i, data = kept
        if not self.remember:
            return self._parse_shared(parser, data)
        digest = hash(data)
        at = 4 * i
        if entry[at + 2] is parser and entry[at + 1] == digest:
            return entry[at + 3]
        value = self._parse_shared(parser, data)
        entry[at + 1:at + 4] = (digest, parser, value)
        return value

    def _parse_shared(self, parser: Callable[[str], T], data: bytes) -> T:
        """parser(data's text), or the value it made of the same bytes of another file: the
        files of idle cgroups often read the same (zero counters), and one value serves them all
        (a value is never changed by its readers). Bounded: past _SAME_BYTES of contents
        what is kept for sharing is dropped (the values stay with their files)."""
        same = self._same.get(parser)
        if same is None:
            same = self._same[parser] = {}
        value = same.get(data, MISSING)
        if value is MISSING:
            value = parser(data.decode())
            if self._same_bytes + len(data) > (_SAME_BYTES if self.remember else _SAME_BYTES_UNREMEMBERED):
                self._same.clear()
                self._same_bytes = 0
                same = self._same[parser] = {}
            same[data] = value
            self._same_bytes += len(data)
        return value

    def _open(self, folder: Folder, name: str) -> bytes:
        if name in SLOW:
            return read_bytes(folder.local + "/" + name)
        if self.count >= self.cap:
            self.overflowed += 1
            return self._read_once(folder, name)
        path = folder.local + "/" + name
        try:
            fd = os.open(path, _FLAGS)
        except OSError as exc:
            raise read_error(exc, path) from None
        self._put(folder, name, fd)
        self.count += 1
        try:
            data = os.pread(fd, _READ, 0)
            if name in _MANY_RECORDS:
                return _rest_of_records(fd, data, path)
        except OSError as exc:
            self.forget(folder)
            raise read_error(exc, path) from None
        return _whole(data, path)

    def _read_once(self, folder: Folder, name: str) -> bytes:
        """open/read/close of a file past the cap: opened relative to a descriptor of the
        mount point (openat), which spares the lookup of /sys, fs, cgroup and the
        controller's folder; a name that is not printable UTF-8 takes the full path."""
        rel = folder.mount_relative()
        dir_fd = self._dir_fd(folder.hierarchy.mount_dir) if rel is not None else None
        if dir_fd is None:
            return read_bytes(folder.local + "/" + name)
        rel = name if not rel else rel + "/" + name
        try:
            fd = os.open(rel, _FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise read_error(exc, folder.local + "/" + name) from None
        try:
            data = os.read(fd, _READ)
            if name in _MANY_RECORDS:
                return _rest_of_records(fd, data, folder.local + "/" + name)
        except OSError as exc:
            raise read_error(exc, folder.local + "/" + name) from None
        finally:
            os.close(fd)
        return _whole(data, folder.local + "/" + name)

    def _dir_fd(self, mount: str) -> Optional[int]:
        """A descriptor (O_PATH) of a mount point, checked against the path at most once a
        second: a hierarchy unmounted and mounted again gets a fresh one."""
        known = self._dirs.get(mount)
        now = time.monotonic()
        if known is not None and now - known[1] < 1.0:
            return known[0]
        try:
            st = os.stat(mount)
            if known is not None:
                fst = os.fstat(known[0])
                if (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
                    self._dirs[mount] = (known[0], now)
                    return known[0]
                del self._dirs[mount]
                os.close(known[0])
            fd = os.open(mount, _DIR_FLAGS)
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                os.close(fd)  # changed while we looked: the full path this time
                return None
        except OSError:
            return None
        self._dirs[mount] = (fd, now)
        return fd

    def release(self, folder: Folder, name: str) -> None:
        """Close the descriptor kept for one file of `folder`, if any (no longer read)."""
        entry = self._lookup(folder)
        if entry is not None and name in entry.names and name not in SLOW:
            fd = entry.value(name)
            self._drop(folder, entry, name)
            self.count -= 1
            _close(fd)

    # -- slow files ------------------------------------------------------------------

    def cached(self, folder: Folder, name: Key) -> Any:
        """The kept value of a slow file of a watched folder, or MISSING (read it)."""
        if not folder.watched or name not in SLOW:
            return MISSING
        entry = self._lookup(folder)
        if entry is None or name not in entry.names:
            return MISSING
        return entry.value(name)

    def slow_value(self, folder: Folder, name: Key) -> Any:
        """cached() for a name known to be a slow file of a watched folder (the readers'
        inner loop: the same answer with fewer checks)."""
        tree = self._mounts.get(folder.hierarchy.mount_dir)
        if tree is not None:
            entry = tree.get(folder.path)
            if entry is not None and entry.inode == folder.inode:
                names = entry.names
                if name in names:
                    return entry[4 * names.index(name)]
        return MISSING

    def keep(self, folder: Folder, name: Key, value: Any) -> None:
        if folder.watched and name in SLOW:
            self._put(folder, name, value)

    def modified(self, folder: Folder, name: Key) -> None:
        """IN_MODIFY: slow file `name` of that folder was written; read it again (and the
        values made from it: its cachekeys.Derived keys)."""
        if name not in SLOW:
            return
        made_from = KEYS.derived_from.get(name, ()) if isinstance(name, str) else ()
        for kept_as in (name,) + made_from:
            entry = self._lookup(folder)  # again: dropping its last name removes the entry
            if entry is not None and kept_as in entry.names:
                self._drop(folder, entry, kept_as)

    def drop_values(self, mount_dir: Optional[str] = None) -> None:
        """Forget every slow value (events were lost), or those of one hierarchy (its
        periodic rescan)."""
        trees = self._mounts.values() if mount_dir is None else [self._mounts.get(mount_dir, {})]
        for tree in trees:
            for path, entry in list(tree.items()):
                if not any(n in SLOW for n in entry.names):
                    continue
                kept = [i for i, n in enumerate(entry.names) if n not in SLOW]
                if kept:
                    entry[:] = [x for i in kept for x in entry[4 * i:4 * i + 4]]
                    entry.names = self._shared(tuple(entry.names[i] for i in kept))
                else:
                    del tree[path]

    # -- lifetime --------------------------------------------------------------------

    def _close(self, entry: Kept) -> None:
        fds = entry.fds()
        for fd in fds:
            _close(fd)
        self.count -= len(fds)

    def forget(self, folder: Folder) -> None:
        """Close what is kept for a folder (gone, or no longer read)."""
        tree = self._mounts.get(folder.hierarchy.mount_dir)
        if tree is not None:
            entry = tree.pop(folder.path, None)
            if entry is not None:
                self._close(entry)
            if not tree:
                del self._mounts[folder.hierarchy.mount_dir]

    def retain(self, trees: Dict[str, Dict[str, Folder]]) -> None:
        """For each mount point given, forget every folder not in its tree (cgroup path ->
        Folder). Other mount points are left alone."""
        for mount, tree in trees.items():
            kept = self._mounts.get(mount)
            if kept is None:
                continue
            for path in [p for p in kept if p not in tree]:
                self._close(kept.pop(path))
            if not kept:
                del self._mounts[mount]

    def close_all(self) -> None:
        """Close every descriptor (what is kept is read again, opened anew, if asked)."""
        _close_everything(self._mounts, self._dirs)
        self.count = 0

    def entries(self) -> Iterator[Tuple[str, str, EntryView]]:
        """(mount point, cgroup path, what is kept) of every folder with something kept."""
        for mount, kept in self._mounts.items():
            for path, entry in kept.items():
                yield mount, path, EntryView(entry)

    def folders(self) -> int:
        return sum(len(kept) for kept in self._mounts.values())

    def pinned_bytes(self) -> int:
        """Estimated kernel memory held by the kept descriptors."""
        return self.count * PIN_ESTIMATE
