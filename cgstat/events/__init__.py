"""Diagnostics events: the rules of thumb people apply to `docker stats` beside `nvidia-smi`,
turned into `type: "event"` records (docs/events.md has every rule and threshold).
`EventDetector.observe(records)` gives a tick's events, `watch(records)` the same for
records that come one at a time, `judge_runs` judges two `once --state` runs by the same rules.
Modules: rules, gpu and gpu_health (one class per rule; defining one registers it),
thresholds, window (the named sample), case (what a rule judges), detector (the tick), runs
(two runs), event (the record), kills (oom_kill events), gpuheld (GPU memory held per cgroup).
"""

from cgstat.events.detector import EventDetector
from cgstat.events.event import EVENT_SCHEMA, make_event
from cgstat.events.rules import KINDS
from cgstat.events.runs import judge_runs, state_extras
from cgstat.events.thresholds import Thresholds
from cgstat.events.window import fit_line

__all__ = ["EVENT_SCHEMA", "KINDS", "EventDetector", "Thresholds", "fit_line", "judge_runs", "make_event",
           "state_extras"]
