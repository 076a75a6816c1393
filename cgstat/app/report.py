"""`cgstat report`: a recorded stream read back into a self-contained HTML page."""

from __future__ import annotations

from typing import Optional


def report(stream_file: str, out: str, title: Optional[str] = None, points: int = 500) -> None:
    """Read `stream_file` (a `cgstat stream` output, .gz accepted) and write the page to
    `out`; CgstatError (one line) when either can't be done."""
    from cgstat.outputs.report import build_report

    build_report(stream_file, out, title=title, points=points)
