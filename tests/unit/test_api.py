"""The Python API: `cgstat.Sampler(...).tick()` returns the records `cgstat stream` writes."""

import io
import os
import subprocess
import sys

import pytest

import cgstat
from tests.helpers.contract import ROOT, validate

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd")


def test_sampler_over_a_recorded_tree_matches_the_cli():
    from cgstat.diagnostics import Warner

    sampler = cgstat.Sampler(host_root=os.path.join(V2, "t1"), match="docker-5113",
                             warner=Warner(io.StringIO()))
    (record,) = sampler.tick()
    validate(record)
    assert record["container"]["name"] == "tf-training" and record["interval_s"] is None
    sampler.close()


def test_bad_match_is_a_cgstat_error():
    with pytest.raises(cgstat.CgstatError, match="not a regular expression"):
        cgstat.Sampler(match="(")


def test_import_cgstat_stays_cheap():
    code = "import sys, cgstat; print(sorted(m for m in sys.modules if m.startswith(('cgstat.', 'typer', 'orjson'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_the_python_api_prints_nothing_unless_asked():
    # (the CLI's stderr lines came out of a program that only imported cgstat)
    tree = os.path.join(V2, "t1")
    code = ("import sys, cgstat\n"
            f"s = cgstat.Sampler(host_root={tree!r}, match='zzz')\n"
            "s.tick(); s.tick(); s.close()\n"
            "said = []\n"
            f"s = cgstat.Sampler(host_root={tree!r}, match='docker-5113', warner=cgstat.Warner(handler=said.append))\n"
            "s.tick(); s.close()\n"
            "print([d.key for d in said])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    assert "'selection'" in proc.stdout.decode()
