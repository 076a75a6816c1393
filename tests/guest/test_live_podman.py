"""Podman live in the Debian 13 guest, rootful and rootless, side by side with `podman stats`.

Rootful: containers in /machine.slice/libpod-<id>.scope (netavark's bridge). Rootless: a
user with lingering (`loginctl enable-linger`), so its user@UID.service runs without a
login and its containers sit in its delegated subtree,
/user.slice/user-UID.slice/user@UID.service/user.slice/libpod-<id>.scope, on a network of
its own (netavark in the rootless network namespace pasta sets up); cgstat, as root, names
them from that user's own store and its figures must equal that user's `podman stats`.
The io controller is delegated to user sessions by a drop-in, as Podman's rootless
tutorial says to (systemd delegates only cpu, memory and pids by default: no block I/O).

How the figures compare (`podman stats --no-stream --format json`; Podman prints sizes in
decimal units at 4 significant digits, go-units HumanSize):
- memory: Podman before 5.6 shows memory.stat `anon` on v2 (containers/common#870), from
  5.6 memory.current - inactive_file (containers/common#2455), cgstat's
  `working_set_bytes`; docs/metrics.md. The figure compared is the one this Podman shows;
- CPU: `--no-stream` has no earlier sample, so Podman's `cpu_percent` is the average since
  the container started; its `cpu_time` (cpu.stat usage) is compared instead, with the
  usage of cgstat's ticks around the moment Podman read it;
- NET I/O: the container's interfaces (Podman: those of its networks; cgstat: all but lo);
  BLOCK I/O: io.stat rbytes/wbytes; PIDs: pids.current.
Labels: Podman keeps them in its database alone (db.sql), not in any file cgstat reads, so
they are null (docs/schema.md).
"""
from __future__ import annotations

import json
import re
import shlex
import time

import pytest

from tests.guest.busybox import as_user, podman_image
from tests.live.test_docker_real import _DEC, _within

USER = "cgstatpod"
NETWORK = "cgstat-live"
IO_BYTES = 8 << 20
DELEGATE = "/etc/systemd/system/user@.service.d/cgstat-live-delegate.conf"

# (role, podman run options, command): a limit on each (Podman, as docker, shows the host's
# memory for a container without one, where cgstat says null)
ROLES = [
    ("cpu", "--cpus 0.5 --pids-limit 32 --memory 64m", "while :; do :; done"),
    # 32 MiB in /dev/shm (file, in the working set) and ~16 MiB held by the shell (anon)
    ("mem", "--memory 128m", "dd if=/dev/zero of=/dev/shm/f bs=1M count=32 2>/dev/null; "
                             "a=$(dd if=/dev/zero bs=1M count=16 2>/dev/null | tr '\\0' a); "
                             "while :; do sleep 100000; done"),
    ("pids", "--memory 64m", "sleep 100000 & sleep 100000 & sleep 100000 & wait"),
    ("io", "--memory 64m -v {io}:/data", "dd if=/dev/zero of=/data/f bs=1M count=8 oflag=direct 2>/dev/null; "
                                         "exec sleep 100000"),
    ("rx", "--memory 64m", "exec sleep 100000"),
    # ~290 kB each way, then quiet (busybox ping: 200 echo requests of 1400 bytes)
    ("tx", "--memory 64m --cap-add NET_RAW", "ping -q -c 200 -i 0.01 -s 1400 {rx_ip} >/dev/null; "
                                             "exec sleep 100000"),
]


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


