"""The report charts' y axis: round ticks in one unit for the whole axis, each label written
with the digits its step needs (0.5 B/s stays "0.5 B/s"), and the labels' width, which sizes
the chart's left margin so that no label runs off the edge."""

from __future__ import annotations

import math
from typing import List, NamedTuple, Tuple

PERCENT, BYTES, RATE = "%", "B", "B/s"

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_MOST_INTERVALS = 5  # at most 6 labels on a chart 106 units high: 10-unit text 17 apart or more
_STEPS = (1.0, 2.0, 2.5, 5.0)

# Advance widths, in ems, of DejaVu Sans (Debian's sans-serif, which Chromium gives system-ui
# there): wider than Arial, Helvetica or Segoe UI for these characters, so a margin made for it
# fits those too. Any other character counts as a whole em.
_EM = dict(
    [(c, 0.636) for c in "0123456789"]
    + [(".", 0.318), (" ", 0.318), ("%", 0.950), ("/", 0.337), ("-", 0.361), ("–", 0.500),
       ("B", 0.686), ("K", 0.656), ("M", 0.863), ("G", 0.775), ("T", 0.611), ("P", 0.603),
       ("E", 0.632), ("i", 0.278), ("s", 0.521)])


class Axis(NamedTuple):
    """A y axis from 0 to `top` (in the data's own unit: bytes, bytes/s, %) and its ticks,
    each a value and its label."""

    top: float
    ticks: List[Tuple[float, str]]


def text_width(text: str, font_size: float) -> float:
    """An upper estimate of `text`'s width at `font_size`, in the same units."""
    return font_size * sum(_EM.get(c, 1.0) for c in text)


def _scale(vmax: float, unit: str) -> Tuple[float, str]:
    """The factor and name of the unit the whole axis is written in."""
    if unit == PERCENT:
        return 1.0, "%"
    i = 0
    while vmax >= 1024.0 ** (i + 1) and i < len(_BINARY) - 1:
        i += 1
    suffix = "/s" if unit == RATE else ""
    return 1024.0 ** i, " " + _BINARY[i] + suffix


def _step(m: float) -> Tuple[float, int]:
    """The least round step (1, 2, 2.5 or 5 times a power of ten) that spans `m` in at most
    _MOST_INTERVALS intervals, and the decimals a label at a multiple of it needs."""
    exp = math.floor(math.log10(m / _MOST_INTERVALS))
    for e in (exp, exp + 1):
        for s in _STEPS:
            step = s * 10.0 ** e
            if math.ceil(m / step - 1e-9) <= _MOST_INTERVALS:
                decimals = max(0, -e + (1 if s == 2.5 else 0))
                return step, decimals
    return 10.0 ** (exp + 2), 0  # not reached: 10 ** (exp + 1) already spans m


def axis(vmax: float, unit: str) -> Axis:
    """Ticks from 0 to a round value at or above `vmax` (1 of the unit where nothing is above
    0), every label in the unit of the largest figure."""
    factor, name = _scale(vmax, unit)
    m = vmax / factor if vmax > 0 else 1.0
    step, decimals = _step(m)
    n = max(1, math.ceil(m / step - 1e-9))
    ticks = [(k * step * factor, "%.*f%s" % (decimals if k else 0, k * step, name)) for k in range(n + 1)]
    return Axis(n * step * factor, ticks)
