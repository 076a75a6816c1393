"""cgstat beside a real dockerd (Debian's docker.io, cgroupfs driver) and its containerd.

One private daemon per session (tests/helpers/realdocker.py: its own data root, exec root, socket
and bridge, given on its command line, the vfs driver, no iptables). Two groups of
containers run at once, each with a CPU burner under a quota, a memory holder, a
direct-IO writer and a network pair (a sender and a receiver, bounded traffic):

- "default": `docker run --cgroup-parent <ours>-default/docker`, the shape of Docker's
  default layout (/docker/<id>), below our own cgroups as the machine's rules want;
- "cgroup-parent": the daemon's own `--cgroup-parent=<name>` (CI runners, Nomad, DinD):
  the containers are bare /<name>/<id> folders, found only because the daemon's state
  knows their IDs;
- "data-root": the same containers, with cgstat kept away from the Docker API
  (`--docker-host` at a socket that does not exist): names, images and labels can only
  come from config.v2.json under the data root given on dockerd's command line.

Each record is compared with `docker stats --no-stream --format '{{json .}}'` and
`docker inspect`. Figures that move (memory by a page, a late ARP packet) are compared
again, a few times, until the workload is quiet; CPU is compared over windows taken at
the same time. Other sessions' containers and cgroups may come and go meanwhile: only our
own are looked at. Skipped, with the reason, where dockerd can't start.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tests.helpers import realdocker
from tests.helpers.contract import ROOT, validate
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.realcg


@pytest.fixture(scope="module")
def daemon():
    # module-scoped: the only module that needs it, and later tests see a host without it
    try:
        d = realdocker.start()
    except realdocker.Unavailable as exc:
        pytest.skip(f"no private dockerd here: {exc}")
    yield d
    realdocker.stop(d)


def _root_disk_dev() -> str:
    st = os.stat(ROOT)
    maj, mnr = os.major(st.st_dev), os.minor(st.st_dev)
    sysdev = f"/sys/dev/block/{maj}:{mnr}"
    if os.path.exists(os.path.join(sysdev, "partition")):
        sysdev = os.path.dirname(os.path.realpath(sysdev))
    name = os.path.basename(os.path.realpath(sysdev))
    return "/dev/" + name


class Group:
    """Five containers of one layout: name -> full ID."""

    def __init__(self, d, layout: str, parent=None):
        self.layout = layout
        self.parent = parent
        self.label = f"cgstat.test={d.tag}"
        tag = secrets.token_hex(3)
        self.names = {role: f"cgstat-test-{layout}-{role}-{tag}" for role in ("cpu", "mem", "io", "rx", "tx")}
        self.ids = {}
        common = ["--label", self.label, "--label", f"cgstat.layout={layout}"]
        run = lambda role, *a, cmd: self.ids.__setitem__(  # noqa: E731
            role, d.run(self.names[role], *common, *a, cmd=cmd, cgroup_parent=parent))
        run("cpu", "--cpus", "0.5", "--memory", "64m", "--pids-limit", "32", cmd="while :; do :; done")
        run("mem", "--memory", "96m", cmd="dd if=/dev/zero of=/dev/shm/hold bs=1M count=24 2>/dev/null; exec sleep 100000")
        run("io", "--memory", "64m", "--device-write-bps", f"{_root_disk_dev()}:100gb",
            cmd="dd if=/dev/zero of=/written bs=1M count=8 oflag=direct 2>/dev/null; exec sleep 100000")
        run("rx", "--memory", "64m", cmd="exec sleep 100000")
        rx_ip = json.loads(d.docker("inspect", self.ids["rx"]).stdout)[0]["NetworkSettings"]["IPAddress"]
        # ~290 kB each way, then quiet (busybox ping: 200 echo requests of 1400 bytes)
        run("tx", "--memory", "64m", cmd=f"ping -q -c 200 -i 0.01 -s 1400 {rx_ip} >/dev/null; exec sleep 100000")


@pytest.fixture(scope="module")
def groups(daemon):
    default = Group(daemon, "default", parent=f"{daemon.parent}-default/docker")
    custom = Group(daemon, "cgroup-parent")
    return {"default": default, "cgroup-parent": custom, "data-root": custom}


def _cgstat(*args, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, cwd=ROOT, timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode()
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return records, proc.stderr.decode()


def _within(shown: str, value: float, digits: int, base: float, units) -> bool:
    """Whether `value` prints as docker's `shown` ("24.36MiB", "8.39MB", "0B") at
    `digits` significant digits: within half a unit of its last digit."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]+)", shown)
    assert m, shown
    number, unit = float(m.group(1)), m.group(2)
    scale = base ** units.index(unit)
    if number == 0:
        return value == 0
    step = 10 ** (math.floor(math.log10(number)) - (digits - 1)) * scale
    return abs(value - number * scale) <= step / 2 + 1e-9 * scale


