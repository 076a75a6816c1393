"""Which container labels reach series (the Prometheus endpoint's `container_label_*`, the
OTLP push's `container.label.*`): only those whose key matches `--label-allow REGEX`
(anchored, as Prometheus' relabel regexes are); none by default, as cAdvisor's
(`--store_container_labels=false` with `--whitelisted_container_labels`) and dcgm-exporter's
defaults. Labels often carry credentials (`db.password=...`) read from root-only runtime
state, and a series is read by whoever can reach the endpoint or the receiver. Names,
images and IDs are not labels: they stay. Records are filtered for those outputs only; the
JSON lines keep every label (docs/security.md says who can read what).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Pattern, Sequence

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject


class LabelAllow:
    """`apply(records)`: the records with each container's labels cut to the allowed keys
    (a record with nothing to cut is the same object)."""

    def __init__(self, pattern: Optional[str] = None):
        self.regex: Optional[Pattern[str]] = re.compile(pattern) if pattern else None

    def allowed(self, key: str) -> bool:
        return self.regex is not None and self.regex.fullmatch(key) is not None

    def apply(self, records: Sequence[JsonObject]) -> List[JsonObject]:
        out: List[JsonObject] = []
        for record in records:
            container: Any = record.get("container")
            labels = container.get("labels") if isinstance(container, dict) else None
            if isinstance(labels, dict) and labels:
                kept: Dict[str, Any] = {k: v for k, v in labels.items() if isinstance(k, str) and self.allowed(k)}
                if len(kept) != len(labels):
                    record = {**record, "container": {**container, "labels": kept or None}}
            out.append(record)
        return out


def check_pattern(pattern: str) -> str:
    """ValueError (one line) when `pattern` is not a regular expression."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
    return pattern
