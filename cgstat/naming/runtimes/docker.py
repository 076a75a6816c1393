"""Docker: its cgroups (docker-<id>.scope with the systemd driver, /docker/<id> with
cgroupfs), its state (a container's config.v2.json, and where dockerd keeps it), and the
runtime that names from them (DockerRuntime). Reads <data root>/containers/<id>/config.v2.json
and, for rootless Docker, ~/.local/share/docker/containers/<id>/config.v2.json of the one
user whose subtree holds the cgroup (naming/runtimes/trust.py).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Collection, Dict, List, Optional, Set, Tuple

from cgstat.kernel.hostfs import ReadError, open_dir_under
from cgstat.naming.runtimes.dockerconfig import entry_from_config
from cgstat.naming.runtimes.entry import ID_PATTERN, ContainerEntry, Key
from cgstat.naming.runtimes.runtime import SYSTEM, USER, Pass, Runtime
from cgstat.naming.runtimes.trust import LookupPass
from cgstat.naming.runtimes.watch import StateWatch

if TYPE_CHECKING:
    from cgstat.kernel.hostfs import HostFS
    from cgstat.naming.runtimes.daemons import Daemons

ROOTLESS = (".local", "share", "docker", "containers")  # below a user's home


CONFIG = "config.v2.json"
Signature = Tuple[int, int, int]  # (inode, mtime ns, size) of a state file


def signature(folder: str, name: str = CONFIG) -> Optional[Signature]:
    """The identity of <folder>/<name> (local path), the file's link not followed; None
    when it can't be seen."""
    try:
        fd = open_dir_under(folder, [])
    except ReadError:
        return None
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def system_entry(lookup: LookupPass, containers: str, cid: str) -> Optional[ContainerEntry]:
    """The system Docker's entry of cid; `containers` is <data root>/containers (local path)."""
    return entry_from_config(lookup.read(containers, [cid, CONFIG], "Docker"))


def rootless_entry(lookup: LookupPass, home: str, cid: str,
                   owners: Collection[int]) -> Optional[ContainerEntry]:
    """Rootless Docker's entry of cid in one user's home (local path), read under `owners`."""
    return entry_from_config(lookup.read(home, list(ROOTLESS) + [cid, "config.v2.json"],
                                         "rootless Docker", owners))


# config.v2.json gives Name, Config.Image, Config.Labels (incl. io.kubernetes.* under
# dockershim); the data roots are daemons.Daemons' (/var/lib/docker, daemon.json
# "data-root", a running dockerd's --data-root, or --docker-data-root); a changed file
# (docker rename) is re-read (watch.py says which; `signature` is its stat).
class DockerRuntime(Runtime):
    """Docker, system and rootless. A system entry read from a config.v2.json is followed
    for changes (docker rename, a label update: watch.py says which file changed, on each
    tick, without reading them). A system container whose state can't be read is asked of
    the Docker API last (dockerapi.py), and when Docker's own cgroups stay unnamed on a
    host with Docker, one warning says where cgstat looked and what to set."""

    name = "docker"
    scopes = (rf"^docker-({ID_PATTERN})\.scope$",)
    parents = ("docker",)
    trusts = frozenset({SYSTEM, USER})

    def __init__(self, fs: HostFS, daemons: Daemons):
        super().__init__(fs, daemons)
        from cgstat.naming.runtimes.dockerapi import DockerAPI  # it reads our config format

        self._api = DockerAPI(fs, self._sockets)
        # entries read from a config.v2.json: key -> <data root>/containers (a local path),
        # and the watch that says when one changes
        self._files: Dict[Key, str] = {}
        self._watch: StateWatch[Key] = StateWatch(signature)

    def begin(self, ctx: Pass) -> List[str]:
        return [ctx.fs.path(root + "/containers") for root in ctx.daemons.docker_roots()]

    def system_entry(self, ctx: Pass, places: Any, cid: str) -> Optional[ContainerEntry]:
        for containers in places:
            entry = self._read(ctx.lookup, (None, cid), containers)
            if entry:
                return entry
        return None

    def _read(self, lookup: LookupPass, key: Key, containers: str) -> Optional[ContainerEntry]:
        """The entry in <containers>/<id>/config.v2.json, then followed for changes (the
        watch is set before the read: a change after it is seen on the next tick)."""
        folder = containers + "/" + key[1]
        self._watch.watch(key, folder, CONFIG, signature(folder))
        entry = system_entry(lookup, containers, key[1])
        if entry is None:
            self._watch.forget(key)
            return None
        self._files[key] = containers
        return entry

    def user_entries(self, ctx: Pass, home: str, ids: Set[str],
                     owners: Collection[int]) -> Dict[str, ContainerEntry]:
        out: Dict[str, ContainerEntry] = {}
        for cid in sorted(ids):
            if not ctx.lookup.budget.left():
                break
            entry = rootless_entry(ctx.lookup, home, cid, owners)
            if entry:
                out[cid] = entry
        return out

    def finish(self, ctx: Pass, asked: Dict[str, Optional[str]]) -> None:
        from cgstat.naming.runtimes.dockerapi import BUDGET_S

        found = ctx.lookup.found
        deadline = time.monotonic() + BUDGET_S
        for cid, runtime in sorted(asked.items()):
            # Only Docker's own cgroups (docker-<id>.scope, /docker/<id>) and bare IDs
            # outside users' subtrees: those are the only IDs dockerd can know.
            if runtime in (self.name, None) and (None, cid) not in found:
                entry = self._api.lookup(cid, deadline)
                if entry:
                    found[(None, cid)] = entry
        unnamed = sorted(cid for cid, runtime in asked.items() if runtime == self.name and (None, cid) not in found)
        # (only where Docker is there at all: a host without it, or a recording of one,
        # has nothing to set; a bare runc container at /docker/<id> is not Docker's)
        if unnamed and ctx.warn is not None and self._present():
            some = "1 Docker container" if len(unnamed) == 1 else f"{len(unnamed)} Docker containers"
            ctx.warn("docker-state", f"{some} (e.g. {unnamed[0][:12]}) {'has' if len(unnamed) == 1 else 'have'} no "
                     f"readable state ({self.daemons.where()}): their names, images and labels are "
                     "missing; give dockerd's data root with --docker-data-root, or its socket with "
                     "--docker-host or DOCKER_HOST")

    def _present(self) -> bool:
        """A Docker data root or socket exists (the ones known or found, or the given ones)."""
        roots = [self.fs.path(root) for root in self.daemons.docker_roots()]
        return any(os.path.exists(p) for p in roots + self._sockets())

    def _sockets(self) -> List[str]:
        given = self.daemons.config.docker_host is not None
        return [s if given else self.fs.path(s) for s in self.daemons.docker_sockets()]

    def changed(self) -> List[Key]:
        if not self._files:
            return []
        return [key for key in self._watch.changed() if key in self._files]

    def reread(self, ctx: Pass, keys: List[Key]) -> Dict[Key, ContainerEntry]:
        out: Dict[Key, ContainerEntry] = {}
        for key in keys:
            entry = self._read(ctx.lookup, key, self._files[key])
            if entry is not None:
                out[key] = entry
        return out

    def retain(self, live: Set[str]) -> None:
        self._files = {k: v for k, v in self._files.items() if k[1] in live}
        self._watch.retain(lambda k: k[1] in live)

    def forget(self) -> None:
        self._files.clear()
        self._watch.retain(lambda k: False)

    def close(self) -> None:
        self._watch.close()
        self._files.clear()
