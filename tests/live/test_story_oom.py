"""The morning after, with real cgroups: a job burns CPU, rests, then grows past its 32 MiB
limit and is OOM-killed while the flight recorder (`stream --store`) runs; its cgroup goes
two ticks later. `cgstat story` of the recording then names the kill at the kernel log's
time (within 1 s of the /dev/kmsg record's own stamp), the kernel's peak and the CPU
seconds (within 1 % of the kernel's count read after the kill)."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import subprocess
import sys
import time

import pytest

from cgstat.timestamps import parse_ts
from tests.helpers import realcg as R
from tests.live.test_oom_kills import Stream, _clock, _group, _settle

pytestmark = [pytest.mark.realcg]
MiB = 1024 * 1024
# 2 s of CPU, a rest of 3 ticks (so that a record has all of its CPU), then past its limit
BURN_REST_GROW = [sys.executable, "-c",
                  "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.0: pass\n"
                  "time.sleep(2.0)\nx = bytearray(200 << 20)"]


@pytest.fixture(autouse=True)
def _kmsg_readable(realcg_env):
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("cannot read /dev/kmsg")


def _kmsg_kill_wall_s(pid: int) -> float:
    """The kernel log's `Killed process PID` record's time: its stamp plus the boot's wall time."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    found = None
    try:
        while True:
            try:
                raw = os.read(fd, 16384)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break
                if exc.errno == errno.EPIPE:
                    continue
                raise
            head, _, text = raw.decode("ascii", "replace").partition(";")
            if re.search(r"Killed process %d \(" % pid, text):
                found = int(head.split(",")[2])
    finally:
        os.close(fd)
    assert found is not None, "no Killed process %d in /dev/kmsg" % pid
    return time.time() - time.monotonic() + found / 1e6


def _cgstat(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "cgstat", *args], cwd=R.REPO, capture_output=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=R.REPO, TZ="UTC"))
    assert out.returncode == 0, out.stderr.decode()
    return out


def test_story_of_a_job_oom_killed_under_its_limit(realcg_env, tmp_path):
    stem = R.PREFIX + secrets.token_hex(3)
    clock = _clock(realcg_env, stem)
    g = _group(realcg_env, stem)
    store = str(tmp_path / "store")
    s = Stream("stream", "--interval", "0.5", "--all", "--match", stem, "--store", store, "--retain", "1h")
    peak_file = "memory.peak" if realcg_env.v2 else "memory.max_usage_in_bytes"
    try:
        g.set_memory_limit(32 * MiB)
        _settle(s, clock)
        p = g.start(BURN_REST_GROW, stdout=subprocess.DEVNULL)
        assert p.wait(60) == -9
        ev = s.wait_for(lambda o: o.get("type") == "event" and o.get("kind") == "oom_kill"
                        and o["evidence"].get("pid") == p.pid, 30)
        assert ev is not None, "no oom_kill event"
        kernel_cpu = g.cpu_usage_seconds()  # the kernel's own counts: nothing runs there now
        kernel_peak = int(g.read("memory", peak_file))
        n = s.mark()
        assert s.wait_for(lambda o: s.ticks_after(n, clock.cgroup) >= 2, 20) is not None
        g.destroy()
        gone = s.wait_for(lambda o: o.get("type") == "exit" and o.get("cgroup") == g.cgroup, 30)
        assert gone is not None, "no exit record"
        n = s.mark()
        assert s.wait_for(lambda o: s.ticks_after(n, clock.cgroup) >= 2, 20) is not None
    finally:
        err = s.stop()
        g.destroy()
        clock.destroy()
    assert "Traceback" not in err
    kernel_kill_s = _kmsg_kill_wall_s(p.pid)
    name = g.cgroup.rsplit("/", 1)[-1]

    text = _cgstat("story", name, "--store", store, "--utc").stdout.decode()
    head = text.splitlines()[0]
    assert head.startswith("%s: OOM-killed at " % g.cgroup) and " at its 32 MiB limit" in head, text
    said = re.search(r"OOM-killed at (\d\d):(\d\d):(\d\d)", head)
    day = time.gmtime(kernel_kill_s)
    shown = (day.tm_hour * 3600 + day.tm_min * 60 + day.tm_sec) - sum(
        int(x) * k for x, k in zip(said.groups(), (3600, 60, 1)))
    assert shown in (0, 1, -1), (head, kernel_kill_s)  # the second shown, within 1 s of the log's
    assert "oom_kill" in text and "(the kernel log's " in text
    assert "= %d B (the kernel's memory.peak" % kernel_peak in text, text

    doc = json.loads(_cgstat("story", g.cgroup, "--store", store, "--format", "json").stdout)
    assert doc["ending"]["how"] == "oom_kill" and doc["ending"]["clock"] == "kernel log"
    assert abs(parse_ts(doc["ending"]["at"]) - kernel_kill_s) <= 1.0, (doc["ending"], kernel_kill_s)
    assert [k["pid"] for k in doc["oom_kills"]] == [p.pid]
    assert doc["memory"]["peak_bytes"] == kernel_peak and doc["memory"]["peak_source"] == "memory.peak"
    assert kernel_peak <= 32 * MiB and kernel_peak >= 30 * MiB
    assert kernel_cpu >= 1.9
    assert abs(doc["cpu"]["seconds_total"] - kernel_cpu) <= 0.01 * kernel_cpu, (doc["cpu"], kernel_cpu)
    assert doc["exit"]["ended_by"] == "oom_kill" and doc["exit"]["cpu_seconds_total"] == doc["cpu"]["seconds_total"]
    assert doc["exit"]["memory_peak_bytes"] == kernel_peak

    # the report of the recording, laid out by headless Chromium: the kernel's peak in the
    # summary, and the exit record in the table of the workloads that ended
    from tests.unit.test_report import run_chromium

    page = str(tmp_path / "report.html")
    _cgstat("report", "--store", store, "--since", "0", "-o", page)
    r = run_chromium(["--dump-dom", "file://" + page])
    dom = r.stdout.decode("utf-8", "replace")
    assert r.returncode == 0 and "</html>" in dom, r.stderr[-2000:]
    (row,) = re.findall(r'<tr data-name="[^"]*%s[^"]*">.*?</tr>' % re.escape(g.cgroup), dom)
    assert ">32.0 MiB (kernel)<" in row and ">%.1f %%<" % (100.0 * kernel_peak / (32 * MiB)) in row
    (ended,) = re.findall(r'<tr class="exit"[^>]*>.*?</tr>', dom)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", ended)
    assert cells[0] == g.cgroup and cells[-1] == "oom_kill" and cells[7] == "1"
    assert cells[4] == "%.2f" % doc["exit"]["cpu_seconds_total"] and cells[6] == "32.0 MiB (kernel)"
