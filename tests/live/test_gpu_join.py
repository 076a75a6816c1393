"""GPU per container end to end: the real pynvml against the NVML double, real processes in
a real test cgroup, in a runc container and on the host, joined by `cgstat` itself."""

import json
import shutil
import subprocess
import sys

import pytest

from tests.helpers import nvmldouble as D
from tests.helpers import realcg as R
from tests.helpers.contract import ROOT, validate
from tests.unit.test_gpu_join import GPU0, GPU1, GPU2, _cgstat

GIB = 1 << 30
MIB = 1 << 20


def _gpus(records):
    return {r["gpu"]["uuid"]: r for r in records if r["type"] == "gpu"}


def _exited_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid  # reaped: no such process (unless reused within the test: then not ours)


@pytest.fixture
def workloads(make_group, make_container, workload_bin):
    """A sleeper in a test cgroup, a sleeper in a runc container, one in our own cgroup."""
    g = make_group()
    in_group = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    c = make_container(["/bin/busybox", "sh", "-c", "sleep 1000"], memory_limit=64 * MIB, pids_limit=16,
                       cpu_quota=100000, cpu_period=100000)
    c.run()
    host = subprocess.Popen(["sleep", "1000"])
    try:
        yield g, in_group.pid, c, c.pid, host.pid
    finally:
        host.kill()
        host.wait()


def _failures(record):
    return [e for e in record["errors"] if e["error"] != "unsupported"]


