"""Whether a cgroup's record of this tick equals its last one but for the time.

An idle cgroup's reading is the same objects tick after tick (kernel/changes.py gives its
last Sample again with only the time replaced); with the same rates (none moved), the same
workload and the same network reading, its record equals last tick's but for `ts` and
`interval_s`, and what is made of the record alone need not be made again (the exit
ledger's running figures: pipeline/exits.py `again`). `SameRecords` keeps per cgroup, for
one tick, what its record was made of (not the record: ~25 KiB of Python objects each,
25 MiB at 1,000 cgroups). Reads no file.
"""

from __future__ import annotations

from typing import Dict, Optional

from cgstat.kernel.netns import NetworkResult
from cgstat.kernel.sample import Sample
from cgstat.naming.workload import Workload
from cgstat.pipeline.rates import Rates


class _Made:
    """What one cgroup's last record was made of."""

    __slots__ = ("sample", "rates", "workload", "net")

    def __init__(self, sample: Sample, rates: Rates, workload: Workload, net: Optional[NetworkResult]):
        self.sample = sample
        self.rates = rates
        self.workload = workload
        self.net = net


class SameRecords:
    """Per tick: `again()` for each cgroup record made without GPUs, then `end_tick()`."""

    __slots__ = ("_last", "_now", "same")

    def __init__(self) -> None:
        self._last: Dict[str, _Made] = {}
        self._now: Dict[str, _Made] = {}
        self.same = 0  # records found equal to the last ones, since made

    def again(self, sample: Sample, rates: Rates, workload: Workload, net: Optional[NetworkResult]) -> bool:
        """Whether the record made of these equals the cgroup's last one but for ts and
        interval_s."""
        path = sample.path
        last = self._last.pop(path, None)  # (let go as the tick goes)
        self._now[path] = _Made(sample, rates, workload, net)
        if last is None:
            return False
        old = last.sample
        if not (sample.cpu is old.cpu and sample.memory is old.memory and sample.io is old.io
                and sample.pids is old.pids and sample.pressure is old.pressure and sample.errors is old.errors
                and sample.paths is old.paths):
            return False
        if rates[1:] != last.rates[1:]:  # all but interval_s (the first field)
            return False
        if workload == last.workload and net == last.net:
            self.same += 1
            return True
        return False

    def end_tick(self) -> None:
        """The tick's records are made: forget the cgroups it had none of."""
        self._last, self._now = self._now, {}
