"""What a cgroup path says about its workload: container, pod, runtime monitor, systemd unit.

Pure functions over the path alone (no I/O). The patterns, by runtime and cgroup
driver: classify()'s docstring; each runtime's own are declared in its module
(naming/runtimes/registry.py gathers them).
"""

from __future__ import annotations

import re
from typing import Optional

from cgstat.naming.runtimes.registry import CONTAINER_PATTERNS, ID_PARENTS, MONITOR_PATTERNS, NAMED_PARENTS, WORKLOAD_PATHS
from cgstat.naming.runtimes.runtime import PathInfo

_HEX64 = r"[0-9a-f]{64}"
_BARE_ID = re.compile(rf"^({_HEX64})$")
# runc's systemd driver turns a cgroupsPath "<slice>:<prefix>:<name>" into the scope
# <prefix>-<name>.scope (libcontainer/cgroups/systemd, getUnitName): `ctr run
# --runc-systemd-cgroup --cgroup system.slice:<prefix>:<id>` and other runc callers choose
# the prefix, so an ID there is a candidate, as a bare one is.
_SCOPED_ID = re.compile(rf"^.+-({_HEX64})\.scope$")
_POD_SYSTEMD = re.compile(r"^kubepods(?:-(burstable|besteffort))?-pod([0-9a-f_]{32,36})\.slice$")
_POD_CGROUPFS = re.compile(r"^pod([0-9a-f-]{32,36})$")
_QOS = {"burstable": "burstable", "besteffort": "besteffort"}
_UNIT = re.compile(r"^.+\.(service|scope|slice|socket|mount|swap|target|device|automount|path|timer)$")


def unescape_unit(name: str) -> str:
    r"""systemd unit name escapes: '\x2d' is '-', '\x40' '@', '\xc3\xa9' 'é' and so on.

    systemd escapes bytes (unit_name_escape, src/basic/unit-name.c), so a run of escapes is
    decoded as UTF-8 bytes. An escape whose character would be a control (C0, DEL, C1:
    '\x9b' must not become a CSI), a bidi control, or invalid UTF-8 (a raw 0x9b byte, or
    the '\xNN' that text.decode_name writes for an undecodable folder name) stays as the
    escape text, unchanged.
    """
    if "\\x" not in name:
        return name
    return _ESCAPE_RUN.sub(_unescape_run, name)


_ESCAPE_RUN = re.compile(r"(?:\\x[0-9a-fA-F]{2})+")
# What no unit name in a record may carry: C0, DEL, C1, and the bidi controls that
# reorder what a terminal shows (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069).
_UNSAFE_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _unescape_run(m) -> str:
    escapes = [m.group(0)[i:i + 4] for i in range(0, len(m.group(0)), 4)]
    decoded = bytes(int(e[2:], 16) for e in escapes).decode("utf-8", "surrogateescape")
    out = []
    i = 0
    for ch in decoded:
        if "\udc80" <= ch <= "\udcff":  # a byte that is not part of valid UTF-8
            n, keep = 1, True
        else:
            n, keep = len(ch.encode("utf-8")), _UNSAFE_CHAR.match(ch) is not None
        out.append("".join(escapes[i:i + n]) if keep else ch)
        i += n
    return "".join(out)


def _pod(component: str, parent: str):
    m = _POD_SYSTEMD.match(component)
    if m:
        return m.group(2).replace("_", "-"), _QOS.get(m.group(1) or "", "guaranteed")
    m = _POD_CGROUPFS.match(component)
    if m and parent in ("kubepods", "burstable", "besteffort"):
        qos = _QOS.get(parent, "guaranteed")
        return m.group(1), qos
    return None


def _container(component: str, parent: str, under_pod: bool):
    for pattern, runtime in CONTAINER_PATTERNS:
        m = pattern.match(component)
        if m:
            return runtime, m.group(1)
    m = _BARE_ID.match(component)
    if m and (parent in ID_PARENTS or under_pod):
        return ID_PARENTS.get(parent), m.group(1)
    named = NAMED_PARENTS.get(parent)
    if named and component:
        return named, component
    return None


# systemd runs each logged-in user's manager as user@<UID>.service (in
# /user.slice/user-<UID>.slice) and delegates that subtree to the user (systemd.resource-
# control(5) Delegate=, "Control Group APIs and Delegation"): the user may create any
# cgroup below it, with any name, e.g. a fake docker-<id>.scope. Rootless Podman and
# Docker put their containers there. The first such component is the delegation point;
# a user can only add names below it, never above.
_USER_MANAGER = re.compile(r"^user@([0-9]{1,10})\.service$")


def user_subtree_uid(path: str) -> Optional[int]:
    """The uid whose user manager's delegated subtree holds `path`, or None."""
    if "user@" not in path:
        return None
    for comp in path.split("/"):
        m = _USER_MANAGER.match(comp)
        if m:
            return int(m.group(1))
    return None


