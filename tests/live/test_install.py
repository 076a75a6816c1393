"""The README's first Quick-start command on a stock distribution: only Debian's own
Python and the distribution's PATH (PEP 668 refuses a plain `pip install` there)."""

import os
import shutil
import subprocess

import pytest

from tests.helpers.contract import ROOT


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no distribution Python here")
def test_bin_install_with_the_distribution_python_only(tmp_path):
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path / "home"),
           "CGSTAT_PREFIX": str(tmp_path / "venv"), "CGSTAT_BINDIR": str(tmp_path / "bin"),
           "CGSTAT_DOCDIR": str(tmp_path / "doc")}
    # A clean copy of the checkout, as a fresh clone would be (no .venv, no build/).
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", "build", "*.egg-info", ".git",
                                                             "__pycache__", ".pytest_cache", ".hypothesis"))
    proc = subprocess.run(["bin/install", "once", "--window", "0", "--all", "--host-root",
                           os.path.join(ROOT, "tests/fixtures/v2-systemd/t1")],
                          cwd=src, env=env, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert len(proc.stdout.splitlines()) == 34  # the recorded tree's cgroups, one line each
    assert os.readlink(tmp_path / "bin" / "cgstat") == str(tmp_path / "venv" / "bin" / "cgstat")
    assert os.access(tmp_path / "bin" / "cgstat-cron", os.X_OK)
    # where it writes is said first, before anything is written
    first = proc.stderr.decode().splitlines()[0]
    assert first == ("cgstat install: writing the environment %s, the commands cgstat and cgstat-cron in %s, "
                     "the documentation in %s" % (tmp_path / "venv", tmp_path / "bin", tmp_path / "doc"))
    # the documentation the systemd units' Documentation= lines name
    assert sorted(os.listdir(tmp_path / "doc")) == sorted(os.listdir(os.path.join(ROOT, "docs")))
    # nvidia-ml-py is a regular dependency: the install alone brings pynvml (loaded lazily)
    probe = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c",
                            "import pynvml, orjson, typer; print(pynvml.__file__)"], capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout.startswith(str(tmp_path / "venv")), probe.stderr
