"""Which cgroup layout the host has (v2, v1 or hybrid), and where each hierarchy is mounted.

Reads /proc/self/mountinfo (or, for a recorded or mounted host root, the root's own
proc/self/mountinfo and proc/1/mountinfo), falling back to looking at the folders under
/sys/fs/cgroup when no mount table names a cgroup filesystem.
"""

from __future__ import annotations

import os
from typing import FrozenSet, List, NamedTuple, Optional, Tuple

from cgstat.errors import CgstatError

from cgstat.kernel import parse
from cgstat.kernel.hostfs import HostFS, ReadError

_KNOWN_V1 = frozenset({
    "cpu", "cpuacct", "memory", "blkio", "pids", "cpuset", "devices", "freezer",
    "net_cls", "net_prio", "perf_event", "hugetlb", "rdma", "misc",
})

# Controllers whose files cgstat reads. Other v1 hierarchies (cpuset, devices, freezer,
# name=systemd...) hold nothing we report and are not walked.
READ_CONTROLLERS = frozenset({"cpu", "cpuacct", "memory", "blkio", "pids"})
UNIFIED = "unified"


class NoCgroupFS(CgstatError):
    """The host root has no cgroup filesystem we can read."""


class Hierarchy(NamedTuple):
    name: str  # "unified" for cgroup2, else the controllers as the kernel lists them
    version: int  # 1 or 2
    controllers: FrozenSet[str]  # v1 controllers; empty for cgroup2
    mount_dir: str  # local path of the mount point (under the host root)

    def has(self, controller: str) -> bool:
        return controller in self.controllers


# Layouts (Documentation/admin-guide/cgroup-v2.rst, "Mounting"; systemd's "hybrid" mode):
# - v2:     one cgroup2 hierarchy, usually at /sys/fs/cgroup.
# - v1:     one cgroup hierarchy per controller or per co-mounted set ("cpu,cpuacct", with
#           "cpu" and "cpuacct" as links), plus named ones like name=systemd.
# - hybrid: v1 controllers plus a cgroup2 hierarchy at /sys/fs/cgroup/unified, which holds
#           no controllers but always has cpu.stat and the pressure files.
class Layout(NamedTuple):
    kind: str  # "v2", "v1" or "hybrid"
    hierarchies: Tuple[Hierarchy, ...]

    @property
    def anchor(self) -> Hierarchy:
        """The hierarchy whose paths name cgroups in records.

        On v2 the one hierarchy. On v1 and hybrid the CPU accounting hierarchy: the one
        every container runtime populates; other hierarchies are joined to it through
        member processes (see kernel/join.py).
        """
        for wanted in ("cpuacct", "cpu", "memory", "pids", "blkio"):
            for h in self.hierarchies:
                if h.has(wanted):
                    return h
        return self.hierarchies[0]

    def find(self, controller: str) -> Optional[Hierarchy]:
        for h in self.hierarchies:
            if h.has(controller):
                return h
        return None

    @property
    def unified(self) -> Optional[Hierarchy]:
        for h in self.hierarchies:
            if h.version == 2:
                return h
        return None


def _hierarchy_from_mount(fstype: str, superopts: str, local_dir: str) -> Optional[Hierarchy]:
    if fstype == "cgroup2":
        return Hierarchy(UNIFIED, 2, frozenset(), local_dir)
    # Super options mix mount flags (rw, relatime, nsdelegate...) with the controllers
    # bound to the hierarchy; keep the known v1 controller names and name=... ones.
    opts = superopts.split(",")
    controllers = [o for o in opts if o in _KNOWN_V1 or o.startswith("name=")]
    if not controllers:
        return None
    return Hierarchy(",".join(controllers), 1, frozenset(controllers), local_dir)


def _mounts_from_table(text: str, prefix: str, under: str) -> List[Hierarchy]:
    found = []
    seen_dev = set()
    try:
        rows = parse.parse_mountinfo(text)
    except ValueError:
        return []
    # A hierarchy can be mounted more than once; prefer the mount under /sys/fs/cgroup.
    rows.sort(key=lambda r: (not r[2].startswith("/sys/fs/cgroup"), len(r[2])))
    for dev, _root, mount_point, fstype, superopts in rows:
        if fstype not in ("cgroup", "cgroup2") or dev in seen_dev:
            continue
        local = prefix + mount_point if prefix else mount_point
        if under and not (local == under or local.startswith(under.rstrip("/") + "/")):
            continue
        if not os.path.isdir(local):
            continue
        h = _hierarchy_from_mount(fstype, superopts, local)
        if h is None:
            continue
        seen_dev.add(dev)
        found.append(h)
    return found


def _mounts_from_folders(fs: HostFS) -> List[Hierarchy]:
    """No usable mount table (a bare recorded tree): infer from /sys/fs/cgroup."""
    top = fs.path("/sys/fs/cgroup")
    if os.path.exists(os.path.join(top, "cgroup.controllers")):
        return [Hierarchy(UNIFIED, 2, frozenset(), top)]
    found = []
    try:
        names = sorted(os.listdir(top))
    except OSError:
        return []
    for name in names:
        local = os.path.join(top, name)
        if os.path.islink(local) or not os.path.isdir(local):
            continue
        if name == UNIFIED and os.path.exists(os.path.join(local, "cgroup.controllers")):
            found.append(Hierarchy(UNIFIED, 2, frozenset(), local))
        elif os.path.exists(os.path.join(local, "cgroup.procs")):
            words = ["name=systemd" if w == "systemd" else w for w in name.split(",")]
            found.append(Hierarchy(",".join(words), 1, frozenset(words), local))
    return found


def detect(fs: HostFS) -> Layout:
    """Find the cgroup hierarchies of the host, or raise NoCgroupFS with the reason."""
    hierarchies: List[Hierarchy] = []
    if fs.is_slash:
        text = fs.read_optional("/proc/self/mountinfo")
        if text:
            hierarchies = _mounts_from_table(text, "", "")
    else:
        # 1. A host mounted recursively at the root (the agent in a container with the
        #    host's / at /host): our own mount table shows its cgroup mounts.
        # 2. A recorded tree: the host's own mount table, recorded under the root.
        try:
            own = HostFS("/").read_text("/proc/self/mountinfo")
        except ReadError:
            own = None
        if own:
            hierarchies = _mounts_from_table(own, "", fs.root)
        for table in ("/proc/self/mountinfo", "/proc/1/mountinfo"):
            if hierarchies:
                break
            text = fs.read_optional(table)
            if text:
                hierarchies = _mounts_from_table(text, fs.root, "")
    if not hierarchies:
        hierarchies = _mounts_from_folders(fs)
    useful = [h for h in hierarchies if h.version == 2 or h.controllers & READ_CONTROLLERS]
    if not useful:
        where = fs.path("/sys/fs/cgroup")
        raise NoCgroupFS(f"no cgroup filesystem found under {where} (wrong --host-root?)")
    has_v1 = any(h.version == 1 for h in useful)
    has_v2 = any(h.version == 2 for h in useful)
    kind = "hybrid" if has_v1 and has_v2 else ("v1" if has_v1 else "v2")
    # Stable order: anchor-ish first so that records list hierarchies predictably.
    useful.sort(key=lambda h: (h.version == 2, h.name))
    return Layout(kind, tuple(useful))
