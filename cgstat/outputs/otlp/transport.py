"""One OTLP/HTTP receiver: POST a request body, say whether to retry it.

http.client over one kept-alive connection (TLS for https:// URLs, with the system's CAs or
a given CA file, and a client certificate for mTLS), the headers given (auth.py), the
URL's user info as Basic auth (unless an Authorization header is given), a timeout on every
request. Messages name the URL with its user info redacted. What the OTLP/HTTP specification says of responses decides the outcome: 2xx sent;
429, 502, 503, 504, 408 and no answer (connection refused, reset, timeout) are retried, with
Retry-After where the receiver gives it; any other status is a refusal of that body,
which is not retried (VictoriaMetrics answers JSON with 400). Reads no host file.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.parse
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

from cgstat.outputs.otlp.auth import basic_auth, redact

RETRIED = (408, 429, 502, 503, 504)
DEFAULT_PATH = "/v1/metrics"


class Outcome(NamedTuple):
    sent: bool
    retry: bool  # not sent, and worth trying again
    message: str  # why not sent ("" when sent)
    retry_after_s: Optional[float] = None
    answer: bytes = b""  # the receiver's body (a 2xx one may say some points were rejected)


def parse_endpoint(url: str) -> Tuple[str, str, int, str]:
    """(scheme, host, port, path) of an OTLP/HTTP URL; ValueError (one line) when it is not one.
    A URL without a path gets OTLP's /v1/metrics."""
    parts = urllib.parse.urlsplit(url)
    shown = redact(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{shown!r} is not an http:// or https:// URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{shown!r} has a bad port") from None
    if not parts.hostname:
        raise ValueError(f"{shown!r} names no host")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


def parse_header(text: str) -> Tuple[str, str]:
    """`K=V` as a header; ValueError when it is not one (no name, or a line break)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or any(c in text for c in "\r\n\0") or any(c in name for c in " :\t"):
        raise ValueError(f"{text!r} is not a header NAME=VALUE")
    return name, value.strip()


class Receiver:
    """Posts bodies to `url`; not thread-safe (the sink's thread is its only user)."""

    def __init__(self, url: str, headers: Sequence[Tuple[str, str]] = (), timeout_s: float = 10.0,
                 ca_file: Optional[str] = None, client_certificate: Optional[str] = None,
                 client_key: Optional[str] = None):
        self.url = redact(url)  # as messages show it: never the user info
        self.scheme, self.host, self.port, self.path = parse_endpoint(url)
        self.headers: Dict[str, str] = dict(headers)
        basic = basic_auth(url)
        if basic is not None and not any(k.lower() == "authorization" for k in self.headers):
            self.headers["Authorization"] = basic
        self.timeout_s = timeout_s
        self._context: Optional[ssl.SSLContext] = None
        if self.scheme == "https":
            self._context = ssl.create_default_context(cafile=ca_file)
            if client_certificate is not None:
                self._context.load_cert_chain(client_certificate, client_key)
        self._conn: Optional[http.client.HTTPConnection] = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._context is not None:
                self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s,
                                                         context=self._context)
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        return self._conn

    def post(self, body: bytes, content_type: str, gzipped: bool) -> Outcome:
        headers = {"Content-Type": content_type, "User-Agent": "cgstat", **self.headers}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        try:
            conn = self._connection()
            conn.request("POST", self.path, body=body, headers=headers)
            response = conn.getresponse()
            status = response.status
            answer = response.read(4096)
            if response.will_close:
                self.close()
        except (OSError, http.client.HTTPException, socket.timeout) as exc:
            self.close()
            reason = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
            return Outcome(False, True, f"{self.url}: {reason}")
        if 200 <= status < 300:
            return Outcome(True, False, "", answer=answer)
        text = answer.decode("utf-8", "replace").strip().splitlines()
        message = f"{self.url}: HTTP {status}" + (f": {text[0][:200]}" if text else "")
        return Outcome(False, status in RETRIED, message, _retry_after(response.getheader("Retry-After")))

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After in seconds (its HTTP-date form is not used by OTLP receivers: ignored)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