class Podman:
    """One side of the comparison: root's Podman, or USER's through its user session."""

    def __init__(self, guest, user=None):
        self.g = guest
        self.user = user
        self.ids = {}
        self.image = None

    def script(self, cmd):
        return as_user(self.user, cmd) if self.user else cmd

    def sh(self, cmd, timeout_s=180, check=True):
        return self.g.sh(self.script(cmd), timeout_s=timeout_s, check=check)

    def version(self):
        v = self.sh("podman version --format '{{.Client.Version}}'").out.strip()
        return tuple(int(x) for x in re.findall(r"\d+", v)[:2])

    def start(self, tag):
        self.image = podman_image(self.g, self.user)
        net = ""
        if self.user:  # rootless: containers on one network can reach each other
            self.sh("podman network exists %s || podman network create %s >/dev/null" % (NETWORK, NETWORK))
            net = "--network " + NETWORK
        home = "/home/%s" % self.user if self.user else "/var/tmp"
        io_dir = "%s/cgstat-live-io-%s" % (home, tag)
        self.sh("mkdir -p %s" % io_dir)
        rx_ip = None
        for role, opts, cmd in ROLES:
            cmd = cmd.format(rx_ip=rx_ip)
            r = self.sh("podman run -d --name live-%s-%s --label role=%s %s %s %s sh -c %s" % (
                tag, role, role, net, opts.format(io=io_dir), self.image, shlex.quote(cmd)))
            self.ids[role] = r.out.strip().splitlines()[-1]
            if role == "rx":
                fmt = ("{{(index .NetworkSettings.Networks \"%s\").IPAddress}}" % NETWORK if self.user
                       else "{{.NetworkSettings.IPAddress}}")
                rx_ip = self.sh("podman inspect -f '%s' %s" % (fmt, self.ids[role])).out.strip()
                assert re.fullmatch(r"[0-9.]+", rx_ip), rx_ip

    def inspect(self):
        out = self.sh("podman inspect %s" % " ".join(self.ids.values())).out
        return {c["Id"]: c for c in json.loads(out)}

    def stop(self):
        if self.ids:
            self.sh("podman rm -f -t 0 %s >/dev/null" % " ".join(self.ids.values()), timeout_s=180, check=False)


def _rootless_user(g):
    """USER with lingering: user@UID.service up without a login, its bus ready."""
    g.sh("mkdir -p %s && printf '[Service]\\nDelegate=cpu cpuset io memory pids\\n' > %s && "
         "systemctl daemon-reload" % (DELEGATE.rsplit("/", 1)[0], DELEGATE), check=True)
    g.sh("id -u %s >/dev/null 2>&1 || useradd -m -s /bin/sh %s" % (USER, USER), check=True)
    g.sh("grep -q '^%s:' /etc/subuid || usermod --add-subuids 200000-265535 --add-subgids 200000-265535 %s"
         % (USER, USER), check=True)
    g.run(["loginctl", "enable-linger", USER], check=True)
    uid = int(g.sh("id -u %s" % USER, check=True).out)
    g.sh("for i in $(seq 120); do test -S /run/user/%d/bus && "
         "systemctl is-active -q user@%d.service && exit 0; sleep 0.5; done; exit 1" % (uid, uid),
         timeout_s=90, check=True)
    ctl = g.get("/sys/fs/cgroup/user.slice/user-%d.slice/user@%d.service/cgroup.controllers" % (uid, uid)).decode()
    assert {"cpu", "io", "memory", "pids"} <= set(ctl.split()), ctl
    return uid


def _trixie(guest):
    if guest.suite != "trixie":
        pytest.skip("Podman 5 is Debian 13's (Debian 12 has 4.3)")


def _mem_total(guest):
    return int(re.search(r"MemTotal:\s+(\d+) kB", guest.get("/proc/meminfo").decode()).group(1)) * 1024


@pytest.fixture(scope="module")
def podman_root(guest):
    """Root's containers, one per role, for the module."""
    _trixie(guest)
    t0 = time.monotonic()
    # A dockerd started before (the other checks of this guest) set iptables' FORWARD
    # policy to DROP with br_netfilter loaded: traffic between two containers on Podman's
    # bridge is then dropped. Docker's documented place for other rules: DOCKER-USER.
    allow = "DOCKER-USER -i podman0 -o podman0 -j ACCEPT"
    guest.sh("! iptables -n -L DOCKER-USER >/dev/null 2>&1 || iptables -C %s 2>/dev/null || iptables -I %s"
             % (allow, allow), check=True)
    root = Podman(guest)
    root.start("root")
    guest.times["podman_root_s"] = round(time.monotonic() - t0, 1)
    yield root
    root.stop()
    guest.sh("iptables -D %s 2>/dev/null; true" % allow)


@pytest.fixture(scope="module")
def podman_user(guest):
    """USER's containers (rootless, in its user@UID.service), the same roles."""
    _trixie(guest)
    t0 = time.monotonic()
    uid = _rootless_user(guest)
    user = Podman(guest, USER)
    user.uid = uid
    user.start("user")
    guest.times["podman_user_s"] = round(time.monotonic() - t0, 1)
    yield user
    user.stop()


def _sizes(shown):
    """Podman's "<a> / <b>" (sizes, or "--" for none) as two strings."""
    a, b = shown.split(" / ")
    return a.strip(), b.strip()


def _size_is(shown, value):
    if shown == "--":
        return value in (0, None)
    return value is not None and _within(shown, value, 4, 1000, _DEC)


def mismatches(rec, row, mem_key, mem_total):
    """What of one cgstat record disagrees with a `podman stats` row (CPU aside)."""
    bad = []
    mem = rec["memory"]
    usage, limit = _sizes(row["mem_usage"])
    ours = mem[mem_key]
    our_limit = mem["limit_bytes"] if mem["limit_bytes"] is not None else mem_total
    if not _size_is(usage, ours):
        bad.append("mem usage %s %s vs %s" % (mem_key, ours, usage))
    if not _size_is(limit, our_limit):
        bad.append("mem limit %s vs %s" % (our_limit, limit))
    if "%.2f%%" % (100.0 * ours / our_limit) != row["mem_percent"]:
        bad.append("mem %% %s vs %s" % (100.0 * ours / our_limit, row["mem_percent"]))
    rx, tx = _sizes(row["net_io"])
    net = rec["network"] or {}
    if not (_size_is(rx, net.get("rx_bytes_total")) and _size_is(tx, net.get("tx_bytes_total"))):
        bad.append("net %s/%s vs %s" % (net.get("rx_bytes_total"), net.get("tx_bytes_total"), row["net_io"]))
    read, write = _sizes(row["block_io"])
    io = rec["io"] or {}
    if not (_size_is(read, io.get("read_bytes_total")) and _size_is(write, io.get("write_bytes_total"))):
        bad.append("blkio %s/%s vs %s" % (io.get("read_bytes_total"), io.get("write_bytes_total"), row["block_io"]))
    if str(rec["pids"]["current"]) != row["pids"]:
        bad.append("pids %s vs %s" % (rec["pids"]["current"], row["pids"]))
    return bad


def _seconds(go_duration):
    """Go's time.Duration text ("4.308472s", "1m2.5s", "850ms") in seconds."""
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(h|ms|m|s|us|µs|ns)", go_duration)
    assert parts, go_duration
    return sum(float(n) * scale[u] for n, u in parts)


