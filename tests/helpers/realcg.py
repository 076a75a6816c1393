"""Real-cgroup test harness for cgstat: v1 and hybrid hosts, and pure cgroup v2 hosts.

Rules this module keeps (see the project's machine notes):

* cgroups are created only *below the test process's own cgroup* in each hierarchy (read from
  /proc/self/cgroup: on the dev machines memory is nested, e.g. /process_api/<hash>), always
  with the prefix ``cgstat-test-<run>-`` (PREFIX);
* only cgroups created here are ever written to; only processes started here are moved or
  killed;
* everything is removed deepest-first, also when a test fails (fixtures + an atexit net).

On a pure cgroup v2 host the tests need a cgroup of their own with the controllers delegated
(systemd: a unit with Delegate=yes, e.g. ``systemd-run -p Delegate=yes --pipe --wait pytest``,
which is how tests/guest runs them). v2 forbids processes in a cgroup that hands controllers
to its children, so the harness moves its own process (only when it is alone there) into a
leaf ``cgstat-test-runner`` and enables cpu, memory, io and pids for the test groups beside it;
at exit it moves itself back and removes the leaf. Modules that read v1-only files say so with
``REALCG_V1_ONLY = "why"`` and skip on v2 with that reason; modules ported to both set
``REALCG_V2 = True``.

Public pieces:

* ``Hierarchies`` - the mounted cgroup hierarchies and our own path in each.
* ``TestGroup`` - one cgroup with the same relative name in several hierarchies; set limits,
  start processes directly inside it, clean up.
* ``Runc`` / ``RuncContainer`` - a busybox bundle run by ``runc`` with a relative
  ``cgroupsPath`` such as ``cgstat-test-<rand>/docker/<64hex>``.
* pytest fixtures: ``realcg_env``, ``workload_bin``, ``make_group``, ``runc``, ``run_cgstat``.
"""
from __future__ import annotations

import atexit
import errno
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterable, List, Optional

import pytest

# The run's own prefix: cgstat-test-<run>- (the run's tag shared with pytest-xdist's workers
# and the tests' children through the environment), so that what one run makes is told
# apart from another's beside it (tests/leftovers.py).
RUN = os.environ.setdefault("CGSTAT_TEST_RUN", secrets.token_hex(3))
PREFIX = "cgstat-test-%s-" % RUN
RUNNER = PREFIX + "runner"  # pure v2: the leaf the test process moves itself into
V2_CONTROLLERS = ("cpu", "memory", "io", "pids")
CGROOT = "/sys/fs/cgroup"
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
TOOLS = os.path.join(TESTS, "tools")

# hierarchies a plain test group lives in (those missing on a host are skipped)
DEFAULT_HIERARCHIES = ("cpu", "cpuacct", "memory", "blkio", "pids", "unified")
# cpu.shares of a group (or runc container) given a CPU quota: tests expect a burner to get
# its quota (0.5 core -> 50 %). With the default 1024 the group shares a CPU evenly with each
# busy task beside it (the suite's other workers, a contributor's builds): two of them leave
# it a third of a core. Ten times the default lets it take its quota first; the quota caps
# what it takes, so the others lose no more than that.
QUOTA_SHARES = 10240


# --------------------------------------------------------------------------- hierarchies


def _hier_keys(super_opts: str, fstype: str) -> List[str]:
    if fstype == "cgroup2":
        return ["unified"]
    keys = []
    for opt in super_opts.split(","):
        if opt.startswith("name="):
            keys.append(opt[5:])
        elif opt in ("rw", "ro") or "=" in opt or opt in ("noprefix", "clone_children", "xattr", "cpuset_v2_mode", "favordynmods"):
            continue
        else:
            keys.append(opt)
    return keys


