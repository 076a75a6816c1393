"""PID -> container: live PIDs, a dead PID, PID reuse, the PID namespace warning, and the
Docker Engine API fallback when Docker's state files can't be read."""

import os
import shutil

from cgstat.kernel.hierarchy import detect
from cgstat.kernel.hostfs import HostFS
from cgstat.naming.runtimes.dockerapi import docker_api
from cgstat.naming.workload import Namer
from tests.helpers.contract import ROOT, run_cgstat
from tests.helpers.fakedocker import FakeDocker as _FakeDocker

FIX = os.path.join(ROOT, "tests", "fixtures")


def _copy(tmp_path, name="v2-systemd"):
    dst = tmp_path / "t1"
    shutil.copytree(os.path.join(FIX, name, "t1"), dst, symlinks=True)
    return str(dst)


def test_pid_reuse_is_not_trusted_from_the_cache(tmp_path):
    root = _copy(tmp_path)
    fs = HostFS(root)
    layout = detect(fs)
    mapper = Namer(fs, layout)
    first = mapper.describe_pid(216)
    assert first["container"]["name"] == "tf-training"
    # PID 216 exits and the number is reused by a process in another cgroup, started later
    stat = os.path.join(root, "proc/216/stat")
    fields = open(stat).read().split(" ")
    fields[21] = str(int(fields[21]) + 500)  # a new start time
    open(stat, "w").write(" ".join(fields))
    open(os.path.join(root, "proc/216/cgroup"), "w").write("0::/system.slice/cron.service\n")
    again = mapper.describe_pid(216)
    assert again["cgroup"] == "/system.slice/cron.service" and again["container"] is None


def test_pid_that_exits_while_being_looked_up(tmp_path):
    root = _copy(tmp_path)
    fs = HostFS(root)
    mapper = Namer(fs, detect(fs))
    os.remove(os.path.join(root, "proc/216/cgroup"))  # stat still there, cgroup gone
    assert mapper.describe_pid(216)["error"] == "no such process"


def test_docker_api_fallback_when_state_is_missing(tmp_path):
    root = _copy(tmp_path)
    cid = "cb4a542a9cc3587e5fbea131759232cfac2ca0e1d52e48331daf6589d254378c"  # D: no config.v2.json
    os.makedirs(os.path.join(root, "var/run"), exist_ok=True)
    server = _FakeDocker(os.path.join(root, "var/run/docker.sock"),
                         {"Id": cid, "Name": "/fio-bench", "Config": {"Image": "fio:3", "Labels": {"a": "b"}}})
    server.start()
    try:
        assert docker_api(HostFS(root), cid).name == "fio-bench"
        records, _, _ = run_cgstat("once", "--window", "0", "--host-root", root, "--match", cid[:16])
    finally:
        server.sock.close()
    (rec,) = records
    assert rec["container"]["name"] == "fio-bench" and rec["container"]["image"] == "fio:3"
    assert rec["container"]["labels"] == {"a": "b"}
    assert all(r.startswith(f"GET /containers/{cid}/json") for r in server.requests)
