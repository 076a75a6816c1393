"""--format table (docker stats --no-stream layout and units) and --format csv (fixed
columns, equal width, quoting, formula injection, hostile names) - cgstat/outputs/table.py."""

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest

from cgstat.contract import fields
from cgstat.outputs.formats import make_sink
from cgstat.outputs.table import (
    CSV_COLUMNS,
    TABLE_HEADER,
    CsvFileSink,
    CsvStdoutSink,
    TableStdoutSink,
    bytes_size,
    csv_cell,
    csv_header,
    csv_rows,
    format_table,
    human_size,
    render_table,
    table_row,
)
from tests.helpers.contract import validate
from tests.helpers.fieldtable import blank, example, record

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
FIXTURE = os.path.join(TESTS, "fixtures", "v2-systemd", "t1")
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def records():
    out = subprocess.run([sys.executable, "-m", "cgstat", "once", "--host-root", FIXTURE, "--window", "0"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True).stdout
    records = [json.loads(line) for line in out.splitlines()]
    for r in records:
        validate(r)
    return records


@pytest.mark.parametrize("value,want", [
    (0, "0B"), (1023, "1023B"), (1024, "1KiB"), (1536, "1.5KiB"), (26296320, "25.08MiB"),
    (67108864, "64MiB"), (1019768832, "972.5MiB"), (2 ** 30, "1GiB"), (1.5 * 2 ** 40, "1.5TiB"), (None, "--")])
def test_bytes_size_like_go_units(value, want):
    assert bytes_size(value) == want


@pytest.mark.parametrize("value,want", [
    (0, "0B"), (999, "999B"), (1000, "1kB"), (8396800, "8.4MB"), (16777216, "16.8MB"), (1234567890, "1.23GB"),
    (999999, "1e+03kB")])  # go-units prints the same "1e+03kB" (%.3g of 999.999)
def test_human_size_like_go_units(value, want):
    assert human_size(value) == want


def test_table_from_recorded_tree(records):
    text = format_table(records)
    lines = text.splitlines()
    assert lines[0].split("   ")[0] == "CONTAINER ID"  # docker stats' first column
    for h in TABLE_HEADER:
        assert h in lines[0]
    assert len(lines) == 1 + sum(r["type"] in ("cgroup", "pod") for r in records)
    tf = [ln for ln in lines if " tf-training " in ln][0]
    assert "25.08MiB / 64MiB" in tf and "39.18%" in tf
    short = [r["container"]["short_id"] for r in records if (r.get("container") or {}).get("name") == "tf-training"]
    assert len(short[0]) == 12 and tf.startswith(short[0] + "   ")
    # columns start at the same offset on every line (tabwriter-like padding)
    col = lines[0].index("MEM USAGE / LIMIT")
    assert all(ln[col - 3:col] == "   " for ln in lines[1:])
    # unlimited: the host's memory stands in, as docker shows it
    init = [ln for ln in lines if re.match(r"-- +init\.scope ", ln)][0]
    assert "/ 972.5MiB" in init
    assert "ml/trainer-7d9f8b6c5d-x2k4q" in text  # a pod-level record by its pod


def test_table_cells_null_network_and_gpu():
    r = record(cpu={"percent": 50.1234}, pids={"current": 3},
               network=dict(example(fields.RECORD, "network"), rx_bytes_total=1500, tx_bytes_total=2 * 10 ** 9),
               gpu={"memory_bytes": 3 * 2 ** 30, "sm_percent": 12.5, "devices": [], "processes": []})
    assert table_row(r) == ["--", "/x", "50.12%", "-- / --", "--", "1.5kB / 2GB", "--", "3", "3GiB", "12.50%"]
    r = record(cpu={"percent": 50.1234}, pids={"current": 3})  # no network namespace read, GPUs off
    assert table_row(r)[5] == "--" and table_row(r)[8:] == ["--", "--"]
    r = record(container=dict(blank(fields.RECORD, "container", True), id="ab" * 32, short_id="ab" * 6, name="web"))
    assert table_row(r)[:2] == ["abababababab", "web"]


def test_table_min_width_and_events():
    text = render_table([["a", "1"]], header=("N", "V"))
    assert text == "N" + " " * 9 + "V\n" + "a" + " " * 9 + "1\n"
    ev = record("event", kind="oom_kill", severity="critical", cgroup="/x\x1b[2J", message="killed\nforged line")
    out = format_table([ev])
    assert "\x1b" not in out and out.count("\n") == 2 and "! critical oom_kill /x\\x1b[2J: killed\\x0aforged line" in out


def hostile(name):
    return record(cgroup="/docker/x", container=dict(blank(fields.RECORD, "container", True), name=name, runtime="docker"))


@pytest.mark.parametrize("name", ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx",
                                  "a,b\"c\nd", "\x1b]0;pwned\x07", "bidi\u202eevil", "\x9b31m"])