def classify(path: str) -> PathInfo:
    """What `path` (a cgroup path as records name it) says. Patterns, by runtime and driver:
    - Docker:      /system.slice/docker-<64hex>.scope (systemd), /docker/<64hex> (cgroupfs)
    - containerd:  .../cri-containerd-<64hex>.scope (Kubernetes, systemd driver),
                   /system.slice/nerdctl-<64hex>.scope, /nerdctl/<64hex>
    - CRI-O:       crio-<64hex>.scope or crio-<64hex>; crio-conmon-<64hex>.scope is its monitor
    - Podman:      libpod-<64hex>.scope (systemd), /libpod_parent/libpod-<64hex> (cgroupfs);
                   libpod-conmon-<64hex>.scope (cgroupfs: <parent>/conmon) is the monitor;
                   rootless Podman on v2 puts the processes in a nested "container" child of
                   the scope, part of the container
    - LXC:         lxc.payload.<name> (lxc.monitor.<name> is the monitor), older /lxc/<name>
    - Kubernetes:  pods kubepods-<qos>-pod<uid with _>.slice / kubepods-pod<uid>.slice
                   (systemd), /kubepods/<qos>/pod<uid> and /kubepods/pod<uid> (cgroupfs);
                   a container directly under a pod folder as a bare <64hex> (cgroupfs driver:
                   the runtime is not in the path)
    - Elsewhere:   a bare <64hex> under any other parent (dockerd --cgroup-parent, ctr
                   --cgroup, CI runners, Nomad), or a <prefix>-<64hex>.scope of no known
                   runtime (runc's systemd driver with a prefix of the caller's choosing:
                   ctr --runc-systemd-cgroup --cgroup <slice>:<prefix>:<id>), is only a
                   "candidate": a user can make such a folder, so it is a container only
                   once a runtime's state knows that ID (naming/workload.Namer promotes it);
                   until then it is the unit it names
    - Slurm:       .../slurm/uid_<U>/job_<J>[/step_<S>[/task_<T>]] (v1),
                   .../slurmstepd.scope/job_<J>[/step_<S>[/user/task_<T>]] (v2): the job
                   folder is the container (runtime slurm, ID the job ID); its steps and
                   tasks are containers too, inside it (naming/runtimes/slurm.py)
    - systemd:     *.service, *.scope, *.slice, *.socket, *.mount, *.swap with \\xNN escapes
                   (systemd.unit(5), "String Escaping for Inclusion in Unit Names")
    """
    info = _classify(path)
    uid = user_subtree_uid(path)
    if uid is None:
        return info
    return info._replace(user_uid=uid)


def _classify(path: str) -> PathInfo:
    parts = [p for p in path.split("/") if p]
    if "job_" in path:  # the one word every runtime parsing whole paths (Slurm) needs
        for runtime, parse in WORKLOAD_PATHS:
            found = parse(parts)
            if found is not None:
                # a step or task is inside its job (not a workload of its own in the default
                # selection) but still says which job, step and task it is
                return PathInfo("container", runtime, found.id, unit=_unit(parts[-1]),
                                inside_container=found.depth < len(parts) - 1, detail=found.detail)
    pod_uid = qos = None
    for i, comp in enumerate(parts):
        parent = parts[i - 1] if i else ""
        last = i == len(parts) - 1
        if any(p.match(comp) for p in MONITOR_PATTERNS):
            if last:
                return PathInfo("monitor", unit=_unit(comp), pod_uid=pod_uid, qos=qos)
            return PathInfo(None, unit=_unit(parts[-1]), inside_container=True)
        pod = _pod(comp, parent)
        if pod:
            pod_uid, qos = pod
            if last:
                return PathInfo("pod", pod_uid=pod_uid, qos=qos, unit=_unit(comp))
            continue
        ctr = _container(comp, parent, pod_uid is not None)
        if ctr is None and last:
            # an ID the path alone can't vouch for: a container only if a runtime knows it
            m = _BARE_ID.match(comp) or (comp.endswith(".scope") and _SCOPED_ID.match(comp))
            if m:
                return PathInfo("candidate", None, m.group(1), pod_uid, qos, _unit(comp))
        if ctr:
            runtime, cid = ctr
            if last:
                return PathInfo("container", runtime, cid, pod_uid, qos, _unit(comp))
            # Below a container: its nested cgroups (rootless Podman's "container" leaf,
            # systemd inside a container...). Part of that container, not one of its own.
            return PathInfo(None, runtime, cid, pod_uid, qos, _unit(parts[-1]), inside_container=True)
    return PathInfo(None, unit=_unit(parts[-1]) if parts else None)


def _unit(component: str) -> Optional[str]:
    if _UNIT.match(component):
        return unescape_unit(component)
    return None


def container_root(path: str, cid: str) -> str:
    """The path of the container `cid` that `path` is in or below."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if cid in part:
            return "/".join(parts[: i + 1])
    return path
