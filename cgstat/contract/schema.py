"""What is made from the field table (cgstat/contract/fields.py): the records' JSON Schemas, TypedDicts
and key paths.

cgstat/contract/record.schema.json, gpu-record.schema.json, event.schema.json, cgstat/contract/types.py,
cgstat/contract/keys.py and the tables of docs/prometheus.md and docs/schema.md are this module's output, checked in (the schemas ship in the package; the types are
imported) and tested equal to it: `python -m cgstat.contract.schema --write` (or
`CGSTAT_REGEN_SCHEMA=1 pytest tests/unit/test_fields.py`) writes them again after a change to
the table.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from cgstat.contract.fields import EVENT, EXIT, FAMILIES, GPU_RECORD, RECORD, SCHEMA_FILES, Family, Field, children, field

_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "object": "object",
               "array": "array", "map": "object"}


def _node(fields: Tuple[Field, ...], f: Field) -> Dict[str, Any]:
    node: Dict[str, Any] = {}
    if f.type not in ("enum", "const"):
        kind = _JSON_TYPES[f.type]
        node["type"] = [kind, "null"] if f.nullable else kind
    node.update(f.schema)
    if f.same_as:
        node.update(_object(RECORD, f.same_as, True))
    elif f.type in ("object", "array", "map"):
        node.update(_object(fields, f.path, f.closed))
    if f.doc:
        node["description"] = f.doc
    return node


def _object(fields: Tuple[Field, ...], path: str, closed: bool) -> Dict[str, Any]:
    """The keywords of an object, array or map node: its properties, items or values."""
    node: Dict[str, Any] = {}
    props: Dict[str, Any] = {}
    required: List[str] = []
    for child in children(fields, path):
        if child.path.endswith("[]"):
            node["items"] = _node(fields, child)
        elif child.path.endswith("{}"):
            node["additionalProperties"] = _node(fields, child)
        else:
            name = child.path.rsplit(".", 1)[-1]
            props[name] = _node(fields, child)
            if child.required:
                required.append(name)
    if props:
        if closed:
            node["additionalProperties"] = False
        if required:
            node["required"] = required
        node["properties"] = props
    return node


def schema(name: str) -> Dict[str, Any]:
    """The JSON Schema of one file of SCHEMA_FILES, as a dict."""
    fields, head = SCHEMA_FILES[name]
    out: Dict[str, Any] = {k: v for k, v in head.items() if k != "allOf"}
    out["type"] = "object"
    out.update(_object(fields, "", True))
    if "allOf" in head:
        out["allOf"] = head["allOf"]
    return out


def text(name: str) -> str:
    """The file's text: two-space indented JSON and a final newline."""
    return json.dumps(schema(name), indent=2, ensure_ascii=False) + "\n"


# -- cgstat/contract/types.py ---------------------------------------------------------------------

_PY = {"int": "int", "float": "float", "str": "str", "bool": "bool", "enum": "str"}

# Class names where the path's own would not say it; an object shaped like one made
# before (the three pressure objects, memory.events and events_local) is that class.
_NAMES = {
    ("cgroup", ""): "CgroupRecord", ("gpu", ""): "GpuRecord", ("event", ""): "EventRecord",
    ("exit", ""): "ExitRecord",
    ("cgroup", "errors[]"): "RecordError", ("gpu", "errors[]"): "RecordError",
    ("cgroup", "io.devices[]"): "IoDevice", ("cgroup", "io.limits[]"): "IoLimit",
    ("cgroup", "network.interfaces[]"): "NetworkInterface", ("cgroup", "pressure.cpu"): "Psi",
    ("cgroup", "gpu"): "GpuUse", ("cgroup", "gpu.processes[]"): "GpuProcessUse",
    ("gpu", "gpu"): "GpuFigures", ("gpu", "processes[]"): "GpuProcess",
    ("event", "container"): "Container",  # the cgroup record's, not checked by the schema
    ("event", "evidence"): "Evidence",  # open: keys per kind
}
_TABLES = {"cgroup": RECORD, "gpu": GPU_RECORD, "event": EVENT, "exit": EXIT}

