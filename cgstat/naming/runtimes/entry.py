"""What a runtime's state says about one container: the entry every state reader returns.

No I/O: the shared record type and the key the cache files entries under.
"""

from __future__ import annotations

import re
from typing import Any, Dict, NamedTuple, Optional, Tuple

ID_PATTERN = r"[0-9a-f]{64}"  # a full container ID, in the runtimes' path patterns
HEX64 = re.compile(rf"^{ID_PATTERN}$")  # a full container ID: the only IDs looked up
Key = Tuple[Optional[int], str]  # (uid of the user subtree or None for the system, container ID)


class ContainerEntry(NamedTuple):
    """What a runtime's state says about one container."""

    runtime: Optional[str] = None
    name: Optional[str] = None
    image: Optional[str] = None
    labels: Optional[Dict[str, str]] = None
    sandbox: bool = False  # a pod's sandbox ("pause") container, by the runtime's own word
    k8s_container: Optional[str] = None  # the Kubernetes container name, for pod members
    k8s_pod: Optional[Tuple[Optional[str], Optional[str]]] = None  # (namespace, pod name)


def str_dict(value: Any) -> Optional[Dict[str, str]]:
    """A JSON object of labels/annotations as str -> str (other values left out)."""
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items() if isinstance(v, (str, int, float))}
