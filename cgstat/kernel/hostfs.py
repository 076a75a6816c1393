"""Reading host files under a root folder (`--host-root`), with typed outcomes (`ReadError`).

Every host path the agent touches (/sys, /proc, /var/lib, /home, /etc) goes through
`HostFS.path()`, as node_exporter's `--path.rootfs` and psutil's PROCFS_PATH do, so the
same code reads the live host, a host mounted at /host inside a container, or a tree
recorded into tests/fixtures/. Files the agent does not own: see `read_untrusted`.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Collection, Iterable, List, Optional

from cgstat.errors import CgstatError

_GONE = {errno.ENOENT, errno.ENODEV, errno.ESRCH, errno.ENOTDIR}
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTSUP}
_DENIED = {errno.EACCES, errno.EPERM}

# Files we read are small (memory.stat is ~1.5 KiB, io.stat one line per device); a
# larger file is read in several chunks. Anything past this is not a cgroup file.
_CHUNK = 65536
_MAX_BYTES = 16 * 1024 * 1024


class ReadError(CgstatError):
    """A host file could not be turned into a value. `code` is what goes into records.

    A failed read is one of a few outcomes, kept apart because they mean different things
    to the user (below and containerd treat them the same way):

    - Gone:        ENOENT / ENODEV / ESRCH. The cgroup or process went away between listing
                   and reading; a read on an already open cgroup file of a removed cgroup
                   fails with ENODEV.
    - Unsupported: EOPNOTSUPP. e.g. pressure files on a kernel built without PSI.
    - Denied:      EACCES / EPERM. Not root, or a hardened mount.
    - Malformed:   the bytes are not what the kernel documents (not UTF-8, not a number...).
    - ReadFailed:  any other OSError (EIO...).
    - Untrusted:   a file of someone else's that the trust rules refuse (a symlink, not a
                   regular file, the wrong owner); only `read_untrusted` raises it, never a
                   cgroup read, so it never reaches a record.
    """

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


class Untrusted(ReadError):
    code = "untrusted"


def read_error(exc: OSError, path: str) -> ReadError:
    """Map an OSError to the outcome it means for a cgroup or proc file."""
    err = exc.errno
    detail = os.strerror(err) if err else str(exc)
    if err == errno.ELOOP:
        # open(2) with O_NOFOLLOW on a symbolic link fails with ELOOP.
        return Untrusted(path, "a symbolic link")
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
        raise read_error(exc, path) from None
    try:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return chunk
        # Read on to EOF: a short read is not the end. seq_file (procfs, cgroupfs) fills a
        # read with whole records up to its buffer, one page at first (fs/seq_file.c
        # seq_read_iter), so a file of many records (mountinfo on a host with many mounts,
        # cgroup.procs of a big cgroup, net/dev) comes a page at a time; only a file that is
        # one record (most cgroup files) comes whole.
        return chunk + _read_rest(fd, path, _MAX_BYTES - len(chunk), _CHUNK)
    except OSError as exc:
        raise read_error(exc, path) from None
    finally:
        os.close(fd)


def _read_rest(fd: int, path: str, max_bytes: int, chunk_size: int) -> bytes:
    """The rest of an open file, at most max_bytes (Malformed past that)."""
    chunks: List[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(chunk_size, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise Malformed(path, f"larger than {max_bytes} bytes")


def read_text(path: str) -> str:
    """Read a whole file as text; kernel files are ASCII, anything else is Malformed."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(path, "not UTF-8 text") from None


# Files the agent does not own (runtime state, users' container stores) are opened only
# through `read_untrusted` / `open_dir_under`: never following a link, never blocking on a
# FIFO or a device, size-capped before reading.
# open(2) flags for a file someone else may have planted:
# - O_NOFOLLOW: a symlink as the last component fails (ELOOP) instead of leading root to
#   /dev/sda, /etc/shadow or another user's store;
# - O_NONBLOCK: open() of a FIFO with no writer returns at once instead of waiting for ever
#   (fifo(7)); a device's open() does not wait for carrier or media either;
# - O_NOCTTY: a terminal never becomes our controlling terminal.
# fstat() on the open descriptor then decides (no race with a rename between check and use).
_UNTRUSTED_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_UNTRUSTED_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_DIRECTORY | os.O_CLOEXEC


