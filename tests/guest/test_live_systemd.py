"""The shipped units under a real systemd (the guest): notify, watchdog, reload, the kmsg
socket, serve, and the one-shot's timer."""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.helpers.waiting import wait_for

UNITS = "/opt/job/src/systemd"


def records(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def show(guest, unit, *props):
    r = guest.run(["systemctl", "show", unit, "-p", ",".join(props)], check=True)
    return dict(line.split("=", 1) for line in r.out.splitlines() if "=" in line)


def journal(guest, unit, since_cursor=None):
    argv = ["journalctl", "-u", unit, "-o", "cat", "--no-pager"]
    if since_cursor:
        argv += ["--after-cursor", since_cursor]
    return guest.run(argv, timeout_s=120).out


def cursor(guest):
    r = guest.run(["journalctl", "-n", "0", "--show-cursor", "--no-pager"], check=True)
    return r.out.strip().rsplit("cursor: ", 1)[-1]


@pytest.fixture(scope="module")
def units(guest):
    guest.sh("install -m 0644 %s/cgstat.service %s/cgstat-kmsg.socket %s/cgstat-serve.service "
             "%s/cgstat-serve-kmsg.socket %s/cgstat-once.service %s/cgstat-once.timer "
             "/etc/systemd/system/ && systemctl daemon-reload" % ((UNITS,) * 6), check=True)
    yield guest
    guest.run(["systemctl", "stop", "cgstat.service", "cgstat-serve.service", "cgstat-once.timer"],
              timeout_s=120)


@pytest.fixture
def cgstat_service(units):
    t0 = time.monotonic()
    # Type=notify: `systemctl start` returns once READY=1 came (or fails on the timeout)
    r = units.run(["systemctl", "start", "cgstat.service"], timeout_s=180)
    units.times["cgstat_service_start_s"] = round(time.monotonic() - t0, 1)
    assert r.rc == 0, r
    yield units
    units.run(["systemctl", "stop", "cgstat.service"], timeout_s=120)
    units.sh("rm -rf /etc/systemd/system/cgstat.service.d; systemctl daemon-reload; "
             "systemctl reset-failed cgstat.service", timeout_s=60)


@pytest.mark.guest_ci("trixie", "bookworm-v1")
def test_service_is_active_through_ready_and_streams_records(cgstat_service):
    g = cgstat_service
    st = show(g, "cgstat.service", "ActiveState", "SubState", "Type", "NotifyAccess", "User",
              "MainPID", "StatusErrno")
    assert (st["ActiveState"], st["SubState"], st["Type"]) == ("active", "running", "notify"), st
    # DynamicUser: a UID of its own, not root
    uid = g.sh("stat -c %%u /proc/%s" % st["MainPID"], check=True).out.strip()
    assert uid != "0"
    recs = wait_for(lambda: [
        r for r in records(journal(g, "cgstat.service")) if r.get("type") == "cgroup"],
        120, every_s=1.0, what="records in the journal")
    cgroups = {r["cgroup"] for r in recs}
    assert "/system.slice/cgstat.service" in cgroups, sorted(cgroups)
    me = [r for r in recs if r["cgroup"] == "/system.slice/cgstat.service"][-1]
    # the unit's MemoryMax=, read from memory.max (v2) or memory.limit_in_bytes (hybrid)
    assert me["memory"]["limit_bytes"] == 256 << 20
    assert me["pids"]["limit"] == 32  # TasksMax=
    assert me["cpu"]["usage_seconds_total"] > 0


def test_watchdog_restarts_a_hung_agent(cgstat_service):
    g = cgstat_service
    before = show(g, "cgstat.service", "MainPID", "NRestarts")
    g.run(["kill", "-STOP", before["MainPID"]], check=True)
    # WatchdogSec=30s, then SIGABRT, RestartSec=5s, and the new agent's READY=1
    after = wait_for(lambda: (
        lambda s: s if s["MainPID"] not in ("0", before["MainPID"]) and s["ActiveState"] == "active"
        and int(s["NRestarts"]) > int(before["NRestarts"]) else None)(
        show(g, "cgstat.service", "MainPID", "NRestarts", "ActiveState")), 150, every_s=3,
        what="a restart by the watchdog")
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
    log = g.run(["journalctl", "-u", "cgstat.service", "--no-pager", "-o", "cat"]).out
    assert "Watchdog timeout" in log, log[-2000:]


def test_reload_reopens_the_output_after_logrotate(units):
    g = units
    g.put("/etc/systemd/system/cgstat.service.d/output.conf",
          "[Service]\nEnvironment=CGSTAT_OUTPUT=/var/log/cgstat/cgstat.jsonl\n")
    g.put("/etc/logrotate.d/cgstat-test", "/var/log/cgstat/cgstat.jsonl {\n  rotate 3\n  missingok\n"
          "  nocompress\n  postrotate\n    systemctl reload cgstat.service\n  endscript\n}\n")
    try:
        g.sh("systemctl daemon-reload && systemctl start cgstat.service", timeout_s=180, check=True)
        wait_for(lambda: g.sh("test $(grep -c journald /var/log/cgstat/cgstat.jsonl) -ge 3").rc == 0,
                 120, every_s=1.0, what="ticks in the file")
        g.run(["logrotate", "-f", "/etc/logrotate.d/cgstat-test"], timeout_s=60, check=True)
        wait_for(lambda: g.sh(
            "test -f /var/log/cgstat/cgstat.jsonl && "
            "test $(grep -c journald /var/log/cgstat/cgstat.jsonl) -ge 3").rc == 0,
            120, every_s=1.0, what="ticks in the new file")
        g.run(["systemctl", "stop", "cgstat.service"], timeout_s=120, check=True)
        old = g.get("/var/log/cgstat/cgstat.jsonl.1").decode()
        new = g.get("/var/log/cgstat/cgstat.jsonl").decode()
    finally:
        g.sh("rm -f /etc/logrotate.d/cgstat-test /var/log/cgstat/cgstat.jsonl*")
    for text in (old, new):
        assert text.endswith("\n")
        records(text)  # every line whole JSON (a torn line fails here)
    # ticks are whole batches in one file or the other: each file starts with a batch's
    # first record and ends with a batch's last, every stable cgroup has as many lines as
    # the others (a lost or doubled line breaks that), no tick appears twice, and no tick
    # is missing at the move (the gap there is a tick's, not two)
    both = [r for r in records(old) + records(new) if r.get("type") == "cgroup"]
    first, last = both[0]["cgroup"], both[-1]["cgroup"]
    assert [r for r in records(new) if r.get("type") == "cgroup"][0]["cgroup"] == first
    assert [r for r in records(old) if r.get("type") == "cgroup"][-1]["cgroup"] == last
    stable = ["/init.scope", "/system.slice/systemd-journald.service", "/system.slice/cgstat.service"]
    per = {c: [r["ts"] for r in both if r["cgroup"] == c] for c in stable}
    assert len({len(v) for v in per.values()}) == 1, {c: len(v) for c, v in per.items()}
    for c, ts in per.items():
        assert len(ts) == len(set(ts)) and ts == sorted(ts), (c, ts)
    import datetime

    def t(s):
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")

    n_old = len([r for r in records(old) if r.get("cgroup") == stable[1]])
    ts = per[stable[1]]
    gaps = [(t(b) - t(a)).total_seconds() for a, b in zip(ts, ts[1:])]
    assert gaps[n_old - 1] < 1.9, ("a tick lost at the move", gaps)
    assert n_old >= 3 and len(ts) - n_old >= 3


@pytest.mark.guest_ci("trixie", "bookworm-v1")
def test_oom_kills_of_removed_transient_units_come_through_the_kmsg_socket(cgstat_service):
    g = cgstat_service
    mark = cursor(g)
    n = 3
    for i in range(n):
        r = g.run(["systemd-run", "--quiet", "--wait", "--collect", "--unit", "cgstat-oomtest-%d" % i,
                   "-p", "MemoryMax=32M", "-p", "MemorySwapMax=0",
                   "python3", "-c", "b = bytearray(1 << 20) * 200"], timeout_s=120)
        assert r.rc != 0, r  # killed
    # removed: --collect garbage-collects the failed unit, its cgroup is gone
    assert g.sh("ls -d /sys/fs/cgroup/system.slice/cgstat-oomtest-* 2>/dev/null").out == ""

    def events():
        evs = [e for e in records(journal(g, "cgstat.service", mark))
               if e.get("type") == "event" and e.get("kind") == "oom_kill"]
        return evs if len([e for e in evs if "cgstat-oomtest" in json.dumps(e)]) >= n else None

    evs = wait_for(events, 60, every_s=2, what="%d oom_kill events" % n)
    ours = [e for e in evs if "cgstat-oomtest" in json.dumps(e)]
    names = sorted({u for e in ours for u in ["cgstat-oomtest-%d.service" % i for i in range(n)]
                    if u in json.dumps(e)})
    assert len(ours) == n, json.dumps(ours, indent=1)[:4000]
    assert names == ["cgstat-oomtest-%d.service" % i for i in range(n)], ours
    assert len({e["evidence"].get("pid") for e in ours}) == n  # none twice


@pytest.mark.guest_ci("trixie")
def test_serve_answers_scrapes(units):
    g = units
    try:
        g.run(["systemctl", "start", "cgstat-serve.service"], timeout_s=180, check=True)
        body = wait_for(lambda: (lambda r: r.out if r.rc == 0 and
                        "container_cpu_usage_seconds_total" in r.out else None)(
            g.run(["curl", "-sf", "http://127.0.0.1:17923/metrics"], timeout_s=60)), 90, every_s=1.0,
            what="a scrape")
    finally:
        g.run(["systemctl", "stop", "cgstat-serve.service"], timeout_s=120)
    lines = [line for line in body.splitlines() if line.startswith("container_cpu_usage_seconds_total{")]
    assert any('id="/system.slice/systemd-journald.service"' in line for line in lines), lines[:20]


def test_the_once_timer_keeps_state_across_two_firings(units):
    g = units
    g.put("/etc/systemd/system/cgstat-once.timer.d/fast.conf",
          "[Timer]\nOnCalendar=\nOnCalendar=*:*:0/20\n")
    mark = cursor(g)
    try:
        g.sh("systemctl daemon-reload && systemctl start cgstat-once.timer", check=True)

        def two():
            out = g.run(["journalctl", "-u", "cgstat-once.service", "--after-cursor", mark,
                         "-o", "cat", "--no-pager"]).out
            return out if out.count("Finished cgstat-once.service") >= 2 or \
                out.count("Deactivated successfully") >= 2 else None

        out = wait_for(two, 120, every_s=3, what="two firings")
    finally:
        g.sh("systemctl stop cgstat-once.timer; rm -rf /etc/systemd/system/cgstat-once.timer.d; "
             "systemctl daemon-reload")
    recs = [r for r in records(out) if r.get("cgroup") == "/system.slice/systemd-journald.service"]
    assert len(recs) >= 2, out[-3000:]
    # the first firing has no previous state: no rates; the second has them
    assert recs[0]["cpu"]["percent"] is None
    assert recs[1]["cpu"]["percent"] is not None
    assert 15 <= recs[1]["interval_s"] <= 45, recs[1]["interval_s"]
    st = g.sh("ls -l /var/lib/private/cgstat-once/", check=True).out
    assert "once.state" in st


@pytest.mark.guest_ci("trixie")
def test_the_dynamic_user_names_dockers_containers_from_their_0600_state(cgstat_service):
    from tests.guest.busybox import docker_image

    g = cgstat_service
    g.run(["systemctl", "start", "docker.service"], timeout_s=300, check=True)
    image = docker_image(g)
    cid = g.sh("docker run -d --name live-dyn --label role=dyn %s sleep 100000" % image,
               timeout_s=180, check=True).out.strip()
    try:
        # what the agent reads: root's, mode 0600; the agent is not root
        st = g.sh("stat -c '%%a %%U' /var/lib/docker/containers/%s/config.v2.json" % cid, check=True).out.split()
        assert st == ["600", "root"], st
        user = show(g, "cgstat.service", "User", "DynamicUser", "AmbientCapabilities")
        assert user["DynamicUser"] == "yes" and "cap_dac_read_search" in user["AmbientCapabilities"], user
        mark = cursor(g)
        rec = wait_for(lambda: [
            r for r in records(journal(g, "cgstat.service", mark))
            if r.get("type") == "cgroup" and (r.get("container") or {}).get("id") == cid],
            90, every_s=1.0, what="the container's record")[-1]
    finally:
        g.run(["docker", "rm", "-f", "live-dyn"], timeout_s=120)
    c = rec["container"]
    assert (c["runtime"], c["name"], c["image"], c["labels"]) == ("docker", "live-dyn", image, {"role": "dyn"}), c
    assert rec["cgroup"] == "/system.slice/docker-%s.scope" % cid


@pytest.mark.guest_ci("trixie")
def test_systemd_analyze_security_of_the_live_units(units):
    g = units
    try:
        g.run(["systemctl", "start", "cgstat.service", "cgstat-serve.service"], timeout_s=240, check=True)
        levels = {}
        for unit in ("cgstat.service", "cgstat-serve.service"):
            out = g.run(["systemd-analyze", "security", "--no-pager", unit], timeout_s=120).out
            m = re.search(r"Overall exposure level for %s: ([0-9.]+) (\w+)" % re.escape(unit), out)
            assert m, out[-2000:]
            levels[unit] = (float(m.group(1)), m.group(2))
    finally:
        g.run(["systemctl", "stop", "cgstat.service", "cgstat-serve.service"], timeout_s=120)
    g.security = levels
    print("systemd-analyze security (live):", levels)
    # the bound the shipped files meet offline (tests/unit/test_systemd_unit.py): the live
    # units, with their real properties, meet it too
    assert all(score <= 2.0 for score, _ in levels.values()), levels
