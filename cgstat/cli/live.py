"""The commands that sample the host: stream, serve, once, top, pid, procs, record. Each
parses its options and calls its run mode in cgstat/app/ (imported when it runs: --help
and a usage error load no sampler)."""

from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

import typer

from cgstat.cli.options import (Annotated, All, Common, Count, DisableMetrics, EventsWindow, Format, FullRead, GpuIdleMemory,
                                    GpuIdleWindow, HostRoot, Interval, LabelAllow, Listen, LogState, Match,
                                    MaxSeries, MaxSize, MaxUser, Metrics, NoEvents, OomKills, Output, OutputMode, Pids,
                                    Processes, ProcessesBy, Retain, ServeListen, Sort, Store, WebConfig, Window,
                                    converter, needs, option, commands, group_list, takes_sinks, when)
from cgstat.cli.run import Command, history, pattern_of, run, store_of
from cgstat.outputs import values
from cgstat.outputs import DEFAULT_LISTEN
from cgstat.outputs.values import MAX_WINDOW_S, MIN_INTERVAL_S

if TYPE_CHECKING:
    from cgstat.pipeline.sampler import Sampler


def _sampler(ctx: typer.Context, host_root: Optional[str], all_: bool, match: Optional[str],
             max_user: Optional[int] = None, follow: bool = True, full_read: bool = False) -> Callable[[], "Sampler"]:
    """The Sampler for the common options, given before the command or after it (after wins)."""
    def make() -> "Sampler":
        from cgstat.app.sampler import open_sampler
        from cgstat.naming.runtimes.daemons import DaemonConfig

        common = ctx.obj or Common()
        return open_sampler(host_root or common.host_root or "/", all_ or common.all_, pattern_of(ctx, match),
                            max_user or common.max_user or 1000, follow=follow,
                            daemons=DaemonConfig(common.docker_root, common.docker_host), full_read=full_read)
    return make


def _budget(metrics: Optional[str], disable: Optional[str], max_series: int) -> Any:
    """The exporter's and the push's series budget from the options (a SeriesBudget)."""
    from cgstat.outputs.prometheus.budget import SeriesBudget, groups_off

    return SeriesBudget(max_series, groups_off(group_list(metrics), group_list(disable)))


@commands.command(cls=Command, short_help="Print a batch of records every interval, until stopped.")
@takes_sinks
def stream(
    ctx: typer.Context,
    interval: Interval = 1.0,
    count: Count = None,
    output: Annotated[Optional[str], option(
        "-o", "--output", envvar="CGSTAT_OUTPUT", metavar="FILE", parse=values.not_empty,
        help="Append to FILE instead of stdout; SIGHUP reopens it (logrotate). A FILE that can't be opened at "
             "start is exit status 1.")] = None,
    output_mode: OutputMode = 0o600,
    fmt: Format = "jsonl",
    no_events: NoEvents = False,
    events_window: EventsWindow = 60.0,
    listen: Listen = None,
    label_allow: LabelAllow = None,
    web_config_file: WebConfig = None,
    gpu_idle_memory: GpuIdleMemory = 1 << 30,
    gpu_idle_window: GpuIdleWindow = 900.0,
    metrics: Metrics = None,
    disable_metrics: DisableMetrics = None,
    max_series: MaxSeries = 100000,
    oom_kills: OomKills = "all",
    log_state: LogState = None,
    full_read: FullRead = False,
    host_root: HostRoot = None,
    all_: All = False,
    match: Match = None,
    max_user: MaxUser = None,
    processes: Processes = 0,
    processes_by: ProcessesBy = "pss",
    added: Dict[str, Any] = {},
) -> None:
    """Stream a batch of records every interval; the first batch comes after one interval,
    with rates. SIGTERM/SIGINT finish the line being written and exit 0."""
    if web_config_file and not listen:
        raise typer.BadParameter("guards /metrics: give --listen too", param_hint="--web-config-file")
    exporting = bool(listen or added.get("otlp_endpoint"))
    for name in ("label_allow", "metrics", "disable_metrics", "max_series"):
        needs(ctx, name, exporting, "shapes /metrics and the OTLP push: give --listen or --otlp-endpoint too")
    needs(ctx, "processes_by", bool(processes), "orders --processes: give --processes N too")

    def job(sampler: "Sampler") -> int:
        from cgstat.app.stream import stream

        sampler.kills_outside_shown = oom_kills == "all"
        if processes:
            sampler.watch_processes(processes, processes_by)
        # the budget is the endpoint's and the push's alone: without them the field table isn't loaded
        budget = _budget(metrics, disable_metrics, max_series) if listen or added.get("otlp_endpoint") else None
        return stream(sampler, interval, count, fmt, output, output_mode, None if no_events else events_window,
                      listen, added, gpu_idle_memory_bytes=gpu_idle_memory, gpu_idle_window_s=gpu_idle_window,
                      log_state=log_state, budget=budget, label_allow=label_allow, web_config=web_config_file)

    run(_sampler(ctx, host_root, all_, match, max_user, full_read=full_read), job)


