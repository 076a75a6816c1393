"""What a run of the suite leaves behind, checked when it ends: a leftover fails the run
(exit status 1) and is listed in the summary. Loaded by tests/conftest.py, in the process that
runs the session (with pytest-xdist, the controller, once all workers are done).

- Temporary files: the run's TMPDIR is a folder of its own, cgstat-suite-XXXXXX in the
  system's temporary folder (mode 1777, as /tmp: a test may hand a file in it to nobody).
  Whatever honours TMPDIR lands there: tempfile and mktemp in the tests, and Chromium,
  dockerd, podman and cgstat started by them. Anything still in it at the end is a
  leftover; then the folder is removed (never across a mount point). pytest's own folders
  (tmp_path) stay where pytest keeps them; pyproject.toml keeps only failed tests' ones,
  of the last run.
- Cgroups: every cgroup the suite makes carries the run's prefix (realcg.PREFIX,
  cgstat-test-<run>-), so that another run's, beside this one, is told apart. The folders
  below our own cgroup in each hierarchy are listed before and after: a new one with the
  run's prefix is a leftover. So is a new, empty folder on the path of our own cgroup of
  another hierarchy: a runtime given one --cgroup-parent for every hierarchy (podman) makes
  that path in each, where ours is elsewhere (on a hybrid host, memory nested, the rest /).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Dict, List, Set

import pytest

from tests.helpers.realcg import PREFIX, Hierarchies

_TMP_ENV = "CGSTAT_TEST_TMP"  # set while a session's folder is in use (workers inherit it)
_STATE = pytest.StashKey[dict]()
_FOUND = pytest.StashKey[List[str]]()


def _mounts_below(path: str) -> List[str]:
    below = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(path.rstrip("/") + "/"):
                below.append(point)
    return below


def _dirs_below(top: str) -> Set[str]:
    """Every folder below `top` (a cgroup hierarchy's own folder), `top` excluded."""
    found: Set[str] = set()
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        found.add(e.path)
                        stack.append(e.path)
        except OSError:  # removed meanwhile
            continue
    return found


def _cgroups() -> Dict[str, Set[str]]:
    """'below': the folders below our own cgroup in every hierarchy; 'paths': the folders,
    in each hierarchy, on the path of our own cgroup in another one."""
    h = Hierarchies()
    below: Set[str] = set()
    paths: Set[str] = set()
    keys = [k for k in h.mounts if h.has(k)]
    for key in keys:
        below |= _dirs_below(h.own_dir(key))
    for key in keys:
        for other in keys:
            parts = [p for p in h.own[other].split("/") if p]
            for n in range(1, len(parts) + 1):
                d = os.path.join(h.mounts[key], *parts[:n])
                if os.path.isdir(d) and os.path.normpath(d) != h.own_dir(key):
                    paths.add(d)
    return {"below": below, "paths": paths}


def _has_subfolder(d: str) -> bool:
    try:
        with os.scandir(d) as it:
            return any(e.is_dir(follow_symlinks=False) for e in it)
    except OSError:
        return False


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput") or os.environ.get(_TMP_ENV):
        return  # a worker, or a pytest run by a test: the session that started it checks
    config._tmp_path_factory.getbasetemp()  # pytest's own folder, where pytest keeps it
    tmp = tempfile.mkdtemp(prefix="cgstat-suite-")
    os.chmod(tmp, 0o1777)
    state = {"tmp": tmp, "env": os.environ.get("TMPDIR"), "cgroups": _cgroups()}
    os.environ["TMPDIR"] = os.environ[_TMP_ENV] = tmp
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    config.stash[_STATE] = state


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    found: List[str] = []
    tmp = state["tmp"]
    for dirpath, dirnames, filenames in os.walk(tmp):
        for name in sorted(dirnames + filenames):
            found.append(os.path.join(dirpath, name))
        dirnames[:] = []  # the top of each is enough
    mounts = _mounts_below(tmp)
    if mounts:
        found += ["mounted: " + m for m in mounts]
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if state["env"] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = state["env"]
    os.environ.pop(_TMP_ENV, None)
    tempfile.tempdir = None

    before, after = state["cgroups"], _cgroups()
    ours = {d for d in after["below"] - before["below"] if any(p.startswith(PREFIX) for p in d.split("/"))}
    found += ["cgroup " + d for d in sorted(ours) if os.path.dirname(d) not in ours]  # the top of each
    for d in sorted(after["paths"] - before["paths"]):
        if not _has_subfolder(d):
            found.append("cgroup " + d)
    if found:
        config.stash[_FOUND] = found
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    found = config.stash.get(_FOUND, None)
    if found:
        terminalreporter.section("left behind by this run", sep="=", red=True, bold=True)
        for line in found:
            terminalreporter.write_line(line)
