"""cgstat on a live pure cgroup v2 host under systemd (the guest), and the real-cgroup tests
run there through the harness."""
from __future__ import annotations

import json

import pytest


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_guest_is_pure_v2_under_systemd(guest):
    mounts = guest.run(["findmnt", "-n", "-o", "FSTYPE", "/sys/fs/cgroup"], check=True).out.split()
    assert mounts == ["cgroup2"]
    fstypes = [line.split()[2] for line in guest.get("/proc/mounts").decode().splitlines()]
    assert "cgroup" not in fstypes  # no v1 hierarchy at all
    ctrls = guest.get("/sys/fs/cgroup/cgroup.controllers").decode().split()
    assert {"cpu", "memory", "io", "pids"} <= set(ctrls)
    assert guest.get("/proc/1/comm").decode().strip() == "systemd"


def test_once_reports_systemd_services_with_v2_figures(guest):
    r = guest.run(["cgstat", "once", "--window", "1"], timeout_s=180, check=True)
    recs = {x["cgroup"]: x for x in records(r.out) if x.get("type") == "cgroup"}
    journald = recs.get("/system.slice/systemd-journald.service")
    assert journald is not None, sorted(recs)
    # what the kernel says, read right after: cgstat's figures lie below it (counters only grow)
    usage_usec = int(dict(line.split() for line in guest.get(
        "/sys/fs/cgroup/system.slice/systemd-journald.service/cpu.stat").decode().splitlines())["usage_usec"])
    assert 0 < journald["cpu"]["usage_seconds_total"] <= usage_usec / 1e6
    assert journald["memory"]["usage_bytes"] > 0
    assert journald["pids"]["current"] >= 1
    assert journald["pressure"] is not None and journald["pressure"].get("memory") is not None
    assert journald["container"] is None or isinstance(journald["container"], dict)


REAL_CGROUP_TESTS = ["tests/live/test_real_cgroups.py", "tests/live/test_events_runs.py"]


def test_real_cgroup_tests_pass_in_the_guest(guest):
    """The host's real-cgroup tests, in the guest: pure v2 under systemd, from a delegated
    transient service (the cgroup that systemd gives a service with Delegate=yes)."""
    run = guest.pytest(REAL_CGROUP_TESTS + ["-m", "realcg"], timeout_s=900)
    guest.inner = getattr(guest, "inner", {})
    guest.inner["real-cgroup"] = run.summary()
    print(run.summary())
    for c in run.cases:
        if c["outcome"] == "skipped":
            print("SKIP %s: %s" % (c["name"], c["text"]))
    assert run.cases, "no junit report: %r" % (run.result,)
    assert run.count("failed") == 0, run.failures()
    assert run.count("passed") > 0, run.summary()
