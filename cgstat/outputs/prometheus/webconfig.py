"""`--web-config-file`: TLS and basic auth for /metrics, in Prometheus exporter-toolkit's
format (what node_exporter, dcgm-exporter and Kepler take; docs/prometheus.md shows it), so
one file serves them all. Reads that file with the strict YAML subset reader (yamlsubset.py;
JSON too), and the certificate and key files it names (relative paths: from its own folder).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import ssl
import stat
from typing import Any, Dict, Optional, Set

from cgstat.errors import CgstatError, file_kind, os_reason, require_regular
from cgstat.outputs.prometheus.yamlsubset import YamlError, loads
from cgstat.text import escape_controls

# An unknown or unsupported key is refused with one line, as exporter-toolkit refuses
# unknown keys. TLS is the standard library's `ssl`; bcrypt is the `bcrypt` package
# (`pip install 'cgstat[web]'`), asked for only when users are configured: never a
# home-made hash.
_MAX_BYTES = 1024 * 1024
_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version"}
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
             "TLS13": ssl.TLSVersion.TLSv1_3}
# exporter-toolkit's client_auth_type values (Go's tls.ClientAuthType) that ssl can do
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
# A password checked once is remembered (a keyed digest of it, in memory), as
# exporter-toolkit does, so a scrape every second does not cost a bcrypt round each; a wrong
# one costs one bcrypt check in the server's thread.
_REMEMBERED = 256  # passwords remembered, good and bad


class WebConfig:
    """A loaded web config: `tls` (an SSLContext or None) and `authorized(header)`."""

    def __init__(self, path: str, tls: Optional[ssl.SSLContext], users: Dict[str, bytes]):
        self.path = path
        self.tls = tls
        self.users = users
        self._key = os.urandom(32)
        self._good: Set[bytes] = set()
        self._bad: Set[bytes] = set()
        self._bcrypt: Any = _bcrypt() if users else None

    @property
    def guarded(self) -> bool:
        """TLS or basic auth: the endpoint is more than plain HTTP for anyone."""
        return self.tls is not None or bool(self.users)

    def authorized(self, header: Optional[str]) -> bool:
        """Whether an Authorization header's value lets the request in (always, without users)."""
        if not self.users:
            return True
        if not header or not header[:6].lower() == "basic ":
            return False
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return False
        if not sep:
            return False
        known = self.users.get(user)
        # an unknown user costs the bcrypt round a known one does (exporter-toolkit checks a
        # fixed hash for the same reason): the time of a 401 does not tell which names exist
        hashed = known if known is not None else next(iter(self.users.values()))
        digest = hmac.new(self._key, user.encode() + b"\0" + password.encode() + b"\0" + hashed,
                          hashlib.sha256).digest()
        if digest in self._good:
            return True
        if digest in self._bad:
            return False
        try:
            ok = bool(self._bcrypt.checkpw(password.encode("utf-8"), hashed)) and known is not None
        except ValueError:  # bcrypt >= 5 refuses a password over 72 bytes (older ones cut it): wrong
            ok = False
        remembered = self._good if ok else self._bad
        if len(remembered) >= _REMEMBERED:
            remembered.clear()
        remembered.add(digest)
        return ok


def load(path: str) -> WebConfig:
    """The web config at `path`; CgstatError (one line) when it can't be read or used."""
    shown = escape_controls(path)
    what = f"--web-config-file {shown}"
    try:  # O_NONBLOCK: a FIFO given by mistake is refused below instead of waited on for ever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise CgstatError(f"cannot read {what}: {os_reason(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CgstatError(f"refusing {what}: {file_kind(mode)}, not a regular file")
        data = os.read(fd, _MAX_BYTES + 1)
    except OSError as exc:
        raise CgstatError(f"cannot read {what}: {os_reason(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise CgstatError(f"{what}: over 1 MiB, not a web config")
    try:
        doc = loads(data.decode("utf-8"))
    except (YamlError, UnicodeDecodeError) as exc:
        raise CgstatError(f"{what}: {exc}") from None
    folder = os.path.dirname(os.path.abspath(path))
    unknown = sorted(set(doc) - {"tls_server_config", "basic_auth_users"})
    if unknown:
        raise CgstatError(f"{what}: {unknown[0]!r} is not supported by cgstat (tls_server_config and "
                          "basic_auth_users are)")
    tls = _tls(doc.get("tls_server_config"), folder, what)
    users = _users(doc.get("basic_auth_users"), what)
    try:
        return WebConfig(path, tls, users)
    except ImportError:
        raise CgstatError(f"{what}: basic_auth_users needs bcrypt: pip install 'cgstat[web]'") from None


def _mapping(value: Any, what: str, section: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CgstatError(f"{what}: {section} is not a mapping")
    return value


def _tls(section: Any, folder: str, what: str) -> Optional[ssl.SSLContext]:
    conf = _mapping(section, what, "tls_server_config")
    if not conf:
        return None
    unknown = sorted(set(conf) - _TLS_KEYS)
    if unknown:
        raise CgstatError(f"{what}: tls_server_config.{unknown[0]} is not supported by cgstat")
    for key, value in conf.items():
        if value is not None and not isinstance(value, str):
            raise CgstatError(f"{what}: tls_server_config.{key} is not text")
    if not conf.get("cert_file") or not conf.get("key_file"):
        raise CgstatError(f"{what}: tls_server_config needs cert_file and key_file")

    def where(name: str) -> str:
        return os.path.join(folder, conf[name])

    ca = conf.get("client_ca_file")
    auth = conf.get("client_auth_type") or ("RequireAndVerifyClientCert" if ca else "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise CgstatError(f"{what}: client_auth_type {auth!r} is not one cgstat can do "
                          f"({', '.join(_CLIENT_AUTH)})")
    if _CLIENT_AUTH[auth] != ssl.CERT_NONE and not ca:
        raise CgstatError(f"{what}: client_auth_type {auth} needs client_ca_file")
    for name in ("cert_file", "key_file", "client_ca_file"):
        if conf.get(name):
            require_regular(where(name), f"{what}: tls_server_config.{name} {escape_controls(where(name))}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.minimum_version = _version(conf.get("min_version") or "TLS12", what)
        if conf.get("max_version"):
            context.maximum_version = _version(conf["max_version"], what)
        context.load_cert_chain(where("cert_file"), where("key_file"))
        if ca:
            context.load_verify_locations(where("client_ca_file"))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise CgstatError(f"{what}: tls_server_config: {getattr(exc, 'strerror', None) or exc}") from None
    context.verify_mode = _CLIENT_AUTH[auth]
    return context


def _version(name: str, what: str) -> ssl.TLSVersion:
    if name not in _VERSIONS:
        raise CgstatError(f"{what}: TLS version {name!r} is not one of {', '.join(_VERSIONS)}")
    return _VERSIONS[name]


def _users(section: Any, what: str) -> Dict[str, bytes]:
    users: Dict[str, bytes] = {}
    for name, hashed in _mapping(section, what, "basic_auth_users").items():
        if not isinstance(hashed, str) or not hashed.startswith(_BCRYPT_PREFIXES):
            raise CgstatError(f"{what}: basic_auth_users.{escape_controls(name)} is not a bcrypt hash "
                              "($2y$..., as htpasswd -B makes)")
        users[name] = hashed.encode("ascii", "replace")
    return users


def _bcrypt() -> Any:
    import bcrypt  # the web extra; ImportError tells load() to say what to install

    return bcrypt
