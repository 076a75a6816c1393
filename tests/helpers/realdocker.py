"""A private Docker daemon (and its containerd) for the tests, started once per session.

What it makes, all with names unique to the session (other sessions may run their own):

* a folder under the system temp dir holding the daemon's data root, exec root, socket,
  pid file and log (dockerd --data-root/--exec-root/-H/--pidfile: none of the host's own
  Docker files is used);
* a Linux bridge ``cgstat-dk<hex>`` with a free 10.x.y.0/24 (dockerd -b; the host's
  docker0, if any, is never touched, and none is created), no iptables rules, no NAT;
* cgroups only below our own: the daemon's --cgroup-parent has no leading slash, so each
  container lands below the daemon's (our) cgroup in every hierarchy;
* an image imported from a busybox-static rootfs (no registry).

`stop()` removes all of it, also after a failure: containers (docker rm -f, ctr task kill),
the daemon and its containerd by PID, the cgroups (deepest first, only below our parents),
the bridge, the temp folder, and the host files dockerd and containerd create on their own
when they were not there before (/etc/docker/key.json, empty folders under
/run/containerd). Where dockerd can't start, `start()` raises Unavailable with the reason
(the tests skip with it).
"""
from __future__ import annotations

import atexit
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from typing import Dict, List, Optional

PREFIX = "cgstat-test-%s-docker-" % os.environ.setdefault("CGSTAT_TEST_RUN", secrets.token_hex(3))  # realcg.RUN
IMAGE = "cgstat-test-busybox:1"
CTR_IMAGE = "docker.io/library/" + IMAGE  # what `docker save` names it in containerd
CGROOT = "/sys/fs/cgroup"
_APPLETS = ("sh", "sleep", "dd", "ping", "cat", "head", "true", "ls", "mkdir")


class Unavailable(Exception):
    """dockerd can't run here; the message says why."""


