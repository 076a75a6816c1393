"""inotify(7) through ctypes: folder watches that tell the walk what changed.

On cgroupfs (v1 and v2, kernel 4.x-6.x) a watch on a cgroup folder reports IN_CREATE /
IN_DELETE with IN_ISDIR when a child cgroup is made or removed (both go through mkdir(2)
/ rmdir(2)), IN_MODIFY when a file of it is written (a limit, cgroup.subtree_control), and
IN_IGNORED when the watched folder itself goes. The kernel drops events past
fs.inotify.max_queued_events and says so once with IN_Q_OVERFLOW: the caller must then
walk everything again. inotify_add_watch fails with ENOSPC past fs.inotify.max_user_watches.

Only what the follower (kernel/follow.py) needs; no thread, no blocking read: `events()` drains what is queued.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import Any, List, Optional, Tuple

from cgstat.kernel.hostfs import close_quietly

IN_MODIFY = 0x00000002
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000

IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# What the walk follows on every cgroup folder.
FOLDER_MASK = (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY | IN_DELETE_SELF
               | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_READ_SIZE = 256 * 1024

Event = Tuple[int, int, bytes]  # (wd, mask, name)

_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = _load_libc()
        _libc.inotify_init1.argtypes = [ctypes.c_int]
        _libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return _libc


def _load_libc() -> Any:
    """libc, from the symbols already loaded in this process (dlopen(NULL)); else found by
    ctypes.util.find_library, which imports subprocess and tempfile and runs `ldconfig -p`
    (imported only then: every start would pay it, a cron run included)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1  # noqa: B018 (a static binary may not export it)
        return libc
    except (OSError, AttributeError):
        from ctypes.util import find_library

        return ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)


class Inotify:
    """One inotify instance (one descriptor), non-blocking."""

    def __init__(self) -> None:
        lib = _lib()
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd: Optional[int] = fd

    def add_watch(self, path: str, mask: int = FOLDER_MASK) -> int:
        """The watch descriptor; OSError (ENOSPC past the watch limit, ENOENT if gone)."""
        if self.fd is None:
            raise OSError(errno.EBADF, "inotify closed")
        wd = _lib().inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return wd

    def rm_watch(self, wd: int) -> None:
        if self.fd is not None:
            _lib().inotify_rm_watch(self.fd, wd)  # EINVAL when already gone: nothing to do

    def events(self) -> List[Event]:
        """Every event queued now (maybe none); never blocks."""
        out: List[Event] = []
        if self.fd is None:
            return out
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return out
            except InterruptedError:
                continue
            out.extend(parse_events(data))
            if len(data) < _READ_SIZE // 2:
                return out

    def close(self) -> None:
        close_quietly(self.fd)
        self.fd = None


def parse_events(data: bytes) -> List[Event]:
    """struct inotify_event records -> [(wd, mask, name)]; the name without its NUL padding."""
    out: List[Event] = []
    pos = 0
    size = _HEADER.size
    end = len(data)
    while pos + size <= end:
        wd, mask, _cookie, length = _HEADER.unpack_from(data, pos)
        pos += size
        name = data[pos:pos + length].rstrip(b"\0") if length else b""
        pos += length
        out.append((wd, mask, name))
    return out


def pack_event(wd: int, mask: int, name: bytes = b"") -> bytes:
    """One struct inotify_event (tests feed these to the walk)."""
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return _HEADER.pack(wd, mask, 0, len(padded)) + padded
