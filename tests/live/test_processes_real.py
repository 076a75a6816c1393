"""`cgstat procs` on real processes in a real test cgroup: the DataLoader pattern (a parent
holding a few hundred MB of Python objects, 4 forked workers walking them: copy-on-access
through reference counts, pytorch/pytorch#13246), PSS and USS against Debian's smem, GPU
memory per process from the NVML double, a process that exits mid-read."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import nvmldouble as D
from tests.helpers import realcg as R
from tests.helpers.contract import ROOT
from tests.live.test_not_root import open_tmp  # noqa: F401 (a fixture: a copy of cgstat other users may read)

MIB = 1 << 20
GIB = 1 << 30
REALCG_V2 = True  # the same files on cgroup v2 (memory.stat anon + file_mapped)

# ~210 MB of floats (24 bytes each, plus the list's 8-byte pointer); each worker walks them
# with sum(), which takes a reference to each float: its page is written, and copied.
DATALOADER = r"""
import os, sys, time
data = [float(i) for i in range(6_500_000)]
workers = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        sum(data)
        sys.stdout.write("walked\n"); sys.stdout.flush()
        time.sleep(600)
        os._exit(0)
    workers.append(pid)
print("ready", flush=True)
time.sleep(600)
"""


def _procs(*args, env=None):
    proc = subprocess.run([sys.executable, "-m", "cgstat", "procs", *args], capture_output=True, cwd=ROOT,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode(), proc.stderr.decode()


def _anon_and_mapped(group):
    stat = R.flat_keyed(group.read("memory", "memory.stat"))
    if group.hier.v2:
        return stat["anon"] + stat["file_mapped"]
    return stat["total_rss"] + stat["total_mapped_file"]


@pytest.fixture(scope="module")
def dataloader(_realcg_hier):
    group = R.TestGroup(_realcg_hier)
    try:
        parent = group.start([sys.executable, "-c", DATALOADER])
        parent.wait_line("ready", timeout=120)
        deadline = time.monotonic() + 120
        while len(group.members("memory")) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        # every worker has walked the list (each prints once; the pipe is shared)
        walked = b""
        while walked.count(b"walked") < 4 and time.monotonic() < deadline:
            walked += os.read(parent.popen.stdout.fileno(), 4096)
        assert walked.count(b"walked") == 4
        yield group, parent.pid
    finally:
        group.destroy()


def test_dataloader_workers_rss_is_the_parents_and_pss_sums_to_the_cgroup(dataloader):
    group, parent_pid = dataloader
    out, _ = _procs("--all", group.cgroup, "--format", "jsonl", "--window", "0.2")
    charged = _anon_and_mapped(group)
    (item,) = [json.loads(line) for line in out.splitlines()]
    listing = item["processes"]
    rows = {p["pid"]: p for p in listing["processes"]}
    assert listing["count"] == 5 and listing["complete"] and len(rows) == 5
    parent = rows[parent_pid]
    workers = [p for p in rows.values() if p["pid"] != parent_pid]
    assert parent["depth"] == 0 and all(w["ppid"] == parent_pid and w["depth"] == 1 for w in workers)
    assert parent["rss_bytes"] > 200 * MIB
    for w in workers:  # each worker's RSS approaches the parent's: ps would show 5 x 230 MB
        assert w["rss_bytes"] > 0.8 * parent["rss_bytes"], (w, parent)
        assert w["uss_bytes"] > 150 * MIB  # it copied what it walked: its own pages now
    pss_sum = sum(p["pss_bytes"] for p in rows.values())
    print("PSS sum %d, RSS sum %d, cgroup anon + file-mapped %d"
          % (pss_sum, sum(p["rss_bytes"] for p in rows.values()), charged))
    assert abs(pss_sum - charged) <= 0.10 * charged, (pss_sum, charged)
    rss_sum = sum(p["rss_bytes"] for p in rows.values())
    assert rss_sum > pss_sum  # RSS counts the shared pages once per process
    (tree,) = listing["groups"]
    assert (tree["pid"], tree["processes"], tree["pss_bytes"]) == (parent_pid, 5, pss_sum)
    # the table: the tree, indented, and the group total
    table, _ = _procs("--all", group.cgroup, "--window", "0")
    assert "%d processes" % 5 in table
    assert table.count("└─ ") == 4
    assert "total of %d python" % parent_pid in table and "(5 processes)" in table


@pytest.mark.skipif(not shutil.which("smem"), reason="Debian's smem is not installed")
def test_pss_and_uss_equal_smems(dataloader):
    group, parent_pid = dataloader
    # read both close together: the workers are quiescent (asleep after their walk)
    out, _ = _procs("--all", group.cgroup, "--format", "jsonl", "--window", "0")
    smem = subprocess.run(["smem", "-H", "-c", "pid uss pss rss"], capture_output=True, timeout=300, check=True)
    ours = {p["pid"]: p for p in json.loads(out)["processes"]["processes"]}
    theirs = {}
    for line in smem.stdout.decode().splitlines():
        pid, uss, pss, rss = (int(x) for x in line.split())
        theirs[pid] = (uss * 1024, pss * 1024, rss * 1024)
    assert set(ours) <= set(theirs)
    for pid, p in ours.items():
        uss, pss, _ = theirs[pid]
        print("pid %d: PSS %d vs smem %d, USS %d vs smem %d" % (pid, p["pss_bytes"], pss, p["uss_bytes"], uss))
        assert abs(p["pss_bytes"] - pss) <= 0.02 * pss
        assert abs(p["uss_bytes"] - uss) <= 0.02 * uss


def test_gpu_memory_lands_on_the_right_process(tmp_path, make_group):
    g = make_group()
    parent = g.start(["sh", "-c", "sleep 1000 & echo started; wait"])
    parent.wait_line("started")
    deadline = time.monotonic() + 10
    while len(g.members()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    (child,) = [pid for pid in g.members() if pid != parent.pid]
    sc = (D.Scenario().gpu(0, uuid="GPU-00000000-0000-0000-0000-000000000000", mem_total=80 * GIB, util_gpu=50)
          .proc(0, child, 3 * GIB).sample(0, child, sm=42, mem=10))
    path = D.write_scenario(tmp_path / "s.txt", sc)
    out, err = _procs("--all", g.cgroup, "--format", "jsonl", "--window", "0.3", env=D.env(path, "full"))
    assert "GPU metrics off" not in err
    rows = {p["pid"]: p for p in json.loads(out)["processes"]["processes"]}
    assert (rows[child]["gpu_memory_bytes"], rows[child]["gpu_sm_percent"]) == (3 * GIB, 42)
    assert (rows[parent.pid]["gpu_memory_bytes"], rows[parent.pid]["gpu_sm_percent"]) == (0, 0)
    (tree,) = json.loads(out)["processes"]["groups"]
    assert tree["gpu_memory_bytes"] == 3 * GIB


def test_a_process_that_exits_mid_read_is_dropped(make_group, monkeypatch):
    from cgstat.kernel import processes as kp
    from cgstat.kernel.hostfs import HostFS
    from cgstat.pipeline import processes as model

    g = make_group()
    stays = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    goes = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    real_status = kp.read_status

    def status_then_exit(fs, pid):  # its stat was read; it exits before its status is
        if pid == goes.pid:
            goes.kill()
        return real_status(fs, pid)

    monkeypatch.setattr(model, "read_status", status_then_exit)
    watcher = model.ProcessWatcher(HostFS("/"))
    watcher.begin_tick()
    listing = watcher.read(g.path("cpu"))
    watcher.end_tick()
    assert [p["pid"] for p in listing.processes] == [stays.pid]
    assert listing.listed == 1 and listing.processes[0]["pss_bytes"] > 0


def test_stream_carries_the_largest_processes(dataloader):
    from tests.helpers.contract import validate

    group, parent_pid = dataloader
    # five ticks: smaps_rollup is read within a budget a tick (pipeline/processes.py), and on a
    # loaded machine the five processes' 200 MB walks take more than one tick's
    proc = subprocess.run([sys.executable, "-m", "cgstat", "stream", "--all", "--match", group.name, "--count", "5",
                           "--interval", "0.3", "--no-events", "--processes", "2", "--processes-by", "pss"],
                          capture_output=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    mine = [r for r in records if r["type"] == "cgroup" and r["cgroup"] == group.cgroup]
    assert len(mine) == 5
    for r in records:
        validate(r)
    last = mine[-1]["processes"]
    assert (last["count"], last["complete"], last["by"]) == (5, True, "pss")
    assert len(last["processes"]) == 2
    assert last["processes"][0]["pss_bytes"] >= last["processes"][1]["pss_bytes"] > 200 * MIB
    assert last["processes"][0]["cpu_percent"] is not None  # the second tick: a delta
    (tree,) = last["groups"]  # both are in the parent's tree, given in full
    assert (tree["pid"], tree["processes"]) == (parent_pid, 5)
    assert list(mine[-1])[-1] == "processes"


@pytest.mark.realcg
def test_top_opens_a_workloads_processes_and_goes_back(make_group, tmp_path):
    from tests.unit.test_top import REPO, Tmux, _top_code

    g = make_group()
    parent = g.start(["sh", "-c", "sleep 1000 & sleep 1000 & echo started; wait"])
    parent.wait_line("started")
    code = _top_code("all=True, match=%r" % (g.name + "$"), 1.0)
    tm = Tmux(tmp_path)
    try:
        tm.start(["env", "PYTHONPATH=" + REPO, sys.executable, "-c", code])
        tm.wait(lambda s: "sort: cpu" in s and g.cgroup in s and "Enter" in s, "the workload on screen")
        tm.keys("Enter")

        def processes(screen):
            return ("processes of " + g.cgroup in screen and "PSS" in screen and screen.count("└─ sleep 1000") == 2
                    and "total of %d sh (3 processes)" % parent.pid in screen and "Esc" in screen)

        tm.wait(processes, "the processes screen: the shell, its two sleeps, the tree's total")
        screen = tm.screen()
        assert screen.count("└─ sleep 1000") == 2  # below their parent, indented
        tm.keys("Escape")
        tm.wait(lambda s: "sort: cpu" in s and "processes of" not in s and "Enter" in s, "back to the workloads")
        tm.keys("q")
        assert tm.rc() == 0
    finally:
        tm.close()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to another user")
def test_another_users_processes_say_why_their_memory_is_null(make_group, open_tmp):
    """As user 65534: a root process's stat is readable, its smaps_rollup and fd folder are not
    (PTRACE_MODE_READ): RSS from stat, PSS/USS/fds null with permission_denied, no traceback."""
    from tests.live.test_not_root import DROP, _as_nobody

    g = make_group()
    sleeper = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    env, python = _as_nobody(open_tmp)
    proc = subprocess.run(DROP + [python, "-m", "cgstat", "procs", "--all", g.cgroup, "--format", "jsonl",
                                  "--window", "0"], capture_output=True, cwd=str(open_tmp), timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    (row,) = json.loads(proc.stdout)["processes"]["processes"]
    assert row["pid"] == sleeper.pid and row["name"] == "sleep" and row["rss_bytes"] > 0
    assert row["pss_bytes"] is None and row["uss_bytes"] is None and row["fds"] is None
    errors = {e["source"]: e for e in row["errors"]}
    assert errors["smaps_rollup"]["error"] == errors["fd"]["error"] == "permission_denied"
    assert "another user's process" in errors["smaps_rollup"]["detail"]


def test_the_recorder_keeps_what_the_stream_carries(make_group, tmp_path):
    g = make_group()
    sleeper = g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)
    store = str(tmp_path / "store")

    def cgstat(*args):
        proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        return proc.stdout

    cgstat("record", "--store", store, "--all", "--match", g.name, "--processes", "3", "--count", "2",
           "--interval", "0.3", "--no-events")
    records = [json.loads(line) for line in cgstat("replay", "--store", store, "--at", "now", "--match",
                                                   g.name).splitlines()]
    (mine,) = [r for r in records if r.get("cgroup") == g.cgroup]
    (row,) = mine["processes"]["processes"]
    assert (row["pid"], row["name"], mine["processes"]["by"]) == (sleeper.pid, "sleep", "pss")
    assert row["pss_bytes"] > 0


def test_a_hostile_command_line_stays_one_escaped_line(make_group):
    g = make_group()
    # sh's $0 and $1: a terminal escape, a newline that would forge a row, bytes not UTF-8
    sh = g.start([b"sh", b"-c", b"sleep 1000; :", b"\x1b]0;owned\x07", b"x\nFAKE 1 R\xff\xfe"],
                 stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while len(g.members()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    out, _ = _procs("--all", g.cgroup, "--format", "jsonl", "--window", "0")
    rows = {p["pid"]: p for p in json.loads(out)["processes"]["processes"]}
    assert rows[sh.pid]["cmdline"] == "sh -c sleep 1000; : \\x1b]0;owned\\x07 x\\x0aFAKE 1 R\\xff\\xfe"
    table, _ = _procs("--all", g.cgroup, "--window", "0")
    assert "\x1b" not in table and "\nFAKE" not in table and "FAKE 1 R" in table
    csv, _ = _procs("--all", g.cgroup, "--format", "csv", "--window", "0")
    assert len(csv.strip("\r\n").split("\r\n")) == 3  # the header, sh and sleep: one line each


def test_a_containers_processes_by_its_id_with_the_pids_it_sees(make_container):
    """A runc container in its own PID namespace: found by an ID prefix, each process with its
    host PID and the PID the container sees (NSpid), the shell the top of the tree."""
    c = make_container(["/bin/busybox", "sh", "-c", "sleep 1000 & sleep 1000 & wait"])
    c.run()
    deadline = time.monotonic() + 20
    item = None
    while time.monotonic() < deadline:
        out, _ = _procs(c.id[:12], "--format", "jsonl", "--window", "0")
        item = json.loads(out)
        if item["processes"]["count"] == 3:
            break
        time.sleep(0.2)
    assert item is not None and item["container"]["id"] == c.id
    rows = item["processes"]["processes"]
    assert item["processes"]["count"] == 3
    shell = rows[0]
    assert (shell["pid"], shell["ns_pid"], shell["depth"]) == (c.pid, 1, 0)  # the container's init
    sleeps = rows[1:]
    assert all(r["name"] == "sleep" and r["ppid"] == c.pid and r["depth"] == 1 for r in sleeps)
    # their own namespace's numbers (runc's init took a few first), not the host's
    assert len({r["ns_pid"] for r in sleeps}) == 2 and all(1 < r["ns_pid"] < 100 for r in sleeps)
    assert all(r["ns_pid"] != r["pid"] for r in sleeps)
    (tree,) = item["processes"]["groups"]
    assert (tree["pid"], tree["processes"]) == (c.pid, 3)