_HEAD = '''"""The records as types: TypedDicts of the cgroup/pod, GPU and event records.

Made from the field table (cgstat/contract/fields.py) by cgstat/contract/schema.py: do not edit, run
`python -m cgstat.contract.schema --write`. The records stay plain dicts at run time (orjson writes
them, sinks pass them on); these types are for mypy, so that a producer that leaves out a
key and a consumer that reads a key the record has not fail `mypy cgstat`. Python 3.7 has
no typing.TypedDict: there the classes are dict subclasses of the same names, never made.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Union

if sys.version_info >= (3, 8):
    from typing import TypedDict
else:  # pragma: no cover - Python 3.7
    class TypedDict(dict):
        def __init_subclass__(cls, total: bool = True, **kwargs: object) -> None:
            super().__init_subclass__(**kwargs)

# An event's figures: keys per kind (docs/events.md), open to new kinds' keys; the
# schema types the common ones (fields.EVENT, evidence.*).
Evidence = Dict[str, Any]
'''

_TAIL = '''
Record = Union[CgroupRecord, GpuRecord, EventRecord, ExitRecord]
Sampled = Union[CgroupRecord, GpuRecord, ExitRecord]  # what a Sampler's tick makes
JsonObject = Mapping[str, object]  # any one line of JSON output: a record, `cgstat pid`'s objects
'''


class _Classes:
    def __init__(self) -> None:
        self.bodies: Dict[str, List[str]] = {}  # class name -> its key lines, in the order made

    def name(self, kind: str, f: Optional[Field], path: str) -> str:
        """The class of the object at `path` of record `kind` (made, with its children's, if new)."""
        given = _NAMES.get((kind, path))
        table = _TABLES[kind]
        if given in ("Evidence", "Container") and path and (f is None or not f.same_as):
            return given
        if f is not None and f.same_as:
            return self.name("cgroup", None, f.same_as)
        # a key not always present (fields.Field.required false) is marked "?": records_text
        # puts those in a total=False subclass
        lines = [("" if k.required else "?") + self._line(kind, k)
                 for k in children(table, path) if not k.path.endswith(("[]", "{}"))]
        for known, body in self.bodies.items():
            if body == lines and (given is None or given == known):
                return known
        name = given or "".join(part.capitalize() for part in path.replace("[]", "").replace("_", ".").split("."))
        assert name not in self.bodies, name
        self.bodies[name] = lines
        return name

    def _line(self, kind: str, f: Field) -> str:
        table = _TABLES[kind]
        if f.type == "const":
            text = type(dict(f.schema)["const"]).__name__
        elif f.type in _PY:
            text = _PY[f.type]
        elif f.type == "map":
            (item,) = children(table, f.path)
            text = "Dict[str, %s]" % _PY[item.type]
        elif f.type == "array":
            (item,) = children(table, f.path)
            text = "List[%s]" % (_PY[item.type] if item.type in _PY else self.name(kind, item, item.path))
        else:
            text = self.name(kind, f, f.path)
        if f.nullable and f.type != "const":
            text = "Optional[%s]" % text
        return "    %s: %s" % (f.path.rsplit(".", 1)[-1], text)


def records_text() -> str:
    """The text of cgstat/contract/types.py."""
    classes = _Classes()
    for kind in _TABLES:
        classes.name(kind, None, "")
    out = [_HEAD]
    for name, lines in classes.bodies.items():
        always = [line for line in lines if not line.startswith("?")]
        sometimes = [line[1:] for line in lines if line.startswith("?")]
        if not sometimes:
            out.append("\n\nclass %s(TypedDict):\n%s\n" % (name, "\n".join(always)))
            continue
        out.append("\n\nclass _%s(TypedDict):\n%s\n" % (name, "\n".join(always)))
        out.append("\n\nclass %s(_%s, total=False):  # keys only some runs write\n%s\n"
                   % (name, name, "\n".join(sometimes)))
    for (path, file), group in as_is_groups().items():  # the piece of an object the record builder adds in one
        out.append("\n\nclass %sCounters(TypedDict):\n    \"\"\"The %s counters of %s read as is (fields.Field.as_is).\"\"\"\n%s\n"
                   % (as_is_class(path, file), file, path, "\n".join(classes._line("cgroup", f) for f in group)))
    out.append("\n" + _TAIL)
    return "".join(out)


