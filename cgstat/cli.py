"""The command line: typer commands and the checks of their values; each command calls
its run mode in cgstat/app/.

Exit status: 0 success (also when the reader of a pipe goes away), 2 bad usage (typer's
one-line "Invalid value" message), 1 an expected failure with a one-line reason.
"""

from __future__ import annotations

import copy
import math
import sys
from typing import Any, Callable, Dict, List, Optional, Type

import typer
import typer.core
import typer.main

try:  # typer 0.2x vendors its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer (Python 3.7 to 3.9) uses click itself
    from click import exceptions as click_errors  # type: ignore
# Ctrl-C at a prompt: click's Abort, typer's own in typer 0.2x
_ABORT: Type[BaseException] = (getattr(click_errors, "Abort", None) or getattr(typer, "Abort", None)
                               or KeyboardInterrupt)

from typing import TYPE_CHECKING

from cgstat import __version__
from cgstat.errors import CgstatError
from cgstat.outputs import DEFAULT_LISTEN
from cgstat.outputs.formats import FORMATS
from cgstat.diagnostics import say

# The run modes are imported by the command that runs them, so that --help, --version,
# report and a usage error don't load the sampler (cron start-up).
if TYPE_CHECKING:
    from typing import Pattern

    from cgstat.pipeline.sampler import Sampler

_HELP = """Per-container CPU, memory, block IO, network, pids, pressure and GPU, read straight
from the kernel's cgroup files (v1, v2 and hybrid) and NVML, as JSON lines: one object per
cgroup per tick (and one per GPU), plus events.

By default cgstat reports containers, Kubernetes pods and systemd services/scopes (on a
host with none, the root cgroup and its children); --all reports every cgroup.
--host-root, --all and --match may come before or after the command; --docker-data-root
and --docker-host come before it.
"""

# Bounds of the time options. Below 0.1 s a rate is noise, not a measurement: CFS enforces
# a CPU quota per period (100 ms by default), so a 0.5-core cgroup runs at full speed for
# part of every period, and a 1 ms window read a 0.5-core burner at 195 %.
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 86400.0
MAX_WINDOW_S = 3600.0
# PID_MAX_LIMIT on 64-bit kernels (include/linux/threads.h): no PID is larger.
MAX_PID = 4194304

# Plain-text help and errors: they end up in journals, cron mail and pipes, and importing
# rich would double the start-up time of a cron one-shot.
if hasattr(typer.core, "HAS_RICH"):
    typer.core.HAS_RICH = False

# -h as well as --help, on every command (click hands its context settings down)
_CONTEXT = {"help_option_names": ["-h", "--help"]}
try:
    app = typer.Typer(add_completion=False, no_args_is_help=True, help=_HELP, context_settings=_CONTEXT,
                      pretty_exceptions_enable=False)
except TypeError:  # typer < 0.6 on old Pythons has no pretty exceptions to turn off
    app = typer.Typer(add_completion=False, no_args_is_help=True, help=_HELP, context_settings=_CONTEXT)


class _Command(typer.core.TyperCommand):
    """A command whose usage line writes an argument as its help does (`PID...`): typer
    0.2x puts a required one in braces (`{PID}`), older typer doesn't."""

    def collect_usage_pieces(self, ctx: typer.Context) -> List[str]:  # type: ignore[override]
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p
                for p in super().collect_usage_pieces(ctx)]


def _name(info: Any) -> str:
    """A registered command's name, as typer derives it (get_command_name)."""
    return info.name or info.callback.__name__.lower().replace("_", "-")


class _Group(typer.core.TyperGroup):
    """The commands' click objects, each made when it is first asked for: typer inspects
    every parameter of a command it makes (signatures, annotations, defaults), which for
    all of them is a cron `once` run's largest cost after the imports, where a run uses
    one. --help and an unknown command's suggestions ask for all of them."""

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:  # type: ignore[override]
        if cmd_name not in self.commands:
            infos = [i for i in app.registered_commands if _name(i) == cmd_name]
            self._make(infos or app.registered_commands)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: typer.Context) -> List[str]:  # type: ignore[override]
        self._make(app.registered_commands)
        return super().list_commands(ctx)

    def _make(self, infos: List[Any]) -> None:
        made = dict(self.commands)
        for info in infos:
            if _name(info) not in made:
                if getattr(info.callback, "takes_sinks", False):
                    _add_sink_options(info.callback)
                one = typer.Typer(add_completion=False)  # a lone command: typer makes just that
                one.registered_commands = [info]
                made[_name(info)] = typer.main.get_command(one)
        # in the order they were declared, as typer lists them
        self.commands = {n: made[n] for n in (_name(i) for i in app.registered_commands) if n in made}


def _host_root_option() -> Optional[str]:
    return typer.Option(None, "--host-root", envvar="CGSTAT_HOST_ROOT", metavar="DIR", show_default=False,
                        help="Read /sys, /proc and /var under DIR (the host's / mounted in a container, "
                             "or a recorded tree). Default: /.")


def _all_option() -> bool:
    return typer.Option(False, "--all", help="Report every cgroup, not only workloads.")


def _max_user_option() -> Optional[int]:
    return typer.Option(None, "--max-user-cgroups", envvar="CGSTAT_MAX_USER_CGROUPS", metavar="N",
                        parser=_whole_number(1), show_default=False,
                        help="At most N cgroups per user's delegated subtree (user@UID.service); the "
                             "rest are counted and said once on stderr. Default: 1000.")


