"""Streaming at 10 ticks/s while 300 real cgroups are created and removed below ours.

No traceback, no negative or impossible rate, every record valid, and the agent's open
descriptors back to their baseline once the churn is over.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.contract import ROOT, validate

pytestmark = pytest.mark.realcg


def _fds(pid, out):
    """The agent's open descriptors between ticks: a tick opens a folder or file for a moment
    (a scan, a first read), so the count is taken just after each of five batches is
    written and the least is kept; a descriptor that leaked stays in every count."""
    counts = []
    for _ in range(5):
        _wait_size(out, os.path.getsize(out))
        counts.append(len(os.listdir(f"/proc/{pid}/fd")))
    return min(counts)


def _wait_size(path, size, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > size:
            return True
        time.sleep(0.05)
    return False


def test_churn_of_300_cgroups_while_streaming(make_group, tmp_path):
    group = make_group(("cpu", "cpuacct", "memory", "pids", "blkio"))
    out = str(tmp_path / "out.jsonl")
    env = dict(os.environ)
    env.pop("CGSTAT_HOST_ROOT", None)
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "0.1",
                             "--match", group.name, "--output", out],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sleepers = []
    try:
        assert _wait_size(out, 0)
        baseline = _fds(proc.pid, out)
        made = []
        for i in range(300):
            name = f"c{i}"
            for d in group.dirs.values():
                os.mkdir(os.path.join(d, name))
            made.append(name)
            if i % 30 == 0:  # some with a member process, to exercise the joins
                procs_files = [os.path.join(d, name, "cgroup.procs") for d in group.dirs.values()]
                sleepers.append((name, subprocess.Popen(
                    ["sh", "-c", 'for f in "$@"; do echo $$ > "$f"; done; exec sleep 30', "sh", *procs_files])))
            if len(made) > 20:  # keep ~20 alive, remove the oldest
                old = made.pop(0)
                for _, p in [s for s in sleepers if s[0] == old]:
                    p.kill()
                    p.wait()
                for d in group.dirs.values():
                    os.rmdir(os.path.join(d, old))
            if i % 10 == 9:
                # Paced by the stream, not the clock: a cgroup lives through two waits for a
                # batch, so the second batch's tick began after it was made (ticks run one
                # after another) and must have read it, however slow the machine is.
                _wait_size(out, os.path.getsize(out))
        for _, p in sleepers:
            p.kill()
            p.wait()
        for old in made:
            for d in group.dirs.values():
                os.rmdir(os.path.join(d, old))
        size = os.path.getsize(out)
        assert _wait_size(out, size + 20000)  # several more ticks after the churn
        after = _fds(proc.pid, out)
    finally:
        for _, p in sleepers:
            if p.poll() is None:
                p.kill()
                p.wait()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    assert after <= baseline, (baseline, after)
    cpus = os.cpu_count()
    seen = set()
    exits = []
    with open(out, "rb") as f:
        data = f.read()
    assert data.endswith(b"\n")
    for line in data.splitlines():
        rec = json.loads(line)
        validate(rec)
        if rec["type"] == "exit":
            exits.append(rec["cgroup"])  # a churned cgroup gone
            continue
        seen.add(rec["cgroup"])
        pct = rec["cpu"]["percent"]
        assert pct is None or 0 <= pct <= 100 * cpus
        for key in ("read_bytes_per_second", "write_bytes_per_second"):
            assert rec["io"][key] is None or rec["io"][key] >= 0
    # every cgroup that lived through two batches was read (c290-c299 saw only one)
    missed = [f"c{i}" for i in range(290) if group.cgroup + f"/c{i}" not in seen]
    assert not missed, missed
    # and every one read and then removed has exactly one exit record (all are removed
    # several ticks before the end)
    name = group.cgroup.rsplit("/", 1)[-1]  # its memory cgroup sits elsewhere on a host that nests memory
    churned = {c for c in seen if "/%s/c" % name in c}
    assert sorted(x for x in exits if "/%s/c" % name in x) == sorted(churned), set(exits) ^ churned
    assert not [x for x in exits if "/%s/c" % name not in x], exits
