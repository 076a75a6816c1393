"""The flight recorder around a real OOM kill: `stream --store` over a cgroup whose
process burns CPU and is then killed at its memory limit, the cgroup then removed; the
minute before the kill read back from the store (`dump`, `replay`) is what the stream
wrote, and the store's exit record of the cgroup has its totals (CPU within 5 % of the
kernel's own count, the kill)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest

from cgstat.timestamps import parse_ts
from tests.helpers import realcg as R
from tests.live.test_oom_kills import Stream, _clock, _group, _settle

pytestmark = [pytest.mark.realcg]
MiB = 1024 * 1024
# a second of CPU, then past a 32 MiB limit: SIGKILL
BURN_THEN_GROW = [sys.executable, "-c",
                  "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
                  "x = bytearray(200 << 20)"]


def _cgstat(*args: str) -> list:
    out = subprocess.run([sys.executable, "-m", "cgstat", *args], cwd=R.REPO, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_the_minute_before_an_oom_kill_replays_as_stream_wrote_it(realcg_env, tmp_path):
    stem = R.PREFIX + secrets.token_hex(3)
    clock = _clock(realcg_env, stem)
    g = _group(realcg_env, stem)
    store = str(tmp_path / "store")
    s = Stream("stream", "--interval", "1", "--all", "--match", stem, "--store", store, "--retain", "1h")
    try:
        g.set_memory_limit(32 * MiB)
        _settle(s, clock)
        p = g.start(BURN_THEN_GROW, stdout=subprocess.DEVNULL)
        assert p.wait(60) == -9
        ev = s.wait_for(lambda o: o.get("type") == "event" and o.get("kind") == "oom_kill"
                        and o["evidence"].get("pid") == p.pid, 30)
        assert ev is not None, "no oom_kill event"
        kernel_cpu = g.cpu_usage_seconds()  # the kernel's own count: nothing runs there now
        g.destroy()  # gone after the kill's tick (as runc removes it): its exit record comes next
        exit_record = s.wait_for(lambda o: o.get("type") == "exit" and o.get("cgroup") == g.cgroup, 30)
        assert exit_record is not None, "no exit record"
        # two more ticks of the clock, so that the exit record's tick is in the store
        n = s.mark()
        assert s.wait_for(lambda o: s.ticks_after(n, clock.cgroup) >= 2, 20) is not None
    finally:
        err = s.stop()
        g.destroy()
        clock.destroy()
    assert "Traceback" not in err
    ticks = sorted({r["ts"] for r in s.lines if r.get("cgroup") == clock.cgroup})
    # everything: the stream's lines from its first tick to its last, the kill's event in them
    # (a tick is found by its first record's time)
    dumped = _cgstat("dump", "--store", store, "--since", s.lines[0]["ts"], "--until", ticks[-1])
    assert dumped == s.lines[: len(dumped)] and ev in dumped and exit_record in dumped
    # the workload's totals, from the store
    (kept,) = [r for r in dumped if r.get("type") == "exit" and r.get("cgroup") == g.cgroup]
    counted = [r for r in dumped if r.get("type") == "cgroup" and r.get("cgroup") == g.cgroup
               and r["memory"]["oom_kills_total"] is not None]
    if counted:  # where its memory cgroup was joined to its record (v2; v1 while a member lives)
        assert kept["ended_by"] == "oom_kill" and kept["oom_kills_total"] >= 1, kept
        assert kept["memory_peak_bytes"] is not None and kept["memory_peak_bytes"] <= 33 * MiB
    assert kernel_cpu >= 0.9
    assert abs(kept["cpu_seconds_total"] - kernel_cpu) <= 0.05 * kernel_cpu, (kept["cpu_seconds_total"], kernel_cpu)
    # the minute before the kill (whole ticks, found by their first record's time)
    kill_at = next(r["ts"] for r in reversed(s.lines[: s.lines.index(ev)]) if r.get("cgroup") == clock.cgroup)
    since = max(parse_ts(ticks[0]), parse_ts(kill_at) - 60)
    minute = _cgstat("dump", "--store", store, "--since", repr(since), "--until", kill_at)
    start = s.lines.index(minute[0])
    assert minute == s.lines[start:start + len(minute)] and any(r.get("cgroup") == g.cgroup for r in minute)
    # the tick before the kill's, replayed alone
    before = [t for t in ticks if t < kill_at][-1]
    replayed = _cgstat("replay", "--store", store, "--at", before)
    start = next(i for i, r in enumerate(s.lines) if r == replayed[0])
    assert s.lines[start:start + len(replayed)] == replayed
    assert any(r.get("cgroup") == g.cgroup for r in replayed)
