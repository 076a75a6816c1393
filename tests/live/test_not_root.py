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

from tests.helpers.contract import ROOT, validate

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


DROP = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _as_nobody(tmp_path):
    """The environment and an interpreter of this Python version that user 65534 may run:
    ours may live in a private home (pyenv under /root), the distribution's is world-readable."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path / "site")}
    candidates = [os.path.realpath(sys.executable), "/usr/bin/python%d.%d" % sys.version_info[:2]]
    python = next((c for c in candidates if subprocess.run(
        DROP + [c, "-c", "import cgstat.cli"], env=env, cwd=str(tmp_path), capture_output=True).returncode == 0), None)
    if python is None:
        pytest.skip("no Python %d.%d that another user may run" % sys.version_info[:2])
    return env, python


def test_unreadable_state_and_cgroup_files(open_tmp):
    tmp_path = open_tmp
    tree = tmp_path / "t1"
    shutil.copytree(os.path.join(ROOT, "tests/fixtures/v2-systemd/t1"), tree, symlinks=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(tree / "var/lib/docker/containers", 0o700)  # as dockerd leaves it
    (stat,) = glob.glob(str(tree / "sys/fs/cgroup/system.slice/docker-5113*.scope/memory.stat"))
    os.chmod(stat, 0o600)
    env, python = _as_nobody(tmp_path)
    proc = subprocess.run(DROP + [python, "-m", "cgstat", "once", "--window", "0", "--host-root", str(tree)],
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


def _oom_group(realcg_env):
    from tests.helpers import realcg

    g = realcg.TestGroup(realcg_env)
    g.set_memory_limit(32 << 20)
    g.start([sys.executable, "-c", "import time; time.sleep(600)"], stdout=subprocess.DEVNULL)
    return g


def _kmsg_lines(err: str):
    return [line for line in err.splitlines() if "/dev/kmsg" in line]


@pytest.mark.realcg
def test_kernel_log_unreadable_one_line_and_the_same_figures(open_tmp, realcg_env):
    """kernel.dmesg_restrict=1 here: another user can't open /dev/kmsg. One line says what
    that costs; exit 0; the records are what root's run gives."""
    if not os.path.exists("/dev/kmsg"):
        pytest.skip("no /dev/kmsg")
    env, python = _as_nobody(open_tmp)
    g = _oom_group(realcg_env)
    try:
        args = ["-m", "cgstat", "stream", "--interval", "0.5", "--count", "2", "--all", "--match", g.name]
        mine = subprocess.run(DROP + [python] + args, capture_output=True, cwd=str(open_tmp), timeout=120, env=env)
        root = subprocess.run([sys.executable] + args, capture_output=True, cwd=ROOT, timeout=120)
    finally:
        g.destroy()
    assert mine.returncode == 0 and root.returncode == 0, mine.stderr
    (line,) = _kmsg_lines(mine.stderr.decode())
    assert "OOM kills of cgroups removed before the next tick can't be seen" in line
    assert "counters are still reported" in line
    assert _kmsg_lines(root.stderr.decode()) == []

    def figures(out):
        recs = [json.loads(x) for x in out.splitlines()]
        for r in recs:
            validate(r)
        return sorted((r["cgroup"], r["memory"]["limit_bytes"], r["memory"]["oom_kills_total"],
                       r["pids"]["current"]) for r in recs if r.get("type") == "cgroup")

    assert figures(mine.stdout) == figures(root.stdout)
    assert (g.cgroup, 32 << 20, 0, 1) in figures(mine.stdout)


@pytest.mark.realcg
def test_kernel_log_passed_as_a_descriptor_needs_no_privilege(open_tmp, realcg_env):
    """What the systemd units do (systemd/cgstat-kmsg.socket): root opens /dev/kmsg and
    passes it as fd 3 named "kmsg"; user 65534, without CAP_SYSLOG, reads the kills from it."""
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("cannot read /dev/kmsg")
    env, python = _as_nobody(open_tmp)
    g = _oom_group(realcg_env)
    # $LISTEN_PID names the process the descriptors are for: cgstat's own, set as it starts
    inner = [python, "-c", "import os, runpy, sys; os.environ['LISTEN_PID'] = str(os.getpid()); "
             "sys.argv[0] = 'cgstat'; runpy.run_module('cgstat', run_name='__main__')",
             "stream", "--interval", "0.5", "--count", "6", "--all", "--match", g.name]
    env = dict(env, LISTEN_FDS="1", LISTEN_FDNAMES="kmsg")
    # the shell (root) opens the log at fd 3, then drops to the other user
    proc = subprocess.Popen(["sh", "-c", 'exec 3</dev/kmsg && exec "$@"', "sh"] + DROP + inner,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(open_tmp), env=env)
    try:
        first = proc.stdout.readline()  # the first tick: following the log by now
        assert first, proc.stderr.read()
        killer = g.start([sys.executable, "-c", "x = bytearray(200 << 20)"], stdout=subprocess.DEVNULL)
        assert killer.wait(60) == -9
        # the rest through the same buffered reader: communicate() reads the descriptor and
        # would miss what readline() had already buffered past the first line
        out = proc.stdout.read()
        err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        g.destroy()
    assert proc.returncode == 0, err
    lines = [json.loads(x) for x in [first] + out.splitlines()]
    kills = [e for e in lines if e.get("kind") == "oom_kill" and e["evidence"].get("pid") == killer.pid]
    assert len(kills) == 1 and kills[0]["evidence"]["limit_bytes"] == 32 << 20
    assert _kmsg_lines(err.decode()) == []
