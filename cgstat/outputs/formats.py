"""The output formats of `once` and `stream` (`--format`): a registry of sink makers.

Each format is one `register`ed maker of a Sink (pipeline/sinks.py) on a path, or on stdout
when there is none: JSON lines (the default), a docker-stats-like table, CSV, and the HTML
report written when the run ends. A maker imports its sink's module when it is called: the
CLI reads FORMATS for --help without loading any of them. `make_sink` puts a sink that can
block (stdout into a pipe, a socket or a terminal) behind a QueuedSink (its own thread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, Optional

if TYPE_CHECKING:  # the sinks are imported when one is made
    from cgstat.pipeline.sinks import Sink

Warn = Callable[[str, str], None]
# (path or None for stdout, mode of a file created, the diagnostics channel's warn) -> Sink
Maker = Callable[[Optional[str], int, Optional[Warn]], "Sink"]

_MAKERS: Dict[str, Maker] = {}


def register(name: str) -> Callable[[Maker], Maker]:
    """Make `name` a --format, made by the function decorated."""

    def add(maker: Maker) -> Maker:
        _MAKERS[name] = maker
        return maker

    return add


@register("jsonl")
def _jsonl(path: Optional[str], mode: int, warn: Optional[Warn]) -> Sink:
    from cgstat.outputs.jsonl import FileSink, StdoutSink

    return FileSink(path, mode, warn) if path else StdoutSink(warn)


@register("table")
def _table(path: Optional[str], mode: int, warn: Optional[Warn]) -> Sink:
    from cgstat.outputs import table

    return table.TableFileSink(path, mode, warn) if path else table.TableStdoutSink(warn)


@register("csv")
def _csv(path: Optional[str], mode: int, warn: Optional[Warn]) -> Sink:
    from cgstat.outputs import table

    return table.CsvFileSink(path, mode, warn) if path else table.CsvStdoutSink(warn)


@register("html")
def _html(path: Optional[str], mode: int, warn: Optional[Warn]) -> Sink:
    from cgstat.errors import CgstatError
    from cgstat.outputs.report.sink import ReportSink

    if not path:
        raise CgstatError("--format html writes a file: give it with --output")
    return ReportSink(path, warn)


FORMATS = tuple(_MAKERS)


def make_sink(fmt: str, path: Optional[str], mode: int = 0o600, warn: Optional[Warn] = None,
              queue: bool = False) -> Sink:
    """The sink for `--format FMT` on `path`, or on stdout when there is none. `queue`: one
    that can block (stdout a pipe, a socket or a terminal) is written from its own thread
    (a stream's ticks must not wait for a reader; a one-shot run may)."""
    maker = _MAKERS.get(fmt)
    if maker is None:
        raise ValueError(f"unknown format {fmt!r} ({', '.join(FORMATS)})")
    sink = maker(path, mode, warn)
    if queue:
        from cgstat.pipeline.sinks import ChunkSink

        if isinstance(sink, ChunkSink) and sink.may_block():
            from cgstat.outputs.queued import QueuedSink

            return QueuedSink(sink, warn)
    return sink
