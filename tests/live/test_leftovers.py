"""The suite's check of what a run leaves behind (tests/helpers/leftovers.py), on a run of its own:
a test that leaves a temporary file and a cgroup of the run's fails the run, naming both;
one that leaves nothing passes."""

import os
import secrets
import subprocess
import sys

import pytest

from tests.helpers.realcg import Hierarchies

pytestmark = pytest.mark.realcg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_LEAVES = '''
import os, tempfile
from tests.helpers.realcg import PREFIX, Hierarchies

def test_leaves_a_file_and_a_cgroup():
    open(os.path.join(tempfile.gettempdir(), "left-file"), "w").close()
    os.mkdir(os.path.join(Hierarchies().own_dir("{key}"), PREFIX + "leak"))

def test_cleans_up(tmp_path):
    (tmp_path / "x").write_text("x")
'''


def _run(tmp_path, source, run):
    (tmp_path / "test_inner.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CGSTAT_TEST_", "PYTEST_"))}
    env.update(CGSTAT_TEST_RUN=run, PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.helpers.leftovers",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)


def _key():
    h = Hierarchies()
    for key in ("cpu", "pids", "unified", "memory"):
        if h.has(key) and os.access(h.own_dir(key), os.W_OK):
            return h, key
    pytest.skip("no cgroup of our own to write below (needs root)")


def test_leftovers_fail_the_run_and_are_named(tmp_path):
    h, key = _key()
    run = secrets.token_hex(3)
    leak = os.path.join(h.own_dir(key), "cgstat-test-%s-leak" % run)
    try:
        r = _run(tmp_path, _LEAVES.format(key=key), run)
    finally:
        if os.path.isdir(leak):
            os.rmdir(leak)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 1, out
    assert "2 passed" in out and "left behind by this run" in out, out
    assert "/left-file" in out and "cgroup " + leak in out, out
    assert not [n for n in os.listdir(str(tmp_path)) if n.startswith("cgstat-suite-")]  # removed after


def test_a_clean_run_passes(tmp_path):
    r = _run(tmp_path, "def test_nothing(tmp_path):\n    (tmp_path / 'x').write_text('x')\n", secrets.token_hex(3))
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0 and "left behind" not in out, out
    assert not [n for n in os.listdir(str(tmp_path)) if n.startswith("cgstat-suite-")]
