"""A fork bomb under a real pids.max raises pids_limit_hit."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import realcg as R
from tests.helpers.contract import ROOT, validate



@pytest.mark.realcg
def test_fork_bomb_under_a_pids_limit_raises_pids_limit_hit(make_group, tmp_path):
    g = make_group(("pids", "cpu", "cpuacct", "memory"))
    g.set_pids_max(4)
    trigger = str(tmp_path / "go")
    bomb = g.start([sys.executable, "-c", R.FORK_BOMB, trigger, "5"])
    bomb.wait_line("ready")
    env = dict(os.environ, PYTHONPATH=ROOT)
    stream = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "0.5", "--count", "12",
                               "--match", g.name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
                              env=env)
    records, events = [], []
    try:
        for line in stream.stdout:
            rec = json.loads(line)
            if rec["type"] == "event":
                events.append(rec)
            elif rec.get("cgroup") == g.cgroup:
                records.append(rec)
                if len(records) == 2:  # two samples before the forks: the count rises between two
                    with open(trigger, "w"):
                        pass
                    bomb.wait_line("refused")
    finally:
        stream.wait(timeout=60)
    events_file = dict(line.split() for line in g.read("pids", "pids.events").splitlines())
    assert int(events_file["max"]) >= 5  # the kernel refused the forks (and counted them here)
    before = records[0]["pids"]["events_max_total"]
    assert before == 0
    assert records[-1]["pids"]["events_max_total"] == int(events_file["max"])
    hits = [e for e in events if e["kind"] == "pids_limit_hit"]
    assert len(hits) == 1, events
    assert hits[0]["cgroup"] == g.cgroup and hits[0]["evidence"]["limit"] == 4
    assert hits[0]["evidence"]["failures"] >= 1
    validate(hits[0])

