"""Docs stay true to the code: every schema field documented, every option used in the
README exists in --help, the README's record example keeps the record's key order."""

import os
import re
import subprocess
import sys

from contract import ROOT, SCHEMA, run_cgstat


def _fields(schema, prefix=""):
    for name, sub in schema.get("properties", {}).items():
        yield name
        yield from _fields(sub, prefix + name + ".")
        items = sub.get("items")
        if isinstance(items, dict):
            yield from _fields(items)


def test_every_schema_field_is_documented():
    doc = open(os.path.join(ROOT, "docs", "schema.md")).read()
    missing = sorted({f for f in _fields(SCHEMA) if f"`{f}`" not in doc and f not in doc})
    assert not missing, missing


def test_readme_options_exist():
    readme = open(os.path.join(ROOT, "README.md")).read()
    used = {opt for line in readme.splitlines() if re.search(r"\bcgstat (stream|once|pid|--)", line)
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", line[line.index("cgstat "):])}
    helps = ""
    for cmd in ("stream", "once", "pid"):
        proc = subprocess.run([sys.executable, "-m", "cgstat", cmd, "--help"], capture_output=True,
                              cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
        helps += proc.stdout.decode()
    assert {"--interval", "--output", "--state", "--all", "--match", "--host-root", "--count"} <= used
    assert all(opt in helps for opt in used), sorted(o for o in used if o not in helps)


def test_readme_record_example_follows_the_record_order():
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = readme.split("## What a record holds", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    keys = re.findall(r'^\s*\{?"(\w+)":|,"(\w+)":', block, re.M)
    top = list(dict.fromkeys(k for pair in keys for k in pair if k and k in SCHEMA["required"]))
    assert top == SCHEMA["required"]  # the example shows every key, in the record's order
    records, _, _ = run_cgstat("once", "--window", "0", "--host-root",
                               os.path.join(ROOT, "tests/fixtures/v2-systemd/t1"))
    assert list(records[0]) == SCHEMA["required"]
