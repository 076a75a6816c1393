"""How the views write byte sizes, in one place: docker's units for the table and top
(github.com/docker/go-units, size.go), binary units with one decimal for the report, and
MiB for event messages. A null figure is each view's own mark ("--", "–", "unknown")."""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

MiB = 1024 * 1024

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
