"""Where the OTLP push's credentials come from, kept off the command line (which every local
user reads in `ps` and /proc/PID/cmdline): headers from OpenTelemetry's environment
variables, a private file and a systemd credential; client certificates for mTLS; the
user info of an endpoint URL as Basic auth, and that URL as messages show it (redacted).
Reads only the files named; never prints a header's value.
"""

from __future__ import annotations

import base64
import os
import re
import stat
import urllib.parse
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from cgstat.errors import CgstatError, os_reason
from cgstat.text import escape_controls

ENV_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
ENV_METRICS_HEADERS = "OTEL_EXPORTER_OTLP_METRICS_HEADERS"
CREDENTIAL = "otlp-headers"
_MAX_BYTES = 64 * 1024
_SECRET_NAME = re.compile(r"authorization|token|key", re.IGNORECASE)
_BAD_NAME = re.compile(r"[\s:\x00-\x1f\x7f]")
_BETTER = (f"every local user can read a command line (ps, /proc/PID/cmdline): put it in {ENV_HEADERS}, "
           f"--otlp-headers-file FILE (mode 0600) or a systemd credential (LoadCredential={CREDENTIAL}:FILE)")

Header = Tuple[str, str]


class TlsFiles(NamedTuple):
    ca_file: Optional[str]
    client_certificate: Optional[str]
    client_key: Optional[str]


class Credentials(NamedTuple):
    headers: Tuple[Header, ...]
    tls: TlsFiles
    notes: Tuple[str, ...]  # said once on stderr


def parse_headers(text: str, source: str) -> List[Header]:
    """OpenTelemetry's header list: `k1=v1,k2=v2`, names and values trimmed, values
    percent-decoded; line breaks separate entries too and `#` lines are skipped (files).
    ValueError (one line, naming `source`, never a value) when an entry is not NAME=VALUE."""
    out: List[Header] = []
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for n, item in enumerate(",".join(lines).split(","), 1):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        value = urllib.parse.unquote(value.strip())
        if not sep or not name or _BAD_NAME.search(name) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"{source}: entry {n} is not NAME=VALUE")
        out.append((name, value))
    return out


def secret_looking(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


def read_private(path: str, what: str, root_may_own: bool = False) -> str:
    """The text of a small file that holds secrets: a regular file (no link followed), the
    running user's (or root's, for a systemd credential) and readable by no one else.
    CgstatError (one line) otherwise."""
    shown = escape_controls(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise CgstatError(f"cannot read {what} {shown}: {os_reason(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CgstatError(f"refusing {what} {shown}: not a regular file")
        me = os.geteuid()
        if st.st_uid != me and not (root_may_own and st.st_uid == 0):
            raise CgstatError(f"refusing {what} {shown}: it belongs to uid {st.st_uid}, not to the user cgstat "
                              f"runs as (uid {me}); another user could change the credentials")
        # systemd writes a credential 0400, root's, and grants the service's user read access
        # by an ACL (exec-credential.c, write_credential()): the ACL's mask then shows as the
        # group bits (0440). Only the bits of others count there; systemd keeps the folder
        # private to the service.
        private = 0o007 if root_may_own and st.st_uid == 0 else 0o077
        if stat.S_IMODE(st.st_mode) & private:
            raise CgstatError(f"refusing {what} {shown}: other users may read it (mode "
                              f"{stat.S_IMODE(st.st_mode):o}); chmod 600 it")
        data = os.read(fd, _MAX_BYTES + 1)
    except OSError as exc:
        raise CgstatError(f"cannot read {what} {shown}: {os_reason(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise CgstatError(f"refusing {what} {shown}: over {_MAX_BYTES // 1024} KiB, not a header list")
    return data.decode("utf-8", "replace")


# Headers, later sources winning per name (case-insensitive): OTEL_EXPORTER_OTLP_HEADERS,
# then the per-signal OTEL_EXPORTER_OTLP_METRICS_HEADERS (OpenTelemetry's format:
# comma-separated NAME=VALUE, values percent-decoded), then the systemd credential
# `$CREDENTIALS_DIRECTORY/otlp-headers` (`LoadCredential=otlp-headers:FILE`), then
# `--otlp-headers-file`, then `--otlp-header`. A file holds the same format, entries also
# separated by line breaks, `#` lines skipped; it must be the running user's (a credential:
# also root's, read through systemd's ACL) and readable by no other user (read_private). A
# secret-looking header given on the command line (Authorization, or a name holding token
# or key) is said once, with the better way.
def gather(cli_headers: Sequence[Header], headers_file: Optional[str], ca_file: Optional[str],
           client_certificate: Optional[str], client_key: Optional[str], endpoint: str,
           environ: Mapping[str, str]) -> Credentials:
    """The headers and TLS files of the push, from every source (see the comment above)."""
    merged: Dict[str, Header] = {}
    try:
        for var in (ENV_HEADERS, ENV_METRICS_HEADERS):
            for name, value in parse_headers(environ.get(var, ""), var):
                merged[name.lower()] = (name, value)
        folder = environ.get("CREDENTIALS_DIRECTORY")
        if folder and os.path.lexists(os.path.join(folder, CREDENTIAL)):
            path = os.path.join(folder, CREDENTIAL)
            for name, value in parse_headers(read_private(path, "the credential", True), f"credential {CREDENTIAL}"):
                merged[name.lower()] = (name, value)
        if headers_file:
            shown = f"--otlp-headers-file {escape_controls(headers_file)}"
            for name, value in parse_headers(read_private(headers_file, "--otlp-headers-file"), shown):
                merged[name.lower()] = (name, value)
    except ValueError as exc:
        raise CgstatError(str(exc)) from None
    notes: List[str] = []
    for name, value in cli_headers:
        merged[name.lower()] = (name, value)
        if secret_looking(name):
            notes.append(f"OTLP: --otlp-header {escape_controls(name)} is on the command line, where {_BETTER}")
    if password_in(endpoint) and environ.get("CGSTAT_OTLP_ENDPOINT") != endpoint:
        notes.append(f"OTLP: --otlp-endpoint holds a password on the command line, where {_BETTER} "
                     "(an Authorization header), or set CGSTAT_OTLP_ENDPOINT in a private place")
    tls = TlsFiles(
        ca_file or _env(environ, "CERTIFICATE"),
        client_certificate or _env(environ, "CLIENT_CERTIFICATE"),
        client_key or _env(environ, "CLIENT_KEY"),
    )
    if (tls.client_certificate is None) != (tls.client_key is None):
        raise CgstatError("OTLP: a client certificate needs its key and a key its certificate "
                          "(--otlp-client-certificate with --otlp-client-key)")
    return Credentials(tuple(merged.values()), tls, tuple(notes))


def _env(environ: Mapping[str, str], what: str) -> Optional[str]:
    """OTEL_EXPORTER_OTLP_METRICS_<what>, else OTEL_EXPORTER_OTLP_<what> (the per-signal one wins)."""
    return environ.get(f"OTEL_EXPORTER_OTLP_METRICS_{what}") or environ.get(f"OTEL_EXPORTER_OTLP_{what}") or None


def password_in(url: str) -> bool:
    return urllib.parse.urlsplit(url).password is not None


def basic_auth(url: str) -> Optional[str]:
    """The Authorization value for the user info of `url` (RFC 7617), None without one."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return None
    pair = urllib.parse.unquote(parts.username) + ":" + urllib.parse.unquote(parts.password or "")
    return "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")


def redact(url: str) -> str:
    """`url` as messages may show it: any user info replaced by `***` (never printed)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, "***@" + host, parts.path, parts.query, parts.fragment))
