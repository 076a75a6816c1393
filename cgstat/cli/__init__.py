"""The command line: typer commands that parse their options and call their run mode in
cgstat/app/ (live.py: the commands that sample; history.py: those that read the store;
options.py: the options they share, declared once, and the converters of their values).

Exit status: 0 success (also when the reader of a pipe goes away), 2 bad usage (one line:
"Invalid value ...", see COMMAND --help), 1 an expected failure with a one-line reason.
"""

import sys
import copy
from typing import Any, Dict, List, Optional

import typer
import typer.core
import typer.main

from cgstat import __version__
from cgstat.cli import history, live  # noqa: F401  (their commands register on options.commands)
from cgstat.cli.options import (CLICK_ERROR, MAX_INTERVAL_S, MAX_PID, MAX_WINDOW_S, MIN_INTERVAL_S, USAGE_ERROR,
                                    All, Annotated, Common, DockerHost, DockerRoot, HostRoot, Match, MaxUser, commands,
                                    with_sink_options)
from cgstat.diagnostics import say

__all__ = ["MAX_INTERVAL_S", "MAX_PID", "MAX_WINDOW_S", "MIN_INTERVAL_S", "app", "main"]

_HELP = """Per-container CPU, memory, block IO, network, pids, pressure and GPU, read straight
from the kernel's cgroup files (v1, v2 and hybrid) and NVML, as JSON lines: one object per
cgroup per tick (and one per GPU), plus events.

By default cgstat reports containers, Kubernetes pods and systemd services/scopes (on a
host with none, the root cgroup and its children); --all reports every cgroup.
--host-root, --all and --match may come before or after the command; --docker-data-root
and --docker-host come before it.
"""


class _Group(typer.core.TyperGroup):
    """The commands, each made when it is first asked for (click's lazy subcommands): typer
    inspects every parameter of a command it makes, which for all of them is a cron `once`
    run's largest cost after the imports, where a run uses one. The list (--help) makes
    every command, without the sink kinds' options (no plug-in is loaded for it); the
    command that runs gets them."""

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:  # type: ignore[override]
        if cmd_name not in self.commands:
            infos = [i for i in commands.registered_commands if _name(i) == cmd_name]
            self._make(infos or commands.registered_commands, sinks=bool(infos))
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: typer.Context) -> List[str]:  # type: ignore[override]
        self._make(commands.registered_commands, sinks=False)
        return super().list_commands(ctx)

    def _make(self, infos: List[Any], sinks: bool) -> None:
        made: Dict[str, Any] = dict(self.commands)
        for info in infos:
            if _name(info) not in made:
                if getattr(info.callback, "takes_sinks", False):
                    info = copy.copy(info)
                    info.callback = with_sink_options(info.callback, load=sinks)
                one = typer.Typer(add_completion=False, rich_markup_mode=None)  # a lone command: typer makes just it
                one.registered_commands = [info]
                made[_name(info)] = typer.main.get_command(one)
        # in the order they were declared, as typer lists them
        self.commands = {n: made[n] for n in _ORDER + sorted(set(made) - set(_ORDER)) if n in made}


_ORDER = ["stream", "serve", "once", "top", "report", "pid", "procs", "record", "replay", "dump", "events", "story"]


def _name(info: Any) -> str:
    """A registered command's name, as typer derives it (get_command_name)."""
    return info.name or info.callback.__name__.lower().replace("_", "-")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cgstat {__version__}")
        raise typer.Exit(0)


# -h as well as --help, on every command (click hands its context settings down)
app = typer.Typer(add_completion=False, no_args_is_help=True, help=_HELP, rich_markup_mode=None,
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]})


@app.callback(cls=_Group)
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                     help="Print the version and exit.")] = False,
    host_root: HostRoot = None,
    all_: All = False,
    match: Match = None,
    max_user: MaxUser = None,
    docker_root: DockerRoot = None,
    docker_host: DockerHost = None,
) -> None:
    ctx.obj = Common(host_root, all_, match, max_user, docker_root, docker_host)


def _blame(exc: Any) -> None:
    """Name where a bad value came from: click names an option's environment variable in
    every error about it, also when the value was given on the command line."""
    param, ctx = getattr(exc, "param", None), exc.ctx
    if (not isinstance(exc, typer.BadParameter) or type(exc).__name__ == "MissingParameter"
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
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="cgstat", standalone_mode=False)
    except USAGE_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `cgstat`: the help, as older click does
            sys.stdout.write(exc.format_message() + "\n")  # type: ignore[attr-defined]
            sys.exit(0)
        _blame(exc)
        where = exc.ctx.command_path if exc.ctx is not None else "cgstat"  # type: ignore[attr-defined]
        say(f"{exc.format_message()} (see {where} --help)")  # type: ignore[attr-defined]
        code = 2
    except CLICK_ERROR as exc:
        say(exc.format_message())  # type: ignore[attr-defined]
        code = exc.exit_code  # type: ignore[attr-defined]
    except typer.Abort:  # Ctrl-C at a prompt
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
