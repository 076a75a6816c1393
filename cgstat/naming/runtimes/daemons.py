"""Where the running Docker and containerd daemons keep their state, and Docker's socket:
the fixed places, /etc/docker/daemon.json, and the command lines of the running daemons
(/proc/<pid>/comm, status, ns/mnt and cmdline; see Daemons). `Daemons.find()` reads them
at most once per _RESCAN_S, only when a container ID was not found in the places already
known. The --docker-data-root option and --docker-host (or DOCKER_HOST) replace what is found.
"""

from __future__ import annotations

import os
import re
import time
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

import orjson

from cgstat.kernel.hostfs import HostFS, ReadError, read_untrusted

DEFAULT_DOCKER_ROOT = "/var/lib/docker"
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
DEFAULT_CONTAINERD_STATE = "/run/containerd"
CONTAINERD_TASKS = "io.containerd.runtime.v2.task"  # below a containerd state folder
_RESCAN_S = 60.0
_CMDLINE_MAX = 64 * 1024  # ARG_MAX-sized command lines are junk here
_CONFIG_MAX = 1024 * 1024
_STATE_LINE = re.compile(r'^\s*state\s*=\s*"([^"\\]*)"\s*(?:#.*)?$')
_SECTION = re.compile(r"^\s*\[")


class DaemonConfig(NamedTuple):
    """What the user said (options and environment); None: find it."""

    docker_data_root: Optional[str] = None
    docker_host: Optional[str] = None  # a unix:// URL (DOCKER_HOST's form) or a socket path


class Found(NamedTuple):
    docker_roots: Tuple[str, ...]  # data roots, host paths, in the order to try
    docker_sockets: Tuple[str, ...]  # unix socket host paths
    containerd_states: Tuple[str, ...]  # containerd state folders


def socket_path(url: Optional[str]) -> Optional[str]:
    """The socket path of a DOCKER_HOST value: unix:///run/x.sock or /run/x.sock; None
    for anything else (tcp://, ssh://: cgstat reads local state only)."""
    if not url:
        return None
    if url.startswith("unix://"):
        url = url[len("unix://"):]
    return url if url.startswith("/") and "\0" not in url else None


def _abs(value: Optional[str]) -> Optional[str]:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value or not value.strip("/"):
        return None
    return os.path.normpath(value)


