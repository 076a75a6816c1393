"""The shape of the code: the layers contract in pyproject.toml (lint-imports), and no
module importing another module's private (_underscored) name."""

import ast
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "cgstat")


def _lint_imports():
    here = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    return here if os.path.exists(here) else shutil.which("lint-imports")


def test_the_layers_contract_is_kept():
    tool = _lint_imports()
    if tool is None:
        pytest.skip("lint-imports not installed (the test extra installs it on Python 3.11+)")
    proc = subprocess.run([tool, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Layers point down KEPT" in proc.stdout and "0 broken" in proc.stdout


def _modules():
    for folder, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                yield (rel[:-len(".__init__")] if rel.endswith(".__init__") else rel), path


# A NamedTuple's own methods and attributes: underscored so as not to clash with fields.
_NAMEDTUPLE_API = {"_fields", "_make", "_replace", "_asdict", "_field_defaults"}


def _private(name):
    return (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and name not in _NAMEDTUPLE_API)


def private_imports(module, source):
    """(line, what) for each private name of another cgstat module that `source` imports
    or reads from an imported cgstat module."""
    found = []
    tree = ast.parse(source)
    package = module.rsplit(".", 1)[0]
    aliases = {}  # local name -> the cgstat module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if not base.startswith("cgstat"):
                continue
            for a in node.names:
                if _private(a.name) and base != module:
                    found.append((node.lineno, "%s.%s" % (base, a.name)))
                aliases[a.asname or a.name] = base + "." + a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("cgstat"):
                    if _private(a.name.rsplit(".", 1)[-1]):
                        found.append((node.lineno, a.name))
                    aliases[a.asname or a.name.split(".")[0]] = a.asname and a.name or a.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            target = aliases.get(node.value.id)
            if target is not None and target != module:
                found.append((node.lineno, "%s.%s" % (target, node.attr)))
    return found


def test_the_checker_finds_private_imports():
    src = ("from cgstat.pipeline.schedule import _Wake, Schedule\n"
           "from . import _helpers\n"
           "import cgstat.kernel.parse as p\n"
           "x = p._split(b'')\n"
           "from cgstat.outputs.table import display_name\n")
    assert [what for _, what in private_imports("cgstat.outputs.top", src)] == [
        "cgstat.pipeline.schedule._Wake", "cgstat.outputs._helpers", "cgstat.kernel.parse._split"]


def test_no_module_imports_another_modules_private_names():
    found = []
    for module, path in _modules():
        with open(path, encoding="utf-8") as f:
            found += ["%s:%d %s" % (os.path.relpath(path, ROOT), line, what)
                      for line, what in private_imports(module, f.read())]
    assert found == []


def runtime_imports_of(source, target):
    """Lines of `source` that import module `target` (or a name from it) outside an
    `if TYPE_CHECKING:` block."""
    tree = ast.parse(source)
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    parent, _, leaf = target.rpartition(".")
    found = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module == target or
                                                 (node.module == parent and any(a.name == leaf for a in node.names))):
            found.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name == target for a in node.names):
            found.append(node.lineno)
    return found


def test_the_checker_finds_runtime_imports():
    src = ("from typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from cgstat.records import Container\n    from cgstat import records\n"
           "from cgstat.records import Pod\n"
           "def f():\n    from cgstat import records\n")
    assert runtime_imports_of(src, "cgstat.records") == [5, 7]


def test_the_record_types_are_never_imported_at_run_time():
    """cgstat/records.py's TypedDicts are for the type checker: built at import they cost
    a cron run ~6 ms of its start (records stay plain dicts at run time)."""
    found = []
    for module, path in _modules():
        if module in ("cgstat.records", "cgstat.schema"):  # the generator writes and checks it
            continue
        with open(path, encoding="utf-8") as f:
            found += ["%s:%d" % (os.path.relpath(path, ROOT), line) for line in runtime_imports_of(f.read(), "cgstat.records")]
    assert found == []
