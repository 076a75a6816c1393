"""A file replaced whole or not at all (the state file, the report, the log place): written
to a temporary file in the same folder, flushed to the disk (fsync), then renamed over the
path, so a crash or a full disk never leaves a half-written file. rename() replaces the
name itself, never a link's target. The folder is reached the checked way (safepath.py):
every step relative to its descriptor, through no link and no folder another user could
change; an existing file of another user's, or one others may write, is refused."""

from __future__ import annotations

import binascii
import os
import stat
from typing import Optional, Tuple

from cgstat.safepath import Place, place

_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL


class AtomicFile:
    """prepare() makes the temporary file (mode 0600: a folder that can't be written fails
    before anything else happens); commit(data) writes it and renames it into place;
    discard() removes it. prepare raises UnsafePath (a refused path) or OSError, commit
    OSError, leaving nothing behind. `where`: the file's checked place, when the caller has
    it already (it stays the caller's to close)."""

    def __init__(self, path: str, prefix: str, what: str = "file", where: Optional[Place] = None):
        self.path = path
        self.prefix = prefix
        self.what = what
        self._where = where
        self._own: Optional[Place] = None
        self._tmp: Optional[Tuple[int, str]] = None

    def prepare(self) -> "AtomicFile":
        where = self._where
        if where is None:
            where = self._own = place(self.path, self.what)
        try:
            st = where.lstat()
            if st is not None and stat.S_ISREG(st.st_mode):
                where.check_owned(st)
            for _ in range(100):
                name = self.prefix + binascii.hexlify(os.urandom(6)).decode() + ".tmp"
                try:
                    self._tmp = (where.open(_TMP_FLAGS, 0o600, name), name)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"no free temporary name beside {self.path}")
        except BaseException:
            self._close_own()
            raise
        return self

    def _place(self) -> Place:
        where = self._where or self._own
        assert where is not None, "after prepare()"
        return where

    def commit(self, data: bytes) -> None:
        assert self._tmp is not None, "commit() once, after prepare()"
        fd, tmp = self._tmp
        self._tmp = None
        where = self._place()
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, where.name, src_dir_fd=where.fd, dst_dir_fd=where.fd)
        except OSError:
            _unlink(where, tmp)
            raise
        finally:
            self._close_own()

    def discard(self) -> None:
        if self._tmp is not None:
            fd, tmp = self._tmp
            self._tmp = None
            os.close(fd)
            _unlink(self._place(), tmp)
        self._close_own()

    def _close_own(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None


def write_atomic(path: str, data: bytes, prefix: str, what: str = "file") -> None:
    """`data` as the whole of `path` (mode 0600), or UnsafePath/OSError and `path` untouched."""
    AtomicFile(path, prefix, what).prepare().commit(data)


def _unlink(where: Place, name: str) -> None:
    try:
        os.unlink(name, dir_fd=where.fd)
    except OSError:
        pass
