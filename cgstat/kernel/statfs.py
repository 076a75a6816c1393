"""Whether a path is on a cgroup filesystem: statfs(2) through libc (ctypes), its f_type
against the cgroup magic numbers of linux/magic.h. Reads no files."""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

# statfs(2) f_type of the two cgroup filesystems (linux/magic.h)
CGROUP_SUPER_MAGIC = 0x27E0EB
CGROUP2_SUPER_MAGIC = 0x63677270


class _Statfs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_char * 120)]


@functools.lru_cache(maxsize=None)
def _statfs_fn() -> Any:
    """libc's statfs, loaded on the first call: from the symbols already loaded in this
    process (dlopen(NULL)), which needs no `ldconfig -p` run as ctypes.util.find_library
    does; that as the fallback."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.statfs  # noqa: B018 (a static binary may not export it)
    except (OSError, AttributeError):
        from ctypes.util import find_library

        libc = ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)
    return libc.statfs


def is_cgroupfs(path: str) -> bool:
    """Whether `path` is on cgroupfs (v1 or v2): statfs(2) of it."""
    result = False
    try:
        buf = _Statfs()
        if _statfs_fn()(os.fsencode(path), ctypes.byref(buf)) == 0:
            result = (buf.f_type & 0xFFFFFFFF) in (CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC)
    except (OSError, AttributeError):
        result = False
    return result
