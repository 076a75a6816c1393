"""Which cgroups to report.

Default: the cgroups people think of as workloads: containers and Kubernetes pods, and
systemd services and scopes that are not part of a container. Runtime monitors (conmon,
lxc.monitor) and a container's own sub-cgroups are plumbing, not workloads. On a host with
none of these (a plain machine, a CI runner), the root and its direct children, so that
the stream is never empty. `--all`: every cgroup. `--match REGEX`: every cgroup whose path
matches (re.search), whatever its kind.
"""

from __future__ import annotations

import re
from typing import Callable, List, NamedTuple, Optional, Pattern, Tuple

from cgstat.kernel.tree import Cgroup
from cgstat.naming.paths import PathInfo
from cgstat.text import quote

Selected = List[Tuple[Cgroup, PathInfo]]
_EXAMPLES = 3  # paths named when --match matches none


class Shown(NamedTuple):
    """A tick's selection: the cgroups, a sentence saying what they are, and what kind of
    set it is ("match", "match-none", "all", "workloads", "fallback"): a run says the
    sentence again when the kind changes (a tick's counts change all the time)."""

    cgroups: Selected
    what: str
    kind: str


def _is_workload(info: PathInfo) -> bool:
    if info.inside_container or info.kind == "monitor":
        return False
    if info.kind in ("container", "pod"):
        return True
    return info.unit is not None and info.unit.endswith((".service", ".scope"))


def select(classified: Selected, all_cgroups: bool = False,
           match: Optional[Pattern[str]] = None,
           is_sandbox: Optional[Callable[[Cgroup, PathInfo], bool]] = None) -> Shown:
    """The cgroups to report this tick, and a sentence saying what they are.

    `classified` pairs each cgroup with what its path says (naming/paths.classify).
    `is_sandbox` tells a pod's pause container (which needs runtime state to spot); those
    are left out of the default selection.
    """
    if match is not None:
        chosen = [(cg, i) for cg, i in classified if match.search(cg.path)]
        if chosen or not classified:
            return Shown(chosen, f"cgroups whose path matches {quote(match.pattern)}", "match")
        info_of = {cg.path: i for cg, i in classified}
        # workloads first (what a --match is usually after: it shows the form of their
        # paths), then the shallowest paths
        some = sorted((cg.path for cg, _ in classified),
                      key=lambda p: (not _is_workload(info_of[p]), p.count("/"), p))[:_EXAMPLES]
        return Shown(chosen, f"nothing: no cgroup path matches {quote(match.pattern)}; there are "
                     f"{len(classified)}, such as {', '.join(map(quote, some))} (--all shows every one)",
                     "match-none")
    if all_cgroups:
        return Shown(classified, "every cgroup", "all")
    chosen = [(cg, i) for cg, i in classified
              if _is_workload(i) and not (is_sandbox and is_sandbox(cg, i))]
    if chosen:
        containers = sum(1 for _, i in chosen if i.kind == "container")
        pods = sum(1 for _, i in chosen if i.kind == "pod")
        units = len(chosen) - containers - pods
        counted = [_count(containers, "container", "containers"), _count(pods, "pod", "pods"),
                   _count(units, "systemd service/scope", "systemd services/scopes")]
        said = [c for c in counted if c]
        return Shown(chosen, f"{', '.join(said[:-1]) + ' and ' if len(said) > 1 else ''}{said[-1]} "
                     "(--all for every cgroup)", "workloads")
    top = [(cg, i) for cg, i in classified if cg.path.count("/") <= 1]
    return Shown(top, "the root cgroup and its direct children, since no containers or systemd "
                 "units were found (--all for every cgroup)", "fallback")


def _count(n: int, one: str, many: str) -> str:
    return "" if n == 0 else f"{n} {one if n == 1 else many}"


def would_select(path: str, info: PathInfo, all_cgroups: bool = False,
                 match: Optional[Pattern[str]] = None) -> bool:
    """Whether a cgroup that is not in this tick's tree (gone, or never seen: an OOM kill
    the kernel log reports) is one `select` would report."""
    if match is not None:
        return match.search(path) is not None
    return all_cgroups or _is_workload(info)


def compile_match(pattern: Optional[str]) -> Optional[Pattern[str]]:
    """Compile --match; raises ValueError with a readable reason."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
    except (OverflowError, RecursionError, ValueError):
        # sre's own limits: a repeat count past 2**32 ('a{99999999999}'), deep nesting
        raise ValueError(f"{pattern!r} is beyond what Python's regular expressions accept") from None
