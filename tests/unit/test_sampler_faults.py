"""More bad input: v1 controller files, /proc files, runtime state JSON; races; EIO."""

import errno
import io
import json
import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgstat.naming.runtimes import cri, dockerconfig
from cgstat.naming.runtimes.entry import ContainerEntry
from cgstat.outputs import jsonl as sinks
from cgstat.diagnostics import Warner
from cgstat.pipeline.sampler import Sampler
from tests.helpers.contract import roundtrip, validate
from tests.helpers.synth import v1_cgroup, v1_host, v2_cgroup, v2_host, write

BAD = ["", "junk\n", "-1\n", f"{2**80}\n", b"\xff\xfe\x00", "1 2 3\n"]
V1_FEEDS = {
    "cpuacct.usage": [("cpu", "usage_seconds_total")],
    "cpuacct.stat": [("cpu", "user_seconds_total"), ("cpu", "system_seconds_total")],
    "cpu.cfs_quota_us": [("cpu", "limit_cores"), ("cpu", "quota_us")],
    "memory.usage_in_bytes": [("memory", "usage_bytes"), ("memory", "working_set_bytes")],
    "memory.limit_in_bytes": [("memory", "limit_bytes")],
    "memory.oom_control": [("memory", "oom_kills_total")],
    "blkio.throttle.io_service_bytes_recursive": [("io", "read_bytes_total"), ("io", "write_bytes_total")],
    "pids.current": [("pids", "current")],
}


def _records(root, **kw):
    agent = Sampler(root, all=True, warner=Warner(io.StringIO()), **kw)
    return {r["cgroup"]: r for r in (orjson.loads(x) for x in roundtrip(agent.tick()))}


def test_v1_good_values(tmp_path):
    root = str(tmp_path)
    v1_host(root)
    v1_cgroup(root, "/docker/x")
    rec = _records(root)["/docker/x"]
    validate(rec)
    assert rec["paths"] == {"cpu,cpuacct": "/docker/x", "memory": "/docker/x", "blkio": "/docker/x", "pids": "/docker/x"}
    assert rec["cpu"]["usage_seconds_total"] == 2.0 and rec["cpu"]["user_seconds_total"] == 1.5
    assert rec["cpu"]["limit_cores"] == 0.5 and rec["cpu"]["throttled_seconds_total"] == 0.25
    assert (rec["cpu"]["quota_us"], rec["cpu"]["period_us"]) == (50000, 100000)
    assert rec["memory"]["working_set_bytes"] == 104857600 - 20971520 and rec["memory"]["oom_kills_total"] == 1
    assert rec["io"]["write_bytes_total"] == 16777216 and rec["io"]["read_ops_total"] == 8
    assert [e["source"] for e in rec["errors"]] == ["pressure"]  # v1 has no PSI


@pytest.mark.parametrize("bad", BAD, ids=repr)
@pytest.mark.parametrize("name", sorted(V1_FEEDS))
def test_v1_corrupt_file(tmp_path, name, bad):
    root = str(tmp_path)
    v1_host(root)
    v1_cgroup(root, "/docker/x", {name: bad})
    rec = _records(root)["/docker/x"]
    validate(rec)
    if name == "cpu.cfs_quota_us" and bad == "-1\n":
        assert rec["cpu"]["limit_cores"] is None  # -1 is "no quota", not an error
        assert [e["source"] for e in rec["errors"]] == ["pressure"]
        return
    assert name in {e["source"] for e in rec["errors"]}, rec["errors"]
    for section, key in V1_FEEDS[name]:
        assert rec[section][key] is None
    assert rec["pids"]["limit"] == 50  # untouched


