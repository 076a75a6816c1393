"""The store's folder: made, checked and opened the way a root process must use a path
others may control.

The folder must be a real folder (lstat: a symbolic link is refused, never followed),
owned by the user cgstat runs as (for reading: also root's, and root reads anyone's,
such as the service's dynamic user's), writable by nobody else, and
a store: it holds the marker file `CGSTAT-STORE` or is empty (then it becomes one). A
folder with other files in it is refused and left as it was, so that `--store /etc` is
an error, not a retention pass over /etc. Every file is opened relative to the folder's
descriptor with O_NOFOLLOW, so a link swapped in for a shard is refused too. New folders
are made 0700, files 0600.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import List, NamedTuple, Optional

from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.safepath import UnsafePath, open_folder

MARKER = "CGSTAT-STORE"
MARKER_TEXT = b"cgstat store 1\n"
# <seq>-<first tick, UTC>.shard and its .index: the sequence number orders shards as they
# were written, whatever the clock said.
_SHARD = re.compile(r"([0-9]{8})-([0-9]{8}T[0-9]{6}Z)\.shard\Z")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class StoreError(CgstatError):
    """The store folder can't be used (one line); nothing was written."""


def default_store() -> str:
    """/var/lib/cgstat/store as root; the user's state folder otherwise (XDG_STATE_HOME,
    else ~/.local/state) + cgstat/store."""
    if os.geteuid() == 0:
        return "/var/lib/cgstat/store"
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "cgstat", "store")


class ShardName(NamedTuple):
    seq: int
    stamp: str  # the first tick's UTC second, 20261202T123301Z
    name: str   # the shard's file name; the index is name[:-6] + ".index"

    @property
    def index_name(self) -> str:
        return self.name[: -len(".shard")] + ".index"


def shard_name(seq: int, stamp: str) -> ShardName:
    return ShardName(seq, stamp, f"{seq:08d}-{stamp}.shard")


def _check(path: str, st: os.stat_result, writing: bool) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"refusing --store {path}: it is {file_kind(st.st_mode)}, not a folder "
                         "(cgstat keeps its store in a folder of its own and follows no link)")
    me = os.geteuid()
    # Writing: only into a folder of our own. Reading: root may read the store of the
    # service's dynamic user; a user reads their own or root's.
    if st.st_uid != me and writing or not writing and me != 0 and st.st_uid not in (me, 0):
        raise StoreError(f"refusing --store {path}: it belongs to uid {st.st_uid}, not to the user cgstat "
                         f"runs as (uid {me})")
    if st.st_mode & 0o022:
        raise StoreError(f"refusing --store {path}: other users may write in it (mode {stat.S_IMODE(st.st_mode):o}); "
                         "chmod go-w it or give another folder")


class StoreFolder:
    """An opened, checked store folder: `fd` is its descriptor, every file relative to it."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, path: str, writing: bool) -> "StoreFolder":
        """The folder at `path`, made when `writing` and missing; StoreError when it can't be
        used (a link, a file, someone else's, a folder that is not a store)."""
        path = os.path.abspath(path)
        if writing:
            st = _made(path)
        else:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                raise StoreError(f"no store at {path} (cgstat record --store {path} makes one)") from None
            except OSError as exc:
                raise StoreError(f"cannot use --store {path}: {os_reason(exc)}") from None
        _check(path, st, writing)
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StoreError(f"refusing --store {path}: it was swapped for a link or a file") from None
            raise StoreError(f"cannot open --store {path}: {os_reason(exc)}") from None
        folder = cls(path, fd)
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
                raise StoreError(f"refusing --store {path}: it was replaced while being opened")
            folder._claim(writing)
        except BaseException:
            folder.close()
            raise
        return folder

    def _claim(self, writing: bool) -> None:
        try:
            names = os.listdir(self.fd)
        except OSError as exc:
            raise StoreError(f"cannot list --store {self.path}: {os_reason(exc)}") from None
        if MARKER in names:
            data = self.read_small(MARKER, 64)
            if data is not None and data.startswith(b"cgstat store "):
                return
            raise StoreError(f"refusing --store {self.path}: its {MARKER} is not cgstat's")
        if names:
            raise StoreError(f"refusing --store {self.path}: it holds files that are not a store of cgstat's "
                             f"(no {MARKER} file; give an empty or new folder)")
        if not writing:
            raise StoreError(f"--store {self.path} is empty: nothing recorded yet")
        fd = self.create(MARKER)
        try:
            os.write(fd, MARKER_TEXT)
        finally:
            os.close(fd)

    def create(self, name: str) -> int:
        """A new file of ours, 0600, for appending (O_EXCL: nothing there is reused)."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(name, flags, 0o600, dir_fd=self.fd)
        except OSError as exc:
            raise StoreError(f"cannot create {os.path.join(self.path, name)}: {os_reason(exc)}") from None

    def open_read(self, name: str) -> Optional[int]:
        """A descriptor on a regular file of the folder, None when it is gone or is not one."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def read_small(self, name: str, limit: int) -> Optional[bytes]:
        fd = self.open_read(name)
        if fd is None:
            return None
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def size(self, name: str) -> int:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_size
        except OSError:
            return 0

    def remove(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def shards(self) -> List[ShardName]:
        """The shards, in the order they were written (regular files only)."""
        out = []
        for name in os.listdir(self.fd):
            m = _SHARD.match(name)
            if m is None:
                continue
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append(ShardName(int(m.group(1)), m.group(2), name))
        out.sort()
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _made(path: str) -> os.stat_result:
    """The store folder's own status, made (0700) when missing, reached through folders no
    other user can change (safepath.py): root writes the store."""
    try:
        parent = open_folder(os.path.dirname(path), "--store", create=True, shown=path)
    except UnsafePath as exc:
        raise StoreError(str(exc)) from None
    name = os.path.basename(path)
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError as exc:
        raise StoreError(f"cannot create --store {path}: {os_reason(exc)}") from None
    finally:
        os.close(parent)
