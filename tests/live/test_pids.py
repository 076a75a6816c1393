"""cgstat pid on this host's own processes; inside its own PID namespace."""

import os
import shutil
import subprocess
import sys

import pytest

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