def test_v1_unlimited_sentinel_and_old_kernel_without_oom_kill(tmp_path):
    root = str(tmp_path)
    v1_host(root)
    v1_cgroup(root, "/docker/x", {"memory.limit_in_bytes": "9223372036854771712\n",
                                  "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
                                  "cpu.cfs_quota_us": "-1\n", "pids.max": "max\n"})
    rec = _records(root)["/docker/x"]
    assert rec["memory"]["limit_bytes"] is None and rec["cpu"]["limit_cores"] is None
    assert rec["pids"]["limit"] is None
    assert rec["memory"]["oom_kills_total"] is None
    assert {"source": "memory.oom_control", "error": "missing", "detail": "no oom_kill (kernel < 4.13)"} in rec["errors"]
    # with no limit, MEM % is over the host's memory, as docker stats does
    assert rec["memory"]["percent"] == pytest.approx((104857600 - 20971520) / (1048576 * 1024) * 100)


@pytest.mark.parametrize("proc_file,content", [
    ("proc/self/mountinfo", "garbage without separator\n"),
    ("proc/self/mountinfo", b"\xff\xfe"),
    ("proc/uptime", "not-a-number\n"),
    ("proc/meminfo", "MemTotal: lots\n"),
    ("proc/stat", "btime x\n"),
    ("proc/partitions", "\x00\x01"),
    ("sys/devices/system/cpu/online", "9-1\n"),
])
def test_bad_proc_files_never_escape(tmp_path, proc_file, content):
    root = str(tmp_path)
    v2_host(root)
    v2_cgroup(root, "/x")
    write(os.path.join(root, proc_file), content)
    rec = _records(root)["/x"]
    validate(rec)
    assert rec["cpu"]["usage_seconds_total"] == 2.0  # the cgroup's own files still count


def test_bad_proc_pid_cgroup_only_loses_the_join(tmp_path):
    root = str(tmp_path)
    v1_host(root)
    v1_cgroup(root, "/docker/x")
    # the workload's member, whose /proc/<pid>/cgroup is junk: joins fall back to equal paths
    write(os.path.join(root, "sys/fs/cgroup/cpu,cpuacct/docker/x/cgroup.procs"), "4242\n")
    write(os.path.join(root, "proc/4242/cgroup"), b"\xff junk")
    rec = _records(root)["/docker/x"]
    validate(rec)
    assert rec["paths"]["memory"] == "/docker/x" and rec["memory"]["usage_bytes"] == 104857600


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                       lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                       max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(doc=JSONISH)
def test_runtime_state_parsers_take_any_json(doc):
    for entry in (dockerconfig.entry_from_config(doc), cri.entry_from_spec(doc, "containerd"),
                  cri.entry_from_spec(doc, "cri-o")):
        if entry is None:
            continue
        assert isinstance(entry, ContainerEntry)
        assert all(v is None or isinstance(v, str) for v in (entry.runtime, entry.name, entry.image,
                                                              entry.k8s_container))
        assert entry.labels is None or all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in entry.labels.items())
        assert isinstance(entry.sandbox, bool)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docker=st.one_of(JSONISH.map(json.dumps), st.binary(max_size=40).map(lambda b: b.decode("latin-1"))),
       podman=st.one_of(JSONISH.map(json.dumps), st.text(max_size=40)))
def test_junk_runtime_state_files_give_unnamed_containers(tmp_path_factory, docker, podman):
    root = str(tmp_path_factory.mktemp("state"))
    v2_host(root)
    cid = "ab" * 32
    v2_cgroup(root, f"/system.slice/docker-{cid}.scope")
    write(os.path.join(root, f"var/lib/docker/containers/{cid}/config.v2.json"), docker)
    write(os.path.join(root, "var/lib/containers/storage/overlay-containers/containers.json"), podman)
    write(os.path.join(root, "etc/docker/daemon.json"), docker)
    rec = _records(root)[f"/system.slice/docker-{cid}.scope"]
    validate(rec)
    assert rec["container"]["id"] == cid and rec["container"]["runtime"] == "docker"


