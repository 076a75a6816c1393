"""The container identity cache: which live container IDs to look up, and the record's
`container` and `pod` objects from what was found, in the runtimes' state in the one order
registry.py gives, under the trust rules of trust.py, in the places daemons.py finds.
Reads itself only /proc/<pid>/comm of a pod's members and their cgroup.procs (pause
detection).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Set, Tuple

from cgstat.kernel import parse
from cgstat.kernel.hostfs import HostFS, ReadError, read_text
from cgstat.naming.runtimes.runtime import PathInfo
from cgstat.naming.runtimes import kubelet
from cgstat.naming.runtimes.daemons import Daemons
from cgstat.naming.runtimes.entry import HEX64, ContainerEntry, Key
from cgstat.naming.runtimes.registry import make_runtimes
from cgstat.naming.runtimes.runtime import SYSTEM, USER, Pass, Runtime
from cgstat.naming.runtimes.trust import Budget, LookupPass, homes_of, owners_for, passwd_homes

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import Container, Pod

# Looks up, only for the 64-hex IDs of live cgroups not named yet, in the runtimes' state
# (each runtime a module: docker.py, containerd.py, crio.py, podman.py; then kubelet.py;
# then each runtime's last resort, the Docker API). A bare 64-hex folder under no runtime's
# known parent (paths.py's "candidate") is a container only when one of these knows its ID
# (`promote`). An ID seen for the first time is looked up at once (a container that lives
# 1.5 s is named); one still unknown is retried every _RETRY_UNKNOWN_S; a pass stops reading
# after _BUDGET_S (said once). An entry is re-read when the runtime says its state changed
# (Docker: a rename; `recheck`, each tick, reads nothing on a steady host). Entries of
# containers that are gone are forgotten (retain).
_RETRY_UNKNOWN_S = 60.0  # an ID no state named is looked up again after this long
_BUDGET_S = 1.0  # reading runtime state, per lookup pass


class Identities:
    """Fills the `container` object of records; caches what the state files said per ID."""

    def __init__(self, fs: HostFS, warn: Optional[Callable[[str, str], None]] = None,
                 read_state: bool = True, daemons: Optional[Daemons] = None,
                 runtimes: Optional[List[Runtime]] = None):
        self.fs = fs
        self.daemons = daemons or Daemons(fs)
        self.warn = warn
        self.read_state = read_state  # False: IDs from paths only (what naming costs, bench/)
        self._names: Dict[Key, ContainerEntry] = {}
        self._tried: Dict[Key, float] = {}  # looked up, nothing found: when
        self._pods: Dict[str, Tuple[str, str]] = {}  # system pod uid -> (namespace, name)
        self._pod_dirs: Dict[str, List[str]] = {}  # pod uid -> kubelet container log folders
        self._pods_tried: Dict[str, float] = {}
        self.runtimes = runtimes if runtimes is not None else make_runtimes(fs, self.daemons)  # in lookup order
        self._system = [rt for rt in self.runtimes if SYSTEM in rt.trusts]
        self._user = [rt for rt in self.runtimes if USER in rt.trusts]
        self._asked_daemons: Set[str] = set()  # IDs the running daemons were looked at for
        self._pause: Dict[Key, bool] = {}
        # (uid of the subtree, pod uid) -> this tick's application container IDs: a pod-like
        # cgroup a user makes can't change what a system pod's members are.
        self._pod_members: Dict[Tuple[Optional[int], str], set] = {}

    # -- lookups ------------------------------------------------------------------------

    def refresh_if_new(self, infos: Iterable[PathInfo]) -> None:
        """Look up the containers and pods we can't name yet.

        An ID seen for the first time is looked up at once; one that no state named is
        looked up again only every _RETRY_UNKNOWN_S. A steady host reads nothing.
        """
        if not self.read_state:
            return
        now = time.monotonic()
        todo: Dict[Key, Optional[str]] = {}
        pods: Set[str] = set()
        for info in infos:
            if info.kind in ("container", "candidate") and info.id and HEX64.match(info.id):
                key = (info.user_uid, info.id)
                if key not in self._names and self._due(self._tried.get(key), now):
                    todo[key] = info.runtime
                    if info.pod_uid and info.user_uid is None:
                        pods.add(info.pod_uid)  # its log folder may be new
            if info.pod_uid and info.user_uid is None and info.pod_uid not in self._pods \
                    and self._due(self._pods_tried.get(info.pod_uid), now):
                pods.add(info.pod_uid)
        if todo or pods:
            self._lookup(todo, pods, now)

    def promote(self, info: PathInfo) -> Optional[PathInfo]:
        """The container a candidate is, when a runtime's state knows its ID; else None."""
        entry = self._entry(info) if info.kind == "candidate" else None
        if entry is None:
            return None
        return info._replace(kind="container", runtime=entry.runtime)

    def recheck(self) -> None:
        """Re-read the entries whose state changed since the last tick (docker rename, a
        label update), as the runtimes that follow their files say."""
        if not self.read_state:
            return
        ctx = None
        for rt in self.runtimes:
            changed = rt.changed()
            if not changed:
                continue
            ctx = ctx or self._pass()
            for key, entry in rt.reread(ctx, changed).items():
                if key in self._names and self._names[key].runtime == rt.name:
                    self._names[key] = entry
        if ctx is not None:
            self._report(ctx.lookup)

    def _pass(self) -> Pass:
        return Pass(LookupPass(Budget(_BUDGET_S)), self.fs, self.daemons, self.warn)

    def close(self) -> None:
        """Release the watches."""
        for rt in self.runtimes:
            rt.close()

    def refresh(self) -> None:
        """Forget every answer: the next refresh_if_new looks everything up again."""
        self._names.clear()
        for rt in self.runtimes:
            rt.forget()
        self._tried.clear()
        self._pods.clear()
        self._pod_dirs.clear()
        self._pods_tried.clear()

    @staticmethod
    def _due(tried_at: Optional[float], now: float) -> bool:
        return tried_at is None or now - tried_at >= _RETRY_UNKNOWN_S

    def _lookup(self, todo: Dict[Key, Optional[str]], pods: Set[str], now: float) -> None:
        """One pass, in registry.py's order: the runtimes' state for the system IDs, the
        kubelet's folders, the users' own stores, then the runtimes' last resorts."""
        ctx = self._pass()
        lookup = ctx.lookup
        system = {cid: runtime for (uid, cid), runtime in todo.items() if uid is None}
        if system:
            self._lookup_system(ctx, system)
        if pods or system:
            self._lookup_kubelet(lookup, set(system), pods)
        users = sorted({uid for uid, _ in todo if uid is not None})
        if users:
            passwd = passwd_homes(self.fs)
            for uid in users:
                if not lookup.budget.left():
                    break
                self._lookup_user(ctx, uid, {cid for u, cid in todo if u == uid}, passwd)
        if system:
            for rt in self._system:
                rt.finish(ctx, system)
        for key in todo:
            if key in lookup.found:
                self._names[key] = lookup.found[key]
                self._tried.pop(key, None)
            else:
                self._tried[key] = now
        for pod_uid in pods:
            if pod_uid not in self._pods:
                self._pods_tried[pod_uid] = now
        self._report(lookup)

    def _report(self, lookup: LookupPass) -> None:
        if self.warn is None:
            return
        for path, runtime in sorted(lookup.denied.items()):
            self.warn(f"denied:{path}", f"cannot read {path} (permission denied): {runtime} container "
                      "names, images and labels will be missing; run as root or with CAP_DAC_READ_SEARCH")
        if lookup.budget.ran_out:
            self.warn("naming-budget", f"reading container runtime state took over {_BUDGET_S:g} s; "
                      "stopped there, some container names will be missing (looked up again "
                      f"after {_RETRY_UNKNOWN_S:g} s)")

    def _lookup_system(self, ctx: Pass, ids: Dict[str, Optional[str]]) -> None:
        lookup = ctx.lookup
        self._lookup_system_in(ctx, set(ids))
        missing = {cid for cid in ids if (None, cid) not in lookup.found}
        # Not where the fixed places and daemon.json say: the running daemons' command
        # lines may name another data root or containerd state. Looked at for IDs not
        # asked about before (at most once a minute): a folder no runtime knows, retried
        # every minute, does not cost a walk of /proc each time.
        new = missing - self._asked_daemons
        if new and lookup.budget.left() and self.daemons.due():
            self._asked_daemons |= missing
            if self.daemons.find():
                self._lookup_system_in(ctx, missing)

    def _lookup_system_in(self, ctx: Pass, ids: Set[str]) -> None:
        """The system runtimes' state of `ids`: per ID in order (a later runtime's entry
        replaces an earlier one's where it says so), then the stores scanned for all."""
        lookup = ctx.lookup
        places = [(rt, rt.begin(ctx)) for rt in self._system]
        places = [(rt, p) for rt, p in places if p is not None]
        for cid in sorted(ids):
            if not lookup.budget.left():
                return
            entry = None
            for rt, p in places:
                found = rt.system_entry(ctx, p, cid)
                if found and rt.replaces(entry, found):
                    entry = found
            if entry:
                lookup.found[(None, cid)] = entry
        missing = {cid for cid in ids if (None, cid) not in lookup.found}
        for rt, p in places:
            if not missing:
                break
            for cid, entry in rt.system_scan(ctx, p, set(missing)).items():
                lookup.found[(None, cid)] = entry
                missing.discard(cid)

    def _lookup_user(self, ctx: Pass, uid: int, ids: Set[str],
                     passwd: Optional[Dict[int, List[str]]]) -> None:
        """A user's own containers (rootless Docker and Podman), from that user's own
        home only."""
        lookup = ctx.lookup
        owners = owners_for(uid)
        for home in homes_of(self.fs, uid, passwd):
            local = self.fs.path(home)
            missing = {cid for cid in ids if (uid, cid) not in lookup.found}
            for rt in self._user:
                if not missing:
                    break
                if not lookup.budget.left():
                    return
                for cid, entry in rt.user_entries(ctx, local, set(missing), owners).items():
                    lookup.found[(uid, cid)] = entry
                    missing.discard(cid)

    def _lookup_kubelet(self, lookup: LookupPass, ids: Set[str], pods: Set[str]) -> None:
        """Container names and pod folders of the system IDs and pods asked."""
        if ids and lookup.budget.left():
            kubelet.name_containers(lookup, self.fs, ids)
        if not pods or not lookup.budget.left():
            return
        for uid, folder in kubelet.pod_folders(lookup, self.fs, pods).items():
            self._pods[uid] = (folder.namespace, folder.name)
            self._pod_dirs[uid] = folder.containers

    # -- per tick -----------------------------------------------------------------------

    def note_pod_members(self, infos: Iterable[PathInfo]) -> None:
        """This tick's application containers of each pod (sandboxes already left out)."""
        members: Dict[Tuple[Optional[int], str], set] = {}
        for info in infos:
            if info.kind == "container" and info.pod_uid and info.id:
                members.setdefault((info.user_uid, info.pod_uid), set()).add(info.id)
        self._pod_members = members

    def _only_container_name(self, info: PathInfo) -> Optional[str]:
        """The kubelet's log folders name a pod's containers but not their IDs: when the
        pod has exactly one application container and one log folder, they are the same."""
        if info.user_uid is not None:
            return None
        dirs = self._pod_dirs.get(info.pod_uid or "", [])
        members = self._pod_members.get((info.user_uid, info.pod_uid or ""), set())
        if len(dirs) == 1 and members == {info.id}:
            return dirs[0]
        return None

    def retain(self, live_ids: Iterable[str]) -> None:
        """Forget everything about containers and pods that are gone (bounded under churn)."""
        live = set(live_ids)
        self._pause = {k: v for k, v in self._pause.items() if k[1] in live}
        self._names = {k: v for k, v in self._names.items() if k[1] in live}
        for rt in self.runtimes:
            rt.retain(live)
        self._asked_daemons &= live
        self._tried = {k: v for k, v in self._tried.items() if k[1] in live}
        self._pods = {k: v for k, v in self._pods.items() if k in live}
        self._pod_dirs = {k: v for k, v in self._pod_dirs.items() if k in live}
        self._pods_tried = {k: v for k, v in self._pods_tried.items() if k in live}

    def _entry(self, info: PathInfo) -> Optional[ContainerEntry]:
        return self._names.get((info.user_uid, info.id or ""))

    def is_sandbox(self, info: PathInfo, folder_local: Optional[str] = None) -> bool:
        """A pod's sandbox ("pause") container: plumbing, not an application container.

        The runtime's state says so (CRI annotations, dockershim labels); without state,
        a container of a pod whose every process is named "pause" is one.
        """
        if info.kind != "container" or not info.id:
            return False
        entry = self._entry(info)
        if entry is not None and (entry.sandbox or entry.k8s_container):
            return entry.sandbox
        if info.pod_uid is None or folder_local is None:
            return False
        key = (info.user_uid, info.id)
        if key not in self._pause:
            self._pause[key] = self._all_pause(folder_local)
        return self._pause[key]

    def _all_pause(self, folder_local: str) -> bool:
        try:
            pids = parse.parse_pid_list(read_text(os.path.join(folder_local, "cgroup.procs")))
        except (ReadError, ValueError):
            return False
        comms = []
        for pid in pids[:8]:
            text = self.fs.read_optional(f"/proc/{pid}/comm")
            if text is not None:
                comms.append(text.strip())
        return bool(comms) and all(c == "pause" for c in comms)

    def pod(self, info: PathInfo) -> Optional[Pod]:
        if not info.pod_uid:
            return None
        # The kubelet's folders name system pods only: a pod-like cgroup a user made in
        # their own subtree gets no name from them.
        ns_name = self._pods.get(info.pod_uid) if info.user_uid is None else None
        return {"uid": info.pod_uid, "name": ns_name[1] if ns_name else None,
                "namespace": ns_name[0] if ns_name else None, "qos": info.qos}

    def _describe(self, info: PathInfo):
        """What the runtime that parsed the path says of it (slurm.py: job, step, user)."""
        for rt in self.runtimes:
            if rt.name == info.runtime:
                return rt.describe(info)
        return None

    def container(self, info: PathInfo) -> Optional[Container]:
        if info.kind != "container":
            return None
        cid = info.id or ""
        entry = self._entry(info) or ContainerEntry()
        is_hex = len(cid) == 64
        pod = self.pod(info)
        if pod is not None and entry.k8s_pod and pod["name"] is None:
            ns, name = entry.k8s_pod
            pod["namespace"], pod["name"] = ns, name
        name = entry.k8s_container if pod is not None else None
        if pod is not None and name is None:
            name = self._only_container_name(info)
        name = name or entry.name or (None if is_hex else cid)
        out: Container = {
            "runtime": info.runtime or entry.runtime,
            "id": cid,
            "short_id": cid[:12] if is_hex else None,
            "name": name,
            "image": entry.image,
            "labels": entry.labels,
            "pod": pod,
            "sandbox": False,
            "slurm": self._describe(info) if info.detail is not None else None,
        }
        return out
