"""stream and once on this host's own cgroups."""

from tests.helpers.contract import run_cgstat, validate


def test_stream_live_host_three_batches():
    # --match pins the root cgroup: what else the default shows depends on the host's own
    # workloads (containers on a contributor's machine), which this test must not assume
    records, err, _ = run_cgstat("stream", "--interval", "0.3", "--count", "3", "--match", "^/$")
    assert "Traceback" not in err
    for r in records:
        validate(r)
    roots = [r for r in records if r["cgroup"] == "/"]
    assert len(roots) == 3
    # the first batch already has rates (it comes one interval after a priming sample);
    # an OOM kill elsewhere on the host would be an event line too
    records = [r for r in records if r["type"] != "event"]
    assert len(records) == 3
    assert all(r["interval_s"] is not None and 0.2 < r["interval_s"] < 2 for r in records)
    assert len({r["ts"] for r in roots}) == 3


def test_once_live_host_has_rates_over_window():
    records, err, _ = run_cgstat("once", "--window", "0.3", "--all")
    (root,) = [r for r in records if r["cgroup"] == "/"]
    # the window is a floor: reading every cgroup of a busy host (thousands, on a loaded
    # machine) stretches the time between a cgroup's two samples, never shortens it
    assert 0.25 < root["interval_s"] < 60 and root["cpu"]["percent"] is not None
    # a cgroup created meanwhile (by a test running beside this one) has no rate yet
    assert all(r["interval_s"] is None or 0.25 < r["interval_s"] < 60 for r in records)
    assert "showing every cgroup" in err  # says once what it shows
