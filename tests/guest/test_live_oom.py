"""OOM kills soaked in the guest: the shipped cgstat.service (DynamicUser, the kmsg socket)
reports every process the kernel kills, once, named by its unit or container.

The kills: transient units removed at once (`systemd-run --collect`), Docker containers
(named from their 0600 state by the dynamic user; one killed as its first command, in its
first moments), a memory.oom.group group kill (every task of the unit, one report), and
kills while the agent starts (`systemctl restart`) and while Restart= brings it back after
a crash. The kernel's own `Killed process` lines (journalctl -k) are the truth each event
is held to, by PID.

CGSTAT_OOM_KILLS sets how many (default 16, the CI set's size: every kind once or twice);
the full soak is `CGSTAT_OOM_KILLS=200 python -m pytest tests/guest/test_live_oom.py`.
The kernel rate-limits the report naming the cgroup to 10 per 5 s machine-wide
(oom_kill_process's DEFAULT_RATELIMIT): kills are paced under it, since a kill past it has
only its process in the log and a cgroup gone within the tick can't be named.
"""
from __future__ import annotations

import collections
import itertools
import json
import os
import re
import time

import pytest

from tests.guest.busybox import docker_image

KILLS = int(os.environ.get("CGSTAT_OOM_KILLS", "16"))
UNITS = "/opt/job/src/systemd"
# a 64 MiB buffer, touched as dd fills it: killed under a 32 MiB limit
HOG = "dd if=/dev/zero of=/dev/null bs=64M count=1"


