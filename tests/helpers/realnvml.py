"""Debian's real NVML library (non-free `libnvidia-ml1` 535 of Debian 12), for the test that
cgstat initialises no NVML where no NVIDIA driver is loaded: run as root without the kernel
module, this library's nvmlInit creates /dev/nvidiactl (mknodat, seen with strace) and looks
for nvidia-modprobe.

Fetched with tests/helpers/debfetch.py (a sources list of its own, `apt-get download`,
`dpkg-deb -x`) into /var/cache/cgstat-nvml/ (CGSTAT_NVML_CACHE), so only the first run needs
Debian's mirror. `python -m tests.helpers.realnvml` fetches it (tests/run does, as root) and
prints the folder to put on LD_LIBRARY_PATH.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

from tests.helpers import debfetch

CACHE = os.environ.get("CGSTAT_NVML_CACHE", "/var/cache/cgstat-nvml")
PACKAGE = "libnvidia-ml1"
FOLDER = os.path.join(CACHE, "libnvidia-ml1")  # holds libnvidia-ml.so.1
_IN_PACKAGE = os.path.join("usr", "lib", "x86_64-linux-gnu", "nvidia", "current")


def fetch() -> str:
    """The folder holding the real libnvidia-ml.so.1 (fetched first where it isn't there;
    RuntimeError says why not)."""
    if os.path.exists(os.path.join(FOLDER, "libnvidia-ml.so.1")):
        return FOLDER
    with tempfile.TemporaryDirectory(prefix="cgstat-nvml-") as tmp:
        x = debfetch.extract(debfetch.sources("bookworm", "main non-free"), PACKAGE, os.path.join(tmp, "x"))
        libs = os.path.join(x, _IN_PACKAGE)
        if not os.path.isdir(libs):
            raise RuntimeError("%s has no %s" % (PACKAGE, _IN_PACKAGE))
        os.makedirs(CACHE, exist_ok=True)
        part = FOLDER + ".part"
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(libs, part, symlinks=True)
        shutil.rmtree(FOLDER, ignore_errors=True)
        os.replace(part, FOLDER)
    return FOLDER


if __name__ == "__main__":
    try:
        print(fetch())
    except (RuntimeError, OSError) as exc:
        print("realnvml: %s" % exc, file=sys.stderr)
        sys.exit(1)
