"""Finding a workload by what a person calls it, among a tick's records.

A query matches a cgroup or pod record by its container's name, its container ID (a prefix
of at least 3 hex digits, as docker accepts), its systemd unit, its pod (`name` or
`namespace/name`) or its cgroup path (exact). Every record that matches is returned (a
query that names several workloads gets them all, listed, never one picked).
"""

from __future__ import annotations

from typing import Any, Iterable, List, Mapping, TypeVar

from cgstat.names import workload_name

MIN_ID_PREFIX = 3
M = TypeVar("M", bound=Mapping[str, Any])


def matches(record: Mapping[str, Any], query: str) -> bool:
    if record.get("type") not in ("cgroup", "pod"):
        return False
    if record.get("cgroup") == query or record.get("unit") == query or workload_name(record)[1] == query:
        return True
    container = record.get("container")
    if isinstance(container, dict):
        if container.get("name") == query:
            return True
        cid = container.get("id")
        if isinstance(cid, str) and len(query) >= MIN_ID_PREFIX and cid.startswith(query):
            return True
    pod = record.get("pod")
    if isinstance(pod, dict) and pod.get("name") and query in (pod["name"], "%s/%s" % (pod.get("namespace"),
                                                                                       pod["name"])):
        return True
    return False


def find(records: Iterable[M], query: str) -> List[M]:
    """The workload records `query` names, in the records' order."""
    return [r for r in records if matches(r, query)]
