"""The processes of a workload from a synthetic /proc under a host root: PID reuse between
ticks, CPU from stat deltas, hostile command lines, smaps without a rollup, the time budget,
hidepid=, and a 10,000-process cgroup (bounded time and memory)."""

import os
import shutil
import tempfile
import tracemalloc

import pytest

from cgstat.kernel import processes as kp
from cgstat.kernel.hostfs import HostFS
from cgstat.pipeline.processes import Options, ProcessWatcher, listing_object, ranked, tree
from tests.helpers import synth

ROLLUP = ("00400000-7fff00000000 ---p 00000000 00:00 0    [rollup]\nRss:  {rss} kB\nPss:  {pss} kB\n"
          "Pss_Anon: {pss} kB\nShared_Clean: 0 kB\nPrivate_Clean:  {pc} kB\nPrivate_Dirty:  {pd} kB\n"
          "Referenced: 0 kB\nSwap:  {swap} kB\nSwapPss: 0 kB\n")


def stat_line(pid, name, ppid, cpu_ticks, start, threads=1, rss_pages=100, state="S"):
    rest = [state, ppid, pid, pid, 0, -1, 4194560, 0, 0, 0, 0, cpu_ticks, 0, 0, 0, 20, 0, threads, 0, start,
            1000000, rss_pages] + [0] * 30
    return "%d (%s) %s\n" % (pid, name, " ".join(str(x) for x in rest))


def proc(root, pid, name="python", ppid=1, cpu=0, start=1000, cmdline=b"python\0train.py\0", rss=4000, pss=1000,
         pc=500, pd=300, swap=0, fds=3, nspid=None, rollup=True, state="S"):
    base = os.path.join(root, "proc", str(pid))
    os.makedirs(os.path.join(base, "fd"), exist_ok=True)
    synth.write(os.path.join(base, "stat"), stat_line(pid, name, ppid, cpu, start, state=state))
    synth.write(os.path.join(base, "status"), "Name:\t%s\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t%d\t%d\n"
                % (name, pid, nspid or pid))
    synth.write(os.path.join(base, "cmdline"), cmdline)
    text = ROLLUP.format(rss=rss, pss=pss, pc=pc, pd=pd, swap=swap)
    synth.write(os.path.join(base, "smaps_rollup" if rollup else "smaps"), text if rollup else text * 2)
    for fd in range(fds):
        synth.write(os.path.join(base, "fd", str(fd)), "")


def cgroup(root, path, pids):
    folder = synth.v2_cgroup(str(root), path, {"cgroup.procs": "".join("%d\n" % p for p in pids)})
    return folder


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_tree_cpu_memory_and_totals(tmp_path):
    root = str(tmp_path)
    synth.v2_host(root)
    proc(root, 10, "trainer", ppid=1, cpu=100, nspid=1)
    proc(root, 11, "worker", ppid=10, cpu=50, nspid=7, rss=3000, pss=800, swap=12)
    proc(root, 12, "worker", ppid=10, cpu=50, nspid=8)
    proc(root, 20, "sidecar", ppid=1, cpu=0)
    folder = cgroup(root, "/job", [10, 11, 12, 20])
    clock = Clock()
    w = ProcessWatcher(HostFS(root), clock=clock)
    w.begin_tick()
    first = w.read(folder)
    w.end_tick()
    assert [p["cpu_percent"] for p in first.processes] == [None] * 4  # no delta yet
    proc(root, 10, "trainer", ppid=1, cpu=300, nspid=1)  # 200 ticks = 2 s in 2 s: 100 %
    clock.now += 2.0
    w.begin_tick()
    listing = w.read(folder)
    w.end_tick()
    rows = {p["pid"]: p for p in listing.processes}
    assert [p["pid"] for p in listing.processes] == [10, 11, 12, 20]  # tree order
    assert [p["depth"] for p in listing.processes] == [0, 1, 1, 0]
    assert rows[10]["cpu_percent"] == 100.0 and rows[11]["cpu_percent"] == 0.0
    assert rows[10]["cpu_seconds_total"] == 3.0
    assert (rows[11]["ns_pid"], rows[11]["uid"], rows[11]["fds"]) == (7, 1000, 3)
    assert (rows[11]["rss_bytes"], rows[11]["pss_bytes"], rows[11]["uss_bytes"], rows[11]["swap_bytes"]) == (
        3000 * 1024, 800 * 1024, 800 * 1024, 12 * 1024)
    assert rows[10]["cmdline"] == "python train.py"
    trainer, sidecar = listing.groups
    assert (trainer["pid"], trainer["processes"], trainer["pss_bytes"]) == (10, 3, (1000 + 800 + 1000) * 1024)
    assert trainer["cpu_percent"] == 100.0 and sidecar["processes"] == 1
    top = listing_object(listing, 1, "cpu")
    assert [p["pid"] for p in top["processes"]] == [10] and [g["pid"] for g in top["groups"]] == [10]
    assert top["count"] == 4


