"""The records' time stamps, RFC 3339 UTC with milliseconds (`2026-11-29T20:10:12.807Z`):
made once per second of samples, and read back by one rule by every view that takes
records (events, the report, the exporter's sample timestamps)."""

from __future__ import annotations

import calendar
import functools
import time
from typing import Any, Optional, Tuple


class _Last:
    """The last value made and what it was made from: a tick's records share their second,
    and their stamp (one read, one write: a thread beside this one at worst makes it again)."""

    __slots__ = ("last",)

    def __init__(self, last: Tuple[Any, Any]) -> None:
        self.last = last


_FORMATTED = _Last((-1, ""))  # the last second formatted
_PARSED = _Last((None, None))  # the last stamp parsed


def rfc3339(wall_s: float) -> str:
    whole = int(wall_s)
    ms = int((wall_s - whole) * 1000)
    last = _FORMATTED.last  # one read, one write: a thread beside this one at worst formats again
    if last[0] != whole:
        last = _FORMATTED.last = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{last[1]}.{ms:03d}Z"


@functools.lru_cache(maxsize=4096)
def _whole_seconds(head: str) -> Optional[int]:
    """'2026-11-29T20:10:12' as Unix seconds (a tick's records share it: cached)."""
    try:
        return calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _split(ts: Any) -> Optional[Tuple[int, str]]:
    """The whole seconds and the fraction's digits of a stamp of that shape, else None."""
    if not isinstance(ts, str) or len(ts) < 20 or not ts.endswith("Z"):
        return None
    digits = ts[20:-1]
    if len(ts) > 20 and (ts[19] != "." or not (digits.isascii() and digits.isdigit())):
        return None
    whole = _whole_seconds(ts[:19])
    return None if whole is None else (whole, digits)


def parse_ts(ts: Any) -> Optional[float]:
    """A stamp as epoch seconds (None when not that shape)."""
    last = _PARSED.last
    if ts.__class__ is str and ts == last[0]:
        return last[1]
    parts = _split(ts)
    if parts is None:
        return None
    whole, digits = parts
    value = whole + (float("." + digits) if digits else 0.0)
    if ts.__class__ is str:
        _PARSED.last = (ts, value)
    return value


def ts_millis(ts: Any) -> Optional[int]:
    """A stamp as Unix milliseconds (None when not that shape)."""
    if ts.__class__ is str and len(ts) == 24 and ts[19] == "." and ts[23] == "Z":  # what cgstat writes
        whole = _whole_seconds(ts[:19])
        digits = ts[20:23]
        if whole is not None and digits.isdigit() and digits.isascii():
            return whole * 1000 + int(digits)
    parts = _split(ts)
    if parts is None:
        return None
    whole, digits = parts
    return whole * 1000 + (int((digits + "00")[:3]) if digits else 0)
