"""The options the commands share, each declared once as an `Annotated` type, and the
converters that read their values: every parser raises ValueError (outputs/values.py and
the modules whose values they are), which `converter` makes the one usage error (exit 2).
The command modules (live.py, history.py) register their commands on `commands`."""

import functools
import inspect
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Type

import typer

from cgstat.outputs import values
from cgstat.outputs.values import MAX_INTERVAL_S, MAX_WINDOW_S, MIN_INTERVAL_S

try:
    from typing import Annotated
except ImportError:  # Python 3.7 and 3.8: typer depends on typing_extensions there
    from typing_extensions import Annotated  # type: ignore[assignment, unused-ignore]

__all__ = ["Annotated", "MAX_INTERVAL_S", "MAX_WINDOW_S", "MIN_INTERVAL_S"]

# Plain-text help (no rich): it ends up in journals, cron mail and pipes, and importing rich
# would double the start-up time of a cron one-shot.
commands = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)

# click's errors, reached from typer's public BadParameter: typer 0.2x vendors click under
# a private module, older typer uses click itself
USAGE_ERROR: Type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
CLICK_ERROR: Type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

# PID_MAX_LIMIT on 64-bit kernels (include/linux/threads.h): no PID is larger.
MAX_PID = 4194304
DEFAULT_MAX_SERIES = 100000  # ~2x what 1,000 containers make (docs/prometheus.md, the series budget)
TIME_HELP = ("ISO 8601 (2026-12-02T03:12, local time without an offset), a time of day (03:12), Unix seconds, "
             "or N s/min/h/d ago")


class Common(NamedTuple):
    """The options given before the command (`ctx.obj`); the command's own win."""

    host_root: Optional[str] = None
    all_: bool = False
    match: Optional[str] = None
    max_user: Optional[int] = None
    docker_root: Optional[str] = None
    docker_host: Optional[str] = None


