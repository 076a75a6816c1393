"""The package's exception root, and the words its refusal messages share.

Everything cgstat raises on purpose derives from CgstatError. Whether one ends anything
depends on where it is caught: one that reaches the command line (a bad --match, a host
root it cannot read) ends the run as one line on stderr and exit status 1 (bad usage is
typer's, exit status 2); a ReadError (kernel/hostfs.py), one host file that could not be
read, is the routine kind: the reader catches it, the field is null, the record's `errors`
says why, and the run goes on.
"""


class CgstatError(Exception):
    """An expected failure, with one line for a person (str(exc)): where nothing catches it
    before the command line, the run ends with that line and exit status 1."""


def file_kind(mode: int) -> str:
    """What a file is, in words, for a refusal message (from st_mode): "a FIFO", "a regular
    file" (where a folder was wanted)."""
    import stat

    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def os_reason(exc: OSError) -> str:
    """The system's words for an OSError ("No such file or directory"), for one-line reasons."""
    import os

    return os.strerror(exc.errno) if exc.errno is not None else str(exc)



def require_regular(path: str, what: str) -> None:
    """CgstatError (one line, `what` naming the file as the user gave it) unless `path`, its
    links followed, is a regular file: for files a library opens itself (ssl's certificates
    and keys), where a FIFO blocks the open for ever and a device is read without end."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise CgstatError(f"cannot read {what}: {os_reason(exc)}") from None
    if not stat.S_ISREG(mode):
        raise CgstatError(f"refusing {what}: {file_kind(mode)}, not a regular file")