def _full_read_option() -> bool:
    return typer.Option(False, "--full-read", envvar="CGSTAT_FULL_READ",
                        help="Read every file of every cgroup every tick. By default a cgroup whose CPU, "
                             "memory and task counts stand still keeps its other figures from its last "
                             "full read, at most 10 s old (docs/reading.md).")


def _docker_root_option() -> Optional[str]:
    return typer.Option(None, "--docker-data-root", envvar="CGSTAT_DOCKER_DATA_ROOT", metavar="DIR",
                        show_default=False, callback=_absolute,
                        help="dockerd's data root (its --data-root), a host path, for container names. "
                             "Default: found from /etc/docker/daemon.json and the running dockerd's "
                             "command line, else /var/lib/docker.")


def _docker_host_option() -> Optional[str]:
    return typer.Option(None, "--docker-host", envvar="DOCKER_HOST", metavar="URL", show_default=False,
                        callback=_not_empty,
                        help="The Docker API socket (unix:///path), asked for the names of containers "
                             "whose state can't be read. Default: /var/run/docker.sock, daemon.json "
                             "\"hosts\" and the running dockerd's -H.")


def _absolute(value: Optional[str]) -> Optional[str]:
    if value is not None and not value.startswith("/"):
        raise typer.BadParameter(f"{value!r} is not an absolute path")
    return value


def _match_option() -> Optional[str]:
    return typer.Option(None, "--match", metavar="REGEX",
                        help="Report every cgroup whose path matches REGEX (Python re.search).")


def _oom_kills(value: str) -> str:
    if value not in ("all", "shown"):
        raise typer.BadParameter(f"{value!r} is not one of all, shown")
    return value


def _oom_kills_option() -> str:
    return typer.Option("all", "--oom-kills", metavar="all|shown", callback=_oom_kills,
                        help="all: an event for every OOM kill the kernel log reports, whatever its cgroup; "
                             "shown: only for the cgroups the records show.")


def _seconds(value: float, low: float, high: float, zero_ok: bool = False) -> float:
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a number of seconds")
    if zero_ok and value == 0:
        return value
    if not low <= value <= high:
        lowest = f"0 or {low:g}" if zero_ok else f"{low:g}"
        raise typer.BadParameter(f"{value:g} is out of range: from {lowest} to {high:g} seconds")
    return value


def _interval(value: float) -> float:
    return _seconds(value, MIN_INTERVAL_S, MAX_INTERVAL_S)


def _window(value: float) -> float:
    return _seconds(value, MIN_INTERVAL_S, MAX_WINDOW_S, zero_ok=True)


def _not_empty(value: Optional[str]) -> Optional[str]:
    if value is not None and not value:
        raise typer.BadParameter("must not be empty")
    return value


def _whole_number(low: int, high: Optional[int] = None) -> Callable[[object], int]:
    """The parser of a count: click's own says "'1e3' is not a valid int range"."""
    def whole_number(value: object) -> int:
        if isinstance(value, int):
            number = value
        else:
            try:
                number = int(str(value))
            except ValueError:
                raise typer.BadParameter(f"{value!r} is not a whole number") from None
        if number < low or (high is not None and number > high):
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise typer.BadParameter(f"{number} is out of range: {bounds}")
        return number
    return whole_number


