"""One Debian package fetched without touching the system's apt: apt-get with a sources file,
a lists folder and a cache of its own (`update`, then `download`), then `dpkg-deb -x` into a
folder. Used by tests/helpers/victoria.py (Debian 13's VictoriaMetrics) and
tests/helpers/realnvml.py (Debian 12's non-free libnvidia-ml1)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def sources(suite: str, components: str) -> str:
    return ("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: %s\nSigned-By: %s\n"
            % (suite, components, KEYRING))


def extract(sources_text: str, spec: str, into: str) -> str:
    """Download the package `spec` ("name" or "name=version*") from `sources_text` and
    extract it into `into` (made fresh); returns `into`. RuntimeError says why not."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise RuntimeError("no apt-get/dpkg-deb to fetch %s" % spec)
    if not os.path.exists(KEYRING):
        raise RuntimeError("no Debian archive keyring to check %s" % spec)
    with tempfile.TemporaryDirectory(prefix="cgstat-deb-") as tmp:
        with open(os.path.join(tmp, "own.sources"), "w") as f:
            f.write(sources_text)
        os.makedirs(os.path.join(tmp, "lists", "partial"))
        os.makedirs(os.path.join(tmp, "cache", "archives", "partial"))
        opts = ["-o", "Dir::Etc::SourceList=%s/own.sources" % tmp, "-o", "Dir::Etc::SourceParts=/dev/null",
                "-o", "Dir::State::Lists=%s/lists" % tmp, "-o", "Dir::Cache=%s/cache" % tmp,
                "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root", "-qq"]
        for args in (["update"], ["download", spec]):
            run = subprocess.run(["apt-get", *opts, *args], cwd=tmp, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=600)
            if run.returncode:
                raise RuntimeError("apt-get %s: %s" % (args[0], run.stdout.decode(errors="replace")[-500:]))
        (deb,) = glob.glob(os.path.join(tmp, spec.split("=")[0] + "_*.deb"))
        shutil.rmtree(into, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", deb, into], check=True, timeout=300)
    return into
