"""The OTLP push's credentials stay off every command line: a bearer token from
OTEL_EXPORTER_OTLP_HEADERS, --otlp-headers-file or a systemd credential reaches a loopback
receiver and is in no process's /proc/PID/cmdline; one given with --otlp-header is said once;
an endpoint's user info is sent as Basic auth and never printed; mTLS with a client
certificate from OpenTelemetry's variables."""

from __future__ import annotations

import base64
import glob
import http.server
import os
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from cgstat.errors import CgstatError
from cgstat.outputs.otlp.sink import OtlpOptions, OtlpSink
from cgstat.outputs.otlp.auth import basic_auth, gather, parse_headers, read_private, redact
from tests.helpers.certs import make_pki
from tests.helpers.contract import ROOT

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
TOKEN = "s3cret-7c1d9e"
SHOWN_TOKEN = "not-so-s3cret-4f2a"  # the one test that puts a token on a command line uses its own


class Receiver(http.server.ThreadingHTTPServer):
    """A loopback OTLP/HTTP receiver that keeps each request's headers (and the client
    certificate's subject under mTLS) and answers `status`."""

    daemon_threads = True

    def __init__(self, status: int = 200, context: Optional[ssl.SSLContext] = None):
        self.status = status
        self.seen: List[Dict[str, str]] = []
        self.peers: List[object] = []
        self.got = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)
        if context is not None:
            self.socket = context.wrap_socket(self.socket, server_side=True)
        threading.Thread(target=self.serve_forever, daemon=True).start()
        scheme = "https" if context is not None else "http"
        self.url = "%s://127.0.0.1:%d/v1/metrics" % (scheme, self.server_address[1])

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        assert isinstance(server, Receiver)
        server.seen.append(dict(self.headers))
        getpeercert = getattr(self.connection, "getpeercert", None)
        server.peers.append(getpeercert() if getpeercert else None)
        server.got.set()
        self.send_response(server.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"no")

    def log_message(self, *args: object) -> None:
        pass


def private(path: Path, text: str, mode: int = 0o600) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


# -- where headers come from ----------------------------------------------------------------


def test_opentelemetrys_header_format() -> None:
    assert parse_headers("Authorization=Bearer%20abc%3D%3D, X-Scope-OrgID = t1,", "ENV") == [
        ("Authorization", "Bearer abc=="), ("X-Scope-OrgID", "t1")]
    assert parse_headers("# a comment\nA=1\n\nB=2,C=3\n", "file") == [("A", "1"), ("B", "2"), ("C", "3")]
    for bad in ("novalue", "=x", "a b=c", "X:y=1"):
        with pytest.raises(ValueError) as err:
            parse_headers("Authorization=Bearer%20" + TOKEN + "," + bad, "ENV")
        assert str(err.value) == "ENV: entry 2 is not NAME=VALUE"  # never the value


def test_per_signal_wins_then_credential_file_and_command_line(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    private(creds / "otlp-headers", "X-C=credential\nX-D=credential\nX-E=credential\n", 0o400)
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "X-A=generic,X-B=generic,x-c=generic",
           "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-b=metrics", "CREDENTIALS_DIRECTORY": str(creds)}
    headers_file = private(tmp_path / "h", "X-D=file\nX-E=file")
    got = gather([("x-e", "cli")], headers_file, None, None, None, "http://r/", env)
    assert dict(got.headers) == {"X-A": "generic", "x-b": "metrics", "X-C": "credential", "X-D": "file", "x-e": "cli"}
    assert got.notes == () and got.tls == (None, None, None)


@pytest.mark.skipif(os.geteuid() != 0, reason="a credential of root's needs root")
def test_a_systemd_credential_readable_through_its_acl_is_taken(tmp_path: Path) -> None:
    # systemd gives the service's user read access by an ACL: the mask shows as group bits
    creds = tmp_path / "creds"
    creds.mkdir()
    path = private(creds / "otlp-headers", "Authorization=Bearer " + TOKEN, 0o440)
    os.chown(path, 0, 0)
    got = gather([], None, None, None, None, "http://r/", {"CREDENTIALS_DIRECTORY": str(creds)})
    assert dict(got.headers) == {"Authorization": "Bearer " + TOKEN}
    os.chmod(path, 0o444)  # every user: refused still
    with pytest.raises(CgstatError, match="other users may read it .mode 444."):
        gather([], None, None, None, None, "http://r/", {"CREDENTIALS_DIRECTORY": str(creds)})


