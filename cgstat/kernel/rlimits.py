"""This process's open-file limit (RLIMIT_NOFILE, getrlimit(2)/setrlimit(2)): read to size
the descriptor cache, raised by the agent itself. Reads no files."""

from __future__ import annotations

import resource

# The soft RLIMIT_NOFILE the agent raises itself to, when the hard limit allows: enough for
# handles.DEFAULT_CAP kept descriptors plus the last quarter for everything else.
NOFILE_TARGET = 32768


def nofile_soft_limit() -> int:
    """The soft RLIMIT_NOFILE now; 1024 where it can't be read, 2**20 for unlimited."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return soft


def raise_nofile_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE towards NOFILE_TARGET (never above the hard
    limit, never lower) and return the soft limit; a KeptFiles made after sizes its cap
    from it.

    systemd starts services with a soft limit of 1024 (for programs that still use
    select(), which can't see descriptors from 1024 on) and a hard limit of 524288, and
    systemd.exec(5) asks programs that can work with more to raise their soft limit
    themselves. cgstat waits on descriptors only with epoll (selectors). Left at 1024, the
    cap would be 704 kept descriptors: a tick of 1,000 cgroups would open ~16,000 files.
    For the agent's own process only (the CLI calls it); a library user's limits are theirs.
    """
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = NOFILE_TARGET if hard == resource.RLIM_INFINITY else min(hard, NOFILE_TARGET)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    except (OSError, ValueError):  # a seccomp filter or a container refusing setrlimit
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft
