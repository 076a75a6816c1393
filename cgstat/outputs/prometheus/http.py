"""A small, strict HTTP/1.1 server for /metrics and /healthz, on the standard library.

One thread runs a `selectors` loop over non-blocking sockets: it never waits on one
client, so stalled, slow or malicious clients cost a socket each, not a thread, and never
delay a scrape. The sampling loop hands finished bytes to `publish()`, and a scrape sends
the latest ones. What it accepts, and what it answers otherwise: see the limits below.
"""

from __future__ import annotations

import errno
import gzip
import re
import selectors
import socket
import ssl
import threading
import time
from typing import Callable, Dict, Optional, Tuple

from cgstat.outputs import DEFAULT_LISTEN, DEFAULT_PORT  # noqa: F401 (re-exported)
from cgstat.outputs.prometheus.webconfig import WebConfig

# The sampling loop is not involved at all in a scrape: the bytes are rendered once per
# tick; the gzip and OpenMetrics variants are made on first demand and kept until the next
# tick. What the server accepts, and what it answers otherwise:
# - `GET` or `HEAD` on `/metrics` (a query string is ignored) and `/healthz`; 404 for
#   another path, 405 (with `Allow`) for another method on those paths, 400 for anything
#   that is not a well-formed HTTP/1.0 or 1.1 request (bad request line, a header line
#   without a colon, obsolete line folding, a body, control bytes), 505 for another version.
# - The request line and headers together at most 16 KiB: more is 431, and the connection
#   is closed.
# - Deadlines per connection: the request head within 10 s of connecting (or of the
#   previous response), the whole response written within 30 s; past them the socket is
#   closed. Keep-alive connections idle for 60 s are closed.
# - At most 256 connections at once; at the cap the oldest connection still sending its
#   request head is dropped for the new one (slowloris), and if none is, the new one is.
# - Errors are one short plain-text line; no exception text or traceback is ever sent.
# - `Accept-Encoding: gzip` gives a gzip body; an `Accept` that prefers
#   `application/openmetrics-text` gives OpenMetrics 1.0.
# - `--web-config-file` (webconfig.py): TLS, its handshake in the same loop within the head's
#   deadline; basic auth on every path (401 and `WWW-Authenticate` without it).
MAX_HEAD = 16 * 1024
HEAD_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 256

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 503: "Service Unavailable",
            505: "HTTP Version Not Supported"}
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_TARGET = re.compile(rb"^/[\x21-\x7e]*$")
_VERSION = re.compile(rb"^HTTP/(\d)\.(\d)$")
_HEADER_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
PATHS = ("/metrics", "/healthz")


def parse_listen(listen: str) -> Tuple[str, int]:
    """'ADDR:PORT', '[IPv6]:PORT' or ':PORT' (loopback) -> (host, port). ValueError if bad."""
    text = (listen or "").strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError("listen address %r: expected [IPv6]:PORT" % listen)
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError("listen address %r: expected ADDR:PORT" % listen)
        if ":" in host:
            raise ValueError("listen address %r: write an IPv6 address as [ADDR]:PORT" % listen)
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("listen address %r: the port must be a number from 0 to 65535" % listen)
    return (host or "127.0.0.1"), int(port)


def _q_values(header: str) -> Dict[str, float]:
    """'a;q=0.5, b' -> {'a': 0.5, 'b': 1.0} (lower-cased, parameters other than q kept off)."""
    out: Dict[str, float] = {}
    for item in header.split(","):
        parts = [p.strip() for p in item.split(";")]
        name = parts[0].lower()
        if not name:
            continue
        q = 1.0
        for p in parts[1:]:
            k, _, v = p.partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        out[name] = max(q, out.get(name, 0.0))
    return out


def wants_gzip(accept_encoding: str) -> bool:
    q = _q_values(accept_encoding)
    if "gzip" in q:
        return q["gzip"] > 0
    return q.get("*", 0.0) > 0


def wants_openmetrics(accept: str) -> bool:
    q = _q_values(accept)
    om = q.get("application/openmetrics-text", 0.0)
    if om <= 0:
        return False
    text = max(q.get("text/plain", 0.0), q.get("text/*", 0.0), q.get("*/*", 0.0))
    return om >= text


