"""What a cgroup rule judges: one record, its named sample, the sample before and the
window (a stream's history, or the two samples of two `once --state` runs), with the verbs
that raise and resolve an episode; and each cgroup's history."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from cgstat.events.event import Episode, duration, make_event, who
from cgstat.events.kills import Rise
from cgstat.events.window import WindowSample, Window

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import EventRecord


class History:
    """One cgroup between ticks: its samples, its clock, its open episodes."""

    __slots__ = ("samples", "last", "t", "open", "ws", "ws_since", "born")

    def __init__(self, born: bool = False) -> None:
        self.born = born  # first seen after the run's first tick: its whole life is in the samples
        self.samples = Window()
        self.last: Optional[WindowSample] = None  # the newest sample, named
        self.t = 0.0
        self.open: Dict[str, Episode] = {}
        self.ws: Optional[float] = None  # the last working set seen (not None)...
        self.ws_since = math.inf  # ...and the time of the first sample since which every one seen was it


class Case:
    """One cgroup record being judged. `window` is the history the sustained rules judge
    (read it, never change it), or None while it does not cover enough of the window.
    `young`: while `window` is None, the whole life of a cgroup born while the run watched
    once it spans Thresholds.young_min_s (a life shorter than the window), else None."""

    __slots__ = ("record", "t", "sample", "before", "window", "history", "events", "oom_rises", "hierarchical",
                 "first_totals", "young")

    def __init__(self, record: Mapping[str, Any], t: float, sample: WindowSample, before: Optional[WindowSample],
                 window: Optional[Window], history: History, events: List[EventRecord],
                 oom_rises: List[Rise], hierarchical: List[Tuple[str, EventRecord]],
                 first_totals: Dict[str, float], young: Optional[Window] = None):
        self.young = young
        self.record = record
        self.t = t
        self.sample = sample
        self.before = before
        self.window = window
        self.history = history
        self.events = events
        self.oom_rises = oom_rises  # the tick's OOM-kill counter rises (events/kills.py makes their events)
        self.hierarchical = hierarchical  # events of counters every ancestor counts too (raise_)
        self.first_totals = first_totals  # the OOM-kill counters of cgroups first sampled now (events/kills.py)

    def episode(self, kind: str) -> Optional[Episode]:
        """The open episode of `kind`, or None."""
        return self.history.open.get(kind)

    def raise_(self, kind: str, severity: str, message: str, evidence: Dict[str, Any],
               hierarchical: bool = False) -> Episode:
        """Open an episode with its event. hierarchical: the condition comes from a counter
        the cgroup's ancestors count too (pids.events from kernel 6.13), so of a tick's
        events of this kind only the deepest cgroup's is kept (at the end of the tick)."""
        r = self.record
        ev = make_event(r, kind, severity, message, evidence)
        ep = self.history.open[kind] = Episode(r.get("ts"), self.t, evidence)
        if hierarchical:
            self.hierarchical.append((r["cgroup"], ev))
        else:
            self.events.append(ev)
        return ep

    def resolve(self, kind: str, what: str, evidence: Dict[str, Any]) -> None:
        """End the open episode of `kind` with a resolved notice ("<what> in <who> ended after ...")."""
        ep = self.history.open.pop(kind)
        took = max(0.0, self.t - ep.t)
        evidence = dict(evidence)
        evidence["duration_s"] = round(took, 3)
        r = self.record
        self.events.append(make_event(r, "resolved", "info", "%s in %s ended after %s." % (
            what, who(r), duration(took)), evidence, resolves=kind, since=ep.ts))

    def end(self, kind: str) -> None:
        """End the open episode of `kind` without a word."""
        del self.history.open[kind]