def _mode(value: str) -> str:
    try:
        mode = int(value, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise typer.BadParameter(f"{value!r} is not an octal file mode such as 600 or 640")
    # The file holds records, never a program; and other users must not be able to write
    # lines into what root reads back (a report, a log shipper).
    if mode & 0o111:
        raise typer.BadParameter(f"{value!r} has execute bits: the file holds records, not a program "
                                 "(600 or 640, say)")
    if mode & 0o002:
        raise typer.BadParameter(f"{value!r} lets every user write into the file (600 or 640, say)")
    return value


def _listen(value: Optional[str]) -> Optional[str]:
    """--listen checked before anything starts: a bad address is a usage error (exit 2)."""
    if value is None:
        return None
    from cgstat.outputs.prometheus.http import parse_listen  # only where --listen is given or served

    try:
        parse_listen(_not_empty(value) or "")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def _groups(value: Optional[str]) -> Optional[str]:
    """--metrics / --disable-metrics checked before anything starts (exit 2 on a group not known)."""
    if value is None:
        return None
    from cgstat.outputs.prometheus.budget import groups_off

    try:
        groups_off(_group_list(value), None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def _group_list(value: Optional[str]) -> Optional[List[str]]:
    return None if value is None else [g.strip() for g in value.split(",") if g.strip()]


def _metrics_option() -> Optional[str]:
    return typer.Option(None, "--metrics", metavar="GROUPS", callback=_groups,
                        help="Serve (and push over OTLP) only these metric groups, comma-separated "
                             "(docs/prometheus.md lists them; default: all but procs); +GROUP: the default "
                             "ones and GROUP (--metrics +procs with --processes N).")


def _disable_metrics_option() -> Optional[str]:
    return typer.Option(None, "--disable-metrics", metavar="GROUPS", callback=_groups,
                        help="Serve (and push) every metric group but these, comma-separated (e.g. dcgm,diskIO).")


def _max_series_option() -> int:
    return typer.Option(DEFAULT_MAX_SERIES, "--max-series", metavar="N", parser=_whole_number(0),
                        help="Past N series (the OTLP push: N data points), the least-used cgroups' series are "
                             "summed into id=\"_other\" (OTLP: cgstat.cgroup=\"_other\"); 0: no limit.")


DEFAULT_MAX_SERIES = 100000  # ~2x what 1,000 containers make (docs/prometheus.md, the series budget)


def _budget(metrics: Optional[str], disable: Optional[str], max_series: int) -> Any:
    """The exporter's series budget from the options (a SeriesBudget)."""
    from cgstat.outputs.prometheus.budget import SeriesBudget, groups_off

    return SeriesBudget(max_series, groups_off(_group_list(metrics), _group_list(disable)))


def _pid_number(value: object) -> int:
    """A PID argument: `cgstat pid -5` is a bad PID, not an option click doesn't know."""
    try:
        return int(str(value))
    except ValueError:
        if str(value).startswith("-"):
            raise click_errors.NoSuchOption(str(value)) from None
        raise typer.BadParameter(f"{value!r} is not a process ID") from None


def _pids(values: List[int]) -> List[int]:
    for pid in values:
        if not 1 <= pid <= MAX_PID:
            raise typer.BadParameter(f"{pid} is not a process ID (1 to {MAX_PID})")
    return values


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cgstat {__version__}")
        raise typer.Exit(0)


@app.callback(cls=_Group)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    host_root: Optional[str] = _host_root_option(),
    all_: bool = _all_option(),
    match: Optional[str] = _match_option(),
    max_user: Optional[int] = _max_user_option(),
    docker_root: Optional[str] = _docker_root_option(),
    docker_host: Optional[str] = _docker_host_option(),
) -> None:
    ctx.obj = (host_root, all_, match, max_user, docker_root, docker_host)


def _sampler(ctx: typer.Context, host_root: Optional[str], all_: bool, match: Optional[str],
             max_user: Optional[int] = None, follow: bool = True, full_read: bool = False) -> Sampler:
    """The Sampler for the common options, given before the command or after it (after wins)."""
    from cgstat.app.sampler import open_sampler
    from cgstat.pipeline.select import compile_match

    from cgstat.naming.runtimes.daemons import DaemonConfig

    top_root, top_all, top_match, top_max, docker_root, docker_host = ctx.obj or (None, False, None, None, None, None)
    regex = match if match is not None else top_match
    try:
        pattern = compile_match(regex)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--match'") from None
    return open_sampler(host_root or top_root or "/", all_ or top_all, pattern, max_user or top_max or 1000,
                        follow=follow, daemons=DaemonConfig(docker_root, docker_host), full_read=full_read)


def _run(make: Callable[[], Sampler], job: Callable[[Sampler], int]) -> None:
    """Run a command: an expected failure is one line on stderr and exit status 1."""
    try:
        code = job(make())
    except CgstatError as exc:
        say(str(exc))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def _format_option() -> str:
    return typer.Option("jsonl", "--format", metavar="FMT", callback=_format,
                        help="jsonl (one JSON object per line), table (like docker stats), csv, or html (the "
                             "report's page, written to --output at the end).")


def _format(value: str) -> str:
    if value not in FORMATS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(FORMATS)}")
    return value


def _log_state_option() -> Optional[str]:
    return typer.Option(None, "--log-state", envvar="CGSTAT_LOG_STATE", metavar="FILE", callback=_not_empty,
                        help="Keep in FILE where the kernel log was read to: the next run of this boot "
                             "reports the OOM kills logged while none was reading, not those before.")


def _output_option(help: str, envvar: Optional[str] = None) -> Optional[str]:
    return typer.Option(None, "-o", "--output", envvar=envvar, metavar="FILE", callback=_not_empty, help=help)


def _count_option(what: str, until: str) -> Optional[int]:
    return typer.Option(None, "--count", metavar="N", parser=_whole_number(1), show_default=False,
                        help=f"Stop after N {what} (default: {until}).")


def _output_mode_option() -> str:
    return typer.Option("600", "--output-mode", metavar="OCTAL", callback=_mode,
                        help="Permissions of a FILE that --output creates (octal, without execute bits or world write).")


def _converter(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A value parser that raises ValueError, as the parser of an option (its usage error)."""
    def convert(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return convert


def _sinks(command: Callable[..., None]) -> Callable[..., None]:
    """A command that offers every registered sink kind's options (pipeline/sinks.py,
    app/sinks.py): given to it as one mapping, `added` (option key -> value). They are
    added to its parameters when the command is made (not for another command's run)."""
    command.takes_sinks = True  # type: ignore[attr-defined]
    return command


def _add_sink_options(command: Callable[..., None]) -> None:
    import functools
    import inspect

    from cgstat.app.sinks import sink_kinds

    options = [o for kind in sink_kinds() for o in kind.options]
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "added"]
    added = [inspect.Parameter(
        o.key, inspect.Parameter.KEYWORD_ONLY, annotation=List[Any] if o.multiple else Optional[Any],
        default=typer.Option([] if o.multiple else o.default, o.flag, envvar=o.envvar, metavar=o.metavar,
                             parser=_converter(o.parse or str), help=o.help, show_default=o.default is not None))
        for o in options]
    keys = [o.key for o in options]

    @functools.wraps(command)
    def run(**given: Any) -> None:
        command(**{k: v for k, v in given.items() if k not in keys},
                added={k: (tuple(given[k]) if isinstance(given[k], list) else given[k]) for k in keys})

    run.takes_sinks = False  # type: ignore[attr-defined]  # (functools.wraps copied it)
    run.__signature__ = inspect.Signature(own + added)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in own + added}
    for info in app.registered_commands:
        if info.callback is command:
            info.callback = run