def test_csv_hostile_names(name):
    text = csv_header() + csv_rows([hostile(name)])
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == 2 and len(rows[1]) == len(CSV_COLUMNS)
    cell = rows[1][CSV_COLUMNS.index("container.name")]
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in "\u202e" for c in cell)
    assert rows[1][CSV_COLUMNS.index("name")] == cell
    # quoted in the raw text, so the spreadsheet sees a string
    assert '"' + cell.replace('"', '""') + '"' in text


def test_csv_numbers_stay_numbers():
    assert csv_cell(-5) == "-5" and csv_cell(0.5) == "0.5" and csv_cell(None) == "" and csv_cell(True) == "true"
    assert csv_cell("-5") == "\"'-5\""


def test_csv_equal_width_on_recorded_tree_and_events(records):
    ev = record("event", message="grows, \"fast\"", evidence={"bytes_per_second": 1.0})
    gpu_dev = record("gpu", gpu={"index": 0})
    text = csv_header() + csv_rows(records + [ev, gpu_dev])
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == list(CSV_COLUMNS)
    assert len(rows) == 1 + len(records) + 1
    assert {len(r) for r in rows} == {len(CSV_COLUMNS)}
    assert rows[-1][CSV_COLUMNS.index("event.kind")] == "memory_growth"
    assert rows[-1][CSV_COLUMNS.index("event.message")] == 'grows, "fast"'
    tf = [r for r in rows if r[CSV_COLUMNS.index("container.name")] == "tf-training"][0]
    assert tf[CSV_COLUMNS.index("cpu.limit_cores")] == "0.5"
    assert tf[CSV_COLUMNS.index("memory.limit_bytes")] == str(64 * MiB)


def test_sinks_write_header_once_and_after_reopen(tmp_path):
    path = str(tmp_path / "out.csv")
    rec = hostile("n")
    sink = CsvFileSink(path)
    sink.open()
    sink.write([rec])
    sink.write([rec])
    sink.close()
    sink2 = make_sink("csv", path)  # appending to a non-empty file: no second header
    sink2.open()
    sink2.write([rec])
    os.rename(path, path + ".1")  # logrotate
    sink2.reopen()
    sink2.write([rec])
    sink2.close()
    with open(path + ".1", newline="") as f:
        old = list(csv.reader(f))
    with open(path, newline="") as f:
        new = list(csv.reader(f))
    assert [r[0] for r in old] == ["type", "cgroup", "cgroup", "cgroup"]
    assert [r[0] for r in new] == ["type", "cgroup"]


def test_stdout_sinks(records):
    r, w = os.pipe()
    sink = TableStdoutSink(fd=w)
    sink.write(records)
    sink.write(records)
    c = CsvStdoutSink(fd=w)
    c.write(records[:2])
    c.write(records[:2])
    os.close(w)
    out = os.read(r, 1 << 20).decode()
    os.close(r)
    assert out.count("CONTAINER ID ") == 2 and "\n\nCONTAINER ID " in out
    assert out.count("type,ts,host") == 1
    with pytest.raises(ValueError):
        make_sink("xml", None)
