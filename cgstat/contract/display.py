"""The one rule for what a workload is called in every view (table, top, events, report):
its container's name, else `namespace/pod` for a pod-level record, else its systemd unit,
else its cgroup path."""

from __future__ import annotations

from typing import Any, Mapping, Tuple


def workload_name(record: Mapping[str, Any]) -> Tuple[str, str]:
    """(what it is, its name): ("container", name), ("pod", "namespace/pod"), ("unit",
    the unit) or ("cgroup", the path). Not escaped: names are hostile, each view escapes."""
    container = record.get("container")
    if isinstance(container, dict) and container.get("name"):
        return "container", str(container["name"])
    pod = record.get("pod")
    if record.get("type") == "pod" and isinstance(pod, dict) and pod.get("name"):
        return "pod", "%s/%s" % (pod.get("namespace") or "", pod["name"])
    if record.get("unit"):
        return "unit", str(record["unit"])
    return "cgroup", str(record.get("cgroup") or "--")


def display_name(record: Mapping[str, Any]) -> str:
    """The name alone (workload_name's second half)."""
    return workload_name(record)[1]
