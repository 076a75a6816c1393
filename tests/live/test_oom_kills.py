"""OOM kills on this machine's real cgroups and runc, end to end: `cgstat stream`, `once
--state` and `serve` over kills whose cgroup is removed at once (as runc does when a
container's init dies), kills in a cgroup's first second, and a folder named to forge
another container's report.

Other helpers' workloads run at the same time and the kernel log holds their kills too:
every assertion picks this test's kills by their PID and its cgroups by a random prefix.
The event's timing is counted in ticks (records of a "clock" cgroup in the same stream),
never in sleeps.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tests.helpers import realcg as R
from tests.helpers.contract import validate

pytestmark = [pytest.mark.realcg]
MiB = 1024 * 1024
KILLER = [sys.executable, "-c", "x = bytearray(200 << 20)"]  # past a 32 MiB limit: SIGKILL
COMM = os.path.basename(sys.executable)[:15]  # the killed process's name, as the kernel has it
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture(autouse=True)
def _kmsg_readable(realcg_env):
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("cannot read /dev/kmsg")


class Stream:
    """`cgstat ARGS` in the background, its JSON lines gathered as they come."""

    def __init__(self, *args: str):
        env = dict(os.environ, PYTHONPATH=R.REPO)
        self.proc = subprocess.Popen([sys.executable, "-m", "cgstat"] + list(args), cwd=R.REPO, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            obj = json.loads(line)
            with self._cond:
                self.lines.append(obj)
                self._cond.notify_all()

    def wait_for(self, pred, timeout=30.0):
        """The first line (after those seen) for which pred is true; None at the timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for obj in self.lines:
                    if pred(obj):
                        return obj
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return None
                self._cond.wait(left)

    def pause_after(self, pred, timeout=30.0):
        """The first line from now on for which pred is true; the agent is stopped (SIGSTOP) as
        it comes, its tick's reads done, so that what the test does before resume() is all
        in place when the next tick reads the machine."""
        start = self.mark()
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for obj in self.lines[start:]:
                    if pred(obj):
                        self.proc.send_signal(signal.SIGSTOP)
                        return obj
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, "no such line"
                self._cond.wait(left)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def mark(self) -> int:
        with self._cond:
            return len(self.lines)

    def ticks_after(self, mark: int, clock: str) -> int:
        """Records of the clock cgroup printed since mark: ticks that went by."""
        with self._cond:
            return sum(1 for r in self.lines[mark:] if r.get("type") == "cgroup" and r.get("cgroup") == clock)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.resume()  # a stopped process would not act on SIGTERM
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read().decode(errors="replace")


def kills_of(lines, pid):
    return [e for e in lines if e.get("type") == "event" and e.get("kind") == "oom_kill"
            and e["evidence"].get("pid") == pid]


def _event_within(stream: Stream, mark: int, clock: str, pid: int, ticks: int = 2):
    """The kill's event, and how many clock ticks had gone by when it came."""
    ev = stream.wait_for(lambda o: o.get("type") == "event" and o["evidence"].get("pid") == pid, 20)
    assert ev is not None, "no event for PID %d" % pid
    i = stream.lines.index(ev)
    went = sum(1 for r in stream.lines[mark:i] if r.get("type") == "cgroup" and r.get("cgroup") == clock)
    return ev, went


def _group(hier, stem):
    return R.TestGroup(hier, name="%s-%s" % (stem, secrets.token_hex(2)))


def _clock(hier, stem):
    g = R.TestGroup(hier, name=stem + "-clock")
    g.start(SLEEPER, stdout=subprocess.DEVNULL)  # a member: the join gives it one cgroup
    return g


def _settle(stream: Stream, clock: R.TestGroup):
    assert stream.wait_for(lambda o: o.get("cgroup") == clock.cgroup, 30) is not None, stream.stop()