class Snapshot:
    """One tick's exposition: the text bytes, and the other variants made on demand."""

    def __init__(self, text: bytes, openmetrics: Optional[Callable[[], bytes]], when: float):
        self.when = when  # time.monotonic() of publish
        self._bodies: Dict[Tuple[bool, bool], bytes] = {(False, False): text}
        self._openmetrics = openmetrics

    def body(self, om: bool, gz: bool) -> Tuple[bytes, bool]:
        """(bytes, is_openmetrics) for the asked variant."""
        if om and self._openmetrics is None:
            om = False
        key = (om, gz)
        data = self._bodies.get(key)
        if data is None:
            if gz:
                plain, om = self.body(om, False)
                data = gzip.compress(plain, compresslevel=5)
            else:
                data = self._openmetrics()  # type: ignore[misc]
            self._bodies[key] = data
        return data, om


class _Conn:
    __slots__ = ("sock", "inbuf", "outbuf", "sent", "deadline", "reading", "close_after", "born", "served",
                 "handshaking")

    def __init__(self, sock: socket.socket, now: float, handshaking: bool = False):
        self.sock = sock
        self.handshaking = handshaking  # TLS: the handshake is not done yet
        self.inbuf = b""
        self.outbuf = b""
        self.sent = 0  # bytes of outbuf already sent
        self.served = 0  # responses completed on this connection
        self.deadline = now + HEAD_TIMEOUT_S
        self.reading = True  # waiting for (the rest of) a request head
        self.close_after = False
        self.born = now


