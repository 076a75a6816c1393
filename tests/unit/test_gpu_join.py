"""The GPU join without real cgroups: no library or no driver, a reused PID."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT, validate

GPU0, GPU1, GPU2 = "GPU-00000000-aaaa-0000-0000-000000000000", "GPU-11111111-bbbb-0000-0000-000000000000", \
    "GPU-22222222-cccc-0000-0000-000000000000"


def _cgstat(scenario, *args, variant="full", timeout=60):
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], env=D.env(scenario, variant), cwd=ROOT,
                          capture_output=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode()
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    for r in records:
        validate(r)
    return records, proc.stderr.decode()


@pytest.mark.parametrize("variant,init,needle", [
    (None, "ok", "libnvidia-ml.so.1 not found"),
    ("full", "driver_not_loaded", "NVIDIA driver not loaded"),
])
def test_no_library_or_no_driver(tmp_path, variant, init, needle):
    path = D.write_scenario(tmp_path / "s.txt", D.Scenario(init=init).gpu(0, uuid=GPU0))
    records, err = _cgstat(path, "once", "--window", "0", "--all", variant=variant)
    assert records and all(r["type"] == "cgroup" and r["gpu"] is None for r in records)
    (line,) = [x for x in err.splitlines() if "GPU" in x]
    assert needle in line


def test_reused_pid_is_not_attributed_from_the_cache(tmp_path):
    """NVML lists PID 216 tick after tick; between two ticks it exits and the number is
    reused by a process in another cgroup: the new process is that cgroup's (start time
    checked on every lookup), and a PID that is gone is nobody's."""
    import shutil

    from cgstat.kernel.hierarchy import detect
    from cgstat.kernel.hostfs import HostFS
    from cgstat.kernel.membership import UNKNOWN
    from cgstat.naming.workload import Namer

    root = str(tmp_path / "t1")
    shutil.copytree(os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1"), root, symlinks=True)
    fs = HostFS(root)
    namer = Namer(fs, detect(fs))
    first = namer.gpu_owners([216])[216]
    assert first.container["name"] == "tf-training" and first.cgroup.startswith("/system.slice/docker-")
    stat = os.path.join(root, "proc/216/stat")
    fields = open(stat).read().split(" ")
    fields[21] = str(int(fields[21]) + 500)  # a new start time: another process
    open(stat, "w").write(" ".join(fields))
    open(os.path.join(root, "proc/216/cgroup"), "w").write("0::/system.slice/cron.service\n")
    again = namer.gpu_owners([216])[216]
    assert again.cgroup == "/system.slice/cron.service" and again.container is None
    shutil.rmtree(os.path.join(root, "proc/216"))
    assert namer.gpu_owners([216]) == {216: UNKNOWN}

