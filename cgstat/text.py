"""Names from the kernel and from users are bytes until proven text. Three small jobs, no I/O:

- `decode_name` / `decode_bytes`: a cgroup folder name (or a /proc/<pid>/cgroup path) as
  printable text, each byte that is not valid UTF-8 as `\\xNN`;
- `escape_json` / `dumps_record`: JSON lines with the controls orjson leaves raw escaped;
- `escape_controls` / `quote`: text for stderr and the journal.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Optional, Tuple

import orjson

# The kernel accepts any byte but '/' and NUL in a cgroup name (`mkdir $'app\xff.service'`
# works), so a name need not be UTF-8. Every byte that is not part of valid UTF-8 becomes the
# four characters `\xNN` (lower-case hex), the convention systemd uses for unit-name escapes
# (systemd.unit(5), "String Escaping for Inclusion in Unit Names"). The one ambiguity: a
# folder whose name holds the literal text `\xff` (backslash, x, f, f; systemd itself creates
# names such as `dev-disk-by\x2duuid-….swap`) reads the same as one holding the raw byte
# 0xff. Escaping the backslash too would make it lossless but would change every
# systemd-escaped path cgstat has always reported. Reading is not affected: the walk keeps
# the real (surrogate-escaped) local path.
# Python's os functions give undecodable bytes of a str path as lone surrogates
# U+DC80-U+DCFF (PEP 383, "surrogateescape"); bytes below 0x80 always decode.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _byte_escape(m) -> str:
    return "\\x%02x" % (ord(m.group(0)) - 0xDC00)


def decode_name(name: str) -> str:
    r"""A name or path from `os.scandir`/`os.listdir` (str, surrogate-escaped) as text.

    Valid UTF-8 comes back unchanged; each undecodable byte becomes `\xNN`.
    """
    if name.isascii():
        return name
    return _ESCAPED_BYTE.sub(_byte_escape, name)


def decode_bytes(data: bytes) -> str:
    r"""Raw bytes (a /proc/<pid>/cgroup path, a folder name) as text, `\xNN` for bad bytes.

    Gives the same text as `decode_name` of the same name listed by os.scandir, so paths
    from the walk and from /proc join.
    """
    return decode_name(data.decode("utf-8", "surrogateescape"))


# -- JSON output ---------------------------------------------------------------------------

# orjson writes valid JSON but leaves DEL, the C1 controls (U+0080-U+009F; U+009B is a
# one-character CSI on many terminals) and the bidi controls (U+202A-U+202E, U+2066-U+2069,
# U+200E, U+200F, U+061C) raw; `escape_json` rewrites them as \uXXXX escapes.
# The UTF-8 forms of what orjson leaves raw: DEL; C1 (c2 80-c2 9f); U+200E/U+200F
# (e2 80 8e/8f); U+202A-U+202E (e2 80 aa-ae); U+2066-U+2069 (e2 81 a6-a9); U+061C (d8 9c).
# UTF-8 lead bytes never occur as continuation bytes, so a match is always a whole character.
_JSON_UNSAFE = re.compile(
    b"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]|\xd8\x9c")


def _json_escape(m) -> bytes:
    return b"\\u%04x" % ord(m.group(0).decode("utf-8"))


def escape_json(data: bytes) -> bytes:
    r"""orjson output with DEL, C1 and bidi controls as \uXXXX escapes (same JSON value).

    These characters can only sit inside JSON strings, where `\uXXXX` means the same
    character, so the document decodes to the same value. Fast path: every one of them
    starts with one of four bytes, and a record without any is returned as is.
    """
    if b"\x7f" not in data and b"\xc2" not in data and b"\xe2" not in data and b"\xd8" not in data:
        return data
    return _JSON_UNSAFE.sub(_json_escape, data)


def dumps_record(obj: Any) -> Optional[bytes]:
    """One record as JSON bytes (no newline), controls escaped; None when it can't be.

    orjson refuses, among others, str holding lone surrogates (a name nobody decoded) and
    integers past 64 bits. The caller drops that record with a warning; the batch goes on.
    """
    try:
        data = orjson.dumps(obj)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return None
    return escape_json(data)


_Fragment = getattr(orjson, "Fragment", None)  # orjson >= 3.9: serialised JSON, spliced as it is
# A `gpu.processes` list at least this long is serialised apart, once a batch, where
# records share it; shorter ones are not worth the two shallow copies.
_SHARED_MIN = 16


def batch_lines() -> Callable[[Any], Optional[bytes]]:
    """dumps_record for the records of one batch: those carrying the same `gpu.processes`
    list (one object: cgroup_gpu gives a container and the pod, or --all's slices, above it
    one) have it serialised once and spliced in (orjson.Fragment, orjson 3.9 and later),
    bytes for bytes what serialising each record whole writes."""
    if _Fragment is None:
        return dumps_record
    kept: Dict[int, Tuple[Any, Any]] = {}  # id(list) -> (the list, kept alive: no id reused; its bytes)

    def line(record: Any) -> Optional[bytes]:
        gpu = record.get("gpu")
        if gpu.__class__ is dict:
            processes = gpu.get("processes")
            if processes.__class__ is list and len(processes) >= _SHARED_MIN:
                got = kept.get(id(processes))
                if got is None:
                    try:
                        got = kept[id(processes)] = (processes, _Fragment(orjson.dumps(processes)))
                    except (TypeError, ValueError):  # said by dumps_record as for any record
                        return dumps_record(record)
                return dumps_record({**record, "gpu": {**gpu, "processes": got[1]}})
        return dumps_record(record)

    return line


# -- terminals and the journal ---------------------------------------------------------------

# On stderr and in the journal a raw newline forges a `cgstat: ...` line and ESC/CSI drive
# the admin's terminal.
# C0 (newline and tab included: a message is one line), DEL, C1, the bidi controls, the
# Unicode line and paragraph separators, and surrogates (undecoded bytes; they would also
# make writing to a strict stderr fail).
_LOG_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _log_escape(m) -> str:
    c = ord(m.group(0))
    if 0xDC80 <= c <= 0xDCFF:
        return "\\x%02x" % (c - 0xDC00)  # an undecoded byte, as decode_name writes it
    if c <= 0xFF:
        return "\\x%02x" % c
    return "\\u%04x" % c


def escape_controls(text: str) -> str:
    r"""`text` with every control character (C0 including newline, DEL, C1, bidi
    controls, line separators, surrogates) written as `\xNN` or `\uXXXX`."""
    if not _LOG_UNSAFE.search(text):
        return text
    return _LOG_UNSAFE.sub(_log_escape, text)


def quote(name: str) -> str:
    r"""A user-controlled name for a message: in quotes, as Python's repr() would write it
    (backslash and quote escaped, so the quoted form is unambiguous), controls escaped.

    quote('/a\x1b[2J') == "'/a\\x1b[2J'"
    """
    body = name.replace("\\", "\\\\").replace("'", "\\'")
    return "'" + escape_controls(body) + "'"

