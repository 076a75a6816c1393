"""`--format html`: the HTML report (this package's page) of the ticks a stream or a
one-shot run made, written when the run ends (and on SIGHUP, the page so far).

The records are taken as they come, each serialised as the stream writes it and fed to
the one bounded pass `cgstat report` makes over a recorded file (accumulate.ReportData):
the page is the one `cgstat report` would make of the same stream. The output is replaced
the way `cgstat report -o` replaces it (check_output; atomic, mode 0600).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

from cgstat.atomic import write_atomic
from cgstat.errors import CgstatError
from cgstat.outputs.report import check_output
from cgstat.outputs.report.accumulate import ReportData
from cgstat.outputs.report.page import render
from cgstat.pipeline.sinks import NO_INFO, LineOf, Sink, TickInfo
from cgstat.text import dumps_record, escape_controls

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject


class ReportSink(Sink):
    """Ticks into a report page at `path`."""

    streams = True
    tees = True
    wants_lines = True

    def __init__(self, path: str, warn: Optional[Callable[[str, str], None]] = None,
                 title: Optional[str] = None, points: int = 500, max_workloads: int = 400,
                 point_budget: int = 60000, max_summary: int = 5000, max_markers: int = 200):
        self.path = path
        self.warn = warn
        self.title = title or "cgstat report: %s" % os.path.basename(path)
        self.point_budget = point_budget
        self.data = ReportData(points, max_workloads, max_summary, max_markers)
        self._line_of: LineOf = dumps_record

    def open(self) -> None:
        check_output(self.path, "--output")  # a path that can't be replaced fails the run now

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        for _ in self.tee(records):
            pass

    def tee(self, records: Iterable[JsonObject]) -> Iterator[JsonObject]:
        """Each record's line fed to the report's data as it passes (nothing to end)."""
        feed = self.data.feed
        line_of = self._line_of
        for record in records:
            line = line_of(record)
            if line is not None:
                feed(line)
            yield record

    def end_tee(self, tick: TickInfo = NO_INFO) -> None:
        pass

    def share_lines(self, line_of: LineOf) -> None:
        self._line_of = line_of

    def reopen(self) -> None:
        self._write_page()

    def close(self) -> None:
        self._write_page()

    def _write_page(self) -> None:
        if not self.data.workloads:
            self._warn("report", f"{escape_controls(self.path)} not written: no cgroup records to report on")
            return
        text = render(self.data, self.title, self.point_budget)
        try:
            write_atomic(self.path, text.encode("utf-8", "backslashreplace"), ".cgstat-report-", "--output")
        except OSError as exc:
            self._warn("report", "cannot write %s: %s" % (escape_controls(self.path), exc.strerror or exc))
        except CgstatError as exc:
            self._warn("report", str(exc))

    def _warn(self, key: str, message: str) -> None:
        if self.warn is not None:
            self.warn(key, message)
