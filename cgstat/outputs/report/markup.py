"""The report's words: HTML escaping of untrusted text (controls escaped first), and how
its figures and times are written."""

from __future__ import annotations

import html
import time
from typing import Any, Optional

from cgstat.text import escape_controls
from cgstat.units import binary_size as size


def esc(text: Any) -> str:
    return html.escape(escape_controls(str(text)), quote=True)


def rate(v: Optional[float]) -> str:
    return "–" if v is None else size(v) + "/s"


def pct(v: Optional[float]) -> str:
    return "–" if v is None else "%.1f %%" % v


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def span(seconds: float) -> str:
    if seconds < 120:
        return "%.1f s" % seconds
    if seconds < 7200:
        return "%.1f min" % (seconds / 60)
    return "%.1f h" % (seconds / 3600)
