"""Records made from the field table (cgstat/fields.py): every key present, every value
set (no null), each of the type and within the bounds its schema gives. What a consumer
must read from a record, all at once."""

from cgstat import fields

_STRINGS = {"ts": "2026-11-29T20:10:12.807Z", "io.devices[].device": "8:0", "io.limits[].device": "8:0"}


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