def side_by_side(p, mem_total, mem_key):
    """cgstat's stream beside one `podman stats`, again until the figures agree; returns
    (cgstat's record by role at Podman's moment, both sides' figures, the problems left,
    the burner's last record).

    Podman reads each container's cgroup once, at one moment: the CPU burner's cpu_time
    lies between the usage of two of cgstat's ticks, and every other figure must equal one
    of those two ticks' (a late multicast packet, a page, may come after)."""
    g = p.g
    last, ours, theirs, burner = None, {}, {}, []
    for attempt in range(5):
        # podman starts once cgstat's first tick is out: its moment is within the stream
        r = g.sh("f=/tmp/cgstat-pod.jsonl; rm -f $f; cgstat stream --interval 0.5 --count 12 --no-events > $f & "
                 "for i in $(seq 600); do [ -s $f ] && break; sleep 0.1; done; %s > /tmp/podman-stats.json; wait"
                 % p.script("podman stats --no-stream --format json"), timeout_s=180, check=True)
        ticks = records(g.get("/tmp/cgstat-pod.jsonl").decode())
        rows = {row["id"]: row for row in json.loads(g.get("/tmp/podman-stats.json").decode())}
        series = {}
        for t in ticks:
            c = t.get("container")
            if c:
                series.setdefault(c["id"], []).append(t)
        for role, cid in p.ids.items():
            assert series.get(cid), (role, cid, sorted({t["cgroup"] for t in ticks}), r)
        burner = series[p.ids["cpu"]]
        cpu_s = _seconds(rows[p.ids["cpu"][:12]]["cpu_time"])
        usage = [t["cpu"]["usage_seconds_total"] for t in burner]
        at = [k for k in range(len(usage) - 1) if usage[k] - 1e-6 <= cpu_s <= usage[k + 1] + 1e-6]
        if not at:
            last = {"cpu": ["cpu time %s not within cgstat's %s" % (cpu_s, usage)]}
            continue
        k = at[0]
        problems, ours, theirs = {}, {}, {}
        for role, cid in p.ids.items():
            row = rows[cid[:12]]
            theirs[role] = row
            tried = []
            for rec in series[cid][k:k + 2]:
                bad = mismatches(rec, row, mem_key, mem_total)
                tried.append((bad, rec))
                if not bad:
                    break
            bad, ours[role] = min(tried, key=lambda x: len(x[0]))
            # each container's cpu_time within cgstat's usage at the two ticks (an idle
            # one's: equal to both)
            their_s = _seconds(row["cpu_time"])
            span = [t["cpu"]["usage_seconds_total"] for t in series[cid][k:k + 2]]
            if not min(span) - 1e-6 <= their_s <= max(span) + 1e-6:
                bad = bad + ["cpu time %s not within cgstat's %s" % (their_s, span)]
            if bad:
                problems[role] = bad
        last = problems
        if not problems:
            break
        time.sleep(1)
    side = {role: {"cgstat": {"cpu_s": round(ours[role]["cpu"]["usage_seconds_total"], 3),
                              "cpu%": ours[role]["cpu"]["percent"], mem_key: ours[role]["memory"][mem_key],
                              "working_set": ours[role]["memory"]["working_set_bytes"],
                              "net": [(ours[role]["network"] or {}).get(k) for k in ("rx_bytes_total", "tx_bytes_total")],
                              "blkio": [(ours[role]["io"] or {}).get(k) for k in ("read_bytes_total", "write_bytes_total")],
                              "pids": ours[role]["pids"]["current"]},
                   "podman": {k: theirs[role][k] for k in ("cpu_time", "cpu_percent", "mem_usage", "mem_percent",
                                                           "net_io", "block_io", "pids")}}
            for role in ours}
    return ours, side, last, burner[-1] if burner else None


def _check(p, ours, burner, inspect, cgroup_of):
    for role, cid in p.ids.items():
        rec = ours[role]
        c = rec["container"]
        info = inspect[cid]
        assert (c["runtime"], c["id"], c["short_id"]) == ("podman", cid, cid[:12]), c
        assert c["name"] == info["Name"] == "live-%s-%s" % ("user" if p.user else "root", role), (c, info["Name"])
        assert c["image"] == info["ImageName"] == p.image, (c, info["ImageName"])
        assert info["Config"]["Labels"].get("role") == role
        assert c["labels"] is None  # in Podman's database only (see the module's docstring)
        assert rec["cgroup"] == cgroup_of(cid), rec["cgroup"]
    cpu = ours["cpu"]
    assert cpu["cpu"]["limit_cores"] == 0.5 and cpu["pids"]["limit"] == 32
    # one 0.5 s tick: 5 CFS periods of a 0.5-core quota
    assert burner["cpu"]["percent"] is not None and 0 < burner["cpu"]["percent"] <= 60, burner["cpu"]
    assert ours["mem"]["memory"]["limit_bytes"] == 128 << 20
    # the workloads really ran: a figure that is 0 on both sides proves nothing
    assert ours["mem"]["memory"]["working_set_bytes"] >= 40 << 20
    assert ours["mem"]["memory"]["anon_bytes"] >= 12 << 20
    assert ours["pids"]["pids"]["current"] == 4
    assert ours["io"]["io"]["write_bytes_total"] >= IO_BYTES
    for role in ("rx", "tx"):
        net = ours[role]["network"]
        assert net["rx_bytes_total"] >= 200 * 1400 and net["tx_bytes_total"] >= 200 * 1400, (role, net)