def _run(argv: List[str], timeout: float = 60, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return proc


def own_cgroups() -> Dict[str, str]:
    """hierarchy folder under /sys/fs/cgroup -> our path in it (from /proc/self/cgroup)."""
    by_ctrl: Dict[str, str] = {}
    for line in open("/proc/self/cgroup"):
        _, ctrls, path = line.rstrip("\n").split(":", 2)
        for c in (ctrls.split(",") if ctrls else ["unified"]):
            by_ctrl[c[5:] if c.startswith("name=") else c] = path
    out = {}
    for entry in os.listdir(CGROOT):
        top = os.path.join(CGROOT, entry)
        if os.path.islink(top) or not os.path.isdir(top):
            continue
        keys = entry.split(",")
        for k in keys:
            if k in by_ctrl:
                out[entry] = by_ctrl[k]
                break
    return out


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.200-254.x.0 that no route of this host covers or overlaps."""
    routes = []
    for line in _run(["ip", "-4", "route", "show", "table", "all"]).stdout.decode().splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("broadcast", "local", "unreachable", "blackhole", "prohibit"):
            word = line.split()[1]
        if word == "default":
            continue
        try:
            routes.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{200 + secrets.randbelow(55)}.{secrets.randbelow(256)}.0/24")
        if not any(net.overlaps(r) for r in routes):
            return net
    raise Unavailable("no free 10.x.y.0/24 for a private bridge")


def _busybox() -> Optional[str]:
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(p):
            return p
    return None


def skip_reason() -> Optional[str]:
    if os.geteuid() != 0:
        return "needs root (dockerd)"
    for tool in ("dockerd", "containerd", "docker", "ctr", "runc", "ip"):
        if not shutil.which(tool):
            return f"{tool} not installed (tests/run installs docker.io)"
    if not _busybox():
        return "busybox-static not installed"
    if not os.path.isdir(os.path.join(CGROOT, "memory")):
        return "no cgroup v1 memory hierarchy (these tests are written for this machine's hybrid layout)"
    return None


class Daemon:
    """One private dockerd; `docker()` and `ctr()` talk to it."""

    def __init__(self, storage_driver: str = "vfs") -> None:
        tag = secrets.token_hex(4)
        self.storage_driver = storage_driver
        self.tag = tag
        self.dir = tempfile.mkdtemp(prefix=PREFIX)
        self.data_root = os.path.join(self.dir, "data")
        self.exec_root = os.path.join(self.dir, "exec")
        self.sock = os.path.join(self.dir, "docker.sock")
        self.pidfile = os.path.join(self.dir, "docker.pid")
        self.host = "unix://" + self.sock
        self.parent = PREFIX + tag  # the daemon's --cgroup-parent (relative: below ours)
        self.bridge = "cgstat-dk" + tag[:6]
        self.subnet: Optional[ipaddress.IPv4Network] = None
        self.proc: Optional[subprocess.Popen] = None
        self.parents: List[str] = [self.parent]  # every cgroup parent our containers use
        self.ctr_ids: Dict[str, List[str]] = {}  # containerd namespace -> container IDs
        self._had_key = os.path.exists("/etc/docker/key.json")
        self._had_run_containerd = os.path.exists("/run/containerd")
        self.env = dict(os.environ, DOCKER_HOST=self.host)
        self.env.pop("DOCKER_CONTEXT", None)

    @property
    def containerd_sock(self) -> str:
        return os.path.join(self.exec_root, "containerd", "containerd.sock")

    def docker(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        return _run(["docker", *args], timeout=timeout, check=check, env=self.env)

    def ctr(self, namespace: str, *args: str, timeout: float = 60, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return _run(["ctr", "--address", self.containerd_sock, "-n", namespace, *args],
                    timeout=timeout, check=check, **kw)

    # -- start ----------------------------------------------------------------------------

    def start(self) -> None:
        self.subnet = _free_subnet()
        gw = f"{next(self.subnet.hosts())}/{self.subnet.prefixlen}"
        _run(["ip", "link", "add", "name", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", gw, "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        log = open(os.path.join(self.dir, "dockerd.log"), "wb")
        argv = ["dockerd", "--data-root", self.data_root, "--exec-root", self.exec_root,
                "-H", self.host, "--pidfile", self.pidfile, "--iptables=false", "--ip-masq=false",
                "--ip-forward=false", "--storage-driver=" + self.storage_driver, "--bridge", self.bridge,
                "--cgroup-parent", self.parent, "--exec-opt", "native.cgroupdriver=cgroupfs"]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(f"dockerd exited {self.proc.returncode}: {self.log_tail()}")
            if os.path.exists(self.sock) and self.docker("version", check=False, timeout=10).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise Unavailable(f"dockerd did not answer within 60 s: {self.log_tail()}")
        self._import_image()

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir, "dockerd.log"), "rb") as f:
                return f.read()[-1500:].decode(errors="replace")
        except OSError:
            return ""

    def _import_image(self) -> None:
        rootfs = os.path.join(self.dir, "rootfs")
        os.makedirs(os.path.join(rootfs, "bin"))
        for d in ("tmp", "proc", "sys", "dev", "etc"):
            os.makedirs(os.path.join(rootfs, d))
        shutil.copy(_busybox() or "/bin/busybox", os.path.join(rootfs, "bin", "busybox"))
        for applet in _APPLETS:
            os.symlink("busybox", os.path.join(rootfs, "bin", applet))
        tar_path = os.path.join(self.dir, "rootfs.tar")
        with tarfile.open(tar_path, "w") as tar:
            tar.add(rootfs, arcname=".")
        with open(tar_path, "rb") as f:
            _run(["docker", "import", "-", IMAGE], stdin=f, env=self.env, timeout=120)

    def import_to_containerd(self, namespace: str) -> None:
        saved = os.path.join(self.dir, "image.tar")
        if not os.path.exists(saved):
            self.docker("save", "-o", saved, IMAGE, timeout=120)
        with open(saved, "rb") as f:
            self.ctr(namespace, "images", "import", "--snapshotter", "native", "-", stdin=f, timeout=120)

    # -- containers -----------------------------------------------------------------------

    def run(self, name: str, *args: str, cmd: str, cgroup_parent: Optional[str] = None) -> str:
        """docker run -d; returns the full ID."""
        extra = []
        if cgroup_parent is not None:
            extra = ["--cgroup-parent", cgroup_parent]
            if cgroup_parent not in self.parents:
                self.parents.append(cgroup_parent)
        out = self.docker("run", "-d", "--name", name, *extra, *args, IMAGE, "sh", "-c", cmd, timeout=120)
        return out.stdout.decode().strip()

    def ctr_run(self, namespace: str, cid: str, cgroup: str, annotations: Dict[str, str], cmd: str) -> None:
        top = cgroup.split("/")[0]
        if top not in self.parents:
            self.parents.append(top)
        ann = [a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")]
        self.ctr(namespace, "run", "-d", "--snapshotter", "native", "--cgroup", cgroup, *ann,
                 CTR_IMAGE, cid, "sh", "-c", cmd)
        self.ctr_ids.setdefault(namespace, []).append(cid)

    # -- stop -----------------------------------------------------------------------------

    def stop(self) -> None:
        errors: List[str] = []

        def attempt(what, fn):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - every step is tried, the first failure reported
                errors.append(f"{what}: {exc!r}")

        if self.proc is not None and self.proc.poll() is None:
            for ns, ids in self.ctr_ids.items():
                for cid in ids:
                    attempt("ctr kill", lambda: self.ctr(ns, "task", "kill", "-s", "KILL", cid, check=False, timeout=20))
                    attempt("ctr task rm", lambda: self._ctr_task_rm(ns, cid))
                    attempt("ctr rm", lambda: self.ctr(ns, "container", "rm", cid, check=False, timeout=20))
            attempt("docker rm", self._remove_containers)
        attempt("dockerd", self._stop_daemon)
        attempt("cgroups", self._remove_cgroups)
        attempt("bridge", lambda: _run(["ip", "link", "del", self.bridge], check=False))
        attempt("files", self._remove_files)
        if errors:
            raise RuntimeError("; ".join(errors))

    def _ctr_task_rm(self, ns: str, cid: str) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.ctr(ns, "task", "rm", cid, check=False, timeout=20).returncode == 0:
                return
            if b"not found" in self.ctr(ns, "task", "ls", "-q", check=False, timeout=20).stdout:
                return
            time.sleep(0.1)

    def _remove_containers(self) -> None:
        ids = self.docker("ps", "-aq", timeout=30).stdout.decode().split()
        if ids:
            self.docker("rm", "-f", *ids, timeout=120)

    def _stop_daemon(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)  # dockerd stops its own containerd
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # its containerd and shims, should any outlive it: only processes whose command
        # line names our private folder
        for pid in _pids_mentioning(self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _remove_cgroups(self) -> None:
        own = own_cgroups()
        for hier, base in own.items():
            for parent in self.parents:
                top = os.path.normpath(f"{CGROOT}/{hier}/{base}/{parent.split('/')[0]}")
                if not os.path.basename(top).startswith(PREFIX) or not os.path.isdir(top):
                    continue
                walk = sorted((d for d, _, _ in os.walk(top)), key=lambda d: -d.count("/"))
                for d in walk:
                    for _ in range(50):
                        try:
                            os.rmdir(d)
                            break
                        except FileNotFoundError:
                            break
                        except OSError:
                            time.sleep(0.05)

    def _remove_files(self) -> None:
        mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
        for m in sorted((m for m in mounts if m.startswith(self.dir + "/")), key=len, reverse=True):
            _run(["umount", "-l", m], check=False)
        if not any(m.startswith(self.dir + "/") for m in (line.split()[4] for line in open("/proc/self/mountinfo"))):
            shutil.rmtree(self.dir, ignore_errors=True)
        if not self._had_key and _pids_named("dockerd") == []:
            try:
                os.unlink("/etc/docker/key.json")
            except FileNotFoundError:
                pass
        if not self._had_run_containerd:
            # what a shim leaves (runc's state root, fifo and socket folders): empty
            # folders only, never another containerd's files
            for d, _, _ in sorted(os.walk("/run/containerd"), key=lambda w: -w[0].count("/")):
                try:
                    os.rmdir(d)
                except OSError:
                    pass


def _pids_mentioning(text: str) -> List[int]:
    out = []
    needle = text.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    out.append(int(entry))
        except OSError:
            continue
    return out


def _pids_named(comm: str) -> List[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() == comm:
                    out.append(int(entry))
        except OSError:
            continue
    return out


_started: List[Daemon] = []


def start(storage_driver: str = "vfs") -> Daemon:
    """A started daemon. `storage_driver`: vfs (works everywhere, copies every layer
    whole) or overlay2 (where the kernel mounts overlayfs on the data root's file system:
    an image build's steps cost a layer each, not a copy of the whole image each)."""
    reason = skip_reason()
    if reason:
        raise Unavailable(reason)
    d = Daemon(storage_driver)
    _started.append(d)
    try:
        d.start()
    except Unavailable:
        stop(d)
        raise
    except Exception as exc:
        tail = d.log_tail()
        stop(d)
        raise Unavailable(f"dockerd could not be set up: {exc!r} {tail}") from None
    return d


def stop(d: Daemon) -> None:
    if d in _started:
        _started.remove(d)
        d.stop()


@atexit.register
def _stop_all() -> None:
    for d in list(_started):
        try:
            stop(d)
        except Exception as exc:  # noqa: BLE001
            print(f"realdocker: cleanup failed: {exc!r}")


def docker_stats(d: Daemon) -> Dict[str, dict]:
    """`docker stats --no-stream --format '{{json .}}'`, by 12-hex ID."""
    out = d.docker("stats", "--no-stream", "--format", "{{json .}}", timeout=120).stdout.decode()
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {r["ID"][:12]: r for r in rows}


def docker_inspect(d: Daemon, ids: List[str]) -> Dict[str, dict]:
    out = d.docker("inspect", *ids, timeout=60).stdout.decode()
    return {c["Id"]: c for c in json.loads(out)}