# -- cgstat/contract/keys.py -------------------------------------------------------------------

_KEYS_HEAD = '''"""The key path of every record field, one constant each: the one way a consumer reaches a value.

Made from the field table (cgstat/contract/fields.py) by cgstat/contract/schema.py: do not edit, run
`python -m cgstat.contract.schema --write`. `Cgroup.MEMORY_LIMIT_BYTES` is ("memory", "limit_bytes"),
read as `value_at(record, *Cgroup.MEMORY_LIMIT_BYTES)` (cgstat/pipeline/build.py); a name the table
does not have fails `mypy cgstat`. A field inside an array's items (`io.devices[].device`)
is named with ITEM and holds the keys below the item: `Cgroup.IO_DEVICES_ITEM_DEVICE` is
("device",). A reader that holds an object already takes the last key
(`memory.get(Cgroup.MEMORY_WORKING_SET_BYTES[-1])`). Imports nothing: a cron run reads a
few paths without building the table.
"""
'''
_KEYS_CLASSES = (("Cgroup", RECORD, "the cgroup and pod record (record.schema.json)"),
                 ("Gpu", GPU_RECORD, "the GPU device record (gpu-record.schema.json)"),
                 ("Event", EVENT, "the event record (event.schema.json)"),
                 ("Exit", EXIT, "the exit record (exit.schema.json)"))


def key_name(path: str) -> str:
    """The constant of a path: `io.devices[].device` is IO_DEVICES_ITEM_DEVICE."""
    return path.replace("[]", ".item").replace(".", "_").upper()


def key_path(path: str) -> Tuple[str, ...]:
    """The keys of a path, below its innermost array's items."""
    return tuple(path.rsplit("[].", 1)[-1].split("."))


def as_is_groups(table: Tuple[Field, ...] = RECORD) -> Dict[Tuple[str, str], List[Field]]:
    """The fields read as the kernel writes them (Field.as_is), by (object path, file): each
    group next to each other in the table, as the record builder writes them in one piece."""
    groups: Dict[Tuple[str, str], List[Field]] = {}
    last: Optional[Tuple[str, str]] = None
    for f in table:
        if not f.as_is:
            last = None
            continue
        file, _, key = f.v2.partition(" ")
        v1_file, _, v1_key = f.v1.partition(" ")
        assert key and " " not in key and (f.v1 == "-" or (v1_file == file and v1_key)), f.path
        group = (f.path.rsplit(".", 1)[0], file)
        assert group == last or group not in groups, "%s: the %s counters must be next to each other" % (f.path, file)
        groups.setdefault(group, []).append(f)
        last = group
    return groups


def as_is_class(path: str, file: str) -> str:
    """The name of a group's key class and TypedDict: MemoryStat (memory.stat of `memory`)."""
    return "".join(w.capitalize() for w in file.replace("_", ".").split("."))


def _wrapped(names: List[str], indent: int) -> str:
    """A tuple of strings as Python, wrapped at 100 columns."""
    lines, line = [], ""
    for text in ['"%s"' % n for n in names]:
        if line and indent + len(line) + len(text) + 2 > 100:
            lines.append(line.rstrip())
            line = ""
        line += text + ", "
    lines.append(line.rstrip(", ") + ("," if len(names) == 1 else ""))
    return "(" + ("\n" + " " * indent).join(lines) + ")"


def fieldkeys_text() -> str:
    """The text of cgstat/contract/keys.py."""
    out = [_KEYS_HEAD]
    for (path, file), group in as_is_groups().items():
        out.append('\n\nclass %s:\n    """The %s counters of the record\'s %s object read as the kernel writes them: '
                   'their keys\n    in the record, in the file on v2, on v1 ("": none there)."""\n\n'
                   % (as_is_class(path, file), file, path))
        for const, names in (("RECORD", [f.path.rsplit(".", 1)[-1] for f in group]),
                             ("V2", [f.v2.partition(" ")[2] for f in group]),
                             ("V1", [f.v1.partition(" ")[2] for f in group])):
            out.append("    %s = %s\n" % (const, _wrapped(names, len(const) + 8)))
    for cls, table, doc in _KEYS_CLASSES:
        out.append("\n\nclass %s:\n    \"\"\"The keys of %s.\"\"\"\n\n" % (cls, doc))
        made = set()
        for f in table:
            if f.path.endswith(("[]", "{}")) or "{}" in f.path:
                continue
            name = key_name(f.path)
            assert name not in made, name
            made.add(name)
            keys = key_path(f.path)
            out.append("    %s = (%s%s)\n" % (name, ", ".join('"%s"' % k for k in keys), "," if len(keys) == 1 else ""))
    return "".join(out)


