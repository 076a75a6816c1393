"""The Sampler a run mode samples with, made for the command line's options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Pattern

from cgstat.naming.runtimes.daemons import DaemonConfig, socket_path

if TYPE_CHECKING:
    from cgstat.pipeline.sampler import Sampler


def open_sampler(host_root: str, all_cgroups: bool, match: Optional[Pattern[str]], max_user_cgroups: int,
                 follow: bool = True, daemons: DaemonConfig = DaemonConfig()) -> Sampler:
    """A Sampler with the diagnostics channel on stderr, in a process with room for the
    descriptors it keeps open; `daemons`: --docker-data-root and --docker-host."""
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
                   daemons=daemons)
