"""A throw-away certificate authority made with openssl(1): a CA, a server certificate for
127.0.0.1 and a client certificate, all signed by the CA (P-256 keys: quick to make)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest


class Pki(NamedTuple):
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)


def make_pki(folder: Path) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make certificates")
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca, ca_key = str(folder / "ca.pem"), str(folder / "ca.key")
    _openssl("req", "-x509", *key, "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=cgstat test CA")
    made = []
    for name, subject, ext in (("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\n"),
                               ("client", "/CN=cgstat-client", "extendedKeyUsage=clientAuth\n")):
        cert, pkey, csr, extfile = (str(folder / f"{name}.{s}") for s in ("pem", "key", "csr", "ext"))
        Path(extfile).write_text(ext)
        _openssl("req", *key, "-keyout", pkey, "-out", csr, "-subj", subject)
        _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                 "-days", "1", "-extfile", extfile)
        made += [cert, pkey]
    return Pki(ca, *made)
