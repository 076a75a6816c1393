"""Exit records with real cgroups: a group the test makes burns CPU, its process ends, the
group is removed while `cgstat stream` runs; the stream then has one `type: "exit"` record
of it whose CPU seconds are within 5 % of the kernel's own count (cpu.stat usage_usec /
cpuacct.usage read just before the removal), with its peak memory and how it ended."""

import json
import os
import subprocess
import sys
import time

import pytest

from cgstat.timestamps import parse_ts
from tests.helpers import realcg as R
from tests.helpers.contract import ROOT, validate

pytestmark = pytest.mark.realcg
REALCG_V2 = True

_BURN = "import time\nend = time.process_time() + float(__import__('sys').argv[1])\nwhile time.process_time() < end: pass\n"


def _stream_until_exit(g, count, on_record):
    """`cgstat stream` over the group until its exit record: (its records, its exit
    records). on_record(record, records so far) is called for each of the group's records."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    stream = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "0.5", "--count", str(count),
                               "--no-events", "--match", g.name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=ROOT, env=env)
    mine, exits = [], []
    try:
        for line in stream.stdout:
            rec = json.loads(line)
            if rec.get("cgroup") != g.cgroup:
                continue
            if rec["type"] == "exit":
                exits.append(rec)
                stream.terminate()  # SIGTERM: the line being written is finished, exit 0
                continue
            mine.append(rec)
            on_record(rec, mine)
    finally:
        _, err = stream.communicate(timeout=60)
    assert stream.returncode == 0, err.decode()
    return mine, exits


def test_a_removed_cgroup_gets_one_exit_record_with_its_cpu_seconds(make_group):
    g = make_group(("pids", "cpu", "cpuacct", "memory"))
    kernel = {}

    def on_record(rec, mine):
        if len(mine) == 1:
            g.start([sys.executable, "-c", _BURN, "1.5"]).wait(timeout=60)  # 1.5 s of CPU, then exits
            kernel["cpu"] = g.cpu_usage_seconds()  # the kernel's own count: nothing runs there now
            kernel["done"] = time.time()
        elif "done" in kernel and "gone" not in kernel and parse_ts(rec["ts"]) > kernel["done"] + 0.1:
            kernel["gone"] = True  # a record read after the process ended: removed now
            g.destroy()

    mine, exits = _stream_until_exit(g, 120, on_record)
    (e,) = exits
    validate(e)
    assert e["samples"] == len(mine) >= 2
    assert e["started"] == mine[0]["ts"] and e["last_seen"] == mine[-1]["ts"] and e["ended"] == e["ts"]
    assert e["ended_by"] == "exit" and e["oom_kills_total"] in (0, None)
    assert kernel["cpu"] >= 1.4
    assert abs(e["cpu_seconds_total"] - kernel["cpu"]) <= 0.05 * kernel["cpu"], (e["cpu_seconds_total"], kernel)
    assert e["cpu_seconds_total"] == mine[-1]["cpu"]["usage_seconds_total"]
    usage = [r["memory"]["usage_bytes"] for r in mine if r["memory"]["usage_bytes"] is not None]
    if mine[-1]["memory"]["peak_bytes"] is not None:
        assert e["memory_peak_source"] == "memory.peak" and e["memory_peak_bytes"] == mine[-1]["memory"]["peak_bytes"]
    elif usage:
        assert e["memory_peak_source"] == "highest_seen" and e["memory_peak_bytes"] == max(usage)
    else:  # this host nests the memory hierarchy elsewhere: the records had no memory figures either
        assert e["memory_peak_source"] is None and e["memory_peak_bytes"] is None
    assert e["container"] is None and e["gpu_seconds_total"] is None


_ALLOCATE = "x = bytearray(48 << 20)\nx[::4096] = b'x' * len(x[::4096])\n"  # 48 MiB touched, then exits


def test_a_workload_gone_before_its_first_read_has_its_memory_totals(make_group):
    """Its process ended before cgstat first read the group (a workload that lived less
    than a tick): no member says where its memory cgroup is, which on a host nesting the
    memory hierarchy elsewhere (this machine's own sandbox) is not at the group's path.
    The exit record still has the kernel's peak, from the folder of its path there."""
    g = make_group(("pids", "cpu", "cpuacct", "memory"))
    assert g.start([sys.executable, "-c", _ALLOCATE]).wait(timeout=60) == 0
    peak_file = "memory.peak" if R.Hierarchies().v2 else "memory.max_usage_in_bytes"
    try:
        kernel_peak = int(g.read("memory", peak_file))
    except OSError:  # a v2 kernel before memory.peak (5.19)
        kernel_peak = None
    mine, exits = _stream_until_exit(g, 60, lambda rec, mine: len(mine) == 2 and g.destroy())
    (e,) = exits
    validate(e)
    assert mine[0]["paths"]["memory"] == g.rel("memory")  # the group's own memory folder, wherever it is
    assert e["samples"] == len(mine) >= 2 and e["ended_by"] == "exit"
    assert e["oom_kills_total"] == 0
    if kernel_peak is not None:
        assert e["memory_peak_source"] == "memory.peak" and e["memory_peak_bytes"] == kernel_peak >= 48 << 20
    else:
        assert e["memory_peak_source"] == "highest_seen" and e["memory_peak_bytes"] is not None
