"""`--web-config-file` (exporter-toolkit's format, read by a strict YAML subset reader that
PyYAML checks here) and `--label-allow`: a real `cgstat serve` with TLS and basic auth,
scraped by curl verifying the certificate against the test's own CA; container labels reach
series (/metrics and OTLP) only when allow-listed."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import yaml

from cgstat.errors import CgstatError
from cgstat.outputs.labelallow import LabelAllow
from cgstat.outputs.otlp.encode import Encoder
from cgstat.outputs.prometheus import webconfig
from cgstat.outputs.prometheus.yamlsubset import YamlError, loads
from tests.helpers.certs import make_pki
from tests.helpers.contract import ROOT

bcrypt = pytest.importorskip("bcrypt")

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
PASSWORD = "scrape-pw-51e0"

# exporter-toolkit's documented examples, and the forms this reader takes
SAME_AS_PYYAML = [
    """# A web config of exporter-toolkit's docs
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  client_auth_type: "RequireAndVerifyClientCert"
  client_ca_file: 'ca.crt'
  min_version: TLS12
basic_auth_users:
  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze
  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m
""",
    "---\na:\n  b:\n    c: d   # comment\n  e: 'it''s'\ng: \"x\\ty\\u00e9\"\nh:\ni: ~\n",
    '{"basic_auth_users": {"alice": "$2y$10$x"}, "tls_server_config": null}',
    "key with spaces: value with # inside\nq: 'a # b'\n",
]

REFUSED = [
    ("a:\n  - x\n", "line 2: a sequence"),
    ("a: [1, 2]\n", "line 1: '['"),
    ("a: {b: c}\n", "line 1: '{'"),
    ("a: &anchor x\nb: *anchor\n", "line 1: '&'"),
    ("a: !!str x\n", "line 1: '!'"),
    ("a: |\n  block\n", "line 1: '|'"),
    ("a:\n\tb: c\n", "line 2: a tab"),
    ("a: b\na: c\n", "line 2: the key 'a' given twice"),
    ("a:\n    b: c\n  d: e\n", "line 3: indentation"),
    ("a: b: c\n", "line 1: a value holding ': '"),
    ("a: 'open\n", "line 1: a quoted value that does not end"),
    ("a: \"\\q\"\n", "line 1: an escape"),
    ("just text\n", "line 1: not `key: value`"),
]


@pytest.mark.parametrize("text", SAME_AS_PYYAML)
def test_the_subset_reads_as_pyyaml_does(text: str) -> None:
    assert loads(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text, says", REFUSED)
def test_everything_else_is_refused_naming_the_line(text: str, says: str) -> None:
    with pytest.raises(YamlError) as err:
        loads(text)
    assert str(err.value).startswith(says) and "\n" not in str(err.value)


def hashed(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)


def write(folder: Path, text: str) -> str:
    path = folder / "web.yml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, says", [
    ("tls_server_config:\n  cert_file: x\n", "tls_server_config needs cert_file and key_file"),
    ("tls_server_config:\n  cert_file: x\n  key_file: y\n  cipher_suites: z\n",
     "tls_server_config.cipher_suites is not supported by cgstat"),
    ("http_server_config:\n  http2: 'false'\n", "'http_server_config' is not supported by cgstat"),
    ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n", "nope.crt: No such file"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
     "client_auth_type 'RequireAnyClientCert' is not one cgstat can do"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
     "needs client_ca_file"),
    ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice is not a bcrypt hash"),
    ("basic_auth_users:\n  - alice\n", "line 2: a sequence"),
])
def test_a_web_config_that_cannot_be_used_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(CgstatError) as err:
        webconfig.load(write(tmp_path, text))
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_basic_auth_without_bcrypt_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bcrypt", None)  # import bcrypt raises ImportError
    with pytest.raises(CgstatError, match=r"basic_auth_users needs bcrypt: pip install 'cgstat\[web\]'"):
        webconfig.load(write(tmp_path, "basic_auth_users:\n  alice: %s\n" % hashed("x")))


def test_basic_auth_checks_with_bcrypt_and_remembers(tmp_path: Path) -> None:
    web = webconfig.load(write(tmp_path, "basic_auth_users:\n  alice: %s\n" % hashed(PASSWORD)))

    def header(user: str, password: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    assert web.authorized(header("alice", PASSWORD)) and web.authorized(header("alice", PASSWORD))
    assert len(web._good) == 1  # the second check was remembered, not a bcrypt round
    for bad in (None, "", header("alice", "wrong"), header("mallory", PASSWORD), "Bearer x", "Basic !!!",
                header("alice", "x" * 100)):  # bcrypt 5 raises on a password over 72 bytes
        assert not web.authorized(bad)


def test_an_unknown_user_costs_a_bcrypt_round_as_a_known_one(tmp_path: Path) -> None:
    web = webconfig.load(write(tmp_path, "basic_auth_users:\n  alice: %s\n" % hashed(PASSWORD)))
    checks: List[bytes] = []
    real = web._bcrypt

    class Counting:
        @staticmethod
        def checkpw(password: bytes, hashed_: bytes) -> bool:
            checks.append(password)
            return bool(real.checkpw(password, hashed_))

    web._bcrypt = Counting()
    for user in ("alice", "mallory"):  # mallory with alice's password: still refused
        assert web.authorized("Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()) is (
            user == "alice")
    assert len(checks) == 2


@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool")
def test_what_cgstat_takes_promtool_takes(tmp_path: Path) -> None:
    """Prometheus' own reader of the format (exporter-toolkit, in promtool) agrees."""
    pki = make_pki(tmp_path)
    config = write(tmp_path, f"""tls_server_config:
  cert_file: {os.path.basename(pki.server_cert)}
  key_file: "{os.path.basename(pki.server_key)}"
  client_ca_file: '{pki.ca}'
  client_auth_type: VerifyClientCertIfGiven
  min_version: TLS12
basic_auth_users:
  prometheus: {hashed(PASSWORD)}   # the scraper
""")
    web = webconfig.load(config)
    assert web.tls is not None and set(web.users) == {"prometheus"}
    proc = subprocess.run(["promtool", "check", "web-config", config], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- a real cgstat serve -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(url: str, *args: str) -> Tuple[int, str]:
    proc = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10", *args, url],
                          capture_output=True, text=True, timeout=30)
    body, _, code = proc.stdout.rpartition("\n")
    return int(code or 0), body


