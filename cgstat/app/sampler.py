"""The Sampler a run mode samples with, made for the command line's options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Pattern

from cgstat.naming.runtimes.daemons import DaemonConfig

if TYPE_CHECKING:
    from cgstat.pipeline.sampler import Sampler


def open_sampler(host_root: str, all_cgroups: bool, match: Optional[Pattern[str]], max_user_cgroups: int,
                 follow: bool = True, daemons: DaemonConfig = DaemonConfig()) -> Sampler:
    """A Sampler with the diagnostics channel on stderr, in a process with room for the
    descriptors it keeps open; `daemons`: --docker-data-root and --docker-host."""
    from cgstat.kernel.handles import raise_nofile_limit
    from cgstat.pipeline.diagnostics import Warner
    from cgstat.pipeline.sampler import Sampler

    raise_nofile_limit()
    return Sampler(host_root, all_cgroups, match, Warner(), max_user_cgroups=max_user_cgroups, follow=follow,
                   daemons=daemons)
