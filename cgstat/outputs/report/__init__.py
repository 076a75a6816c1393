"""`cgstat report FILE.jsonl -o report.html`: one self-contained HTML file of a recorded
stream: per workload, charts of CPU, memory, IO and GPU against their limits with the
stream's events drawn on them, and a summary table. Modules: source (reading the stream),
accumulate (the one bounded pass), charts (SVG), axis (their y axes), page (HTML, CSS,
JavaScript), markup.
Every name and message is untrusted: controls escaped, then HTML-escaped.
"""

from __future__ import annotations

import os
import stat
from typing import Optional

from cgstat.atomic import write_atomic
from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.outputs.report.accumulate import ReportData, read_stream
from cgstat.outputs.report.page import GENERATOR, render
from cgstat.safepath import place
from cgstat.text import escape_controls

__all__ = ["ReportData", "build_report", "check_output", "read_stream", "render"]


def check_output(path: str, what: str = "report -o") -> None:
    """-o replaces only a missing or empty file or an earlier report of cgstat's: never a
    link, device, FIFO or folder, never a file of someone else's (a typo as root, or a file
    another user left there), and only through folders no other user can change."""
    shown = escape_controls(path)
    with place(path, what) as where:
        st = where.lstat()
        if st is None:
            return
        if not stat.S_ISREG(st.st_mode):
            raise CgstatError("refusing to replace %s: it is %s (cgstat replaces only its own reports)"
                              % (shown, file_kind(st.st_mode)))
        where.check_owned(st)
        if st.st_size == 0:
            return
        try:
            fd = where.open(os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
            try:
                start = os.read(fd, 4096)
            finally:
                os.close(fd)
        except OSError as exc:
            raise CgstatError("cannot write %s: %s" % (shown, os_reason(exc))) from None
    if GENERATOR.encode() not in start:
        raise CgstatError("refusing to replace %s: it is not a report of cgstat's (cgstat replaces only "
                          "its own reports)" % shown)


def build_report(input_path: str, output_path: str, title: Optional[str] = None, points: int = 500,
                 max_workloads: int = 400, point_budget: int = 60000, max_summary: int = 5000,
                 max_markers: int = 200) -> None:
    """Write the HTML report of the stream at `input_path` to `output_path`.

    Raises CgstatError (one line) when the input can't be read or holds no cgroup records,
    or the output can't be used. The output is written to a temporary file beside it and
    renamed into place, mode 0600; what is at the path already must be nothing, an empty
    file or an earlier report (see check_output).
    """
    if points < 10:
        raise CgstatError("points: at least 10")
    check_output(output_path)
    d = read_stream(input_path, points, max_workloads, max_summary, max_markers)
    text = render(d, title or "cgstat report: %s" % os.path.basename(input_path), point_budget)
    try:
        # names and labels may come from root-only runtime state: mode 0600
        write_atomic(output_path, text.encode("utf-8", "backslashreplace"), ".cgstat-report-", "report -o")
    except OSError as exc:
        raise CgstatError("cannot write %s: %s" % (escape_controls(output_path), exc.strerror or exc)) from None
