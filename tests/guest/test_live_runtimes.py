"""Docker 26 with its systemd cgroup driver, live in the guest, side by side with `docker
stats`; a container OOM-killed then removed, named in its event."""
from __future__ import annotations

import calendar
import json
import re
import time

import pytest

from tests.live.test_docker_real import _mismatches  # the host test's comparison, as is

IMAGE = "cgstat-live-busybox:1"
APPLETS = "sh sleep dd cat head true ls mkdir"


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def docker(guest):
    t0 = time.monotonic()
    guest.run(["systemctl", "start", "docker.service"], timeout_s=300, check=True)
    info = json.loads(guest.run(["docker", "info", "--format", "{{json .}}"], timeout_s=60, check=True).out)
    guest.sh("set -e; d=$(mktemp -d); mkdir -p $d/bin $d/tmp $d/proc $d/sys $d/dev $d/etc; "
             "cp /bin/busybox $d/bin/; for a in %s; do ln -s busybox $d/bin/$a; done; "
             "tar -C $d -c . | docker import - %s >/dev/null; rm -rf $d" % (APPLETS, IMAGE),
             timeout_s=180, check=True)
    guest.times["docker_start_s"] = round(time.monotonic() - t0, 1)
    yield guest, info
    guest.sh("docker rm -f $(docker ps -aq) >/dev/null 2>&1; true", timeout_s=120)


