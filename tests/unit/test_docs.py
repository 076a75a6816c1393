"""Docs stay true to the code: every option used in the README and docs/usage.md exists in
--help, the record example keeps the record's key order (every field documented in
docs/schema.md: tests/unit/test_fields.py), the jq and Python examples run; the README stays
a front door and docs/README.md indexes every page."""

import json
import os
import re
import subprocess
import sys

from tests.helpers.contract import ROOT, SCHEMA, run_cgstat


README = os.path.join(ROOT, "README.md")
USAGE = os.path.join(ROOT, "docs", "usage.md")


def _read(*paths):
    return "\n".join(open(path).read() for path in paths)


def test_readme_options_exist():
    readme = _read(README, USAGE)
    used = {opt for line in readme.splitlines() if re.search(r"\bcgstat (stream|once|pid|--)", line)
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", line[line.index("cgstat "):])}
    helps = ""
    for cmd in ("stream", "once", "pid", None):  # None: the top level (--version)
        argv = [sys.executable, "-m", "cgstat"] + ([cmd] if cmd else []) + ["--help"]
        proc = subprocess.run(argv, capture_output=True,
                              cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
        helps += proc.stdout.decode()
    assert {"--interval", "--output", "--state", "--all", "--match", "--host-root", "--count"} <= used
    assert all(opt in helps for opt in used), sorted(o for o in used if o not in helps)


def test_readme_record_example_follows_the_record_order():
    readme = _read(USAGE)
    block = readme.split("## What a record holds", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    keys = re.findall(r'^\s*\{?"(\w+)":|,"(\w+)":', block, re.M)
    top = list(dict.fromkeys(k for pair in keys for k in pair if k and k in SCHEMA["required"]))
    assert top == SCHEMA["required"]  # the example shows every key, in the record's order
    records, _, _ = run_cgstat("once", "--window", "0", "--host-root",
                               os.path.join(ROOT, "tests/fixtures/v2-systemd/t1"))
    assert list(records[0]) == SCHEMA["required"]


def _readme_jq_programs():
    """Every `jq [flags] '<program>'` in the README's and docs/usage.md's shell blocks (programs
    span lines)."""
    readme = _read(README, USAGE)
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    return [m.group(2) for b in blocks for m in re.finditer(r"\bjq((?: -[a-z]+)*) '([^']*)'", b)]


def test_readme_jq_programs_run_on_debian_jq():
    """Debian 12's jq is 1.6, stricter than 1.7 (`a // b / c` needs parentheses there)."""
    programs = _readme_jq_programs()
    assert len(programs) >= 4
    jq = "/usr/bin/jq"  # the distribution's, not one a developer installed elsewhere
    records, _, _ = run_cgstat("once", "--window", "0", "--all", "--host-root",
                               os.path.join(ROOT, "tests/fixtures/v2-systemd/t1"))
    lines = "".join(json.dumps(r) + "\n" for r in records).encode()
    for program in programs:
        proc = subprocess.run([jq, "-c", program], input=lines, capture_output=True, timeout=30)
        assert proc.returncode == 0, (program, proc.stderr.decode())
    (per_container,) = [p for p in programs if "limit_mib" in p]
    first = subprocess.run([jq, "-c", per_container], input=lines, capture_output=True, timeout=30)
    rows = [json.loads(x) for x in first.stdout.splitlines()]
    assert len(rows) == sum(1 for r in records if r["container"]) and all("limit_mib" in r for r in rows)


def test_readme_python_example_runs():
    readme = _read(README, USAGE)
    (block,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    proc = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()


def test_readme_is_a_front_door_with_the_quick_start():
    readme = open(README).read()
    assert len(readme.splitlines()) <= 150
    quick = readme.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert quick.splitlines() == ["bin/install stream --count 3", "bash tests/run"]


def test_docs_index_lists_every_page():
    index = open(os.path.join(ROOT, "docs", "README.md")).read()
    pages = sorted(n for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md") and n != "README.md")
    linked = sorted(set(re.findall(r"\]\(([a-z]+\.md)\)", index)))
    assert linked == pages


def test_readme_cites_figures_by_linking_the_bench_table():
    """Figures live in bench/README.md (what, how measured, figure, date); the README links it."""
    readme = open(README).read()
    figures = re.findall(r"\d[\d,.]*\s?(?:ms|µs|s of CPU|MiB|KiB|GiB|MB|KB|GB|bytes a value)\b", readme)
    assert figures == []
    assert "](bench/README.md)" in readme


def test_readme_lists_every_command():
    proc = subprocess.run([sys.executable, "-m", "cgstat", "--help"], capture_output=True, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})
    commands = re.findall(r"^  ([a-z]+)  ", proc.stdout.decode().split("Commands:", 1)[1], re.M)
    table = open(README).read().split("## The commands", 1)[1]
    listed = re.findall(r"^\| `([a-z]+)` \|", table, re.M)
    assert len(commands) >= 10 and sorted(listed) == sorted(commands)