def test_stream_kill_then_removal_is_one_event(realcg_env):
    stem = R.PREFIX + secrets.token_hex(3)
    clock = _clock(realcg_env, stem)
    g = _group(realcg_env, stem)
    s = Stream("stream", "--interval", "1", "--all", "--match", stem)
    try:
        g.set_memory_limit(32 * MiB)
        _settle(s, clock)
        mark = s.mark()
        p = g.start(KILLER, stdout=subprocess.DEVNULL)
        assert p.wait(60) == -9
        time.sleep(0.15)  # what runc leaves between its init's death and the cgroup's removal
        memory_path = g.rel("memory")
        g.destroy()
        ev, went = _event_within(s, mark, clock.cgroup, p.pid)
        # one more tick: no second event for the same kill
        assert s.wait_for(lambda o: s.ticks_after(mark, clock.cgroup) >= went + 2, 20) is not None
    finally:
        err = s.stop()
        g.destroy()
        clock.destroy()
    validate(ev)
    assert went <= 2, "the event came %d ticks after the kill" % went
    assert len(kills_of(s.lines, p.pid)) == 1, err
    e = ev["evidence"]
    assert (e["process"], e["kills"], e["limit_bytes"], e["memory_cgroup"]) == (COMM, 1, 32 * MiB, memory_path)
    assert e["cgroup_exists"] is False and e["source"] == "kernel_log"
    # named as the records named it: the memory cgroup's own record (it had no member to join)
    assert ev["cgroup"] in (g.cgroup, memory_path)
    assert "PID %d" % p.pid in ev["message"] and "32.0 MiB" in ev["message"]


def test_kill_in_a_cgroup_that_lives_on_and_in_its_first_second(realcg_env):
    stem = R.PREFIX + secrets.token_hex(3)
    clock = _clock(realcg_env, stem)
    old = _group(realcg_env, stem)
    old.set_memory_limit(32 * MiB)
    old.start(SLEEPER, stdout=subprocess.DEVNULL)
    s = Stream("stream", "--interval", "1", "--all", "--match", stem)
    new = None
    try:
        _settle(s, clock)
        assert s.wait_for(lambda o: o.get("cgroup") == old.cgroup, 20) is not None
        mark = s.mark()
        p_old = old.start(KILLER, stdout=subprocess.DEVNULL)
        # a cgroup made and killed in before any tick read it: its first sample already
        # counts the kill (no rise), and it lives on
        new = _group(realcg_env, stem)
        new.set_memory_limit(32 * MiB)
        new.start(SLEEPER, stdout=subprocess.DEVNULL)
        p_new = new.start(KILLER, stdout=subprocess.DEVNULL)
        assert p_old.wait(60) == -9 and p_new.wait(60) == -9
        for pid in (p_old.pid, p_new.pid):
            _, went = _event_within(s, mark, clock.cgroup, pid)
            assert went <= 2
        # three more ticks with both cgroups alive: the counters' rises add no event
        base = s.ticks_after(mark, clock.cgroup)
        assert s.wait_for(lambda o: s.ticks_after(mark, clock.cgroup) >= base + 3, 30) is not None
    finally:
        err = s.stop()
        old.destroy()
        if new is not None:
            new.destroy()
        clock.destroy()
    ours = [e for e in s.lines if e.get("kind") == "oom_kill" and e["evidence"].get("memory_cgroup")
            in (old.rel("memory"), new.rel("memory"))]
    assert sorted(e["evidence"]["pid"] for e in ours) == sorted([p_old.pid, p_new.pid]), (ours, err)
    assert all(e["evidence"]["cgroup_exists"] is True for e in ours)
    (rec,) = [r for r in s.lines if r.get("type") == "cgroup" and r.get("cgroup") == old.cgroup][-1:]
    assert rec["memory"]["oom_kills_total"] == 1 and rec["paths"]["memory"] == old.rel("memory")


def _docker_root():
    from cgstat.kernel.hostfs import HostFS
    from cgstat.naming.runtimes.daemons import Daemons

    return Daemons(HostFS("/")).docker_roots()[0]  # daemon.json's, else /var/lib/docker