def _rfc3339_s(text):
    """Docker's RFC 3339 times (UTC, nanoseconds) as epoch seconds."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    assert m, text
    offset = 0 if m.group(3) == "Z" else (int(m.group(3)[:3]) * 60 + int(m.group(3)[0] + m.group(3)[4:])) * 60
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + float("0." + (m.group(2) or "0")) - offset


def _docker_cpu_over_wall(g, cid):
    """Docker's own CPU figures over its own wall clock: (percent, share of that time the
    host's /proc/stat counted).

    docker stats divides the container's CPU delta by /proc/stat's (moby's
    calculateCPUPercentUnix: cpuDelta / systemDelta x online CPUs); /proc/stat counts timer
    ticks, and a guest under emulation on a busy host loses ticks, so its delta falls short
    of the time that passed and the percent reads high (a 0.5-core quota seen at 64-105 %).
    The same API sample's own timestamps give the container's CPU over the real time.
    """
    raw = json.loads(g.sh("curl -s --unix-socket /run/docker.sock "
                          "'http://localhost/containers/%s/stats?stream=false'" % cid, timeout_s=60, check=True).out)
    cur, pre = raw["cpu_stats"], raw["precpu_stats"]
    wall_s = _rfc3339_s(raw["read"]) - _rfc3339_s(raw["preread"])
    container_s = (cur["cpu_usage"]["total_usage"] - pre["cpu_usage"]["total_usage"]) / 1e9
    system_s = (cur["system_cpu_usage"] - pre["system_cpu_usage"]) / 1e9 / cur["online_cpus"]
    return container_s / wall_s * 100, system_s / wall_s


# Debian's docker.io: 26.1 in Debian 13, 20.10 in Debian 12
DOCKER_VERSION = {"trixie": "26.", "bookworm": "20.10."}


@pytest.mark.guest_ci("trixie", "bookworm-v1")
def test_docker_uses_the_systemd_driver(docker):
    g, info = docker
    want = "2" if g.layout == "v2" else "1"
    assert info["CgroupDriver"] == "systemd" and info["CgroupVersion"] == want, info
    assert info["ServerVersion"].startswith(DOCKER_VERSION[g.suite]), info["ServerVersion"]


@pytest.mark.guest_ci("trixie", "bookworm-v1")
def test_side_by_side_with_docker_stats(docker):
    g, _ = docker
    runs = {
        "cpu": "--cpus 0.5 --pids-limit 32 --memory 64m %s sh -c 'while :; do :; done'",
        "mem": "--memory 128m %s sh -c 'dd if=/dev/zero of=/dev/shm/f bs=1M count=32 2>/dev/null; sleep 100000'",
        # a limit on each: docker stats shows the host's memory for a container without one,
        # where cgstat says null (unlimited)
        "pids": "--memory 64m %s sh -c 'sleep 100000 & sleep 100000 & sleep 100000 & wait'",
    }
    ids = {}
    for role, args in runs.items():
        r = g.sh("docker run -d --name live-%s --label role=%s %s" % (role, role, args % IMAGE),
                 timeout_s=180, check=True)
        ids[role] = r.out.strip()
    time.sleep(3)  # the dd done, the burner at its quota (not a timing assertion)
    last = None
    cpu_note = None
    for attempt in range(5):
        # as the host test: cgstat streams half-second ticks over the time docker stats
        # takes its two samples; the CPU windows must agree within 15 % (TCG is jittery)
        r = g.sh("cgstat stream --interval 0.5 --count 7 --no-events > /tmp/s.jsonl & "
                 "docker stats --no-stream --format '{{json .}}' > /tmp/d.jsonl; wait",
                 timeout_s=180, check=True)
        ticks = records(g.get("/tmp/s.jsonl").decode())
        stats = {row["ID"]: row for row in records(g.get("/tmp/d.jsonl").decode())}
        by_id = {t["container"]["id"]: t for t in ticks if t.get("container")}
        problems = {}
        for role, cid in ids.items():
            rec = by_id.get(cid)
            assert rec is not None, (role, sorted(t["cgroup"] for t in ticks))
            bad = [b for b in _mismatches(rec, stats[cid[:12]]) if not b.startswith("net")]
            if role == "cpu":
                theirs = float(stats[cid[:12]]["CPUPerc"].rstrip("%"))
                ours = [t["cpu"]["percent"] for t in ticks if t.get("container") and t["container"]["id"] == cid]
                windows = [(a + b) / 2 for a, b in zip(ours, ours[1:]) if a is not None and b is not None]
                if not any(abs(w - theirs) <= 0.15 * theirs for w in windows):
                    over_wall, counted = _docker_cpu_over_wall(g, cid)
                    # docker stats' one sample divides by /proc/stat's delta, whose lost ticks
                    # vary from sample to sample in an emulated guest (a re-sample's share
                    # need not be the one docker stats had): docker's own usage counter over
                    # its API timestamps is the figure both are judged by then
                    explained = any(abs(w - over_wall) <= 0.15 * over_wall for w in windows)
                    cpu_note = {"docker_stats": theirs, "docker_over_wall": round(over_wall, 1),
                                "proc_stat_counted": round(counted, 2), "cgstat_windows": windows}
                    if not explained:
                        bad.append("cpu %s" % cpu_note)
            if bad:
                problems[role] = bad
        last = problems
        if not problems:
            break
    side = {role: {"cgstat": {"cpu%": by_id[cid]["cpu"]["percent"], "mem": by_id[cid]["memory"]["working_set_bytes"],
                              "pids": by_id[cid]["pids"]["current"]},
                   "docker": {k: stats[cid[:12]][k] for k in ("CPUPerc", "MemUsage", "PIDs")}}
            for role, cid in ids.items()}
    if cpu_note is not None:
        side["cpu"]["docker_cpu_ticks_lost"] = cpu_note
    g.side_by_side = side
    print(json.dumps(side, indent=1))
    assert not last, (last, side)
    for role, cid in ids.items():
        rec = by_id[cid]
        c = rec["container"]
        assert c["runtime"] == "docker" and c["name"] == "live-" + role
        assert c["image"] == IMAGE and c["labels"] == {"role": role}
        # the systemd driver's layout: a scope per container in system.slice
        assert rec["cgroup"] == "/system.slice/docker-%s.scope" % cid, rec["cgroup"]
    assert by_id[ids["cpu"]]["cpu"]["limit_cores"] == 0.5
    assert by_id[ids["cpu"]]["pids"]["limit"] == 32
    assert by_id[ids["mem"]]["memory"]["limit_bytes"] == 128 << 20
    assert by_id[ids["mem"]]["memory"]["working_set_bytes"] >= 30 << 20
    assert by_id[ids["pids"]]["pids"]["current"] == 4


@pytest.mark.guest_ci("trixie", "bookworm-v1")
def test_oom_killed_and_removed_container_is_named(docker):
    g, _ = docker
    g.run(["systemctl", "start", "cgstat.service"], timeout_s=180)  # the shipped unit, if installed
    active = g.run(["systemctl", "is-active", "cgstat.service"]).out.strip() == "active"
    if not active:
        g.sh("install -m 0644 /opt/job/src/systemd/cgstat.service /opt/job/src/systemd/cgstat-kmsg.socket "
             "/etc/systemd/system/ && systemctl daemon-reload && systemctl start cgstat.service",
             timeout_s=180, check=True)
    mark = g.run(["journalctl", "-n", "0", "--show-cursor", "--no-pager"]).out.strip().rsplit("cursor: ", 1)[-1]
    r = g.sh("docker run --name live-oom --memory 32m --memory-swap 32m %s "
             "sh -c 'dd if=/dev/zero of=/dev/shm/f bs=1M count=200'; echo rc=$?; docker rm live-oom" % IMAGE,
             timeout_s=180)
    assert "rc=137" in r.out, r
    deadline = time.monotonic() + 60
    ours = []
    while time.monotonic() < deadline and not ours:
        out = g.run(["journalctl", "-u", "cgstat.service", "--after-cursor", mark, "-o", "cat", "--no-pager"]).out
        ours = [e for e in records(out) if e.get("kind") == "oom_kill" and "live-oom" in json.dumps(e)]
        time.sleep(2)
    g.run(["systemctl", "stop", "cgstat.service"], timeout_s=120)
    assert len(ours) == 1, out[-4000:]
    assert ours[0]["container"]["name"] == "live-oom", ours[0]
