"""The JSON Schemas of the records, made from the field table (cgstat/fields.py).

cgstat/record.schema.json, gpu-record.schema.json and event.schema.json are this module's
output, checked in (they ship in the package) and tested equal to it:
`python -m cgstat.schema --write` (or `CGSTAT_REGEN_SCHEMA=1 pytest tests/test_fields.py`)
writes them again after a change to the table.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Tuple

from cgstat.fields import RECORD, SCHEMA_FILES, Field, children

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


def write(folder: str) -> None:
    for name in SCHEMA_FILES:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text(name))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m cgstat.schema --write   (rewrites cgstat/*.schema.json from cgstat/fields.py)")
    write(os.path.dirname(os.path.abspath(__file__)))
