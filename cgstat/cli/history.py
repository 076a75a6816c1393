"""The commands that read what was recorded: report, replay, dump, events, story. Each
parses its options and calls its reader in cgstat/app/ (history.py, report.py, story.py)."""

from typing import Optional

import typer

from cgstat.cli.options import TIME_HELP, Annotated, Match, OutputMode, Store, Until, Utc, commands, converter, option, when
from cgstat.cli.run import Command, Warn, history, pattern_of, run, store_of
from cgstat.diagnostics import say
from cgstat.outputs import values

_TABLES = values.one_of("jsonl", "csv", "table")


@commands.command(cls=Command, short_help="Write an HTML report of a recorded stream.")
def report(
    stream_file: Annotated[Optional[str], typer.Argument(
        metavar="[STREAM]", show_default=False,
        help="A file written by cgstat stream (.gz accepted); or --since and --until, from the store.")] = None,
    out: Annotated[str, option("-o", "--output", metavar="FILE", parse=values.not_empty, show_default=False,
                               help="Where to write the self-contained HTML report.")] = ...,  # type: ignore[assignment]
    title: Annotated[Optional[str], typer.Option("--title", metavar="TEXT", show_default=False,
                                                 help="The report's title (default: the host).")] = None,
    points: Annotated[int, option("--points", metavar="N", parse=values.whole_number(50, 5000),
                                  help="Points per chart at most, 50 to 5000 (longer streams are downsampled).")
                      ] = 500,
    since: Annotated[Optional[str], option("--since", metavar="TIME", parse=when, show_default=False,
                                           help=f"Instead of STREAM, the store's ticks from TIME: {TIME_HELP}.")
                     ] = None,
    until: Annotated[Optional[str], option("--until", metavar="TIME", parse=when, show_default=False,
                                           help="With --since: to TIME (default: now).")] = None,
    store: Store = None,
) -> None:
    """Write a self-contained HTML report of a recorded stream (or of a span of the store):
    per-workload charts of CPU, memory, IO and GPU against their limits, events marked, and
    a summary table."""
    if (stream_file is None) == (since is None):
        raise typer.BadParameter("give a STREAM file or --since (the store), one of them", param_hint="'STREAM'")
    if since is not None:
        def job(warn: Warn) -> int:
            from cgstat.app.history import report as store_report

            folder = store_of(store)
            code = store_report(folder, since, until, out, title, points, warn)
            say(f"wrote the report of {folder} from {since} to {until or 'now'} to {out}")
            return code

        history(job)

    def write(_: None) -> int:
        from cgstat.app.report import report as write_report

        assert stream_file is not None
        write_report(stream_file, out, title=title, points=points)
        return 0

    run(lambda: None, write)


@commands.command(cls=Command, short_help="Print the records of a past tick, from the store.")
def replay(
    ctx: typer.Context,
    at: Annotated[str, option("--at", metavar="TIME", parse=when, show_default=False,
                              help=f"The tick at or just before TIME: {TIME_HELP}.")] = ...,  # type: ignore[assignment]
    fmt: Annotated[str, option("--format", metavar="FMT", parse=_TABLES,
                               help="jsonl (as stream wrote it), csv, or table (the time on every row).")] = "jsonl",
    store: Store = None,
    output: Annotated[Optional[str], option("-o", "--output", metavar="FILE", parse=values.not_empty,
                                            help="Append to FILE instead of stdout.")] = None,
    match: Match = None,
    utc: Utc = False,
) -> None:
    """Print the records of the tick at TIME exactly as stream wrote them (the last tick at
    or before it); a time the store has no tick for says what the store holds (exit 1)."""
    pattern = pattern_of(ctx, match)

    def job(warn: Warn) -> int:
        from cgstat.app.history import replay as run_replay

        return run_replay(store_of(store), at, pattern, warn, output, fmt, utc)

    history(job)