@pytest.mark.parametrize("name, secret", [("Authorization", True), ("x-api-key", True), ("X-Auth-Token", True),
                                          ("X-Scope-OrgID", False), ("KEYCLOAK-REALM", True)])
def test_secret_looking_headers_on_the_command_line_are_said(name: str, secret: bool) -> None:
    got = gather([(name, TOKEN)], None, None, None, None, "http://r/", {})
    assert len(got.notes) == (1 if secret else 0)
    if secret:
        assert name in got.notes[0] and "OTEL_EXPORTER_OTLP_HEADERS" in got.notes[0]
        assert "--otlp-headers-file" in got.notes[0] and "LoadCredential=" in got.notes[0]
        assert TOKEN not in got.notes[0]


def test_headers_file_must_be_private_and_ours(tmp_path: Path) -> None:
    path = private(tmp_path / "h", "Authorization=Bearer " + TOKEN)
    assert read_private(path, "--otlp-headers-file") == "Authorization=Bearer " + TOKEN
    os.chmod(path, 0o640)
    with pytest.raises(CgstatError, match="other users may read it .mode 640.; chmod 600"):
        read_private(path, "--otlp-headers-file")
    os.chmod(path, 0o600)
    os.symlink(path, str(tmp_path / "link"))
    with pytest.raises(CgstatError, match="Too many levels of symbolic links"):
        read_private(str(tmp_path / "link"), "--otlp-headers-file")
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)
        with pytest.raises(CgstatError, match="belongs to uid 4242"):
            read_private(path, "--otlp-headers-file")


def test_tls_files_from_opentelemetrys_variables() -> None:
    env = {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/generic.pem",
           "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE": "/metrics.pem", "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/k"}
    assert gather([], None, None, None, None, "https://r/", env).tls == ("/ca", "/metrics.pem", "/k")
    assert gather([], None, "/my-ca", "/c", "/ck", "https://r/", env).tls == ("/my-ca", "/c", "/ck")
    with pytest.raises(CgstatError, match="needs its key"):
        gather([], None, None, "/c", None, "https://r/", {})


def test_user_info_is_basic_auth_and_redacted() -> None:
    url = "https://alice:pa%3Ass@collector:4318/v1/metrics"
    assert basic_auth(url) == "Basic " + base64.b64encode(b"alice:pa:ss").decode()
    assert redact(url) == "https://***@collector:4318/v1/metrics"
    assert redact("http://collector/v1/metrics") == "http://collector/v1/metrics"
    assert basic_auth("http://collector/") is None


# -- end to end: a real cgstat, a real receiver ---------------------------------------------


def cmdlines() -> List[bytes]:
    out = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                out.append(f.read())
        except OSError:
            pass
    return out


