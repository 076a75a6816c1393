"""The JSON-lines sink: records serialised one line each, on stdout or appended to a file.

Every sink has the same small interface: `open()` (fail at start, not silently later),
`write(records)`, `reopen()` (SIGHUP) and `close()`. Serialising is done here, one
`text.dumps_record` per record (orjson, then the controls orjson leaves raw escaped); a
record that can't be serialised is dropped with a warning and the batch goes on.

Every batch is written whole or not at all: a file that fails mid-write (ENOSPC, EIO) is
truncated back to where the batch began, so a reader never sees half a line, and the
batch is kept (bounded) and retried on the next tick. SIGHUP makes a file sink reopen its
path (logrotate's move-and-create). A closed stdout (`cgstat stream | head`) ends the
stream quietly.

The output file is opened the safe way for a root process writing where others may
write: O_NOFOLLOW (a symlink at the path is refused, never followed), O_NONBLOCK and
O_NOCTTY (a FIFO or terminal placed there can't block or become ours), and the opened
file must be a regular file; a new file is created with mode 0600 (`--output-mode`).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Callable, Dict, Iterable, List, Optional

from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.kernel.hostfs import close_quietly
from cgstat.text import dumps_record, quote

_PENDING_MAX_BYTES = 16 * 1024 * 1024


class ReaderGone(Exception):
    """stdout's reader went away (EPIPE): stop, successfully."""


class SinkError(CgstatError):
    """The output could not be opened or written this time; the batch is kept for the next try."""


_FLAGS = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
          | os.O_NOCTTY)


def open_output(path: str, mode: int = 0o600) -> int:
    """An append descriptor on the regular file `path`, created with `mode` if missing.

    Refuses (SinkError) a symlink, a device, FIFO, socket or folder at the path. lstat first,
    so that no device is even opened (opening some has side effects), then fstat of what was
    opened, which also catches a swap between the two.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise SinkError(f"cannot open {path}: {os_reason(exc)}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise SinkError(f"refusing to write to {path}: {file_kind(st.st_mode)} (cgstat appends only to "
                        "regular files and writes through no link)")
    try:
        fd = os.open(path, _FLAGS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SinkError(f"refusing to write to {path}: a symbolic link (cgstat writes through no link)") from None
        raise SinkError(f"cannot open {path}: {os_reason(exc)}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SinkError(f"refusing to write to {path}: {file_kind(st.st_mode)}")
    return fd


class JsonLinesSink:
    """The batching, backlog and serialising shared by the stdout and file sinks."""

    def __init__(self, warn: Optional[Callable[[str, str], None]] = None):
        self.warn = warn
        self._pending: List[bytes] = []
        self._pending_bytes = 0
        self.dropped_lines = 0

    def open(self) -> None:
        """Open the output now (at start), so a path that can't be used fails the run at once."""

    def reopen(self) -> None:
        """After logrotate moved the file away: write to a new file at the same path."""

    def close(self) -> None:
        pass

    def serialise(self, records: Iterable[Dict[str, Any]]) -> bytes:
        lines = []
        for record in records:
            line = dumps_record(record)
            if line is None:
                if self.warn is not None:
                    self.warn("unserialisable", f"{quote(str(record.get('cgroup')))}: record dropped: "
                                                "it cannot be written as JSON")
                continue
            lines.append(line)
        return b"\n".join(lines) + b"\n" if lines else b""

    def write(self, records: Iterable[Dict[str, Any]]) -> None:
        """Write this batch, after whatever earlier batches failed to go out.

        Batches go out oldest first, each whole or not at all; the first failure keeps it
        and the newer ones for the next tick. The backlog is bounded: past 16 MiB the
        oldest batches are dropped (and counted), so a disk full for hours costs memory
        once, not for ever.
        """
        self.write_bytes(self.serialise(records))

    def write_bytes(self, batch: bytes) -> None:
        """Write already serialised whole lines (the same rules as write())."""
        if batch:
            self._pending.append(batch)
            self._pending_bytes += len(batch)
        while self._pending_bytes > _PENDING_MAX_BYTES and len(self._pending) > 1:
            dropped = self._pending.pop(0)
            self._pending_bytes -= len(dropped)
            self.dropped_lines += dropped.count(b"\n")
        while self._pending:
            self._write_one(self._pending[0])
            self._pending_bytes -= len(self._pending.pop(0))

    def _write_one(self, data: bytes) -> None:
        raise NotImplementedError


def _write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is out (a pipe or a signal may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class StdoutSink(JsonLinesSink):
    """Lines on stdout (or another descriptor we were given); a reader gone ends the run."""

    def __init__(self, warn: Optional[Callable[[str, str], None]] = None, fd: int = 1):
        super().__init__(warn)
        self.fd = fd

    def _write_one(self, data: bytes) -> None:
        try:
            _write_all(self.fd, data)
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                raise ReaderGone() from None
            raise SinkError(f"cannot write to stdout: {os_reason(exc)}") from None


class FileSink(JsonLinesSink):
    """Lines appended to a regular file, opened the safe way (see open_output)."""

    def __init__(self, path: str, mode: int = 0o600, warn: Optional[Callable[[str, str], None]] = None):
        super().__init__(warn)
        self.path = path
        self.mode = mode
        self.fd: Optional[int] = None

    def open(self) -> None:
        self._fd()

    def _fd(self) -> int:
        if self.fd is None:
            self.fd = open_output(self.path, self.mode)
        return self.fd

    def reopen(self) -> None:
        self.close()

    def close(self) -> None:
        close_quietly(self.fd)
        self.fd = None

    def _write_one(self, data: bytes) -> None:
        fd = self._fd()
        try:
            start = os.fstat(fd).st_size
        except OSError as exc:
            self.reopen()
            raise SinkError(f"{self.path}: {os_reason(exc)}") from None
        try:
            _write_all(fd, data)
        except OSError as exc:
            try:
                os.ftruncate(fd, start)  # never leave a partial line behind
            except OSError:
                pass
            raise SinkError(f"cannot write {self.path}: {os_reason(exc)}; will retry") from None