@commands.command(cls=Command, short_help="Serve Prometheus metrics on /metrics, until stopped.")
@takes_sinks
def serve(
    ctx: typer.Context,
    listen: ServeListen = DEFAULT_LISTEN,
    interval: Interval = 1.0,
    count: Count = None,
    label_allow: LabelAllow = None,
    web_config_file: WebConfig = None,
    gpu_idle_memory: GpuIdleMemory = 1 << 30,
    log_state: LogState = None,
    metrics: Metrics = None,
    disable_metrics: DisableMetrics = None,
    max_series: MaxSeries = 100000,
    full_read: FullRead = False,
    host_root: HostRoot = None,
    all_: All = False,
    match: Match = None,
    max_user: MaxUser = None,
    added: Dict[str, Any] = {},
) -> None:
    """Serve cAdvisor-compatible Prometheus metrics (text 0.0.4 or OpenMetrics) on /metrics.

    Sampling runs on its own schedule; a scrape gets the latest tick's exposition and never
    waits for a read. SIGTERM/SIGINT exit 0."""
    def job(sampler: "Sampler") -> int:
        from cgstat.app.stream import serve

        return serve(sampler, listen, interval, count, added, gpu_idle_memory_bytes=gpu_idle_memory,
                     log_state=log_state, budget=_budget(metrics, disable_metrics, max_series),
                     label_allow=label_allow, web_config=web_config_file)

    run(_sampler(ctx, host_root, all_, match, max_user, full_read=full_read), job)


@commands.command(cls=Command, short_help="Print one batch of records and exit (for cron and scripts).")
def once(
    ctx: typer.Context,
    state: Annotated[Optional[str], option(
        "--state", metavar="FILE", parse=values.not_empty,
        help="Compute rates against the counters saved in FILE by the previous run, then save this run's (for "
             "cron). FILE must be missing, empty or cgstat's own state; anything else is refused.")] = None,
    window: Window = 1.0,
    output: Output = None,
    output_mode: OutputMode = 0o600,
    fmt: Format = "jsonl",
    no_events: Annotated[bool, typer.Option(
        "--no-events", help="With --state: no events judged between the two runs.")] = False,
    oom_kills: OomKills = "all",
    full_read: FullRead = False,
    host_root: HostRoot = None,
    all_: All = False,
    match: Match = None,
    max_user: MaxUser = None,
) -> None:
    """Print one batch of records and exit (for cron and scripts)."""
    def job(sampler: "Sampler") -> int:
        from cgstat.app.once import once

        sampler.kills_outside_shown = oom_kills == "all"
        return once(sampler, fmt, output, output_mode, state, window, not no_events)

    # one reading with --state: nothing to compare a change signal with
    run(_sampler(ctx, host_root, all_, match, max_user, follow=False, full_read=full_read or state is not None), job)


@commands.command(cls=Command, short_help="Show a live table of the workloads, like docker stats.")
def top(
    ctx: typer.Context,
    interval: Interval = 1.0,
    sort: Sort = "cpu",
    count: Annotated[Optional[int], option("--count", metavar="N", parse=values.whole_number(1), show_default=False,
                                           help="Stop after N screens (default: until q).")] = None,
    no_events: Annotated[bool, typer.Option("--no-events", help="Don't mark workloads with open events.")] = False,
    events_window: EventsWindow = 60.0,
    at: Annotated[Optional[str], option(
        "--at", metavar="TIME", parse=when, show_default=False,
        help="The past, from the store: the tick at TIME; left and right arrows step a tick, [ and ] a minute.")
    ] = None,
    store: Store = None,
    host_root: HostRoot = None,
    all_: All = False,
    match: Match = None,
    max_user: MaxUser = None,
) -> None:
    """A live table of the workloads, like docker stats, with GPU and events; q quits.

    Not on a terminal, it prints a plain table every interval (with --at: once)."""
    if at is not None:
        pattern = pattern_of(ctx, match)

        def replay_job(warn: Callable[[str, str], None]) -> int:
            from cgstat.app.history import top_at

            return top_at(store_of(store), at, sort, warn, pattern)

        history(replay_job)

    def job(sampler: "Sampler") -> int:
        from cgstat.app.top import top

        return top(sampler, interval, sort, count, None if no_events else events_window)

    run(_sampler(ctx, host_root, all_, match, max_user), job)


