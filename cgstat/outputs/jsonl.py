"""The JSON-lines sink: records serialised one line each, on stdout or appended to a file,
every batch written whole or not at all (JsonLinesSink, StdoutSink, FileSink). Reads only
its own output file back (/proc/self/fd/N, after a failed write); the file is opened the
safe way (see the comment above _FLAGS).
"""

from __future__ import annotations

import collections
import errno
import os
import stat
from typing import TYPE_CHECKING, Callable, Deque, Iterable, Iterator, List, Optional

from cgstat.errors import file_kind, os_reason
from cgstat.kernel.hostfs import close_quietly
from cgstat.pipeline.sinks import (NO_INFO, Chunker, ChunkSink, LineOf, ReaderGone, SinkError, TickInfo,
                                   line_or_say)
from cgstat.safepath import UnsafePath, place
from cgstat.text import batch_lines, dumps_record

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject

_PENDING_MAX_BYTES = 16 * 1024 * 1024
# Serialised lines are written in pieces of about this size: few enough writes, and the
# batch's bytes never in memory whole (the peak RSS of a tick at 1,000 cgroups was the
# joined batch, ~3.7 MB, with its lines and the copies made to join them). A piece and the
# lines it is joined from are then a tick's peak; a pipe's default capacity
# (64 KiB) is as much as one write() hands a reader anyway.
_CHUNK_BYTES = 64 * 1024

# The output file is opened the safe way for a root process writing where others may
# write: through folders no other user can change (safepath.py), O_NOFOLLOW (a symlink at
# the path is refused, never followed), O_NONBLOCK and O_NOCTTY (a FIFO or terminal placed
# there can't block or become ours), and the opened file must be a regular file; a new file
# is created with mode 0600 (`--output-mode`).
_FLAGS = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
          | os.O_NOCTTY)

