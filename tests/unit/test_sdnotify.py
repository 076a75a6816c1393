"""cgstat.sdnotify against real AF_UNIX datagram sockets (path and abstract namespace)."""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from cgstat import sdnotify

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux-only")


@pytest.fixture
def receiver(tmp_path: Path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    sock.bind(str(path))
    sock.settimeout(2)
    yield sock, str(path)
    sock.close()


def test_ready_watchdog_stopping_reach_a_path_socket(receiver, monkeypatch) -> None:
    sock, path = receiver
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert sdnotify.ready() is True
    assert sdnotify.watchdog() is True
    assert sdnotify.stopping() is True
    assert sdnotify.notify("STATUS=3 cgroups\nWATCHDOG=1") is True
    got = [sock.recv(4096) for _ in range(4)]
    assert got == [b"READY=1", b"WATCHDOG=1", b"STOPPING=1", b"STATUS=3 cgroups\nWATCHDOG=1"]


@linux_only
def test_abstract_socket(monkeypatch) -> None:
    name = f"cgstat-test-{os.getpid()}-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(2)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.ready() is True
        assert sock.recv(4096) == b"READY=1"
    finally:
        sock.close()
    # Nobody listens on that name any more.
    assert sdnotify.watchdog() is False


def test_unset_or_empty_notify_socket_is_a_quiet_no_op(monkeypatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.ready() is False
    assert sdnotify.notify("WATCHDOG=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", "")
    assert sdnotify.watchdog() is False


@pytest.mark.parametrize("value", ["relative/path", "@", "vsock:2:1234", "/x/\0y", "/" + "a" * 200])
def test_unusable_addresses_return_false(monkeypatch, value: str) -> None:
    if "\0" in value:
        # The environment cannot hold a NUL; patch the lookup instead.
        monkeypatch.setattr(sdnotify.os, "environ", {"NOTIFY_SOCKET": value})
    else:
        monkeypatch.setenv("NOTIFY_SOCKET", value)
    assert sdnotify.ready() is False


def test_missing_socket_path_returns_false(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "no-such-socket"))
    assert sdnotify.ready() is False
    assert not (tmp_path / "no-such-socket").exists()


def test_a_regular_file_or_a_dead_socket_returns_false(tmp_path: Path, monkeypatch) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    monkeypatch.setenv("NOTIFY_SOCKET", str(plain))
    assert sdnotify.watchdog() is False
    dead = tmp_path / "dead"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(dead))
    sock.close()  # the file stays, nobody listens: ECONNREFUSED
    monkeypatch.setenv("NOTIFY_SOCKET", str(dead))
    assert sdnotify.watchdog() is False


def test_a_stream_socket_returns_false(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "stream"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        sock.listen(1)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert sdnotify.ready() is False
    finally:
        sock.close()


def test_a_full_receiver_never_blocks(receiver, monkeypatch) -> None:
    sock, path = receiver
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    # Nobody reads: the receive queue fills up; then sends fail at once instead of waiting.
    start = time.monotonic()
    results = [sdnotify.notify("WATCHDOG=1" + "x" * 1000) for _ in range(5000)]
    assert time.monotonic() - start < 10
    assert results[0] is True
    assert results[-1] is False


def test_socket_denied_by_a_filter_returns_false(receiver, monkeypatch) -> None:
    """RestrictAddressFamilies= without AF_UNIX makes socket() fail: no exception."""
    _, path = receiver
    monkeypatch.setenv("NOTIFY_SOCKET", path)

    def denied(*args, **kwargs):
        raise OSError(97, "Address family not supported by protocol")

    monkeypatch.setattr(socket, "socket", denied)
    assert sdnotify.ready() is False


def test_no_descriptor_leaks(receiver, monkeypatch) -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd")
    sock, path = receiver
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        sdnotify.watchdog()
        sock.recv(4096)
    monkeypatch.setenv("NOTIFY_SOCKET", path + ".missing")
    for _ in range(50):
        sdnotify.watchdog()
    assert len(os.listdir("/proc/self/fd")) == before


def test_watchdog_interval(monkeypatch) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert sdnotify.watchdog_interval_s() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert sdnotify.watchdog_interval_s() == 30.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert sdnotify.watchdog_interval_s() == 30.0
    monkeypatch.setenv("WATCHDOG_PID", "")
    assert sdnotify.watchdog_interval_s() == 30.0


@pytest.mark.parametrize("usec", ["", "0", "-5", "abc", " 30", "1_000", "+5", "3.5"])
def test_watchdog_interval_rejects_junk_usec(monkeypatch, usec: str) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", usec)
    assert sdnotify.watchdog_interval_s() is None


@pytest.mark.parametrize("pid", ["1", "junk", "-1", "PID"])
def test_watchdog_pid_mismatch_means_no_watchdog(monkeypatch, pid: str) -> None:
    if pid == "1" and os.getpid() == 1:
        pytest.skip("this test runs as PID 1")
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", pid)
    assert sdnotify.watchdog_interval_s() is None


def test_module_has_no_third_party_imports() -> None:
    source = Path(sdnotify.__file__).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines()
               if line.startswith(("import ", "from "))}
    assert imports <= {"os", "socket", "typing", "__future__"}


def test_stream_notifies_ready_then_watchdog_each_tick_then_stopping(receiver) -> None:
    """What the unit (Type=notify, WatchdogSec=) relies on, with a real `cgstat stream`."""
    import subprocess

    sock, path = receiver
    cgstat = Path(sys.executable).parent / "cgstat"
    if not cgstat.exists():
        pytest.skip("no cgstat console script beside this Python")
    env = {**os.environ, "NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000"}
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.run([str(cgstat), "stream", "--count", "3", "--interval", "0.2"], env=env,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    sock.settimeout(0.5)
    got = []
    try:
        while True:
            got.append(sock.recv(4096).decode())
    except socket.timeout:
        pass
    assert got, "no notification at all"
    assert got[0].splitlines()[0] == "READY=1", got  # first, after the first sample
    assert sum("WATCHDOG=1" in m.splitlines() for m in got) >= 3, got  # one per tick
    assert "STOPPING=1" in got[-1].splitlines(), got


def test_listen_fd_by_name(monkeypatch):
    from cgstat.sdnotify import listen_fd

    monkeypatch.setenv("LISTEN_PID", str(os.getpid()))
    monkeypatch.setenv("LISTEN_FDS", "2")
    monkeypatch.setenv("LISTEN_FDNAMES", "other:kmsg")
    assert listen_fd("kmsg") == 4 and listen_fd("other") == 3 and listen_fd("none") is None
    monkeypatch.setenv("LISTEN_FDS", "1")  # fewer descriptors than names: only those passed
    assert listen_fd("kmsg") is None
    monkeypatch.setenv("LISTEN_FDS", "2")
    monkeypatch.setenv("LISTEN_PID", str(os.getpid() + 1))  # meant for another process (a parent)
    assert listen_fd("kmsg") is None
    monkeypatch.setenv("LISTEN_PID", "+%d" % os.getpid())
    assert listen_fd("kmsg") is None
    monkeypatch.delenv("LISTEN_PID")
    assert listen_fd("kmsg") is None
