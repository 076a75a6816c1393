"""The command line: typer commands only; the work lives in agent.py and below."""

from __future__ import annotations

import sys
from typing import List, Optional

import typer
import typer.core

from cgstat import __version__
from cgstat.agent import Agent, CgstatError, run_once, run_pid, run_stream
from cgstat.log import Warner, say
from cgstat.select import compile_match
from cgstat.sinks import Sink

_HELP = """Per-cgroup CPU, memory, block IO, pids and pressure, read straight from the kernel's
cgroup files (v1, v2 and hybrid), as JSON lines: one object per cgroup per tick.

By default cgstat reports containers, Kubernetes pods and systemd services/scopes (on a
host with none, the root cgroup and its children); --all reports every cgroup.
"""

# Plain-text help and errors: they end up in journals, cron mail and pipes, and importing
# rich would double the start-up time of a cron one-shot.
if hasattr(typer.core, "HAS_RICH"):
    typer.core.HAS_RICH = False

try:
    app = typer.Typer(add_completion=False, no_args_is_help=True, help=_HELP,
                      pretty_exceptions_enable=False)
except TypeError:  # typer < 0.6 on old Pythons has no pretty exceptions to turn off
    app = typer.Typer(add_completion=False, no_args_is_help=True, help=_HELP)

HOST_ROOT = typer.Option("/", "--host-root", envvar="CGSTAT_HOST_ROOT", metavar="DIR",
                         help="Read /sys, /proc and /var under DIR (the host's / mounted in a "
                              "container, or a recorded tree). Env: CGSTAT_HOST_ROOT.")
ALL = typer.Option(False, "--all", help="Report every cgroup, not only workloads.")
MATCH = typer.Option(None, "--match", metavar="REGEX",
                     help="Report every cgroup whose path matches REGEX (Python re.search).")


def _positive(value: Optional[float]) -> Optional[float]:
    if value is not None and not value > 0:
        raise typer.BadParameter("must be greater than 0")
    return value


def _not_negative(value: float) -> float:
    if value < 0:
        raise typer.BadParameter("must be 0 or more")
    return value


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cgstat {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    pass


def _agent(host_root: str, all_: bool, match: Optional[str]) -> Agent:
    try:
        pattern = compile_match(match)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--match") from None
    return Agent(host_root, all_, pattern, Warner())


@app.command()
def stream(
    interval: float = typer.Option(1.0, "--interval", envvar="CGSTAT_INTERVAL", metavar="S",
                                   callback=_positive, help="Seconds between batches. Env: CGSTAT_INTERVAL."),
    count: Optional[int] = typer.Option(None, "--count", min=1, metavar="N",
                                        help="Stop after N batches (default: run until stopped)."),
    output: Optional[str] = typer.Option(None, "--output", envvar="CGSTAT_OUTPUT", metavar="FILE",
                                         help="Append to FILE instead of stdout; SIGHUP reopens it "
                                              "(logrotate). Env: CGSTAT_OUTPUT."),
    host_root: str = HOST_ROOT,
    all_: bool = ALL,
    match: Optional[str] = MATCH,
) -> None:
    """Stream a batch of records every interval; the first batch comes after one interval,
    with rates. SIGTERM/SIGINT finish the line being written and exit 0."""
    try:
        code = run_stream(_agent(host_root, all_, match), Sink(output), interval, count)
    except CgstatError as exc:
        say(str(exc))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command()
def once(
    state: Optional[str] = typer.Option(None, "--state", metavar="FILE",
                                        help="Compute rates against the counters saved in FILE by "
                                             "the previous run, then save this run's (for cron)."),
    window: float = typer.Option(1.0, "--window", metavar="S", callback=_not_negative,
                                 help="Without --state: seconds between the two samples that give "
                                      "rates (0: no rates, no wait)."),
    output: Optional[str] = typer.Option(None, "--output", metavar="FILE",
                                         help="Append to FILE instead of stdout, whole lines only."),
    host_root: str = HOST_ROOT,
    all_: bool = ALL,
    match: Optional[str] = MATCH,
) -> None:
    """Print one batch of records and exit (for cron and scripts)."""
    try:
        code = run_once(_agent(host_root, all_, match), Sink(output), state, window)
    except CgstatError as exc:
        say(str(exc))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command()
def pid(
    pids: List[int] = typer.Argument(..., metavar="PID...", help="Process IDs as the host sees them."),
    host_root: str = HOST_ROOT,
) -> None:
    """Print, for each PID, one JSON object: its cgroup path(s) and container.

    A PID with no process prints {"pid": N, "error": "no such process", ...}; exit 0."""
    try:
        code = run_pid(_agent(host_root, False, None), pids)
    except CgstatError as exc:
        say(str(exc))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def main(argv: Optional[List[str]] = None) -> None:
    app(args=argv, prog_name="cgstat")


if __name__ == "__main__":
    main(sys.argv[1:])
