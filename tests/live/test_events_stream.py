"""Events through the command line: `stream` raises them in the stream, once per episode;
`once --state` judges what two cron runs can (an OOM kill between them)."""

import json
import subprocess
import sys

from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT, validate

MIB = 1 << 20


def test_burner_at_quota_with_an_idle_gpu_process_is_input_bound(tmp_path, make_group, workload_bin):
    busy, calm = make_group(), make_group()
    busy.set_cpu_quota(50000, 100000)
    spin = busy.start([workload_bin, "spin"])
    spin.wait_line("ready")
    calm.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    # the burner's process holds GPU memory and never gets an SM sample: idle
    sc = D.Scenario().gpu(0, uuid="GPU-0", util_gpu=0).proc(0, spin.pid, 2 << 30)
    path = D.write_scenario(tmp_path / "s.txt", sc)
    proc = subprocess.run([sys.executable, "-m", "cgstat", "stream", "--interval", "0.5", "--events-window", "4",
                           "--count", "14", "--all", "--match", f"{busy.name}|{calm.name}"],
                          env=D.env(path), cwd=ROOT, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    records = [json.loads(x) for x in proc.stdout.splitlines()]
    for r in records:
        validate(r)
    # this test's cgroups' (an OOM kill elsewhere on the host is an event too)
    events = [r for r in records if r["type"] == "event" and r["cgroup"] in (busy.cgroup, calm.cgroup)]
    kinds = sorted((e["kind"], e["cgroup"]) for e in events)
    # a plain cgroup is no container: its GPU process is also said to run outside one
    assert kinds == sorted([("cpu_throttled", busy.cgroup), ("gpu_idle_cpu_bound", busy.cgroup),
                            ("gpu_process_outside_container", busy.cgroup)]), kinds
    (hint,) = [e for e in events if e["kind"] == "gpu_idle_cpu_bound"]
    assert "input pipeline" in hint["message"] and hint["severity"] in ("warning", "critical")
    last = [r for r in records if r["type"] == "cgroup" and r["cgroup"] == busy.cgroup][-1]
    assert last["gpu"]["memory_bytes"] == 2 << 30 and last["gpu"]["sm_percent"] == 0


def test_once_state_judges_an_oom_kill_between_two_runs(tmp_path, make_group, workload_bin):
    g = make_group()
    g.set_memory_limit(64 * MIB)
    keeper = g.start([workload_bin, "sleep"])  # a member: the memory cgroup is joined through it
    keeper.wait_line("ready")
    state = str(tmp_path / "once.state")
    args = [sys.executable, "-m", "cgstat", "once", "--state", state, "--all", "--match", g.name]

    def ours(out):  # this test's cgroup's events (an OOM kill elsewhere on the host is one too)
        return [e for e in map(json.loads, out.splitlines()) if e["type"] == "event" and e["cgroup"] == g.cgroup]

    first = subprocess.run(args, cwd=ROOT, capture_output=True, timeout=60)
    assert first.returncode == 0 and ours(first.stdout) == [], first.stderr
    hog = g.start([workload_bin, "alloc", "200"])
    assert hog.wait(60) in (-9, 137)  # OOM-killed
    second = subprocess.run(args, cwd=ROOT, capture_output=True, timeout=60)
    events = ours(second.stdout)
    assert [(e["kind"], e["cgroup"], e["evidence"]["kills"]) for e in events] == [("oom_kill", g.cgroup, 1)]
    assert events[0]["evidence"]["oom_kills_total"] == 1  # as the record says
    validate(events[0])
    third = subprocess.run(args, cwd=ROOT, capture_output=True, timeout=60)
    assert ours(third.stdout) == []  # said once, not every run
