"""`cgstat record`: a stream whose sink is the flight recorder's store (and the store's
options, which `stream --store` takes too)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

if TYPE_CHECKING:
    from cgstat.outputs.sink import Sink
    from cgstat.pipeline.sampler import Sampler


class StoreOptions(NamedTuple):
    path: str
    retain_s: Optional[float]  # --retain; None: kept until --max-size needs the room
    max_bytes: Optional[int]  # --max-size; None: no bound

    def sink(self, warn: Callable[[str, str], None]) -> Sink:
        from cgstat.outputs.store import StoreSink

        return StoreSink(self.path, self.retain_s, self.max_bytes, warn)


def record(sampler: Sampler, store: StoreOptions, interval_s: float, count: Optional[int],
           events_window_s: Optional[float]) -> int:
    """Every tick, with its events, into the store only."""
    from cgstat.app.stream import run_stream

    events = None
    if events_window_s is not None:
        from cgstat.events import EventDetector

        events = EventDetector(window_s=events_window_s)
    sampler.warner.once("recording", f"recording every {interval_s:g} s into {store.path}")
    return run_stream(sampler, [store.sink(sampler.warner.warn)], interval_s, count, events)
