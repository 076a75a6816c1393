"""How a command runs: the Sampler's run or the store reader's, an expected failure said in
one line (exit 1), the store's default folder and --match read when a command runs (not
for --help), and the usage line of a command as its help writes it."""

from typing import TYPE_CHECKING, Any, Callable, List, Optional

import typer
import typer.core

from cgstat.cli.options import Common
from cgstat.diagnostics import say
from cgstat.errors import CgstatError

if TYPE_CHECKING:
    from typing import Pattern

Warn = Callable[[str, str], None]


class Command(typer.core.TyperCommand):
    """A command whose usage line writes an argument as its help does (`PID...`): typer
    0.2x puts a required one in braces (`{PID}`), older typer doesn't."""

    def collect_usage_pieces(self, ctx: typer.Context) -> List[str]:  # type: ignore[override]
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p
                for p in super().collect_usage_pieces(ctx)]


def run(make: Callable[[], Any], job: Callable[[Any], int]) -> None:
    """Run a command on what `make` opens: an expected failure is one line on stderr, exit 1."""
    try:
        code = job(make())
    except CgstatError as exc:
        say(str(exc))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def history(job: Callable[[Warn], int]) -> None:
    """Run a reader of the store: its notices (damage skipped) on stderr, one line each."""
    from cgstat.diagnostics import Warner

    run(lambda: Warner().warn, job)


def store_of(path: Optional[str]) -> str:
    """--store, or the default folder (as root /var/lib/cgstat/store, else the user's)."""
    if path is not None:
        return path
    from cgstat.store.folder import default_store

    return default_store()


def pattern_of(ctx: typer.Context, match: Optional[str]) -> "Optional[Pattern[str]]":
    """--match given after the command, else before it; a bad one is a usage error."""
    from cgstat.pipeline.select import compile_match

    regex = match if match is not None else (ctx.obj or Common()).match
    try:
        return compile_match(regex)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--match'") from None