class MetricsServer:
    """Serves the latest published exposition. `start()` binds (errors raise OSError in
    the caller), then a daemon thread serves until `close()`."""

    def __init__(self, listen: str = DEFAULT_LISTEN, stale_after_s: float = 60.0,
                 content_types: Optional[Dict[str, str]] = None,
                 max_connections: int = MAX_CONNECTIONS, on_error: Optional[Callable[[str], None]] = None,
                 web: Optional[WebConfig] = None):
        self.host, self.port = parse_listen(listen)
        self.web = web
        self._tls = web.tls if web is not None else None
        self.stale_after_s = stale_after_s
        from cgstat.outputs.prometheus.exposition import CONTENT_TYPES, OPENMETRICS, TEXT

        types = content_types or CONTENT_TYPES
        self._ctype_text = types[TEXT]
        self._ctype_om = types[OPENMETRICS]
        self.max_connections = max_connections
        self.on_error = on_error
        self._snapshot: Optional[Snapshot] = None
        self._sel: Optional[selectors.BaseSelector] = None
        self._listener: Optional[socket.socket] = None
        self._conns: Dict[int, _Conn] = {}
        self._thread: Optional[threading.Thread] = None
        self._stop = False
        self._wake_r: Optional[socket.socket] = None
        self._wake_w: Optional[socket.socket] = None

    # -- the sampling side --------------------------------------------------------------

    def publish(self, text: bytes, openmetrics: Optional[Callable[[], bytes]] = None) -> None:
        """Make `text` (and, lazily, `openmetrics()`) what scrapes get from now on."""
        self._snapshot = Snapshot(text, openmetrics, time.monotonic())  # one reference swap

    @property
    def address(self) -> Tuple[str, int]:
        """The bound (host, port); the port is the real one when 0 was asked."""
        assert self._listener is not None
        name = self._listener.getsockname()
        return name[0], name[1]

    def start(self) -> "MetricsServer":
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind(sockaddr)
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._sel = selectors.DefaultSelector()
        self._sel.register(listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name="cgstat-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop = True
        if self._wake_w is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        for conn in list(self._conns.values()):
            self._drop(conn)
        for s in (self._listener, self._wake_r, self._wake_w):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        if self._sel is not None:
            self._sel.close()

    # -- the loop -----------------------------------------------------------------------

    def _run(self) -> None:
        sel = self._sel
        assert sel is not None
        while not self._stop:
            try:
                events = sel.select(timeout=0.5)
                for key, mask in events:
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(64)  # type: ignore[union-attr]
                        except OSError:
                            pass
                    elif key.data is None:
                        self._accept()
                    else:
                        conn = key.data
                        if mask & selectors.EVENT_READ:
                            self._on_read(conn)
                        if mask & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
                            self._on_write(conn)
                self._sweep()
            except Exception as exc:  # never let one bad event end serving
                if self.on_error is not None:
                    self.on_error("http: %s: %s" % (type(exc).__name__, exc))
                time.sleep(0.01)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _ = self._listener.accept()  # type: ignore[union-attr]
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return  # out of descriptors: the backlog waits; sweeps free some
                return
            now = time.monotonic()
            if len(self._conns) >= self.max_connections:
                victim = min((c for c in self._conns.values() if c.reading and not c.served),
                             key=lambda c: c.born, default=None)
                if victim is None:
                    sock.close()
                    continue
                self._drop(victim)
            sock.setblocking(False)
            if self._tls is not None:
                try:
                    sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
            conn = _Conn(sock, now, self._tls is not None)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)  # type: ignore[union-attr]

    def _drop(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            self._conns.pop(fd, None)
            try:
                self._sel.unregister(conn.sock)  # type: ignore[union-attr]
            except (KeyError, ValueError, OSError):
                pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def _sweep(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if now > c.deadline]:
            self._drop(conn)

    def _handshake(self, conn: _Conn) -> None:
        try:
            conn.sock.do_handshake()  # type: ignore[attr-defined]
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError) as exc:
            more = selectors.EVENT_WRITE if isinstance(exc, ssl.SSLWantWriteError) else 0
            self._sel.modify(conn.sock, selectors.EVENT_READ | more, conn)  # type: ignore[union-attr]
            return
        except (OSError, ValueError):  # a client that speaks no TLS, or a certificate refused
            self._drop(conn)
            return
        conn.handshaking = False
        self._sel.modify(conn.sock, selectors.EVENT_READ, conn)  # type: ignore[union-attr]
        self._on_read(conn)  # the request may have come with the handshake's last flight

    def _on_read(self, conn: _Conn) -> None:
        if conn.handshaking:
            self._handshake(conn)
            return
        try:
            data = conn.sock.recv(65536)
            pending = getattr(conn.sock, "pending", None)
            while pending is not None and pending() and len(data) <= 2 * MAX_HEAD:
                data += conn.sock.recv(65536)  # TLS: what is decrypted already raises no event
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)
            return
        if len(conn.inbuf) <= 2 * MAX_HEAD:
            conn.inbuf += data  # more than that is 431 once read
        if not conn.reading:
            return  # a pipelined request: read once this response is out
        self._process(conn)

    def _process(self, conn: _Conn) -> None:
        while conn.reading and not conn.close_after:
            end = conn.inbuf.find(b"\r\n\r\n")
            if end < 0:
                lf_end = conn.inbuf.find(b"\n\n")  # bare LF line ends: tolerated (RFC 9112 2.2)
                if lf_end >= 0:
                    end, sep = lf_end, 2
                else:
                    if len(conn.inbuf) > MAX_HEAD:
                        self._respond(conn, 431, b"request head too large\n", close=True)
                    return
            else:
                sep = 4
            if end > MAX_HEAD:
                self._respond(conn, 431, b"request head too large\n", close=True)
                return
            head = conn.inbuf[:end]
            conn.inbuf = conn.inbuf[end + sep:]
            self._handle(conn, head)
            break  # the next pipelined request is read once this answer is out (_on_write)

    def _handle(self, conn: _Conn, head: bytes) -> None:
        lines = head.replace(b"\r\n", b"\n").split(b"\n")
        while lines and lines[0] == b"":  # RFC 9112 2.2: empty lines before a request
            lines.pop(0)
        if not lines:
            self._respond(conn, 400, b"bad request\n", close=True)
            return
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not _TOKEN.match(parts[0]):
            self._respond(conn, 400, b"bad request line\n", close=True)
            return
        method, target, version = parts
        vm = _VERSION.match(version)
        if vm is None:
            self._respond(conn, 400, b"bad request line\n", close=True)
            return
        if vm.group(1) != b"1":
            self._respond(conn, 505, b"HTTP/1.0 and HTTP/1.1 only\n", close=True)
            return
        http10 = vm.group(2) == b"0"
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            if not line or line[:1] in (b" ", b"\t") or _HEADER_BAD.search(line):
                self._respond(conn, 400, b"bad header\n", close=True)
                return
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.match(name):
                self._respond(conn, 400, b"bad header\n", close=True)
                return
            key = name.decode("ascii").lower()
            text = value.strip(b" \t").decode("latin-1")
            headers[key] = headers[key] + ", " + text if key in headers else text
        if not _TARGET.match(target):
            self._respond(conn, 400, b"bad request target\n", close=True)
            return
        if (headers.get("content-length", "0").strip() not in ("", "0")) or "transfer-encoding" in headers:
            self._respond(conn, 400, b"no request body expected\n", close=True)
            return
        if not http10 and "host" not in headers:
            self._respond(conn, 400, b"missing Host header\n", close=True)
            return
        connection = headers.get("connection", "").lower()
        close = "close" in connection or (http10 and "keep-alive" not in connection)
        if self.web is not None and not self.web.authorized(headers.get("authorization")):
            self._respond(conn, 401, b"unauthorized\n", close=close, head_only=method == b"HEAD",
                          extra=b'WWW-Authenticate: Basic realm="cgstat"\r\n')
            return
        path = target.split(b"?", 1)[0].decode("ascii")
        if path not in PATHS:
            self._respond(conn, 404, b"not found: try /metrics or /healthz\n", close=close)
            return
        if method not in (b"GET", b"HEAD"):
            self._respond(conn, 405, b"only GET and HEAD\n", close=close, extra=b"Allow: GET, HEAD\r\n")
            return
        head_only = method == b"HEAD"
        snap = self._snapshot
        if path == "/healthz":
            if snap is None:
                self._respond(conn, 503, b"starting: no tick yet\n", close=close, head_only=head_only)
            elif time.monotonic() - snap.when > self.stale_after_s:
                self._respond(conn, 503, b"stale: no tick for too long\n", close=close, head_only=head_only)
            else:
                self._respond(conn, 200, b"ok\n", close=close, head_only=head_only)
            return
        if snap is None:
            self._respond(conn, 503, b"starting: no tick yet\n", close=close, head_only=head_only)
            return
        om = wants_openmetrics(headers.get("accept", ""))
        gz = wants_gzip(headers.get("accept-encoding", ""))
        body, om = snap.body(om, gz)
        extra = b"Vary: Accept, Accept-Encoding\r\n"
        if gz:
            extra += b"Content-Encoding: gzip\r\n"
        ctype = self._ctype_om if om else self._ctype_text
        self._respond(conn, 200, body, close=close, head_only=head_only, ctype=ctype, extra=extra)

    def _respond(self, conn: _Conn, code: int, body: bytes, close: bool, head_only: bool = False,
                 ctype: str = "text/plain; charset=utf-8", extra: bytes = b"") -> None:
        head = ("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nCache-Control: no-store\r\n"
                "X-Content-Type-Options: nosniff\r\nConnection: %s\r\n"
                % (code, _REASONS.get(code, "Error"), ctype, len(body), "close" if close else "keep-alive"))
        conn.outbuf = head.encode("ascii") + extra + b"\r\n" + (b"" if head_only else body)
        conn.sent = 0
        conn.close_after = close
        conn.reading = False
        conn.deadline = time.monotonic() + WRITE_TIMEOUT_S
        self._on_write(conn)

    def _on_write(self, conn: _Conn) -> None:
        if conn.handshaking:
            self._handshake(conn)
            return
        if not conn.outbuf:
            return
        try:
            conn.sent += conn.sock.send(memoryview(conn.outbuf)[conn.sent:conn.sent + (1 << 20)])
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError:
            self._drop(conn)
            return
        if conn.sent < len(conn.outbuf):
            self._sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)  # type: ignore
            return
        if conn.close_after:
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._drop(conn)
            return
        conn.outbuf = b""
        conn.served += 1
        self._sel.modify(conn.sock, selectors.EVENT_READ, conn)  # type: ignore[union-attr]
        conn.reading = True
        conn.deadline = time.monotonic() + (IDLE_TIMEOUT_S if not conn.inbuf else HEAD_TIMEOUT_S)
        if conn.inbuf:
            self._process(conn)


def address_note(host: str) -> Optional[str]:
    """A warning when the server listens beyond loopback (said once at start)."""
    if host in ("127.0.0.1", "::1", "localhost") or host.startswith("127."):
        return None
    return ("serving /metrics on %s, beyond loopback: anyone who can reach it reads every "
            "cgroup's path, container names, images and labels" % host)

