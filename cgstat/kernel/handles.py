"""Kept descriptors for cgroup files: open once, re-read with pread(fd, n, 0) every tick.

A cgroupfs file is a seq_file: a read at offset 0 regenerates it, so an open descriptor
can be read again and again. That saves the path lookup, open and close of every file on
every tick (the C reader in bench/ is 4-6x cheaper that way than with open/read/close).

Rules:
- Only on a real cgroup filesystem (statfs magic), never on a recorded tree, whose files
  tests and users replace by rename (a kept descriptor would read the old file).
- A descriptor belongs to one life of a folder: the entry is keyed by the folder's mount
  point and cgroup path, and holds its inode; a new inode (removed and made again) closes
  the old descriptors.
- A read that fails (ENODEV: the cgroup was removed under an open file) closes that
  folder's descriptors; discover.py also forgets a folder as soon as it sees it go.
- Capped: at most `cap` descriptors (default: 16,384, and never more than three quarters
  of RLIMIT_NOFILE's soft limit, the last quarter left to everything else; the agent first
  raises its soft limit towards 32,768 within the hard one, raise_nofile_limit). Past the cap a
  file is read with open/read/close, opened relative to a descriptor of its mount point;
  nothing is evicted (a tick reads every file once, in the same order, where an LRU would
  only churn). A file no longer read gives its slot back (release(): cgroup.procs of a
  cgroup whose pids.current fell to 0).
- Each kept descriptor pins kernel memory: the struct file, kernfs_open_file, seq_file and
  its buffer (one page, more for a file that ever outgrew it), ~4.5 KiB; `pinned_bytes()`
  is that estimate. bench/tick_cost.py measures the real figure from the agent's memory
  cgroup.

Limit files (cpu.cfs_quota_us, cpu.max, memory.limit_in_bytes, memory.max, pids.max ...)
change only when someone writes them, and a write shows as IN_MODIFY on the folder's
inotify watch; the kernel raises IN_MODIFY itself on the v2 event counters it notifies
(memory.events.local, memory.swap.events). For a folder discover.py watches, the parsed value of such a file is kept
and re-read only after IN_MODIFY, after an inotify overflow, or at discover.py's full
rescan (every 60 s). They are always read with open/read/close: a descriptor kept for a
file read once a minute would take a slot (and pin a page) for nothing.
"""

from __future__ import annotations

import ctypes
import os
import resource
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from cgstat.kernel.hostfs import classify, read_bytes

if TYPE_CHECKING:
    from cgstat.kernel.tree import Folder

# statfs(2) f_type of the two cgroup filesystems (linux/magic.h)
CGROUP_SUPER_MAGIC = 0x27E0EB
CGROUP2_SUPER_MAGIC = 0x63677270

_READ = 65536  # one pread; a cgroup file larger than this is read the slow way
DEFAULT_CAP = 16384
PIN_ESTIMATE = 4608  # bytes of kernel memory per kept descriptor (file, kernfs/seq_file, one page)

# Files whose value only a write changes (and a write shows as IN_MODIFY): limits,
# protections and weights. Then v2 event counters the kernel notifies on every change
# (cgroup_file_notify: "a value change in this file generates a file modified event",
# cgroup-v2.rst), for which IN_MODIFY comes without a write. And the effective cpusets,
# which a parent's write or CPU hotplug changes without an event on the file: kept until
# the folder's rescan (a minute at most). The FROZEN names are no files: the kept value of
# a counter while the cgroup's state keeps it from changing (cgroups.py: pids.events and
# pids.peak with no task, v1 memory.failcnt with no limit), which v1 does not notify.
SLOW_FILES = frozenset({
    "cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.limit_in_bytes", "pids.max",
    "cpu.max", "memory.max",
    "cpu.weight", "cpu.max.burst", "memory.high", "memory.low", "memory.min", "memory.swap.max",
    "memory.oom.group", "io.max", "cpu.shares", "cpu.cfs_burst_us", "memory.soft_limit_in_bytes",
    "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
    "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device",
    "memory.events.local", "memory.swap.events",
    "cpuset.cpus.effective", "cpuset.mems.effective",
    "pids.events (frozen)", "pids.peak (frozen)", "memory.failcnt (frozen)",
})
FROZEN = {name: name + " (frozen)" for name in ("pids.events", "pids.peak", "memory.failcnt")}

