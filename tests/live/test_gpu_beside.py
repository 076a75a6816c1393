"""A hung NVML call never holds the cgroup records: a real `cgstat stream --interval 1`
over a real test cgroup, with the NVML double's nvmlDeviceGetTemperature sleeping 10 s
(DCGM #313 saw calls blocked over 45 s). The GPU is read on a thread of its own
(cgstat/gpu/beside.py); the cgroup records keep their second."""

import datetime
import json
import os
import subprocess
import sys
import time

from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT

GPU0 = "GPU-cccccccc-0000-0000-0000-000000000000"
RECORDS = 6


def _stamp(ts):
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def test_a_gpu_call_sleeping_10_s_leaves_the_cgroup_records_on_time(tmp_path, make_group):
    g = make_group()
    sleeper = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    scenario = D.Scenario().gpu(0, uuid=GPU0).proc(0, sleeper.pid, 1 << 30).sample(0, sleeper.pid, sm=50)
    scenario.line("sleep fn=nvmlDeviceGetTemperature ms=10000")
    path = D.write_scenario(tmp_path / "s.txt", scenario)
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "1", "--all",
                                 "--match", g.name], env=D.env(path), cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=err)
    stamps, gpu_records = [], []
    try:
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        while len(stamps) < RECORDS and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            record = json.loads(line)
            if record["type"] == "cgroup" and record["cgroup"] == g.cgroup:
                stamps.append(_stamp(record["ts"]))
                assert record["gpu"] is None  # never an older read's figures passed off as this tick's
            elif record["type"] == "gpu":
                gpu_records.append(record)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert len(stamps) == RECORDS, stamps
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert all(abs(gap - 1.0) <= 0.2 for gap in gaps), gaps
    said = [line for line in err_path.read_text().splitlines() if "GPU read late" in line]
    assert len(said) == 1, err_path.read_text()
    assert all(not r["gpu"]["temperature_celsius"] and
               [e["error"] for e in r["errors"]] == ["gpu_read_late"] for r in gpu_records)
    assert os.path.exists(path)