def _mem_key(p):
    return "working_set_bytes" if p.version() >= (5, 6) else "anon_bytes"


def test_rootful_podman_side_by_side_with_podman_stats(podman_root):
    p = podman_root
    assert p.version() >= (5, 0)
    ours, side, problems, burner = side_by_side(p, _mem_total(p.g), _mem_key(p))
    p.g.side_by_side_podman = side
    print(json.dumps(side, indent=1))
    assert not problems, (problems, side)
    _check(p, ours, burner, p.inspect(), lambda cid: "/machine.slice/libpod-%s.scope" % cid)


def test_rootless_podman_under_user_manager_side_by_side(podman_user):
    p = podman_user
    assert p.sh("podman info --format '{{.Host.Security.Rootless}} {{.Host.CgroupManager}}'").out.split() == \
        ["true", "systemd"]
    ours, side, problems, burner = side_by_side(p, _mem_total(p.g), _mem_key(p))
    p.g.side_by_side_podman_rootless = side
    print(json.dumps(side, indent=1))
    assert not problems, (problems, side)
    base = "/user.slice/user-%d.slice/user@%d.service/user.slice" % (p.uid, p.uid)
    _check(p, ours, burner, p.inspect(), lambda cid: "%s/libpod-%s.scope" % (base, cid))


def _service(g):
    """The shipped cgstat.service started (installed from the checkout if the image lacks it)."""
    g.run(["systemctl", "start", "cgstat.service"], timeout_s=180)
    if g.run(["systemctl", "is-active", "cgstat.service"]).out.strip() != "active":
        g.sh("install -m 0644 /opt/job/src/systemd/cgstat.service /opt/job/src/systemd/cgstat-kmsg.socket "
             "/etc/systemd/system/ && systemctl daemon-reload && systemctl start cgstat.service",
             timeout_s=180, check=True)


def test_oom_killed_and_removed_podman_container_is_named(guest):
    _trixie(guest)
    g = guest
    image = podman_image(g)
    _service(g)
    mark = g.run(["journalctl", "-n", "0", "--show-cursor", "--no-pager"]).out.strip().rsplit("cursor: ", 1)[-1]
    r = g.sh("podman run --name live-podman-oom --memory 32m --memory-swap 32m %s "
             "sh -c 'dd if=/dev/zero of=/dev/shm/f bs=1M count=200'; echo rc=$?; "
             "podman inspect -f '{{.Id}} {{.State.OOMKilled}}' live-podman-oom; podman rm live-podman-oom"
             % image, timeout_s=180)
    assert "rc=137" in r.out, r
    cid = re.search(r"\b([0-9a-f]{64}) true\b", r.out)
    assert cid, r  # podman saw the OOM kill too
    deadline = time.monotonic() + 60
    ours, out = [], ""
    while time.monotonic() < deadline and not ours:
        out = g.run(["journalctl", "-u", "cgstat.service", "--after-cursor", mark, "-o", "cat", "--no-pager"]).out
        ours = [e for e in records(out) if e.get("kind") == "oom_kill" and "live-podman-oom" in json.dumps(e)]
        time.sleep(2)
    g.run(["systemctl", "stop", "cgstat.service"], timeout_s=120)
    assert len(ours) == 1, out[-4000:]
    c = ours[0]["container"]
    assert (c["runtime"], c["name"], c["id"]) == ("podman", "live-podman-oom", cid.group(1)), ours[0]