_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def _default_cap() -> int:
    env = os.environ.get("CGSTAT_MAX_KEPT_FDS")
    if env is not None and env.strip().isdigit():
        return int(env)
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return max(0, min(DEFAULT_CAP, soft // 4 * 3 - 64, soft - 256))


# The soft RLIMIT_NOFILE the agent raises itself to, when the hard limit allows: enough for
# DEFAULT_CAP kept descriptors plus the last quarter for everything else.
NOFILE_TARGET = 32768


def raise_nofile_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE towards NOFILE_TARGET (never above the hard
    limit, never lower), size KEPT's cap from it again, and return the soft limit.

    systemd starts services with a soft limit of 1024 (for programs that still use
    select(), which can't see descriptors from 1024 on) and a hard limit of 524288, and
    systemd.exec(5) asks programs that can work with more to raise their soft limit
    themselves. cgstat waits on descriptors only with epoll (selectors). Left at 1024, the
    cap would be 704 kept descriptors: a tick of 1,000 cgroups would open ~16,000 files.
    For the agent's own process only (the CLI calls it); a library user's limits are theirs.
    """
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = NOFILE_TARGET if hard == resource.RLIM_INFINITY else min(hard, NOFILE_TARGET)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    except (OSError, ValueError):  # a seccomp filter or a container refusing setrlimit
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if KEPT.auto_cap:
        KEPT.cap = _default_cap()
    return soft


class _Statfs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_char * 120)]


_fs_kind: Dict[str, bool] = {}
_libc: Any = None


def _statfs_fn() -> Any:
    """libc's statfs: from the symbols already loaded in this process (dlopen(NULL)), which
    needs no `ldconfig -p` run as ctypes.util.find_library does; that as the fallback."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.statfs  # noqa: B018 (a static binary may not export it)
        except (OSError, AttributeError):
            from ctypes.util import find_library

            _libc = ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)
    return _libc.statfs


def is_cgroupfs(path: str) -> bool:
    """Whether `path` is on cgroupfs (v1 or v2); cached per path (a mount point)."""
    known = _fs_kind.get(path)
    if known is not None:
        return known
    result = False
    try:
        buf = _Statfs()
        if _statfs_fn()(os.fsencode(path), ctypes.byref(buf)) == 0:
            result = (buf.f_type & 0xFFFFFFFF) in (CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC)
    except (OSError, AttributeError):
        result = False
    if len(_fs_kind) > 64:
        _fs_kind.clear()
    _fs_kind[path] = result
    return result


# What is kept for one life of a folder, one tuple: (inode, names, value of names[0], value
# of names[1], ...), where the value of a slow file is its parsed value (watched folders
# only) and of any other file its kept descriptor. A slow file never holds a descriptor.
# The names tuple is shared by every folder that keeps the same names: per folder this is
# ~100 bytes, where an object holding a dict was ~300.
_Entry = Tuple[Any, ...]
_SHARED_NAMES: Dict[Tuple[str, ...], Tuple[str, ...]] = {}
MISSING = object()  # cached(): no value kept


def _shared(names: Tuple[str, ...]) -> Tuple[str, ...]:
    known = _SHARED_NAMES.get(names)
    if known is None:
        if len(_SHARED_NAMES) >= 1024:  # odd file sets can't grow this for ever
            _SHARED_NAMES.clear()
        known = _SHARED_NAMES[names] = names
    return known


def _whole(data: bytes, path: str) -> bytes:
    """`data` read in one go, or the file read again chunked and capped when it filled the
    buffer (a cgroup file larger than _READ)."""
    return read_bytes(path) if len(data) >= _READ else data


def _fds(entry: _Entry) -> List[int]:
    return [v for n, v in zip(entry[1], entry[2:]) if n not in SLOW_FILES]


def _with(entry: _Entry, name: str, value: Any) -> _Entry:
    names = entry[1]
    if name in names:
        i = names.index(name) + 2
        return entry[:i] + (value,) + entry[i + 1:]
    return (entry[0], _shared(names + (name,))) + entry[2:] + (value,)


def _without(entry: _Entry, name: str) -> _Entry:
    names = entry[1]
    i = names.index(name)
    return (entry[0], _shared(names[:i] + names[i + 1:])) + entry[2:i + 2] + entry[i + 3:]


class EntryView:
    """What is kept for one folder, as entries() shows it: `kept` by file name (a
    descriptor, or a slow file's value) and fds()."""

    __slots__ = ("kept",)

    def __init__(self, entry: _Entry):
        self.kept: Dict[str, Any] = dict(zip(entry[1], entry[2:]))

    def fds(self) -> List[int]:
        return [v for n, v in self.kept.items() if n not in SLOW_FILES]


class KeptFiles:
    """Descriptors (and slow values) by folder (mount point, then cgroup path); see the
    module's text."""

    def __init__(self, cap: Optional[int] = None):
        self.auto_cap = cap is None  # sized from RLIMIT_NOFILE (again after raise_nofile_limit)
        self.cap = _default_cap() if cap is None else cap
        self.count = 0  # descriptors open now
        self.overflowed = 0  # reads done with open/read/close because of the cap
        self._mounts: Dict[str, Dict[str, _Entry]] = {}  # mount_dir -> cgroup path -> entry
        self._dirs: Dict[str, Tuple[int, float]] = {}  # mount_dir -> (O_PATH descriptor, checked at)

    # -- reading ---------------------------------------------------------------------

    def _lookup(self, folder: Folder) -> Optional[_Entry]:
        tree = self._mounts.get(folder.hierarchy.mount_dir)
        if tree is None:
            return None
        entry = tree.get(folder.path)
        if entry is None or entry[0] != folder.inode:
            return None
        return entry

    def _put(self, folder: Folder, name: str, value: Any) -> None:
        """Keep name -> value for this life of the folder; a new inode closes the old one's."""
        tree = self._mounts.get(folder.hierarchy.mount_dir)
        if tree is None:
            tree = self._mounts[folder.hierarchy.mount_dir] = {}
        entry = tree.get(folder.path)
        if entry is None or entry[0] != folder.inode:
            if entry is not None:
                self._close(entry)
            entry = (folder.inode, ())
        tree[folder.path] = _with(entry, name, value)

    def _replace(self, folder: Folder, entry: _Entry) -> None:
        tree = self._mounts[folder.hierarchy.mount_dir]
        if entry[1]:
            tree[folder.path] = entry
        else:
            del tree[folder.path]

    def read(self, folder: Folder, name: str) -> bytes:
        """The bytes of a file of `folder` through a kept descriptor; raises ReadError like
        read_bytes. Slow files are read with open/read/close (they never hold a slot)."""
        tree = self._mounts.get(folder.hierarchy.mount_dir)
        if tree is not None:
            entry = tree.get(folder.path)
            if entry is not None and entry[0] == folder.inode:
                names = entry[1]
                if name in names and name not in SLOW_FILES:
                    fd = entry[names.index(name) + 2]
                    try:
                        data = os.pread(fd, _READ, 0)
                    except OSError as exc:
                        # ENODEV: removed under us. Whatever it was, don't keep a descriptor
                        # that fails.
                        self.forget(folder)
                        raise classify(exc, folder.local + "/" + name) from None
                    return data if len(data) < _READ else _whole(data, folder.local + "/" + name)
        return self._open(folder, name)

    def _open(self, folder: Folder, name: str) -> bytes:
        if name in SLOW_FILES:
            return read_bytes(folder.local + "/" + name)
        if self.count >= self.cap:
            self.overflowed += 1
            return self._read_once(folder, name)
        path = folder.local + "/" + name
        try:
            fd = os.open(path, _FLAGS)
        except OSError as exc:
            raise classify(exc, path) from None
        self._put(folder, name, fd)
        self.count += 1
        try:
            data = os.pread(fd, _READ, 0)
        except OSError as exc:
            self.forget(folder)
            raise classify(exc, path) from None
        return _whole(data, path)

    def _read_once(self, folder: Folder, name: str) -> bytes:
        """open/read/close of a file past the cap: opened relative to a descriptor of the
        mount point (openat), which spares the lookup of /sys, fs, cgroup and the
        controller's folder (~1 of ~10 us here); a name that is not printable UTF-8 takes
        the full path."""
        rel = folder.mount_relative()
        dir_fd = self._dir_fd(folder.hierarchy.mount_dir) if rel is not None else None
        if dir_fd is None:
            return read_bytes(folder.local + "/" + name)
        rel = name if not rel else rel + "/" + name
        try:
            fd = os.open(rel, _FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise classify(exc, folder.local + "/" + name) from None
        try:
            data = os.read(fd, _READ)
        except OSError as exc:
            raise classify(exc, folder.local + "/" + name) from None
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
        if entry is not None and name in entry[1] and name not in SLOW_FILES:
            fd = entry[entry[1].index(name) + 2]
            self._replace(folder, _without(entry, name))
            self.count -= 1
            try:
                os.close(fd)
            except OSError:
                pass

    # -- slow files ------------------------------------------------------------------

    def cached(self, folder: Folder, name: str) -> Any:
        """The kept value of a slow file of a watched folder, or MISSING (read it)."""
        if not folder.watched or name not in SLOW_FILES:
            return MISSING
        entry = self._lookup(folder)
        if entry is None or name not in entry[1]:
            return MISSING
        return entry[entry[1].index(name) + 2]

    def keep(self, folder: Folder, name: str, value: Any) -> None:
        if folder.watched and name in SLOW_FILES:
            self._put(folder, name, value)

    def modified(self, folder: Folder, name: str) -> None:
        """IN_MODIFY: slow file `name` of that folder was written; read it again."""
        entry = self._lookup(folder)
        if entry is not None and name in SLOW_FILES and name in entry[1]:
            self._replace(folder, _without(entry, name))

    def drop_values(self, mount_dir: Optional[str] = None) -> None:
        """Forget every slow value (events were lost), or those of one hierarchy (its
        periodic rescan)."""
        trees = self._mounts.values() if mount_dir is None else [self._mounts.get(mount_dir, {})]
        for tree in trees:
            for path, entry in list(tree.items()):
                for name in [n for n in entry[1] if n in SLOW_FILES]:
                    entry = _without(entry, name)
                if entry[1]:
                    tree[path] = entry
                else:
                    del tree[path]

    # -- lifetime --------------------------------------------------------------------

    def _close(self, entry: _Entry) -> None:
        fds = _fds(entry)
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
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
        for kept in self._mounts.values():
            for entry in kept.values():
                self._close(entry)
        self._mounts = {}
        for fd, _checked in self._dirs.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._dirs = {}

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


KEPT = KeptFiles()
ENABLED = os.environ.get("CGSTAT_KEEP_FDS", "1") != "0"
