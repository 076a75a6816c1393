"""The values of command-line options, each read by one parser from its text: a number of
seconds within bounds, a duration, a size, a file mode, one of a few words. Every parser
raises ValueError with a one-line reason; the command line turns that into its usage
error (exit 2), the sink kinds' options (pipeline/sinks.SinkOption) use them as they are.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

# Below 0.1 s a rate is noise, not a measurement: CFS enforces a CPU quota per period
# (100 ms by default), so a 0.5-core cgroup runs at full speed for part of every period,
# and a 1 ms window read a 0.5-core burner at 195 %.
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 86400.0
MAX_WINDOW_S = 3600.0


def seconds(low: float, high: float, zero_ok: bool = False) -> Callable[[Any], float]:
    """A number of seconds from `low` to `high` (or 0, when `zero_ok`)."""

    def parse(value: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{value!r} is not a number of seconds") from None
        if not math.isfinite(number):
            raise ValueError(f"{value} is not a number of seconds")
        if zero_ok and number == 0:
            return number
        if not low <= number <= high:
            lowest = f"0 or {low:g}" if zero_ok else f"{low:g}"
            raise ValueError(f"{number:g} is out of range: from {lowest} to {high:g} seconds")
        return number

    return parse


def whole_number(low: int, high: Optional[int] = None) -> Callable[[Any], int]:
    """A count from `low` (to `high`): click's own says "'1e3' is not a valid int range"."""

    def parse(value: Any) -> int:
        if isinstance(value, int):
            number = value
        else:
            try:
                number = int(str(value))
            except ValueError:
                raise ValueError(f"{value!r} is not a whole number") from None
        if number < low or (high is not None and number > high):
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise ValueError(f"{number} is out of range: {bounds}")
        return number

    return parse


def one_of(*words: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in words:
            raise ValueError(f"{value!r} is not one of {', '.join(words)}")
        return str(value)

    return parse


def choice(words: Sequence[str]) -> Callable[[Any], str]:
    return one_of(*words)


def not_empty(value: Any) -> str:
    if value is not None and not value:
        raise ValueError("must not be empty")
    return str(value)


def absolute(value: Any) -> str:
    if not str(value).startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    return str(value)


def duration(value: Any) -> float:
    """Seconds from `300`, `300s`, `5m` or `1h` (the store's lengths of time, read alike),
    from 1 s to a day."""
    from cgstat.store.times import parse_span

    text = str(value).strip()
    try:
        span = parse_span(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (300, 300s, 5m, 1h)") from None
    return seconds(1.0, 86400.0)(span)


def span_or_none(value: Any) -> Optional[float]:
    """A length of time (7d, 90min); 0 or none: None (no bound)."""
    from cgstat.store.times import parse_span

    if isinstance(value, (int, float)):  # a default given as seconds
        return float(value)
    text = str(value)
    return None if text in ("0", "none") else parse_span(text)


def store_size(value: Any) -> Optional[int]:
    """A store's bound (2G, 500M; at least 1M); 0 or none: None (no bound)."""
    from cgstat.store.times import parse_size

    text = str(value)
    if text in ("0", "none"):
        return None
    size = value if isinstance(value, int) else parse_size(text)
    if size < 1 << 20:
        raise ValueError(f"{text!r} is less than 1M: a store needs room for a few shards")
    return size


def file_mode(value: Any) -> int:
    """An octal mode for a file of records: no execute bits, no world write."""
    text = str(value) if not isinstance(value, int) else f"{value:o}"
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise ValueError(f"{text!r} is not an octal file mode such as 600 or 640")
    # The file holds records, never a program; and other users must not be able to write
    # lines into what root reads back (a report, a log shipper).
    if mode & 0o111:
        raise ValueError(f"{text!r} has execute bits: the file holds records, not a program (600 or 640, say)")
    if mode & 0o002:
        raise ValueError(f"{text!r} lets every user write into the file (600 or 640, say)")
    return mode


def gpu_memory(value: Any) -> int:
    from cgstat.units import parse_size

    size = value if isinstance(value, int) else parse_size(str(value))
    if size is None or size < 1:
        raise ValueError(f"{value!r} is not a size (e.g. 1GiB, 512M, 1073741824)")
    return size
