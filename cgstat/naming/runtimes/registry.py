"""The container runtimes cgstat knows (RUNTIMES), in the one lookup order, and what their
paths say together. Adding a runtime: a module with a Runtime subclass (runtime.py),
listed in RUNTIMES. Reads no files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, List, Optional, Pattern, Sequence, Tuple, Type

import re

from cgstat.naming.runtimes.containerd import ContainerdRuntime
from cgstat.naming.runtimes.crio import CrioRuntime
from cgstat.naming.runtimes.docker import DockerRuntime
from cgstat.naming.runtimes.lxc import LxcRuntime
from cgstat.naming.runtimes.podman import PodmanRuntime
from cgstat.naming.runtimes.runtime import Runtime, WorkloadPath
from cgstat.naming.runtimes.slurm import SlurmRuntime

if TYPE_CHECKING:
    from cgstat.kernel.hostfs import HostFS
    from cgstat.naming.runtimes.daemons import Daemons

# The order, for a system container's ID (one outside users' subtrees) not named yet:
# 1. the runtimes' state, per ID, in RUNTIMES order: Docker, then containerd, then CRI-O
#    (a later one's entry replaces an earlier one's when its `replaces` says so: CRI
#    annotations say more than Docker's config), then for the IDs still unnamed the stores
#    scanned once for all (rootful Podman's containers.json);
# 2. the kubelet's log folders (kubelet.py): Kubernetes container names and pods;
# 3. each runtime's last resort (`finish`: the Docker API over its socket).
# For a user's cgroup (in user@UID.service): only the runtimes that trust USER, in the same
# order, from that user's own home (trust.py).
# Slurm's jobs are named from their paths (a parser of the whole path: a job is several
# folder levels deep) and slurmd's spool (slurm.py), not by container ID.
RUNTIMES: Tuple[Type[Runtime], ...] = (DockerRuntime, ContainerdRuntime, CrioRuntime, PodmanRuntime, LxcRuntime,
                                      SlurmRuntime)


def make_runtimes(fs: HostFS, daemons: Daemons) -> List[Runtime]:
    """One of each, in lookup order, for one naming cache (some keep state between passes)."""
    return [cls(fs, daemons) for cls in RUNTIMES]


# What the paths say, every runtime's declarations together (naming/paths.py):
# a container's own folder -> (pattern, runtime); bare-ID parents -> runtime; parents whose
# every child is a container -> runtime; monitors.
CONTAINER_PATTERNS: Tuple[Tuple[Pattern[str], str], ...] = tuple(
    (re.compile(p), cls.name) for cls in RUNTIMES for p in cls.scopes)
ID_PARENTS = {parent: cls.name for cls in RUNTIMES for parent in cls.parents}
NAMED_PARENTS = {parent: cls.name for cls in RUNTIMES for parent in cls.named_parents}
MONITOR_PATTERNS: Tuple[Pattern[str], ...] = tuple(re.compile(p) for cls in RUNTIMES for p in cls.monitors)
# runtimes that parse the whole path (Slurm), tried before the folder patterns
WORKLOAD_PATHS: Tuple[Tuple[str, Callable[[Sequence[str]], Optional[WorkloadPath]]], ...] = tuple(
    (cls.name, cls.workload_path) for cls in RUNTIMES if "workload_path" in vars(cls))
