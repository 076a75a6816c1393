"""A file replaced whole or not at all (the state file, the report): written to a
temporary file in the same folder, flushed to the disk (fsync), then renamed over the
path, so a crash or a full disk never leaves a half-written file. rename() replaces the
name itself, never a link's target."""

from __future__ import annotations

import os
import tempfile
from typing import Optional, Tuple


class AtomicFile:
    """prepare() makes the temporary file (mode 0600: a folder that can't be written fails
    before anything else happens); commit(data) writes it and renames it into place;
    discard() removes it. Both raise OSError, leaving nothing behind."""

    def __init__(self, path: str, prefix: str):
        self.path = path
        self.prefix = prefix
        self._tmp: Optional[Tuple[int, str]] = None

    def prepare(self) -> "AtomicFile":
        folder = os.path.dirname(os.path.abspath(self.path))
        self._tmp = tempfile.mkstemp(prefix=self.prefix, suffix=".tmp", dir=folder)
        return self

    def commit(self, data: bytes) -> None:
        assert self._tmp is not None, "commit() once, after prepare()"
        fd, tmp = self._tmp
        self._tmp = None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            _unlink(tmp)
            raise

    def discard(self) -> None:
        if self._tmp is not None:
            fd, tmp = self._tmp
            self._tmp = None
            os.close(fd)
            _unlink(tmp)


def write_atomic(path: str, data: bytes, prefix: str) -> None:
    """`data` as the whole of `path` (mode 0600), or OSError and `path` untouched."""
    AtomicFile(path, prefix).prepare().commit(data)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
