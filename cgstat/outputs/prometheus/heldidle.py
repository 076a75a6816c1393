"""What /metrics says of GPUs held idle: `cgstat_gpu_held_idle_seconds_total` per cgroup,
the GPU-seconds its processes held at least `--gpu-idle-memory` of a GPU's memory at no
more than `idle_sm_percent` SM (cgstat/events/gpuheld.py), summed over its GPUs.

Counted by the exporter, tick by tick, from the GPU records: each tick adds the time since
the previous one for every GPU the cgroup holds idle now (the SM figure is the interval's
average, so "idle now" is "idle over the interval"). A counter from 0 when cgstat started
watching the cgroup; it goes when the cgroup goes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from cgstat.outputs.prometheus.labels import base_labels
from cgstat.events.gpuheld import DEFAULT_MEMORY_BYTES, holdings

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import Sampled

IDLE_SM_PERCENT = 5.0  # the events' gpu_idle_sm_percent default


class HeldIdleSeconds:
    """`update(records, now)` once per tick (now: monotonic seconds) -> (labels, seconds)."""

    def __init__(self, memory_bytes: int = DEFAULT_MEMORY_BYTES, idle_sm_percent: float = IDLE_SM_PERCENT):
        self.memory_bytes = memory_bytes
        self.idle_sm_percent = idle_sm_percent
        self._totals: Dict[str, float] = {}  # cgroup path -> GPU-seconds held idle
        self._last: Optional[float] = None

    def update(self, records: Sequence[Sampled], now: float) -> List[Tuple[str, float]]:
        gpus: List[Any] = []
        cgroups: Dict[str, Any] = {}
        for rec in records:
            r: Any = rec
            if not isinstance(r, dict):
                continue
            kind = r.get("type")
            if kind == "gpu":
                gpus.append(r)
            elif kind in ("cgroup", "pod") and isinstance(r.get("cgroup"), str):
                cgroups[r["cgroup"]] = r
        dt = 0.0 if self._last is None else max(now - self._last, 0.0)
        self._last = now
        totals = self._totals
        if gpus:
            for h in holdings(gpus).values():
                if h.idle(self.memory_bytes, self.idle_sm_percent):
                    totals[h.cgroup] = totals.get(h.cgroup, 0.0) + dt
        for path in [p for p in totals if p not in cgroups]:
            del totals[path]  # gone (or not shown): its counter goes with it
        return [(base_labels(cgroups[p]), round(v, 3)) for p, v in totals.items()]