_BIN = ["B", "KiB", "MiB", "GiB", "TiB"]
_DEC = ["B", "kB", "MB", "GB", "TB"]


def _mismatches(rec, row):
    """What of one cgstat record disagrees with docker stats' row (empty: all equal)."""
    bad = []
    mem = rec["memory"]
    usage, limit = row["MemUsage"].split(" / ")
    if not _within(usage, mem["working_set_bytes"], 4, 1024, _BIN):
        bad.append(f"mem usage {mem['working_set_bytes']} vs {usage}")
    if not _within(limit, mem["limit_bytes"], 4, 1024, _BIN):
        bad.append(f"mem limit {mem['limit_bytes']} vs {limit}")
    if "%.2f%%" % mem["percent"] != row["MemPerc"]:
        bad.append(f"mem % {mem['percent']} vs {row['MemPerc']}")
    rx, tx = row["NetIO"].split(" / ")
    net = rec["network"]
    if not (_within(rx, net["rx_bytes_total"], 3, 1000, _DEC) and _within(tx, net["tx_bytes_total"], 3, 1000, _DEC)):
        bad.append(f"net {net['rx_bytes_total']}/{net['tx_bytes_total']} vs {row['NetIO']}")
    read, write = row["BlockIO"].split(" / ")
    io = rec["io"]
    if not (_within(read, io["read_bytes_total"], 3, 1000, _DEC) and _within(write, io["write_bytes_total"], 3, 1000, _DEC)):
        bad.append(f"blkio {io['read_bytes_total']}/{io['write_bytes_total']} vs {row['BlockIO']}")
    if str(rec["pids"]["current"]) != row["PIDs"]:
        bad.append(f"pids {rec['pids']['current']} vs {row['PIDs']}")
    return bad