def test_processes_in_a_cgroup_a_container_and_on_the_host(tmp_path, workloads):
    g, gpid, c, cpid, hpid = workloads
    gone = _exited_pid()
    sc = (D.Scenario()
          .gpu(0, uuid=GPU0, name="NVIDIA H200", mem_total=141 * GIB, mem_used=9 * GIB, mem_reserved=GIB // 2,
               util_gpu=87, util_mem=40, temp=51, power_mw=412000)
          .gpu(1, uuid=GPU1, name="NVIDIA H200", mem_total=141 * GIB, mem_used=3 * GIB, mem_reserved=GIB // 2,
               util_gpu=25, util_mem=10, temp=44, power_mw=180000)
          .gpu(2, uuid=GPU2, name="NVIDIA H200", mem_total=141 * GIB, mem_used=0, mem_reserved=GIB // 2,
               util_gpu=0, util_mem=0, temp=30, power_mw=70000, gpm=1)
          .proc(0, gpid, 4 * GIB).sample(0, gpid, sm=60, mem=30, enc=0, dec=0)
          .proc(1, gpid, 1 * GIB).sample(1, gpid, sm=25, mem=10, enc=0, dec=0)
          .proc(0, cpid, 2 * GIB).sample(0, cpid, sm=27, mem=9, enc=5, dec=1)
          .proc(0, hpid, 3 * GIB, type="graphics")
          .proc(1, gone, 2 * GIB).sample(1, gone, sm=1, mem=1))
    path = D.write_scenario(tmp_path / "s.txt", sc)
    pattern = f"{g.name}|{c.parent}"
    records, err = _cgstat(path, "once", "--window", "0.5", "--all", "--match", pattern)
    assert "GPU metrics off" not in err

    group = R.find(records, g.cgroup)["gpu"]
    assert group["memory_bytes"] == 5 * GIB and group["sm_percent"] == 85
    assert group["devices"] == [GPU0, GPU1]
    assert sorted((p["pid"], p["gpu_uuid"], p["memory_bytes"], p["sm_percent"], p["memory_percent"], p["name"])
                  for p in group["processes"]) == sorted([(gpid, GPU0, 4 * GIB, 60, 30, "sleep"),
                                                         (gpid, GPU1, GIB, 25, 10, "sleep")])
    (ctr,) = [r for r in records if r["type"] == "cgroup" and r["container"] and r["container"]["id"] == c.id]
    assert ctr["gpu"]["memory_bytes"] == 2 * GIB and ctr["gpu"]["sm_percent"] == 27
    assert ctr["gpu"]["devices"] == [GPU0]
    ((proc,),) = [ctr["gpu"]["processes"]]
    assert (proc["pid"], proc["encoder_percent"], proc["decoder_percent"], proc["type"]) == (cpid, 5, 1, "compute")
    # the container's parents (--all) sum their subtree: the container's process, nothing else
    parent = R.find(records, ctr["cgroup"].rsplit("/", 1)[0])["gpu"]
    assert parent["memory_bytes"] == 2 * GIB and [p["pid"] for p in parent["processes"]] == [cpid]
    # no record claims the host's or the exited process
    claimed = {p["pid"] for r in records if r["type"] == "cgroup" for p in r["gpu"]["processes"]}
    assert claimed == {gpid, cpid}

    gpus = _gpus(records)
    assert set(gpus) == {GPU0, GPU1, GPU2}
    d0 = gpus[GPU0]["gpu"]
    assert (d0["index"], d0["name"], d0["utilization_percent"], d0["memory_used_bytes"],
            d0["memory_reserved_bytes"], d0["memory_total_bytes"], d0["temperature_celsius"],
            d0["power_watts"]) == (0, "NVIDIA H200", 87, 9 * GIB, GIB // 2, 141 * GIB, 51, 412.0)
    by_pid = {p["pid"]: p for p in gpus[GPU0]["processes"]}
    assert set(by_pid) == {gpid, cpid, hpid}
    assert by_pid[cpid]["container"]["id"] == c.id and by_pid[cpid]["cgroup"] == ctr["cgroup"]
    assert by_pid[gpid]["cgroup"] == g.cgroup and by_pid[gpid]["container"] is None
    assert by_pid[hpid]["type"] == "graphics" and by_pid[hpid]["sm_percent"] == 0  # no sample: idle
    assert by_pid[hpid]["cgroup"] is not None  # on the host: a cgroup, but no selected record's
    ghost = {p["pid"]: p for p in gpus[GPU1]["processes"]}[gone]
    assert (ghost["cgroup"], ghost["container"], ghost["name"], ghost["memory_bytes"]) == (None, None, None, 2 * GIB)
    assert gpus[GPU2]["processes"] == [] and gpus[GPU2]["errors"] == []


def test_stream_keeps_sm_right_for_busy_processes(tmp_path, make_group):
    g = make_group()
    pid = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL).pid
    sc = D.Scenario().gpu(0, uuid=GPU0, util_gpu=70).proc(0, pid, GIB).sample(0, pid, sm=70, mem=20)
    path = D.write_scenario(tmp_path / "s.txt", sc)
    records, _ = _cgstat(path, "stream", "--interval", "0.2", "--count", "4", "--all", "--match", g.name)
    mine = [r for r in records if r["type"] == "cgroup" and r["cgroup"] == g.cgroup]
    assert [r["gpu"]["sm_percent"] for r in mine] == [70, 70, 70, 70]
    intervals = [r["interval_s"] for r in records if r["type"] == "gpu"]
    assert len(intervals) == 4 and all(0.1 < i < 2 for i in intervals)


def test_idle_gpu_and_no_process_give_zeros(tmp_path, make_group):
    g = make_group()
    g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    path = D.write_scenario(tmp_path / "s.txt", D.Scenario().gpu(0, uuid=GPU0, util_gpu=0))
    records, _ = _cgstat(path, "once", "--window", "0", "--all", "--match", g.name)
    assert R.find(records, g.cgroup)["gpu"] == {"memory_bytes": 0, "sm_percent": 0, "power_watts": 0.0,
                                                "energy_joules_total": 0.0, "devices": [], "processes": []}


