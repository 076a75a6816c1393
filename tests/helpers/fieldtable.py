"""Records made from the field table (cgstat/contract/fields.py): every key present, every value
set (no null), each of the type and within the bounds its schema gives. What a consumer
must read from a record, all at once."""

from cgstat.contract import fields

_STRINGS = {"ts": "2026-11-29T20:10:12.807Z", "evidence.kernel_ts": "2026-11-29T20:10:12.321Z", "io.devices[].device": "8:0", "io.limits[].device": "8:0"}


def example(table, path="", same_as=""):
    """The value of field `path` of `table` (the whole record for "")."""
    f = fields.field(table, path) if path else None
    if f is not None and f.same_as:
        return example(fields.RECORD, f.same_as)
    if f is None or f.type in ("object", "array", "map"):
        kids = fields.children(table, path)
        if f is not None and f.type == "array":
            return [example(table, kids[0].path)]
        if f is not None and f.type == "map":
            return {"k": example(table, kids[0].path)}
        return {k.path.rsplit(".", 1)[-1]: example(table, k.path) for k in kids}
    schema = dict(f.schema)
    if f.type == "const":
        return schema["const"]
    if "enum" in schema:
        return next(v for v in schema["enum"] if v is not None)
    if f.type == "str":
        return _STRINGS.get(f.path, "/x" if schema.get("pattern") == "^/" else "x-" + f.path)
    if f.type == "bool":
        return True
    low = schema.get("minimum", 0) + 2
    return low if f.type == "int" else low + 0.5


def blank(table, path="", present=False):
    """The value of field `path` when nothing could be read: null where the field may be
    null (unless `present`: an object, a list), else 0, "", false or empty (the whole
    record for "")."""
    f = fields.field(table, path) if path else None
    if f is not None and f.nullable and not (present and f.type in ("object", "array", "map")):
        return None
    if f is None or f.type == "object":
        if f is not None and f.same_as:
            return blank(fields.RECORD, f.same_as)
        return {k.path.rsplit(".", 1)[-1]: blank(table, k.path) for k in fields.children(table, path) if k.required}
    if f.type == "array":
        return []
    if f.type == "map":
        return {"unified": "/x"} if f.path == "paths" else {}
    return example(table, path)


_TABLES = {"cgroup": fields.RECORD, "pod": fields.RECORD, "gpu": fields.GPU_RECORD, "event": fields.EVENT}
_EVENT = {"kind": "memory_growth", "severity": "warning", "message": "m", "resolves": None}


def _merge(base, overrides):
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict) and key not in ("labels", "paths", "evidence"):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def complete(table, path, value):
    """`value` of field `path` with the keys its objects lack set as blank() sets them."""
    f = fields.field(table, path) if path else None
    if f is not None and f.same_as:
        table, path = fields.RECORD, f.same_as
        f = fields.field(table, path)
    if isinstance(value, dict) and (f is None or f.type == "object") and (not path or fields.children(table, path)):
        out = blank(table, path, True)
        for key, v in value.items():
            sub = path + "." + key if path else key
            out[key] = complete(table, sub, v) if any(k.path == sub for k in table) else v
        return out
    if isinstance(value, list) and f is not None and f.type == "array":
        return [complete(table, path + "[]", v) for v in value]
    return value


def record(record_type="cgroup", **overrides):
    """A record of type `record_type` valid against its schema: every key, null (or empty)
    but for `overrides` (merged into the objects they name; an object given where the
    record has null gets the keys it lacks, null or empty)."""
    from tests.helpers.contract import validate

    table = _TABLES[record_type]
    base = blank(table)
    base.update(type=record_type, cgroup="/x", ts="2026-11-29T20:10:12.807Z", host="h")
    if record_type == "gpu":
        del base["cgroup"]
    if record_type == "event":
        base.update(_EVENT)
    out = complete(table, "", _merge(base, overrides))
    validate(out)
    return out
