"""`cgstat report`: a recorded stream read back into a self-contained HTML page."""

from __future__ import annotations

import os
from typing import Optional

from cgstat.diagnostics import say
from cgstat.units import binary_size


def report(stream_file: str, out: str, title: Optional[str] = None, points: int = 500) -> None:
    """Read `stream_file` (a `cgstat stream` output, .gz accepted) and write the page to
    `out`, then say so on stderr (one line); CgstatError (one line) when either can't be done."""
    from cgstat.outputs.report import build_report

    build_report(stream_file, out, title=title, points=points)
    try:
        size = " (%s)" % binary_size(os.stat(out).st_size)
    except OSError:
        size = ""
    say(f"wrote the report of {stream_file} to {out}{size}")