# Docker's data root is /var/lib/docker unless /etc/docker/daemon.json says "data-root",
# or dockerd was started with --data-root (often in a systemd drop-in, on GPU nodes with a
# big NVMe disk); a dockerd managed by hand or by CI may also have its own socket (-H) and
# containerd (whose --config names its state folder). So, besides the fixed places, the
# command lines of the running daemons are read:
# - /proc/<pid>/comm of every process, for "dockerd" and "containerd";
# - /proc/<pid>/status: only a process whose real, effective, saved and filesystem uids
#   are all 0 counts (any user can start a process named dockerd with any arguments);
# - /proc/<pid>/ns/mnt against our own (the host's with --host-root): a daemon in another
#   mount namespace (Docker in Docker) names folders of its own filesystem, not ours;
# - /proc/<pid>/cmdline of those: bounded, split on NUL, only the flags below are used and
#   only absolute paths are kept: dockerd --data-root/-g/--graph, --config-file, -H/--host
#   unix://...; containerd --state, --config/-c (the file's top-level `state = "..."`);
# - /etc/docker/daemon.json ("data-root", "hosts") or the --config-file dockerd was given.
# `find()` does this at most once per _RESCAN_S (the first time at once): only when a
# container ID was not found in the places already known, so a steady host reads none of it.
class Daemons:
    """The places to look for Docker's and containerd's state; see the comment above."""

    def __init__(self, fs: HostFS, config: DaemonConfig = DaemonConfig(),
                 clock=time.monotonic):
        self.fs = fs
        self.config = config
        self.clock = clock
        self._scanned_at: Optional[float] = None
        self._found = Found((), (), ())
        self._daemon_json = self._read_daemon_json("/etc/docker/daemon.json")

    # what is known without looking at processes

    def docker_roots(self) -> List[str]:
        if self.config.docker_data_root:
            return [self.config.docker_data_root]
        first = _abs(self._daemon_json.get("data-root")) or DEFAULT_DOCKER_ROOT
        return _unique([first, *self._found.docker_roots])

    def docker_sockets(self) -> List[str]:
        if self.config.docker_host:  # DOCKER_HOST="" means the default, as for docker's CLI
            path = socket_path(self.config.docker_host)
            return [path] if path else []
        hosts = [socket_path(h) for h in _str_list(self._daemon_json.get("hosts"))]
        return _unique([DEFAULT_DOCKER_SOCKET, *[h for h in hosts if h], *self._found.docker_sockets])

    def containerd_states(self) -> List[str]:
        return _unique([DEFAULT_CONTAINERD_STATE, *self._found.containerd_states])

    def where(self) -> str:
        """The places looked in, for a warning."""
        socks = self.docker_sockets()
        return (f"data root {', '.join(self.docker_roots())}; API "
                f"{', '.join(socks) if socks else 'none (--docker-host is not a unix socket)'}")

    # the running daemons

    def due(self) -> bool:
        """Whether find() would look (never yet, or not for _RESCAN_S)."""
        return self._scanned_at is None or self.clock() - self._scanned_at >= _RESCAN_S

    def find(self) -> bool:
        """Look at the running daemons' command lines (at most once per _RESCAN_S); True
        when that found a place not known before."""
        if not self.due():
            return False
        self._scanned_at = self.clock()
        before = self._found
        self._found = self._scan()
        return self._found != before

    def _scan(self) -> Found:
        own_mnt = self._mount_ns("self" if self.fs.is_slash else "1")
        if own_mnt is None:
            return Found((), (), ())
        roots: List[str] = []
        sockets: List[str] = []
        states: List[str] = []
        for pid, comm in self._processes(("dockerd", "containerd")):
            if not self._trusted(pid, own_mnt):
                continue
            args = self._cmdline(pid)
            if args is None:
                continue
            if comm == "dockerd":
                root, socks = self._dockerd(args)
                if root:
                    roots.append(root)
                sockets.extend(socks)
            else:
                states.append(self._containerd(args))
        return Found(tuple(_unique(roots)), tuple(_unique(sockets)), tuple(_unique(states)))

    def _processes(self, names: Iterable[str]) -> List[Tuple[int, str]]:
        wanted = set(names)
        out = []
        try:
            entries = os.listdir(self.fs.path("/proc"))
        except OSError:
            return []
        for entry in entries:
            if not entry.isdigit():
                continue
            comm = self.fs.read_optional(f"/proc/{entry}/comm")
            if comm is not None and comm.strip() in wanted:
                out.append((int(entry), comm.strip()))
        return sorted(out)

    def _mount_ns(self, pid: str) -> Optional[int]:
        try:
            return os.stat(self.fs.path(f"/proc/{pid}/ns/mnt")).st_ino
        except OSError:
            return None

    def _trusted(self, pid: int, own_mnt: int) -> bool:
        status = self.fs.read_optional(f"/proc/{pid}/status")
        if status is None:
            return False
        uids: List[str] = next((line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), [])
        if len(uids) != 4 or any(u != "0" for u in uids):
            return False
        return self._mount_ns(str(pid)) == own_mnt

    def _cmdline(self, pid: int) -> Optional[List[str]]:
        try:
            raw = read_untrusted(self.fs.path(f"/proc/{pid}/cmdline"), _CMDLINE_MAX)
        except ReadError:
            return None
        return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a]

    def _dockerd(self, args: List[str]) -> Tuple[Optional[str], List[str]]:
        flags = _flags(args, {"--data-root", "-g", "--graph", "--config-file", "-H", "--host"})
        conf = self._daemon_json
        if flags.get("--config-file"):
            path = _abs(flags["--config-file"][-1])
            conf = self._read_daemon_json(path) if path else {}
        root = None
        for flag in ("--data-root", "-g", "--graph"):
            if flags.get(flag):
                root = _abs(flags[flag][-1])
        root = root or _abs(conf.get("data-root")) or DEFAULT_DOCKER_ROOT
        hosts = flags.get("-H", []) + flags.get("--host", []) or _str_list(conf.get("hosts"))
        return root, [p for p in (socket_path(h) for h in hosts) if p]

    def _containerd(self, args: List[str]) -> str:
        flags = _flags(args, {"--state", "--config", "-c"})
        if flags.get("--state"):
            state = _abs(flags["--state"][-1])
            if state:
                return state
        config = (flags.get("--config") or flags.get("-c") or ["/etc/containerd/config.toml"])[-1]
        path = _abs(config)
        return (self._toml_state(path) if path else None) or DEFAULT_CONTAINERD_STATE

    def _toml_state(self, path: str) -> Optional[str]:
        """The top-level `state = "..."` of a containerd config (before any [section])."""
        try:
            text = read_untrusted(self.fs.path(path), _CONFIG_MAX).decode("utf-8", "replace")
        except ReadError:
            return None
        for line in text.splitlines():
            if _SECTION.match(line):
                return None
            m = _STATE_LINE.match(line)
            if m:
                return _abs(m.group(1))
        return None

    def _read_daemon_json(self, path: str) -> Dict:
        try:
            conf = orjson.loads(read_untrusted(self.fs.path(path), _CONFIG_MAX))
        except (ReadError, orjson.JSONDecodeError):
            return {}
        return conf if isinstance(conf, dict) else {}


def _flags(args: List[str], wanted) -> Dict[str, List[str]]:
    """Values of the wanted flags, as `--flag value` or `--flag=value` (Go's flag forms)."""
    out: Dict[str, List[str]] = {}
    i = 1
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in wanted:
            if eq:
                out.setdefault(name, []).append(value)
            elif i + 1 < len(args):
                out.setdefault(name, []).append(args[i + 1])
                i += 1
        i += 1
    return out


def _str_list(value) -> List[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _unique(items: Iterable[str]) -> List[str]:
    seen: Dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)