def open_output(path: str, mode: int = 0o600) -> int:
    """An append descriptor on the regular file `path`, created with `mode` if missing.

    Refuses (SinkError) a symlink, a device, FIFO, socket or folder at the path, a folder on
    the way that is a link or another user could change (safepath.py), and an existing file
    of another user's or one others may write beyond `mode`. lstat first, so that no device
    is even opened (opening some has side effects), then fstat of what was opened, which
    also catches a swap between the two.
    """
    try:
        with place(path, "--output") as where:
            st = where.lstat()
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise SinkError(f"refusing to write to {path}: {file_kind(st.st_mode)} (cgstat appends only to "
                                "regular files and writes through no link)")
            if st is not None:
                where.check_owned(st, mode)
            try:
                fd = where.open(_FLAGS, mode)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise SinkError(f"refusing to write to {path}: a symbolic link (cgstat writes through no "
                                    "link)") from None
                raise SinkError(f"cannot open {path}: {os_reason(exc)}") from None
    except UnsafePath as exc:
        if exc.errno is not None:  # not refused: the system's reason, as for the file itself
            raise SinkError(f"cannot open {path}: {os.strerror(exc.errno)}") from None
        raise SinkError(str(exc)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SinkError(f"refusing to write to {path}: {file_kind(st.st_mode)}")
    return fd

class _Lines(Chunker):
    """One batch's lines joined into pieces of about _CHUNK_BYTES (each ends with a newline)."""

    def __init__(self, line_of: LineOf, warn: Optional[Callable[[str, str], None]]):
        self.line_of = line_of
        self.warn = warn
        self.lines: List[bytes] = []
        self.size = 0

    def add(self, record: JsonObject) -> Optional[bytes]:
        line = line_or_say(self.line_of, record, self.warn)
        if line is None:
            return None
        self.lines.append(line)
        self.size += len(line) + 1
        return self.end() if self.size >= _CHUNK_BYTES else None

    def end(self) -> Optional[bytes]:
        if not self.lines:
            return None
        lines = self.lines
        lines.append(b"")  # the last line's newline, without copying the piece again
        self.lines = []
        self.size = 0
        return b"\n".join(lines)

# These are sinks (pipeline/sinks.py: `open()`, fail at start, not silently later;
# `write(records)`; `reopen()` on SIGHUP; `close()`). Serialising is done here, one
# `text.dumps_record` per record (orjson, then the controls orjson leaves raw escaped); a
# record that can't be serialised is dropped with a warning and the batch goes on. A batch
# is serialised and written in chunks of about 64 KiB, never joined into one bytes object;
# its records may come one at a time (stream), so that they never all exist at once.
class JsonLinesSink(ChunkSink):
    """The batching, backlog and serialising shared by the stdout and file sinks."""

    streams = True
    wants_lines = True

    def __init__(self, warn: Optional[Callable[[str, str], None]] = None):
        self.warn = warn
        self._pending: Deque[bytes] = collections.deque()  # serialised batches not yet out, oldest first
        self._pending_bytes = 0
        self._head_continues = False  # _pending[0] is the rest of a line stdout began
        self.dropped_lines = 0
        self._line_of: LineOf = dumps_record

    def share_lines(self, line_of: LineOf) -> None:
        self._line_of = line_of

    def chunker(self, quiet: bool = False) -> Chunker:
        """The batch as whole lines, in pieces of about _CHUNK_BYTES; `quiet`: no warning
        for a record dropped (the batch serialised again for the backlog, see FileSink)."""
        return _Lines(self._line_of if self._line_of is not dumps_record else batch_lines(),
                      None if quiet else self.warn)

    def serialise(self, records: Iterable[JsonObject]) -> bytes:
        """The batch as one bytes object of whole lines (for tests and callers that want it)."""
        return b"".join(self.chunks(list(records)))

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        """Write this batch, after whatever earlier batches failed to go out.

        The batch is serialised and written a chunk at a time (about 64 KiB), so its bytes
        never sit in memory whole: at 1,000 cgroups a batch is ~3.7 MB. `records` may be a
        list or an iterator that makes each record as it is taken (Sampler.records): then
        no more than a chunk's records exist at once. Batches go out oldest first, each
        whole or not at all (see the sinks' _write_batch); a failure keeps the batch, and
        any newer one, for the next tick. The backlog is bounded: past 16 MiB the oldest
        batches are dropped (and counted), so a disk full for hours costs memory once, not
        for ever.
        """
        if isinstance(records, (list, tuple)):
            batch = records
            self._send(self.chunks(batch), lambda: b"".join(self.chunks(batch, quiet=True)))
        else:
            self._send(self.chunks(records), None)  # one pass: no second serialising

    def write_bytes(self, batch: bytes) -> None:
        """Write already serialised whole lines (the same rules as write())."""
        self._send(iter((batch,) if batch else ()), lambda: batch)

    def write_chunks(self, chunks: Iterator[bytes]) -> None:
        """Write one batch given as the pieces chunks() made (the same rules as write());
        QueuedSink's thread writes what the tick's thread serialised this way."""
        self._send(chunks, None)

    def _send(self, chunks: Iterator[bytes], whole: Optional[Callable[[], bytes]]) -> None:
        if self._pending:
            try:
                self._drain()
            except SinkError:
                self._keep(b"".join(chunks))  # behind the older ones: the order is kept
                raise
        self._write_batch(chunks, whole, self._keep)

    def _drain(self) -> None:
        """Write the kept batches, oldest first; the first failure keeps it at the front."""
        while self._pending:
            data = self._pending.popleft()
            self._pending_bytes -= len(data)
            self._write_batch(iter((data,)), lambda: data, self._keep_first)
            self._head_continues = False

    def _keep(self, data: bytes) -> None:
        """Keep a batch that did not go out, dropping the oldest whole ones past the bound."""
        if not data:
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        # A head that continues a line already begun on stdout is never dropped: the line
        # would be left half.
        first = 1 if self._head_continues else 0
        while self._pending_bytes > _PENDING_MAX_BYTES and len(self._pending) > first + 1:
            dropped = self._pending[first]
            del self._pending[first]
            self._pending_bytes -= len(dropped)
            self.dropped_lines += dropped.count(b"\n")

    def _keep_first(self, data: bytes) -> None:
        if data:
            self._pending.appendleft(data)
            self._pending_bytes += len(data)

    def _write_batch(self, chunks: Iterator[bytes], whole: Optional[Callable[[], bytes]],
                     keep: Callable[[bytes], None]) -> None:
        """Write one batch's chunks; on failure `keep` what must be tried again (the batch,
        or what of it did not go out) and raise SinkError. `whole()` makes the batch again;
        None when it can't be (its records came one at a time)."""
        raise NotImplementedError

def _read_back(fd: int, start: int, size: int) -> bytes:
    """The `size` bytes written from `start` of the file open (write-only) as `fd`: read
    through a second, read-only open of the same file (/proc/self/fd names it even when
    its path was moved). A write that failed for want of room (ENOSPC, EDQUOT, EFBIG)
    leaves what had gone out readable; should it not be (EIO, or a file its own writer
    can't read), what can't be read back is lost with the batch's start: lines at most
    once, never half of one."""
    try:
        rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        parts: List[bytes] = []
        got = 0
        while got < size:
            piece = os.pread(rfd, size - got, start + got)
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        data = b"".join(parts)
    except OSError:
        return b""
    finally:
        os.close(rfd)
    # whole lines only: a short read-back keeps what ends with its last newline
    return data if len(data) == size else data[:data.rfind(b"\n") + 1]

def _cut_back(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass

def _write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is out (a pipe or a signal may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]

# On stdout, which can't be cut back, what did not go out is kept, so the line begun is
# completed first on the next tick. A closed stdout (`cgstat stream | head`) ends the stream
# quietly. A stdout that is a pipe, socket or terminal can block (a reader that stops
# reading): `stream` writes it from its own thread (outputs/queued.py), so the tick never
# waits for it.
class StdoutSink(JsonLinesSink):
    """Lines on stdout (or another descriptor we were given); a reader gone ends the run."""

    label = "stdout"

    def __init__(self, warn: Optional[Callable[[str, str], None]] = None, fd: int = 1):
        super().__init__(warn)
        self.fd = fd

    def may_block(self) -> bool:
        """A pipe, socket or terminal: a reader that stops reading stops our write (a
        regular file or /dev/null never waits on anyone)."""
        try:
            mode = os.fstat(self.fd).st_mode
        except OSError:
            return False
        return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(self.fd)

    def _write_batch(self, chunks: Iterator[bytes], whole: Optional[Callable[[], bytes]],
                     keep: Callable[[bytes], None]) -> None:
        # Chunks are whole lines: should the records stop coming half-way (an error while
        # the tick is read), what went out is whole lines.
        for chunk in chunks:
            view = memoryview(chunk)
            try:
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    raise ReaderGone() from None
                # What went out stays out (stdout can't be cut back): the rest, which
                # completes the line begun, is what the next tick writes first.
                if len(view) < len(chunk):
                    self._head_continues = True  # what is kept goes first (pending was empty, or it is the head)
                keep(bytes(view) + b"".join(chunks))
                raise SinkError(f"cannot write to stdout: {os_reason(exc)}") from None

# Every batch is written whole or not at all: a file that fails mid-write (ENOSPC, EIO) is
# truncated back to where the batch began, so a reader never sees half a line, and the
# batch is kept (bounded) and retried on the next tick (what of it had gone out is read back
# from the file first; a file that can't be read back loses those lines, whole).
# SIGHUP makes a file sink reopen its path (logrotate's move-and-create).
class FileSink(JsonLinesSink):
    """Lines appended to a regular file, opened the safe way (see open_output)."""

    def __init__(self, path: str, mode: int = 0o600, warn: Optional[Callable[[str, str], None]] = None):
        super().__init__(warn)
        self.path = path
        self.label = path
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

    def _write_batch(self, chunks: Iterator[bytes], whole: Optional[Callable[[], bytes]],
                     keep: Callable[[bytes], None]) -> None:
        try:
            fd = self._fd()
        except SinkError:
            keep(b"".join(chunks))
            raise
        try:
            start = os.fstat(fd).st_size
        except OSError as exc:
            self.reopen()
            keep(b"".join(chunks))
            raise SinkError(f"{self.path}: {os_reason(exc)}") from None
        # What of the batch has gone out: should a later chunk fail and the batch not be
        # made again (its records came one at a time), those bytes are read back from the
        # file before it is cut back, rather than held here until the batch is out (~1.9 KB
        # a record: at 1,000 cgroups most of a tick's peak memory).
        sent = 0
        written = False
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except BaseException:
                _cut_back(fd, start)  # the records stopped coming half-way: none of the batch stays
                raise
            try:
                _write_all(fd, chunk)
            except OSError as exc:
                # The batch is kept whole: what of it had gone out (read back before it is
                # cut back), this chunk and the rest; or, when earlier chunks had gone out
                # of a batch that can be made again, that (the same records give the same
                # bytes). Only a failing output holds a whole batch in memory.
                done = b"" if not written else _read_back(fd, start, sent) if whole is None else None
                _cut_back(fd, start)  # never leave a partial line behind, nor part of a batch
                if done is None:
                    assert whole is not None
                    keep(whole())
                else:
                    keep(done + chunk + b"".join(chunks))
                raise SinkError(f"cannot write {self.path}: {os_reason(exc)}; will retry") from None
            written = True
            sent += len(chunk)
