"""How the views for people write a time: local time with the zone said (or UTC), from a
record's RFC 3339 stamp or Unix seconds. Reads no file (the zone is the C library's,
from TZ or /etc/localtime)."""

from __future__ import annotations

import time
from typing import Any, Optional

from cgstat.timestamps import parse_ts


class Clock:
    """`Clock(utc)`: `.day(ts)` "2026-12-07 03:12:07", `.time(ts)` "03:12:07", `.zone` the
    zone's name ("UTC", "CET"), all in local time unless `utc`."""

    def __init__(self, utc: bool = False) -> None:
        self.utc = utc
        self._convert = time.gmtime if utc else time.localtime
        self.zone = "UTC" if utc else (time.strftime("%Z", time.localtime()) or "local time")

    def seconds(self, ts: Any) -> Optional[float]:
        if isinstance(ts, (int, float)) and not isinstance(ts, bool):
            return float(ts)
        return parse_ts(ts)

    def day(self, ts: Any) -> str:
        """Date and time of day, to the second ("--" for no time)."""
        wall_s = self.seconds(ts)
        return "--" if wall_s is None else time.strftime("%Y-%m-%d %H:%M:%S", self._convert(wall_s))

    def time(self, ts: Any) -> str:
        """The time of day alone, to the second."""
        wall_s = self.seconds(ts)
        return "--" if wall_s is None else time.strftime("%H:%M:%S", self._convert(wall_s))

    def zone_at(self, ts: Any) -> str:
        """The zone's name at that time (summer time differs)."""
        wall_s = self.seconds(ts)
        if self.utc or wall_s is None:
            return self.zone
        return time.strftime("%Z", self._convert(wall_s)) or self.zone


def duration(seconds: Optional[float]) -> str:
    """A length of time for people: 45 s, 12 min, 6 h 5 min, 3 d 4 h."""
    if seconds is None:
        return "--"
    s = max(0.0, float(seconds))
    if s < 60:
        return "%.1f s" % s if s < 10 and s != int(s) else "%d s" % round(s)
    if s < 3600:
        return "%d min %d s" % (s // 60, s % 60) if s < 600 and int(s % 60) else "%d min" % round(s / 60)
    if s < 86400:
        h, m = divmod(int(round(s / 60)), 60)
        return "%d h %d min" % (h, m) if m else "%d h" % h
    d, h = divmod(int(round(s / 3600)), 24)
    return "%d d %d h" % (d, h) if h else "%d d" % d