# -- the docs' tables -------------------------------------------------------------------------
#
# docs/prometheus.md's table of every series and docs/schema.md's of every field, between
# two markers in each (the prose around them is written by hand); tested equal to this.

_BEGIN = "<!-- BEGIN %s: made from cgstat/contract/fields.py by `python -m cgstat.contract.schema --write` -->\n"
_END = "<!-- END %s -->\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def _type_text(f: Field) -> str:
    text = {"int": "int", "float": "number", "str": "string", "bool": "bool", "object": "object", "array": "array",
            "map": "object", "enum": "string", "const": "const"}[f.type]
    return text + "/null" if f.nullable and f.type != "const" else text


def _source(f: Family) -> str:
    """A family's source, with its labels (but a DCGM series' ten, said once in the text) and
    how a bool is written."""
    text = f.source
    if f.field and field(GPU_RECORD if f.scope == "gpu" else RECORD, f.field).type == "bool":
        text += " (1 or 0)"
    if f.labels and f.scope != "self" and not f.name.startswith("DCGM_") and "label" not in text:
        text += " (label%s %s)" % ("s" if len(f.labels) > 1 else "", ", ".join("`%s`" % name for name in f.labels))
    return text


def series_table() -> str:
    out = ["| series | type | source (record field) | cAdvisor counterpart |", "|---|---|---|---|"]
    out += ["| `%s` | %s | %s | %s |" % (f.name, f.kind, _cell(_source(f)), _cell(f.counterpart)) for f in FAMILIES]
    return "\n".join(out) + "\n"


def fields_table() -> str:
    out = ["Cgroup and pod records:", "", "| field | type | v2 source | v1 source | meaning |", "|---|---|---|---|---|"]
    out += ["| `%s` | %s | %s | %s | %s |" % (f.path, _type_text(f), _cell(f.v2), _cell(f.v1), _cell(f.doc))
            for f in RECORD]
    out += ["", "GPU records (`type: \"gpu\"`):", "", "| field | type | NVML source | meaning |", "|---|---|---|---|"]
    out += ["| `%s` | %s | %s | %s |" % (f.path, _type_text(f), _cell(f.v2), _cell(f.doc)) for f in GPU_RECORD]
    return "\n".join(out) + "\n"


DOCS_TABLES = {"prometheus.md": ("series", series_table), "schema.md": ("fields", fields_table)}


def docs_text(name: str, text: str) -> str:
    """A docs file's text with its table made again (between its markers)."""
    mark, make = DOCS_TABLES[name]
    head, begin, rest = text.partition(_BEGIN % mark)
    _, end, tail = rest.partition(_END % mark)
    if not begin or not end:
        raise ValueError("docs/%s has no %s markers" % (name, mark))
    return head + begin + make() + end + tail


def write(folder: str) -> None:
    for name in SCHEMA_FILES:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text(name))
    with open(os.path.join(folder, "types.py"), "w", encoding="utf-8") as f:
        f.write(records_text())
    with open(os.path.join(folder, "keys.py"), "w", encoding="utf-8") as f:
        f.write(fieldkeys_text())
    docs = os.path.join(os.path.dirname(os.path.dirname(folder)), "docs")
    for name in DOCS_TABLES if os.path.isdir(docs) else ():  # a checkout (an installed package has none)
        path = os.path.join(docs, name)
        with open(path, encoding="utf-8") as f:
            made = docs_text(name, f.read())
        with open(path, "w", encoding="utf-8") as f:
            f.write(made)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m cgstat.contract.schema --write   (rewrites cgstat/contract/*.schema.json, cgstat/contract/types.py, "
                 "cgstat/contract/keys.py and the tables of docs/prometheus.md and docs/schema.md from cgstat/contract/fields.py)")
    write(os.path.dirname(os.path.abspath(__file__)))
