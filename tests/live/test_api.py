"""The Python API on this host's own cgroups: a quota burner of its own, and follow=False."""

import io
import os
import time

import pytest

import cgstat
from tests.helpers.contract import validate
from tests.helpers.realcg import find


@pytest.mark.skipif(not os.path.isdir("/sys/fs/cgroup/cpu") and not os.path.isfile("/sys/fs/cgroup/cgroup.controllers"),
                    reason="no live cgroup filesystem")
def test_follow_false_watches_nothing_and_once_and_pid_ask_for_it(monkeypatch):
    from cgstat import cli
    from cgstat.app import once as once_mod
    from cgstat.app import pid as pid_mod
    from cgstat.app import stream as stream_mod
    from cgstat.pipeline import sampler as sampler_mod
    from cgstat.diagnostics import Warner

    followed = cgstat.Sampler(match="^/$", warner=Warner(io.StringIO()))
    one_shot = cgstat.Sampler(match="^/$", warner=Warner(io.StringIO()), follow=False)
    try:
        followed.tick()
        one_shot.tick()
        assert followed.discoverer.following != []
        assert one_shot.discoverer.following == []
    finally:
        followed.close()
        one_shot.close()

    asked = []
    real = sampler_mod.Sampler

    def spy(*args, **kwargs):
        asked.append(kwargs.get("follow", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(sampler_mod, "Sampler", spy)
    monkeypatch.setattr(once_mod, "run_once", lambda *a, **k: 0)
    monkeypatch.setattr(pid_mod, "run_pid", lambda *a, **k: 0)
    monkeypatch.setattr(stream_mod, "run_stream", lambda *a, **k: 0)
    for argv in (["once", "--window", "0"], ["pid", "1"], ["stream", "--count", "1"]):
        with pytest.raises(SystemExit):
            cli.main(["--match", "^/$"] + argv)
    assert asked == [False, False, True]


@pytest.mark.realcg
def test_sampler_reads_a_quota_burner_at_half_a_core(make_group, workload_bin):
    # The reference is the kernel's own counter, read by the test around each tick: on a
    # busy machine the burner gets less than its quota, so 50 % itself can't be asserted.
    g = make_group()
    g.set_cpu_quota(50000, 100000)
    g.start([workload_bin, "spin"]).wait_line("ready")
    usage_ns = lambda: int(g.read("cpuacct" if "cpuacct" in g.dirs else "cpu", "cpuacct.usage"))
    time.sleep(0.5)  # let it run into its quota a few times
    sampler = cgstat.Sampler(match=g.name)
    t0, u0 = time.monotonic(), usage_ns()
    first = sampler.tick()
    t1, u1 = time.monotonic(), usage_ns()
    assert all(r["interval_s"] is None for r in first)
    time.sleep(2)  # the window of the rate (quota edges move a 1 s window by 5 points)
    t2, u2 = time.monotonic(), usage_ns()
    rec = find(sampler.tick(), g.cgroup)
    t3, u3 = time.monotonic(), usage_ns()
    validate(rec)
    assert rec["cpu"]["limit_cores"] == 0.5
    assert u2 / 1e9 <= rec["cpu"]["usage_seconds_total"] <= u3 / 1e9
    # cgstat read the counter somewhere in [t0, t1] and in [t2, t3]
    low = 100 * (u2 - u1) / 1e9 / (t3 - t0)
    high = 100 * (u3 - u0) / 1e9 / (t2 - t1)
    assert low <= rec["cpu"]["percent"] <= high
    assert 0 < rec["cpu"]["percent"] <= 55  # 50 % quota, one 100 ms period of slack over 2 s

