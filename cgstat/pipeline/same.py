"""Whether a cgroup's record of this tick equals its last one but for the time.

An idle cgroup's reading is the same objects tick after tick (kernel/changes.py gives its
last Sample again with only the time replaced); with the same workload and the same
network reading, its counters are last tick's and its rates those of the tick before
(nothing moved, twice), so they are not derived again, and its record equals last tick's
but for `ts` and `interval_s`: what is made of the record alone need not be made again
(the exit ledger's running figures, pipeline/exits.py `again`; the events' window sample,
events/detector.py). `SameRecords` keeps per cgroup, for one tick, what its record was
made of (not the record: ~4.4 KiB of Python objects each, 4.4 MiB at 1,000 cgroups).
Reads no file.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from cgstat.kernel.netns import NetworkResult
from cgstat.kernel.sample import Sample
from cgstat.naming.workload import Workload
from cgstat.pipeline.rates import Rates


class Made:
    """What one cgroup's last record was made of, at `time_s`; `same`: it equalled the one
    before but for its time (so its rates are those of counters that stood still). Where
    it did, the objects kept are the first of the run of equal ones (a Sample of the same
    parts, equal rates but for the interval): a tick's own are let go with its record."""

    __slots__ = ("sample", "rates", "workload", "net", "same", "time_s")

    def __init__(self, sample: Sample, rates: Rates, workload: Workload, net: Optional[NetworkResult], same: bool,
                 time_s: float):
        self.sample = sample
        self.rates = rates
        self.workload = workload
        self.net = net
        self.same = same
        self.time_s = time_s


class SameRecords:
    """Per tick, for each cgroup record made without GPUs: `last_of()` before its rates,
    `made()` after, then `end_tick()`."""

    __slots__ = ("_last", "_now", "same", "_shared")

    def __init__(self) -> None:
        self._last: Dict[str, Made] = {}
        self._now: Dict[str, Made] = {}
        self.same = 0  # records found equal to the last ones, since made
        # rates and workloads kept, by what makes them equal: idle cgroups' are mostly alike
        self._shared: Dict[Any, Any] = {}

    def begin_tick(self) -> None:
        """A tick left unfinished (its consumer stopped) leaves nothing to compare with."""
        if self._now:
            self._last, self._now = {}, {}

    def last_of(self, sample: Sample, workload: Workload, net: Optional[NetworkResult]) -> Optional[Made]:
        """What the cgroup's last record was made of where this reading is the same objects
        (a reused read) with the same workload and network, else None; taken (once a tick)."""
        last = self._last.pop(sample.path, None)  # (let go as the tick goes)
        if last is None:
            return None
        old = last.sample
        if not (sample.cpu is old.cpu and sample.memory is old.memory and sample.io is old.io
                and sample.pids is old.pids and sample.pressure is old.pressure and sample.errors is old.errors
                and sample.paths is old.paths and sample.inodes is old.inodes):
            return None
        if net is not last.net and net != last.net:
            return None
        if workload != last.workload:
            return None
        return last

    def made(self, sample: Sample, rates: Rates, workload: Workload, net: Optional[NetworkResult],
             last: Optional[Made]) -> bool:
        """Keep what this record was made of; whether it equals the last one but for ts and
        interval_s (`last`: what last_of() gave)."""
        if last is not None and (rates is last.rates or rates[1:] == last.rates[1:]):  # all but interval_s
            self._now[sample.path] = Made(last.sample, last.rates, last.workload, last.net, True, sample.time_s)
            self.same += 1
            return True
        self._now[sample.path] = Made(sample, self._rates(rates), self._workload(workload), net, False,
                                      sample.time_s)
        return False

    def _rates(self, rates: Rates) -> Rates:
        """An equal Rates already kept, or these (the interval is not compared: made() and
        the sampler read only whether it is known)."""
        devices, network = rates.devices, rates.network
        try:
            key = ("rates", rates[0] is None, rates[1:7], None if devices is None else tuple(devices.items()), network)
            return self._shared.setdefault(key, rates)  # type: ignore[no-any-return,unused-ignore]
        except TypeError:
            return rates

    def _workload(self, workload: Workload) -> Workload:
        """An equal Workload already kept, or this one: its container and pod objects by
        identity (the table keeps them alive, so no identity is reused meanwhile)."""
        try:
            key = ("workload", workload.kind, workload.unit, id(workload.container), id(workload.pod), workload.sandbox,
                   tuple(workload.device_names.items()))
            return self._shared.setdefault(key, workload)  # type: ignore[no-any-return,unused-ignore]
        except (TypeError, AttributeError):  # (not a Workload: the Python API's callers' own)
            return workload

    def is_same(self, path: str) -> bool:
        """Whether this tick's record of the cgroup at `path` equals its last one but for
        ts and interval_s (as made() said)."""
        made = self._now.get(path)
        return made is not None and made.same

    def end_tick(self) -> None:
        """The tick's records are made: forget the cgroups it had none of."""
        self._last, self._now = self._now, {}
        if len(self._shared) > 4 * len(self._last) + 256:  # (what no cgroup's book uses any more)
            self._shared = {}
