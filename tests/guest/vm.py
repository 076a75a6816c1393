"""A booted guest: qemu with the cached image, the agent's channel, cgstat installed.

``Guest.boot()`` starts qemu (TCG unless a probe boot proved KVM works here: on the project's
machines /dev/kvm opens but a guest under it hangs in early boot) with:

* the image's disk as /dev/vda with ``snapshot=on`` (writes go to a temporary overlay, the
  cached image is never changed, every boot starts from the same state);
* the job as /dev/vdb, read-only: a tar of the checkout (tracked and untracked-not-ignored
  files, without the recorded trees), cgstat's wheel built on the host, and the tests' static
  C workload;
* the agent's virtio-serial port joined to a unix socket here; the console (ttyS0) to a file.

qemu dies with the harness (PR_SET_PDEATHSIG) and is killed after ``CGSTAT_GUEST_MAX_S``
(default 1500 s) in any case, so no guest outlives its run; ``close()`` powers the guest off
and kills qemu if it lingers.
Every command has a timeout of its own, enforced in the guest (the agent kills its process
group) and here (the socket read). ``keep_logs()`` writes the console, the journal and what
the harness did into the log folder, for a failure to be read after the fact.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Union

from . import image as images

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = images.REPO
MAX_S = int(os.environ.get("CGSTAT_GUEST_MAX_S", "1500"))
BOOT_TIMEOUT_S = int(os.environ.get("CGSTAT_GUEST_BOOT_TIMEOUT_S", "420"))
SKIP_TREES = ("tests/fixtures/", "tests/corpus/")


class GuestError(Exception):
    """The guest did not boot, or the channel to it broke."""


class Result:
    def __init__(self, argv: Sequence[str], resp: Dict[str, object]):
        self.argv = list(argv)
        self.rc = resp["rc"]
        self.out = base64.b64decode(resp["out"]).decode(errors="replace")
        self.err = base64.b64decode(resp["err"]).decode(errors="replace")
        self.timed_out = bool(resp["timed_out"])
        self.seconds = resp.get("seconds")

    def __repr__(self) -> str:
        return "<%r rc=%s%s\n--- stdout\n%s\n--- stderr\n%s>" % (
            self.argv, self.rc, " TIMED OUT" if self.timed_out else "", self.out[-4000:],
            self.err[-4000:])


class Kind(NamedTuple):
    """One guest to boot: a Debian suite's image and the kernel command line's extra words."""
    suite: str
    cmdline: str
    layout: str  # what /sys/fs/cgroup must be once booted: "v2" or "hybrid"


# The guests: Debian 13 (kernel 6.12, systemd 257) and Debian 12 (kernel 6.1, systemd 252) on
# pure v2, and Debian 12 booted to systemd's hybrid layout (v1 controllers, cpu and cpuacct
# co-mounted, cgroup2 at /sys/fs/cgroup/unified): what older hosts still run. systemd 256+
# refuses v1, so the hybrid guest is Debian 12's.
KINDS = {
    "trixie": Kind("trixie", "", "v2"),
    "bookworm": Kind("bookworm", "", "v2"),
    "bookworm-v1": Kind("bookworm", "systemd.unified_cgroup_hierarchy=0", "hybrid"),
}


def layout_of(mounts: str) -> str:
    """The cgroup layout from /proc/mounts' text: "v2", "hybrid" (v1 controllers and cgroup2
    at unified), "v1" (no cgroup2 at all) or "none"."""
    v1 = v2 = False
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1].startswith("/sys/fs/cgroup"):
            v1 = v1 or parts[2] == "cgroup"
            v2 = v2 or parts[2] == "cgroup2"
    return {(False, True): "v2", (True, True): "hybrid", (True, False): "v1"}.get((v1, v2), "none")


PROBE_S = 20  # a kernel under working KVM prints "Run /init" within a few seconds


def _kvm_works(img: images.Image, workdir: str) -> bool:
    """A short probe boot under KVM, once per machine (the answer is cached beside the images,
    keyed by qemu's version and the host's kernel: what decides whether KVM works here)."""
    want = os.environ.get("CGSTAT_GUEST_KVM", "auto")
    if want in ("0", "no"):
        return False
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
        os.close(fd)
    except OSError:
        return False
    qemu_v = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True,
                            check=False).stdout.decode().splitlines()[0]
    mark = os.path.join(images.CACHE, "kvm-probe.json")
    try:
        with open(mark) as f:
            saved = json.load(f)
        if saved.get("qemu") == qemu_v and saved.get("uname") == os.uname().release:
            return bool(saved["works"])
    except (OSError, ValueError, KeyError):
        pass
    console = os.path.join(workdir, "kvm-probe-console.log")
    argv = ["qemu-system-x86_64", "-accel", "kvm", "-m", "512",
            "-smp", "1", "-nographic", "-no-reboot", "-kernel", img.kernel, "-initrd", img.initrd,
            "-append", "console=ttyS0 panic=-1", "-serial", "file:" + console,
            "-monitor", "none", "-display", "none"]
    works = False
    # the kernel got past early boot: it ran the initramfs, or panicked without a root
    marks = ("Run /init", "Freeing unused kernel", "Kernel panic")
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + PROBE_S
        while time.monotonic() < deadline and p.poll() is None and not works:
            time.sleep(0.5)
            try:
                with open(console, errors="replace") as f:
                    works = any(m in f.read() for m in marks)
            except OSError:
                pass
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    tmp = mark + ".%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump({"qemu": qemu_v, "uname": os.uname().release, "works": works}, f)
    os.replace(tmp, mark)
    return works


class Guest:
    def __init__(self, kind: str, logdir: str):
        if kind not in KINDS:
            raise GuestError("unknown guest %r (known: %s)" % (kind, " ".join(KINDS)))
        self.kind = kind
        self.suite = KINDS[kind].suite
        self.layout = KINDS[kind].layout
        self.logdir = logdir
        self.cmdline_extra = KINDS[kind].cmdline
        os.makedirs(logdir, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="cgstat-guest-")
        self.sock_path = os.path.join(self.work, "agent.sock")
        self.console = os.path.join(logdir, "console.log")
        self.proc: Optional[subprocess.Popen] = None
        self.sock: Optional[socket.socket] = None
        self.buf = b""
        self.seq = 0
        self.history: List[str] = []
        self.image: Optional[images.Image] = None
        self.accel = "tcg"
        self.times: Dict[str, float] = {}

    # -- the job disk ----------------------------------------------------------------------

    def _job_tar(self) -> str:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                               capture_output=True, check=True).stdout.decode().split("\0")
        wheel_dir = os.path.join(self.work, "wheel")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--disable-pip-version-check", "-w", wheel_dir,
                        REPO], check=True, capture_output=True, timeout=300)
        from tests.helpers import realcg  # the tests' C workload, built static here

        os.makedirs(os.path.join(self.work, "bin"))
        workload = realcg.build_workload(os.path.join(self.work, "bin"))
        path = os.path.join(self.work, "job.tar")
        with tarfile.open(path, "w") as tar:
            for f in files:
                if not f or f.startswith(SKIP_TREES) or not os.path.isfile(os.path.join(REPO, f)):
                    continue
                tar.add(os.path.join(REPO, f), arcname="src/" + f, recursive=False)
            for w in os.listdir(wheel_dir):
                tar.add(os.path.join(wheel_dir, w), arcname="wheels/" + w)
            tar.add(workload, arcname="bin/workload")
        size = os.path.getsize(path)
        with open(path, "ab") as f:  # whole sectors for the block device
            f.write(b"\0" * (-size % 512 + 512 * 16))
        return path

    # -- boot ------------------------------------------------------------------------------

    def boot(self, build_log: str) -> None:
        t0 = time.monotonic()
        self.image = images.cached(self.suite)
        if self.image is None:
            self.image = images.build(self.suite, build_log)
            self.times["build_s"] = round(time.monotonic() - t0, 1)
        t_job = time.monotonic()
        job = self._job_tar()
        self.times["job_s"] = round(time.monotonic() - t_job, 1)
        if _kvm_works(self.image, self.work):
            self.accel = "kvm"
        accel = ["-accel", "kvm", "-cpu", "host"] if self.accel == "kvm" else \
            ["-accel", "tcg,thread=multi", "-cpu", "max"]
        append = "root=/dev/vda rw console=ttyS0 panic=-1 quiet systemd.show_status=0 " \
                 "loglevel=4 " + self.cmdline_extra
        argv = ["qemu-system-x86_64", *accel,
                "-smp", "2", "-m", os.environ.get("CGSTAT_GUEST_MEM", "2560"),
                "-nographic", "-no-reboot", "-monitor", "none",
                "-kernel", self.image.kernel, "-initrd", self.image.initrd, "-append", append,
                "-drive", "file=%s,format=raw,if=virtio,snapshot=on,cache=unsafe" % self.image.disk,
                "-drive", "file=%s,format=raw,if=virtio,readonly=on" % job,
                "-serial", "file:" + self.console,
                "-chardev", "socket,id=agent,path=%s,server=on,wait=off" % self.sock_path,
                "-device", "virtio-serial-pci",
                "-device", "virtserialport,chardev=agent,name=cgstat.agent",
                "-nic", "none"]
        env = dict(os.environ, TMPDIR=self.work)  # snapshot=on's overlay lives there
        t1 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=open(os.path.join(self.logdir, "qemu.log"), "wb"),
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        # a harness that hangs: qemu goes after MAX_S all the same
        self._reaper = threading.Timer(MAX_S, self._kill)
        self._reaper.daemon = True
        self._reaper.start()
        deadline = t1 + BOOT_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise GuestError("qemu exited %s during boot (console: %s)" % (
                    self.proc.returncode, self.console))
            if time.monotonic() > deadline:
                raise GuestError("no answer from the guest's agent within %d s (console: %s)" % (
                    BOOT_TIMEOUT_S, self.console))
            try:
                if self.sock is None:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.connect(self.sock_path)
                    self.sock = s
                self._request({"op": "ping"}, timeout_s=3)
                break
            except (OSError, GuestError, TimeoutError):
                time.sleep(1)
        self.times["agent_s"] = round(time.monotonic() - t1, 1)
        r = self.run(["systemctl", "is-system-running", "--wait"], timeout_s=BOOT_TIMEOUT_S)
        self.times["boot_s"] = round(time.monotonic() - t1, 1)
        if r.out.strip() not in ("running", "degraded"):
            raise GuestError("the guest did not come up: %r" % (r,))
        if r.out.strip() == "degraded":
            failed = self.run(["systemctl", "--failed", "--no-legend", "--plain"]).out
            self.history.append("degraded at boot: %s" % failed)
        got = layout_of(self.get("/proc/mounts").decode())
        if got != self.layout:
            raise GuestError("the %s guest booted with cgroup layout %s, not %s" % (
                self.kind, got, self.layout))
        self._warm_once_keys()
        self._install()

    def _warm_once_keys(self) -> None:
        """The kernel's first TCP and UDP packets, made on one vCPU while the guest is idle.

        A socket's first lookup (inet_ehashfn, udp_ehashfn) takes its hash secret through
        net_get_random_once, whose static key a work item then turns off by patching kernel
        text (lib/once.c, text_poke_bp with an int3 in place). Under multi-threaded TCG a
        vCPU running that code as it is patched can take the int3 after the patch is done
        ("Oops: int3" in inet_ehashfn, seen once in a scrape of cgstat-serve: a kernel panic
        and a lost guest). Done here on CPU 0 only, the patch has no other vCPU in that code.
        """
        warm = ("import socket, time\n"
                "for fam, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n"
                "    try:\n"
                "        srv = socket.socket(fam); srv.bind((host, 0)); srv.listen(1)\n"
                "        c = socket.create_connection(srv.getsockname()[:2]); a, _ = srv.accept()\n"
                "        c.sendall(b'x'); a.recv(1); c.close(); a.close(); srv.close()\n"
                "        u = socket.socket(fam, socket.SOCK_DGRAM); u.bind((host, 0))\n"
                "        u.sendto(b'x', u.getsockname()); u.recv(1); u.close()\n"
                "    except OSError:\n"
                "        pass\n"
                "time.sleep(0.5)\n")  # the work items that patch the keys run before anything else
        t0 = time.monotonic()
        self.run(["taskset", "-c", "0", "python3", "-c", warm], timeout_s=120, check=True)
        self.times["warm_s"] = round(time.monotonic() - t0, 1)

    def _install(self) -> None:
        """cgstat as bin/install puts it: its virtualenv /opt/cgstat (made with the image,
        dependencies from wheels), the command linked into /usr/local/bin. From the wheel
        built on the host: the guest has no network and no build backend."""
        t0 = time.monotonic()
        self.sh("mkdir -p /opt/job && tar -xf /dev/vdb -C /opt/job", timeout_s=120, check=True)
        self.sh("/opt/cgstat/bin/pip install -q --no-index --no-deps --force-reinstall "
                "--disable-pip-version-check /opt/job/wheels/cgstat-*.whl && "
                "ln -sf /opt/cgstat/bin/cgstat /usr/local/bin/cgstat && "
                "install -m 0755 /opt/job/src/bin/cgstat-cron /usr/local/bin/cgstat-cron && "
                "cgstat --version", timeout_s=300, check=True)
        self.times["install_s"] = round(time.monotonic() - t0, 1)
        # the checkout's bytecode, written once: the in-guest tests run `python -m cgstat`
        # from it hundreds of times with PYTHONDONTWRITEBYTECODE (as tests/run does here)
        t1 = time.monotonic()
        self.sh("/opt/cgstat/bin/python -m compileall -q /opt/job/src/cgstat", timeout_s=300, check=True)
        self.times["compile_s"] = round(time.monotonic() - t1, 1)

    # -- the channel -----------------------------------------------------------------------

    def _request(self, req: Dict[str, object], timeout_s: float) -> Dict[str, object]:
        if self.sock is None:
            raise GuestError("not connected")
        self.seq += 1
        req = dict(req, id=self.seq)
        self.sock.settimeout(5)
        self.sock.sendall((json.dumps(req) + "\n").encode())
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                resp = json.loads(line)
                if resp.get("id") == self.seq:
                    if not resp.get("ok"):
                        raise GuestError("agent: %s" % resp.get("error"))
                    return resp
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer to %s within %s s" % (req.get("op"), timeout_s))
            self.sock.settimeout(min(left, 5))
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                if self.proc is not None and self.proc.poll() is not None:
                    raise GuestError("qemu exited %s" % self.proc.returncode)
                continue
            if not chunk:
                raise GuestError("the agent's channel closed")
            self.buf += chunk

    def run(self, argv: Sequence[str], timeout_s: float = 120, check: bool = False,
            env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None) -> Result:
        """Run argv in the guest (as root); its own timeout is enforced in the guest."""
        t0 = time.monotonic()
        resp = self._request({"op": "run", "argv": list(argv), "timeout_s": timeout_s,
                              "env": env or {}, "cwd": cwd}, timeout_s + 30)
        res = Result(argv, resp)
        self.history.append("%.1fs rc=%s%s %s" % (time.monotonic() - t0, res.rc,
                                                  " TIMEOUT" if res.timed_out else "",
                                                  " ".join(argv)[:300]))
        if check and (res.rc != 0 or res.timed_out):
            raise AssertionError("in the guest: %r" % (res,))
        return res

    def sh(self, script: str, timeout_s: float = 120, check: bool = False,
           env: Optional[Dict[str, str]] = None) -> Result:
        return self.run(["sh", "-c", script], timeout_s=timeout_s, check=check, env=env)

    def get(self, path: str) -> bytes:
        return base64.b64decode(self._request({"op": "get", "path": path}, 60)["data"])

    def put(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> None:
        if isinstance(data, str):
            data = data.encode()
        self._request({"op": "put", "path": path, "data": base64.b64encode(data).decode(),
                       "mode": mode}, 60)

    def pytest(self, args: Sequence[str], timeout_s: float = 600) -> "PytestRun":
        """Run pytest from the checkout in the guest inside a delegated transient unit (a
        cgroup of its own with every controller: what the real-cgroup tests need on v2);
        returns its junit report."""
        self.seq_pytest = getattr(self, "seq_pytest", 0) + 1
        xml = "/var/tmp/cgstat-guest-junit-%d.xml" % self.seq_pytest
        unit = "cgstat-guest-pytest-%d" % self.seq_pytest
        argv = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--unit", unit,
                "-p", "Delegate=yes", "-p", "RuntimeMaxSec=%d" % int(timeout_s),
                "--working-directory=/opt/job/src",
                "-E", "CGSTAT_TEST_WORKLOAD=/opt/job/bin/workload", "-E", "PYTHONDONTWRITEBYTECODE=1",
                "-E", "CGSTAT_TEST_GUEST=" + self.kind,
                "/opt/cgstat/bin/python", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                "--junitxml=" + xml, "-o", "junit_family=xunit2",
                # tmp_path on the root disk: the guest's /tmp is a tmpfs (no block I/O there)
                "--basetemp=/var/tmp/cgstat-guest-pytest-%d" % self.seq_pytest, *args]
        res = self.run(argv, timeout_s=timeout_s + 30)
        try:
            junit = self.get(xml).decode(errors="replace")
        except GuestError:
            junit = ""
        with open(os.path.join(self.logdir, "pytest-%d.txt" % self.seq_pytest), "w") as f:
            f.write("%s\n%s\n%s" % (" ".join(args), res.out, res.err))
        return PytestRun(res, junit)

    # -- logs and shutdown -----------------------------------------------------------------

    def keep_logs(self, why: str = "") -> str:
        """The console, the journal and the harness's history into the log folder."""
        with open(os.path.join(self.logdir, "harness.log"), "w") as f:
            f.write("%s\n%s\n" % (why, json.dumps(self.times)))
            f.write("\n".join(self.history) + "\n")
        if self.sock is not None and self.proc is not None and self.proc.poll() is None:
            try:
                r = self.run(["journalctl", "-b", "--no-pager", "-o", "short-monotonic"], timeout_s=120)
                with open(os.path.join(self.logdir, "journal.txt"), "w") as f:
                    f.write(r.out)
            except (GuestError, TimeoutError, OSError) as exc:
                with open(os.path.join(self.logdir, "journal.txt"), "w") as f:
                    f.write("journal not read: %r\n" % (exc,))
        return self.logdir

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                if self.sock is not None:
                    self.sock.settimeout(5)
                    # sync, then power off at once: the disk is a throw-away snapshot
                    self._request({"op": "run", "argv": ["sh", "-c", "sync; echo o > /proc/sysrq-trigger"],
                                   "timeout_s": 10}, 5)
            except (GuestError, TimeoutError, OSError):
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        if getattr(self, "_reaper", None) is not None:
            self._reaper.cancel()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        shutil.rmtree(self.work, ignore_errors=True)

    def detach(self) -> None:
        """Leave a guest that ``attach`` joined (it stays up): the socket closed, this side's
        folders removed (the logs' only where a test failed)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        shutil.rmtree(self.work, ignore_errors=True)
        if not getattr(self, "failed", False):
            shutil.rmtree(self.logdir, ignore_errors=True)


def _die_with_parent() -> None:
    """In qemu's child before exec: SIGKILL when the harness dies (killed, crashed), so that
    no guest outlives the run that booted it (prctl PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def attach(sock_path: str, kind: str = "trixie") -> Guest:
    """A Guest on the agent socket of a qemu started by ``python -m guest.shell`` (debugging:
    one boot, many commands)."""
    g = Guest(kind, tempfile.mkdtemp(prefix="cgstat-guest-attach-"))
    g.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    g.sock.connect(sock_path)
    g.layout = layout_of(g.get("/proc/mounts").decode())
    return g


class PytestRun:
    """pytest's result in the guest: counts and failures from its junit report."""

    def __init__(self, res: Result, junit: str):
        self.result = res
        self.junit = junit
        self.cases: List[Dict[str, str]] = []
        if junit:
            import xml.etree.ElementTree as ET

            root = ET.fromstring(junit)
            for case in root.iter("testcase"):
                outcome, text = "passed", ""
                for child in case:
                    if child.tag in ("failure", "error"):
                        outcome, text = "failed", (child.get("message") or "") + "\n" + (child.text or "")
                    elif child.tag == "skipped":
                        outcome, text = "skipped", child.get("message") or ""
                self.cases.append({"name": "%s::%s" % (case.get("classname"), case.get("name")),
                                   "outcome": outcome, "text": text})

    def count(self, outcome: str) -> int:
        return sum(1 for c in self.cases if c["outcome"] == outcome)

    def summary(self) -> str:
        return "%d passed, %d failed, %d skipped" % (self.count("passed"), self.count("failed"),
                                                    self.count("skipped"))

    def failures(self) -> str:
        out = [c["name"] + "\n" + c["text"][-3000:] for c in self.cases if c["outcome"] == "failed"]
        if not self.cases:
            out.append(repr(self.result))
        return "\n\n".join(out)
