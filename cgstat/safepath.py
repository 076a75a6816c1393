"""The way to every file cgstat creates, appends to or replaces (--output, --state and its
lock, --log-state, report -o, the store): checked all the way down from `/`.

A path is walked one component at a time (openat, O_NOFOLLOW|O_DIRECTORY), each folder kept
only when no other user can change what lies below it (see `open_folder`); the caller opens
the file relative to the last folder's descriptor (`Place`). Reads no kernel files.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Optional

from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.text import escape_controls

SYSTEM_GID_MAX = 999  # login.defs' SYS_GID_MAX: groups below are the system's own
MAX_LINKS = 40  # links followed on one walk (the kernel's own limit, MAXSYMLINKS)
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(CgstatError):
    """A path another user could steer, or that can't be reached (then `errno` says why);
    nothing was written."""

    def __init__(self, message: str, errno_: Optional[int] = None):
        super().__init__(message)
        self.errno = errno_


def _shown(path: str) -> str:
    return escape_controls(path)  # a path may hold any byte but NUL


def _trusted(uid: int) -> bool:
    return uid == 0 or uid == os.geteuid()


# cgstat runs as root with paths an administrator names, and other users may own or write
# folders on the way (/tmp, a home). A folder is kept when owned by root or by the user
# cgstat runs as, and not writable by others unless the sticky bit keeps them from renaming
# what is not theirs (a root /tmp is fine; a user's folder inside it is not). A group may
# write a folder only when it is a system group (gid below 1000, login.defs' SYS_GID_MAX):
# Ubuntu's /var/log is root:syslog 0775. OpenSSH's StrictModes and systemd's chase() with
# CHASE_SAFE make the same walk. When cgstat is not root, the same rules hold with that
# user in root's place: a user's own paths work as before.
def folder_problem(st: os.stat_result) -> Optional[str]:
    """Why another user could change what lies in this folder, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return f"it is {file_kind(st.st_mode)}"
    if not _trusted(st.st_uid):
        return f"it belongs to uid {st.st_uid}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_ISVTX:
        return None  # others may add, but rename or remove only what is theirs
    if mode & 0o002:
        return f"every user may write in it (mode {mode:o}, no sticky bit)"
    if mode & 0o020 and st.st_gid > SYSTEM_GID_MAX:
        return f"group {st.st_gid} may write in it (mode {mode:o}, no sticky bit)"
    return None


