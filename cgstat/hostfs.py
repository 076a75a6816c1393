"""Reading host files under a root folder (`--host-root`), with typed outcomes.

Every host path the agent touches (/sys, /proc, /var/lib, /home, /etc) goes through
`HostFS.path()`, as node_exporter's `--path.rootfs` and psutil's PROCFS_PATH do, so the
same code reads the live host, a host mounted at /host inside a container, or a tree
recorded into tests/fixtures/.

A failed read is one of a few outcomes, kept apart because they mean different things
to the user (below and containerd treat them the same way):

- Gone:        ENOENT / ENODEV / ESRCH. The cgroup or process went away between listing
               and reading; a read on an already open cgroup file of a removed cgroup
               fails with ENODEV.
- Unsupported: EOPNOTSUPP. e.g. pressure files on a kernel built without PSI.
- Denied:      EACCES / EPERM. Not root, or a hardened mount.
- Malformed:   the bytes are not what the kernel documents (not UTF-8, not a number...).
- ReadFailed:  any other OSError (EIO...).
"""

from __future__ import annotations

import errno
import os

_GONE = {errno.ENOENT, errno.ENODEV, errno.ESRCH, errno.ENOTDIR}
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTSUP}
_DENIED = {errno.EACCES, errno.EPERM}

# Files we read are small (memory.stat is ~1.5 KiB, io.stat one line per device); a
# larger file is read in several chunks. Anything past this is not a cgroup file.
_CHUNK = 65536
_MAX_BYTES = 16 * 1024 * 1024


class ReadError(Exception):
    """A host file could not be turned into a value. `code` is what goes into records."""

    code = "read_failed"

    def __init__(self, path: str, detail: str):
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


class Gone(ReadError):
    code = "gone"


class Unsupported(ReadError):
    code = "unsupported"


class Denied(ReadError):
    code = "permission_denied"


class Malformed(ReadError):
    code = "malformed"


class ReadFailed(ReadError):
    code = "read_failed"


def classify(exc: OSError, path: str) -> ReadError:
    """Map an OSError to the outcome it means for a cgroup or proc file."""
    err = exc.errno
    detail = os.strerror(err) if err else str(exc)
    if err in _GONE:
        return Gone(path, detail)
    if err in _UNSUPPORTED:
        return Unsupported(path, detail)
    if err in _DENIED:
        return Denied(path, detail)
    return ReadFailed(path, detail)


def read_bytes(path: str) -> bytes:
    """Read a whole file with plain syscalls (cgroupfs and procfs report st_size 0)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise classify(exc, path) from None
    try:
        chunks = []
        total = 0
        while True:
            chunk = os.read(fd, _CHUNK)
            if len(chunk) < _CHUNK and not chunks:
                # The common case: one short read is the whole file. cgroupfs and procfs
                # (seq_file) fill the buffer up to EOF, so a short read means EOF; this
                # saves the second read() that would only return b"".
                return chunk
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > _MAX_BYTES:
                raise Malformed(path, f"larger than {_MAX_BYTES} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise classify(exc, path) from None
    finally:
        os.close(fd)


def read_text(path: str) -> str:
    """Read a whole file as text; kernel files are ASCII, anything else is Malformed."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(path, "not UTF-8 text") from None


class HostFS:
    """Paths and reads under the host root."""

    def __init__(self, root: str = "/"):
        self.root = os.path.abspath(root or "/")
        self.is_slash = self.root == "/"

    def path(self, host_path: str) -> str:
        """The local path of an absolute host path, e.g. '/proc/1/cgroup'."""
        if self.is_slash:
            return host_path
        return self.root + host_path

    def read_text(self, host_path: str) -> str:
        return read_text(self.path(host_path))

    def read_optional(self, host_path: str):
        """Text of a host file, or None when it is absent or unreadable."""
        try:
            return read_text(self.path(host_path))
        except ReadError:
            return None
