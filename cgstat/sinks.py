"""Where records go: JSON lines on stdout or appended to a file.

Every batch is written whole or not at all: a file that fails mid-write (ENOSPC, EIO) is
truncated back to where the batch began, so a reader never sees half a line, and the
batch is kept (bounded) and retried on the next tick. SIGHUP makes a file sink reopen its
path (logrotate's move-and-create). A closed stdout (`cgstat stream | head`) ends the
stream quietly.
"""

from __future__ import annotations

import errno
import os
from typing import List, Optional

_PENDING_MAX_BYTES = 16 * 1024 * 1024


class ReaderGone(Exception):
    """stdout's reader went away (EPIPE): stop, successfully."""


class SinkError(Exception):
    """The output could not be written this time; the batch is kept for the next try."""


class Sink:
    def __init__(self, path: Optional[str] = None):
        self.path = path
        self.fd: Optional[int] = None if path else 1
        self._pending: List[bytes] = []
        self._pending_bytes = 0
        self.dropped_lines = 0

    def _open(self) -> int:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise SinkError(f"cannot open {self.path}: {os.strerror(exc.errno)}") from None
        return self.fd

    def reopen(self) -> None:
        """After logrotate moved the file away: write to a new file at the same path."""
        if self.path and self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def close(self) -> None:
        if self.path and self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def write(self, lines: List[bytes]) -> None:
        """Write this batch, after whatever earlier batches failed to go out.

        Batches go out oldest first, each whole or not at all; the first failure keeps it
        and the newer ones for the next tick. The backlog is bounded: past 16 MiB the
        oldest batches are dropped (and counted), so a disk full for hours costs memory
        once, not for ever.
        """
        if lines:
            batch = b"".join(lines)
            self._pending.append(batch)
            self._pending_bytes += len(batch)
        while self._pending_bytes > _PENDING_MAX_BYTES and len(self._pending) > 1:
            dropped = self._pending.pop(0)
            self._pending_bytes -= len(dropped)
            self.dropped_lines += dropped.count(b"\n")
        while self._pending:
            fd = self._open()
            if self.path:
                self._write_file(fd, self._pending[0])
            else:
                self._write_stream(fd, self._pending[0])
            self._pending_bytes -= len(self._pending.pop(0))

    def _write_file(self, fd: int, data: bytes) -> None:
        try:
            start = os.fstat(fd).st_size
        except OSError as exc:
            self.reopen()
            raise SinkError(f"{self.path}: {os.strerror(exc.errno)}") from None
        view = memoryview(data)
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError as exc:
            try:
                os.ftruncate(fd, start)  # never leave a partial line behind
            except OSError:
                pass
            raise SinkError(f"cannot write {self.path}: {os.strerror(exc.errno)}; will retry") from None

    def _write_stream(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                raise ReaderGone() from None
            raise SinkError(f"cannot write to stdout: {os.strerror(exc.errno)}") from None
