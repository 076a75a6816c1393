"""One record's OTLP resource and its metrics' data points: the form the encodings write
(encode.py) and the series budget folds (budget.py)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from cgstat.outputs.otlp.names import Metric

Attrs = Tuple[Tuple[str, Any], ...]
Point = Tuple[Attrs, Any]  # (attributes, value: int or float)


class Resource:
    """One record's resource and metrics, made of it (the form both encodings are written from)."""

    __slots__ = ("key", "attributes", "time_ns", "start_ns", "metrics", "path", "usage")

    def __init__(self, key: Attrs, attributes: Attrs, time_ns: int, start_ns: int, path: Optional[str] = None,
                 usage: Tuple[float, float] = (0.0, 0.0)):
        self.key = key  # what tells it from the tick's other resources (a GPU's: with its hw.id)
        self.attributes = attributes
        self.time_ns = time_ns
        self.start_ns = start_ns
        self.path = path  # a cgroup or pod record's cgroup (what the series budget folds); None for a GPU
        self.usage = usage  # its CPU percent and working set (the budget folds the least used)
        self.metrics: Dict[str, Tuple[Metric, List[Point]]] = {}  # name -> its kind and data points
