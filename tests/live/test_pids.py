"""cgstat pid on this host's own processes; inside its own PID namespace; the GPU join's
PID lookups on the live /proc (one read a tick per process, reused PIDs, any name)."""

import os
import shutil
import subprocess
import sys

import pytest

from cgstat.kernel.hierarchy import detect
from cgstat.kernel.hostfs import HostFS
from cgstat.naming.workload import Namer
from tests.helpers.contract import ROOT, run_cgstat


def test_live_pids_and_a_dead_one():
    child = subprocess.Popen(["sleep", "30"])
    try:
        out, _, code = run_cgstat("pid", str(os.getpid()), str(child.pid), "4194303")
    finally:
        child.kill()
        child.wait()
    assert code == 0
    me, sleeper, dead = out
    own = {}
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        own[controllers or "unified"] = path
    assert me["paths"] == {k: v for k, v in own.items() if k in me["paths"]}
    assert me["paths"]["memory"] == own["memory"]  # the nested memory cgroup, not "/"
    assert sleeper["cgroup"] == me["cgroup"] and sleeper["error"] is None
    assert dead["error"] == "no such process" and dead["container"] is None


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_warns_inside_its_own_pid_namespace():
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "cgstat",
                           "once", "--window", "0"], capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert "own PID namespace" in err and "--pid=host" in err and "hostPID: true" in err
    assert err.count("own PID namespace") == 1
    # and not on the host's
    _, err, _ = run_cgstat("once", "--window", "0")
    assert "PID namespace" not in err


def _own_cgroup():
    fs = HostFS("/")
    return Namer(fs, detect(fs)).describe_pid(os.getpid())["cgroup"]


def _counting(monkeypatch):
    """Count the open() and pread() calls made from here on (the PID lookups' syscalls)."""
    calls = {"open": 0, "pread": 0}
    real_open, real_pread = os.open, os.pread

    def counted_open(*a, **k):
        calls["open"] += 1
        return real_open(*a, **k)

    def counted_pread(*a, **k):
        calls["pread"] += 1
        return real_pread(*a, **k)

    monkeypatch.setattr(os, "open", counted_open)
    monkeypatch.setattr(os, "pread", counted_pread)
    return calls


def test_gpu_owners_read_each_pid_once_a_tick(monkeypatch):
    """8 GPUs list the same two processes: one read per process a tick once they are known
    (a kept /proc/<pid>/comm), none of /proc/<pid>/cgroup; an exited one is nobody's and its
    file is closed; a PID no longer listed is forgotten."""
    a = subprocess.Popen(["sleep", "30"])
    b = subprocess.Popen(["sleep", "30"])
    fs = HostFS("/")
    namer = Namer(fs, detect(fs))
    try:
        listed = [a.pid, b.pid] * 8
        first = namer.gpu_owners(listed)
        own = _own_cgroup()
        assert set(first) == {a.pid, b.pid}
        assert all(o.name == "sleep" and o.cgroup == own for o in first.values()), first
        calls = _counting(monkeypatch)
        assert namer.gpu_owners(listed) == first
        assert calls == {"open": 0, "pread": 2}
        monkeypatch.undo()
        b.kill()
        b.wait()
        after = namer.gpu_owners(listed)
        assert after[a.pid] == first[a.pid] and after[b.pid].cgroup is None and after[b.pid].name is None
        assert sorted(namer.pids._fds) == [a.pid]
        namer.gpu_owners([])
        assert namer.pids._fds == {}
    finally:
        for p in (a, b):
            p.kill()
            p.wait()
        namer.close()


def test_a_reused_pid_is_not_read_through_the_old_processes_file():
    """The kept file of a process that exited reads ESRCH: the number, now another
    process's (here: its entry moved to another live PID, as when a PID is reused), is
    looked up afresh and named after the new process, not the old one."""
    old = subprocess.Popen(["sleep", "30"])
    new = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    fs = HostFS("/")
    namer = Namer(fs, detect(fs))
    mapper = namer.pids
    before = len(os.listdir("/proc/self/fd"))
    try:
        assert namer.gpu_owners([old.pid])[old.pid].name == "sleep"
        old.kill()
        old.wait()
        # what the map holds for a number whose process exited and whose number came back
        mapper._cache[new.pid] = mapper._cache.pop(old.pid)._replace(pid=new.pid)
        mapper._fds[new.pid] = mapper._fds.pop(old.pid)
        found = mapper.lookup(new.pid)
        assert found.name == "cat" and found.pid == new.pid
        # the old process's file was closed, the one kept now is the new process's
        assert os.readlink(f"/proc/self/fd/{mapper._fds[new.pid]}") == f"/proc/{new.pid}/comm"
        assert len(os.listdir("/proc/self/fd")) == before + 1
    finally:
        new.kill()
        new.wait()
        namer.close()


def test_a_process_name_with_any_bytes(tmp_path):
    """comm may hold ')', spaces and bytes that are not UTF-8 (prctl PR_SET_NAME): the name
    is the `\\xNN`-escaped text and the start time is still found, kept file or not."""
    from cgstat.naming.pids import read_stat

    child = subprocess.Popen([sys.executable, "-c",
                              "import ctypes, sys, time\n"
                              "ctypes.CDLL(None).prctl(15, b'a) (b\\xff', 0, 0, 0)\n"
                              "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        fs = HostFS("/")
        stat = read_stat(fs, child.pid)
        assert stat.comm == "a) (b\\xff"
        assert stat.start_ticks == int(open(f"/proc/{child.pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[19])
        namer = Namer(fs, detect(fs))
        assert namer.gpu_owners([child.pid])[child.pid].name == "a) (b\\xff"
        assert namer.gpu_owners([child.pid])[child.pid].name == "a) (b\\xff"  # through the kept file
        namer.close()
    finally:
        child.kill()
        child.wait()
