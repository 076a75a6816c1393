"""The shape of the code: the layers contract in pyproject.toml (lint-imports), no import
circle anywhere in the package (the layers contract cannot see one inside a layer), and no
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
    assert [what for _, what in private_imports("cgstat.outputs.top_screen", src)] == [
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
           "if TYPE_CHECKING:\n    from cgstat.contract.types import Container\n    from cgstat.contract import types\n"
           "from cgstat.contract.types import Pod\n"
           "def f():\n    from cgstat.contract import types\n")
    assert runtime_imports_of(src, "cgstat.contract.types") == [5, 7]


def test_the_record_types_are_never_imported_at_run_time():
    """cgstat/contract/types.py's TypedDicts are for the type checker: built at import they cost
    a cron run ~6 ms of its start (records stay plain dicts at run time)."""
    found = []
    for module, path in _modules():
        if module in ("cgstat.contract.types", "cgstat.contract.schema"):  # the generator writes and checks it
            continue
        with open(path, encoding="utf-8") as f:
            found += ["%s:%d" % (os.path.relpath(path, ROOT), line) for line in runtime_imports_of(f.read(), "cgstat.contract.types")]
    assert found == []


def import_graph(modules):
    """{module: the cgstat modules it imports}, every import counted: at the top, under
    TYPE_CHECKING and inside functions (a circle through any of them is still a circle
    for a reader following the code)."""
    names = {m for m, _ in modules}
    edges = {}
    for module, path in modules:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(tree):
            found = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                found = [base] + [base + "." + a.name for a in node.names]
            for target in found:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                # a module importing its own package's __init__ is no circle of interest
                if target and target != module and not module.startswith(target + "."):
                    targets.add(target)
        edges[module] = targets
    return edges


def circles(edges):
    """The import circles of `edges`: each strongly connected set of two or more modules
    (Tarjan's algorithm, iterative), sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(tuple(sorted(comp)))
    return sorted(out)


def test_the_circle_finder_finds_circles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert circles(edges) == [("a", "b", "c")]


def test_the_import_graph_counts_every_import(tmp_path):
    pkg = tmp_path / "cgstat"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cgstat.b import X\n")
    (pkg / "b.py").write_text("def f():\n    from cgstat import a\n")
    mods = [("cgstat", str(pkg / "__init__.py")), ("cgstat.a", str(pkg / "a.py")), ("cgstat.b", str(pkg / "b.py"))]
    assert circles(import_graph(mods)) == [("cgstat.a", "cgstat.b")]


def test_no_import_circle_in_the_package():
    assert circles(import_graph(list(_modules()))) == []
