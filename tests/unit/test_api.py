"""The Python API: `cgstat.Sampler(...).tick()` returns the records `cgstat stream` writes."""

import io
import os
import subprocess
import sys
import time

import pytest

import cgstat
from tests.helpers.contract import ROOT, validate
from tests.helpers.realcg import find

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd")


def test_sampler_over_a_recorded_tree_matches_the_cli():
    from cgstat.pipeline.diagnostics import Warner

    sampler = cgstat.Sampler(host_root=os.path.join(V2, "t1"), match="docker-5113",
                             warner=Warner(io.StringIO()))
    (record,) = sampler.tick()
    validate(record)
    assert record["container"]["name"] == "tf-training" and record["interval_s"] is None
    sampler.close()


def test_bad_match_is_a_cgstat_error():
    with pytest.raises(cgstat.CgstatError, match="not a regular expression"):
        cgstat.Sampler(match="(")


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


def test_import_cgstat_stays_cheap():
    code = "import sys, cgstat; print(sorted(m for m in sys.modules if m.startswith(('cgstat.', 'typer', 'orjson'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_the_python_api_prints_nothing_unless_asked():
    # (the CLI's stderr lines came out of a program that only imported cgstat)
    tree = os.path.join(V2, "t1")
    code = ("import sys, cgstat\n"
            f"s = cgstat.Sampler(host_root={tree!r}, match='zzz')\n"
            "s.tick(); s.tick(); s.close()\n"
            "said = []\n"
            f"s = cgstat.Sampler(host_root={tree!r}, match='docker-5113', warner=cgstat.Warner(handler=said.append))\n"
            "s.tick(); s.close()\n"
            "print([d.key for d in said])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    assert "'selection'" in proc.stdout.decode()
