"""No side effects as root: with Debian's real libnvidia-ml (535) on the loader's path and no
NVIDIA kernel module loaded, `cgstat once` creates nothing under /dev. That library's nvmlInit,
run as root without the module, creates /dev/nvidiactl (mknodat) and looks for
nvidia-modprobe; cgstat asks the kernel first (/proc/driver/nvidia/version) and, with no
driver there, loads no NVML library at all."""

import os
import subprocess
import sys

import pytest

from tests.helpers import realnvml
from tests.helpers.contract import ROOT

DRIVER = "/proc/driver/nvidia/version"


def _dev_listing():
    out = set()
    for folder, dirs, files in os.walk("/dev", followlinks=False):
        for name in dirs + files:
            out.add(os.path.join(folder, name))
    return out


@pytest.fixture(scope="module")
def real_library():
    if os.geteuid() != 0:
        pytest.skip("needs root: only root's nvmlInit makes device nodes")
    if os.path.exists(DRIVER):
        pytest.skip("an NVIDIA driver is loaded here: nothing to prove")
    try:
        return realnvml.fetch()
    except (RuntimeError, OSError) as exc:
        pytest.skip("Debian's libnvidia-ml1 could not be fetched: %s" % exc)


def test_no_file_appears_under_dev(real_library):
    env = dict(os.environ, LD_LIBRARY_PATH=real_library, PYTHONPATH=ROOT)
    env.pop("CGSTAT_NVIDIA_VERSION_FILE", None)
    before = _dev_listing()
    proc = subprocess.run([sys.executable, "-m", "cgstat", "once", "--match", "^/cgstat-no-such-cgroup$"],
                          env=env, cwd=ROOT, capture_output=True, timeout=120)
    after = _dev_listing()
    assert proc.returncode == 0, proc.stderr.decode()
    assert after - before == set()
    assert f"GPU metrics off: NVIDIA driver not loaded ({DRIVER} absent)" in proc.stderr.decode()
