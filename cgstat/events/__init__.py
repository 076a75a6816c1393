"""Diagnostics events: the rules of thumb people apply to `docker stats` beside `nvidia-smi`,
turned into `type: "event"` records (docs/events.md has every rule and threshold).

`EventDetector.observe(records)` takes one tick's records (cgroup, pod and `type: "gpu"`)
and returns that tick's events; `watch(records)` does the same for records that come one at
a time. Each condition is raised once per episode and ended by one `kind: "resolved"` notice.
Each cgroup keeps its own clock, advanced by the record's `interval_s` (a null one starts
its history afresh), and a bounded window of named samples; vanished cgroups are forgotten.
`judge_runs` judges two separate runs (`once --state`) by the same rules.

Modules: rules and gpu (one class per rule; defining one registers it), window (the named
sample, made from a record, and its storage), case (what a rule judges), detector (the
tick), runs (two runs), event (the record), kills (the oom_kill events: the OOM counters'
rises and the kernel log's kills, one per kill).
"""

from cgstat.events.detector import EventDetector
from cgstat.events.event import EVENT_SCHEMA, make_event
from cgstat.events.rules import KINDS
from cgstat.events.runs import judge_runs, state_extras
from cgstat.events.thresholds import Thresholds
from cgstat.events.window import fit_line

__all__ = ["EVENT_SCHEMA", "KINDS", "EventDetector", "Thresholds", "fit_line", "judge_runs", "make_event",
           "state_extras"]