def test_gpu_lost_mid_stream(tmp_path, make_group):
    g = make_group()
    pid = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL).pid
    good = D.Scenario().gpu(0, uuid=GPU0, util_gpu=50).gpu(1, uuid=GPU1, util_gpu=5).proc(0, pid, GIB)
    lost = D.Scenario().gpu(0, uuid=GPU0, util_gpu=50, lost=1).gpu(1, uuid=GPU1, util_gpu=5).proc(0, pid, GIB)
    path = D.write_scenario(tmp_path / "s.txt", good)
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "0.2", "--count", "8",
                             "--all", "--match", g.name], env=D.env(path), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()  # a batch is out: the GPU falls off the bus now
    D.write_scenario(path, lost)
    out = proc.stdout.read()  # not communicate(): it would skip what readline() buffered
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    records = [json.loads(x) for x in [first] + out.splitlines()]
    for r in records:
        validate(r)
    gpu0 = [r for r in records if r["type"] == "gpu" and r["gpu"]["uuid"] == GPU0]
    # (the double's GPUs have no GPM: that is an "unsupported" entry, not a failure)
    assert _failures(gpu0[0]) == [], [g["errors"] for g in gpu0]
    assert any(e["error"] == "gpu_lost" for e in gpu0[-1]["errors"])
    assert gpu0[-1]["gpu"]["utilization_percent"] is None
    assert all(_failures(r) == [] for r in records if r["type"] == "gpu" and r["gpu"]["uuid"] == GPU1), \
        [r["errors"] for r in records if r["type"] == "gpu"]
    mine = [r for r in records if r["type"] == "cgroup" and r["cgroup"] == g.cgroup]
    assert len(mine) == 8 and all(r["cpu"]["usage_seconds_total"] is not None for r in mine)


def _stream_switching(path, first_scenario, then, *args):
    """`cgstat stream ARGS` with `first_scenario`, switched to `then` once a record is out."""
    D.write_scenario(path, first_scenario)
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", *args], env=D.env(path), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    D.write_scenario(path, then)
    out = proc.stdout.read()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    records = [json.loads(x) for x in [first] + out.splitlines()]
    for r in records:
        validate(r)
    return records


def test_an_xid_on_gpu_1_names_the_container_on_gpu_1_once(tmp_path, workloads):
    g, gpid, c, cpid, hpid = workloads
    base = (D.Scenario().gpu(0, uuid=GPU0).gpu(1, uuid=GPU1)
            .proc(0, gpid, GIB).proc(1, cpid, 2 * GIB))  # the test cgroup on GPU 0, the container on GPU 1
    with_xid = D.Scenario(); with_xid.lines = list(base.lines)
    with_xid.xid(1, 79)  # stays in the scenario: the event set delivers it once
    records = _stream_switching(tmp_path / "s.txt", base, with_xid, "--interval", "0.3", "--count", "8",
                                "--events-window", "60", "--all", "--match", f"{g.name}|{c.parent}")
    xids = [r for r in records if r["type"] == "event" and r["kind"] == "gpu_xid"]
    assert len(xids) == 1, xids
    (ev,) = xids
    assert ev["severity"] == "critical" and "fallen off the bus" in ev["message"]
    assert ev["container"]["id"] == c.id and ev["cgroup"].endswith(c.id)
    assert (ev["evidence"]["gpu_uuid"], ev["evidence"]["xid"], ev["evidence"]["pids"]) == (GPU1, 79, [cpid])
    assert [x["id"] for x in ev["evidence"]["containers"]] == [c.id]
    assert g.cgroup not in ev["evidence"]["cgroups"] and str(gpid) not in ev["message"]
    gpu1 = [r for r in records if r["type"] == "gpu" and r["gpu"]["uuid"] == GPU1]
    assert gpu1[-1]["gpu"]["xid_errors_total"] == 1 and gpu1[-1]["gpu"]["last_xid"] == 79
    assert sum(r["gpu"]["recent_xids"] == [79] for r in gpu1) == 1


