"""The Sampler a run mode samples with, made for the command line's options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Pattern

from cgstat.kernel.changes import default_full_every_s
from cgstat.naming.runtimes.daemons import DaemonConfig, socket_path

if TYPE_CHECKING:
    from cgstat.pipeline.sampler import Sampler


def open_sampler(host_root: str, all_cgroups: bool, match: Optional[Pattern[str]], max_user_cgroups: int,
                 follow: bool = True, daemons: DaemonConfig = DaemonConfig(), full_read: bool = False) -> Sampler:
    """A Sampler with the diagnostics channel on stderr, in a process with room for the
    descriptors it keeps open; `daemons`: --docker-data-root and --docker-host;
    `full_read`: every file of every cgroup every tick (--full-read)."""
    from cgstat.kernel.rlimits import raise_nofile_limit
    from cgstat.diagnostics import Warner
    from cgstat.pipeline.sampler import Sampler

    raise_nofile_limit()
    warner = Warner()
    if daemons.docker_host and socket_path(daemons.docker_host) is None:
        # DOCKER_HOST=tcp://... is common on CI runners: said once, not silently unused
        warner.once("docker-host", f"--docker-host/DOCKER_HOST {daemons.docker_host!r} is not a unix socket "
                    "(unix:///path or /path): the Docker API is not asked for names")
    return Sampler(host_root, all_cgroups, match, warner, max_user_cgroups=max_user_cgroups, follow=follow,
                   daemons=daemons, full_read_every_s=0.0 if full_read else default_full_every_s())
