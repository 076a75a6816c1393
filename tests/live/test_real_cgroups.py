"""Integration tests: the cgstat CLI against REAL cgroups of this host (v1, hybrid, pure v2).

Every test creates its own ``cgstat-test-<rand>`` group(s) below this process's own cgroup in
each hierarchy (memory is nested on the dev machines), starts known workloads directly inside,
runs ``python -m cgstat once ...`` as a subprocess and checks its JSON lines against the
record contract and against the kernel's own files. Groups are removed afterwards, also on
failure. Skipped (with the reason) when not root, without cgroup v1, or without runc.

Sleeping is used only to let a workload run; every timing-dependent value is checked with a
tolerance, and where the kernel file can be read before and after, the reported value must lie
between the two readings.
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.helpers import realcg as R

# fixtures (make_group, make_container, workload_bin, run_cgstat, ...) come from realcg.py
# through conftest.py

pytestmark = pytest.mark.realcg
REALCG_V2 = True  # every test reads the kernel's figures through realcg's layout-aware helpers

MIB = 1 << 20

TOP_KEYS = {"schema", "type", "ts", "host", "cgroup", "paths", "interval_s", "container", "cpu",
            "memory", "io", "pids", "pressure", "errors"}
CPU_KEYS = {"usage_seconds_total", "user_seconds_total", "system_seconds_total", "percent",
            "limit_cores", "periods_total", "throttled_periods_total", "throttled_seconds_total"}
MEM_KEYS = {"usage_bytes", "working_set_bytes", "limit_bytes", "percent", "anon_bytes",
            "file_bytes", "swap_bytes", "oom_kills_total"}
IO_KEYS = {"read_bytes_total", "write_bytes_total", "read_ops_total", "write_ops_total",
           "read_bytes_per_second", "write_bytes_per_second", "devices"}
DEV_KEYS = {"device", "name", "read_bytes_total", "write_bytes_total", "read_ops_total",
            "write_ops_total"}
PIDS_KEYS = {"current", "limit"}
PSI_KEYS = {"some_avg10", "full_avg10", "some_seconds_total", "full_seconds_total"}


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_contract(rec):
    """Shape of one cgroup record (values checked by the tests themselves)."""
    missing = TOP_KEYS - set(rec)
    assert not missing, "record lacks %s: %s" % (missing, rec)
    assert rec["schema"] == 1
    assert rec["type"] == "cgroup"
    assert rec["ts"] is not None
    assert isinstance(rec["host"], str) and rec["host"]
    assert isinstance(rec["cgroup"], str) and rec["cgroup"].startswith("/")
    assert isinstance(rec["paths"], dict) and rec["paths"]
    assert isinstance(rec["errors"], list)
    for sect, keys in (("cpu", CPU_KEYS), ("memory", MEM_KEYS), ("io", IO_KEYS),
                       ("pids", PIDS_KEYS)):
        assert isinstance(rec[sect], dict), "%s is %r" % (sect, rec[sect])
        assert keys <= set(rec[sect]), "%s lacks %s" % (sect, keys - set(rec[sect]))
        for k in keys - {"devices"}:
            v = rec[sect][k]
            assert v is None or num(v), "%s.%s = %r" % (sect, k, v)
    assert rec["io"]["devices"] is None or isinstance(rec["io"]["devices"], list)
    for d in rec["io"]["devices"] or []:
        assert DEV_KEYS <= set(d), d
        assert re.fullmatch(r"\d+:\d+", d["device"]), d
    if rec["pressure"] is not None:
        assert isinstance(rec["pressure"], dict)
        for res, v in rec["pressure"].items():
            assert res in ("cpu", "memory", "io"), res
            if v is not None:
                assert PSI_KEYS <= set(v), v


def once(run, name, window=1, extra=()):
    """cgstat once --all --match <name> --window N; returns all records, contract-checked."""
    recs = run("once", "--all", "--match", ".*%s.*" % name, "--window", str(window),
               *extra)
    for r in recs:
        if r.get("type") == "cgroup":
            check_contract(r)
    return recs


def approx(actual, expected, rel=0.0, abs_=0.0):
    assert actual is not None, "value is null, expected ~%r" % (expected,)
    tol = max(abs(expected) * rel, abs_)
    assert abs(actual - expected) <= tol, "%r not within %r of %r" % (actual, tol, expected)


# --------------------------------------------------------------------------- basics


def test_record_contract_and_joined_paths(make_group, workload_bin, run_cgstat):
    g = make_group()
    p = g.start([workload_bin, "sleep"])
    p.wait_line("ready")
    # the member's own view of where it is: the truth cgstat must join on
    own = R.proc_cgroups(p.pid, g.hier)
    assert own["memory"] == g.rel("memory")

    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    assert rec["cgroup"] == g.rel("cpu")
    assert rec["paths"].get(g.hier.name("cpu")) == g.rel("cpu")
    # memory is nested differently on this machine: read from where the process really is
    assert rec["paths"].get(g.hier.key("memory")) == g.rel("memory")
    if not g.hier.v2 and g.hier.own["memory"] != g.hier.own["cpu"]:
        assert rec["paths"]["memory"] != rec["paths"][g.hier.name("cpu")]
    for key in ("blkio", "pids"):
        if key in rec["paths"]:
            assert rec["paths"][key] == g.rel(key)
    # its process shares the host's network namespace: network null, and that reason only
    assert rec["network"] is None
    assert [(e["source"], e["error"]) for e in rec["errors"]] == [("network", "host_namespace")]
    assert 0.8 <= rec["interval_s"] <= 2.5
    assert rec["container"] is None
    # a sleeping process: ~0 CPU, real memory, one pid
    assert rec["cpu"]["percent"] is not None and 0 <= rec["cpu"]["percent"] < 5
    assert rec["memory"]["usage_bytes"] > 0
    assert rec["pids"]["current"] == 1
    # unified (cgroup2) hierarchy is present here: pressure must be read from it
    if "unified" in g.dirs:
        assert rec["pressure"] is not None
        for res in ("cpu", "memory", "io"):
            assert num(rec["pressure"][res]["some_seconds_total"]), rec["pressure"]


# --------------------------------------------------------------------------- cpu


def test_cpu_usage_of_known_burner(make_group, workload_bin, run_cgstat):
    g = make_group()
    p = g.start([workload_bin, "burn", "1.0"])
    p.wait_line("done", timeout=60)  # has used 1.0 s of CPU, now paused
    usage_file = g.cpu_usage_seconds()

    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    cpu = rec["cpu"]
    approx(cpu["usage_seconds_total"], 1.0, rel=0.10)
    approx(cpu["usage_seconds_total"], usage_file, abs_=0.02)  # stopped burner: no growth
    assert cpu["user_seconds_total"] is not None and cpu["user_seconds_total"] >= 0.8
    assert cpu["system_seconds_total"] is not None and cpu["system_seconds_total"] >= 0
    # user + system is the same total split by USER_HZ ticks or ns, allow tick rounding
    approx(cpu["user_seconds_total"] + cpu["system_seconds_total"], cpu["usage_seconds_total"],
           abs_=0.1)
    assert 0 <= cpu["percent"] < 5  # paused after burning
    assert cpu["limit_cores"] is None  # no quota set


def test_cpu_quota_percent_and_throttling(make_group, workload_bin, run_cgstat):
    g = make_group()
    g.set_cpu_quota(50000, 100000)
    p = g.start([workload_bin, "spin"])
    p.wait_line("ready")
    time.sleep(0.5)  # let it run into the quota a few times
    before = g.cpu_throttling()
    usage_before = g.cpu_usage_seconds()

    # window 2: quota edges can move a 1 s sample by up to one quota (50 ms = 5 points)
    rec = R.find(once(run_cgstat, g.name, window=2), g.cgroup)

    after = g.cpu_throttling()
    usage_after = g.cpu_usage_seconds()
    cpu = rec["cpu"]
    assert cpu["limit_cores"] == 0.5 and (cpu["quota_us"], cpu["period_us"]) == (50000, 100000)
    approx(cpu["percent"], 50.0, rel=0.10)
    assert cpu["throttled_periods_total"] > 0
    assert before["nr_throttled"] <= cpu["throttled_periods_total"] <= after["nr_throttled"]
    assert before["nr_periods"] <= cpu["periods_total"] <= after["nr_periods"]
    assert cpu["throttled_periods_total"] <= cpu["periods_total"]
    assert before["throttled_seconds"] - 1e-6 <= cpu["throttled_seconds_total"] \
        <= after["throttled_seconds"] + 1e-6
    assert usage_before - 1e-6 <= cpu["usage_seconds_total"] <= usage_after + 1e-6
    # throttled time shows up as CPU pressure in the cgroup2 hierarchy (seen on this kernel)
    if "unified" in g.dirs:
        assert rec["pressure"]["cpu"]["some_seconds_total"] > 0


# --------------------------------------------------------------------------- memory


def test_memory_working_set_of_held_anon(make_group, workload_bin, run_cgstat):
    g = make_group()
    p = g.start([workload_bin, "hold", "64"])
    p.wait_line("ready")
    usage_file = g.memory_usage_bytes()

    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    mem = rec["memory"]
    approx(mem["working_set_bytes"], 64 * MIB, rel=0.10)
    assert mem["anon_bytes"] >= 60 * MIB
    approx(mem["usage_bytes"], usage_file, rel=0.05)
    assert mem["working_set_bytes"] <= mem["usage_bytes"]
    assert mem["oom_kills_total"] == 0
    assert mem["swap_bytes"] in (None, 0)  # no swap on these machines
    assert mem["file_bytes"] is not None and mem["file_bytes"] < 8 * MIB


def test_memory_limit_read_back_as_kernel_rounds_it(make_group, workload_bin, run_cgstat):
    g = make_group()
    kernel = g.set_memory_limit(200000000)
    assert kernel == 200000000 // os.sysconf("SC_PAGESIZE") * os.sysconf("SC_PAGESIZE")
    p = g.start([workload_bin, "hold", "64"])
    p.wait_line("ready")

    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    mem = rec["memory"]
    assert mem["limit_bytes"] == kernel  # 199999488 here, not 200000000
    approx(mem["percent"], 100.0 * mem["working_set_bytes"] / kernel, abs_=1.0)
    approx(mem["percent"], 100.0 * 64 * MIB / kernel, rel=0.10)


def test_oom_kill_is_counted(make_group, workload_bin, run_cgstat):
    g = make_group()
    g.set_memory_limit(32 * MIB)
    anchor = g.start([workload_bin, "sleep"])  # keeps the group populated after the kill
    anchor.wait_line("ready")
    hog = g.start([workload_bin, "alloc", "128"])
    rc = hog.wait(timeout=60)
    assert rc == -9, "allocator was expected to be OOM-killed, rc=%r" % rc
    assert g.oom_kills() == 1

    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    assert rec["memory"]["oom_kills_total"] == 1
    assert rec["memory"]["limit_bytes"] == 32 * MIB
    assert rec["pids"]["current"] == 1


# --------------------------------------------------------------------------- pids


def test_pids_limit_and_exact_current(make_group, workload_bin, run_cgstat):
    g = make_group()
    g.set_pids_max(50)
    procs = [g.start([workload_bin, "sleep"]) for _ in range(6)]
    for p in procs:
        p.wait_line("ready")
    assert int(g.read("pids", "pids.current")) == 6

    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    assert rec["pids"]["limit"] == 50
    assert rec["pids"]["current"] == 6
    assert rec["pids"]["processes"] == len(g.members("pids")) == 6  # single-threaded: as many


# --------------------------------------------------------------------------- block IO


def test_direct_io_write_bytes(make_group, workload_bin, run_cgstat, tmp_path):
    g = make_group()
    dev = g.set_blkio_rule()  # harmless 100 GB/s rule: makes v1 throttle stats count
    name = R.disk_name(dev)
    anchor = g.start([workload_bin, "sleep"])
    anchor.wait_line("ready")
    target = tmp_path / "cgstat-direct.bin"
    if os.stat(str(tmp_path)).st_dev != os.stat("/").st_dev:
        pytest.skip("tmp_path is not on the root disk")
    dd = g.start(["dd", "if=/dev/zero", "of=%s" % target, "bs=1M", "count=16", "oflag=direct"],
                 stderr=subprocess.PIPE)
    assert dd.wait(timeout=120) == 0
    file_write = g.io_write_bytes(dev)
    approx(file_write, 16 * MIB, rel=0.05)

    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    io = rec["io"]
    approx(io["write_bytes_total"], 16 * MIB, rel=0.05)
    assert io["write_bytes_total"] == file_write  # nothing writes after dd has exited
    assert io["write_ops_total"] is not None and io["write_ops_total"] >= 16 * 0.95
    assert io["read_bytes_total"] is not None and io["read_bytes_total"] >= 0
    rows_out = [d for d in io["devices"] or [] if d["device"] == dev]
    assert len(rows_out) == 1, io["devices"]
    row = rows_out[0]
    assert row["name"] == name  # e.g. "vda"
    assert row["write_bytes_total"] == file_write
    # idle after dd: rates are ~0 (no throughput invented from totals)
    assert io["write_bytes_per_second"] in (None, 0) or io["write_bytes_per_second"] < 64 * 1024


# --------------------------------------------------------------------------- state file rates


def test_rates_from_state_file_equal_delta_over_interval(make_group, workload_bin, run_cgstat,
                                                         tmp_path):
    g = make_group()
    g.set_cpu_quota(50000, 100000)
    g.set_blkio_rule()
    spin = g.start([workload_bin, "spin"])
    spin.wait_line("ready")
    target = tmp_path / "cgstat-rate.bin"
    g.start(["sh", "-c", "while :; do dd if=/dev/zero of=%s bs=1M count=4 oflag=direct "
                         "2>/dev/null; done" % target], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    state = str(tmp_path / "state.json")
    pat = ".*%s.*" % g.name

    t_start = time.monotonic()
    r1 = R.find(run_cgstat("once", "--state", state, "--all", "--match", pat), g.cgroup)
    time.sleep(1.5)
    r2 = R.find(run_cgstat("once", "--state", state, "--all", "--match", pat), g.cgroup)
    t_end = time.monotonic()
    check_contract(r1)
    check_contract(r2)

    dt = r2["interval_s"]
    # run 2 started 1.5 s after run 1 ended; both ran inside [t_start, t_end]
    assert dt is not None and 1.5 - 0.05 <= dt <= (t_end - t_start) + 0.05
    du = r2["cpu"]["usage_seconds_total"] - r1["cpu"]["usage_seconds_total"]
    assert du > 0
    approx(r2["cpu"]["percent"], 100.0 * du / dt, rel=0.01, abs_=0.05)
    dw = r2["io"]["write_bytes_total"] - r1["io"]["write_bytes_total"]
    assert dw > 0
    approx(r2["io"]["write_bytes_per_second"], dw / dt, rel=0.01, abs_=1.0)
    dr = r2["io"]["read_bytes_total"] - r1["io"]["read_bytes_total"]
    approx(r2["io"]["read_bytes_per_second"], dr / dt, rel=0.01, abs_=1.0)
    # and the spinner under a 0.5 quota is still ~50 % over this longer interval
    approx(r2["cpu"]["percent"], 50.0, rel=0.10)


# --------------------------------------------------------------------------- runc


def test_runc_container_with_relative_cgroups_path(make_container, run_cgstat):
    c = make_container(
        ["/bin/busybox", "sh", "-c",
         "dd if=/dev/zero of=/dev/shm/fill bs=1M count=48 2>/dev/null; while :; do :; done"],
        memory_limit=256 * MIB, pids_limit=64, cpu_quota=50000, cpu_period=100000)
    c.run()
    # wait (poll, not a timing assertion) until the 48 MiB of shm is charged
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if c.stats()["data"]["memory"]["usage"]["usage"] >= 48 * MIB:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    # runc placed it relative to its own (= our) cgroup in every hierarchy
    own = R.proc_cgroups(c.pid, c.hier)
    assert own["cpu"] == c.rel("cpu")
    assert own["memory"] == c.rel("memory")

    # the kernel's own count of the container's CPU around cgstat's window: under a 0.5
    # core quota it runs at most half a core, less when the host's cores are busy elsewhere
    first = c.stats()["data"]
    before, t0 = first["cpu"]["usage"]["total"], time.monotonic()
    recs = once(run_cgstat, c.id, window=2)
    ref = c.stats()["data"]
    used = (ref["cpu"]["usage"]["total"] - before) / 1e9 / (time.monotonic() - t0) * 100
    rec = R.find(recs, c.rel("cpu"))
    assert rec["cgroup"].endswith("/docker/" + c.id)
    assert rec["paths"].get(c.hier.key("memory")) == c.rel("memory")
    assert rec["container"] is not None
    assert c.id in json.dumps(rec["container"])
    assert rec["errors"] == []

    mem = rec["memory"]
    approx(mem["usage_bytes"], ref["memory"]["usage"]["usage"], rel=0.10)
    assert mem["usage_bytes"] >= 48 * MIB
    assert mem["limit_bytes"] == 256 * MIB == ref["memory"]["usage"]["limit"]
    assert rec["pids"]["limit"] == 64 == ref["pids"]["limit"]
    assert rec["pids"]["current"] == ref["pids"]["current"]
    assert rec["cpu"]["limit_cores"] == 0.5
    assert rec["cpu"]["percent"] <= 50.0 * 1.05  # the quota holds
    approx(rec["cpu"]["percent"], used, rel=0.15)
    # throttled periods as the kernel counted them around the read (runc's events --stats
    # omits a zero count): a host busy elsewhere can keep the loop under its quota, so the
    # count may stay 0, but it never leaves the kernel's bracket
    throttled = rec["cpu"]["throttled_periods_total"]
    assert first["cpu"].get("throttling", {}).get("throttledPeriods", 0) <= throttled \
        <= ref["cpu"].get("throttling", {}).get("throttledPeriods", 0)


def test_runc_container_found_by_default_and_pid_maps_to_it(make_container, run_cgstat):
    """A Docker-pattern container shows up without --all, and `cgstat pid` maps its
    processes (and ours, and a dead PID) correctly."""
    c = make_container(["/bin/busybox", "sh", "-c", "sleep 1000 & sleep 1000 & wait"],
                       memory_limit=64 * MIB, pids_limit=16, cpu_quota=200000, cpu_period=100000)
    c.run()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and c.stats()["data"]["pids"]["current"] < 3:
        time.sleep(0.05)
    out = subprocess.run([sys.executable, "-m", "cgstat", "once", "--window", "0"],
                         capture_output=True, cwd=R.REPO, timeout=60)
    records = [json.loads(line) for line in out.stdout.splitlines()]
    mine = [r for r in records if r["container"] and r["container"]["id"] == c.id]
    assert len(mine) == 1, out.stderr
    assert mine[0]["container"]["runtime"] == "docker" and mine[0]["container"]["short_id"] == c.id[:12]
    assert mine[0]["pids"]["current"] == 3 and mine[0]["pids"]["limit"] == 16
    members = [int(p) for p in R.read(os.path.join(c.dir("pids"), "cgroup.procs")).split()]
    out = subprocess.run([sys.executable, "-m", "cgstat", "pid", *map(str, members), str(os.getpid()), "4194303"],
                         capture_output=True, cwd=R.REPO, timeout=60)
    assert out.returncode == 0
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    for a in answers[:-2]:
        assert a["container"]["id"] == c.id and a["paths"][c.hier.key("memory")] == c.rel("memory")
    assert answers[-2]["container"] is None
    assert answers[-1]["error"] == "no such process"


_FORK_PAUSERS = r"""
import os, signal, sys
n = int(sys.argv[1])
for _ in range(n):
    if os.fork() == 0:
        signal.pause()
        os._exit(0)
print("ready", flush=True)
signal.pause()
"""


def test_processes_of_a_cgroup_whose_procs_file_is_many_pages(make_group, run_cgstat):
    """cgroup.procs comes a page at a time (a seq_file of one record per PID): 1,000 PIDs
    are ~7 KB, and a cgroup's processes are all of them, not the first page's."""
    g = make_group()
    leader = g.start([sys.executable, "-c", _FORK_PAUSERS, "1000"])
    leader.wait_line("ready", timeout=120)
    members = g.members("pids")
    assert len(members) == 1001
    assert len("\n".join(map(str, members))) > 4096  # more than one page of PIDs
    rec = R.find(once(run_cgstat, g.name), g.cgroup)
    assert rec["pids"]["current"] == 1001
    assert rec["pids"]["processes"] == 1001
