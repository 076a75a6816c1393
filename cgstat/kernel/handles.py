"""Kept descriptors for cgroup files: open once, re-read with pread(fd, n, 0) every tick.

A cgroupfs file is a seq_file: a read at offset 0 regenerates it, so an open descriptor
can be read again and again. That saves the path lookup, open and close of every file on
every tick (the C reader in bench/ is 4-6x cheaper that way than with open/read/close).

Rules:
- Only on a real cgroup filesystem (statfs magic), never on a recorded tree, whose files
  tests and users replace by rename (a kept descriptor would read the old file).
- A descriptor belongs to one life of a folder: the entry is keyed by the folder's local
  path and its inode; a new inode (removed and made again) closes the old descriptors.
- A read that fails (ENODEV: the cgroup was removed under an open file) closes that
  folder's descriptors; discover.py also forgets a folder as soon as it sees it go.
- Capped: at most `cap` descriptors (default: 16,384, and never more than a quarter of
  RLIMIT_NOFILE's soft limit, the rest left to everything else). Past the cap a file is
  read with open/read/close; nothing is evicted (a tick reads every file once, in the same
  order, where an LRU would only churn).
- Each kept descriptor pins kernel memory: the struct file, kernfs_open_file, seq_file and
  its buffer (one page, more for a file that ever outgrew it), ~4.5 KiB; `pinned_bytes()`
  is that estimate. bench/tick_cost.py measures the real figure from the agent's memory
  cgroup.

Limit files (cpu.cfs_quota_us, cpu.max, memory.limit_in_bytes, memory.max, pids.max ...)
change only when someone writes them, and a write shows as IN_MODIFY on the folder's
inotify watch. For a folder discover.py watches, the parsed value of such a file is kept
and re-read only after IN_MODIFY, after an inotify overflow, or every SLOW_REFRESH_S.
"""

from __future__ import annotations

import ctypes
import os
import resource
from typing import Any, Dict, Optional, Set

from cgstat.kernel.hostfs import classify, read_bytes

# statfs(2) f_type of the two cgroup filesystems (linux/magic.h)
CGROUP_SUPER_MAGIC = 0x27E0EB
CGROUP2_SUPER_MAGIC = 0x63677270

_READ = 65536  # one pread; a cgroup file larger than this is read the slow way
DEFAULT_CAP = 16384
PIN_ESTIMATE = 4608  # bytes of kernel memory per kept descriptor (file, kernfs/seq_file, one page)

# Files whose value only a write changes (and a write shows as IN_MODIFY).
SLOW_FILES = frozenset({
    "cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.limit_in_bytes", "pids.max",
    "cpu.max", "memory.max",
})
SLOW_REFRESH_S = 60.0

_FLAGS = os.O_RDONLY | os.O_CLOEXEC


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


class _Folder:
    """The kept state of one folder's life."""

    __slots__ = ("inode", "fds", "values")

    def __init__(self, inode: int):
        self.inode = inode
        self.fds: Dict[str, int] = {}
        self.values: Dict[str, Any] = {}  # slow file -> (parsed value,), while watched


class KeptFiles:
    """Descriptors (and slow values) by folder local path; see the module's text."""

    def __init__(self, cap: Optional[int] = None):
        self.cap = _default_cap() if cap is None else cap
        self.count = 0  # descriptors open now
        self.overflowed = 0  # reads done with open/read/close because of the cap
        self._folders: Dict[str, _Folder] = {}

    # -- reading ---------------------------------------------------------------------

    def _entry(self, local: str, inode: int) -> _Folder:
        entry = self._folders.get(local)
        if entry is None or entry.inode != inode:
            if entry is not None:
                self._close(entry)
            entry = self._folders[local] = _Folder(inode)
        return entry

    def read(self, local: str, inode: int, name: str) -> bytes:
        """The bytes of local/name through a kept descriptor; raises ReadError like read_bytes."""
        entry = self._folders.get(local)
        if entry is None or entry.inode != inode:
            entry = self._entry(local, inode)
        fd = entry.fds.get(name)
        if fd is None:
            path = local + "/" + name
            if self.count >= self.cap:
                self.overflowed += 1
                return read_bytes(path)
            try:
                fd = os.open(path, _FLAGS)
            except OSError as exc:
                raise classify(exc, path) from None
            entry.fds[name] = fd
            self.count += 1
        try:
            data = os.pread(fd, _READ, 0)
        except OSError as exc:
            # ENODEV: removed under us. Whatever it was, don't keep a descriptor that fails.
            self.forget(local)
            raise classify(exc, local + "/" + name) from None
        if len(data) >= _READ:
            return read_bytes(local + "/" + name)  # a large file: the chunked, capped read
        return data

    # -- slow files ------------------------------------------------------------------

    def cached(self, local: str, inode: int, name: str) -> Any:
        """(value,) of a slow file of a watched folder, or None (read it)."""
        entry = self._folders.get(local)
        if entry is None or entry.inode != inode or local not in WATCHED:
            return None
        return entry.values.get(name)

    def keep(self, local: str, inode: int, name: str, value: Any) -> None:
        entry = self._folders.get(local)
        if entry is not None and entry.inode == inode and local in WATCHED:
            entry.values[name] = (value,)

    def modified(self, local: str, name: str) -> None:
        """IN_MODIFY: `name` of that folder was written; read it again."""
        entry = self._folders.get(local)
        if entry is not None and entry.values:
            entry.values.pop(name, None)

    def drop_values(self) -> None:
        """Forget every slow value (events were lost, or the periodic refresh)."""
        for entry in self._folders.values():
            if entry.values:
                entry.values.clear()

    # -- lifetime --------------------------------------------------------------------

    def _close(self, entry: _Folder) -> None:
        for fd in entry.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.count -= len(entry.fds)
        entry.fds = {}
        entry.values.clear()

    def forget(self, local: str) -> None:
        """Close what is kept for a folder (gone, or no longer read)."""
        entry = self._folders.pop(local, None)
        if entry is not None:
            self._close(entry)

    def forget_below(self, local: str) -> None:
        """forget() a folder and every folder below it."""
        prefix = local + "/"
        for key in [k for k in self._folders if k == local or k.startswith(prefix)]:
            self.forget(key)

    def retain(self, live) -> None:
        """Forget every folder whose local path is not in `live` (a set)."""
        for key in [k for k in self._folders if k not in live]:
            self.forget(key)

    def close_all(self) -> None:
        for key in list(self._folders):
            self.forget(key)

    def folders(self) -> int:
        return len(self._folders)

    def pinned_bytes(self) -> int:
        """Estimated kernel memory held by the kept descriptors."""
        return self.count * PIN_ESTIMATE


KEPT = KeptFiles()
# Local paths of the folders an inotify watch follows now (discover.py keeps this).
WATCHED: Set[str] = set()
ENABLED = os.environ.get("CGSTAT_KEEP_FDS", "1") != "0"
