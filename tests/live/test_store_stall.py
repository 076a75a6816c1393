"""The store off the tick's thread: with every fsync/fdatasync of the process stalled 3 s
(strace's fault injection), `stream --interval 1 --store DIR` still makes a tick every
second and writes it to stdout as it comes; every tick reaches the store once the disk
catches up; the lag is said once.

What is checked is the spacing of the ticks' own timestamps and of their arrival on
stdout (a tick thread waiting on the disk would make them 3 s or more apart), never a
sleep."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers.contract import ROOT

STALL_US = 3_000_000
TICKS = 6

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


def test_a_stalled_disk_delays_no_tick_and_loses_none(tmp_path):
    store = str(tmp_path / "store")
    env = dict(os.environ)
    env.pop("CGSTAT_HOST_ROOT", None)
    proc = subprocess.Popen(
        ["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", "-e", "trace=fdatasync,fsync",
         "-e", f"inject=fdatasync,fsync:delay_enter={STALL_US}",
         sys.executable, "-m", "cgstat", "stream", "--all", "--interval", "1", "--count", str(TICKS),
         "--store", store], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    try:
        lines, arrived = [], []
        for line in proc.stdout:
            lines.append(line)
            if json.loads(line).get("cgroup") == "/":  # one root record a tick (--all)
                arrived.append(time.monotonic())
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=TICKS * STALL_US / 1e6 + 60) == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stamps = [json.loads(x)["ts"] for x in lines if json.loads(x).get("cgroup") == "/"]
    assert len(stamps) == len(arrived) == TICKS
    made = [_seconds(ts) for ts in stamps]
    # a tick every second: made on time, and out on stdout as it was made
    assert all(0.5 < b - a < 2.0 for a, b in zip(made, made[1:])), stamps
    assert all(b - a < 2.0 for a, b in zip(arrived, arrived[1:])), arrived
    # the store has every tick, as stdout has it, once the disk caught up
    dump = subprocess.run([sys.executable, "-m", "cgstat", "dump", "--store", store, "--since", "10min ago"],
                          capture_output=True, cwd=ROOT, env=env, timeout=60)
    assert dump.returncode == 0, dump.stderr
    assert dump.stdout == b"".join(lines)
    said = [x for x in err.splitlines() if "behind" in x]
    assert len(said) == 1 and said[0].startswith(f"cgstat: the store {store} is behind: "), err
    assert "dropped" not in err


def _seconds(ts):
    from cgstat.timestamps import parse_ts

    return parse_ts(ts)
