"""Docker's container config as a container entry: the same object in config.v2.json (read by
docker.py) and in the Engine API's GET /containers/<id>/json (dockerapi.py)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from cgstat.naming.runtimes.entry import ContainerEntry, str_dict


def entry_from_config(obj: Any) -> Optional[ContainerEntry]:
    """The entry of a config.v2.json (or of the API's GET /containers/<id>/json: the same
    Name, Config.Image and Config.Labels); None when it isn't an object."""
    if not isinstance(obj, dict):
        return None
    config: Dict[str, Any] = obj["Config"] if isinstance(obj.get("Config"), dict) else {}
    labels = str_dict(config.get("Labels")) or {}
    name = obj.get("Name")
    k8s = "io.kubernetes.pod.name" in labels  # dockershim's labels
    return ContainerEntry(
        runtime="docker",
        name=name.lstrip("/") if isinstance(name, str) and name.strip("/") else None,
        image=config.get("Image") if isinstance(config.get("Image"), str) else None,
        labels=labels,
        sandbox=labels.get("io.kubernetes.docker.type") == "podsandbox",
        k8s_container=labels.get("io.kubernetes.container.name") if k8s else None,
        k8s_pod=(labels.get("io.kubernetes.pod.namespace"), labels.get("io.kubernetes.pod.name")) if k8s else None,
    )
