"""The records' time stamps: RFC 3339 UTC with milliseconds (`2026-11-29T20:10:12.807Z`),
read back by the views that take records from a file."""

from __future__ import annotations

import calendar
import time
from typing import Any, Optional


def parse_ts(ts: Any) -> Optional[float]:
    """RFC 3339 UTC `2026-11-29T20:10:12.807Z` -> epoch seconds (None when not that shape)."""
    if not isinstance(ts, str) or len(ts) < 20 or not ts.endswith("Z"):
        return None
    try:
        whole = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
        frac = ts[19:-1]
        return whole + (float(frac) if frac.startswith(".") and len(frac) > 1 else 0.0)
    except (ValueError, OverflowError):
        return None
