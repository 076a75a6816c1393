"""Two `once --state` runs around real workloads on this machine's cgroups: a fork bomb
under pids.max (v1 and v2) and a workload held at memory.high (cgroup v2 only: v1 has no
memory.high) give one pids_limit_hit and one memory_high_throttled event, and a third run
none. Other workloads run beside these tests: each assertion picks this test's cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.helpers import realcg as R

try:
    from tests.helpers.contract import validate
except ImportError:  # the guest's Python has no jsonschema: the host's run checks the schema

    def validate(record):
        assert record["type"] == "event" and isinstance(record["evidence"], dict)

pytestmark = [pytest.mark.realcg]
REALCG_V2 = True  # ported to pure cgroup v2 as well (tests/guest runs it there)
MiB = 1024 * 1024


def _ours(records, g):
    return [e for e in records if e.get("type") == "event" and e.get("cgroup") == g.cgroup]


def _counts(text):
    return dict((k, int(v)) for k, v in (line.split() for line in text.splitlines() if line.strip()))


def test_two_runs_around_a_fork_bomb_under_pids_max_give_one_pids_limit_hit(realcg_env, make_group, tmp_path):
    g = make_group(("pids", "cpu", "cpuacct", "memory", "unified"))  # unified: pure v2 has only that
    if "pids" not in g.dirs and not realcg_env.v2:
        pytest.skip("no pids controller here")
    g.set_pids_max(4)
    trigger = str(tmp_path / "go")
    bomb = g.start([sys.executable, "-c", R.FORK_BOMB, trigger, "5"])
    bomb.wait_line("ready")
    state = str(tmp_path / "state.json")
    run = ("once", "--state", state, "--all", "--match", g.name)
    first = R.cgstat(*run)
    with open(trigger, "w"):
        pass
    bomb.wait_line("refused")
    second = R.cgstat(*run)
    third = R.cgstat(*run)
    key = "pids" if "pids" in g.dirs else "unified"
    refused = _counts(g.read(key, "pids.events"))["max"]
    assert refused >= 5  # the kernel refused the forks and counted them here
    assert _ours(first, g) == [] and _ours(third, g) == []
    hits = _ours(second, g)
    assert [e["kind"] for e in hits] == ["pids_limit_hit"], hits
    e = hits[0]
    validate(e)
    assert (e["evidence"]["failures"], e["evidence"]["pids_events_max_total"], e["evidence"]["limit"]) == (
        refused, refused, 4)
    assert "pids.max (4)" in e["message"]


def test_two_runs_around_a_workload_held_at_memory_high_give_one_memory_high_throttled(realcg_env, tmp_path):
    if not realcg_env.has("unified"):
        pytest.skip("memory.high is cgroup v2's and this host mounts no cgroup v2 hierarchy")
    g = R.TestGroup(realcg_env, ("unified",))
    try:
        if "memory" not in g.read("unified", "cgroup.controllers").split():
            pytest.skip("memory.high is cgroup v2's, and the memory controller is not on this host's cgroup v2 "
                        "hierarchy for the test's cgroup (a hybrid host keeps it on v1, which has no "
                        "memory.high); the guest stage (tests/guest) runs this on pure v2")
        g.set("unified", "memory.high", 16 * MiB)
        state = str(tmp_path / "state.json")
        run = ("once", "--state", state, "--all", "--match", g.name)
        first = R.cgstat(*run)
        # 24 MiB written under a 16 MiB memory.high: the kernel throttles it (no OOM kill)
        g.start([sys.executable, "-c", "x = b'x' * (24 << 20); import time; time.sleep(600)"],
                stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while _counts(g.read("unified", "memory.events")).get("high", 0) == 0:
            assert time.monotonic() < deadline, "never held at memory.high"
            time.sleep(0.05)  # polling the kernel's counter, not a timing assertion
        second = R.cgstat(*run)
        high_now = _counts(g.read("unified", "memory.events.local"))["high"]
        third = R.cgstat(*run)
    finally:
        g.destroy()
    assert _ours(first, g) == []
    held = _ours(second, g)
    assert [e["kind"] for e in held] == ["memory_high_throttled"], held
    e = held[0]
    validate(e)
    ev = e["evidence"]
    assert ev["high_bytes"] == 16 * MiB and 1 <= ev["memory_high_events"] <= ev["memory_high_events_total"] <= high_now
    assert "memory.high (16.0 MiB" in e["message"]
    # the throttling goes on, so the count may rise again by the third run; if it did, that
    # is a new rise since the last run, said once more, else nothing
    assert len([x for x in _ours(third, g) if x["kind"] == "memory_high_throttled"]) <= 1
