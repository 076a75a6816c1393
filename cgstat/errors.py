"""The package's exception root: an expected failure that ends a run.

Everything cgstat raises on purpose derives from CgstatError; the command line turns it
into one line on stderr and exit status 1 (bad usage is typer's, exit status 2).
"""


class CgstatError(Exception):
    """An expected failure that ends the run: one line for stderr, exit status 1."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words, for a refusal message (from st_mode)."""
    import stat

    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def os_reason(exc: OSError) -> str:
    """The system's words for an OSError ("No such file or directory"), for one-line reasons."""
    import os

    return os.strerror(exc.errno) if exc.errno is not None else str(exc)
