"""Sinks as plug-ins: a module outside the package (tests/helpers/tapsink.py, named in
CGSTAT_PLUGINS) registers one kind; its option is offered by stream and serve, and under
either, beside --store, every record reaches every sink, each the same line."""

import os
import subprocess
import sys

import pytest

from cgstat.pipeline import sinks
from tests.helpers.contract import ROOT

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
HELPERS = os.path.join(ROOT, "tests", "helpers")


def _cgstat(*args, plugins="tapsink", path=()):
    env = dict(os.environ, CGSTAT_PLUGINS=plugins, PYTHONPATH=os.pathsep.join([*path, HELPERS, ROOT]))
    return subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, env=env, cwd=ROOT,
                          timeout=120)


def _dump(store):
    # the recorded tree's clock stands still: every tick is at the time it was recorded
    proc = _cgstat("dump", "--store", store, "--since", "2026-11-29T00:00Z", "--until", "2026-11-30T00:00Z")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _ticks(lines):
    return sum(1 for line in lines.splitlines() if b'"cgroup":"/init.scope"' in line)


def test_a_plugin_sink_runs_under_stream_beside_the_store(tmp_path):
    tap, store = str(tmp_path / "tap"), str(tmp_path / "store")
    proc = _cgstat("stream", "--host-root", FIXTURE, "--interval", "0.2", "--count", "3", "--store", store,
                   "--tap", tap)
    assert proc.returncode == 0, proc.stderr
    with open(tap, "rb") as f:
        tapped = f.read()
    assert tapped == proc.stdout == _dump(store)  # every record, the same line, in every sink
    assert _ticks(tapped) == 3


def test_a_plugin_sink_runs_under_serve_beside_the_store(tmp_path):
    tap, store = str(tmp_path / "tap"), str(tmp_path / "store")
    proc = _cgstat("serve", "--listen", "127.0.0.1:0", "--host-root", FIXTURE, "--interval", "0.2", "--count", "3",
                   "--store", store, "--tap", tap)
    assert proc.returncode == 0, proc.stderr
    with open(tap, "rb") as f:
        tapped = f.read()
    assert _ticks(tapped) == 3 and tapped == _dump(store)


def test_the_plugins_option_is_offered_only_with_the_plugin():
    assert b"--tap FILE" in _cgstat("serve", "--help").stdout
    assert b"--tap" not in _cgstat("stream", "--help", plugins="").stdout


def test_a_plugin_that_fails_to_load_is_said_and_the_run_goes_on():
    proc = _cgstat("stream", "--help", plugins="no_such_module_here,tapsink")
    assert proc.returncode == 0 and b"--tap FILE" in proc.stdout
    assert proc.stderr.decode().splitlines() == [
        "cgstat: plug-in no_such_module_here not loaded: ModuleNotFoundError: No module named 'no_such_module_here'"]


def test_a_kind_whose_option_another_kind_has_is_refused():
    import cgstat.app.sinks  # noqa: F401  (the built-in kinds)

    store_flag = sinks.SinkOption("--store", "taken")
    with pytest.raises(ValueError, match="--store taken by another kind"):
        sinks.register(sinks.SinkKind("copy", (store_flag,), lambda given, context: sinks.Sink()))
    assert "copy" not in [kind.name for kind in sinks.registered()]


def test_a_plugin_from_an_installed_distributions_entry_point(tmp_path):
    dist = tmp_path / "cgstat_tap-1.0.dist-info"
    dist.mkdir()
    (dist / "entry_points.txt").write_text("[console_scripts]\ntap = nothing:here\n\n[cgstat.sinks]\ntap = tapsink\n")
    assert b"--tap FILE" in _cgstat("stream", "--help", plugins="", path=[str(tmp_path)]).stdout
    assert b"--tap" not in _cgstat("stream", "--help", plugins="").stdout
