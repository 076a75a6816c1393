"""gpu_held_idle on the NVML double: a container holding 20 GiB of a GPU at 0 % SM past the
window raises it once, naming the container and the GPU; one at 30 % SM never does; it is
resolved when the container works or lets go. Time is the records' own ts, advanced by the
test (a fake clock): nothing sleeps."""

import copy
import json
import os
import subprocess
import sys

import pytest

from cgstat.events import EventDetector
from cgstat.events.gpuheld import holdings
from cgstat.timestamps import rfc3339
from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT, validate

GPU0 = "GPU-00000000-aaaa-0000-0000-000000000000"
GiB = 1 << 30
IDLE_PID, BUSY_PID = os.getpid(), os.getppid()
NOTEBOOK = {"id": "a" * 64, "short_id": "a" * 12, "name": "notebook", "runtime": "docker"}
TRAINER = {"id": "b" * 64, "short_id": "b" * 12, "name": "trainer", "runtime": "docker"}
T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def gpu_record(tmp_path_factory):
    """One GPU record read through the real pynvml from the double: two processes holding
    20 GiB each, one never sampled (0 % SM), one busy 6 ms of every 20 ms (30 %). No cgroup
    is shown: the GPU record lists every process anyway."""
    folder = tmp_path_factory.mktemp("held")
    scenario = D.write_scenario(folder / "s.txt", D.Scenario().gpu(0, uuid=GPU0)
                                .proc(0, IDLE_PID, 20 * GiB).proc(0, BUSY_PID, 20 * GiB)
                                .periodic(0, BUSY_PID, sm=100, period=1000, cycle=20_000, busy=6000))
    proc = subprocess.run([sys.executable, "-m", "cgstat", "once", "--window", "0", "--match", "^/no-such-cgroup$"],
                          env=D.env(scenario), cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    (g,) = [json.loads(line) for line in proc.stdout.splitlines() if b'"type":"gpu"' in line]
    by_pid = {p["pid"]: p for p in g["processes"]}
    assert by_pid[IDLE_PID]["sm_percent"] == 0 and by_pid[IDLE_PID]["memory_bytes"] == 20 * GiB
    assert abs(by_pid[BUSY_PID]["sm_percent"] - 30) <= 5
    # who each process is: two containers (the double's PIDs are this test's own processes)
    by_pid[IDLE_PID].update(cgroup="/system.slice/docker-%s.scope" % NOTEBOOK["id"], container=NOTEBOOK)
    by_pid[BUSY_PID].update(cgroup="/system.slice/docker-%s.scope" % TRAINER["id"], container=TRAINER)
    return g


def _at(g, t, drop=()):
    r = copy.deepcopy(g)
    r["ts"] = rfc3339(t)
    r["processes"] = [p for p in r["processes"] if p["pid"] not in drop]
    return r


def _run(detector, records):
    return [e for r in records for e in detector.observe([r])]


def test_fires_once_for_the_idle_holder_not_the_busy_one(gpu_record):
    d = EventDetector(gpu_idle_window_s=300)
    events = _run(d, [_at(gpu_record, T0 + 30 * i) for i in range(21)])  # 10 min, a tick every 30 s
    held = [e for e in events if e["kind"] == "gpu_held_idle"]
    assert len(held) == 1, events
    (e,) = held
    validate(e)
    assert e["container"]["name"] == "notebook" and e["cgroup"].endswith(NOTEBOOK["id"] + ".scope")
    assert e["evidence"]["gpu_uuid"] == GPU0 and e["evidence"]["gpu_index"] == 0
    assert e["evidence"]["memory_bytes"] == 20 * GiB and e["evidence"]["sm_percent"] == 0
    assert e["evidence"]["duration_s"] == 300 and e["ts"] == rfc3339(T0 + 300)
    assert "notebook" in e["message"] and "GPU 0" in e["message"] and "20480.0 MiB" in e["message"]
    assert not [e for e in events if e["kind"] == "resolved"]


def test_not_before_the_window(gpu_record):
    d = EventDetector(gpu_idle_window_s=300)
    assert not _run(d, [_at(gpu_record, T0 + 30 * i) for i in range(10)])  # 270 s


def test_resolved_when_it_works_or_lets_go(gpu_record):
    d = EventDetector(gpu_idle_window_s=60)
    busy = copy.deepcopy(gpu_record)
    for p in busy["processes"]:
        p["sm_percent"] = 45
    events = _run(d, [_at(gpu_record, T0), _at(gpu_record, T0 + 60), _at(busy, T0 + 90)])
    assert [e["kind"] for e in events] == ["gpu_held_idle", "resolved"]
    assert events[1]["resolves"] == "gpu_held_idle" and events[1]["container"]["name"] == "notebook"
    assert events[1]["evidence"]["duration_s"] == 30 and "busy again" in events[1]["message"]
    # raised again, then the process leaves the GPU: resolved, the container named
    events = _run(d, [_at(gpu_record, T0 + 120), _at(gpu_record, T0 + 180), _at(gpu_record, T0 + 210, drop=[IDLE_PID])])
    assert [e["kind"] for e in events] == ["gpu_held_idle", "resolved"]
    assert events[1]["container"]["name"] == "notebook" and "let go" in events[1]["message"]


def test_a_dip_above_idle_starts_the_window_again(gpu_record):
    d = EventDetector(gpu_idle_window_s=120)
    warm = copy.deepcopy(gpu_record)
    for p in warm["processes"]:
        p["sm_percent"] = 10  # above idle (5 %), under busy (20 %)
    ticks = [_at(gpu_record, T0), _at(gpu_record, T0 + 60), _at(warm, T0 + 90), _at(gpu_record, T0 + 120),
             _at(gpu_record, T0 + 180)]
    assert not [e for e in _run(d, ticks) if e["kind"] == "gpu_held_idle"]


def test_under_the_memory_line_or_unmeasured_is_not_held_idle(gpu_record):
    small = copy.deepcopy(gpu_record)
    for p in small["processes"]:
        p["memory_bytes"] = GiB - 1
    d = EventDetector(gpu_idle_window_s=60)
    assert not _run(d, [_at(small, T0 + 30 * i) for i in range(5)])
    mig = copy.deepcopy(gpu_record)
    for p in mig["processes"]:
        p["sm_percent"] = None
    d = EventDetector(gpu_idle_window_s=60)
    assert not _run(d, [_at(mig, T0 + 30 * i) for i in range(5)])
    h = holdings([mig])
    assert all(x.sm_percent is None and not x.idle(GiB, 5.0) for x in h.values())


def _cgroup_record(path, container):
    from tests.helpers.fieldtable import record

    return record(cgroup=path, container=container, interval_s=30.0)


def test_counter_per_container_on_the_endpoint(gpu_record):
    """cgstat_gpu_held_idle_seconds_total: the notebook's GPU-seconds held idle, tick by
    tick (30 s apart on the exporter's clock); the busy trainer has no series."""
    from prometheus_client.parser import text_string_to_metric_families

    from cgstat.outputs.prometheus import exposition as prometheus
    from cgstat.outputs.prometheus.heldidle import HeldIdleSeconds

    by_pid = {p["pid"]: p for p in gpu_record["processes"]}
    cgroups = [_cgroup_record(by_pid[IDLE_PID]["cgroup"], NOTEBOOK), _cgroup_record(by_pid[BUSY_PID]["cgroup"], TRAINER)]
    counter = HeldIdleSeconds()
    for i in range(5):
        held = counter.update(cgroups + [_at(gpu_record, T0 + 30 * i)], 1000.0 + 30 * i)
    text = prometheus.render(cgroups + [gpu_record], held_idle=held).decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "cgstat_gpu_held_idle_seconds"]
    assert [(s.labels["name"], s.value) for s in family.samples] == [("notebook", 120.0)]
    assert family.type == "counter"
    # the notebook goes: its counter with it
    assert counter.update([cgroups[1], _at(gpu_record, T0 + 150)], 1150.0) == []


def test_report_summary_gives_gpu_hours_held_and_busy(tmp_path):
    """The input-bound trainer of the report's test stream holds one GPU for 600 one-second
    ticks, at 0 % SM for the first half and 70 % for the second: 0.17 GPU-hours held,
    0.06 busy (210 GPU-seconds)."""
    from cgstat.outputs.report import build_report, read_stream
    from tests.unit.test_report import write_stream

    src = write_stream(str(tmp_path / "s.jsonl"), seconds=600, detect=False)
    d = read_stream(src)
    (w,) = [w for w in d.workloads.values() if w.name == "input-bound"]
    assert w.gpu_held_s == 600.0 and abs(w.gpu_busy_s - 210.0) < 1e-6
    (calm,) = [w for w in d.workloads.values() if w.name == "leaky-trainer"]
    assert calm.gpu_held_s == 0.0 and not calm.has_gpu
    out = str(tmp_path / "r.html")
    build_report(src, out)
    html = open(out, encoding="utf-8").read()
    assert "held h" in html and "busy h" in html
    row = html[html.index('data-name="input-bound'):]
    row = row[:row.index("</tr>")]
    assert ">0.17</td>" in row and ">0.06</td>" in row
