"""Reading a recorded stream for the report: line by line (plain or .gz), never whole,
opened without blocking on a FIFO or following the last link."""

from __future__ import annotations

import gzip
import os
import stat
from typing import BinaryIO, Iterator

from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.text import escape_controls

MAX_LINE = 16 * 1024 * 1024
BAD_LINE = b"\x00"  # what lines() yields for a line too long to read (counted as bad)


def _open_stream(path: str) -> BinaryIO:
    """The stream file, opened without blocking on a FIFO or following the last link; only
    a regular file is read (a device such as /dev/zero would never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise CgstatError("cannot read %s: %s" % (escape_controls(path), os_reason(exc))) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CgstatError("cannot read %s: it is %s, not a stream file" % (escape_controls(path), file_kind(st.st_mode)))
    f = os.fdopen(fd, "rb")
    return gzip.GzipFile(fileobj=f, mode="rb") if path.endswith(".gz") else f  # type: ignore[return-value]


def lines(path: str) -> Iterator[bytes]:
    f = _open_stream(path)
    with f:
        try:
            while True:
                line = f.readline(MAX_LINE)
                if not line:
                    return
                if len(line) >= MAX_LINE and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # skip the rest of a giant line
                        line = f.readline(MAX_LINE)
                    yield BAD_LINE
                    continue
                yield line
        except (OSError, EOFError) as exc:
            raise CgstatError("cannot read %s: %s" % (escape_controls(path), exc)) from None