class Hierarchies:
    """Mount points of all cgroup hierarchies and this process's own path in each."""

    def __init__(self, mountinfo: str = "/proc/self/mountinfo", cgroup: str = "/proc/self/cgroup"):
        self.mounts: Dict[str, str] = {}  # key ("cpu", "memory", "systemd", "unified") -> mountpoint
        self.mount_root: Dict[str, str] = {}  # key -> root of the mount inside the hierarchy
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                rfields = right.split()
                if len(rfields) < 3 or rfields[0] not in ("cgroup", "cgroup2"):
                    continue
                mnt = fields[4].replace("\\040", " ")
                for key in _hier_keys(rfields[2], rfields[0]):
                    self.mounts.setdefault(key, mnt)
                    self.mount_root.setdefault(key, fields[3])
        self.own: Dict[str, str] = {}  # key -> our path inside the hierarchy
        self.names: Dict[str, str] = {}  # key -> its hierarchy's name in /proc/PID/cgroup
        with open(cgroup) as f:
            for line in f:
                line = line.rstrip("\n")
                if not line:
                    continue
                _, ctrls, path = line.split(":", 2)
                if ctrls == "":
                    if os.path.basename(path) == RUNNER:  # our own leaf (see the docstring)
                        path = os.path.dirname(path)
                    self.own["unified"] = path
                    self.names["unified"] = "unified"
                    continue
                for c in ctrls.split(","):
                    self.own[c[5:] if c.startswith("name=") else c] = path
                    self.names[c[5:] if c.startswith("name=") else c] = ctrls

    @property
    def v1(self) -> bool:
        return any(k != "unified" for k in self.mounts)

    @property
    def v2(self) -> bool:
        """Pure cgroup v2: one hierarchy, every controller in it."""
        return not self.v1 and "unified" in self.mounts

    def key(self, key: str) -> str:
        """The hierarchy holding controller ``key`` here (on pure v2: the one there is)."""
        return "unified" if self.v2 else key

    def has(self, key: str) -> bool:
        return key in self.mounts and key in self.own

    def name(self, key: str) -> str:
        """The name of the hierarchy holding ``key`` as cgstat's ``paths`` says it (the
        controllers of /proc/PID/cgroup: "cpu,cpuacct" where systemd co-mounts the two,
        "cpu" where they are apart, "unified" on pure v2)."""
        if self.v2:
            return "unified"
        return self.names.get(key, key)

    def own_dir(self, key: str) -> str:
        """Filesystem directory of our own cgroup in hierarchy ``key``."""
        own = self.own[key]
        root = self.mount_root.get(key, "/")
        if root != "/" and own.startswith(root):
            own = own[len(root):] or "/"
        return os.path.normpath(self.mounts[key] + "/" + own)

    def rel(self, key: str, *parts: str) -> str:
        """Path inside hierarchy ``key`` (as /proc/<pid>/cgroup shows it) of own/parts."""
        return os.path.normpath("/".join([self.own[key]] + list(parts))).replace("//", "/")

    def distinct(self, keys: Iterable[str]) -> List[str]:
        """keys that exist here, one per mount point (co-mounted cpu,cpuacct count once)."""
        seen, out = set(), []
        for k in keys:
            if not self.has(k):
                continue
            d = self.own_dir(k)
            if d in seen:
                continue
            seen.add(d)
            out.append(k)
        return out


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def flat_keyed(text: str) -> Dict[str, int]:
    """A flat-keyed cgroup file ("key value" lines: cpu.stat, memory.events, ...)."""
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def proc_cgroups(pid: int, hier: "Hierarchies") -> Dict[str, str]:
    """controller -> path of ``pid``'s cgroup (on pure v2 every controller has the one path)."""
    out: Dict[str, str] = {}
    for line in read("/proc/%d/cgroup" % pid).splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            out["unified"] = path
        for c in filter(None, ctrls.split(",")):
            out[c[5:] if c.startswith("name=") else c] = path
    if hier.v2:
        for k in DEFAULT_HIERARCHIES:
            out[k] = out["unified"]
    return out


def _write(path: str, value) -> None:
    # one write() call: cgroupfs files want the whole value in one go
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def root_disk() -> str:
    """MAJ:MIN of the whole disk holding / (partition -> parent disk via /sys)."""
    st = os.stat("/")
    maj, mnr = os.major(st.st_dev), os.minor(st.st_dev)
    sysdev = "/sys/dev/block/%d:%d" % (maj, mnr)
    try:
        if os.path.exists(os.path.join(sysdev, "partition")):
            parent = os.path.dirname(os.path.realpath(sysdev))
            return read(os.path.join(parent, "dev")).strip()
    except OSError:
        pass
    return "%d:%d" % (maj, mnr)