def push(receiver: Receiver, *args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """`cgstat stream` pushing 3 ticks; every process's command line scanned while it runs."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CGSTAT_", "CREDENTIALS_"))}
    full.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "--host-root", V2, "stream", "--no-events", "--count", "3",
                             "--interval", "0.3", "--otlp-encoding", "json", "--otlp-endpoint", receiver.url, *args],
                            cwd=ROOT, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen_cmdline = False
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        lines = cmdlines()
        seen_cmdline = seen_cmdline or any(b"--otlp-endpoint" in line for line in lines)
        assert not any(TOKEN.encode() in line for line in lines)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=30)
    assert seen_cmdline, "cgstat's own command line was never seen: the scan saw nothing"
    return subprocess.CompletedProcess(proc.args, proc.returncode, b"", err)


@pytest.mark.parametrize("source", ["env", "per-signal env", "file", "credential"])
def test_a_token_from_env_file_or_credential_reaches_the_receiver_off_every_command_line(
        tmp_path: Path, source: str) -> None:
    receiver = Receiver()
    args: List[str] = []
    env: Dict[str, str] = {}
    if source == "env":
        env["OTEL_EXPORTER_OTLP_HEADERS"] = "Authorization=Bearer%20" + TOKEN
    elif source == "per-signal env":
        env["OTEL_EXPORTER_OTLP_HEADERS"] = "Authorization=Bearer%20wrong"
        env["OTEL_EXPORTER_OTLP_METRICS_HEADERS"] = "Authorization=Bearer%20" + TOKEN
    elif source == "file":
        args = ["--otlp-headers-file", private(tmp_path / "otlp-headers", "Authorization=Bearer " + TOKEN + "\n")]
    else:
        (tmp_path / "creds").mkdir(mode=0o500)
        private(tmp_path / "creds" / "otlp-headers", "Authorization=Bearer " + TOKEN, 0o400)
        env["CREDENTIALS_DIRECTORY"] = str(tmp_path / "creds")
    try:
        run = push(receiver, *args, env=env)
    finally:
        receiver.close()
    assert run.returncode == 0, run.stderr
    assert "OTLP" not in run.stderr.decode()  # nothing to say: no secret on the command line, every tick sent
    assert len(receiver.seen) == 3 and all(h["Authorization"] == "Bearer " + TOKEN for h in receiver.seen)


def test_a_token_on_the_command_line_is_said_once(tmp_path: Path) -> None:
    receiver = Receiver()
    try:
        run = push(receiver, "--otlp-header", "Authorization=Bearer " + SHOWN_TOKEN)
    finally:
        receiver.close()
    err = run.stderr.decode()
    assert run.returncode == 0, err
    lines = [line for line in err.splitlines() if "--otlp-header Authorization" in line]
    assert len(lines) == 1 and "OTEL_EXPORTER_OTLP_HEADERS" in lines[0] and SHOWN_TOKEN not in err
    assert all(h["Authorization"] == "Bearer " + SHOWN_TOKEN for h in receiver.seen)


def test_a_headers_file_others_may_read_fails_at_start(tmp_path: Path) -> None:
    receiver = Receiver()
    try:
        run = push(receiver, "--otlp-headers-file", private(tmp_path / "h", "Authorization=Bearer " + TOKEN, 0o644))
    finally:
        receiver.close()
    err = run.stderr.decode()
    assert run.returncode == 1 and len(err.splitlines()) == 1 and "chmod 600" in err and TOKEN not in err
    assert receiver.seen == []


def test_user_info_goes_as_basic_auth_and_no_message_shows_it() -> None:
    receiver = Receiver(status=400)  # refused: every push is reported, with the URL
    url = receiver.url.replace("://", "://alice:pa55w0rd@")
    try:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CGSTAT_"))}
        run = subprocess.run([sys.executable, "-m", "cgstat", "--host-root", V2, "stream", "--no-events", "--count",
                              "2", "--interval", "0.3", "--otlp-encoding", "json", "--otlp-endpoint", url],
                             cwd=ROOT, env=full, capture_output=True, timeout=60)
    finally:
        receiver.close()
    err = run.stderr.decode()
    assert receiver.seen and all(h["Authorization"] == "Basic " + base64.b64encode(b"alice:pa55w0rd").decode()
                                 for h in receiver.seen)
    assert "HTTP 400" in err and "***@127.0.0.1" in err, err
    assert "pa55w0rd" not in err and "alice" not in err
    # and the password on the command line is said once, like a header
    assert sum("--otlp-endpoint holds a password" in line for line in err.splitlines()) == 1


def test_mtls_with_opentelemetrys_certificate_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pki = make_pki(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.load_verify_locations(pki.ca)
    context.verify_mode = ssl.CERT_REQUIRED  # no client certificate, no request
    receiver = Receiver(context=context)
    said: List[str] = []
    try:
        for var in [v for v in os.environ if v.startswith("OTEL_")]:
            monkeypatch.delenv(var)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.ca)
        stranger = OtlpSink(OtlpOptions(receiver.url, "json"), lambda k, m: said.append(m), close_timeout_s=2)
        stranger.write([])
        stranger.close()
        assert receiver.seen == [] and stranger.ticks_sent == 0
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", pki.client_cert)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", pki.client_key)
        known = OtlpSink(OtlpOptions(receiver.url, "json"), lambda k, m: said.append(m))
        known.write([])
        assert receiver.got.wait(20)
        known.close()
    finally:
        receiver.close()
    assert known.ticks_sent == 1
    peer = receiver.peers[0]
    assert isinstance(peer, dict) and ((("commonName", "cgstat-client"),),) == peer["subject"]


@pytest.mark.parametrize("option", ["ca_file", "client_certificate", "client_key"])
def test_a_tls_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path, option: str) -> None:
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    pem = private(tmp_path / "pem", "not read")
    files = {"ca_file": pem, "client_certificate": pem, "client_key": pem, option: fifo}
    options = OtlpOptions("https://127.0.0.1:9/", "json")._replace(**files)
    with pytest.raises(CgstatError, match=f"refusing OTLP .*{fifo}: a FIFO, not a regular file"):
        OtlpSink(options)