def test_a_reused_pid_is_a_new_process(tmp_path):
    root = str(tmp_path)
    synth.v2_host(root)
    proc(root, 30, "old", cpu=5000, start=1000, cmdline=b"old\0")
    folder = cgroup(root, "/job", [30])
    clock = Clock()
    w = ProcessWatcher(HostFS(root), clock=clock)
    w.begin_tick()
    w.read(folder)
    w.end_tick()
    # the PID exited and was given to another process: fewer CPU ticks, another start time
    proc(root, 30, "new", cpu=10, start=2000, cmdline=b"new\0--flag\0", pss=42)
    clock.now += 1.0
    w.begin_tick()
    (row,) = w.read(folder).processes
    w.end_tick()
    assert row["cpu_percent"] is None  # never a delta against the old process's ticks
    assert (row["name"], row["cmdline"], row["pss_bytes"]) == ("new", "new --flag", 42 * 1024)
    # a reused PID with MORE ticks than the old one: still no delta (the start time says so)
    proc(root, 30, "newer", cpu=90000, start=3000)
    clock.now += 1.0
    w.begin_tick()
    (row,) = w.read(folder).processes
    assert row["cpu_percent"] is None


def test_hostile_command_lines_and_names(tmp_path):
    root = str(tmp_path)
    synth.v2_host(root)
    proc(root, 40, "a) R 1 (b", cmdline=b"evil\0\x1b[2J\nFAKE ROW\0\xff\xfe\0")
    proc(root, 41, "long", cmdline=b"x" * 10000)
    proc(root, 42, "kthread", cmdline=b"", rollup=True, pss=0, rss=0, pc=0, pd=0)
    folder = cgroup(root, "/job", [40, 41, 42])
    w = ProcessWatcher(HostFS(root))
    w.begin_tick()
    rows = {p["pid"]: p for p in w.read(folder).processes}
    assert rows[40]["name"] == "a) R 1 (b" and rows[40]["ppid"] == 1  # comm with ") " parsed from the last ')'
    assert rows[40]["cmdline"] == "evil \\x1b[2J\\x0aFAKE ROW \\xff\\xfe"
    assert "\n" not in rows[40]["cmdline"] and "\x1b" not in rows[40]["cmdline"]
    assert rows[41]["cmdline"].endswith("...") and len(rows[41]["cmdline"]) == kp.CMDLINE_BYTES + 3
    assert rows[42]["cmdline"] == ""
    from cgstat.outputs import process_table as view

    item = {"cgroup": "/job", "name": "job\x1b]0;x", "processes": listing_object(w.read(folder))}
    text = view.format_table([item])
    assert "\x1b" not in text and "FAKE ROW" in text and "\nFAKE ROW" not in text
    csv = view.csv_rows([item])
    assert "\x1b" not in csv and csv.count("\r\n") == 3


def test_smaps_summed_where_there_is_no_rollup(tmp_path):
    root = str(tmp_path)
    synth.v2_host(root)
    proc(root, 50, rollup=False, rss=10, pss=4, pc=1, pd=2, swap=3)
    memory = kp.read_memory(HostFS(root), 50)
    assert memory == kp.Memory(20 * 1024, 8 * 1024, 6 * 1024, 6 * 1024, "smaps")  # two mappings summed


def test_the_budget_defers_smaps_and_the_interval_spaces_them(tmp_path):
    root = str(tmp_path)
    synth.v2_host(root)
    pids = list(range(100, 110))
    for pid in pids:
        proc(root, pid)
    folder = cgroup(root, "/job", pids)
    clock = Clock()
    w = ProcessWatcher(HostFS(root), Options(memory_every_s=10.0, budget_s=1e-9), clock=clock)
    w.begin_tick()
    rows = w.read(folder).processes
    # a budget shorter than one read: the first is made (it is checked before each), the rest wait
    read = [p for p in rows if p["pss_bytes"] is not None]
    assert len(read) == 1
    deferred = [p for p in rows if p["pss_bytes"] is None]
    assert all(e["error"] == "deferred" for p in deferred for e in p["errors"])
    assert all(p["rss_bytes"] == 100 * kp.PAGE_BYTES for p in deferred)  # RSS from stat meanwhile
    w.end_tick()
    w = ProcessWatcher(HostFS(root), Options(memory_every_s=10.0, budget_s=60.0), clock=clock)
    w.begin_tick()
    w.read(folder)
    w.end_tick()
    proc(root, 100, pss=9999)
    clock.now += 5.0
    w.begin_tick()
    row = w.read(folder).processes[0]
    w.end_tick()
    assert row["pss_bytes"] == 1000 * 1024 and row["memory_age_s"] == 5.0  # not due: its figures kept
    clock.now += 5.0
    w.begin_tick()
    row = w.read(folder).processes[0]
    assert row["pss_bytes"] == 9999 * 1024 and row["memory_age_s"] == 0.0