class Serve:
    def __init__(self, *args: str):
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CGSTAT_", "OTEL_"))}
        self.proc = subprocess.Popen([sys.executable, "-m", "cgstat", "--host-root", V2, "serve", "--listen",
                                      f"127.0.0.1:{self.port}", "--interval", "0.2", *args],
                                     cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.started = False  # it answered once: from then on a refused handshake is an answer

    def scrape(self, scheme: str, *args: str) -> Tuple[int, str]:
        """Scrapes until the server answers with a tick's series or refuses (it starts in well
        under the 30 s allowed); a refused handshake is code 0."""
        deadline = time.monotonic() + 30
        while True:
            code, body = curl(f"{scheme}://127.0.0.1:{self.port}/metrics", *args)
            ticked = code != 200 or "container_cpu_usage_seconds_total{" in body
            if self.started and ticked or time.monotonic() > deadline or self.proc.poll() is not None:
                return code, body.strip()
            self.started = self.started or code not in (0, 503)
            time.sleep(0.1)

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err.decode()


needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")


@needs_curl
def test_serve_with_tls_and_basic_auth(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = write(tmp_path, f"""tls_server_config:
  cert_file: {os.path.basename(pki.server_cert)}
  key_file: {os.path.basename(pki.server_key)}
basic_auth_users:
  prometheus: {hashed(PASSWORD)}
""")
    serve = Serve("--web-config-file", config)
    try:
        code, _ = serve.scrape("https", "--cacert", pki.ca)
        assert code == 401  # the certificate verified (curl fails otherwise), no credentials
        code, body = serve.scrape("https", "--cacert", pki.ca, "-u", "prometheus:wrong")
        assert code == 401 and body == "unauthorized"
        code, body = serve.scrape("https", "--cacert", pki.ca, "-u", "prometheus:" + PASSWORD)
        assert code == 200 and "container_cpu_usage_seconds_total{" in body
        assert "container_label_" not in body  # no --label-allow: no container label at all
        code, _ = serve.scrape("https", "-u", "prometheus:" + PASSWORD)  # the system's CAs don't know ours
        assert code == 0
        code, _ = serve.scrape("http", "-u", "prometheus:" + PASSWORD)  # plain HTTP is not spoken
        assert code in (0, 400)
    finally:
        err = serve.stop()
    assert f"serving /metrics and /healthz on https://127.0.0.1:{serve.port}/" in err
    assert PASSWORD not in err


@needs_curl
def test_mtls_asks_for_a_client_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = write(tmp_path, f"""tls_server_config:
  cert_file: {pki.server_cert}
  key_file: {pki.server_key}
  client_ca_file: {pki.ca}
""")
    serve = Serve("--web-config-file", config)
    try:
        code, body = serve.scrape("https", "--cacert", pki.ca, "--cert", pki.client_cert, "--key", pki.client_key)
        assert code == 200 and "container_cpu_usage_seconds_total{" in body
        code, _ = serve.scrape("https", "--cacert", pki.ca)
        assert code == 0  # no client certificate: the handshake fails
    finally:
        serve.stop()


@needs_curl
def test_only_allow_listed_labels_reach_metrics() -> None:
    serve = Serve("--label-allow", r"com\.docker\.compose\.project")
    try:
        code, body = serve.scrape("http")
    finally:
        serve.stop()
    assert code == 200
    labels = {part.split("=")[0] for line in body.splitlines() if "container_label_" in line
              for part in line.split("{", 1)[1].split("}")[0].split(",") if part.startswith("container_label_")}
    assert labels == {"container_label_com_docker_compose_project"}
    assert 'name="batch-new"' in body  # its name stays; its label team=data does not
    assert "team" not in body.replace("container_label_com_docker_compose_project", "")


def test_only_allow_listed_labels_reach_otlp() -> None:
    out = subprocess.run([sys.executable, "-m", "cgstat", "--host-root", V2, "once"], cwd=ROOT, capture_output=True,
                         timeout=60, check=True).stdout
    record = next(r for r in map(json.loads, out.splitlines()) if (r.get("container") or {}).get("name") == "batch-new")
    record["container"]["labels"]["db.password"] = "hunter2"

    def attributes(allow: Optional[str]) -> List[str]:
        body = json.loads(Encoder("json").encode(LabelAllow(allow).apply([record])))
        return [a["key"] for rm in body["resourceMetrics"] for a in rm["resource"]["attributes"]]

    assert not any(k.startswith("container.label.") for k in attributes(None))
    assert {"container.name", "container.id", "container.image.name"} <= set(attributes(None))
    assert [k for k in attributes("team") if k.startswith("container.label.")] == ["container.label.team"]
    assert record["container"]["labels"] == {"team": "data", "db.password": "hunter2"}  # the record is untouched
    assert b"hunter2" not in Encoder("json").encode(LabelAllow("team").apply([record]))


def test_web_config_needs_listen_for_stream() -> None:
    proc = subprocess.run([sys.executable, "-m", "cgstat", "--host-root", V2, "stream", "--count", "1",
                           "--web-config-file", "/nonexistent"], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 2 and b"--listen" in proc.stderr


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus not installed")
def test_a_real_prometheus_scrapes_through_tls_and_basic_auth(tmp_path: Path) -> None:
    """The scrape config docs/prometheus.md shows (scheme https, tls_config ca_file,
    basic_auth password_file) against `serve --web-config-file`: up is 1 and the series come."""
    import urllib.parse
    import urllib.request

    pki = make_pki(tmp_path)
    config = write(tmp_path, "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n"
                             "  prometheus: %s\n" % (pki.server_cert, pki.server_key, hashed(PASSWORD)))
    (tmp_path / "pw").write_text(PASSWORD)
    serve = Serve("--web-config-file", config)
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(f"""global: {{scrape_interval: 1s}}
scrape_configs:
  - job_name: cgstat
    scheme: https
    tls_config: {{ca_file: {pki.ca}}}
    basic_auth: {{username: prometheus, password_file: {tmp_path / "pw"}}}
    static_configs: [{{targets: ["127.0.0.1:{serve.port}"]}}]
  - job_name: no-password
    scheme: https
    tls_config: {{ca_file: {pki.ca}}}
    static_configs: [{{targets: ["127.0.0.1:{serve.port}"]}}]
""")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def query(expr: str) -> list:
        url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:  # loopback only
                return json.loads(r.read())["data"]["result"]
        except OSError:
            return []

    try:
        deadline = time.monotonic() + 60
        series: list = []
        while time.monotonic() < deadline and not series:
            # cgstat's own series: the recorded tree's samples carry their recording's time
            series = query('cgstat_build_info{job="cgstat"}')
            time.sleep(0.5)
        up = query('up{job="cgstat"}')
        refused: list = []
        while time.monotonic() < deadline and not refused:
            refused = query('up{job="no-password"}')
            time.sleep(0.2)
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        serve.stop()
    assert series, "Prometheus got no series through TLS and basic auth"
    assert [s["value"][1] for s in up] == ["1"]
    assert [s["value"][1] for s in refused] == ["0"]  # 401 without the password


def test_a_fifo_or_device_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    for path in (str(fifo), "/dev/null"):
        with pytest.raises(CgstatError, match="not a regular file"):
            webconfig.load(path)
    web = write(tmp_path, "tls_server_config:\n  cert_file: fifo\n  key_file: fifo\n")
    with pytest.raises(CgstatError, match="tls_server_config.cert_file .*fifo: a FIFO, not a regular file"):
        webconfig.load(web)
