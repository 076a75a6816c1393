"""Run as an ordinary user: report what can be read, say once what can't and what it costs."""

import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from contract import ROOT, validate

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="needs root to drop to another user (setpriv)")


@pytest.fixture
def open_tmp():
    """A temporary folder other users can enter (pytest's own is 0700)."""
    path = tempfile.mkdtemp(prefix="cgstat-test-")
    os.chmod(path, 0o755)
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def test_unreadable_state_and_cgroup_files(open_tmp):
    tmp_path = open_tmp
    tree = tmp_path / "t1"
    shutil.copytree(os.path.join(ROOT, "tests/fixtures/v2-systemd/t1"), tree, symlinks=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(tree / "var/lib/docker/containers", 0o700)  # as dockerd leaves it
    (stat,) = glob.glob(str(tree / "sys/fs/cgroup/system.slice/docker-5113*.scope/memory.stat"))
    os.chmod(stat, 0o600)
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-m", "cgstat", "once", "--window", "0", "--host-root", str(tree)],
                          capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert err.count("permission denied") == 1 and "Docker container names" in err
    assert "memory.stat: permission_denied" in err
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    for r in records:
        validate(r)
    (a,) = [r for r in records if "docker-5113" in r["cgroup"]]
    assert a["container"]["id"].startswith("5113") and a["container"]["name"] is None  # no state
    assert a["memory"]["working_set_bytes"] is None and a["memory"]["usage_bytes"] == 26296320
    assert {"source": "memory.stat", "error": "permission_denied", "detail": "Permission denied"} in a["errors"]
    assert a["cpu"]["limit_cores"] == 0.5 and a["pids"]["limit"] == 50
    podman = [r for r in records if r["container"] and r["container"]["runtime"] == "podman"]
    assert podman[0]["container"]["name"] == "jupyter"  # what could be read still is