# The caller opens the file relative to the last folder's descriptor, so a folder swapped
# for a link after the check is never followed. An existing file is used only when it is the
# running user's and no one else may write it, beyond the mode cgstat was asked to create it
# with (`check_owned`).
class Place:
    """A checked folder's descriptor (`fd`) and a name in it (`name`); every use of the file
    is relative to the descriptor. Close it (or use it as a context manager)."""

    def __init__(self, path: str, fd: int, name: str, what: str):
        self.path = path
        self.fd = fd
        self.name = name
        self.what = what

    def __enter__(self) -> "Place":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def lstat(self, name: Optional[str] = None) -> Optional[os.stat_result]:
        """The file's own status (a link is not followed), None when missing."""
        try:
            return os.stat(name or self.name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise UnsafePath(f"cannot use {self.what} {_shown(self.path)}: {os_reason(exc)}", exc.errno) from None

    def open(self, flags: int, mode: int = 0o600, name: Optional[str] = None) -> int:
        """os.open relative to the folder, never following a link at the name."""
        return os.open(name or self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)

    def check_owned(self, st: os.stat_result, mode: int = 0o600, path: Optional[str] = None,
                    what: Optional[str] = None) -> None:
        """Refuse an existing file of another user's, or one others may write (beyond `mode`):
        what another user owns or may write, they may also have read, or be watching."""
        me = os.geteuid()
        shown, what = _shown(path or self.path), what or self.what
        if st.st_uid != me:
            raise UnsafePath(f"refusing {what} {shown}: it belongs to uid {st.st_uid}, not to "
                             f"the user cgstat runs as (uid {me}); cgstat writes no other user's file")
        loose = stat.S_IMODE(st.st_mode) & 0o022 & ~mode
        if loose:
            raise UnsafePath(f"refusing {what} {shown}: other users may write to it "
                             f"(mode {stat.S_IMODE(st.st_mode):o}); chmod go-w it")


def open_folder(path: str, what: str, create: bool = False, shown: Optional[str] = None) -> int:
    """A descriptor (O_PATH) of the folder `path`, reached from `/` one checked component at
    a time; missing levels made 0700 when `create`. UnsafePath (one line) when a folder on
    the way is not a folder, or one another user could change, or a link another user owns.

    A link of root's or the running user's, in a folder already checked, is followed (its
    target walked the same way, at most MAX_LINKS of them, as the kernel's limit): systemd
    makes /var/log/NAME a link to private/NAME for a DynamicUser= service, and only they
    could have made it. chase() with CHASE_SAFE follows such links too."""
    path = os.path.abspath(path)
    shown = _shown(shown or path)
    fd = os.open("/", _WALK_FLAGS)
    walked = ""
    todo = [part for part in path.split("/") if part]
    links = 0
    try:
        _check_folder(fd, "/", shown, what)
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            walked = os.path.normpath(walked + "/" + part) if walked else "/" + part
            nfd = _step(fd, part, walked, shown, what, create)
            if nfd is None:  # a link of root's or ours: walk its target instead
                links += 1
                if links > MAX_LINKS:
                    raise UnsafePath(f"cannot use {what} {shown}: {os.strerror(errno.ELOOP)}", errno.ELOOP)
                target = os.readlink(part, dir_fd=fd)
                walked = os.path.dirname(walked)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _WALK_FLAGS)
                    walked = ""
                todo[:0] = [p for p in target.split("/") if p]
                continue
            os.close(fd)
            fd = nfd
            _check_folder(fd, walked or "/", shown, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def place(path: str, what: str, create: bool = False) -> Place:
    """The checked folder of the file `path` and the file's name in it (see open_folder)."""
    full = os.path.abspath(path)
    folder, name = os.path.split(full)
    if not name or name in (".", ".."):
        raise UnsafePath(f"cannot use {what} {_shown(path)}: it names no file")
    return Place(path, open_folder(folder, what, create, shown=full), name, what)


def _step(fd: int, part: str, walked: str, shown: str, what: str, create: bool) -> Optional[int]:
    """The folder `part` in `fd` opened (O_PATH, no link followed); None for a link root or
    the running user owns, which the caller follows."""
    try:
        return os.open(part, _WALK_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise UnsafePath(f"cannot use {what} {shown}: {os.strerror(errno.ENOENT)}", errno.ENOENT) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                st: Optional[os.stat_result] = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except OSError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                if _trusted(st.st_uid):
                    return None
                raise UnsafePath(f"refusing {what} {shown}: {_shown(walked)} is a symbolic link of uid "
                                 f"{st.st_uid} (cgstat follows only root's or its own user's links on the way "
                                 "to a file it writes)") from None
            raise UnsafePath(f"cannot use {what} {shown}: {os.strerror(errno.ENOTDIR)}", errno.ENOTDIR) from None
        raise UnsafePath(f"cannot use {what} {shown}: {_shown(walked)}: {os_reason(exc)}", exc.errno) from None
    try:
        os.mkdir(part, 0o700, dir_fd=fd)
    except FileExistsError:
        pass  # made meanwhile: opened and checked below like any other
    except OSError as exc:
        raise UnsafePath(f"cannot create folder {_shown(walked)} for {what} {shown}: {os_reason(exc)}",
                         exc.errno) from None
    return _step(fd, part, walked, shown, what, False)


def _check_folder(fd: int, walked: str, shown: str, what: str) -> None:
    problem = folder_problem(os.fstat(fd))
    if problem is not None:
        raise UnsafePath(f"refusing {what} {shown}: the folder {_shown(walked)} is not safe: {problem} "
                         "(another user could swap what lies below it)")
