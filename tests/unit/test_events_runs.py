"""The rules across two `once --state` runs (cgstat/events/runs.py): every counter event
since the last run once, from the v2-fields recording (a container held at memory.high 8M,
one whose forks hit pids.max 4, one at its CPU quota) and synthetic samples; GPU XIDs the
kernel log carried; a rule defined here, judged in a stream and across two runs alike;
and an oom_kill event's counter evidence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from cgstat.kernel.kmsg import KmsgFollower
from cgstat.kernel.kmsg_record import Record
from cgstat.kernel.oom_report import OomReport
from cgstat.kernel.xid_report import parse_xid, same_pci_device
from cgstat.naming.oom_victims import NamedKill
from cgstat.events import EventDetector, judge_runs, state_extras
from cgstat.events import rules as rules_mod
from tests.helpers.contract import ROOT, run_cgstat, validate

FIX = os.path.join(ROOT, "tests", "fixtures", "v2-fields")
J = "/system.slice/docker-f56dd1ff992a14d84d9133e27d77b442f4bb8e4ab8dfe7e73119f0c8d9baf44e.scope"  # memory.high
K = "/system.slice/docker-179a3868c03f4184f9689fa5e8ad7871e89687a4cce83ad3e76574f07b42b792.scope"  # pids.max
Q = "/system.slice/docker-26372ff47f1d2eaf11ce7c592bf2693f957e0bf0245c8791c51e1a355a71f840.scope"  # CPU quota
MiB = 1024 * 1024


def rec(path="/docker/abc", oom=0, interval=1.0, ws=10 * MiB, limit=32 * MiB):
    return {"type": "cgroup", "ts": "2026-12-01T10:00:00.000Z", "host": "h", "cgroup": path,
            "interval_s": interval, "unit": None, "pod": None, "container": None,
            "memory": {"working_set_bytes": ws, "limit_bytes": limit, "oom_kills_total": oom}}


def kill(pid, path="/docker/abc"):
    report = OomReport(1, 0, pid, "python3", 0, path, path, "CONSTRAINT_MEMCG", False, 32 * MiB, 32 * MiB,
                       30 * MiB, 1 * MiB, 0, True, False)
    return NamedKill(report, path, None, None, None, True, "live", True)


def ooms(events):
    return [e for e in events if e["kind"] == "oom_kill"]


def _events(records):
    return [r for r in records if r.get("type") == "event"]


def test_recorded_runs_give_each_counter_event_once(tmp_path):
    state = str(tmp_path / "state.json")
    runs = [run_cgstat("once", "--host-root", os.path.join(FIX, t), "--all", "--state", state)[0]
            for t in ("t0", "t1", "t1")]
    assert _events(runs[0]) == []  # nothing to compare with
    second = _events(runs[1])
    for e in second:
        validate(e)
    assert sorted((e["kind"], e["cgroup"]) for e in second) == sorted(
        [("cpu_throttled", Q), ("memory_high_throttled", J), ("pids_limit_hit", K)])
    by = {e["kind"]: e for e in second}
    high = by["memory_high_throttled"]["evidence"]
    assert (high["memory_high_events"], high["memory_high_events_total"], high["high_bytes"]) == (238 - 53, 238, 8 << 20)
    forks = by["pids_limit_hit"]["evidence"]
    assert (forks["failures"], forks["pids_events_max_total"], forks["limit"]) == (1, 2, 4)
    assert by["cpu_throttled"]["evidence"]["throttled_fraction"] == 1.0
    assert _events(runs[2]) == []  # the same counters again: nothing new since the last run


def _at(path, t, interval, **values):
    """A record with the sample values given (memory high count, pids failures, CPU)."""
    r = rec(path, interval=interval)
    r["ts"] = "2026-12-01T10:%02d:00.000Z" % t
    r["memory"]["high_bytes"] = values.get("high_bytes")
    r["memory"]["events_local"] = {"high": values.get("high")} if "high" in values else None
    r["pids"] = {"events_max_total": values.get("forks"), "limit": 4, "current": 4}
    r["cpu"] = {"usage_seconds_total": values.get("cpu_s"), "periods_total": values.get("periods"),
                "throttled_periods_total": values.get("throttled"), "limit_cores": 0.5}
    return r


def test_synthetic_runs_each_counter_once_and_nothing_across_a_new_life():
    first = [_at("/a", 0, None, high=5, high_bytes=8 * MiB, forks=0, cpu_s=1.0, periods=100, throttled=10)]
    kept = state_extras(first)
    assert set(kept["/a"]) >= {"memory_high_events", "pids_limit_failures", "cpu_throttled_periods_total"}
    second = [_at("/a", 5, 300.0, high=9, high_bytes=8 * MiB, forks=3, cpu_s=150.0, periods=3100, throttled=2800)]
    ev = judge_runs(kept, second)
    assert sorted(e["kind"] for e in ev) == ["cpu_throttled", "memory_high_throttled", "pids_limit_hit"]
    by = {e["kind"]: e["evidence"] for e in ev}
    assert by["memory_high_throttled"]["memory_high_events"] == 4 and by["memory_high_throttled"]["window_s"] == 300.0
    assert by["pids_limit_hit"]["failures"] == 3
    assert by["cpu_throttled"]["throttled_periods"] == 2790 and by["cpu_throttled"]["periods"] == 3000
    # the same cgroup recreated (interval_s null): another life, nothing to compare
    assert judge_runs(kept, [dict(second[0], interval_s=None)]) == []
    # an older state (three keys) still reads; what it lacks is unknown, not 0
    old = {"/a": {"oom_kills_total": 0, "working_set_bytes": 1, "limit_bytes": None}}
    assert judge_runs(old, second) == []


XID_LINES = [
    (0, "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
    (0, "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0)"),
    (0, "NVRM: Xid (PCI:0000:3b:00): 13, pid=4243, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0)"),
    (1, "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=forged, written by a process"),  # LOG_USER: not the kernel
    (0, "NVRM: GPU at PCI:0000:3b:00: GPU-0f3c..."),
]


def _kmsg(lines):
    raw = [b"%d,%d,%d,-;%s\n" % ((fac << 3) | 3, 100 + i, 1000 * i, text.encode()) for i, (fac, text) in enumerate(lines)]

    def read_one():
        if not raw:
            raise BlockingIOError
        return raw.pop(0)

    return KmsgFollower(read_one=read_one)


def test_xids_the_kernel_log_carried_are_one_event_per_gpu_and_code():
    batch = _kmsg(XID_LINES).read()
    assert [(x.pci_bus_id, x.xid, x.pid, x.process) for x in batch.xids] == [
        ("0000:3b:00", 79, None, None), ("0000:3b:00", 13, 4242, "python3"), ("0000:3b:00", 13, 4243, "python3")]
    assert batch.kills == [] and batch.last_seq == 104
    assert parse_xid(Record(0, 3, 1, 0, False, "NVRM: Xid (PCI:0000:3b:00): 79")).xid == 79
    assert same_pci_device("0000:3b:00", "00000000:3B:00.0") and not same_pci_device("0000:3b:00", "00000000:3C:00.0")
    gpu = {"type": "gpu", "ts": "2026-12-01T10:05:00.000Z", "host": "h",
           "gpu": {"index": 2, "uuid": "GPU-2", "parent_uuid": None, "pci_bus_id": "00000000:3B:00.0"}}
    ev = judge_runs({}, [rec("/a", interval=None), gpu], xids=list(batch.xids))
    assert [(e["kind"], e["severity"], e["evidence"]["xid"], e["evidence"]["count"]) for e in ev] == [
        ("gpu_xid", "critical", 79, 1), ("gpu_xid", "warning", 13, 2)]
    xid13 = ev[1]
    assert xid13["evidence"]["gpu_index"] == 2 and xid13["evidence"]["pids"] == [4242, 4243]
    assert xid13["cgroup"] is None and "GPU 2 (GPU-2)" in xid13["message"] and "4242, 4243 (python3)" in xid13["message"]
    for e in ev:
        validate(e)
    # no GPU record for it (no GPU metrics in the cron run): the PCI address says which
    ev = judge_runs({}, [rec("/a", interval=None)], xids=list(batch.xids)[:1])
    assert ev[0]["evidence"]["gpu_index"] is None and "PCI 0000:3b:00" in ev[0]["message"]


NEW_RULE = '''
from cgstat.events.rules import CgroupRule


class CpuUsedTest(CgroupRule):
    """CPU used since the sample before: once per episode in a stream, once per pair of runs."""

    kind = "cpu_used_test"
    min_seconds = 0.001  # its threshold

    def judge(self, c):
        b, s = c.before, c.sample
        if b is None or b.cpu_usage_seconds_total is None or s.cpu_usage_seconds_total is None:
            return
        used = s.cpu_usage_seconds_total - b.cpu_usage_seconds_total
        if used >= self.min_seconds and self.kind not in c.history.open:
            c.raise_(self.kind, "info", "used %.3f s of CPU" % used, {"cpu_seconds": used})

    judge_runs = judge
'''


@pytest.fixture
def new_rule(tmp_path, monkeypatch):
    """The module NEW_RULE defines, imported here (its class registered) and forgotten after."""
    (tmp_path / "new_rule_mod.py").write_text(textwrap.dedent(NEW_RULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = list(rules_mod.CGROUP_RULES)
    import new_rule_mod

    yield new_rule_mod, str(tmp_path)
    rules_mod.CGROUP_RULES[:] = saved
    sys.modules.pop("new_rule_mod", None)


def test_a_new_rule_is_one_class_judged_in_a_stream_and_across_two_runs(new_rule, tmp_path):
    mod, folder = new_rule
    assert rules_mod.CGROUP_RULES[-1] is mod.CpuUsedTest  # defining it registered it
    d = EventDetector()
    stream = [d.observe([_at("/a", i, None if i == 0 else 1.0, cpu_s=1.0 + i)]) for i in range(4)]
    assert [[e["kind"] for e in tick] for tick in stream] == [[], ["cpu_used_test"], [], []]  # one episode
    # `cgstat once --state` twice, in a process that imports the rule's module first
    state = str(tmp_path / "state.json")
    code = "import sys, new_rule_mod; from cgstat.cli import main; sys.argv[0] = 'cgstat'; main()"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([folder, ROOT]))
    env.pop("CGSTAT_HOST_ROOT", None)
    outs = []
    for t in ("t0", "t1"):
        p = subprocess.run([sys.executable, "-c", code, "once", "--host-root", os.path.join(FIX, t), "--all",
                            "--state", state], capture_output=True, env=env, cwd=ROOT, timeout=60, check=True)
        outs.append([__import__("json").loads(line) for line in p.stdout.splitlines()])
    assert [e for e in _events(outs[0]) if e["kind"] == "cpu_used_test"] == []
    used = [e for e in _events(outs[1]) if e["kind"] == "cpu_used_test"]
    assert Q in [e["cgroup"] for e in used]  # the container at its CPU quota used CPU between the runs
    q = [e for e in used if e["cgroup"] == Q][0]
    assert q["evidence"]["cpu_seconds"] > 1.0 and q["message"].startswith("used ")


def test_a_log_kill_gives_the_counter_its_record_has():
    # the counter rose in the same tick as the log's report: the event carries its total
    d = EventDetector()
    d.observe([rec(oom=0)])
    (e,) = ooms(d.observe([rec(oom=1)], kills=[kill(10)]))
    assert (e["evidence"]["source"], e["evidence"]["oom_kills_total"]) == ("kernel_log", 1)
    # a cgroup killed before its first sample: the first sample counts the kill
    d = EventDetector()
    (e,) = ooms(d.observe([rec(oom=1, interval=None)], kills=[kill(11)]))
    assert e["evidence"]["oom_kills_total"] == 1
    # two cron runs: the previous run's counter 0, this run's 1 and the log's kill
    (e,) = ooms(judge_runs(state_extras([rec(oom=0)]), [rec(oom=1, interval=300.0)], kills=[kill(12)]))
    assert (e["evidence"]["pid"], e["evidence"]["oom_kills_total"]) == (12, 1)
    # the log ahead of the counter (killed between the cgroup's read and the log's): unknown yet
    d = EventDetector()
    d.observe([rec(oom=0)])
    (e,) = ooms(d.observe([rec(oom=0)], kills=[kill(13)]))
    assert e["evidence"]["oom_kills_total"] is None
    validate(e)