def disk_name(majmin: str) -> Optional[str]:
    maj, mnr = majmin.split(":")
    with open("/proc/partitions") as f:
        for line in f:
            p = line.split()
            if len(p) == 4 and p[0] == maj and p[1] == mnr:
                return p[3]
    return None


# --------------------------------------------------------------------------- cleanup registry

_live_groups: List["TestGroup"] = []
_live_containers: List["RuncContainer"] = []


def _rmdir_retry(path: str, tries: int = 50) -> None:
    for i in range(tries):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or i == tries - 1:
                raise
            time.sleep(0.05)


def cleanup_all() -> None:
    for c in list(_live_containers):
        try:
            c.destroy()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            print("realcg: container cleanup failed: %r" % (e,), file=sys.stderr)
    for g in list(_live_groups):
        try:
            g.destroy()
        except Exception as e:  # noqa: BLE001
            print("realcg: group cleanup failed: %r" % (e,), file=sys.stderr)


atexit.register(cleanup_all)


# --------------------------------------------------------------------------- processes


class Proc:
    """A process started by the harness inside a test group."""

    def __init__(self, popen: subprocess.Popen, argv: List[str]):
        self.popen = popen
        self.argv = argv

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_line(self, want: str, timeout: float = 30.0) -> str:
        """Wait until the process prints a line equal to ``want`` on stdout."""
        deadline = time.monotonic() + timeout
        out = self.popen.stdout
        assert out is not None, "process started without stdout pipe"
        buf = b""
        while time.monotonic() < deadline:
            r, _, _ = select.select([out], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                break
            chunk = os.read(out.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if line.strip() == want:
                    return line
        raise TimeoutError("%r did not print %r within %ss (got %r, rc=%r)" % (
            self.argv, want, timeout, buf, self.popen.poll()))

    def wait(self, timeout: float = 60.0) -> int:
        return self.popen.wait(timeout=timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for s in (self.popen.stdout, self.popen.stderr):
            if s is not None:
                s.close()


# --------------------------------------------------------------------------- test group


class TestGroup:
    """One test cgroup named ``cgstat-test-<rand>`` below our own cgroup in each hierarchy."""

    __test__ = False  # not a pytest test class

    def __init__(self, hier: Hierarchies, keys: Iterable[str] = DEFAULT_HIERARCHIES,
                 name: Optional[str] = None, parent: Optional["TestGroup"] = None):
        self.hier = hier
        self.name = name or PREFIX + secrets.token_hex(4)
        assert self.name.startswith(PREFIX)
        if parent is not None:  # a child of a test group of ours (its name below the parent's)
            self.name = parent.name + "/" + self.name
            keys = [k for k in keys if hier.key(k) in parent.dirs]
            if "unified" in parent.dirs and hier.v2:  # its controllers, in our parent's subtree_control
                _write(parent.path("unified", "cgroup.subtree_control"), " ".join("+" + c for c in V2_CONTROLLERS))
        self.keys = hier.distinct(keys)
        self.dirs: Dict[str, str] = {}
        self.procs: List[Proc] = []
        _live_groups.append(self)
        try:
            for k in self.keys:
                d = os.path.join(hier.own_dir(k), self.name)
                os.mkdir(d)
                self.dirs[k] = d
        except Exception:
            self.destroy()
            raise

    # paths ---------------------------------------------------------------
    def rel(self, key: str) -> str:
        """Path of this group inside hierarchy ``key`` as /proc/<pid>/cgroup shows it."""
        return self.hier.rel(self.hier.key(key), self.name)

    @property
    def cgroup(self) -> str:
        """The path cgstat should report as ``cgroup``: the CPU hierarchy's path."""
        return self.rel("cpu" if "cpu" in self.dirs else self.keys[0])

    def path(self, key: str, fname: str = "") -> str:
        k = self.hier.key(key)
        if k not in self.dirs:  # co-mounted with another key (cpuacct with cpu): its folder
            own = self.hier.own_dir(k)
            k = next(x for x in self.dirs if self.hier.own_dir(x) == own)
        d = self.dirs[k]
        return os.path.join(d, fname) if fname else d

    def read(self, key: str, fname: str) -> str:
        return read(self.path(key, fname))

    def set(self, key: str, fname: str, value) -> None:
        """Write a control file of THIS group (never anything else)."""
        p = self.path(key, fname)
        assert os.path.dirname(p).endswith("/" + self.name)
        _write(p, value)

    # limits ---------------------------------------------------------------
    def set_cpu_quota(self, quota_us: int, period_us: int = 100000) -> None:
        """The quota, and a weight that lets a busy member get it (QUOTA_SHARES)."""
        if self.hier.v2:
            self.set("cpu", "cpu.max", "%d %d" % (quota_us, period_us))
            # cpu.weight is cpu.shares scaled to 1..10000 (the kernel's and runc's mapping)
            self.set("cpu", "cpu.weight", min(10000, 1 + ((QUOTA_SHARES - 2) * 9999) // 262142))
            return
        self.set("cpu", "cpu.cfs_period_us", period_us)
        self.set("cpu", "cpu.cfs_quota_us", quota_us)
        self.set("cpu", "cpu.shares", QUOTA_SHARES)

    def set_memory_limit(self, nbytes: int) -> int:
        fname = "memory.max" if self.hier.v2 else "memory.limit_in_bytes"
        self.set("memory", fname, nbytes)
        if self.hier.v2:
            self.set("memory", "memory.swap.max", 0)  # a limit that holds without swap
        return int(self.read("memory", fname))

    def set_pids_max(self, n) -> None:
        self.set("pids", "pids.max", n)

    def set_blkio_rule(self, majmin: Optional[str] = None, bps: int = 107374182400) -> str:
        """A harmless, very high write throttle so that v1 throttle statistics count (v2's
        io.stat counts without one: nothing is written there)."""
        majmin = majmin or root_disk()
        if not self.hier.v2:
            self.set("blkio", "blkio.throttle.write_bps_device", "%s %d" % (majmin, bps))
        return majmin

    # the kernel's own figures, from whichever files this layout has ---------------------
    def cpu_usage_seconds(self) -> float:
        if self.hier.v2:
            return flat_keyed(self.read("cpu", "cpu.stat"))["usage_usec"] / 1e6
        return int(self.read("cpuacct", "cpuacct.usage")) / 1e9

    def cpu_throttling(self) -> Dict[str, float]:
        """nr_periods, nr_throttled and throttled_seconds from cpu.stat."""
        st = flat_keyed(self.read("cpu", "cpu.stat"))
        secs = st["throttled_usec"] / 1e6 if self.hier.v2 else st["throttled_time"] / 1e9
        return {"nr_periods": st["nr_periods"], "nr_throttled": st["nr_throttled"],
                "throttled_seconds": secs}

    def memory_usage_bytes(self) -> int:
        return int(self.read("memory", "memory.current" if self.hier.v2 else "memory.usage_in_bytes"))

    def oom_kills(self) -> int:
        text = self.read("memory", "memory.events" if self.hier.v2 else "memory.oom_control")
        return flat_keyed(text).get("oom_kill", 0)

    def io_write_bytes(self, majmin: str) -> int:
        if self.hier.v2:
            for line in self.read("io", "io.stat").splitlines():
                p = line.split()
                if p and p[0] == majmin:
                    return int(dict(kv.split("=", 1) for kv in p[1:]).get("wbytes", 0))
            return 0
        for line in self.read("blkio", "blkio.throttle.io_service_bytes").splitlines():
            p = line.split()
            if len(p) == 3 and (p[0], p[1]) == (majmin, "Write"):
                return int(p[2])
        return 0

    # processes ------------------------------------------------------------
    def start(self, argv: List[str], stdout=subprocess.PIPE, **kw) -> Proc:
        """Start argv with the child joining every hierarchy of this group before exec."""
        procs_files = [self.path(k, "cgroup.procs") for k in self.keys]

        def join():  # runs in the child between fork and exec
            pid = str(os.getpid()).encode()
            for pf in procs_files:
                fd = os.open(pf, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)

        p = subprocess.Popen(argv, stdout=stdout, stdin=subprocess.DEVNULL,
                             preexec_fn=join, **kw)  # noqa: PLW1509 (single-threaded tests)
        proc = Proc(p, list(argv))
        self.procs.append(proc)
        return proc

    def members(self, key: str = "cpu") -> List[int]:
        return [int(x) for x in self.read(key, "cgroup.procs").split()]

    def destroy(self) -> None:
        for p in reversed(self.procs):
            p.kill()
        self.procs = []
        # any straggler that is still inside (children of our processes): kill by pid only
        # if it is in THIS group (we started it, directly or indirectly)
        for _ in range(50):
            left = set()
            for k, d in self.dirs.items():
                try:
                    left.update(int(x) for x in read(os.path.join(d, "cgroup.procs")).split())
                except OSError:
                    pass
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for k in reversed(list(self.dirs)):
            _rmdir_tree(self.dirs[k])
        self.dirs = {}
        if self in _live_groups:
            _live_groups.remove(self)


def _rmdir_tree(top: str) -> None:
    """Remove a cgroup directory and its sub-cgroups, deepest first (only our prefix)."""
    if not os.path.isdir(top):
        return
    subdirs = []
    for dirpath, dirnames, _ in os.walk(top):
        for dn in dirnames:
            subdirs.append(os.path.join(dirpath, dn))
    for d in sorted(subdirs, key=lambda p: p.count("/"), reverse=True):
        _rmdir_retry(d)
    _rmdir_retry(top)


# --------------------------------------------------------------------------- workload binary

_workload_cache: Dict[str, str] = {}


def build_workload(outdir: Optional[str] = None) -> str:
    """Compile tests/tools/workload.c (static if possible); returns the binary path."""
    src = os.path.join(TOOLS, "workload.c")
    prebuilt = os.environ.get("CGSTAT_TEST_WORKLOAD")  # the guest harness builds it on the host
    if prebuilt and os.access(prebuilt, os.X_OK):
        return prebuilt
    if src in _workload_cache and os.path.exists(_workload_cache[src]):
        return _workload_cache[src]
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise RuntimeError("no C compiler")
    outdir = outdir or tempfile.mkdtemp(prefix="cgstat-wl-")
    out = os.path.join(outdir, "workload")
    r = subprocess.run([gcc, "-O2", "-static", "-o", out, src], capture_output=True, check=False)
    if r.returncode != 0:
        r = subprocess.run([gcc, "-O2", "-o", out, src], capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError("cannot build workload: %s" % r.stderr.decode(errors="replace"))
    _workload_cache[src] = out
    return out


# --------------------------------------------------------------------------- runc

def ensure_runc() -> str:
    """Path to runc, installing runc and busybox-static with apt-get if needed."""
    runc = shutil.which("runc") or ("/usr/sbin/runc" if os.path.exists("/usr/sbin/runc") else None)
    bb = _busybox()
    if runc and bb:
        return runc
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError("runc not installed and cannot install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    last = None
    for _ in range(12):  # the dpkg lock may be held by someone else for a while
        r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "runc",
                            "busybox-static"], capture_output=True, env=env, timeout=300, check=False)
        if r.returncode == 0:
            break
        last = r.stderr.decode(errors="replace")
        if "lock" not in last:
            break
        time.sleep(5)
    runc = shutil.which("runc") or ("/usr/sbin/runc" if os.path.exists("/usr/sbin/runc") else None)
    if not runc or not _busybox():
        raise RuntimeError("runc/busybox-static not installable: %s" % (last,))
    return runc


def _busybox() -> Optional[str]:
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(p):
            return p
    return None


class Runc:
    """runc with a private state directory (--root) so tests never see other containers."""

    def __init__(self, runc: str, workdir: str):
        self.runc = runc
        self.workdir = workdir
        self.state = os.path.join(workdir, "runc-state")
        os.makedirs(self.state, exist_ok=True)

    def cmd(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([self.runc, "--root", self.state] + list(args), capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=timeout, check=False)
        if check and r.returncode != 0:
            raise RuntimeError("runc %s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
        return r

    def container(self, args: List[str], hier: Hierarchies, memory_limit: int = 268435456,
                  pids_limit: int = 64, cpu_quota: int = 50000, cpu_period: int = 100000,
                  parent: Optional[str] = None) -> "RuncContainer":
        return RuncContainer(self, args, hier, memory_limit, pids_limit, cpu_quota, cpu_period,
                             parent)


class RuncContainer:
    """A busybox container whose relative cgroupsPath is <parent>/docker/<64hex>."""

    def __init__(self, rt: Runc, args: List[str], hier: Hierarchies, memory_limit: int,
                 pids_limit: int, cpu_quota: int, cpu_period: int, parent: Optional[str]):
        self.rt = rt
        self.hier = hier
        self.id = secrets.token_hex(32)  # 64 hex, like a Docker container ID
        self.parent = parent or PREFIX + secrets.token_hex(4)
        assert self.parent.startswith(PREFIX)
        self.cgroups_path = "%s/docker/%s" % (self.parent, self.id)
        if hier.v2:
            # runc joins a relative path to its own cgroup: on v2 that is our runner leaf,
            # which holds a process and so can't have children with controllers
            self.cgroups_path = hier.rel("unified", self.cgroups_path)
        self.limits = dict(memory=memory_limit, pids=pids_limit, quota=cpu_quota, period=cpu_period)
        self.bundle = os.path.join(rt.workdir, "bundle-" + self.id[:12])
        self.started = False
        _live_containers.append(self)
        try:
            self._make_bundle(args)
        except Exception:
            self.destroy()
            raise

    def _make_bundle(self, args: List[str]) -> None:
        rootfs = os.path.join(self.bundle, "rootfs")
        for d in ("bin", "dev", "proc", "sys", "tmp", "etc"):
            os.makedirs(os.path.join(rootfs, d), exist_ok=True)
        shutil.copy2(_busybox(), os.path.join(rootfs, "bin", "busybox"))
        for applet in ("sh", "dd", "sleep", "cat", "ls", "true"):
            os.symlink("busybox", os.path.join(rootfs, "bin", applet))
        self.rt.cmd("spec", "--bundle", self.bundle)
        cfg_path = os.path.join(self.bundle, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["process"]["terminal"] = False
        cfg["process"]["args"] = args
        cfg["root"]["readonly"] = False
        cfg["hostname"] = "cgstat-test"
        lin = cfg.setdefault("linux", {})
        lin["cgroupsPath"] = self.cgroups_path
        res = lin.setdefault("resources", {})
        res["memory"] = {"limit": self.limits["memory"]}
        res["pids"] = {"limit": self.limits["pids"]}
        res["cpu"] = {"quota": self.limits["quota"], "period": self.limits["period"],
                      "shares": QUOTA_SHARES}
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)

    def run(self) -> None:
        # stdio must not be pipes: the detached container inherits and keeps them open
        self.started = True  # from here on destroy() must kill/delete
        errlog = os.path.join(self.bundle, "runc-run.err")
        with open(errlog, "wb") as err:
            r = subprocess.run([self.rt.runc, "--root", self.rt.state, "run", "-d", "--bundle",
                                self.bundle, self.id], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=err, timeout=60, check=False)
        if r.returncode != 0:
            raise RuntimeError("runc run failed: %s" % read(errlog))

    def state(self) -> dict:
        return json.loads(self.rt.cmd("state", self.id).stdout)

    @property
    def pid(self) -> int:
        return int(self.state()["pid"])

    def stats(self) -> dict:
        """runc's own reading of the cgroup (``runc events --stats``)."""
        out = self.rt.cmd("events", "--stats", self.id).stdout.decode()
        return json.loads(out.strip().splitlines()[-1])

    def rel(self, key: str) -> str:
        if self.hier.v2:
            return self.cgroups_path
        return self.hier.rel(key, self.cgroups_path)

    def dir(self, key: str) -> str:
        if self.hier.v2:
            return os.path.normpath(self.hier.mounts["unified"] + "/" + self.cgroups_path)
        return os.path.join(self.hier.own_dir(key), self.cgroups_path)

    def destroy(self) -> None:
        if self.started:
            self.rt.cmd("kill", self.id, "KILL", check=False)
            for _ in range(100):
                r = self.rt.cmd("delete", "--force", self.id, check=False)
                if r.returncode == 0 or b"does not exist" in r.stderr or b"not exist" in r.stderr:
                    break
                time.sleep(0.05)
            self.started = False
        # runc removes the leaf; remove <parent>/docker and <parent> (deepest first) in
        # every hierarchy, but only below our own cgroup and only our prefix
        for key in self.hier.distinct(self.hier.mounts):
            top = os.path.join(self.hier.own_dir(key), self.parent)
            if os.path.basename(top).startswith(PREFIX):
                _rmdir_tree(top)
        shutil.rmtree(self.bundle, ignore_errors=True)
        if self in _live_containers:
            _live_containers.remove(self)


# --------------------------------------------------------------------------- cgstat CLI


def cgstat(*args: str, timeout: float = 120) -> List[dict]:
    """Run ``python -m cgstat ARGS`` from the repository; returns the parsed JSON lines."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, "-m", "cgstat"] + list(args), capture_output=True,
                       cwd=REPO, env=env, timeout=timeout, check=False)
    if r.returncode != 0:
        raise AssertionError("cgstat %s exited %d:\n%s" % (" ".join(args), r.returncode,
                                                          r.stderr.decode(errors="replace")))
    recs = []
    for line in r.stdout.decode().splitlines():
        if line.strip():
            recs.append(json.loads(line))
    return recs


def find(records: List[dict], cgroup: str) -> dict:
    hits = [r for r in records if r.get("type") == "cgroup" and r.get("cgroup") == cgroup]
    assert len(hits) == 1, "expected exactly one record for %s, got %d (cgroups seen: %s)" % (
        cgroup, len(hits), sorted(str(r.get("cgroup")) for r in records))
    return hits[0]


# --------------------------------------------------------------------------- fixtures


def _v2_prepare(h: Hierarchies) -> Optional[str]:
    """Pure v2: controllers for the test groups below our own cgroup (see the docstring);
    returns why not, or None."""
    base = h.own_dir("unified")
    have = set(read(os.path.join(base, "cgroup.controllers")).split())
    missing = [c for c in V2_CONTROLLERS if c not in have]
    if missing:
        return ("cgroup v2: our cgroup %s has no %s controller delegated (run the tests in a "
                "unit with Delegate=yes, e.g. systemd-run -p Delegate=yes --pipe --wait ...)"
                % (h.own["unified"], ",".join(missing)))
    enabled = set(read(os.path.join(base, "cgroup.subtree_control")).split())
    if set(V2_CONTROLLERS) <= enabled:
        return None
    leaf = os.path.join(base, RUNNER)
    if not os.path.isdir(leaf):
        others = [int(x) for x in read(os.path.join(base, "cgroup.procs")).split()
                  if int(x) != os.getpid()]
        if others:
            return ("cgroup v2: our cgroup %s holds processes this test run did not start (%s); "
                    "run the tests in a delegated unit of their own (systemd-run -p Delegate=yes)"
                    % (h.own["unified"], others[:5]))
        os.mkdir(leaf)
    _write(os.path.join(leaf, "cgroup.procs"), os.getpid())
    _write(os.path.join(base, "cgroup.subtree_control"),
           " ".join("+" + c for c in V2_CONTROLLERS if c not in enabled))
    _v2_undo.append((base, leaf, [c for c in V2_CONTROLLERS if c not in enabled]))
    return None


_v2_undo: List[tuple] = []


def _v2_restore() -> None:
    for base, leaf, enabled in _v2_undo:
        try:
            _write(os.path.join(base, "cgroup.subtree_control"), " ".join("-" + c for c in enabled))
            _write(os.path.join(base, "cgroup.procs"), os.getpid())
            os.rmdir(leaf)
        except OSError as e:  # other test groups still there: their cleanup failed before
            print("realcg: could not undo the v2 runner leaf: %r" % (e,), file=sys.stderr)
    del _v2_undo[:]


atexit.register(_v2_restore)


def skip_reason() -> Optional[str]:
    if not sys.platform.startswith("linux"):
        return "not Linux"
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    if not os.path.isdir(CGROOT):
        return "no %s" % CGROOT
    try:
        h = Hierarchies()
    except OSError as e:
        return "cannot read mountinfo/cgroup: %s" % e
    if h.v2:
        try:
            why = _v2_prepare(h)
        except OSError as e:
            why = "cgroup v2: cannot set up our test cgroups: %s" % e
        if why:
            return why
        h = Hierarchies()
        probe = os.path.join(h.own_dir("unified"), PREFIX + "probe-" + secrets.token_hex(3))
    else:
        if not h.v1:
            return "no cgroup hierarchy mounted"
        for k in ("cpu", "cpuacct", "memory", "pids", "blkio"):
            if not h.has(k):
                return "cgroup v1 controller %s not mounted" % k
        probe = os.path.join(h.own_dir("cpu"), PREFIX + "probe-" + secrets.token_hex(3))
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as e:
        return "cannot create a cgroup below our own: %s" % e
    return None


V2_UNPORTED = ("written for cgroup v1 files (memory.limit_in_bytes, cpuacct.usage, "
               "memory.oom_control, blkio.*); not ported to pure v2")


def _v1_only(request, hier: Hierarchies) -> None:
    """Skip a test of a module that is not written for pure v2 there, saying why."""
    mod = getattr(request, "module", None)
    if hier.v2 and not getattr(mod, "REALCG_V2", False):
        pytest.skip("pure cgroup v2 host: " + getattr(mod, "REALCG_V1_ONLY", V2_UNPORTED))


@pytest.fixture(scope="session")
def _realcg_hier() -> Hierarchies:
    why = skip_reason()
    if why:
        pytest.skip(why)
    return Hierarchies()


@pytest.fixture
def realcg_env(request, _realcg_hier) -> Hierarchies:
    _v1_only(request, _realcg_hier)
    return _realcg_hier


@pytest.fixture(scope="session")
def workload_bin(_realcg_hier, tmp_path_factory) -> str:
    try:
        return build_workload(str(tmp_path_factory.mktemp("workload")))
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.fixture
def make_group(realcg_env):
    made: List[TestGroup] = []

    def factory(keys: Iterable[str] = DEFAULT_HIERARCHIES, parent: Optional[TestGroup] = None) -> TestGroup:
        g = TestGroup(realcg_env, keys, parent=parent)
        made.append(g)
        return g

    yield factory
    for g in reversed(made):
        g.destroy()


@pytest.fixture(scope="session")
def runc_tool(_realcg_hier, tmp_path_factory) -> Runc:
    try:
        path = ensure_runc()
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        pytest.skip("runc unavailable: %s" % e)
    return Runc(path, str(tmp_path_factory.mktemp("runc")))


@pytest.fixture
def make_container(realcg_env, runc_tool):
    made: List[RuncContainer] = []

    def factory(args: List[str], **kw) -> RuncContainer:
        c = runc_tool.container(args, realcg_env, **kw)
        made.append(c)
        return c

    yield factory
    for c in reversed(made):
        c.destroy()


@pytest.fixture
def run_cgstat():
    if not os.path.exists(os.path.join(REPO, "cgstat", "__main__.py")):
        pytest.skip("cgstat package not present")
    return cgstat


# Forks until the kernel refuses (EAGAIN) `n` times once the trigger file appears, then waits
# (its children sleep: they stay in the cgroup, at the limit, until the group is destroyed).
FORK_BOMB = r"""
import os, sys, time
trigger, n = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
while not os.path.exists(trigger):
    time.sleep(0.05)
refused = 0
while refused < n:
    try:
        pid = os.fork()
    except BlockingIOError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(3600)
        os._exit(0)
print("refused", flush=True)
time.sleep(3600)
"""
