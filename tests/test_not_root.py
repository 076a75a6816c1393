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
    """A temporary folder other users can enter (pytest's own is 0700), holding a copy of
    cgstat and the modules it imports: the checkout itself may sit in a private folder."""
    import re
    from importlib import metadata

    path = tempfile.mkdtemp(prefix="cgstat-test-")
    os.chmod(path, 0o755)
    site = os.path.join(path, "site")
    shutil.copytree(os.path.join(ROOT, "cgstat"), os.path.join(site, "cgstat"))
    todo, done = ["orjson", "typer"], set()
    while todo:  # the runtime dependencies and theirs, file by file as installed
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(re.split(r"[ ;<>=!~\[(]", req, 1)[0])
        for f in dist.files or []:
            src = str(f.locate())
            if ".." in str(f) or not os.path.isfile(src):
                continue
            dst = os.path.join(site, str(f))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(src, dst)
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames:
            os.chmod(os.path.join(dirpath, n), 0o755)
        for n in filenames:
            os.chmod(os.path.join(dirpath, n), 0o644)
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
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path / "site")}
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # An interpreter of this Python version that the other user may run: ours may live
    # in a private home (pyenv under /root), the distribution's is world-readable.
    candidates = [os.path.realpath(sys.executable), "/usr/bin/python%d.%d" % sys.version_info[:2]]
    python = next((c for c in candidates if subprocess.run(
        drop + [c, "-c", "import cgstat.cli"], env=env, cwd=str(tmp_path), capture_output=True).returncode == 0), None)
    if python is None:
        pytest.skip("no Python %d.%d that another user may run" % sys.version_info[:2])
    proc = subprocess.run(drop + [python, "-m", "cgstat", "once", "--window", "0", "--host-root", str(tree)],
                          capture_output=True, cwd=str(tmp_path), timeout=60, env=env)
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
