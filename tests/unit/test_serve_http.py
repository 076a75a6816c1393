"""The HTTP server (cgstat/outputs/prometheus/http.py) against stalled, malformed, oversized and
wrong requests, on loopback: it answers 4xx and goes on serving; 50 stalled clients do not
delay a scrape; gzip and OpenMetrics on request; no traceback is ever sent."""

from __future__ import annotations

import gzip
import socket
import threading
import time

import pytest

from cgstat.outputs.prometheus import exposition as prom
from cgstat.outputs.prometheus.http import DEFAULT_LISTEN, MetricsServer, parse_listen, wants_gzip, wants_openmetrics

RECORDS = [{"schema": 1, "type": "cgroup", "ts": "2026-11-29T20:10:12.807Z", "cgroup": "/a",
            "cpu": {"usage_seconds_total": 1.5}, "memory": {"working_set_bytes": 10}, "errors": []}]


@pytest.fixture
def server():
    s = MetricsServer("127.0.0.1:0", stale_after_s=30).start()
    s.publish(prom.render(RECORDS), lambda: prom.render(RECORDS, prom.OPENMETRICS))
    yield s
    s.close()


def request(server, raw: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(server.address, timeout=timeout) as c:
        c.sendall(raw)
        chunks = []
        while True:
            try:
                data = c.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def get(server, path="/metrics", headers=b"", method=b"GET") -> bytes:
    return request(server, method + b" " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   + headers + b"\r\n")


def status(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1])


def body(resp: bytes) -> bytes:
    return resp.split(b"\r\n\r\n", 1)[1]


def test_metrics_healthz_and_formats(server):
    r = get(server)
    assert status(r) == 200 and b"text/plain; version=0.0.4" in r
    assert b'container_cpu_usage_seconds_total{id="/a",cpu="total"} 1.5' in body(r)
    assert status(get(server, "/healthz")) == 200
    assert status(get(server, "/metrics?name[]=x")) == 200
    om = get(server, headers=b"Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n")
    assert b"application/openmetrics-text; version=1.0.0" in om and body(om).endswith(b"# EOF\n")
    gz = get(server, headers=b"Accept-Encoding: gzip\r\n")
    assert b"Content-Encoding: gzip" in gz and gzip.decompress(body(gz)) == body(r)
    head = get(server, method=b"HEAD")
    assert status(head) == 200 and body(head) == b"" and b"Content-Length: %d" % len(body(r)) in head


def test_keep_alive_serves_several_requests(server):
    one = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    resp = request(server, one + one + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert resp.count(b"HTTP/1.1 200 OK") == 3


@pytest.mark.parametrize("raw,code", [
    (b"garbage\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # a TLS hello
    (b"GET /metrics\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 400),
    (b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405),
    (b"DELETE /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405),
    (b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
    (b"GET /../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
])
def test_bad_requests_get_4xx_and_no_traceback(server, raw, code):
    resp = request(server, raw)
    assert status(resp) == code, resp
    assert b"Traceback" not in resp and b"Error" not in body(resp)
    if code == 405:
        assert b"Allow: GET, HEAD" in resp
    assert status(get(server)) == 200


def test_200_kb_header_is_refused_with_431(server):
    resp = request(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    assert status(resp) == 431
    resp = request(server, b"GET /" + b"a" * 200000 + b" HTTP/1.1\r\n\r\n")
    assert status(resp) == 431
    assert status(get(server)) == 200


def test_fifty_stalled_clients_do_not_delay_a_scrape(server):
    stalled = []
    try:
        for i in range(50):
            c = socket.create_connection(server.address, timeout=5)
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" if i % 2 else b"G")  # never finished
            stalled.append(c)
        # and 5 slow readers that asked for the body but never read it
        for _ in range(5):
            c = socket.create_connection(server.address, timeout=5)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            stalled.append(c)
        began = time.monotonic()
        resp = get(server)
        took = time.monotonic() - began
        assert status(resp) == 200 and took < 2.0, took
    finally:
        for c in stalled:
            c.close()


def test_connection_cap_drops_the_oldest_stalled_client():
    s = MetricsServer("127.0.0.1:0", max_connections=10).start()
    s.publish(prom.render(RECORDS))
    try:
        socks = [socket.create_connection(s.address, timeout=5) for _ in range(30)]
        time.sleep(0.3)
        assert status(get(s)) == 200
        for c in socks:
            c.close()
    finally:
        s.close()


def test_stalled_client_is_cut_after_the_head_timeout(monkeypatch):
    import cgstat.outputs.prometheus.http as http

    monkeypatch.setattr(http, "HEAD_TIMEOUT_S", 0.5)
    s = MetricsServer("127.0.0.1:0").start()
    s.publish(b"x 1\n")
    try:
        c = socket.create_connection(s.address, timeout=5)
        c.sendall(b"GET /met")
        began = time.monotonic()
        assert c.recv(10) == b""  # closed by the server
        assert time.monotonic() - began < 3
    finally:
        s.close()


def test_healthz_before_the_first_tick_and_when_stale():
    s = MetricsServer("127.0.0.1:0", stale_after_s=0.2).start()
    try:
        assert status(get(s, "/healthz")) == 503
        assert status(get(s, "/metrics")) == 503
        s.publish(b"x 1\n")
        assert status(get(s, "/healthz")) == 200
        time.sleep(0.4)
        assert status(get(s, "/healthz")) == 503
    finally:
        s.close()


def test_publishing_while_scraping_is_safe(server):
    stop = threading.Event()

    def publisher():
        n = 0
        while not stop.is_set():
            n += 1
            server.publish(("x %d\n" % n).encode() * 1000)

    t = threading.Thread(target=publisher)
    t.start()
    try:
        for _ in range(30):
            r = get(server)
            assert status(r) == 200 and len(set(body(r).splitlines())) == 1
    finally:
        stop.set()
        t.join()


def test_negotiation_helpers():
    assert wants_gzip("gzip") and wants_gzip("deflate, gzip;q=0.5") and not wants_gzip("gzip;q=0")
    assert not wants_gzip("") and not wants_gzip("identity")
    prom_accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                   "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    assert wants_openmetrics(prom_accept)
    assert not wants_openmetrics("text/plain;version=0.0.4") and not wants_openmetrics("")
    assert not wants_openmetrics("text/plain, application/openmetrics-text;q=0.5")
    assert parse_listen("127.0.0.1:9") == ("127.0.0.1", 9)
    assert parse_listen("[::1]:9") == ("::1", 9) and parse_listen(":9") == ("127.0.0.1", 9)
    for bad in ("", "localhost", "1.2.3.4:x", "1.2.3.4:70000", "::1:9"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_default_listen_is_loopback():
    assert parse_listen(DEFAULT_LISTEN)[0] == "127.0.0.1"
