"""A real OTLP receiver for the tests: VictoriaMetrics 1.112, Debian 13's `victoria-metrics`.

Debian 12's own victoria-metrics (1.79) predates OTLP and its Prometheus was built without the
OTLP receiver, so the package is fetched from Debian 13 (trixie) without a chroot: apt-get
with a sources file of its own and its own lists folder (`update`, then `download`), then
`dpkg-deb -x`; its statically linked Go binary runs on Debian 12. The binary is cached in
/var/cache/cgstat-vm/ (CGSTAT_VM_CACHE), so only the first run needs Debian's mirror.
`python -m tests.helpers.victoria` fetches it (tests/run does, as root).

`VictoriaMetrics(tmp)` runs one on a free loopback port (OTLP at /opentelemetry/v1/metrics,
`-search.latencyOffset=0s` so that a sample is queried at once); stop() and start() again keep
its data.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any, List, Optional

from tests.helpers import debfetch

CACHE = os.environ.get("CGSTAT_VM_CACHE", "/var/cache/cgstat-vm")
VERSION = "1.112"
BINARY = os.path.join(CACHE, "victoria-metrics-" + VERSION)


def fetch() -> str:
    """The cached binary, fetched from Debian 13 first where it isn't there (RuntimeError why not)."""
    if os.access(BINARY, os.X_OK):
        return BINARY
    with tempfile.TemporaryDirectory(prefix="cgstat-vm-") as tmp:
        x = debfetch.extract(debfetch.sources("trixie", "main"), "victoria-metrics=%s*" % VERSION,
                             os.path.join(tmp, "x"))
        os.makedirs(CACHE, exist_ok=True)
        part = BINARY + ".part"
        shutil.copy(os.path.join(x, "usr", "bin", "victoria-metrics"), part)
        os.chmod(part, 0o755)
        os.replace(part, BINARY)
    return BINARY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VictoriaMetrics:
    """One single-node VictoriaMetrics on 127.0.0.1, its data in `folder`."""

    def __init__(self, binary: str, folder: str):
        self.binary = binary
        self.folder = folder
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.otlp = self.url + "/opentelemetry/v1/metrics"
        self.proc: Optional[subprocess.Popen] = None
        self.log = open(os.path.join(folder, "vm.log"), "ab")

    def start(self, timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "-storageDataPath=%s" % os.path.join(self.folder, "data"),
             "-httpListenAddr=127.0.0.1:%d" % self.port, "-search.latencyOffset=0s", "-retentionPeriod=1d",
             "-loggerLevel=ERROR", "-memory.allowedBytes=256MiB"],
            stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("victoria-metrics exited %s: %s" % (self.proc.returncode, self.tail()))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.read().strip() == b"OK":
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("victoria-metrics did not answer in %g s: %s" % (timeout, self.tail()))

    def stop(self) -> None:
        """SIGTERM (VictoriaMetrics writes what it holds), then wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        self.log.close()

    def tail(self) -> str:
        try:
            with open(os.path.join(self.folder, "vm.log"), "rb") as f:
                return f.read()[-800:].decode(errors="replace")
        except OSError:
            return ""

    def get(self, path: str, **params: Any) -> bytes:
        url = "%s%s?%s" % (self.url, path, urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10) as r:  # loopback only
            return r.read()

    def query(self, expr: str) -> List[dict]:
        """An instant query's result (/api/v1/query)."""
        return json.loads(self.get("/api/v1/query", query=expr))["data"]["result"]

    def export(self, selector: str) -> List[dict]:
        """Every raw sample of the series `selector` matches (/api/v1/export: one JSON line a series)."""
        text = self.get("/api/v1/export", **{"match[]": selector})
        return [json.loads(line) for line in text.splitlines() if line.strip()]


if __name__ == "__main__":
    try:
        print(fetch())
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print("tests/helpers/victoria.py: %s" % exc, file=sys.stderr)
        sys.exit(1)
