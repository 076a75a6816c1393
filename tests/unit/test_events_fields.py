"""memory_high_throttled and pids_limit_hit: from the v2-fields recording (a container held
at memory.high 8M, one whose forks hit pids.max 4) replayed as a tick sequence, and from a
real fork bomb under a v1 pids limit on this machine."""

import copy
import os

from cgstat.events import EventDetector
from tests.helpers.contract import ROOT, run_cgstat, validate

FIX = os.path.join(ROOT, "tests", "fixtures", "v2-fields")
J = "/system.slice/docker-f56dd1ff992a14d84d9133e27d77b442f4bb8e4ab8dfe7e73119f0c8d9baf44e.scope"
K = "/system.slice/docker-179a3868c03f4184f9689fa5e8ad7871e89687a4cce83ad3e76574f07b42b792.scope"


def _snapshot(name):
    records, _, _ = run_cgstat("once", "--host-root", os.path.join(FIX, name), "--all", "--window", "0")
    return [r for r in records if r["type"] in ("cgroup", "pod")]


def _snapshot_time(name):
    with open(os.path.join(FIX, name, "snapshot_time")) as f:
        return float(f.read().split()[0])  # host monotonic seconds when the snapshot began


def _replay(ticks, window_s):
    """Feed (now, records) ticks to a detector; every record gets the interval since the tick before."""
    det = EventDetector(window_s=window_s)
    events = []
    last = None
    for now, records in ticks:
        batch = copy.deepcopy(records)
        for r in batch:
            r["interval_s"] = None if last is None else now - last
        events += [(now, e) for e in det.observe(batch, now=now)]
        last = now
    return events


def test_recorded_throttling_and_fork_failures_raise_one_event_each():
    t0, t1 = _snapshot("t0"), _snapshot("t1")
    dt = _snapshot_time("t1") - _snapshot_time("t0")  # 9.17 s between the recorded snapshots
    window = 10.0
    # t0, t1, then t1's values again (nothing rises any more) until a whole window has passed
    ticks = [(0.0, t0), (dt, t1)] + [(dt + 5.0 * i, t1) for i in range(1, 5)]
    events = _replay(ticks, window)
    for _, e in events:
        validate(e)
    raised = [(now, e) for now, e in events if e["kind"] in ("memory_high_throttled", "pids_limit_hit")]
    assert [(e["kind"], e["cgroup"]) for _, e in raised] == [("memory_high_throttled", J), ("pids_limit_hit", K)]
    assert all(now == dt for now, _ in raised)  # on the tick where the counters rose
    high = raised[0][1]
    assert high["severity"] == "warning"
    assert high["evidence"]["memory_high_events"] == 238 - 53  # memory.events.local high, t0 -> t1
    assert high["evidence"]["memory_high_events_total"] == 238
    assert high["evidence"]["high_bytes"] == 8 << 20
    assert "memory.high (8.0 MiB" in high["message"] and "no OOM kill" in high["message"]
    forks = raised[1][1]
    assert forks["evidence"]["failures"] == 1 and forks["evidence"]["pids_events_max_total"] == 2
    assert forks["evidence"]["limit"] == 4
    assert "pids.max (4)" in forks["message"]
    # the throttling episode ends when a whole window passes without a rise; one notice
    resolved = [e for _, e in events if e["kind"] == "resolved" and e["resolves"] == "memory_high_throttled"]
    assert len(resolved) == 1 and resolved[0]["cgroup"] == J
    # a single fork failure ends its episode without a word
    assert not [e for _, e in events if e["kind"] == "resolved" and e["resolves"] == "pids_limit_hit"]


def test_no_throttling_event_without_a_rise_over_the_window():
    t1 = _snapshot("t1")
    events = _replay([(5.0 * i, t1) for i in range(6)], 10.0)  # high 238 all along: an old count
    assert not [e for _, e in events if e["kind"] in ("memory_high_throttled", "pids_limit_hit")]


def test_the_older_recordings_raise_neither():
    for name in ("v2-systemd", "hybrid-systemd"):
        root = os.path.join(ROOT, "tests", "fixtures", name)
        ticks = []
        for i, snap in enumerate(("t0", "t1", "t1", "t1")):
            records, _, _ = run_cgstat("once", "--host-root", os.path.join(root, snap), "--all", "--window", "0")
            ticks.append((5.0 * i, [r for r in records if r["type"] in ("cgroup", "pod")]))
        events = _replay(ticks, 10.0)
        assert not [e for _, e in events if e["kind"] in ("memory_high_throttled", "pids_limit_hit")], name


# -- a real fork bomb under a v1 pids limit ------------------------------------------------


