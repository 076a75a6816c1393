"""A memory.stat counter is one declaration in the field table: a copy of the package gets
one `_f(...)` entry, `python -m cgstat.contract.schema --write` makes the rest, and the counter is
then in the JSON record (with the file's value), the schema, the TypedDicts, the
Prometheus exposition, the CSV columns and the generated docs, with no other file
touched."""

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from tests.helpers.contract import ROOT

jsonschema = pytest.importorskip("jsonschema")

TREE = os.path.join(ROOT, "tests", "fixtures", "v2-fields", "t0")
# pgactivate: in every v2 memory.stat, read by nothing before this declaration
DECLARATION = '''    _f("memory.pgactivate_total", "int?", "pages moved to the active LRU lists", v2="memory.stat pgactivate",
       v1="memory.stat total_pgactivate", as_is=True, csv=True, minimum=0,
       metric=Series("cgstat_memory_pgactivate_total", "counter", "Pages moved to the active LRU lists.")),
'''
ANCHOR = '    _f("memory.hugetlb_bytes",'  # the declaration goes after the last memory.stat counter

_RENDER = """
import json, sys
from cgstat.outputs.prometheus import exposition as prometheus
records = [json.loads(line) for line in sys.stdin if line.strip()]
sys.stdout.write(prometheus.render(records, prometheus.TEXT, timestamps=False).decode())
"""


def _run(copy, *args, stdin=None):
    env = dict(os.environ, PYTHONPATH=copy)
    env.pop("CGSTAT_HOST_ROOT", None)
    proc = subprocess.run([sys.executable, *args], cwd=copy, env=env, input=stdin, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("declared"))
    shutil.copytree(os.path.join(ROOT, "cgstat"), os.path.join(root, "cgstat"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "docs"), os.path.join(root, "docs"))
    table = os.path.join(root, "cgstat", "contract", "fields.py")
    with open(table, encoding="utf-8") as f:
        text = f.read()
    assert text.count(ANCHOR) == 1 and "pgactivate" not in text
    with open(table, "w", encoding="utf-8") as f:
        f.write(text.replace(ANCHOR, DECLARATION + ANCHOR))
    _run(root, "-m", "cgstat.contract.schema", "--write")
    return root


@pytest.fixture(scope="module")
def records(copy):
    out = _run(copy, "-m", "cgstat", "once", "--host-root", TREE, "--all")
    return [json.loads(line) for line in out.splitlines()]


def _file_value(cgroup, key):
    with open(os.path.join(TREE, "sys/fs/cgroup", cgroup.lstrip("/"), "memory.stat")) as f:
        return dict((k, int(v)) for k, v in (line.split() for line in f))[key]


def test_the_record_has_it_with_the_files_value(copy, records):
    with open(os.path.join(copy, "cgstat", "contract", "record.schema.json")) as f:
        validator = jsonschema.Draft7Validator(json.load(f))
    checked = 0
    for r in records:
        assert not list(validator.iter_errors(r)), r["cgroup"]
        keys = list(r["memory"])
        assert keys.index("pgactivate_total") == keys.index("writeback_bytes") + 1  # its place in the table
        if r["memory"]["usage_bytes"] is not None:
            assert r["memory"]["pgactivate_total"] == _file_value(r["cgroup"], "pgactivate")
            checked += 1
    assert checked >= 3


def test_the_schema_and_the_typeddicts_have_it(copy):
    with open(os.path.join(copy, "cgstat", "contract", "record.schema.json")) as f:
        memory = json.load(f)["properties"]["memory"]
    assert memory["properties"]["pgactivate_total"] == {
        "type": ["integer", "null"], "minimum": 0, "description": "pages moved to the active LRU lists"}
    assert "pgactivate_total" in memory["required"]
    check = ("from cgstat.contract import types as records, keys as fieldkeys; "
             # a string on Python 3.7 (its TypedDict stand-in is a plain class), a ForwardRef later
             "a = lambda cls: cls.__annotations__['pgactivate_total']; "
             "hint = lambda cls: a(cls) if isinstance(a(cls), str) else getattr(a(cls), '__forward_arg__', None); "
             "print(hint(records.Memory), hint(records.MemoryStatCounters), "
             "'.'.join(fieldkeys.Cgroup.MEMORY_PGACTIVATE_TOTAL), fieldkeys.MemoryStat.V1[-1])")
    assert _run(copy, "-c", check).split() == ["Optional[int]", "Optional[int]", "memory.pgactivate_total",
                                              "total_pgactivate"]


def test_prometheus_has_its_series(copy, records):
    text = _run(copy, "-c", _RENDER, stdin="".join(json.dumps(r) + "\n" for r in records))
    assert "# TYPE cgstat_memory_pgactivate_total counter" in text
    got = sorted(int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("cgstat_memory_pgactivate_total{"))
    want = sorted(r["memory"]["pgactivate_total"] for r in records if r["memory"]["pgactivate_total"] is not None)
    assert got == want and len(got) >= 3


def test_csv_has_its_column(copy, records):
    rows = list(csv.DictReader(io.StringIO(_run(copy, "-m", "cgstat", "once", "--host-root", TREE, "--all",
                                                "--format", "csv"))))
    assert rows and "memory.pgactivate_total" in rows[0]
    header = list(rows[0])
    assert header.index("memory.pgactivate_total") == header.index("memory.oom_events_total") + 1  # its section's end
    by_cgroup = {r["cgroup"]: r["memory"]["pgactivate_total"] for r in records}
    for row in rows:
        want = by_cgroup[row["cgroup"]]
        assert row["memory.pgactivate_total"] == ("" if want is None else str(want))


def test_the_docs_tables_have_it(copy):
    with open(os.path.join(copy, "docs", "prometheus.md"), encoding="utf-8") as f:
        assert "| `cgstat_memory_pgactivate_total` | counter | memory.pgactivate_total |" in f.read()
    with open(os.path.join(copy, "docs", "schema.md"), encoding="utf-8") as f:
        assert ("| `memory.pgactivate_total` | int/null | memory.stat pgactivate | memory.stat total_pgactivate | "
                "pages moved to the active LRU lists |") in f.read()
