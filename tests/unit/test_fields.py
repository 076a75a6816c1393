"""The field table (cgstat/contract/fields.py) against everything made from it or written about it:
the JSON Schema files, the Prometheus families and what the exporter renders, the CSV
columns, docs/schema.md and docs/prometheus.md. A field added to the table and missed in
one of them fails here."""

import ast
import os
import re

import pytest

from cgstat.contract import keys as fieldkeys
from cgstat.contract import fields
from cgstat.contract import types as records
from cgstat.contract import schema
from cgstat.outputs.prometheus import exposition as prom
from cgstat.outputs import table
from cgstat.outputs.prometheus.budget import SeriesBudget
from tests.helpers.contract import ROOT, validate
from tests.helpers.fieldtable import example

parser = pytest.importorskip("prometheus_client.parser")

TABLES = {"cgroup": fields.RECORD, "gpu": fields.GPU_RECORD, "event": fields.EVENT}


_MADE = {"types.py": schema.records_text, "keys.py": schema.fieldkeys_text}


@pytest.mark.parametrize("name", sorted(fields.SCHEMA_FILES) + sorted(_MADE))
def test_schema_files_are_made_from_the_table(name):
    path = os.path.join(ROOT, "cgstat", "contract", name)
    want = _MADE[name]() if name in _MADE else schema.text(name)
    if os.environ.get("CGSTAT_REGEN_SCHEMA"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(want)
    with open(path, encoding="utf-8") as f:
        assert f.read() == want, "%s differs from the field table (CGSTAT_REGEN_SCHEMA=1 to rewrite it)" % name


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_a_record_with_every_field_set_is_valid(kind):
    record = example(TABLES[kind])
    if kind == "event":
        record.update(kind="resolved", severity="info")  # a resolves that is not null
    validate(record)
    assert list(record) == [f.path for f in fields.children(TABLES[kind], "")]


def test_paths_are_unique_and_every_parent_is_declared():
    for table_ in TABLES.values():
        paths = [f.path for f in table_]
        assert len(paths) == len(set(paths))
        for path in paths:
            parent = re.sub(r"(\[\]|\{\}|\.[^.\[{]+)$", "", path)
            assert parent == path or parent == "" or parent in paths, path


def test_units_follow_the_names():
    for f in fields.RECORD + fields.GPU_RECORD:
        leaf = f.path.rsplit(".", 1)[-1]
        if f.unit and f.type == "object":
            # an object named with a unit (violation_seconds_total: {power, thermal}) holds
            # numbers of that unit
            kids = fields.children(fields.RECORD + fields.GPU_RECORD, f.path)
            assert kids and all(k.type in ("int", "float") for k in kids), f.path
        elif f.unit in ("bytes", "count", "microseconds"):
            assert f.type == "int", f.path
        elif f.unit and f.type not in ("int", "float"):
            pytest.fail("%s: a %s field of type %s" % (f.path, f.unit, f.type))
        assert f.unit == fields.unit_of(leaf)


def _value(record, path):
    value = record
    for key in path.split("."):
        value = value[key]
    return value


def _rendered():
    records = [example(fields.RECORD), example(fields.GPU_RECORD)]
    records[0]["network"]["interfaces"][0]["name"] = "eth0"
    text = prom.render(records, prom.TEXT, {"version": "t", "ticks_total": 3, "tick_duration_seconds": 0.5,
                                            "render_duration_seconds": 0.25, "last_tick_timestamp_seconds": 9.0,
                                            "gpu_reads_late_total": 2,
                                            "gpu_call_errors_total": {("GPU-1", "nvmlDeviceGetPowerUsage"): 3}},
                       fold=SeriesBudget(10 ** 6).tick())  # a budget not reached: its gauge, no fold
    return records, {f.name: f for f in parser.text_string_to_metric_families(text.decode())}


def test_every_family_is_rendered_from_its_field_with_its_labels():
    records, families = _rendered()
    own = {"self": (), "cgroup": fields.CGROUP_LABELS, "gpu": fields.GPU_LABELS}
    for family in fields.FAMILIES:
        if family.name in prom.COUNTED_OVER_TICKS:
            continue  # counted by the exporter tick by tick (tests/unit/test_gpu_held_idle.py)
        got = [s for f in families.values() for s in f.samples if s.name == family.name]
        assert got, family.name + " has no sample for a record with every field set"
        allowed = set(own[family.scope]) | set(family.labels)
        for s in got:
            extra = {k for k in s.labels if k not in allowed and not k.startswith("container_label_")}
            assert not extra, (family.name, extra)
        if family.field and "[]" not in family.field:
            record = records[1] if family.scope == "gpu" else records[0]
            assert [s.value for s in got] == [_value(record, family.field)], family.name


def test_families_read_record_fields():
    for family in fields.FAMILIES:
        if family.field:
            table_ = fields.GPU_RECORD if family.scope == "gpu" else fields.RECORD
            f = fields.field(table_, family.field)
            assert f.type in ("int", "float", "bool"), family.name  # a bool: 1 or 0
            assert family.scope != "self"


def test_csv_columns_are_leaf_fields_and_each_is_filled():
    leaves = {f.path for f in fields.RECORD if f.type not in ("object", "array", "map")}
    for column in fields.CSV_COLUMNS:
        assert column in fields.CSV_MADE or column in leaves, column
    record = example(fields.RECORD)
    for column, value in zip(table.CSV_COLUMNS, table.csv_values(record)):
        if column.startswith(("event.", "exit.")):
            continue
        assert value is not None, column
        if column not in fields.CSV_MADE:
            assert value == _value(record, column), column


# -- the docs ------------------------------------------------------------------------------

def _tokens(text):
    return {t for span in re.findall(r"`([^`]+)`", text) for t in re.findall(r"[a-z_][a-z0-9_]*", span)}


def _section(doc, heading):
    start = doc.index(heading)
    end = doc.find("\n## ", start + 1)
    return doc[start:end if end >= 0 else len(doc)]


def _schema_doc_sections():
    doc = open(os.path.join(ROOT, "docs", "schema.md"), encoding="utf-8").read()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", _section(doc, "| key | type |"), re.M)}

    def where(top):
        text = rows.get(top, "")
        heading = "\n## `%s`" % top
        if heading in doc:
            text += _section(doc, heading)
        return text

    return rows, where, _section(doc, "## GPU records")


def test_docs_schema_names_every_field():
    rows, where, gpu_section = _schema_doc_sections()
    assert list(rows) == [f.path for f in fields.children(fields.RECORD, "")]
    missing = []
    for f in fields.RECORD:
        top, _, rest = f.path.replace("[]", "").partition(".")
        leaf = re.sub(r"(\[\]|\{\})$", "", f.path.rsplit(".", 1)[-1])
        if rest and leaf not in _tokens(where(top)):
            missing.append(f.path)
    for f in fields.GPU_RECORD:
        leaf = re.sub(r"(\[\]|\{\})$", "", f.path.rsplit(".", 1)[-1])
        if leaf not in _tokens(gpu_section):
            missing.append("gpu record " + f.path)
    for code in dict(fields.field(fields.RECORD, "errors[].error").schema)["enum"]:
        if code not in _tokens(where("errors")):
            missing.append("error code " + code)
    for code in dict(fields.field(fields.GPU_RECORD, "errors[].error").schema)["enum"]:
        if code not in _tokens(gpu_section) | _tokens(where("errors")):
            missing.append("gpu error code " + code)
    assert not missing, "not in docs/schema.md: %s" % missing


def test_docs_prometheus_lists_every_family_in_order():
    doc = open(os.path.join(ROOT, "docs", "prometheus.md"), encoding="utf-8").read()
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \|", _section(doc, "## Every series"), re.M)
    assert rows == [(f.name, f.kind) for f in fields.FAMILIES]


# -- the TypedDicts -------------------------------------------------------------------------

_PY = {"int": "int", "float": "float", "str": "str", "bool": "bool", "enum": "str"}


def _hints(cls):
    """A TypedDict's annotations as text (typing makes them ForwardRefs, 3.7's stand-in keeps
    str), its bases' first: typing merges a subclass's keys with its bases' (the record's
    keys that only some runs write are a total=False subclass), 3.7's plain-class stand-in
    keeps each class's own."""
    merged = {}
    for klass in reversed(cls.__mro__):
        merged.update(vars(klass).get("__annotations__", {}))
    return {k: getattr(v, "__forward_arg__", v) for k, v in merged.items()}


def _check_typeddict(cls, table_, path, seen):
    """cls has the keys of the fields below `path`, in order, each of the field's type."""
    seen.add(cls.__name__)
    kids = [k for k in fields.children(table_, path) if not k.path.endswith(("[]", "{}"))]
    hints = _hints(cls)
    assert list(hints) == [k.path.rsplit(".", 1)[-1] for k in kids], (cls.__name__, path)
    for k in kids:
        hint = hints[k.path.rsplit(".", 1)[-1]]
        nested = k.path
        if k.type == "const":
            want = type(dict(k.schema)["const"]).__name__
        elif k.type in _PY:
            want = _PY[k.type]
        elif k.type == "map":
            (item,) = fields.children(table_, k.path)
            want = "Dict[str, %s]" % _PY[item.type]
        elif k.type == "object" and not k.closed:
            want = "Evidence"  # an open object: Dict[str, Any]
        else:  # an object, or an array of objects or text: its TypedDict checked in turn
            if k.type == "array":
                (item,) = fields.children(table_, k.path)
                nested = item.path
            inner = re.sub(r"^(Optional\[)?(List\[)?(\w+)\]*$", r"\3", hint)
            want = inner if k.type == "object" else "List[%s]" % inner
            if inner != "str" and (k.same_as or fields.children(table_, nested)):  # an event's container: any
                sub_table = fields.RECORD if k.same_as else table_
                _check_typeddict(getattr(records, inner), sub_table, k.same_as or nested, seen)
        if k.nullable and k.type != "const":
            want = "Optional[%s]" % want
        assert hint == want, (cls.__name__, k.path, hint, want)


def test_typeddicts_follow_the_field_table():
    seen = set()
    for cls, table_ in ((records.CgroupRecord, fields.RECORD), (records.GpuRecord, fields.GPU_RECORD),
                        (records.EventRecord, fields.EVENT), (records.ExitRecord, fields.EXIT)):
        _check_typeddict(cls, table_, "", seen)
    declared = {name for name, v in vars(records).items()
                if isinstance(v, type) and v.__module__ == records.__name__ and name != "TypedDict"
                and not name.startswith("_")}  # _X: the always-present keys of X (schema.records_text)
    counters = {schema.as_is_class(path, file) + "Counters" for path, file in schema.as_is_groups()}
    assert declared == seen | counters, declared ^ (seen | counters)
    for (path, file), group in schema.as_is_groups().items():  # a piece of its object's class
        cls = getattr(records, schema.as_is_class(path, file) + "Counters")
        assert list(_hints(cls)) == [f.path.rsplit(".", 1)[-1] for f in group]


def test_path_readers_take_their_paths_from_the_table():
    assert fields.keys("memory.limit_bytes") == ("memory", "limit_bytes")
    assert fields.keys("gpu.memory_used_bytes", fields.GPU_RECORD) == ("gpu", "memory_used_bytes")
    with pytest.raises(KeyError):
        fields.keys("memory.limit")  # a field the record does not have: its reader fails at import


def _path_constants(path):
    """The module-level `_NAME = ("a", "b", ...)` tuples of strings of a module: the
    record paths a reader of records by path (the event rules) reads."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.startswith("_") and node.targets[0].id.isupper()
                and isinstance(node.value, ast.Tuple)):
            continue
        try:  # (literal_eval, not ast.Constant: Python 3.7 parses strings as ast.Str)
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        if len(value) >= 2 and all(isinstance(v, str) for v in value):
            yield node.targets[0].id, ".".join(value)


def test_the_event_rules_read_paths_of_the_table():
    folder = os.path.join(ROOT, "cgstat", "events")
    found = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            for const, path in _path_constants(os.path.join(folder, name)):
                found["%s:%s" % (name, const)] = path
    # the events reach record values through cgstat/contract/keys.py, never a path of their own
    assert found == {}


# -- the docs' tables, the readers' keys, the record's order ----------------------------------

@pytest.mark.parametrize("name", sorted(schema.DOCS_TABLES))
def test_docs_tables_are_made_from_the_table(name):
    path = os.path.join(ROOT, "docs", name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    want = schema.docs_text(name, text)
    if os.environ.get("CGSTAT_REGEN_SCHEMA"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(want)
        text = want
    assert text == want, "docs/%s's table differs from the field table (CGSTAT_REGEN_SCHEMA=1 to rewrite it)" % name


def test_docs_metrics_names_fields_of_the_table():
    """docs/metrics.md is prose: every record key it names (a name with a unit: `pgscan_total`,
    `memory.working_set_bytes`; not a kernel file's `_in_bytes`, not a series) is a field."""
    doc = open(os.path.join(ROOT, "docs", "metrics.md"), encoding="utf-8").read()
    leaves = {f.path.rsplit(".", 1)[-1].replace("[]", "") for f in fields.RECORD}
    series = {f.name for f in fields.FAMILIES}
    named = {t.rsplit(".", 1)[-1] for t in re.findall(r"`([a-z_][a-z0-9_.]*)`", doc)
             if "_in_bytes" not in t and t not in series and not t.startswith("_")}
    named = {t for t in named if fields.unit_of(t) and not t.endswith("_us")}
    assert len(named) >= 20  # the scan sees them
    assert sorted(named - leaves) == []


def _table_keys(file, layout):
    """The keys of `file` the table reads on v2 or v1 ("memory.stat anon": anon)."""
    out = set()
    for f in fields.RECORD:
        source = f.v2 if layout == "v2" else f.v1
        for part in source.split(", "):
            name, _, key = part.partition(" ")
            if name == file and key and " " not in key:
                out.add(key)
    return out


def test_readers_keys_are_the_tables():
    """What kernel/controllers/memory.py reads of memory.stat and memory.events is what the
    table's v2/v1 say, both ways (a key read for nothing, or a field nobody reads, fails)."""
    from cgstat.kernel.controllers import memory
    from cgstat.kernel.sample import MemoryEvents

    assert set(memory._MEMORY_STAT_V2) == _table_keys("memory.stat", "v2")
    # v1: total_* twins, and the local shmem/swap read where the total_ one is missing
    assert set(memory._MEMORY_STAT_V1) - {"shmem", "swap"} == _table_keys("memory.stat", "v1")
    assert set(MemoryEvents._fields) == _table_keys("memory.events", "v2") == _table_keys("memory.events.local", "v2")
    from cgstat.kernel.sample import SwapEvents

    assert set(SwapEvents._fields) == _table_keys("memory.swap.events", "v2")
    groups = schema.as_is_groups()
    assert [f.path for f in groups[("memory", "memory.stat")]] == [
        "memory." + k for k in fieldkeys.MemoryStat.RECORD]


def test_cpu_stat_keys_are_the_tables():
    """cpu.py names its cpu.stat keys in its calls (`key(stat, "nr_periods", r, "cpu.stat")`):
    the v2 ones are the table's v2 keys; on v1 (and hybrid, the unified cpu.stat) the table's
    v1 keys and usage/user/system where cpuacct is missing."""
    with open(os.path.join(ROOT, "cgstat", "kernel", "controllers", "cpu.py"), encoding="utf-8") as f:
        source = f.read()
    v2_part, _, v1_part = source.partition("def cpu_v1(")
    read = lambda text: set(re.findall(r'key\(\w+, "(\w+)", r, "cpu.stat"\)', text))  # noqa: E731
    assert read(v2_part) == _table_keys("cpu.stat", "v2")
    assert read(v1_part) - {"usage_usec", "user_usec", "system_usec"} == _table_keys("cpu.stat", "v1")


def _order(value, table, path=""):
    """Where a record's keys are not in the table's order: the paths of those objects."""
    bad = []
    if isinstance(value, dict) and (not path or fields.field(table, path).type == "object"):
        kids = [k.path.rsplit(".", 1)[-1] for k in fields.children(table, path) if not k.path.endswith(("[]", "{}"))]
        if kids and [k for k in value if k in kids] != [k for k in kids if k in value]:
            bad.append(path or "(top)")
        for key, item in value.items():
            if key in kids:
                bad += _order(item, table, (path + "." if path else "") + key)
    elif isinstance(value, list) and path and fields.field(table, path).type == "array":
        for item in value:
            bad += _order(item, table, path + "[]")
    return bad


def test_records_keep_the_tables_order():
    from tests.helpers.contract import run_cgstat

    tree = os.path.join(ROOT, "tests", "fixtures", "v2-fields", "t0")
    records_, _, _ = run_cgstat("once", "--host-root", tree, "--all")
    assert records_
    for r in records_:
        assert _order(r, fields.RECORD) == [], r["cgroup"]
        assert "pgfault_total" in r["memory"]
