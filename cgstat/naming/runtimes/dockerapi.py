"""The Docker Engine API over its socket: GET /containers/<id>/json, within time limits.

Used only for a system container whose state file can't be read (a moved data root, no
permission). Talks to the sockets daemons.Daemons names (/var/run/docker.sock under the
host root, daemon.json "hosts", a running dockerd's -H, or --docker-host / DOCKER_HOST
alone when given); no other file.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Tuple

import orjson

from cgstat.kernel.hostfs import HostFS
from cgstat.naming.runtimes.dockerconfig import entry_from_config
from cgstat.naming.runtimes.entry import HEX64, ContainerEntry
from cgstat.naming.runtimes.trust import CONFIG_MAX

TIMEOUT_S = 0.5  # one API call, connect to last byte
BUDGET_S = 1.0  # API calls, per lookup pass
BACKOFF_S = 60.0  # no call to a socket for this long after a timeout or failed connect
DEFAULT_SOCKET = "/var/run/docker.sock"


class DockerAPI:
    """GET /containers/<id>/json over the Docker socket, within a time budget.

    Never serial waits: each call has a deadline (connect to last byte), the calls of one
    pass share a budget (`lookup`'s deadline), and after a timeout or a failed connect the
    socket is left alone for BACKOFF_S: a hung dockerd would otherwise cost every unknown
    ID a timeout, one after another.
    """

    def __init__(self, fs: HostFS, sockets: Optional[Callable[[], List[str]]] = None):
        self.fs = fs
        self.sockets = sockets or (lambda: [fs.path(DEFAULT_SOCKET)])  # local paths, in order
        self.paused_until: Dict[str, float] = {}  # socket -> no call before then

    def lookup(self, cid: str, budget_deadline: float) -> Optional[ContainerEntry]:
        for sock in self.sockets():
            now = time.monotonic()
            if now >= budget_deadline:
                return None
            if now < self.paused_until.get(sock, 0.0):
                continue
            status, body = _docker_get(sock, cid, min(TIMEOUT_S, budget_deadline - now))
            if status is None:
                self.paused_until[sock] = time.monotonic() + BACKOFF_S
                continue
            entry = _api_entry(status, body)
            if entry is not None:
                return entry
        return None


def docker_api(fs: HostFS, cid: str, timeout_s: float = TIMEOUT_S) -> Optional[ContainerEntry]:
    """One GET /containers/<id>/json (no budget, no pause): the entry, or None."""
    return _api_entry(*_docker_get(fs.path(DEFAULT_SOCKET), cid, timeout_s))


def _docker_get(sock_path: str, cid: str, timeout_s: float) -> Tuple[Optional[int], bytes]:
    """(HTTP status, body) of GET /containers/<cid>/json; (None, b"") when the socket is
    absent, refuses, or does not answer in timeout_s.

    Plain HTTP/1.0 (the daemon answers without chunking and closes), read under one
    deadline: a server that sends a byte now and then can't keep us.
    """
    import socket  # only here: most runs never ask the API

    if not HEX64.match(cid):
        return None, b""
    deadline = time.monotonic() + timeout_s
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(sock_path)
        sock.sendall(f"GET /containers/{cid}/json HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        data = b""
        while len(data) <= CONFIG_MAX + 65536:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, b""
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            length = _content_length(head) if sep else None
            if length is not None and len(body) >= length:
                break
    except OSError:
        return None, b""
    finally:
        sock.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if not sep or len(parts) < 2 or not parts[1].isdigit():
        return 0, b""
    length = _content_length(head)
    return int(parts[1]), body[:length] if length is not None else body


def _content_length(head: bytes) -> Optional[int]:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return None


def _api_entry(status: Optional[int], body: bytes) -> Optional[ContainerEntry]:
    """The entry in an answer of GET /containers/<id>/json, or None."""
    if status != 200:
        return None
    try:
        return entry_from_config(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None