def converter(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`parse` as an option's parser: its ValueError is the option's usage error."""
    def convert(value: Any) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return convert


def _checked(check: Callable[[str], Any]) -> Callable[[Any], Any]:
    """A value kept as given once `check` (ValueError when it is bad) took it."""
    def parse(value: Any) -> str:
        check(str(value))
        return str(value)
    return converter(parse)


def _lazy(module: str, name: str) -> Callable[[str], Any]:
    """The parser `name` of `module`, imported when a value is given (not for --help)."""
    def parse(value: str) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)(value)
    return parse


def _listen(value: str) -> str:
    from cgstat.outputs.prometheus.http import parse_listen  # only where --listen is given or served

    parse_listen(values.not_empty(value))
    return value


def _groups(value: str) -> str:
    from cgstat.outputs.prometheus.budget import groups_off

    groups_off(group_list(value), None)
    return value


def group_list(value: Optional[str]) -> Optional[List[str]]:
    return None if value is None else [g.strip() for g in value.split(",") if g.strip()]


def when(value: str) -> str:
    from cgstat.store.times import parse_time

    parse_time(value, 0.0)
    return value


def _sort(value: str) -> str:
    from cgstat.outputs.top_screen import sort_name

    return sort_name(value)


def _format(value: str) -> str:
    from cgstat.outputs.formats import FORMATS

    return values.choice(FORMATS)(value)


def _pid(value: Any) -> int:
    """A PID argument: `cgstat pid -5` is a bad PID, `cgstat pid 1 --frob` an option not known."""
    try:
        pid = int(str(value))
    except ValueError:
        if str(value).startswith("-"):
            raise USAGE_ERROR(f"No such option: {value}") from None
        raise ValueError(f"{value!r} is not a process ID") from None
    if not 1 <= pid <= MAX_PID:
        raise ValueError(f"{pid} is not a process ID (1 to {MAX_PID})")
    return pid


def option(*names: str, parse: Optional[Callable[[Any], Any]] = None, **kw: Any) -> Any:
    return typer.Option(*names, parser=converter(parse) if parse is not None else None, **kw)


# -- what every sampling command takes (before the command too) ------------------------------

HostRoot = Annotated[Optional[str], typer.Option(
    "--host-root", envvar="CGSTAT_HOST_ROOT", metavar="DIR", show_default=False,
    help="Read /sys, /proc and /var under DIR (the host's / mounted in a container, or a recorded tree). "
         "Default: /.")]
All = Annotated[bool, typer.Option("--all", help="Report every cgroup, not only workloads.")]
Match = Annotated[Optional[str], typer.Option(
    "--match", metavar="REGEX", help="Report every cgroup whose path matches REGEX (Python re.search).")]
MaxUser = Annotated[Optional[int], option(
    "--max-user-cgroups", envvar="CGSTAT_MAX_USER_CGROUPS", metavar="N", parse=values.whole_number(1),
    show_default=False, help="At most N cgroups per user's delegated subtree (user@UID.service); the rest are "
                             "counted and said once on stderr. Default: 1000.")]
DockerRoot = Annotated[Optional[str], option(
    "--docker-data-root", envvar="CGSTAT_DOCKER_DATA_ROOT", metavar="DIR", show_default=False,
    parse=values.absolute,
    help="dockerd's data root (its --data-root), a host path, for container names. Default: found from "
         "/etc/docker/daemon.json and the running dockerd's command line, else /var/lib/docker.")]
DockerHost = Annotated[Optional[str], option(
    "--docker-host", envvar="DOCKER_HOST", metavar="URL", show_default=False, parse=values.not_empty,
    help="The Docker API socket (unix:///path), asked for the names of containers whose state can't be read. "
         "Default: /var/run/docker.sock, daemon.json \"hosts\" and the running dockerd's -H.")]
FullRead = Annotated[bool, typer.Option(
    "--full-read", envvar="CGSTAT_FULL_READ",
    help="Read every file of every cgroup every tick. By default a cgroup whose CPU, memory and task counts "
         "stand still keeps its other figures from its last full read, at most 20 s old (docs/reading.md).")]

# -- ticks and outputs -------------------------------------------------------------------------

Interval = Annotated[float, option(
    "--interval", envvar="CGSTAT_INTERVAL", metavar="S", parse=values.seconds(MIN_INTERVAL_S, MAX_INTERVAL_S),
    help=f"Seconds between ticks ({MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}).")]
Window = Annotated[float, option(
    "--window", metavar="S", parse=values.seconds(MIN_INTERVAL_S, MAX_WINDOW_S, zero_ok=True),
    help=f"Seconds between the two samples that give rates (0: no rates, no wait; else {MIN_INTERVAL_S:g} to "
         f"{MAX_WINDOW_S:g}).")]


Count = Annotated[Optional[int], option("--count", metavar="N", parse=values.whole_number(1), show_default=False,
                                         help="Stop after N ticks (default: run until stopped).")]
Output = Annotated[Optional[str], option("-o", "--output", metavar="FILE", parse=values.not_empty,
                                         help="Append to FILE instead of stdout, whole lines only.")]
OutputMode = Annotated[int, option(
    "--output-mode", metavar="OCTAL", parse=values.file_mode, show_default="600",
    help="Permissions of a FILE that --output creates (octal, without execute bits or world write).")]
Format = Annotated[str, option(
    "--format", metavar="FMT", parse=_format,
    help="jsonl (one JSON object per line), table (like docker stats), csv, or html (the report's page, "
         "written to --output at the end).")]
NoEvents = Annotated[bool, typer.Option("--no-events", help="No diagnostics events (type: event) in the output.")]
EventsWindow = Annotated[float, option(
    "--events-window", metavar="S", parse=values.seconds(1.0, MAX_INTERVAL_S),
    help="Seconds over which sustained conditions must hold to raise an event.")]
OomKills = Annotated[str, option(
    "--oom-kills", metavar="all|shown", parse=values.one_of("all", "shown"),
    help="all: an event for every OOM kill the kernel log reports, whatever its cgroup; shown: only for the "
         "cgroups the records show.")]
LogState = Annotated[Optional[str], option(
    "--log-state", envvar="CGSTAT_LOG_STATE", metavar="FILE", parse=values.not_empty,
    help="Keep in FILE where the kernel log was read to: the next run of this boot reports the OOM kills "
         "logged while none was reading, not those before.")]
Processes = Annotated[int, option(
    "--processes", metavar="N", parse=values.whole_number(0, 1000),
    help="Add each workload's N largest processes (and the trees they are in) to its record as `processes`: "
         "RSS, PSS, USS, CPU, GPU (docs/processes.md). 0: none, no /proc read.")]
ProcessesBy = Annotated[str, option(
    "--processes-by", metavar="KEY", parse=values.one_of("pss", "cpu"),
    help="With --processes: the largest by pss or by cpu.")]
Sort = Annotated[str, option("--sort", metavar="KEY", parse=_sort,
                              help="cpu, memory, gpu, io, pids or name (keys c m g i p n while it runs).")]
Pids = Annotated[List[int], typer.Argument(metavar="PID...", parser=converter(_pid), show_default=False,
                                           help="One or more process IDs, as the host sees them.")]

# -- the endpoint and the push ------------------------------------------------------------------

Listen = Annotated[Optional[str], option("--listen", metavar="ADDR:PORT", parse=_listen,
                                          help="Also serve /metrics (Prometheus) there, from the same ticks.")]
ServeListen = Annotated[str, option("--listen", envvar="CGSTAT_LISTEN", metavar="ADDR:PORT", parse=_listen,
                                     help="Where to serve /metrics and /healthz (loopback only unless told).")]
LabelAllow = Annotated[Optional[str], option(
    "--label-allow", envvar="CGSTAT_LABEL_ALLOW", metavar="REGEX", show_default=False,
    parse=_lazy("cgstat.outputs.labelallow", "check_pattern"),
    help="Container labels whose key matches REGEX (whole key) become series labels in /metrics and the OTLP "
         "push; default: none (labels often hold secrets).")]
WebConfig = Annotated[Optional[str], option(
    "--web-config-file", envvar="CGSTAT_WEB_CONFIG_FILE", metavar="FILE", parse=values.not_empty,
    show_default=False, help="TLS and basic auth for /metrics, in Prometheus exporter-toolkit's format (basic "
                             "auth needs pip install 'cgstat[web]'). See docs/security.md.")]
GpuIdleMemory = Annotated[int, option(
    "--gpu-idle-memory", metavar="SIZE", parse=values.gpu_memory, show_default="1GiB",
    help="GPU memory a container must hold on one GPU at ~0 % SM to hold it idle (gpu_held_idle, "
         "cgstat_gpu_held_idle_seconds_total).")]
GpuIdleWindow = Annotated[float, option(
    "--gpu-idle-window", metavar="S", parse=values.seconds(1.0, 7 * 86400.0),
    help="Seconds a container must hold a GPU idle before gpu_held_idle is raised.")]
Metrics = Annotated[Optional[str], option(
    "--metrics", metavar="GROUPS", parse=_groups,
    help="Serve (and push over OTLP) only these metric groups, comma-separated (docs/prometheus.md lists them; "
         "default: all but procs); +GROUP: the default ones and GROUP (--metrics +procs with --processes N).")]
DisableMetrics = Annotated[Optional[str], option(
    "--disable-metrics", metavar="GROUPS", parse=_groups,
    help="Serve (and push) every metric group but these, comma-separated (e.g. dcgm,diskIO).")]
MaxSeries = Annotated[int, option(
    "--max-series", metavar="N", parse=values.whole_number(0),
    help="Past N series (the OTLP push: N data points), the least-used cgroups' series are summed into "
         "id=\"_other\" (OTLP: cgstat.cgroup=\"_other\"); 0: no limit.")]

# -- the store -------------------------------------------------------------------------------------

Store = Annotated[Optional[str], option(
    "--store", envvar="CGSTAT_STORE", metavar="DIR", parse=values.not_empty, show_default=False,
    help="The store's folder (default: as root /var/lib/cgstat/store, else the user's state folder).")]
Retain = Annotated[Optional[float], option("--retain", metavar="SPAN", parse=values.span_or_none, show_default="7d",
                                           help="Remove shards older than SPAN (N s, min, h or d; none: keep them).")]
MaxSize = Annotated[Optional[int], option(
    "--max-size", metavar="SIZE", parse=values.store_size, show_default="2G",
    help="Keep the store within SIZE (K, M, G: powers of 1024; none: no bound), removing the oldest shards first.")]


Until = Annotated[Optional[str], option("--until", metavar="TIME", parse=when, show_default=False,
                                        help="To TIME (default: now).")]
Utc = Annotated[bool, typer.Option("--utc", help="Times in UTC (default: local time, the zone said).")]


# -- the sink kinds' options (pipeline/sinks.py, app/sinks.py) -----------------------------------

def from_command_line(ctx: Optional[typer.Context], name: str) -> bool:
    """Whether the parameter `name` was given on the command line (not its default, nor
    an environment variable: a unit's Environment= may serve several commands)."""
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source is not None and source.name == "COMMANDLINE"


def needs(ctx: typer.Context, name: str, present: bool, why: str) -> None:
    """A usage error when the option `name` was given on the command line while what it
    works on (`present`) was not: said, not silently ignored."""
    if not present and from_command_line(ctx, name):
        raise typer.BadParameter(why, param_hint="--" + name.rstrip("_").replace("_", "-"))


def takes_sinks(command: Callable[..., None]) -> Callable[..., None]:
    """Mark a command that offers every registered sink kind's options, given to it as one
    mapping `added` (option key -> value): added to its parameters when it is made to run
    (with_sink_options), not when the command list is shown."""
    command.takes_sinks = True  # type: ignore[attr-defined]
    return command


def with_sink_options(command: Callable[..., None], load: bool = True) -> Callable[..., None]:
    """`command` with a parameter per registered sink kind's option, their values handed
    over as `added` (`load` False: none, the plug-ins not loaded: the list of commands)."""
    options = []
    if load:
        from cgstat.app.sinks import sink_kinds

        options = [o for kind in sink_kinds() for o in kind.options]
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "added"]
    added = [inspect.Parameter(
        o.key, inspect.Parameter.KEYWORD_ONLY, annotation=List[Any] if o.multiple else Optional[Any],
        default=typer.Option([] if o.multiple else o.default, o.flag, envvar=o.envvar, metavar=o.metavar,
                             parser=converter(o.parse or str), help=o.help, show_default=o.default is not None))
        for o in options]
    keys = [o.key for o in options]

    firsts = {o.key: kind.options[0] for kind in (sink_kinds() if load else ()) for o in kind.options[1:]}

    @functools.wraps(command)
    def run(**given: Any) -> None:
        mine: Dict[str, Any] = {k: (tuple(given[k]) if isinstance(given[k], list) else given[k]) for k in keys}
        for key, first in firsts.items():  # a kind's option without the option that makes the kind
            if from_command_line(given.get("ctx"), key) and mine.get(first.key) in (None, ()):
                raise typer.BadParameter("configures what %s adds: give %s too" % (first.flag, first.flag),
                                         param_hint="--" + key.replace("_", "-"))
        command(**{k: v for k, v in given.items() if k not in keys}, added=mine)

    run.takes_sinks = False  # type: ignore[attr-defined]  # (functools.wraps copied it)
    run.__signature__ = inspect.Signature(own + added)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in own + added}
    return run