class DockerState:
    """A Docker config.v2.json for a test container's ID (what dockerd keeps until `docker rm`),
    removed with every folder it had to make."""

    def __init__(self, cid: str, name: str):
        base = os.path.join(_docker_root(), "containers")
        self.made = []
        d = base
        for part in [None, cid]:
            if part is not None:
                d = os.path.join(d, part)
            if not os.path.isdir(d):
                os.makedirs(d)
                self.made.append(d)
        self.dir = os.path.join(base, cid)
        with open(os.path.join(self.dir, "config.v2.json"), "w") as f:
            json.dump({"ID": cid, "Name": "/" + name, "Config": {"Image": "busybox:oom-test", "Labels": {}}}, f)

    def remove(self):
        try:
            os.unlink(os.path.join(self.dir, "config.v2.json"))
        except FileNotFoundError:
            pass
        for d in reversed(self.made):
            try:
                os.rmdir(d)
            except OSError:
                pass
        self.made = []


def _wait_stopped(c, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.state().get("status") == "stopped":
            return
        time.sleep(0.02)
    raise AssertionError("container did not stop")


@pytest.mark.parametrize("seen", [False, True], ids=["killed-before-any-tick", "seen-alive-first"])
def test_runc_container_whose_init_is_oom_killed(realcg_env, make_container, seen):
    stem = R.PREFIX + secrets.token_hex(3)
    clock = _clock(realcg_env, stem)
    # init waits for /tmp/go, then becomes a dd that fills a 200 MiB buffer under a 32 MiB limit
    c = make_container(["sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.05; done; "
                                    "exec dd if=/dev/zero of=/dev/null bs=200M count=1"],
                       memory_limit=32 * MiB, parent=stem + "-ctr")
    name = "oom-job-" + secrets.token_hex(2)
    state = DockerState(c.id, name)
    s = Stream("stream", "--interval", "1", "--match", stem)
    # The agent is held (SIGSTOP) from just after a tick until the cgroup is gone: runc
    # removes it within milliseconds of the kill, and that must be so when the next tick
    # reads the log, however long the runc commands here take on a busy machine.
    try:
        _settle(s, clock)  # following the log
        if not seen:  # killed within milliseconds, before any tick reads the cgroup
            s.pause_after(lambda o: o.get("cgroup") == clock.cgroup)
            mark = s.mark()
            c.run()
            pid = c.pid  # (read before the kill: runc's state says 0 once the init is gone)
            open(os.path.join(c.bundle, "rootfs", "tmp", "go"), "w").close()
        if seen:
            c.run()
            pid = c.pid
            rec = s.pause_after(lambda o: o.get("type") == "cgroup" and (o.get("container") or {}).get("id") == c.id)
            assert rec["container"]["name"] == name
            state.remove()  # its state gone: the name it was seen with is kept
            mark = s.mark()
            open(os.path.join(c.bundle, "rootfs", "tmp", "go"), "w").close()
        _wait_stopped(c)
        time.sleep(0.15)
        c.rt.cmd("delete", c.id)  # what containerd's shim does when the init is gone: the cgroup goes
        c.started = False
        s.resume()
        ev, went = _event_within(s, mark, clock.cgroup, pid)
    finally:
        err = s.stop()
        state.remove()
        c.destroy()
        clock.destroy()
    validate(ev)
    assert went <= 2 and len(kills_of(s.lines, pid)) == 1, err
    e = ev["evidence"]
    assert (e["process"], e["limit_bytes"], e["cgroup_exists"]) == ("dd", 32 * MiB, False)
    assert e["memory_cgroup"] == c.rel("memory")
    assert ev["container"]["id"] == c.id and ev["container"]["runtime"] == "docker"
    assert ev["container"]["name"] == name
    assert e["named_by"] == ("seen" if seen else "state")
    if seen:
        assert ev["cgroup"] == c.rel("cpu")  # the record's path, through the join
    # its exit record (written in the tick that found it gone, before that tick's events)
    (x,) = [r for r in s.lines if r.get("type") == "exit" and r.get("cgroup") == ev["cgroup"]]
    validate(x)
    assert x["ended_by"] == "oom_kill" and x["container"]["id"] == c.id
    if seen:
        assert x["samples"] >= 1 and x["started"] is not None and x["cpu_seconds_total"] is not None
    else:  # gone before any tick read it: what the kernel log says
        assert x["samples"] == 0 and x["started"] is None and x["oom_kills_total"] == 1


def test_once_state_reports_a_kill_and_a_removal_between_runs(realcg_env, tmp_path):
    stem = R.PREFIX + secrets.token_hex(3)
    lives = _group(realcg_env, stem)
    goes = _group(realcg_env, stem)
    state = str(tmp_path / "state.json")
    try:
        for g in (lives, goes):
            g.set_memory_limit(32 * MiB)
            g.start(SLEEPER, stdout=subprocess.DEVNULL)
        first = R.cgstat("once", "--state", state, "--all", "--match", stem)
        assert not [e for e in first if e.get("type") == "event" and stem in str(e.get("cgroup"))]
        p_lives = lives.start(KILLER, stdout=subprocess.DEVNULL)
        p_goes = goes.start(KILLER, stdout=subprocess.DEVNULL)
        assert p_lives.wait(60) == -9 and p_goes.wait(60) == -9
        goes_memory = goes.rel("memory")
        goes.destroy()
        second = R.cgstat("once", "--state", state, "--all", "--match", stem)
        third = R.cgstat("once", "--state", state, "--all", "--match", stem)
    finally:
        lives.destroy()
        goes.destroy()
    for e in second:
        validate(e)
    assert [e["evidence"]["memory_cgroup"] for e in kills_of(second, p_goes.pid)] == [goes_memory]
    assert [e["evidence"]["cgroup_exists"] for e in kills_of(second, p_goes.pid)] == [False]
    assert len(kills_of(second, p_lives.pid)) == 1
    assert [e for e in second if e.get("kind") == "oom_kill" and e["evidence"]["source"] == "counter"] == []
    # the log position was kept: the next run reports them no more
    assert kills_of(third, p_lives.pid) == [] and kills_of(third, p_goes.pid) == []
    assert json.load(open(state))["kernel_log_seq"] > 0


def test_a_folder_named_to_forge_another_container(realcg_env, make_container):
    stem = R.PREFIX + secrets.token_hex(3)
    clock = _clock(realcg_env, stem)
    victim = make_container(["sleep", "600"], parent=stem + "-victim")
    victim.run()
    # <ours>,task_memcg=<the victim's memory path>,task=y: nested folders a delegated user could make
    forger = R.TestGroup(realcg_env, ("memory",), name=stem + "-f,task_memcg=")
    leaf = forger.path("memory") + victim.rel("memory") + ",task=y"
    s = Stream("stream", "--interval", "1", "--match", stem)
    try:
        os.makedirs(leaf)
        with open(os.path.join(leaf, "memory.limit_in_bytes"), "w") as f:
            f.write(str(32 * MiB))
        _settle(s, clock)
        victim_rec = s.wait_for(lambda o: (o.get("container") or {}).get("id") == victim.id, 30)
        assert victim_rec is not None
        mark = s.mark()
        p = subprocess.Popen([sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
                              "x = bytearray(200 << 20)", os.path.join(leaf, "cgroup.procs")])
        assert p.wait(60) == -9
        ev, went = _event_within(s, mark, clock.cgroup, p.pid)
    finally:
        s.stop()
        d = leaf
        while d != forger.path("memory"):
            if os.path.isdir(d):
                os.rmdir(d)
            d = os.path.dirname(d)
        forger.destroy()
        clock.destroy()
    forged = forger.rel("memory") + victim.rel("memory") + ",task=y"
    assert ev["evidence"]["memory_cgroup"] == forged
    assert ev["cgroup"] != victim_rec["cgroup"] and ev["container"] is None
    assert victim.id not in json.dumps(ev["container"])


def _scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:  # loopback only
        return r.read().decode()


def _oom_value(text, cgroup):
    for line in text.splitlines():
        if line.startswith('container_oom_events_total{id="%s"' % cgroup):
            return int(line.split("} ", 1)[1].split()[0])
    return None


def test_metrics_keep_a_gone_containers_oom_counter(realcg_env):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    stem = R.PREFIX + secrets.token_hex(3)
    clock = _clock(realcg_env, stem)
    seen = _group(realcg_env, stem)
    seen.set_memory_limit(32 * MiB)
    seen.start(SLEEPER, stdout=subprocess.DEVNULL)
    s = Stream("stream", "--interval", "1", "--all", "--match", stem, "--listen", "127.0.0.1:%d" % port)
    first = None
    try:
        rec = s.wait_for(lambda o: o.get("cgroup") == seen.rel("memory") or o.get("cgroup") == seen.cgroup, 30)
        assert rec is not None
        seen_id = rec["cgroup"]
        assert _oom_value(_scrape(port), seen_id) == 0
        p1 = seen.start(KILLER, stdout=subprocess.DEVNULL)
        # and one killed in its first second, never read alive
        first = _group(realcg_env, stem)
        first.set_memory_limit(32 * MiB)
        p2 = first.start(KILLER, stdout=subprocess.DEVNULL)
        assert p1.wait(60) == -9 and p2.wait(60) == -9
        first_memory = first.rel("memory")
        seen.destroy()
        first.destroy()
        for pid in (p1.pid, p2.pid):
            assert s.wait_for(lambda o: o.get("kind") == "oom_kill" and o["evidence"].get("pid") == pid, 20)
        mark = s.mark()
        assert s.wait_for(lambda o: s.ticks_after(mark, clock.cgroup) >= 2, 20) is not None
        text = _scrape(port)
    finally:
        s.stop()
        seen.destroy()
        if first is not None:
            first.destroy()
        clock.destroy()
    assert _oom_value(text, seen_id) == 1  # gone, kept at its last value plus the kill
    first_ev = [e for e in s.lines if e.get("kind") == "oom_kill" and e["evidence"].get("pid") == p2.pid][0]
    assert first_ev["cgroup"] == first_memory and _oom_value(text, first_memory) == 1  # appears at 1


def test_a_kill_outside_the_shown_set_is_an_event_named_as_its_record(realcg_env):
    """A plain v1 memory cgroup two levels below ours (no container, no unit, not matched)
    with a 50 MB limit: the default selection shows no record of it, and its kill is still
    an event, its cgroup named as `--all` names its record; `--oom-kills shown` leaves it out."""
    if not realcg_env.has("memory"):
        pytest.skip("no v1 memory hierarchy here")
    stem = R.PREFIX + secrets.token_hex(3)
    g = R.TestGroup(realcg_env, ("memory",), name=stem)
    inner = g.path("memory", "job")
    limit = 50 * 1000 * 1000
    killer = [sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
              "x = bytearray(200 << 20)", os.path.join(inner, "cgroup.procs")]
    every = shown = None
    try:
        os.mkdir(inner)
        with open(os.path.join(inner, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        (named,) = [r["cgroup"] for r in R.cgstat("once", "--all", "--match", stem + "/job", "--window", "0")
                    if r.get("type") == "cgroup"]
        every = Stream("stream", "--interval", "1")
        shown = Stream("stream", "--interval", "1", "--oom-kills", "shown")
        # both have read a tick (and follow the log)
        ready = [s.wait_for(lambda o: o.get("type") in ("cgroup", "pod"), 30) for s in (every, shown)]
        assert ready[0] is not None, every.stop()
        p = subprocess.Popen(killer)
        assert p.wait(60) == -9
        ev = every.wait_for(lambda o: o.get("kind") == "oom_kill" and o["evidence"].get("pid") == p.pid, 20)
        assert ev is not None, every.stop()
        assert ready[1] is not None, shown.stop()

        def read_since(o):  # two ticks of records stamped after the event: the log read since
            return len({r["ts"] for r in shown.lines if r.get("type") in ("cgroup", "pod") and r["ts"] > ev["ts"]}) >= 2

        assert shown.wait_for(read_since, 20) is not None
    finally:
        for s in (every, shown):
            if s is not None:
                s.stop()
        if os.path.isdir(inner):
            os.rmdir(inner)
        g.destroy()
    validate(ev)
    assert [r for r in every.lines if stem in str(r.get("cgroup")) and r.get("type") == "cgroup"] == []  # not shown
    assert ev["cgroup"] == named == g.rel("memory") + "/job" and ev["container"] is None
    e = ev["evidence"]
    assert (e["process"], e["kills"], e["source"], e["named_by"]) == (COMM, 1, "kernel_log", "live")
    assert e["memory_cgroup"] == named and e["limit_bytes"] == limit // 4096 * 4096
    assert "PID %d" % p.pid in ev["message"]
    assert kills_of(shown.lines, p.pid) == []