def test_energy_per_container_is_its_processes_share(tmp_path, workloads):
    g, gpid, c, cpid, hpid = workloads
    idle = D.Scenario().gpu(0, uuid=GPU0, power_mw=60000)
    busy = (D.Scenario().gpu(0, uuid=GPU0, power_mw=300000).proc(0, gpid, GIB).proc(0, cpid, GIB)
            .sample(0, gpid, sm=60).sample(0, cpid, sm=20))
    records = _stream_switching(tmp_path / "s.txt", idle, busy, "--interval", "0.3", "--count", "10",
                                "--all", "--match", f"{g.name}|{c.parent}")
    gpus = [r for r in records if r["type"] == "gpu"]
    last = gpus[-1]
    assert (last["gpu"]["idle_power_watts"], last["gpu"]["idle_power_observed"]) == (60.0, True)
    by_pid = {p["pid"]: p for p in last["processes"]}
    assert (by_pid[gpid]["power_watts"], by_pid[cpid]["power_watts"]) == (pytest.approx(180.0), pytest.approx(60.0))
    # what the processes drew: their power over the GPU readings' intervals since they appeared
    busy_intervals = [r["interval_s"] for r in gpus if r["processes"]][1:]
    assert by_pid[gpid]["energy_joules_total"] == pytest.approx(180.0 * sum(busy_intervals), rel=1e-6)
    assert by_pid[cpid]["energy_joules_total"] == pytest.approx(60.0 * sum(busy_intervals), rel=1e-6)
    group = [r for r in records if r["type"] == "cgroup" and r["cgroup"] == g.cgroup][-1]["gpu"]
    (ctr,) = [r for r in records if r["type"] == "cgroup" and r["container"] and r["container"]["id"] == c.id][-1:]
    assert group["energy_joules_total"] == pytest.approx(by_pid[gpid]["energy_joules_total"])
    assert ctr["gpu"]["energy_joules_total"] == pytest.approx(by_pid[cpid]["energy_joules_total"])
    assert (group["power_watts"], ctr["gpu"]["power_watts"]) == (pytest.approx(180.0), pytest.approx(60.0))
    assert group["energy_joules_total"] == pytest.approx(3 * ctr["gpu"]["energy_joules_total"])


def test_mps_clients_are_attributed_to_their_containers(tmp_path, workloads, make_group):
    g, gpid, c, cpid, hpid = workloads
    server_group = make_group()
    exe = tmp_path / "nvidia-cuda-mps-server"  # the kernel keeps 15 characters: "nvidia-cuda-mps"
    shutil.copy("/bin/sleep", exe)
    server = server_group.start([str(exe), "1000"], stdout=subprocess.DEVNULL).pid
    sc = (D.Scenario().gpu(0, uuid=GPU0, power_mw=100000).proc(0, server, 300 * MIB)
          .proc(0, gpid, GIB, type="mps").proc(0, cpid, 2 * GIB, type="mps")
          .sample(0, gpid, sm=30).sample(0, cpid, sm=10))
    path = D.write_scenario(tmp_path / "s.txt", sc)
    records, _ = _cgstat(path, "once", "--window", "0.5", "--all", "--match",
                         f"{g.name}|{c.parent}|{server_group.name}")
    (ctr,) = [r for r in records if r["type"] == "cgroup" and r["container"] and r["container"]["id"] == c.id]
    assert [(p["pid"], p["type"], p["memory_bytes"]) for p in ctr["gpu"]["processes"]] == [(cpid, "mps", 2 * GIB)]
    group = R.find(records, g.cgroup)["gpu"]
    assert [(p["pid"], p["type"]) for p in group["processes"]] == [(gpid, "mps")]
    srv = R.find(records, server_group.cgroup)["gpu"]
    assert [(p["pid"], p["type"], p["name"]) for p in srv["processes"]] == [(server, "mps_server", "nvidia-cuda-mps")]
    (dev,) = [r for r in records if r["type"] == "gpu"]
    types = {p["pid"]: (p["type"], p["cgroup"]) for p in dev["processes"]}
    assert types[cpid] == ("mps", ctr["cgroup"]) and types[gpid] == ("mps", g.cgroup)
    assert types[server] == ("mps_server", server_group.cgroup)