class _Guard:
    """Who may read the series (/metrics and the OTLP push): the container labels let through
    and /metrics' TLS and basic auth (one declaration for stream and serve)."""

    @staticmethod
    def label_allow() -> Optional[str]:
        return typer.Option(None, "--label-allow", envvar="CGSTAT_LABEL_ALLOW", metavar="REGEX",
                            callback=_label_allow, show_default=False,
                            help="Container labels whose key matches REGEX (whole key) become series labels in "
                                 "/metrics and the OTLP push; default: none (labels often hold secrets).")

    @staticmethod
    def web_config() -> Optional[str]:
        return typer.Option(None, "--web-config-file", envvar="CGSTAT_WEB_CONFIG_FILE", metavar="FILE",
                            callback=_not_empty, show_default=False,
                            help="TLS and basic auth for /metrics, in Prometheus exporter-toolkit's format "
                                 "(basic auth needs pip install 'cgstat[web]'). See docs/security.md.")


def _label_allow(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    from cgstat.outputs.labelallow import check_pattern

    try:
        return check_pattern(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _events_window(value: float) -> float:
    return _seconds(value, 1.0, MAX_INTERVAL_S)


def _gpu_idle_memory(value: str) -> int:
    from cgstat.units import parse_size

    size = parse_size(value)
    if size is None or size < 1:
        raise typer.BadParameter(f"{value!r} is not a size (e.g. 1GiB, 512M, 1073741824)")
    return size


def _gpu_idle_memory_checked(value: str) -> str:
    _gpu_idle_memory(value)  # a bad size is a usage error before anything starts
    return value


def _gpu_idle_memory_option() -> str:
    return typer.Option("1GiB", "--gpu-idle-memory", metavar="SIZE", callback=_gpu_idle_memory_checked,
                        help="GPU memory a container must hold on one GPU at ~0 % SM to hold it idle "
                             "(gpu_held_idle, cgstat_gpu_held_idle_seconds_total).")


def _gpu_idle_window_option() -> float:
    return typer.Option(900.0, "--gpu-idle-window", metavar="S", callback=_gpu_idle_window,
                        help="Seconds a container must hold a GPU idle before gpu_held_idle is raised.")


def _gpu_idle_window(value: float) -> float:
    return _seconds(value, 1.0, 7 * 86400.0)


# -- the flight recorder: record, replay, dump, events -----------------------------------------

def _store_option() -> str:
    from cgstat.store.folder import default_store

    return typer.Option(default_store(), "--store", envvar="CGSTAT_STORE", metavar="DIR", callback=_not_empty,
                        help="The store's folder (as root /var/lib/cgstat/store, else the user's state folder).")


def _span(value: Optional[str]) -> Optional[float]:
    from cgstat.store.times import parse_span

    if value is None or value in ("0", "none"):
        return None
    try:
        return parse_span(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _size(value: Optional[str]) -> Optional[int]:
    from cgstat.store.times import parse_size

    if value is None or value in ("0", "none"):
        return None
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if size < 1 << 20:
        raise typer.BadParameter(f"{value!r} is less than 1M: a store needs room for a few shards")
    return size


def _retain_option() -> Optional[float]:
    return typer.Option("7d", "--retain", metavar="SPAN", parser=_span,
                        help="Remove shards older than SPAN (N s, min, h or d; none: keep them).")


def _max_size_option() -> Optional[int]:
    return typer.Option("2G", "--max-size", metavar="SIZE", parser=_size,
                        help="Keep the store within SIZE (K, M, G: powers of 1024; none: no bound), "
                             "removing the oldest shards first.")


def _time(value: Optional[str]) -> Optional[str]:
    from cgstat.store.times import parse_time

    if value is not None:
        try:
            parse_time(value, 0.0)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def _dump_format(value: str) -> str:
    if value not in ("jsonl", "csv", "table", "openmetrics"):
        raise typer.BadParameter(f"{value!r} is not one of jsonl, csv, table, openmetrics")
    return value


def _replay_format(value: str) -> str:
    if value not in ("jsonl", "csv", "table"):
        raise typer.BadParameter(f"{value!r} is not one of jsonl, csv, table")
    return value


def _utc_option() -> bool:
    return typer.Option(False, "--utc", help="Times in UTC (default: local time, the zone said).")


_TIME_HELP = ("ISO 8601 (2026-12-02T03:12, local time without an offset), a time of day (03:12), Unix seconds, "
              "or N s/min/h/d ago")


def _history(job: Callable[[Callable[[str, str], None]], int]) -> None:
    """Run a reader of the store: its notices (damage skipped) on stderr, one line each."""
    from cgstat.diagnostics import Warner

    try:
        code = job(Warner().warn)
    except CgstatError as exc:
        say(str(exc))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def _pattern(match: Optional[str], ctx: typer.Context) -> Optional["Pattern[str]"]:
    from cgstat.pipeline.select import compile_match

    regex = match if match is not None else (ctx.obj[2] if ctx.obj else None)
    try:
        return compile_match(regex)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--match'") from None


def _processes_option() -> int:
    return typer.Option(0, "--processes", metavar="N", parser=_whole_number(0, 1000),
                        help="Add each workload's N largest processes (and the trees they are in) to its record "
                             "as `processes`: RSS, PSS, USS, CPU, GPU (docs/processes.md). 0: none, no /proc read.")


def _processes_by_option() -> str:
    return typer.Option("pss", "--processes-by", metavar="KEY", callback=_processes_by,
                        help="With --processes: the largest by pss or by cpu.")


def _processes_by(value: str) -> str:
    if value not in ("pss", "cpu"):
        raise typer.BadParameter(f"{value!r} is not one of pss, cpu")
    return value


@app.command(cls=_Command, short_help="Print a batch of records every interval, until stopped.")
@_sinks
def stream(
    ctx: typer.Context,
    interval: float = typer.Option(1.0, "--interval", envvar="CGSTAT_INTERVAL", metavar="S", callback=_interval,
                                   help=f"Seconds between batches ({MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g})."),
    count: Optional[int] = _count_option("batches", "run until stopped"),
    output: Optional[str] = _output_option("Append to FILE instead of stdout; SIGHUP reopens it (logrotate). "
                                           "A FILE that can't be opened at start is exit status 1.",
                                           envvar="CGSTAT_OUTPUT"),
    output_mode: str = _output_mode_option(),
    fmt: str = _format_option(),
    no_events: bool = typer.Option(False, "--no-events", help="No diagnostics events (type: event) in the stream."),
    events_window: float = typer.Option(60.0, "--events-window", metavar="S", callback=_events_window,
                                        help="Seconds over which sustained conditions must hold to raise an event."),
    listen: Optional[str] = typer.Option(None, "--listen", metavar="ADDR:PORT", callback=_listen,
                                         help="Also serve /metrics (Prometheus) there, from the same ticks."),
    label_allow: Optional[str] = _Guard.label_allow(),
    web_config_file: Optional[str] = _Guard.web_config(),
    gpu_idle_memory: str = _gpu_idle_memory_option(),
    gpu_idle_window: float = _gpu_idle_window_option(),
    metrics: Optional[str] = _metrics_option(),
    disable_metrics: Optional[str] = _disable_metrics_option(),
    max_series: int = _max_series_option(),
    oom_kills: str = _oom_kills_option(),
    log_state: Optional[str] = _log_state_option(),
    full_read: bool = _full_read_option(),
    host_root: Optional[str] = _host_root_option(),
    all_: bool = _all_option(),
    match: Optional[str] = _match_option(),
    max_user: Optional[int] = _max_user_option(),
    processes: int = _processes_option(),
    processes_by: str = _processes_by_option(),
    added: Dict[str, Any] = {},
) -> None:
    """Stream a batch of records every interval; the first batch comes after one interval,
    with rates. SIGTERM/SIGINT finish the line being written and exit 0."""
    if web_config_file and not listen:
        raise typer.BadParameter("guards /metrics: give --listen too", param_hint="--web-config-file")

    def job(sampler: Sampler) -> int:
        from cgstat.app.stream import stream

        sampler.kills_outside_shown = oom_kills == "all"
        if processes:
            sampler.watch_processes(processes, processes_by)
        return stream(sampler, interval, count, fmt, output, int(output_mode, 8),
                      None if no_events else events_window, listen, added,
                      gpu_idle_memory_bytes=_gpu_idle_memory(gpu_idle_memory), gpu_idle_window_s=gpu_idle_window,
                      log_state=log_state,
                      # the endpoint's and the push's alone: without them the field table isn't loaded
                      budget=_budget(metrics, disable_metrics, max_series) if listen or added.get("otlp_endpoint")
                      else None, label_allow=label_allow, web_config=web_config_file)

    _run(lambda: _sampler(ctx, host_root, all_, match, max_user, full_read=full_read), job)


@app.command(cls=_Command, short_help="Serve Prometheus metrics on /metrics, until stopped.")
@_sinks
def serve(
    ctx: typer.Context,
    listen: str = typer.Option(DEFAULT_LISTEN, "--listen", envvar="CGSTAT_LISTEN", metavar="ADDR:PORT",
                               callback=_listen,
                               help="Where to serve /metrics and /healthz (loopback only unless told)."),
    interval: float = typer.Option(1.0, "--interval", envvar="CGSTAT_INTERVAL", metavar="S", callback=_interval,
                                   help=f"Seconds between samples ({MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g})."),
    count: Optional[int] = _count_option("samples", "run until stopped"),
    label_allow: Optional[str] = _Guard.label_allow(),
    web_config_file: Optional[str] = _Guard.web_config(),
    gpu_idle_memory: str = _gpu_idle_memory_option(),
    log_state: Optional[str] = _log_state_option(),
    metrics: Optional[str] = _metrics_option(),
    disable_metrics: Optional[str] = _disable_metrics_option(),
    max_series: int = _max_series_option(),
    full_read: bool = _full_read_option(),
    host_root: Optional[str] = _host_root_option(),
    all_: bool = _all_option(),
    match: Optional[str] = _match_option(),
    max_user: Optional[int] = _max_user_option(),
    added: Dict[str, Any] = {},
) -> None:
    """Serve cAdvisor-compatible Prometheus metrics (text 0.0.4 or OpenMetrics) on /metrics.

    Sampling runs on its own schedule; a scrape gets the latest tick's exposition and never
    waits for a read. SIGTERM/SIGINT exit 0."""
    def job(sampler: Sampler) -> int:
        from cgstat.app.stream import serve

        return serve(sampler, listen, interval, count, added, gpu_idle_memory_bytes=_gpu_idle_memory(gpu_idle_memory),
                     log_state=log_state, budget=_budget(metrics, disable_metrics, max_series),
                     label_allow=label_allow, web_config=web_config_file)

    _run(lambda: _sampler(ctx, host_root, all_, match, max_user, full_read=full_read), job)


@app.command(cls=_Command, short_help="Print one batch of records and exit (for cron and scripts).")
def once(
    ctx: typer.Context,
    state: Optional[str] = typer.Option(None, "--state", metavar="FILE", callback=_not_empty,
                                        help="Compute rates against the counters saved in FILE by the previous "
                                             "run, then save this run's (for cron). FILE must be missing, empty "
                                             "or cgstat's own state; anything else is refused."),
    window: float = typer.Option(1.0, "--window", metavar="S", callback=_window,
                                 help=f"Without --state: seconds between the two samples that give rates "
                                      f"(0: no rates, no wait; else {MIN_INTERVAL_S:g} to {MAX_WINDOW_S:g})."),
    output: Optional[str] = _output_option("Append to FILE instead of stdout, whole lines only."),
    output_mode: str = _output_mode_option(),
    fmt: str = _format_option(),
    no_events: bool = typer.Option(False, "--no-events",
                                   help="With --state: no events judged between the two runs."),
    oom_kills: str = _oom_kills_option(),
    full_read: bool = _full_read_option(),
    host_root: Optional[str] = _host_root_option(),
    all_: bool = _all_option(),
    match: Optional[str] = _match_option(),
    max_user: Optional[int] = _max_user_option(),
) -> None:
    """Print one batch of records and exit (for cron and scripts)."""
    def job(sampler: Sampler) -> int:
        from cgstat.app.once import once

        sampler.kills_outside_shown = oom_kills == "all"
        return once(sampler, fmt, output, int(output_mode, 8), state, window, not no_events)

    # one reading with --state: nothing to compare a change signal with
    _run(lambda: _sampler(ctx, host_root, all_, match, max_user, follow=False,
                          full_read=full_read or state is not None), job)


def _sort(value: str) -> str:
    from cgstat.outputs.top_screen import sort_name

    try:
        return sort_name(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command(cls=_Command, short_help="Show a live table of the workloads, like docker stats.")
def top(
    ctx: typer.Context,
    interval: float = typer.Option(1.0, "--interval", envvar="CGSTAT_INTERVAL", metavar="S", callback=_interval,
                                   help=f"Seconds between screens ({MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g})."),
    sort: str = typer.Option("cpu", "--sort", metavar="KEY", callback=_sort,
                             help="cpu, memory, gpu, io, pids or name (keys c m g i p n while it runs)."),
    count: Optional[int] = _count_option("screens", "until q"),
    no_events: bool = typer.Option(False, "--no-events", help="Don't mark workloads with open events."),
    events_window: float = typer.Option(60.0, "--events-window", metavar="S", callback=_events_window,
                                        help="Seconds over which sustained conditions must hold to raise an event."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME", callback=_time, show_default=False,
                                     help="The past, from the store: the tick at TIME; left and right arrows "
                                          "step a tick, [ and ] a minute."),
    store: str = _store_option(),
    host_root: Optional[str] = _host_root_option(),
    all_: bool = _all_option(),
    match: Optional[str] = _match_option(),
    max_user: Optional[int] = _max_user_option(),
) -> None:
    """A live table of the workloads, like docker stats, with GPU and events; q quits.

    Not on a terminal, it prints a plain table every interval (with --at: once)."""
    if at is not None:
        pattern = _pattern(match, ctx)

        def replay_job(warn: Callable[[str, str], None]) -> int:
            from cgstat.app.history import top_at

            return top_at(store, at, sort, warn, pattern)

        _history(replay_job)

    def job(sampler: Sampler) -> int:
        from cgstat.app.top import top

        return top(sampler, interval, sort, count, None if no_events else events_window)

    _run(lambda: _sampler(ctx, host_root, all_, match, max_user), job)


@app.command(cls=_Command, short_help="Write an HTML report of a recorded stream.")
def report(
    stream_file: Optional[str] = typer.Argument(None, metavar="[STREAM]", show_default=False,
                                                help="A file written by cgstat stream (.gz accepted); "
                                                     "or --since and --until, from the store."),
    out: str = typer.Option(..., "-o", "--output", metavar="FILE", callback=_not_empty, show_default=False,
                            help="Where to write the self-contained HTML report."),
    title: Optional[str] = typer.Option(None, "--title", metavar="TEXT", show_default=False,
                                        help="The report's title (default: the host)."),
    points: int = typer.Option(500, "--points", metavar="N", parser=_whole_number(50, 5000),
                               help="Points per chart at most, 50 to 5000 (longer streams are downsampled)."),
    since: Optional[str] = typer.Option(None, "--since", metavar="TIME", callback=_time, show_default=False,
                                        help=f"Instead of STREAM, the store's ticks from TIME: {_TIME_HELP}."),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME", callback=_time, show_default=False,
                                        help="With --since: to TIME (default: now)."),
    store: str = _store_option(),
) -> None:
    """Write a self-contained HTML report of a recorded stream (or of a span of the store):
    per-workload charts of CPU, memory, IO and GPU against their limits, events marked, and
    a summary table."""
    from cgstat.app.report import report as write_report

    if (stream_file is None) == (since is None):
        raise typer.BadParameter("give a STREAM file or --since (the store), one of them", param_hint="'STREAM'")
    if since is not None:
        def job(warn: Callable[[str, str], None]) -> int:
            from cgstat.app.history import report as store_report

            code = store_report(store, since, until, out, title, points, warn)
            say(f"wrote the report of {store} from {since} to {until or 'now'} to {out}")
            return code

        _history(job)
    assert stream_file is not None
    try:
        write_report(stream_file, out, title=title, points=points)
    except CgstatError as exc:
        say(str(exc))
        raise typer.Exit(1) from None


@app.command(cls=_Command, short_help="Say which cgroup and container each process is in.",
             context_settings={"ignore_unknown_options": True})  # -5 is a PID (a bad one)
def pid(
    ctx: typer.Context,
    pids: List[int] = typer.Argument(..., metavar="PID...", parser=_pid_number, callback=_pids,
                                     show_default=False,
                                     help="One or more process IDs, as the host sees them."),
    host_root: Optional[str] = _host_root_option(),
) -> None:
    """Print, for each PID, one JSON object: its cgroup path(s) and container.

    A PID with no process prints {"pid": N, "error": "no such process", ...}; exit 0."""
    def job(sampler: Sampler) -> int:
        from cgstat.app.pid import run_pid

        return run_pid(sampler, pids)

    _run(lambda: _sampler(ctx, host_root, False, None, follow=False), job)


def _procs_format(value: str) -> str:
    if value not in ("table", "jsonl", "csv"):
        raise typer.BadParameter(f"{value!r} is not one of table, jsonl, csv")
    return value


@app.command(cls=_Command, short_help="List a workload's processes: PSS, USS, CPU, GPU, as a tree.")
def procs(
    ctx: typer.Context,
    workload: Optional[str] = typer.Argument(None, metavar="[WORKLOAD]", show_default=False,
                                             help="A container name or ID prefix, a unit, a pod or a cgroup path "
                                                  "(default: every workload shown)."),
    fmt: str = typer.Option("table", "--format", metavar="FMT", callback=_procs_format,
                            help="table (a tree per workload), jsonl (one object per workload) or csv."),
    window: float = typer.Option(1.0, "--window", metavar="S", callback=_window,
                                 help=f"Seconds over which CPU % is measured (0: none, no wait; else "
                                      f"{MIN_INTERVAL_S:g} to {MAX_WINDOW_S:g})."),
    host_root: Optional[str] = _host_root_option(),
    all_: bool = _all_option(),
    match: Optional[str] = _match_option(),
    max_user: Optional[int] = _max_user_option(),
) -> None:
    """Each process of a workload: host PID and the PID its namespace gives it, CPU, RSS, PSS
    (shared pages split among their users: the PSS of a workload's processes adds up to what
    they hold), USS (what exiting would free), swap, open files and GPU memory, as a fork tree
    with each tree's total. docs/processes.md says which figure answers which question."""
    def job(sampler: Sampler) -> int:
        from cgstat.app.procs import run_procs

        return run_procs(sampler, workload, fmt, window)

    _run(lambda: _sampler(ctx, host_root, all_, match, max_user, follow=False), job)


@app.command(cls=_Command, short_help="Keep every tick in a local store, until stopped.")
def record(
    ctx: typer.Context,
    store: str = _store_option(),
    retain: Optional[float] = _retain_option(),
    max_size: Optional[int] = _max_size_option(),
    interval: float = typer.Option(1.0, "--interval", envvar="CGSTAT_INTERVAL", metavar="S", callback=_interval,
                                   help=f"Seconds between ticks ({MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g})."),
    count: Optional[int] = _count_option("ticks", "run until stopped"),
    no_events: bool = typer.Option(False, "--no-events", help="No diagnostics events in the store."),
    events_window: float = typer.Option(60.0, "--events-window", metavar="S", callback=_events_window,
                                        help="Seconds over which sustained conditions must hold to raise an event."),
    oom_kills: str = _oom_kills_option(),
    full_read: bool = _full_read_option(),
    host_root: Optional[str] = _host_root_option(),
    all_: bool = _all_option(),
    match: Optional[str] = _match_option(),
    max_user: Optional[int] = _max_user_option(),
    processes: int = _processes_option(),
    processes_by: str = _processes_by_option(),
) -> None:
    """Keep every tick's records (what stream writes, events included) in a compressed,
    time-indexed store of hourly shards, read back by replay, dump, events, top --at and
    report --since. SIGTERM/SIGINT finish the tick being written and exit 0."""
    def job(sampler: Sampler) -> int:
        from cgstat.app.record import record as run_record

        sampler.kills_outside_shown = oom_kills == "all"
        if processes:
            sampler.watch_processes(processes, processes_by)
        return run_record(sampler, store, retain, max_size, interval, count,
                          None if no_events else events_window)

    _run(lambda: _sampler(ctx, host_root, all_, match, max_user, full_read=full_read), job)


@app.command(cls=_Command, short_help="Print the records of a past tick, from the store.")
def replay(
    ctx: typer.Context,
    at: str = typer.Option(..., "--at", metavar="TIME", callback=_time, show_default=False,
                           help=f"The tick at or just before TIME: {_TIME_HELP}."),
    fmt: str = typer.Option("jsonl", "--format", metavar="FMT", callback=_replay_format,
                            help="jsonl (as stream wrote it), csv, or table (the time on every row)."),
    store: str = _store_option(),
    output: Optional[str] = _output_option("Append to FILE instead of stdout."),
    match: Optional[str] = _match_option(),
    utc: bool = _utc_option(),
) -> None:
    """Print the records of the tick at TIME exactly as stream wrote them (the last tick at
    or before it); a time the store has no tick for says what the store holds (exit 1)."""
    pattern = _pattern(match, ctx)

    def job(warn: Callable[[str, str], None]) -> int:
        from cgstat.app.history import replay as run_replay

        return run_replay(store, at, pattern, warn, output, fmt, utc)

    _history(job)


@app.command(cls=_Command, short_help="Print the records of a span of time, from the store.")
def dump(
    ctx: typer.Context,
    since: str = typer.Option(..., "--since", metavar="TIME", callback=_time, show_default=False,
                              help=f"The first tick: {_TIME_HELP}."),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME", callback=_time, show_default=False,
                                        help="The last tick (default: now)."),
    fmt: str = typer.Option("jsonl", "--format", metavar="FMT", callback=_dump_format,
                            help="jsonl (as stream wrote it), csv, table (the time on every row; events and "
                                 "exit records in tables of their own), or openmetrics (one exposition, every "
                                 "sample stamped, for promtool tsdb create-blocks-from openmetrics)."),
    store: str = _store_option(),
    output: Optional[str] = _output_option("Append to FILE instead of stdout."),
    output_mode: str = _output_mode_option(),
    match: Optional[str] = _match_option(),
    utc: bool = _utc_option(),
) -> None:
    """Print every tick from --since to --until, in the order recorded: the workloads'
    records, the events and the exit records (`type: "exit"`, one per workload that ended)."""
    pattern = _pattern(match, ctx)

    def job(warn: Callable[[str, str], None]) -> int:
        from cgstat.app.history import dump as run_dump

        return run_dump(store, since, until, fmt, pattern, warn, output, int(output_mode, 8), utc)

    _history(job)


@app.command(cls=_Command, short_help="List the events of a span of time, from the store.")
def events(
    ctx: typer.Context,
    since: str = typer.Option("1h ago", "--since", metavar="TIME", callback=_time,
                              help=f"From: {_TIME_HELP}."),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME", callback=_time, show_default=False,
                                        help="To (default: now)."),
    fmt: str = typer.Option("jsonl", "--format", metavar="FMT", callback=_replay_format,
                            help="jsonl, table (the events in one table, the exit records in another) or csv."),
    store: str = _store_option(),
    match: Optional[str] = _match_option(),
    utc: bool = _utc_option(),
) -> None:
    """Print the events of a span in the order they were raised, and the exit records
    (`type: "exit"`: a workload's lifetime totals and how it ended, once, when it is gone)."""
    pattern = _pattern(match, ctx)

    def job(warn: Callable[[str, str], None]) -> int:
        from cgstat.app.history import events as run_events

        return run_events(store, since, until, pattern, warn, fmt, utc=utc)

    _history(job)


def _story_format(value: str) -> str:
    if value not in ("text", "json"):
        raise typer.BadParameter(f"{value!r} is not one of text, json")
    return value


@app.command(cls=_Command, short_help="Tell one workload's life: how it ended, its peaks, events, totals.")
def story(
    workload: str = typer.Argument(..., metavar="WORKLOAD",
                                   help="A container's name or ID prefix, a unit, a pod (name or namespace/name) "
                                        "or a cgroup path (or its last folder)."),
    since: Optional[str] = typer.Option(None, "--since", metavar="TIME", callback=_time, show_default=False,
                                        help=f"Read from (default: all the store holds): {_TIME_HELP}."),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME", callback=_time, show_default=False,
                                        help="Read to (default: now)."),
    file: Optional[str] = typer.Option(None, "--file", metavar="FILE", callback=_not_empty,
                                       help="Read a stream's JSON lines (.gz too) instead of the store."),
    fmt: str = typer.Option("text", "--format", metavar="FMT", callback=_story_format,
                            help="text (for a person) or json (one object, for tools)."),
    store: str = _store_option(),
    utc: bool = _utc_option(),
) -> None:
    """Tell one workload's life from the store (or a stream file): a first line saying how
    it ended ("OOM-killed at 03:12:07 at its 16 GiB limit after growing 1.2 GiB an hour for
    6 h"), then when it was seen, its limits, the kernel's peaks and counts (sampled figures
    said as sampled), CPU and throttling, pressure, GPU, IO, each event with its time and its
    exit record's totals. Several workloads matching are listed (exit 1): name one by its
    cgroup path, or narrow the span."""

    def job(warn: Callable[[str, str], None]) -> int:
        from cgstat.app.story import story as tell

        return tell(workload, store, file, since, until, fmt, utc, warn)

    _history(job)


