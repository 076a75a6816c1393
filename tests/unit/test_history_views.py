"""The views of the past say when: every row of every format of `dump`, `replay` and
`events` carries a time, and events and exit records have tables (and CSV columns) of
their own, not docker-stats rows."""

import csv
import io
import re
import subprocess
import sys
import time

import orjson
import pytest

from cgstat.outputs.clock import Clock
from cgstat.timestamps import rfc3339
from tests.helpers import history as H
from tests.helpers.contract import ROOT, validate

DAY_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
SPAN = ("--since", repr(H.T0), "--until", repr(H.T0 + H.TICKS))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("history") / "s")
    H.record_store(path)
    return path


def _cgstat(*args, tz="UTC"):
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "TZ": tz, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def test_the_made_up_records_are_valid():
    for i in range(H.TICKS):
        for r in H.tick(i):
            validate(r)


def _tables(text):
    """The tables of a table output: lists of lines, split at blank lines."""
    return [block.splitlines() for block in text.strip("\n").split("\n\n")]


def test_dump_table_has_the_time_on_every_row_and_events_and_exits_apart(store):
    text = _cgstat("dump", "--store", store, *SPAN, "--format", "table")
    tables = _tables(text)
    heads = [t[0].split()[:2] for t in tables]
    assert heads.count(["TIME", "(UTC)"]) >= H.TICKS  # a workload table a tick, then the others
    for table in tables:
        for row in table[1:]:
            assert DAY_TIME.search(row), row
    (events,) = [t for t in tables if "KIND" in t[0]]
    assert events[0].split()[:4] == ["TIME", "(UTC)", "SEVERITY", "KIND"]
    assert events[1].startswith("2026-12-02 03:12:27") and "oom_kill" in events[1] and "job.service" in events[1]
    assert "[kernel 03:12:26]" in events[1]  # the kernel log's own time, beside the tick's
    (exits,) = [t for t in tables if t[0].startswith("WORKLOAD")]
    assert exits[0].split()[:4] == ["WORKLOAD", "START", "(UTC)", "END"]
    row = exits[1]
    assert row.startswith("job.service") and "2026-12-02 03:12:00" in row and "2026-12-02 03:12:28" in row
    assert "13.00" in row and "64MiB (kernel)" in row and "oom_kill" in row
    job_rows = [r for t in tables for r in t[1:] if "job.service" in r and "%" in r]
    assert len(job_rows) == H.KILL and job_rows[0].startswith("2026-12-02 03:12:00")
    # the kernel's peak beside the sampled usage: 64 MiB at the last record, 56 MiB sampled
    assert "   MEM %     MEM PEAK   NET I/O" in tables[0][0]
    assert "56MiB / 64MiB         87.50%    64MiB" in job_rows[-1]


def test_the_table_in_local_time_names_the_zone(store):
    text = _cgstat("dump", "--store", store, *SPAN, "--format", "table", tz="Asia/Kolkata")
    assert text.startswith("TIME (IST)") and "\n2026-12-02 08:42:00" in text
    assert _cgstat("dump", "--store", store, *SPAN, "--format", "table", "--utc",
                   tz="Asia/Kolkata").startswith("TIME (UTC)")


def test_dump_csv_rows_have_the_time_and_exit_columns(store):
    rows = list(csv.reader(io.StringIO(_cgstat("dump", "--store", store, *SPAN, "--format", "csv"))))
    head, body = rows[0], rows[1:]
    assert {len(r) for r in body} == {len(head)}
    ts = head.index("ts")
    assert all(re.match(r"\d{4}-\d\d-\d\dT", r[ts]) for r in body)
    (gone,) = [r for r in body if r[0] == "exit"]
    cell = dict(zip(head, gone))
    assert cell["cgroup"] == H.JOB and cell["unit"] == "job.service"
    assert cell["exit.ended_by"] == "oom_kill" and cell["exit.memory_peak_bytes"] == str(H.KERNEL_PEAK)
    assert cell["exit.cpu_seconds_total"] == "13.0" and cell["exit.started"] == rfc3339(H.T0)
    assert cell["cpu.percent"] == "" and cell["event.kind"] == ""
    (kill,) = [r for r in body if r[0] == "event"]
    cell = dict(zip(head, kill))
    assert cell["event.kind"] == "oom_kill" and cell["event.kernel_ts"] == rfc3339(H.KERNEL_KILL_S)
    assert cell["exit.ended_by"] == ""


def test_dump_jsonl_and_openmetrics_carry_the_time(store):
    lines = [orjson.loads(x) for x in _cgstat("dump", "--store", store, *SPAN).splitlines()]
    assert lines == [r for i in range(H.TICKS) for r in H.tick(i)]
    assert all(r["ts"] for r in lines)
    om = _cgstat("dump", "--store", store, *SPAN, "--format", "openmetrics")
    samples = [line for line in om.splitlines() if line and not line.startswith("#")]
    assert samples and all(re.search(r" \d{10}(\.\d+)?$", s) for s in samples)  # each stamped


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "table"])
def test_replay_every_format_says_when(store, fmt):
    at = repr(H.T0 + H.KILL)  # the tick of the kill's event
    out = _cgstat("replay", "--store", store, "--at", at, "--format", fmt)
    if fmt == "jsonl":
        assert [orjson.loads(x) for x in out.splitlines()] == H.tick(H.KILL)
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert [r[1] for r in rows[1:]] == [rfc3339(H.T0 + H.KILL)] * 2
    else:
        tables = _tables(out)
        assert [t[0].split()[2] for t in tables] == ["CONTAINER", "SEVERITY"]
        assert all(row.startswith("2026-12-02 03:12:27") for t in tables for row in t[1:])


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "table"])
def test_events_every_format_has_events_and_exits_in_their_own_columns(store, fmt):
    out = _cgstat("events", "--store", store, *SPAN, "--format", fmt)
    if fmt == "jsonl":
        assert [orjson.loads(x) for x in out.splitlines()] == [H.kill_event(), H.exit_record()]
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        head = rows[0]
        kinds = [(r[0], r[head.index("ts")], r[head.index("event.kind")], r[head.index("exit.ended_by")])
                 for r in rows[1:]]
        assert kinds == [("event", rfc3339(H.T0 + H.KILL), "oom_kill", ""),
                         ("exit", rfc3339(H.T0 + H.KILL + 1), "", "oom_kill")]
    else:
        events, exits = _tables(out)
        assert events[0].split() == ["TIME", "(UTC)", "SEVERITY", "KIND", "WORKLOAD", "MESSAGE"]
        assert len(events) == 2 and events[1].startswith("2026-12-02 03:12:27   critical   oom_kill")
        assert exits[0].split() == ["WORKLOAD", "START", "(UTC)", "END", "LIFETIME", "CPU", "S", "PEAK", "MEM",
                                    "OOM", "KILLS", "IO", "R", "/", "W", "GPU", "S", "ENDED", "BY"]
        assert len(exits) == 2 and "26 s" in exits[1] and exits[1].endswith("oom_kill")
        assert "CONTAINER ID" not in out


def test_clock_says_local_time_with_its_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        clock = Clock()
        assert clock.zone == "IST" and clock.day(rfc3339(H.T0)) == "2026-12-02 08:42:00"
        assert Clock(utc=True).time(H.T0) == "03:12:00" and clock.day(None) == "--"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
