"""The output formats of `once` and `stream`, each a sink with the one interface (open,
write(records), reopen, close): JSON lines (the default), a docker-stats-like table, CSV."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:  # the sinks are imported when one is made: the CLI reads FORMATS for --help
    from cgstat.outputs.jsonl import JsonLinesSink

FORMATS = ("jsonl", "table", "csv")


def make_sink(fmt: str, path: Optional[str], mode: int = 0o600,
              warn: Optional[Callable[[str, str], None]] = None) -> JsonLinesSink:
    """The sink for `--format FMT` on `path`, or on stdout when there is none."""
    from cgstat.outputs.jsonl import FileSink, StdoutSink

    if fmt == "jsonl":
        return FileSink(path, mode, warn) if path else StdoutSink(warn)
    from cgstat.outputs import table  # only when asked

    if fmt == "table":
        return table.TableFileSink(path, mode, warn) if path else table.TableStdoutSink(warn)
    if fmt == "csv":
        return table.CsvFileSink(path, mode, warn) if path else table.CsvStdoutSink(warn)
    raise ValueError(f"unknown format {fmt!r} ({', '.join(FORMATS)})")