@commands.command(cls=Command, short_help="Print the records of a span of time, from the store.")
def dump(
    ctx: typer.Context,
    since: Annotated[str, option("--since", metavar="TIME", parse=when, show_default=False,
                                 help=f"The first tick: {TIME_HELP}.")] = ...,  # type: ignore[assignment]
    until: Annotated[Optional[str], option("--until", metavar="TIME", parse=when, show_default=False,
                                           help="The last tick (default: now).")] = None,
    fmt: Annotated[str, option(
        "--format", metavar="FMT", parse=values.one_of("jsonl", "csv", "table", "openmetrics"),
        help="jsonl (as stream wrote it), csv, table (the time on every row; events and exit records in tables "
             "of their own), or openmetrics (one exposition, every sample stamped, for promtool tsdb "
             "create-blocks-from openmetrics).")] = "jsonl",
    store: Store = None,
    output: Annotated[Optional[str], option("-o", "--output", metavar="FILE", parse=values.not_empty,
                                            help="Append to FILE instead of stdout.")] = None,
    output_mode: OutputMode = 0o600,
    match: Match = None,
    utc: Utc = False,
) -> None:
    """Print every tick from --since to --until, in the order recorded: the workloads'
    records, the events and the exit records (`type: "exit"`, one per workload that ended)."""
    pattern = pattern_of(ctx, match)

    def job(warn: Warn) -> int:
        from cgstat.app.history import dump as run_dump

        return run_dump(store_of(store), since, until, fmt, pattern, warn, output, output_mode, utc)

    history(job)


@commands.command(cls=Command, short_help="List the events of a span of time, from the store.")
def events(
    ctx: typer.Context,
    since: Annotated[str, option("--since", metavar="TIME", parse=when, help=f"From: {TIME_HELP}.")] = "1h ago",
    until: Until = None,
    fmt: Annotated[str, option("--format", metavar="FMT", parse=_TABLES,
                               help="jsonl, table (the events in one table, the exit records in another) or csv.")
                   ] = "jsonl",
    store: Store = None,
    match: Match = None,
    utc: Utc = False,
) -> None:
    """Print the events of a span in the order they were raised, and the exit records
    (`type: "exit"`: a workload's lifetime totals and how it ended, once, when it is gone)."""
    pattern = pattern_of(ctx, match)

    def job(warn: Warn) -> int:
        from cgstat.app.history import events as run_events

        return run_events(store_of(store), since, until, pattern, warn, fmt, utc=utc)

    history(job)


@commands.command(cls=Command, short_help="Tell one workload's life: how it ended, its peaks, events, totals.")
def story(
    workload: Annotated[str, typer.Argument(
        metavar="WORKLOAD", parser=converter(values.not_empty), help="A container's name or ID prefix, a unit, a pod (name or namespace/name) or a "
                                 "cgroup path (or its last folder).")],
    since: Annotated[Optional[str], option("--since", metavar="TIME", parse=when, show_default=False,
                                           help=f"Read from (default: all the store, or the file, holds): {TIME_HELP}.")] = None,
    until: Annotated[Optional[str], option("--until", metavar="TIME", parse=when, show_default=False,
                                           help="Read to (default: now).")] = None,
    file: Annotated[Optional[str], option("--file", metavar="FILE", parse=values.not_empty,
                                          help="Read a stream's JSON lines (.gz too) instead of the store.")] = None,
    fmt: Annotated[str, option("--format", metavar="FMT", parse=values.one_of("text", "json"),
                               help="text (for a person) or json (one object, for tools).")] = "text",
    store: Store = None,
    utc: Utc = False,
) -> None:
    """Tell one workload's life from the store (or a stream file): a first line saying how
    it ended ("OOM-killed at 03:12:07 at its 16 GiB limit after growing 1.2 GiB an hour for
    6 h"), then when it was seen, its limits, the kernel's peaks and counts (sampled figures
    said as sampled), CPU and throttling, pressure, GPU, IO, each event with its time and its
    exit record's totals. Several workloads matching are listed (exit 1): name one by its
    cgroup path, or narrow the span."""

    def job(warn: Warn) -> int:
        from cgstat.app.story import story as tell

        return tell(workload, store_of(store), file, since, until, fmt, utc, warn)

    history(job)