def test_cgroup_removed_while_being_read_is_dropped(tmp_path, monkeypatch):
    root = str(tmp_path)
    v2_host(root)
    v2_cgroup(root, "/x")
    v2_cgroup(root, "/y")
    agent = Sampler(root, all=True, warner=Warner(io.StringIO()))
    real = __import__("cgstat.kernel.controllers.files", fromlist=["read_text"]).read_text
    import shutil

    def racing_read(path):
        if "/x/" in path and os.path.isdir(os.path.join(root, "sys/fs/cgroup/x")):
            shutil.rmtree(os.path.join(root, "sys/fs/cgroup/x"))  # rmdir between listing and reading
        return real(path)

    monkeypatch.setattr("cgstat.kernel.controllers.files.read_text", racing_read)
    paths = [orjson.loads(line)["cgroup"] for line in roundtrip(agent.tick())]
    assert "/x" not in paths and "/y" in paths


def test_eio_truncates_the_partial_batch_and_retries(tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    sink = sinks.FileSink(str(out))
    sink.write_bytes(b'{"a":1}\n')
    real_write = os.write
    calls = {"n": 0}

    def flaky(fd, data):
        calls["n"] += 1
        if calls["n"] == 1:
            real_write(fd, bytes(data[:5]))  # half a line reaches the disk, then EIO
            raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", flaky)
    with pytest.raises(sinks.SinkError, match="Input/output error"):
        sink.write_bytes(b'{"b":2}\n{"c":3}\n')
    assert out.read_bytes() == b'{"a":1}\n'  # the half line was cut back
    sink.write_bytes(b'{"d":4}\n')  # next tick: the kept batch goes first
    assert out.read_bytes() == b'{"a":1}\n{"b":2}\n{"c":3}\n{"d":4}\n'


def test_wall_clock_jump_does_not_disturb_rates(monkeypatch):
    """Rates use CLOCK_BOOTTIME: a wall-clock step (NTP, date -s) moves `ts`, not interval_s."""
    import re
    import time as time_mod

    agent = Sampler("/", match=re.compile("^/$"), warner=Warner(io.StringIO()))
    agent.tick()
    time_mod.sleep(0.2)  # an interval long enough for a meaningful rate (no timing assertion)
    real_time = time_mod.time
    monkeypatch.setattr(time_mod, "time", lambda: real_time() - 86400)  # a day back
    (rec,) = [orjson.loads(x) for x in roundtrip(agent.tick())]
    assert 0.15 < rec["interval_s"] < 5
    assert rec["cpu"]["percent"] is not None and 0 <= rec["cpu"]["percent"] <= 100 * os.cpu_count()
    assert rec["ts"] < time_mod.strftime("%Y-%m-%dT%H:%M:%S", time_mod.gmtime(real_time() - 3600))


def test_sampler_records_one_at_a_time_are_the_tick_and_advance_only_when_taken(tmp_path):
    root = str(tmp_path)
    v2_host(root)
    for name in ("a", "b", "c"):
        v2_cgroup(root, "/" + name)
    agent = Sampler(root, all=True, warner=Warner(io.StringIO()))
    first = list(agent.records())
    listed = Sampler(root, all=True, warner=Warner(io.StringIO())).tick()
    assert [r["cgroup"] for r in first] == [r["cgroup"] for r in listed]
    assert all(r["interval_s"] is None for r in first)
    previous = agent.previous
    it = agent.records()
    next(it)
    it.close()  # a tick left half-way (the reader went away)
    assert agent.previous is previous
    assert __import__("gc").isenabled()  # the collector paused for the tick runs again
    assert len(list(agent.records())) == len(first)
    assert agent.previous is not previous and set(agent.previous) == {r["cgroup"] for r in first}


def test_an_unchanged_tree_is_not_classified_again_and_a_new_cgroup_is_selected(tmp_path):
    root = str(tmp_path)
    v2_host(root)
    v2_cgroup(root, "/app-1")
    v2_cgroup(root, "/other")
    agent = Sampler(root, match="app", warner=Warner(io.StringIO()))
    assert [r["cgroup"] for r in agent.tick()] == ["/app-1"]
    classified = agent._tree[1]
    assert [r["cgroup"] for r in agent.tick()] == ["/app-1"]
    assert agent._tree[1] is classified  # the same cgroups: nothing classified or selected again
    v2_cgroup(root, "/app-2")
    assert sorted(r["cgroup"] for r in agent.tick()) == ["/app-1", "/app-2"]
    assert agent._tree[1] is not classified
