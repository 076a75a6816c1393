"""One oom_kill event per kill (cgstat/events/kills.py), the gone cgroups' OOM counters on
/metrics (cgstat/outputs/prometheus/retention.py OomRetention), and the v2 case on the recorded tree: the
kernel log the v2 recorder kept (meta/dmesg.txt) read through a Sampler on t0/t1."""

from __future__ import annotations

import os
import re

import pytest

from cgstat.kernel.kmsg import KmsgFollower
from cgstat.kernel.oom_report import OomReport
from cgstat.naming.oom_victims import NamedKill
from cgstat.outputs.prometheus import exposition as prometheus
from cgstat.outputs.prometheus import retention as prometheus_retention
from cgstat.events import EventDetector, judge_runs, state_extras
from tests.helpers.contract import validate

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V2 = os.path.join(TESTS, "fixtures", "v2-systemd")
MiB = 1024 * 1024
C_ID = "57534f8a7f6694f86b56549d0131882cbbc0979347bb7306d6d9882a8c590802"


def rec(path="/docker/abc", oom=0, interval=1.0, ws=10 * MiB, limit=32 * MiB, name="job"):
    return {"type": "cgroup", "ts": "2026-12-01T10:00:00.000Z", "host": "h", "cgroup": path,
            "interval_s": interval, "unit": None, "pod": None,
            "container": {"runtime": "docker", "id": "a" * 64, "short_id": "a" * 12, "name": name, "image": None,
                          "labels": None, "pod": None, "sandbox": False} if name else None,
            "memory": {"working_set_bytes": ws, "limit_bytes": limit, "oom_kills_total": oom}}


def report(pid, memcg, seq=1, summary=True):
    return OomReport(seq, 0, pid, "python3", 0, memcg if summary else None, memcg if summary else None,
                     "CONSTRAINT_MEMCG", False, 32 * MiB, 32 * MiB, 30 * MiB, 1 * MiB, 0, summary, False)


def kill(pid, path="/docker/abc", exists=True, named_by="live", summary=True, container=None):
    return NamedKill(report(pid, path, summary=summary), path if summary else None, container, None, None,
                     exists if summary else None, named_by if summary else "none", True)


def ooms(events):
    return [e for e in events if e["kind"] == "oom_kill"]


def test_a_kill_seen_in_the_log_and_the_counter_is_one_event():
    d = EventDetector()
    d.observe([rec(oom=0)])
    ev = d.observe([rec(oom=1)], kills=[kill(10)])
    for e in ev:
        validate(e)
    assert [(e["evidence"]["pid"], e["evidence"]["source"]) for e in ooms(ev)] == [(10, "kernel_log")]
    # the counter that rises only on the next tick (the kill came between the cgroup's read
    # and the log's) takes the log's word for it
    d = EventDetector()
    d.observe([rec(oom=0)])
    assert len(ooms(d.observe([rec(oom=0)], kills=[kill(11)]))) == 1
    assert ooms(d.observe([rec(oom=1)])) == []
    # and the other way round
    d = EventDetector()
    d.observe([rec(oom=0)])
    assert [e["evidence"]["source"] for e in ooms(d.observe([rec(oom=1)]))] == ["counter"]
    assert ooms(d.observe([rec(oom=1)], kills=[kill(12)])) == []


def test_twenty_kills_in_one_tick_are_twenty():
    d = EventDetector()
    d.observe([rec(oom=0)])
    ev = ooms(d.observe([rec(oom=20)], kills=[kill(100 + i) for i in range(20)]))
    assert sorted(e["evidence"]["pid"] for e in ev) == list(range(100, 120))
    assert all(e["evidence"]["kills"] == 1 for e in ev)


def test_storm_kills_take_their_cgroup_from_the_counter():
    d = EventDetector()
    d.observe([rec(oom=0)])
    # 13 reports named the cgroup, 7 were rate-limited away: 20 kills counted
    named = [kill(100 + i) for i in range(13)]
    bare = [kill(200 + i, summary=False) for i in range(7)]
    ev = ooms(d.observe([rec(oom=20)], kills=named + bare))
    assert len(ev) == 20
    paired = [e for e in ev if e["evidence"]["source"] == "kernel_log+counter"]
    assert sorted(e["evidence"]["pid"] for e in paired) == list(range(200, 207))
    assert all(e["cgroup"] == "/docker/abc" and e["container"]["name"] == "job" for e in paired)
    # a bare kill with no counter to pair with: its own event, cgroup null
    d = EventDetector()
    ev = ooms(d.observe([], kills=[kill(300, summary=False)]))
    assert [(e["cgroup"], e["evidence"]["pid"]) for e in ev] == [(None, 300)]
    assert "rate-limited" in ev[0]["message"]
    validate(ev[0])


