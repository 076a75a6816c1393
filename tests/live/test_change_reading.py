"""Reading what changed against reading everything, side by side on real cgroups.

Two `cgstat stream`s run at the same time over the same groups: busy ones (a spinner, a
burner that stops after a second of CPU and leaves its pressure averages decaying) and
idle ones (sleeping, holding memory). One reads what changed with a full read at least
every FULL_EVERY_S seconds, the other every file every tick (--full-read). Every value
the first reports for a cgroup whose CPU stood still (a reused read) is one the second
saw within FULL_EVERY_S (plus a tick each side), so none is older than the bound, and an
idle group's records are the same in both but for their time stamps. Two parents hold
children: one a busy and an idle child (the parent moves: each child reads its own
signal), the other only an idle one (the parent stands still and spares its child's
signal read).
"""

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.helpers import realcg as R
from tests.helpers.contract import ROOT

pytestmark = pytest.mark.realcg

FULL_EVERY_S = 2.0
INTERVAL_S = 0.5
TICKS = 20
SLACK_S = 2 * INTERVAL_S  # the two streams' ticks are not aligned
NOT_COMPARED = {"ts", "interval_s"}
RATES = ("percent", "_per_second")  # rates: 0 in a reused read, compared apart
# read every tick, and still in an idle group (its memory charge can move: per-CPU charge
# caches are drained by others' work)
SIGNAL = ("cpu.usage_seconds_total", "pids.current")


def _flat(obj, prefix=""):
    """Every leaf of a record as (dotted path, value); lists by index."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flat(v, prefix + k + ".")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _flat(v, prefix + str(i) + ".")
    else:
        yield prefix[:-1], obj


def _stream(argv, env, out):
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", str(INTERVAL_S),
                             "--count", str(TICKS), "--no-events", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=ROOT, env=env)

    def collect():
        for line in proc.stdout:
            out.append(json.loads(line))

    t = threading.Thread(target=collect)
    t.start()
    return proc, t


def test_change_driven_records_match_full_reads_within_the_bound(make_group, workload_bin):
    groups = {kind: make_group() for kind in ("spin", "burn", "sleep", "hold", "empty", "mixed", "quiet")}
    groups["mixed/spin"] = make_group(parent=groups["mixed"])
    groups["mixed/sleep"] = make_group(parent=groups["mixed"])
    groups["quiet/sleep"] = make_group(parent=groups["quiet"])
    if "unified" not in groups["spin"].dirs and not R.Hierarchies().v2:
        pytest.skip("no cgroup2 folder for the groups: no pressure files to watch decay")
    groups["spin"].set_cpu_quota(20000)  # 0.2 core: busy, without taking a shared machine's CPU
    groups["mixed/spin"].set_cpu_quota(10000)
    procs = [groups["spin"].start([workload_bin, "spin"]), groups["sleep"].start([workload_bin, "sleep"]),
             groups["hold"].start([workload_bin, "hold", "8"]), groups["mixed/spin"].start([workload_bin, "spin"]),
             groups["mixed/sleep"].start([workload_bin, "sleep"]), groups["quiet/sleep"].start([workload_bin, "sleep"])]
    for p in procs:
        p.wait_line("ready")
    burner = groups["burn"].start([workload_bin, "burn", "2.0"])
    match = "|".join(g.name for g in groups.values())
    env = dict(os.environ, PYTHONPATH=ROOT, CGSTAT_FULL_READ_EVERY_S=str(FULL_EVERY_S))
    changed, full = [], []
    runs = [_stream(["--match", match], env, changed), _stream(["--match", match, "--full-read"], env, full)]
    burner.wait_line("done", timeout=60)
    for proc, t in runs:
        proc.wait(timeout=120)
        t.join()
        assert proc.returncode == 0
    by_group = {}
    for name, recs in (("changed", changed), ("full", full)):
        for r in recs:
            if r.get("type") == "cgroup":
                by_group.setdefault(r["cgroup"], {}).setdefault(name, []).append(r)
    checked = reused = 0
    for kind, g in groups.items():
        got = by_group.get(g.cgroup)
        assert got and len(got.get("changed", ())) == TICKS and len(got.get("full", ())) == TICKS, kind
        seen = {}  # field -> [(time, value)] of the full reads
        for r in got["full"]:
            t = _seconds(r["ts"])
            for path, value in _flat(r):
                seen.setdefault(path, []).append((t, value))
        since = _seconds(got["full"][0]["ts"]) + FULL_EVERY_S + SLACK_S  # the full reads cover the bound
        for r in got["changed"]:
            t = _seconds(r["ts"])
            flat = dict(_flat(r))
            assert set(flat) - NOT_COMPARED == set(seen) - NOT_COMPARED, kind  # the same fields
            if (r["cpu"]["percent"] or 0) > 0 or t < since:
                continue  # its CPU moved: read in full, as the other stream reads it (null: checked below)
            reused += 1
            for path, value in flat.items():
                if path in NOT_COMPARED:
                    continue
                if path.endswith(RATES) and path != "memory.percent":
                    assert value in (0, 0.0, None), (kind, path, value)  # nothing moved
                    # and unknown exactly where the full reads can't say either (a rate of 0
                    # is not a null: pipeline/same.py's rates are derive()'s)
                    assert (value is None) == (seen[path][-1][1] is None), (kind, path, value)
                    continue
                # a value the full reads showed, no longer than the bound before this record
                assert any(t - FULL_EVERY_S - SLACK_S <= ft <= t + SLACK_S and fv == value
                           for ft, fv in seen[path]), (kind, path, value, t, seen[path])
                checked += 1
        if kind in ("sleep", "hold", "empty", "quiet", "mixed/sleep", "quiet/sleep"):
            # idle all along: what the signal reads stands still, the same in both streams
            # (the rest may move by the kernel's own work: the window above bounds it)
            for r in got["changed"][1:] + got["full"][1:]:
                flat = dict(_flat(r))
                assert [flat[k] for k in SIGNAL] == [dict(_flat(got["full"][-1]))[k] for k in SIGNAL], kind
    assert reused >= 3 * (TICKS - 8) and checked > 100
    # and the idle groups' reads were reused (what the streams can't show)
    from cgstat.pipeline.sampler import Sampler

    sampler = Sampler(match=match, full_read_every_s=FULL_EVERY_S)
    try:
        sampler.warm_up()
        for _ in range(3):
            sampler.tick()
        assert sampler.changes.reused >= 3 * 3 and sampler.changes.full_reads >= len(groups)
        # the quiet parent's child was not read (where the counters are hierarchical), the
        # busy one's was
        assert sampler.changes.spared >= (2 if sampler.changes.hierarchical else 0)
    finally:
        sampler.close()


def _seconds(ts):
    from datetime import datetime

    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
