"""The times, spans and sizes users give the store's commands, read into numbers.

A time: ISO 8601 (`2026-12-02T03:12`, `2026-12-02 03:12:30Z`, an offset `+02:00`; without
one, local time), a time of day (`03:12`, `03:12:30`: the last one past, local), Unix seconds (`1764645120`), `now`, or `N s|min|h|d ago` (`10 min ago`,
`90s ago`, `1.5h ago`; `1h` alone is an hour ago too). A span (--retain, --since as a length): `N s|min|h|d`. A size
(--max-size): bytes, or K/M/G/T (powers of 1024).
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Optional

_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60,
          "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
          "days": 86400}
_SPAN = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*\Z")
_AGO = re.compile(r"\s*(.*?)\s+ago\s*\Z|\s*(.*?[a-z])ago\s*\Z")
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*\Z", re.IGNORECASE)
_CLOCK = re.compile(r"\s*([01]?[0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?\s*\Z")
_EPOCH = re.compile(r"\s*[0-9]+(?:\.[0-9]+)?\s*\Z")


def parse_span(text: str) -> float:
    """'7d' as 604800.0; ValueError naming what is wrong."""
    m = _SPAN.match(text.lower())
    if m is None or m.group(2) not in _UNITS and m.group(2) != "":
        raise ValueError(f"{text!r} is not a length of time (N s, min, h or d: 7d, 90min)")
    return float(m.group(1)) * _UNITS.get(m.group(2), 1)


def parse_time(text: str, now: float) -> float:
    """A time the user gave as Unix seconds; ValueError naming the forms it may take."""
    low = text.strip().lower()
    if low == "now":
        return now
    m = _AGO.match(low)
    if m is not None:
        return now - parse_span(m.group(1) if m.group(1) is not None else m.group(2))
    bare = _SPAN.match(low)
    if bare is not None and bare.group(2) in _UNITS:
        return now - parse_span(low)  # "1h": an hour ago
    if _EPOCH.match(low):  # Unix seconds, of any size (`--since 0`: everything kept)
        return float(low)
    clock = _CLOCK.match(low)
    if clock is not None:  # a time of day: today's, local; yesterday's when that is still to come
        today = datetime.datetime.fromtimestamp(now)
        when = today.replace(hour=int(clock.group(1)), minute=int(clock.group(2)),
                             second=int(clock.group(3) or 0), microsecond=0)
        if when.timestamp() > now:
            when -= datetime.timedelta(days=1)
        return when.timestamp()
    iso = text.strip()
    if iso[-1:] in ("Z", "z"):
        iso = iso[:-1] + "+00:00"
    try:
        when = datetime.datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(f"{text!r} is not a time: ISO 8601 (2026-12-02T03:12), a time of day (03:12), "
                         "Unix seconds, now, or N s/min/h/d ago") from None
    return when.timestamp()  # without an offset: local time, as the user's clock shows it


def parse_size(text: str) -> int:
    """'2G' as 2 GiB in bytes; ValueError otherwise."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size (bytes, or K, M, G, T: 2G, 500M)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    size = float(m.group(1)) * scale
    if not math.isfinite(size):
        raise ValueError(f"{text!r} is not a size")
    return int(size)


def parse_optional_span(text: Optional[str]) -> Optional[float]:
    return None if text is None else parse_span(text)
