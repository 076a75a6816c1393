"""Peaks, fail counts and weights on this machine's real v1 hierarchy: peak_bytes, failcnt and cpu.weight
equal the v1 files (memory.max_usage_in_bytes, memory.failcnt, cpu.shares converted) of a
cgroup the test makes, and a long-running stream follows failcnt from frozen (no limit: the
value is kept, not read) to moving (a limit set, charges refused) as the kernel counts it."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import realcg as R
from tests.helpers.contract import ROOT, validate

pytestmark = pytest.mark.realcg

MIB = 1 << 20


def _once(run_cgstat, g):
    return R.find(run_cgstat("once", "--window", "0", "--match", g.name), g.cgroup)


def _failcnt(g):
    return int(g.read("memory", "memory.failcnt"))


def _stream(g, count, at):
    """The group's records of `cgstat stream --interval 0.5 --count COUNT`, calling at[n]()
    once the n-th has come."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    stream = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "0.5", "--count", str(count),
                               "--no-events", "--match", g.name], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
    records = []
    try:
        for line in stream.stdout:
            rec = json.loads(line)
            if rec.get("cgroup") == g.cgroup:
                records.append(rec)
                if len(records) in at:
                    at[len(records)]()
    finally:
        stream.wait(timeout=60)
    return records


def test_peak_failcnt_and_weight_equal_the_v1_files(make_group, workload_bin, run_cgstat):
    g = make_group()
    if not os.path.exists(g.path("memory", "memory.max_usage_in_bytes")):
        pytest.skip("no v1 memory hierarchy here")
    g.set("cpu", "cpu.shares", 512)
    g.set_memory_limit(32 * MIB)
    anchor = g.start([workload_bin, "sleep"])  # keeps the group populated after the kill
    anchor.wait_line("ready")
    hog = g.start([workload_bin, "alloc", "96"])  # charges refused at the limit, then an OOM kill
    hog.wait(timeout=60)
    # the group is idle now: its peak and failcnt stay as they are
    peak, failcnt = int(g.read("memory", "memory.max_usage_in_bytes")), _failcnt(g)
    assert failcnt > 0 and peak > 16 * MIB
    rec = _once(run_cgstat, g)
    validate(rec)
    assert rec["memory"]["peak_bytes"] == peak == int(g.read("memory", "memory.max_usage_in_bytes"))
    assert rec["memory"]["failcnt"] == failcnt == _failcnt(g)
    assert rec["cpu"]["shares"] == int(g.read("cpu", "cpu.shares")) == 512
    assert rec["cpu"]["weight"] == 50  # 512 x 100 / 1024, as the kernel shows a v2 weight
    assert rec["memory"]["low_bytes"] is None  # soft limit unset: the unlimited sentinel
    # v2-only fields are null on v1, with no error for their absent files
    assert rec["memory"]["events"] is None and rec["memory"]["high_bytes"] is None
    assert rec["memory"]["pgscan_total"] is None
    sources = {e["source"] for e in rec["errors"]}
    assert not sources & {"memory.peak", "memory.events.local", "memory.high", "cpu.weight", "pids.peak"}


def test_default_shares_read_as_weight_100(make_group, workload_bin, run_cgstat):
    g = make_group()
    # a member process: it joins the group's nested memory folder to its other folders
    g.start([workload_bin, "sleep"]).wait_line("ready")
    rec = _once(run_cgstat, g)
    assert int(g.read("cpu", "cpu.shares")) == 1024
    assert (rec["cpu"]["shares"], rec["cpu"]["weight"]) == (1024, 100)
    assert rec["memory"]["failcnt"] == _failcnt(g) == 0, rec["errors"]
    assert rec["memory"]["peak_bytes"] == int(g.read("memory", "memory.max_usage_in_bytes"))


def test_stream_follows_failcnt_from_frozen_to_counting(make_group, workload_bin):
    g = make_group()
    anchor = g.start([workload_bin, "sleep"])
    anchor.wait_line("ready")
    def after_two():  # no limit so far: failcnt can't move, its kept value is served
        g.set_memory_limit(32 * MIB)  # IN_MODIFY: the limit is read again, failcnt with it
        g.start([workload_bin, "alloc", "96"]).wait(timeout=60)

    records = _stream(g, 12, {2: after_two})
    assert records[0]["memory"]["failcnt"] == 0 and records[0]["memory"]["limit_bytes"] is None
    assert records[-1]["memory"]["limit_bytes"] == 32 * MIB
    assert records[-1]["memory"]["failcnt"] == _failcnt(g) > 0
    assert records[-1]["memory"]["peak_bytes"] == int(g.read("memory", "memory.max_usage_in_bytes"))


# Forks `n` children that exit at once (a short job in a cgroup that is empty before and after).
_BURST = r"""
import os, sys
for _ in range(int(sys.argv[1])):
    try:
        if os.fork() == 0:
            os._exit(0)
    except BlockingIOError:
        pass
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_stream_sees_pids_peak_and_events_of_a_job_that_came_and_went(make_group, tmp_path):
    """pids.peak and pids.events are not read while the cgroup stays empty and idle; a job
    that runs between two ticks (empty at both) moves its CPU time, and they are read again."""
    g = make_group(("pids", "cpu", "cpuacct"))
    if not os.path.exists(g.path("pids", "pids.peak")):
        pytest.skip("no pids.peak on this kernel")
    g.set_pids_max(3)
    records = _stream(g, 10, {3: lambda: g.start([sys.executable, "-c", _BURST, "6"]).wait(timeout=30)})
    assert records[1]["pids"] == {"current": 0, "limit": 3, "processes": 0, "peak": 0, "events_max_total": 0}
    last = records[-1]["pids"]
    assert last["current"] == 0
    assert last["peak"] == int(g.read("pids", "pids.peak")) == 3
    events = dict(line.split() for line in g.read("pids", "pids.events").splitlines())
    assert last["events_max_total"] == int(events["max"]) > 0


def test_an_idle_empty_cgroup_keeps_no_descriptor_for_its_frozen_counters(make_group):
    """What spares the reads: with no task, pids.peak and pids.events are kept values, not
    descriptors read each tick."""
    import io

    import cgstat
    from cgstat.diagnostics import Warner

    g = make_group(("pids", "cpu", "cpuacct", "memory"))
    sampler = cgstat.Sampler(match=g.name, warner=Warner(io.StringIO()))
    for _ in range(3):
        sampler.tick()
    kept = {}
    for mount, path, entry in sampler.kept.entries():
        if path.endswith("/" + g.name):
            kept.update(entry.kept)
    from cgstat.kernel.controllers.pids import EVENTS_FROZEN, PEAK_FROZEN

    if "pids.peak" in os.listdir(g.path("pids")):
        assert PEAK_FROZEN in kept and "pids.peak" not in kept
    assert EVENTS_FROZEN in kept and "pids.events" not in kept
    assert "pids.current" in kept  # read each tick, through its kept descriptor
