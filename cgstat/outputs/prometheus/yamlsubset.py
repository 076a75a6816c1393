"""The part of YAML that exporter-toolkit's web config files use, read without a YAML
library: nested block mappings of scalars (plain, 'single' or "double" quoted, `~`/`null`/
nothing for null), `#` comments and a leading `---`; a file whose first character is `{`
is read as JSON. Everything else YAML allows (sequences, flow collections, anchors, tags,
block scalars, tabs for indentation, duplicate keys) is refused with one line naming the
line: a strict small reader refuses what it does not know rather than guess at it.
Scalars stay text (the web config's values are all text: paths, names, hashes).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

_PLAIN_START_BAD = set("-?:,[]{}#&*!|>'\"%@`")
_KEY = re.compile(r"""("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"][^#]*?)\s*:(?:\s+|$)(.*)$""")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "/": "/", "0": "\0", " ": " "}


class YamlError(ValueError):
    """Not the YAML subset: one line, naming the line."""


def loads(text: str) -> Dict[str, Any]:
    """The mapping the text holds (a document that is not a mapping is refused)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise YamlError(f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise YamlError("line 1: the document is not a mapping")
        return obj
    root: Dict[str, Any] = {}
    stack: List[Tuple[int, Dict[str, Any]]] = [(0, root)]  # (indentation, mapping) of the open levels
    pending: Optional[Tuple[int, Dict[str, Any], str]] = None  # a `key:` whose value may be a mapping
    seen_content = False
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        body = line.lstrip(" ")
        if not body.strip() or body.startswith("#"):
            continue
        if body.startswith("\t") or "\t" in line[: len(line) - len(body)]:
            raise YamlError(f"line {n}: a tab in the indentation (YAML indents with spaces)")
        indent = len(line) - len(body)
        if body.rstrip() == "---" and not seen_content and indent == 0:
            continue
        seen_content = True
        if pending is not None:
            p_indent, p_map, p_key = pending
            pending = None
            if indent > p_indent:
                child: Dict[str, Any] = {}
                p_map[p_key] = child
                stack.append((indent, child))
        while indent < stack[-1][0]:
            stack.pop()  # the first level has indentation 0: never emptied
        if indent != stack[-1][0]:
            raise YamlError(f"line {n}: indentation that matches no mapping above it")
        mapping = stack[-1][1]
        key, value = _entry(body.rstrip(), n)
        if key in mapping:
            raise YamlError(f"line {n}: the key {key!r} given twice")
        if value is _NESTED:
            mapping[key] = None
            pending = (indent, mapping, key)
        else:
            mapping[key] = value
    return root


_NESTED = object()


def _entry(body: str, n: int) -> Tuple[str, Any]:
    if body.startswith("- ") or body == "-":
        raise YamlError(f"line {n}: a sequence (- item), which this reader does not take")
    m = _KEY.match(body)
    if m is None:
        raise YamlError(f"line {n}: not `key: value`")
    key = _scalar(m.group(1).strip(), n, is_key=True)
    if not isinstance(key, str):
        raise YamlError(f"line {n}: a key that is not text")
    rest = _strip_comment(m.group(2), n)
    if rest == "":
        return key, _NESTED
    return key, _scalar(rest, n)


def _strip_comment(text: str, n: int) -> str:
    """The value without a trailing ` # comment` (a # inside quotes is kept)."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        end = _quoted_end(text, n)
        tail = text[end:].strip()
        if tail and not tail.startswith("#"):
            raise YamlError(f"line {n}: text after a quoted value")
        return text[:end]
    cut = re.search(r"\s#", text)
    return (text[: cut.start()] if cut else text).strip()


def _quoted_end(text: str, n: int) -> int:
    quote = text[0]
    i = 1
    while i < len(text):
        c = text[i]
        if quote == '"' and c == "\\":
            i += 2
            continue
        if c == quote:
            if quote == "'" and text[i + 1: i + 2] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    raise YamlError(f"line {n}: a quoted value that does not end on its line")


def _scalar(text: str, n: int, is_key: bool = False) -> Any:
    if text[:1] == "'":
        if _quoted_end(text, n) != len(text):
            raise YamlError(f"line {n}: text after a quoted value")
        return text[1:-1].replace("''", "'")
    if text[:1] == '"':
        if _quoted_end(text, n) != len(text):
            raise YamlError(f"line {n}: text after a quoted value")
        return _unescape(text[1:-1], n)
    if not is_key and text in ("~", "null", "Null", "NULL"):
        return None
    if text[:1] in _PLAIN_START_BAD:
        raise YamlError(f"line {n}: {text[:1]!r} starts a YAML form this reader does not take (quote the value)")
    if ": " in text or text.endswith(":"):
        raise YamlError(f"line {n}: a value holding ': ' (quote it)")
    return text


def _unescape(text: str, n: int) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1: i + 2]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = text[i + 2: i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise YamlError(f"line {n}: a bad \\{nxt} escape")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        else:
            raise YamlError(f"line {n}: an escape this reader does not take (\\{nxt})")
    return "".join(out)