def test_a_kill_of_a_gone_cgroup_and_of_one_never_seen():
    d = EventDetector()
    d.observe([rec(oom=0)])
    gone = kill(7, "/docker/abc", exists=False, named_by="seen", container=rec()["container"])
    never = kill(8, "/docker/" + "b" * 64, exists=False, named_by="path")
    ev = ooms(d.observe([], kills=[gone, never]))
    assert [(e["cgroup"], e["evidence"]["cgroup_exists"], e["evidence"]["named_by"]) for e in ev] == [
        ("/docker/abc", False, "seen"), ("/docker/" + "b" * 64, False, "path")]
    assert ev[0]["container"]["name"] == "job" and "The cgroup is gone." in ev[0]["message"]
    assert "PID 7" in ev[0]["message"] and "32.0 MiB" in ev[0]["message"]


def test_v2_parents_count_their_childrens_kills_once():
    # memory.events is hierarchical on v2: the pod's counter rises with its container's
    d = EventDetector()
    d.observe([rec("/kubepods/pod1", oom=0, name=None), rec("/kubepods/pod1/c1", oom=0)])
    ev = ooms(d.observe([rec("/kubepods/pod1", oom=1, name=None), rec("/kubepods/pod1/c1", oom=1)],
                        kills=[kill(5, "/kubepods/pod1/c1")]))
    assert [(e["cgroup"], e["evidence"]["pid"]) for e in ev] == [("/kubepods/pod1/c1", 5)]
    # the container gone before the tick: the pod's rise is its kill, told once
    d = EventDetector()
    d.observe([rec("/kubepods/pod1", oom=0, name=None)])
    ev = ooms(d.observe([rec("/kubepods/pod1", oom=1, name=None)],
                        kills=[kill(6, "/kubepods/pod1/c2", exists=False, named_by="path")]))
    assert [(e["cgroup"], e["evidence"]["pid"]) for e in ev] == [("/kubepods/pod1/c2", 6)]


def test_two_runs_report_the_log_kills_in_between():
    prev = state_extras([rec("/docker/a", oom=1), rec("/docker/b", oom=0)])
    now = [rec("/docker/a", oom=2, interval=300.0)]  # b is gone
    ev = ooms(judge_runs(prev, now, kills=[kill(1, "/docker/a"), kill(2, "/docker/b", exists=False, named_by="path")]))
    assert sorted((e["cgroup"], e["evidence"]["pid"]) for e in ev) == [("/docker/a", 1), ("/docker/b", 2)]
    # without a readable log the counter still tells the kill of the one that lives on
    ev = ooms(judge_runs(prev, now))
    assert [(e["cgroup"], e["evidence"]["kills"], e["evidence"]["source"]) for e in ev] == [("/docker/a", 1, "counter")]


# -- /metrics ----------------------------------------------------------------------------------

def _oom_series(text: bytes):
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        rb'^container_oom_events_total\{id="([^"]*)"[^}]*\} (\d+)', text, re.M)}


def test_retention_keeps_a_gone_cgroups_counter():
    ret = prometheus_retention.OomRetention(keep_s=900)
    a, b = rec("/docker/a", oom=0), rec("/docker/b", oom=2)
    assert ret.update([a, b], [], 0.0) == []
    # b's kill and removal in one tick: the log tells it, the counter is gone with it
    kept = ret.update([a], [kill(9, "/docker/b", exists=False, named_by="seen")], 1.0)
    text = prometheus.render([a], retained=kept)
    assert _oom_series(text) == {b"/docker/a": 0, b"/docker/b": 3}
    assert b'name="job"' in text  # the labels it had
    # killed in its first second, never read: appears at 1
    kept = ret.update([a], [kill(10, "/docker/c", exists=False, named_by="path")], 2.0)
    assert _oom_series(prometheus.render([a], retained=kept)) == {b"/docker/a": 0, b"/docker/b": 3, b"/docker/c": 1}
    # a kill of a live cgroup is its own counter's, never added
    kept = ret.update([a], [kill(11, "/docker/a")], 3.0)
    assert _oom_series(prometheus.render([a], retained=kept))[b"/docker/a"] == 0
    # kept 900 s after the last word, then gone; a cgroup that comes back drops its copy
    assert {lab for lab, _ in ret.update([a], [], 901.5)} == {l for l, _ in kept if "/docker/c" in l}
    assert ret.update([a, rec("/docker/c", oom=0)], [], 902.0) == []


# -- v2, on the recorded tree -----------------------------------------------------------------------

def dmesg_records(path):
    """dmesg's lines as /dev/kmsg records ('[ 5.218119] text' -> '6,<n>,5218119,-;text')."""
    out = []
    for n, line in enumerate(open(path, encoding="utf-8", errors="replace")):
        m = re.match(r"^\[\s*(\d+)\.(\d{6})\] (.*)$", line.rstrip("\n"))
        if m:
            text = "".join("\\x%02x" % b if b < 0x20 or b >= 0x7f or b == 0x5c else chr(b)
                           for b in m.group(3).encode())
            out.append(b"6,%d,%d,-;%s\n" % (n, int(m.group(1)) * 1000000 + int(m.group(2)), text.encode()))
    return out


