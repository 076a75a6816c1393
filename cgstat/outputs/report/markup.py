"""The report's words: HTML escaping of untrusted text (controls escaped first), and how
its figures and times are written."""

from __future__ import annotations

import html
import math
import time
from typing import Any, Optional

from cgstat.text import escape_controls
from cgstat.units import binary_size as size


def esc(text: Any) -> str:
    return html.escape(escape_controls(str(text)), quote=True)


def _digits(v: float, significant: int) -> str:
    """`v` (not 0) with `significant` digits, no exponent and no trailing zeros: 0.38, 0.00001."""
    text = "%.*f" % (max(0, significant - 1 - math.floor(math.log10(abs(v)))), v)
    return text.rstrip("0").rstrip(".") if "." in text else text


def rate(v: Optional[float]) -> str:
    """Bytes per second; under 10 B/s with two significant digits, as a mean of 0.38 B/s is
    not 0."""
    if v is None:
        return "–"
    return _digits(v, 2) + " B/s" if 0 < abs(v) < 10 else size(v) + "/s"


def pct(v: Optional[float]) -> str:
    """A percentage with one decimal; under 0.1 % with one significant digit, not "0.0 %"."""
    if v is None:
        return "–"
    return _digits(v, 1) + " %" if 0 < abs(v) < 0.1 else "%.1f %%" % v


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def span(seconds: float) -> str:
    if seconds < 120:
        return "%.1f s" % seconds
    if seconds < 7200:
        return "%.1f min" % (seconds / 60)
    return "%.1f h" % (seconds / 3600)