@commands.command(cls=Command, short_help="Say which cgroup and container each process is in.",
                  context_settings={"ignore_unknown_options": True})  # -5 is a PID (a bad one)
def pid(ctx: typer.Context, pids: Pids, host_root: HostRoot = None) -> None:
    """Print, for each PID, one JSON object: its cgroup path(s) and container.

    A PID with no process prints {"pid": N, "error": "no such process", ...}; exit 0."""
    def job(sampler: "Sampler") -> int:
        from cgstat.app.pid import run_pid

        return run_pid(sampler, pids)

    run(_sampler(ctx, host_root, False, None, follow=False), job)


@commands.command(cls=Command, short_help="List a workload's processes: PSS, USS, CPU, GPU, as a tree.")
def procs(
    ctx: typer.Context,
    workload: Annotated[Optional[str], typer.Argument(
        metavar="[WORKLOAD]", show_default=False, parser=converter(values.not_empty),
        help="A container name or ID prefix, a unit, a pod or a cgroup path (default: every workload shown).")] = None,
    fmt: Annotated[str, option("--format", metavar="FMT", parse=values.one_of("table", "jsonl", "csv"),
                                help="table (a tree per workload), jsonl (one object per workload) or csv.")
                   ] = "table",
    window: Annotated[float, option(
        "--window", metavar="S", parse=values.seconds(MIN_INTERVAL_S, MAX_WINDOW_S, zero_ok=True),
        help=f"Seconds over which CPU % is measured (0: none, no wait; else {MIN_INTERVAL_S:g} to "
             f"{MAX_WINDOW_S:g}).")] = 1.0,
    host_root: HostRoot = None,
    all_: All = False,
    match: Match = None,
    max_user: MaxUser = None,
) -> None:
    """Each process of a workload: host PID and the PID its namespace gives it, CPU, RSS, PSS
    (shared pages split among their users: the PSS of a workload's processes adds up to what
    they hold), USS (what exiting would free), swap, open files and GPU memory, as a fork tree
    with each tree's total. docs/processes.md says which figure answers which question."""
    def job(sampler: "Sampler") -> int:
        from cgstat.app.procs import run_procs

        return run_procs(sampler, workload, fmt, window)

    run(_sampler(ctx, host_root, all_, match, max_user, follow=False), job)


@commands.command(cls=Command, short_help="Keep every tick in a local store, until stopped.")
def record(
    ctx: typer.Context,
    store: Store = None,
    retain: Retain = 7 * 86400.0,
    max_size: MaxSize = 2 << 30,
    interval: Interval = 1.0,
    count: Count = None,
    no_events: Annotated[bool, typer.Option("--no-events", help="No diagnostics events in the store.")] = False,
    events_window: EventsWindow = 60.0,
    oom_kills: OomKills = "all",
    full_read: FullRead = False,
    host_root: HostRoot = None,
    all_: All = False,
    match: Match = None,
    max_user: MaxUser = None,
    processes: Processes = 0,
    processes_by: ProcessesBy = "pss",
) -> None:
    """Keep every tick's records (what stream writes, events included) in a compressed,
    time-indexed store of hourly shards, read back by replay, dump, events, top --at and
    report --since. SIGTERM/SIGINT finish the tick being written and exit 0."""
    needs(ctx, "processes_by", bool(processes), "orders --processes: give --processes N too")

    def job(sampler: "Sampler") -> int:
        from cgstat.app.record import record as run_record

        sampler.kills_outside_shown = oom_kills == "all"
        if processes:
            sampler.watch_processes(processes, processes_by)
        return run_record(sampler, store_of(store), retain, max_size, interval, count,
                          None if no_events else events_window)

    run(_sampler(ctx, host_root, all_, match, max_user, full_read=full_read), job)
