"""The one rule for a number read from a record: a finite int or float, else None (null,
missing, a bool, NaN, an infinity, anything else)."""

from __future__ import annotations

import math
from typing import Any, Optional


def finite(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value
