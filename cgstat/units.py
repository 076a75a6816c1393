"""Numbers in records, in one place: `finite` (the one rule for a number read from a record)
and how the views write byte sizes: docker's units for the table and top
(github.com/docker/go-units, size.go), binary units with one decimal for the report, and
MiB for event messages. A null figure is each view's own mark ("--", "–", "unknown")."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple

MiB = 1024 * 1024


def finite(value: Any) -> Optional[float]:
    """A finite int or float, else None (null, missing, a bool, NaN, an infinity, anything else)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
_DECIMAL = ("B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")


def _scaled(size: float, base: float, names: Sequence[str]) -> Tuple[float, str]:
    i = 0
    while size >= base and i < len(names) - 1:
        size /= base
        i += 1
    return size, names[i]


def bytes_size(size: Optional[float]) -> str:
    """docker's units.BytesSize: 1024-based, 4 significant digits ("24.65MiB", "64MiB")."""
    if size is None:
        return "--"
    value, unit = _scaled(float(size), 1024.0, _BINARY)
    return "%.4g%s" % (value, unit)


def human_size(size: Optional[float], precision: int = 3) -> str:
    """docker's units.HumanSizeWithPrecision: 1000-based ("1.2MB", "0B")."""
    if size is None:
        return "--"
    value, unit = _scaled(float(size), 1000.0, _DECIMAL)
    return "%.*g%s" % (precision, value, unit)


def binary_size(v: Optional[float]) -> str:
    """1024-based up to TiB, bytes whole and the rest with one decimal ("512 B", "1.5 GiB")."""
    if v is None:
        return "–"
    value, unit = _scaled(abs(v), 1024.0, _BINARY[:5])
    return ("%.0f %s" if unit == "B" else "%.1f %s") % (math.copysign(value, v), unit)


def mib(n: Optional[float]) -> str:
    """In MiB with one decimal ("100.0 MiB"), "unknown" for None."""
    return "unknown" if n is None else "%.1f MiB" % (n / MiB)


_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 ** 2, "mb": 1000 ** 2,
               "mib": 1024 ** 2, "g": 1024 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3, "t": 1024 ** 4,
               "tb": 1000 ** 4, "tib": 1024 ** 4}


def parse_size(text: str) -> Optional[int]:
    """A size as people write it: "1GiB", "512M" (K/M/G/T alone: binary, as docker's -m),
    "1.5 GB" (decimal), "1073741824"; None when it is not one."""
    t = text.strip().lower().replace(" ", "")
    i = len(t)
    while i and t[i - 1].isalpha():
        i -= 1
    unit = _SIZE_UNITS.get(t[i:])
    try:
        number = float(t[:i])
    except ValueError:
        return None
    if unit is None or not math.isfinite(number) or number < 0:
        return None
    return int(number * unit)