def records(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def cursor(g):
    r = g.run(["journalctl", "-n", "0", "--show-cursor", "--no-pager"], check=True)
    return r.out.strip().rsplit("cursor: ", 1)[-1]


def plan(n):
    """The kills, as (kind, processes killed), adding up to n."""
    restarts = min(8, max(2, n // 25))
    groups = max(1, n // 40)
    docker = max(2, n // 8)
    units = n - restarts - 4 * groups - docker
    assert units > 0, n
    by_kind = [["group"] * groups, ["docker", "docker-first"] * (docker // 2) + ["docker"] * (docker % 2),
               ["restart", "crash"] * (restarts // 2) + ["restart"] * (restarts % 2)]
    # spread the rare kinds through the run, each kind's apart from one another (a fixed
    # order: a failure replays). Restarts one after another leave no agent reading for as
    # long as they last (each start takes seconds under emulation): the kernel's log ring
    # (128 KiB, a memcg OOM report is ~3-4 KiB) then overwrites kills before any agent
    # reads them, which cgstat can only count as lost.
    rare = [k for group in itertools.zip_longest(*by_kind) for k in group if k is not None]
    out, step = [], max(1, units // (len(rare) + 1))
    for i in range(units):
        out.append("unit")
        if i % step == step - 1 and rare:
            out.append(rare.pop(0))
    out += rare
    return out


class Pacer:
    """At most 9 OOM reports in any 5.5 s: under the kernel's 10 per 5 s."""

    def __init__(self):
        self.t = collections.deque()

    def wait(self):
        while len(self.t) >= 9 and time.monotonic() - self.t[0] < 5.5:
            time.sleep(0.1)
        while len(self.t) >= 9:
            self.t.popleft()
        self.t.append(time.monotonic())


@pytest.fixture(scope="module")
def soak_host(guest):
    g = guest
    g.sh("install -m 0644 %s/cgstat.service %s/cgstat-kmsg.socket /etc/systemd/system/ && "
         "systemctl daemon-reload && systemctl reset-failed cgstat.service; "
         "systemctl restart cgstat.service" % (UNITS, UNITS), timeout_s=240, check=True)
    g.run(["systemctl", "start", "docker.service"], timeout_s=300, check=True)
    g.docker_busybox = docker_image(g)
    yield g
    g.sh("docker rm -f $(docker ps -aq --filter name=oomsoak-) >/dev/null 2>&1; "
         "systemctl stop cgstat.service; systemctl reset-failed 'cgstat-oomsoak-*' cgstat.service; true",
         timeout_s=180)


def _main_pid(g):
    return g.run(["systemctl", "show", "cgstat.service", "-p", "MainPID", "--value"]).out.strip()


def _unit_kill(g, i, group=False):
    body = "busybox " + HOG
    if group:
        body = ("echo 1 > /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/memory.oom.group; "
                "busybox sleep 600 & busybox sleep 600 & busybox " + HOG)
    r = g.run(["systemd-run", "--quiet", "--wait", "--collect", "--unit", "cgstat-oomsoak-%d" % i,
               "-p", "MemoryMax=32M", "-p", "MemorySwapMax=0", "/bin/sh", "-c", body], timeout_s=120)
    assert r.rc != 0, r  # killed
    return "cgstat-oomsoak-%d.service" % i


def _docker_kill(g, i, first):
    name = "oomsoak-%d" % i
    cmd = HOG if first else "sh -c 'sleep 1; %s'" % HOG  # first: the hog is the container's first process
    r = g.sh("docker run --name %s --memory 32m --memory-swap 32m %s %s; echo rc=$?" % (name, g.docker_busybox, cmd),
             timeout_s=180)
    assert "rc=137" in r.out, r
    cid, state = g.run(["docker", "inspect", "--format", "{{.Id}} {{json .State}}", name],
                       check=True).out.strip().split(" ", 1)
    st = json.loads(state)
    g.run(["docker", "rm", name], timeout_s=60, check=True)
    # not State.OOMKilled: Docker 26 on v2 leaves it false for a container whose first
    # process is killed as it starts (it learns of the kill from memory.events, read after
    # the container ended); the kernel's log below is the witness
    assert st["ExitCode"] == 137, st
    return name, st, cid


def _lifetime_ms(st):
    import datetime

    def t(s):  # RFC 3339 with nanoseconds
        head, frac = s.rstrip("Z").split(".")
        return datetime.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").timestamp() + float("0." + frac)

    return round((t(st["FinishedAt"]) - t(st["StartedAt"])) * 1000)


@pytest.mark.guest_ci("trixie")
def test_every_oom_kill_is_one_named_event(soak_host):
    g = soak_host
    mark = cursor(g)
    expect = {}  # name -> processes killed
    group_units = []  # the memory.oom.group units
    # containers made, killed and removed while no agent was up (after a crash, Restart=
    # waits RestartSec=5s, then the agent starts): their state went with `docker rm` before
    # any agent could read it, so the event can say which container by its ID only
    id_only = {}  # container ID -> name
    first_ms = []
    pacer = Pacer()
    t0 = time.monotonic()
    for i, kind in enumerate(plan(KILLS)):
        pacer.wait()
        if kind == "unit":
            expect[_unit_kill(g, i)] = 1
        elif kind == "group":
            # sh, two sleeps, dd: the whole cgroup, as many as were in it when it was killed
            # (under emulation the sleeps may not have started yet: the kernel's log counts)
            name = _unit_kill(g, i, group=True)
            expect[name] = 4
            group_units.append(name)
        elif kind in ("docker", "docker-first"):
            agent_up = g.run(["systemctl", "is-active", "cgstat.service"]).out.strip() == "active"
            name, st, cid = _docker_kill(g, i, kind == "docker-first")
            expect[name] = 1
            if not agent_up:
                id_only[cid] = name
            if kind == "docker-first":
                first_ms.append(_lifetime_ms(st))
        elif kind == "restart":
            # the agent restarting (a new process, a new kmsg socket): the kill lands while
            # it stops or starts, before it reads the log
            g.sh("systemctl reset-failed cgstat.service; systemctl restart --no-block cgstat.service", check=True)
            expect[_unit_kill(g, i)] = 1
        elif kind == "crash":
            # the agent dies; Restart= starts it again RestartSec=5s later: the kill
            # lands in between, on the socket's descriptor the next agent resumes
            pid = _main_pid(g)
            g.sh("systemctl reset-failed cgstat.service; kill -KILL %s" % pid, check=True)
            expect[_unit_kill(g, i)] = 1
    g.times["oom_soak_kills_s"] = round(time.monotonic() - t0, 1)
    wanted = sum(expect.values())
    assert wanted == KILLS

    kernel = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        klog = g.run(["journalctl", "-k", "--after-cursor", mark, "-o", "cat", "--no-pager"], timeout_s=120).out
        # each process once: a memory.oom.group kill prints its first victim twice
        kernel = list(dict.fromkeys(int(m.group(1)) for m in re.finditer(r"Killed process (\d+) \(", klog)))
        out = g.run(["journalctl", "-u", "cgstat.service", "--after-cursor", mark, "-o", "cat", "--no-pager"],
                    timeout_s=120).out
        events = [e for e in records(out) if e.get("type") == "event" and e.get("kind") == "oom_kill"]
        pids = [e.get("evidence", {}).get("pid") for e in events]
        if len(kernel) >= wanted and set(kernel) <= set(pids):
            break
        time.sleep(3)
    # the kernel killed as many as planned, but for group members not yet started
    assert wanted - 3 * len(group_units) <= len(kernel) <= wanted, (len(kernel), wanted)
    by_pid = collections.defaultdict(list)
    for e in events:
        by_pid[e.get("evidence", {}).get("pid")].append(e)
    missing = [p for p in kernel if p not in by_pid]
    twice = {p: len(v) for p, v in by_pid.items() if len(v) > 1}
    ours = [by_pid[p][0] for p in kernel if p in by_pid]
    def names_in(e):
        text = json.dumps(e)
        hits = [n for n in expect if re.search(re.escape(n) + r"(?![0-9])", text)]
        return hits or [n for cid, n in id_only.items() if (e.get("container") or {}).get("id") == cid]

    named = collections.Counter()
    for e in ours:
        hits = names_in(e)
        if len(hits) == 1:
            named[hits[0]] += 1
    unnamed = [e for e in ours if not names_in(e)]
    restarts = g.run(["systemctl", "show", "cgstat.service", "-p", "NRestarts", "--value"]).out.strip()
    g.oom_soak = {"kills": len(kernel), "events": len(ours), "missing": len(missing), "twice": len(twice),
                  "first_kill_lifetimes_ms": first_ms, "restarts_by_Restart=": restarts,
                  "containers_while_no_agent": len(id_only),
                  "seconds": g.times["oom_soak_kills_s"]}
    print("OOM soak:", json.dumps(g.oom_soak))
    assert not missing, ("no event for", missing, out[-6000:])
    assert not twice, twice
    assert not unnamed, json.dumps(unnamed[:5], indent=1)
    for n in group_units:  # a group's events: the processes the kernel killed in it (sh and dd at least)
        assert 2 <= named.get(n, 0) <= 4, (n, named.get(n))
        expect[n] = named[n]
    assert dict(named) == expect, {n: (named.get(n), k) for n, k in expect.items() if named.get(n) != k}
    # the containers' events say which container, by the name the dynamic user read
    for e in ours:
        c = e.get("container") or {}
        if c.get("id") in id_only and c.get("name") is None:
            assert c["runtime"] == "docker", e  # which container, by its ID: nothing else is left
        elif "oomsoak-" in json.dumps(c):
            assert c["runtime"] == "docker" and c["name"].startswith("oomsoak-"), e