def test_hidepid_and_unreadable_processes_say_why(tmp_path, monkeypatch):
    root = str(tmp_path)
    synth.v2_host(root)
    synth.write(os.path.join(root, "proc/self/mountinfo"),
                "30 20 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
                "22 27 0:21 / /proc rw,relatime - proc proc rw,hidepid=invisible\n")
    proc(root, 60)
    folder = cgroup(root, "/job", [60, 61])  # 61: hidden from us (no folder)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    from cgstat.kernel.hostfs import Denied
    from cgstat.pipeline import processes as model

    def denied(fs, pid):
        raise Denied("/proc/%d/smaps_rollup" % pid, "Permission denied")

    monkeypatch.setattr(model, "read_memory", denied)
    w = ProcessWatcher(HostFS(root))
    w.begin_tick()
    rows = {p["pid"]: p for p in w.read(folder).processes}
    assert rows[60]["pss_bytes"] is None and rows[60]["rss_bytes"] == 100 * kp.PAGE_BYTES
    (err,) = rows[60]["errors"]
    assert err["error"] == "permission_denied" and "hidepid=invisible" in err["detail"]
    assert rows[61]["name"] is None and rows[61]["errors"][0]["error"] == "permission_denied"


@pytest.fixture
def fast_tmp(tmp_path):
    """A folder on tmpfs where there is one: 10,000 process folders are made and removed in
    a second there, in minutes on a busy disk."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    path = tempfile.mkdtemp(prefix="cgstat-test-procs-", dir=base)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_ten_thousand_processes_in_one_cgroup(fast_tmp):
    root = fast_tmp
    synth.v2_host(root)
    n = 10000
    # one trainer and 9,999 processes below it; a chain of 2,000 forks (no recursion limit)
    pids = list(range(1000, 1000 + n))
    proc(root, 999, "template", fds=0)  # the files every process shares (hard links: one write)
    template = os.path.join(root, "proc", "999")
    for i, pid in enumerate(pids):
        base = os.path.join(root, "proc", str(pid))
        os.mkdir(base)
        os.mkdir(os.path.join(base, "fd"))
        for name in ("status", "cmdline", "smaps_rollup"):
            os.link(os.path.join(template, name), os.path.join(base, name))
        parent = 1 if i == 0 else (pid - 1 if i < 2000 else 1000)
        with open(os.path.join(base, "stat"), "w") as f:
            f.write(stat_line(pid, "w%d" % i, parent, 0, 1000))
    folder = cgroup(root, "/big", pids)
    w = ProcessWatcher(HostFS(root), Options(budget_s=60.0))
    tracemalloc.start()
    try:
        w.begin_tick()
        listing = w.read(folder)
        w.end_tick()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert listing.listed == n and listing.complete
    assert len(listing.groups) == 1 and listing.groups[0]["processes"] == n
    assert listing.groups[0]["pss_bytes"] == n * 1000 * 1024
    assert max(p["depth"] for p in listing.processes) == 1999
    assert peak < 64 * 1024 * 1024, peak  # ~2 KiB a process, rows and what is kept
    # the bound: more than max_processes are cut, and that is said
    w = ProcessWatcher(HostFS(root), Options(max_processes=500))
    w.begin_tick()
    cut = w.read(folder)
    assert cut.listed == 500 and not cut.complete
    top = listing_object(listing, 5, "pss")
    assert len(top["processes"]) == 5 and top["count"] == n
    # and end to end: `cgstat procs` finds the workload by its path and prints every process
    from cgstat.app.procs import collect
    from cgstat.pipeline.sampler import Sampler

    (item,) = collect(Sampler(root, all=True), "/big", 0)
    assert item["processes"]["count"] == n and item["processes"]["groups"][0]["processes"] == n


def test_ranked_uses_rss_until_pss_is_known():
    rows = [{"pid": 1, "pss_bytes": None, "rss_bytes": 50, "cpu_percent": None},
            {"pid": 2, "pss_bytes": 40, "rss_bytes": 90, "cpu_percent": 3.0},
            {"pid": 3, "pss_bytes": 60, "rss_bytes": 60, "cpu_percent": 1.0}]
    assert [r["pid"] for r in ranked(rows, "pss", 2)] == [3, 1]
    assert [r["pid"] for r in ranked(rows, "cpu", 1)] == [2]


def test_a_pid_that_is_its_own_parent_is_a_root():
    rows = [{"pid": 1, "ppid": 1, "name": "init", **{k: 0 for k in ("cpu_percent", "rss_bytes", "pss_bytes",
                                                                    "uss_bytes", "swap_bytes", "gpu_memory_bytes")}}]
    ordered, groups = tree(rows)
    assert ordered[0]["depth"] == 0 and groups[0]["processes"] == 1


def _record_with_processes(n):
    processes = [{"pid": 100 + i, "ns_pid": i + 1, "ppid": 1, "name": "worker\n%d" % i, "cmdline": "python w.py",
                  "state": "S", "uid": 0, "threads": 1, "cpu_percent": 1.0, "cpu_seconds_total": 2.5,
                  "rss_bytes": 300, "pss_bytes": 200 - i, "uss_bytes": 100, "swap_bytes": 0, "memory_age_s": 0.0,
                  "fds": 3, "gpu_memory_bytes": None, "gpu_sm_percent": None, "depth": 1, "group": 99, "errors": []}
                 for i in range(n)]
    return {"schema": 1, "type": "cgroup", "ts": "2026-11-29T20:10:12.807Z", "cgroup": "/job", "host": "node1",
            "cpu": {"usage_seconds_total": 5.0, "percent": 5.0}, "memory": {"working_set_bytes": 10},
            "pids": {"current": 3}, "errors": [],
            "processes": {"count": n, "complete": True, "by": "pss", "processes": processes, "groups": [],
                          "error": None}}


def test_process_series_only_when_the_procs_group_is_asked_for():
    from prometheus_client.parser import text_string_to_metric_families

    from cgstat.outputs.prometheus import exposition as prom
    from cgstat.outputs.prometheus.budget import SeriesBudget, groups_off

    records = [_record_with_processes(3)]
    default = prom.render(records, fold=SeriesBudget(0, groups_off(None, None)).tick()).decode()
    assert "cgstat_process_" not in default and "container_cpu_usage_seconds_total" in default
    assert groups_off(["+procs"], None) == frozenset()  # the default groups and procs
    assert groups_off(["+procs"], ["dcgm"]) == {"dcgm"} and "procs" in groups_off(["cpu"], None)
    asked = prom.render(records, fold=SeriesBudget(0, groups_off(["cpu", "procs"], None)).tick()).decode()
    samples = [s for f in text_string_to_metric_families(asked) for s in f.samples]
    pss = {s.labels["pid"]: (s.labels["process"], s.value) for s in samples if s.name == "cgstat_process_pss_bytes"}
    assert pss == {"100": ("worker\n0", 200), "101": ("worker\n1", 199), "102": ("worker\n2", 198)}
    cpu = [s for s in samples if s.name == "cgstat_process_cpu_seconds_total"]
    assert len(cpu) == 3 and all(s.labels["id"] == "/job" for s in cpu)


def test_otlp_process_metrics_only_when_the_procs_group_is_asked_for():
    import json

    from cgstat.outputs.otlp.budget import OtlpBudget
    from cgstat.outputs.otlp.encode import Encoder
    from cgstat.outputs.prometheus.budget import groups_off

    def names(off):
        body = json.loads(Encoder("json", budget=OtlpBudget(0, off)).encode([_record_with_processes(2)]))
        metrics = [m for rm in body["resourceMetrics"] for sm in rm["scopeMetrics"] for m in sm["metrics"]]
        return {m["name"]: m for m in metrics}

    assert not [n for n in names(groups_off(None, None)) if n.startswith(("process.", "cgstat.process."))]
    got = names(groups_off(["cpu", "procs"], None))
    points = got["cgstat.process.memory.pss"]["gauge"]["dataPoints"]
    assert sorted((p["attributes"][0]["value"]["intValue"], p["asInt"]) for p in points) == [("100", "200"),
                                                                                             ("101", "199")]
    assert "process.cpu.time" in got and "process.memory.usage" in got


def test_a_process_in_nested_workloads_is_read_once_a_tick(tmp_path, monkeypatch):
    from cgstat.pipeline import processes as model

    root = str(tmp_path)
    synth.v2_host(root)
    proc(root, 70, "app")
    proc(root, 71, "helper", ppid=70)
    pod = cgroup(root, "/pod", [])
    cgroup(root, "/pod/app", [70, 71])  # --all: the pod's record and its container's list both
    reads = []
    real = model.read_stat
    monkeypatch.setattr(model, "read_stat", lambda fs, pid: reads.append(pid) or real(fs, pid))
    w = ProcessWatcher(HostFS(root))
    w.begin_tick()
    outer = w.read(pod)
    inner = w.read(os.path.join(pod, "app"))
    w.end_tick()
    assert sorted(reads) == [70, 71]
    assert [p["pid"] for p in outer.processes] == [p["pid"] for p in inner.processes] == [70, 71]
    assert outer.groups[0]["pss_bytes"] == inner.groups[0]["pss_bytes"] == 2000 * 1024
