"""The event record (cgstat/contract/event.schema.json), the open episode it starts, and the words
its messages are made of."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, TypeVar

from cgstat.contract.display import workload_name

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import EventRecord

EVENT_SCHEMA = 1

_UNSET = object()


def make_event(r: Mapping[str, Any], kind: str, severity: str, message: str, evidence: Dict[str, Any],
               cgroup: Any = _UNSET, container: Any = _UNSET, resolves: Optional[str] = None,
               since: Any = None) -> EventRecord:
    """One event record, stamped with the record it was judged on."""
    return {
        "schema": EVENT_SCHEMA,
        "type": "event",
        "ts": r.get("ts"),
        "host": r.get("host"),
        "kind": kind,
        "severity": severity,
        "cgroup": r.get("cgroup") if cgroup is _UNSET else cgroup,
        "container": r.get("container") if container is _UNSET else container,
        "message": message,
        "evidence": evidence,
        "resolves": resolves,
        "since": r.get("ts") if since is None else since,
    }


class Episode:
    """An open episode: when it was raised, with what, and its running figures."""

    __slots__ = ("ts", "t", "evidence", "extra")

    def __init__(self, ts: Any, t: float, evidence: Dict[str, Any]):
        self.ts = ts
        self.t = t
        self.evidence = evidence
        self.extra: Dict[str, Any] = {}


def who(record: Mapping[str, Any]) -> str:
    """The workload a message is about ("container trainer", "pod ns/job", "unit x.service")."""
    return "%s %s" % workload_name(record)


def duration(s: float) -> str:
    if s < 120:
        return "%d s" % round(s)
    if s < 7200:
        return "%d min" % round(s / 60)
    return "%.1f h" % (s / 3600)


def cap(msg: str, limit: int = 600) -> str:
    return msg if len(msg) <= limit else msg[:limit - 1] + "…"


T = TypeVar("T")


def deepest_only(raised: List[Tuple[str, T]]) -> List[T]:
    """The items of (cgroup path, item) pairs whose cgroup has no descendant among them: a
    hierarchical counter (v2 memory.events: an OOM kill counts in every ancestor) moves in
    every ancestor of the cgroup where it happened."""
    paths = [p for p, _ in raised]
    out = []
    for p, ev in raised:
        prefix = p.rstrip("/") + "/"
        if not any(q != p and q.startswith(prefix) for q in paths):
            out.append(ev)
    return out
