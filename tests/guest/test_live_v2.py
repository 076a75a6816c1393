"""cgstat on a live host under systemd (the guests: pure cgroup v2 on Debian 13 and 12, the
hybrid layout on Debian 12), and the host's real-cgroup tests run there through the harness."""
from __future__ import annotations

import json

import pytest

from tests.guest.conftest import record_inner


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def mounts(guest):
    """/proc/mounts' cgroup lines: {mount point: (fstype, options)}."""
    out = {}
    for line in guest.get("/proc/mounts").decode().splitlines():
        _, point, fstype, opts = line.split()[:4]
        if fstype in ("cgroup", "cgroup2"):
            out[point] = (fstype, set(opts.split(",")))
    return out


@pytest.mark.guest_ci
def test_guest_has_its_cgroup_layout_under_systemd(guest):
    m = mounts(guest)
    assert guest.get("/proc/1/comm").decode().strip() == "systemd"
    if guest.layout == "v2":
        assert m == {"/sys/fs/cgroup": ("cgroup2", m["/sys/fs/cgroup"][1])}, m  # no v1 at all
        ctrls = guest.get("/sys/fs/cgroup/cgroup.controllers").decode().split()
        assert {"cpu", "memory", "io", "pids"} <= set(ctrls)
    else:
        # systemd's hybrid layout: v1 controllers, cpu and cpuacct co-mounted, cgroup2 at
        # unified with no controllers (they are all bound to v1)
        assert m["/sys/fs/cgroup/unified"][0] == "cgroup2", m
        assert m["/sys/fs/cgroup/systemd"][0] == "cgroup" and "name=systemd" in m["/sys/fs/cgroup/systemd"][1]
        cpu = m["/sys/fs/cgroup/cpu,cpuacct"]
        assert cpu[0] == "cgroup" and {"cpu", "cpuacct"} <= cpu[1], m
        for c in ("memory", "pids", "blkio"):
            assert m["/sys/fs/cgroup/" + c][0] == "cgroup", m
        assert guest.get("/sys/fs/cgroup/unified/cgroup.controllers").decode().split() == []


def _kernel_usage_seconds(guest, unit):
    if guest.layout == "v2":
        text = guest.get("/sys/fs/cgroup/system.slice/%s/cpu.stat" % unit).decode()
        return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6
    return int(guest.get("/sys/fs/cgroup/cpu,cpuacct/system.slice/%s/cpuacct.usage" % unit)) / 1e9


@pytest.mark.guest_ci
def test_once_reports_systemd_services_with_the_kernels_figures(guest):
    r = guest.run(["cgstat", "once", "--window", "1"], timeout_s=180, check=True)
    recs = {x["cgroup"]: x for x in records(r.out) if x.get("type") == "cgroup"}
    journald = recs.get("/system.slice/systemd-journald.service")
    assert journald is not None, sorted(recs)
    # what the kernel says, read right after: cgstat's figures lie below it (counters only grow)
    usage_s = _kernel_usage_seconds(guest, "systemd-journald.service")
    assert 0 < journald["cpu"]["usage_seconds_total"] <= usage_s
    assert journald["memory"]["usage_bytes"] > 0
    assert journald["pids"]["current"] >= 1
    assert journald["container"] is None or isinstance(journald["container"], dict)
    # pressure (PSI): cgroup2 files, in the unified tree also on hybrid hosts, where the
    # kernel has PSI on (Debian 12's 6.1 and 13's 6.12 do); null only with its reason
    psi_on = guest.sh("test -e /proc/pressure/memory").rc == 0
    if psi_on:
        assert journald["pressure"] is not None and journald["pressure"].get("memory") is not None, journald
    else:
        assert journald["pressure"] is None and journald["errors"], journald


REAL_CGROUP_TESTS = ["tests/live/test_real_cgroups.py", "tests/live/test_events_runs.py",
                     "tests/live/test_slurm_real.py"]
# The CI set's share (`-k`), one per area the full set covers: the record's contract, CPU
# throttling, an OOM kill, block I/O, PIDs, a runc container named, the events of two runs,
# a Slurm job's cgroups named (in the layout slurmd makes on the guest's hierarchy)
CI_REAL_CGROUP = ("contract or quota or oom_kill or direct_io or pids_limit or "
                  "runc_container_found or fork_bomb or jobs_steps_and_tasks_named")


# In the CI set on Debian 13 (v2) and Debian 12's hybrid layout; Debian 12's v2 guest has its
# kernel's files checked there by the two tests above and runs these in the full set.
@pytest.mark.guest_ci("trixie", "bookworm-v1")
def test_real_cgroup_tests_pass_in_the_guest(guest):
    """The host's real-cgroup tests, in the guest under systemd, from a delegated transient
    service (the cgroup that systemd gives a service with Delegate=yes)."""
    args = REAL_CGROUP_TESTS + ["-m", "realcg"]
    if _ci():
        args += ["-k", CI_REAL_CGROUP]
    run = guest.pytest(args, timeout_s=900)
    record_inner(guest, "real-cgroup", run)
    print(run.summary())
    assert run.cases, "no junit report: %r" % (run.result,)
    assert run.count("failed") == 0, run.failures()
    assert run.count("passed") > 0, run.summary()


def _ci():
    from tests.guest import conftest

    return conftest.SET == "ci"