@pytest.mark.parametrize("snapshot", ["t0", "t1"])
def test_v2_recorded_kill_named_through_the_tree(snapshot):
    from cgstat.pipeline.sampler import Sampler

    raws = iter(dmesg_records(os.path.join(V2, "meta", "dmesg.txt")))

    def one():
        try:
            return next(raws)
        except StopIteration:
            raise BlockingIOError from None

    s = Sampler(os.path.join(V2, snapshot), gpu=False, follow=False, kernel_log=KmsgFollower(read_one=one))
    d = EventDetector()
    records = s.tick()
    ev = ooms(d.observe(records, kills=s.kills))
    s.close()
    # C (/redis-cache) was OOM-killed once before t0: memory.events says oom_kill 1 in it and
    # in system.slice (hierarchical), a first sample (no rise); the log names the process
    assert len(ev) == 1, ev
    e = ev[0]
    validate(e)
    assert e["cgroup"] == "/system.slice/docker-%s.scope" % C_ID
    assert e["container"]["name"] == "redis-cache" and e["container"]["id"] == C_ID
    ev_ = e["evidence"]
    assert (ev_["pid"], ev_["process"], ev_["limit_bytes"], ev_["usage_bytes"]) == (242, "dd", 32 * MiB, 32 * MiB)
    assert (ev_["shmem_rss_bytes"], ev_["named_by"], ev_["cgroup_exists"]) == (1580 * 1024, "live", True)
    (c,) = [r for r in records if r["cgroup"] == e["cgroup"]]
    assert c["memory"]["oom_kills_total"] == 1  # the counter and the log: one event


def test_v2_memory_events_read_as_it_changes_before_the_cgroup_goes(tmp_path):
    """v2: a watch on memory.events (IN_MODIFY, as cgroup_file_notify sends it) reads the
    count the moment it changes; the kill is told when its cgroup is gone by the next tick,
    without the kernel log. The recorded tree, copied; the kernel's write played by ours."""
    import shutil
    import time

    from cgstat.pipeline.sampler import Sampler

    root = tmp_path / "host"
    shutil.copytree(os.path.join(V2, "t0"), root, symlinks=True)
    folder = root / "sys/fs/cgroup/system.slice" / ("docker-%s.scope" % C_ID)
    s = Sampler(str(root), gpu=False, follow=True)
    assert s.watch_memory_events()
    d = EventDetector()
    ret = prometheus_retention.OomRetention()
    try:
        first = s.tick()
        ret.update(first, [], 0.0)
        assert ooms(d.observe(first, kills=s.kills, late=s.late_counts)) == []
        (c,) = [r for r in first if r["cgroup"].endswith(C_ID + ".scope")]
        assert c["memory"]["oom_kills_total"] == 1
        text = (folder / "memory.events").read_text()
        (folder / "memory.events").write_text(text.replace("oom_kill 1", "oom_kill 2"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not s._memevents._seen:  # the watcher's thread read it
            time.sleep(0.01)
        shutil.rmtree(folder)  # and the cgroup goes before the next tick
        second = s.tick()
        ev = ooms(d.observe(second, kills=s.kills, late=s.late_counts))
        kept = ret.update(second, s.kills, 1.0, s.late_counts)
    finally:
        s.close()
    assert not [r for r in second if r["cgroup"] == c["cgroup"]]
    assert len(ev) == 1, ev
    validate(ev[0])
    e = ev[0]
    assert (e["cgroup"], e["container"]["name"]) == (c["cgroup"], "redis-cache")
    assert (e["evidence"]["kills"], e["evidence"]["oom_kills_total"], e["evidence"]["cgroup_exists"]) == (1, 2, False)
    assert e["evidence"]["source"] == "counter" and e["evidence"]["limit_bytes"] == 32 * MiB
    # /metrics keeps it at the count read before it went
    assert _oom_series(prometheus.render(second, retained=kept))[c["cgroup"].encode()] == 2


def test_a_recorded_host_root_has_no_kernel_log_and_says_nothing():
    import io

    from cgstat.diagnostics import Warner
    from cgstat.pipeline.sampler import Sampler

    err = io.StringIO()
    s = Sampler(os.path.join(V2, "t1"), gpu=False, follow=True, warner=Warner(stream=err))
    try:
        assert not s.follow_kernel_log()
        s.tick()
        assert s.kernel_log_seq is None and s.kills == []  # not this kernel's boot: its log is not the recording's
    finally:
        s.close()
    assert "kmsg" not in err.getvalue()


def test_a_kill_from_the_log_carries_the_kernels_own_time():
    import time

    from cgstat.timestamps import parse_ts

    k = kill(13)
    usec = int(time.monotonic() * 1e6) - 2_500_000  # logged 2.5 s ago on the kernel's clock
    k = k._replace(report=k.report._replace(usec=usec))
    d = EventDetector()
    d.observe([rec(oom=0)])
    (e,) = ooms(d.observe([rec(oom=1)], kills=[k]))
    validate(e)
    assert abs(parse_ts(e["evidence"]["kernel_ts"]) - (time.time() - 2.5)) < 0.05