def _check_owner(st: os.stat_result, path: str, owners: Optional[Collection[int]]) -> None:
    if owners is not None and st.st_uid not in owners:
        raise Untrusted(path, f"owned by uid {st.st_uid}, not by {sorted(owners)}")


def open_untrusted(path: str, max_bytes: int, owners: Optional[Collection[int]] = None,
                   dir_fd: Optional[int] = None) -> int:
    """An open descriptor of a regular file no larger than max_bytes (the caller closes it).

    `owners`: the uids that may own it (None: any). Raises Untrusted for a symlink, a
    non-regular file (FIFO, device, socket, folder) or the wrong owner, Malformed when
    too large, and the usual Gone/Denied/ReadFailed.
    """
    try:
        fd = os.open(path, _UNTRUSTED_FILE, dir_fd=dir_fd)
    except OSError as exc:
        raise read_error(exc, path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(path, "not a regular file")
        _check_owner(st, path, owners)
        if st.st_size > max_bytes:
            raise Malformed(path, f"{st.st_size} bytes, more than {max_bytes}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_untrusted(path: str, max_bytes: int, owners: Optional[Collection[int]] = None,
                   dir_fd: Optional[int] = None) -> bytes:
    """The whole content of a file the agent does not own (see open_untrusted).

    st_size is checked before reading and the read itself stops at max_bytes + 1, so a
    file that grows after fstat() can't make us read more.
    """
    fd = open_untrusted(path, max_bytes, owners, dir_fd)
    try:
        return _read_rest(fd, path, max_bytes, _CHUNK * 16)
    except OSError as exc:
        raise read_error(exc, path) from None
    finally:
        os.close(fd)


def open_dir_under(base: str, parts: Iterable[str], owners: Optional[Collection[int]] = None) -> int:
    """A descriptor of the folder base/parts[0]/parts[1]/..., the caller closes it.

    `base` is a fixed, administrator-chosen path (it may be a link, e.g. /var/lib/docker
    moved to another disk); every one of `parts` is opened relative to its parent's
    descriptor with O_NOFOLLOW, so a link anywhere below base is refused (Untrusted) and
    a folder swapped for a link between two opens is refused too. With `owners`, base and
    each part must be owned by one of those uids.
    """
    path = base
    try:
        fd = os.open(base, _UNTRUSTED_DIR & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise read_error(exc, base) from None
    try:
        _check_owner(os.fstat(fd), base, owners)
        for part in parts:
            if not part or part in (".", "..") or "/" in part:
                raise Untrusted(path, f"bad path component {part!r}")
            path = path + "/" + part
            try:
                child = os.open(part, _UNTRUSTED_DIR, dir_fd=fd)
            except OSError as exc:
                # ENOTDIR: a regular file where a folder should be; ELOOP: a link.
                raise read_error(exc, path) from None
            os.close(fd)
            fd = child
            _check_owner(os.fstat(fd), path, owners)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_under(base: str, parts: Iterable[str], max_bytes: int,
               owners: Optional[Collection[int]] = None) -> bytes:
    """read_untrusted of base/parts..., every part below base opened without following
    a link (see open_dir_under); the file, too, must be owned by one of `owners`."""
    parts = list(parts)
    fd = open_dir_under(base, parts[:-1], owners)
    try:
        return read_untrusted(parts[-1], max_bytes, owners, dir_fd=fd)
    except ReadError as exc:
        exc.path = base + "/" + "/".join(parts)
        raise
    finally:
        os.close(fd)


def list_dir_fd(fd: int, path: str):
    """Names of the sub-folders of an open folder, links and other files left out."""
    out = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        out.append(entry.name)
                except OSError:
                    continue
    except OSError as exc:
        raise read_error(exc, path) from None
    return out


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


def close_quietly(fd: Optional[int]) -> None:
    """Close a descriptor we own; an error at close (EIO on a gone file) changes nothing."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
