"""Pressure stall information of one cgroup: {cpu,memory,io}.pressure as PressureSamples.

Reads nothing itself: the parser of a PSI file (Documentation/accounting/psi.rst) that the
reader applies.
"""

from __future__ import annotations

from cgstat.kernel import parse
from cgstat.kernel.controllers.files import US
from cgstat.kernel.sample import PressureSample


def pressure_sample(text: str) -> PressureSample:
    """A PSI file as a PressureSample (seconds for the totals); ValueError as parse_pressure."""
    m = parse.PSI_FILE.fullmatch(text)
    if m is not None:  # the kernel's own two lines: no intermediate tables
        g = m.groups()
        some_total, full_total = int(g[3]), int(g[7])
        if some_total <= parse.U64_MAX and full_total <= parse.U64_MAX:
            # Most averages read 0.00 (no stall in the last 10 s to 5 min): one shared float.
            a = [0.0 if x == "0.00" else float(x) for x in g]
            return PressureSample(a[0], a[1], a[2], some_total / US if some_total else 0.0,
                                  a[4], a[5], a[6], full_total / US if full_total else 0.0)
    table = parse.parse_pressure(text)
    some = table["some"]
    full = table.get("full")
    return PressureSample(
        some["avg10"], some["avg60"], some["avg300"], some["total"] / US,
        full["avg10"] if full else None, full["avg60"] if full else None,
        full["avg300"] if full else None, full["total"] / US if full else None,
    )
