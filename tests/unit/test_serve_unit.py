"""Checks of systemd/cgstat-serve.service (the Prometheus endpoint) with systemd-analyze.

`verify` (no warning about the unit) and the offline security exposure at most 2.0 are
checked for both services by tests/unit/test_systemd_unit.py. Here: the sandbox, the same as
the stream unit's except the network, which is loopback only (IPAddressDeny=any +
IPAddressAllow=localhost, binding limited to the default port) and AF_INET/AF_INET6 allowed
for the listening socket; the drop-in shown in the unit's header (another address, a
Prometheus server allowed) verifies too.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from tests.unit import test_systemd_unit as stream_unit

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "cgstat-serve.service"
STREAM_UNIT = REPO / "systemd" / "cgstat.service"
SYSTEM_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def settings(path: Path = UNIT) -> List[Tuple[str, str, str]]:
    return stream_unit.unit_settings(path)


def values(key: str, path: Path = UNIT) -> List[str]:
    return stream_unit.values(key, path)


def header_dropin() -> str:
    """The commented drop-in in the unit's header, uncommented."""
    lines = UNIT.read_text().splitlines()
    start = lines.index("#   [Service]")
    block = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        block.append(line[4:])
    return "\n".join(block) + "\n"


def verify(tmp_path: Path, dropin: Optional[str] = None) -> None:
    stream_unit.verify(tmp_path, {"listen.conf": dropin} if dropin else None, unit=UNIT)


@needs_analyze
def test_the_documented_listen_dropin_verifies(tmp_path: Path) -> None:
    dropin = header_dropin()
    assert "CGSTAT_LISTEN=0.0.0.0:17923" in dropin and "IPAddressAllow=" in dropin
    verify(tmp_path, dropin)


def test_network_is_loopback_only_by_default() -> None:
    assert values("PrivateNetwork") in ([], ["no"])
    assert values("IPAddressDeny") == ["any"]
    assert values("IPAddressAllow") == ["localhost"]
    families = " ".join(values("RestrictAddressFamilies")).split()
    assert sorted(families) == ["AF_INET", "AF_INET6", "AF_UNIX"]
    assert values("SocketBindDeny") == ["any"] and values("SocketBindAllow") == ["tcp:17923"]
    env = " ".join(values("Environment"))
    assert "CGSTAT_LISTEN=127.0.0.1:17923" in env
    assert values("ExecStart") == ["/usr/local/bin/cgstat serve"]


def test_same_sandbox_as_the_stream_unit_apart_from_network_and_logs() -> None:
    differ = {"PrivateNetwork", "IPAddressAllow", "RestrictAddressFamilies", "SocketBindDeny",
              "SocketBindAllow", "ExecStart", "ExecReload", "Environment", "LogsDirectory",
              "LogsDirectoryMode", "Sockets",  # Sockets: each its own kernel log socket unit
              "RuntimeDirectory"}  # each its own place in the kernel log (--log-state)
    stream: Dict[str, List[str]] = {}
    serve: Dict[str, List[str]] = {}
    for s, k, v in settings(STREAM_UNIT):
        if s == "Service" and k not in differ:
            stream.setdefault(k, []).append(v)
    for s, k, v in settings(UNIT):
        if s == "Service" and k not in differ:
            serve.setdefault(k, []).append(v)
    assert serve == stream
    # serve writes nothing but its place in the kernel log, on tmpfs, gone when it stops
    assert values("RuntimeDirectory") == ["cgstat-serve"] and values("RuntimeDirectoryPreserve") == ["restart"]
    assert not values("LogsDirectory") and not values("StateDirectory") and not values("ReadWritePaths")
    assert values("ProtectSystem") == ["strict"]