@pytest.mark.parametrize("layout", ["default", "cgroup-parent", "data-root"])
def test_side_by_side_with_docker_stats(daemon, groups, layout):
    group = groups[layout]
    args = ["--match", re.escape(daemon.parent)]
    if layout == "data-root":
        # no API: the names come from <data root>/containers/<id>/config.v2.json, the data
        # root from dockerd's own command line
        args = ["--docker-host", "unix:///nonexistent/cgstat-test.sock"] + args
    ids = group.ids
    inspect = realdocker.docker_inspect(daemon, list(ids.values()))
    last = None
    for attempt in range(8):
        # docker stats --no-stream answers with the last of two of the daemon's samples,
        # 1 s apart, taken some time in the first second or two after the request (each
        # container in parallel), and says no more about when. cgstat streams half-second
        # ticks over the same time; its CPU % over each pair of ticks (1 s) there is a
        # window docker may have used, and one of them must agree within 10 %. The other
        # figures come from its last tick (quiet by then; a moved packet or page: again).
        proc = subprocess.Popen([sys.executable, "-m", "cgstat", *args, "stream", "--interval", "0.5",
                                 "--count", "7", "--no-events"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        stats = realdocker.docker_stats(daemon)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        ticks = [json.loads(line) for line in out.splitlines()]
        by_id = {r["container"]["id"]: r for r in ticks if r.get("container")}  # the last tick's
        problems = {}
        for role, cid in ids.items():
            rec = by_id.get(cid)
            assert rec is not None, (layout, role, sorted(r["cgroup"] for r in ticks), err.decode())
            bad = _mismatches(rec, stats[cid[:12]])
            if role == "cpu":
                theirs = float(stats[cid[:12]]["CPUPerc"].rstrip("%"))
                ours = [r["cpu"]["percent"] for r in ticks if r.get("container") and r["container"]["id"] == cid]
                windows = [(a + b) / 2 for a, b in zip(ours, ours[1:]) if a is not None and b is not None]
                if not any(abs(w - theirs) <= 0.10 * theirs for w in windows):
                    bad.append(f"cpu {windows} vs {theirs}")
            if bad:
                problems[role] = bad
        last = problems
        if not problems:
            break
        time.sleep(0.5)
    assert not last, last
    for role, cid in ids.items():
        rec, info = by_id[cid], inspect[cid]
        validate(rec)
        c = rec["container"]
        assert c["runtime"] == "docker"
        assert c["name"] == info["Name"].lstrip("/") == group.names[role]
        assert c["image"] == info["Config"]["Image"] == realdocker.IMAGE
        assert c["labels"] == info["Config"]["Labels"]
        assert c["short_id"] == cid[:12] == stats[cid[:12]]["ID"]
        expected_parent = group.parent or daemon.parent
        assert rec["cgroup"].endswith(f"{expected_parent}/{cid}"), rec["cgroup"]
        assert rec["paths"]["memory"].endswith(f"{expected_parent}/{cid}")
    # CPU (compared above, within 10 %, over windows taken together): the burner's quota
    cpu = by_id[ids["cpu"]]["cpu"]
    assert cpu["limit_cores"] == 0.5 and 0 < cpu["percent"] <= 60  # one 0.5 s tick: 5 CFS periods
    assert by_id[ids["cpu"]]["pids"]["limit"] == 32
    # the workloads really ran: a figure that is 0 on both sides proves nothing
    assert by_id[ids["io"]]["io"]["write_bytes_total"] >= 8 * 1024 * 1024
    assert by_id[ids["mem"]]["memory"]["working_set_bytes"] >= 24 * 1024 * 1024
    for role in ("rx", "tx"):
        net = by_id[ids[role]]["network"]
        assert net["rx_bytes_total"] >= 200 * 1400 and net["tx_bytes_total"] >= 200 * 1400, (role, net)


def test_default_selection_finds_containers_under_any_parent(daemon, groups):
    """Without --match: the containers of both layouts are found and named, and a bare
    64-hex folder that no runtime knows is not a container."""
    fake = "".join(secrets.choice("0123456789abcdef") for _ in range(64))
    own = realdocker.own_cgroups()
    made = []
    try:
        for hier in ("cpu", "memory"):
            path = os.path.join(realdocker.CGROOT, hier, own[hier].lstrip("/"), daemon.parent, fake)
            os.mkdir(path)
            made.append(path)
        records, err = _cgstat("once", "--window", "0")
    finally:
        for path in made:
            os.rmdir(path)
    by_id = {r["container"]["id"]: r for r in records if r.get("container")}
    for layout in ("default", "cgroup-parent"):
        for role, cid in groups[layout].ids.items():
            assert by_id[cid]["container"]["name"] == groups[layout].names[role], (layout, role)
    assert fake not in by_id
    assert not any(r["cgroup"].endswith(fake) for r in records)
    assert "no containers or systemd units were found" not in err


def test_pid_names_the_container_under_a_custom_parent(daemon, groups):
    cid = groups["cgroup-parent"].ids["cpu"]
    pid = json.loads(daemon.docker("inspect", cid).stdout)[0]["State"]["Pid"]
    records, _ = _cgstat("pid", str(pid))
    (rec,) = records
    assert rec["container"]["id"] == cid
    assert rec["container"]["name"] == groups["cgroup-parent"].names["cpu"]


def test_unreadable_state_is_said_once(daemon, groups, tmp_path):
    """With the data root and the API both elsewhere, the containers are still found (by
    their cgroups, under /docker/) but unnamed, and one warning says why and what to set."""
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "cgstat", "--docker-data-root", str(empty),
                           "--docker-host", "unix:///nonexistent/cgstat-test.sock",
                           "--match", re.escape(daemon.parent), "stream", "--interval", "0.2", "--count", "3"],
                          capture_output=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    for role, cid in groups["default"].ids.items():
        (rec,) = {json.dumps(r["container"], sort_keys=True): r for r in records
                  if r.get("container") and r["container"]["id"] == cid}.values()
        assert rec["container"]["runtime"] == "docker" and rec["container"]["name"] is None
    err = proc.stderr.decode()
    lines = [line for line in err.splitlines() if "Docker containers" in line]
    assert len(lines) == 1, err
    assert str(empty) in lines[0] and "--docker-data-root" in lines[0] and "DOCKER_HOST" in lines[0]


def test_parent_network_is_never_one_childs(daemon, groups):
    """The daemon's cgroup parent holds five containers in five namespaces and no process
    of its own: its network is null with the reason, never one of theirs (docs/network.md)."""
    records, _ = _cgstat("--match", re.escape(daemon.parent), "once", "--window", "0")
    (parent,) = [r for r in records if r["cgroup"].endswith("/" + daemon.parent)]
    children = [r for r in records if r.get("container") and r["cgroup"].startswith(parent["cgroup"] + "/")]
    assert {c["container"]["id"] for c in children} >= set(groups["cgroup-parent"].ids.values())
    assert len({c["network"]["netns"] for c in children}) == len(children)
    assert parent["network"] is None
    (problem,) = [e for e in parent["errors"] if e["source"] == "network"]
    assert problem["error"] == "several_namespaces", problem
    validate(parent)


# -- renames -------------------------------------------------------------------------------


class _Lines:
    """A process's stdout lines as they come, each with the time it was read."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for raw in self.proc.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), raw.decode(errors="replace")))

    def since(self, t):
        with self.lock:
            return [line for at, line in self.lines if at > t]

    def wait_for(self, pred, timeout=60):
        def seen_or_exited():
            with self.lock:
                if any(pred(line) for _, line in self.lines):
                    return "seen"
            return "exited" if self.proc.poll() is not None else None

        if wait_for(seen_or_exited, timeout, every_s=0.05) == "seen":
            return
        raise AssertionError(f"not seen; stderr: {self.proc.stderr.read().decode() if self.proc.poll() is not None else ''}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def _renamed_while_running(daemon, group, role, *command, shows_old):
    """cgstat COMMAND (matching one container) until it shows the old name (`shows_old`
    waits for it, given the output, the old name and the ID), then `docker rename`; yields
    (its output, the ID, the new name, when the rename began and when it returned: dockerd
    writes the new name before the command returns, so cgstat may show it in between), and
    puts the old name
    back."""
    cid, old = group.ids[role], group.names[role]
    out = _Lines([sys.executable, "-m", "cgstat", "--match", re.escape(cid), *command])
    try:
        shows_old(out, old, cid)
        new = old + "-renamed"
        began = time.monotonic()
        daemon.docker("rename", old, new)
        try:
            yield out, cid, new, began, time.monotonic()
        finally:
            daemon.docker("rename", new, old)
    finally:
        out.stop()


def test_rename_shows_within_two_ticks_in_stream(daemon, groups):
    with _renamed_while_running(daemon, groups["cgroup-parent"], "mem", "stream", "--interval", "0.3", "--no-events",
                                shows_old=lambda out, old, cid: out.wait_for(lambda line: f'"name":"{old}"' in line)) as (out, cid, new, began, at):
        out.wait_for(lambda line: f'"name":"{new}"' in line)

        def names(since):
            ours = [json.loads(line) for line in out.since(since)]
            return [r["container"]["name"] for r in ours if r.get("container") and r["container"]["id"] == cid]

        during, after = names(began), names(at)
        # shown before the command returned, or in the first two records after it (the
        # first may come from a tick that began before it)
        assert new in during[:len(during) - len(after)] or new in after[:2], (during, after)
        assert during[during.index(new):] == [new] * (len(during) - during.index(new))  # never back


def test_rename_shows_within_two_ticks_in_top(daemon, groups):
    with _renamed_while_running(daemon, groups["cgroup-parent"], "io", "top", "--interval", "0.3", "--no-events",
                                shows_old=lambda out, old, cid: out.wait_for(lambda line: old in line and cid[:12] in line)) as (out, cid, new, began, at):
        out.wait_for(lambda line: new in line)
        during = [line for line in out.since(began) if cid[:12] in line]  # by CONTAINER ID
        after = [line for line in out.since(at) if cid[:12] in line]
        # shown before the command returned (dockerd writes the name first; on a loaded host
        # the command returns late), or in the first two rows after it
        assert any(new in row for row in during[:len(during) - len(after)] + after[:2]), (during[:3], after[:3])


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def _ticks(text):
    m = re.search(r"^cgstat_ticks_total(?:\{[^}]*\})? ([0-9.e+]+)", text, re.M)
    return float(m.group(1)) if m else None


def test_rename_shows_within_two_ticks_in_serve(daemon, groups):
    port = _free_port()

    def shows_old(out, old, cid):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and out.proc.poll() is None:
            try:
                text = _metrics(port)
            except OSError:
                text = ""  # not listening yet
            if f'name="{old}"' in text:
                return
            time.sleep(0.1)
        raise AssertionError("serve never showed the old name")

    with _renamed_while_running(daemon, groups["cgroup-parent"], "rx", "serve", "--listen", f"127.0.0.1:{port}",
                                "--interval", "0.3", shows_old=shows_old) as (out, cid, new, _began, at):
        done = _ticks(_metrics(port))  # ticks finished once the rename returned (or a moment later)
        deadline = time.monotonic() + 60
        seen = None
        while seen is None and time.monotonic() < deadline:
            text = _metrics(port)
            if f'name="{new}"' in text:
                seen = _ticks(text)
            time.sleep(0.05)
        assert seen is not None, "the new name never showed"
        # the tick under way during the rename may still have the old name, the next one not
        assert seen - done <= 2, (done, seen)


# -- containerd ------------------------------------------------------------------------------


def _hex64():
    return "".join(secrets.choice("0123456789abcdef") for _ in range(64))


@pytest.fixture(scope="module")
def ctr_containers(daemon):
    """One container in containerd's `default` namespace (nerdctl's name annotation) and
    one in `k8s.io` (the CRI annotations a kubelet's containerd writes), both run by ctr
    with a 64-hex ID, as CRI does."""
    made = {}
    parent = f"{daemon.parent}-ctr"
    for ns, annotations in (("default", {"nerdctl/name": "cgstat-test-ctr-default"}),
                            ("k8s.io", {"io.kubernetes.cri.container-type": "container",
                                        "io.kubernetes.cri.container-name": "cgstat-test-ctr-app",
                                        "io.kubernetes.cri.image-name": realdocker.CTR_IMAGE,
                                        "io.kubernetes.cri.sandbox-namespace": "cgstat-test-ns",
                                        "io.kubernetes.cri.sandbox-name": "cgstat-test-pod"})):
        daemon.import_to_containerd(ns)
        cid = _hex64()
        daemon.ctr_run(ns, cid, f"{parent}/{ns}/{cid}", annotations, "exec sleep 100000")
        made[ns] = cid
    return made


def test_ctr_containers_are_found_and_named(daemon, ctr_containers):
    records, err = _cgstat("once", "--window", "0")
    by_id = {r["container"]["id"]: r for r in records if r.get("container")}
    k8s = by_id[ctr_containers["k8s.io"]]["container"]
    assert (k8s["runtime"], k8s["name"], k8s["image"]) == ("containerd", "cgstat-test-ctr-app", realdocker.CTR_IMAGE)
    default = by_id[ctr_containers["default"]]["container"]
    assert (default["runtime"], default["name"]) == ("containerd", "cgstat-test-ctr-default")
    for cid in ctr_containers.values():
        validate(by_id[cid])
        assert by_id[cid]["pids"]["current"] == 1
