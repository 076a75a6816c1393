"""`cgstat record`: a run whose one sink is the flight recorder's store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from cgstat.outputs.store import store_sink
from cgstat.pipeline.runner import Runner

if TYPE_CHECKING:
    from cgstat.pipeline.sampler import Sampler


def record(sampler: Sampler, path: str, retain_s: Optional[float], max_bytes: Optional[int], interval_s: float,
           count: Optional[int], events_window_s: Optional[float]) -> int:
    """Every tick, with its events, into the store at `path` only (--retain, --max-size)."""
    events = None
    if events_window_s is not None:
        from cgstat.events import EventDetector

        events = EventDetector(window_s=events_window_s)
    sampler.warner.once("recording", f"recording every {interval_s:g} s into {path}")
    return Runner(sampler, [store_sink(path, retain_s, max_bytes, sampler.warner.warn)], interval_s, events).run(count)