def _blame(exc: click_errors.UsageError) -> None:
    """Name where a bad value came from: click names an option's environment variable in
    every error about it, also when the value was given on the command line."""
    param, ctx = getattr(exc, "param", None), exc.ctx
    if (not isinstance(exc, click_errors.BadParameter) or isinstance(exc, click_errors.MissingParameter)
            or exc.param_hint is not None or param is None or ctx is None or not getattr(param, "envvar", None)):
        return
    options = " / ".join(f"'{o}'" for o in param.opts)
    source = getattr(ctx, "get_parameter_source", lambda name: None)(param.name)  # click 8
    if source is not None and source.name == "ENVIRONMENT":
        exc.param_hint = f"{param.envvar} (the environment's {options})"
    else:
        exc.param_hint = options


def main(argv: Optional[List[str]] = None) -> None:
    """The console script: usage errors as one line (journals and cron mail), exit status 2."""
    root = copy.copy(app)  # the group without its commands: _Group makes the one asked for
    root.registered_commands = []
    command = typer.main.get_command(root)
    try:
        code = command.main(args=argv, prog_name="cgstat", standalone_mode=False)
    except click_errors.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `cgstat`: the help, as older click does
            sys.stdout.write(exc.format_message() + "\n")
            sys.exit(0)
        _blame(exc)
        where = exc.ctx.command_path if exc.ctx is not None else "cgstat"
        say(f"{exc.format_message()} (see {where} --help)")
        code = 2
    except click_errors.ClickException as exc:
        say(exc.format_message())
        code = exc.exit_code
    except _ABORT:
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
