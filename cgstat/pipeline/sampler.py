"""The sampler: one tick = discover cgroups, read them, derive rates, name the workloads,
build records (plain dicts, the objects that are streamed).

Data flows one way: host files -> Sample (kernel/cgroups.py) -> Rates (pipeline/rates.py)
-> who each workload is (naming/) -> record (pipeline/record.py); sinks and views
(outputs/) only format the records. The sampler keeps only what rates need between
ticks: the previous Counters of each cgroup still present.

`Sampler` is also the Python API (`cgstat.Sampler`): `tick()` returns the records of one
tick (the first tick's rates are null), `close()` releases what it holds.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Pattern, Tuple, Union

from cgstat.errors import CgstatError
from cgstat.kernel.cgroups import read_cgroup
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.hierarchy import NoCgroupFS, detect
from cgstat.kernel.host import HostClock, host_root_note, read_host
from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.sample import Sample
from cgstat.naming.paths import PathInfo, classify
from cgstat.naming.pids import pid_namespace_note
from cgstat.naming.workload import Namer, Workload
from cgstat.pipeline.diagnostics import Warner
from cgstat.pipeline.rates import Counters, counters, derive
from cgstat.pipeline.record import build
from cgstat.pipeline.select import compile_match, select
from cgstat.text import quote

_QUIET_ERRORS = {"missing", "unavailable", "gone"}


class Sampler:
    """Samples the host's cgroups, tick after tick.

    `host_root`: where the host's / is (a recorded tree, or the host mounted in a
    container). `all`: every cgroup, not only workloads. `match`: a regular expression
    (string or compiled) on cgroup paths. `max_user_cgroups`: cgroups walked per user's
    delegated subtree. Raises CgstatError (one line) when the host can't be read.
    """

    def __init__(self, host_root: str = "/", all: bool = False,
                 match: Union[None, str, Pattern[str]] = None, warner: Optional[Warner] = None,
                 read_state: bool = True, max_user_cgroups: Optional[int] = 1000):
        if isinstance(match, str):
            try:
                match = compile_match(match)
            except ValueError as exc:
                raise CgstatError(f"match: {exc}") from None
        all_cgroups = all
        self.fs = HostFS(host_root)
        try:
            os.listdir(self.fs.root)
        except OSError as exc:
            raise CgstatError(f"cannot read host root {self.fs.root}: {exc.strerror}") from None
        try:
            self.layout = detect(self.fs)
        except NoCgroupFS as exc:
            raise CgstatError(str(exc)) from None
        self.host = read_host(self.fs)
        self.clock = HostClock(self.fs, self.host.live)
        self.warner = warner or Warner()
        self.discoverer = Discoverer(self.fs, self.layout, max_user_cgroups=max_user_cgroups,
                                     warn=self.warner.once)
        self.all_cgroups = all_cgroups
        self.match = match
        self.namer = Namer(self.fs, self.layout, self.warner.once, read_state)
        self.previous: Dict[str, Counters] = {}
        self._classified: Dict[str, PathInfo] = {}
        note = pid_namespace_note(self.fs)
        if note:
            self.warner.once("pidns", note)
        note = host_root_note(self.fs)
        if note:
            self.warner.once("hostroot", note)

    def collect(self) -> List[Tuple[Sample, Workload]]:
        """Read every selected cgroup once, and say who each one's workload is."""
        namer = self.namer
        self.clock.start_tick()
        cgroups = self.discoverer.join()
        # What each path says, kept only for the cgroups that still exist (a cache that
        # followed churn would grow for ever).
        known = self._classified
        self._classified = {cg.path: known.get(cg.path) or classify(cg.path) for cg in cgroups}
        classified = [(cg, self._classified[cg.path]) for cg in cgroups]
        namer.begin_tick(classified)
        selected, what = select(classified, self.all_cgroups, self.match, namer.is_sandbox)
        self.warner.once("selection", f"{self.layout.kind} cgroup layout; showing {what}")
        out = []
        for cg, info in selected:
            now = self.clock.monotonic()
            sample = read_cgroup(cg, self.layout, now, self.clock.wall(now))
            if sample.gone and not all(os.path.isdir(f.local) for f in cg.folders):
                continue  # removed while we read it: its record stops here
            for p in sample.errors:
                if p.error not in _QUIET_ERRORS:
                    self.warner.warn(f"{p.source}:{p.error}", f"{quote(cg.path)}: {p.source}: {p.error}: {p.detail}")
            out.append((sample, namer.workload(cg, info, sample)))
        return out

    def advance(self, samples: List[Tuple[Sample, Workload]]) -> Dict[str, Counters]:
        """The counters of a warm-up sample: what the next tick's rates start from."""
        return {sample.path: counters(sample) for sample, _ in samples}

    def render(self, samples: List[Tuple[Sample, Workload]],
               previous: Dict[str, Counters]) -> Tuple[List[Dict[str, Any]], Dict[str, Counters]]:
        """The records, and the counters to compare the next tick with."""
        records = []
        current: Dict[str, Counters] = {}
        for sample, workload in samples:
            c = counters(sample)
            current[sample.path] = c
            rates = derive(previous.get(sample.path), c, self.host.cpus_online)
            records.append(build(sample, rates, workload, self.host))
        return records, current

    def warm_up(self) -> None:
        """A tick that only advances the counters (no records are built)."""
        self.previous = self.advance(self.collect())

    def tick(self) -> List[Dict[str, Any]]:
        """The records of one tick, with rates since the previous tick (null on the first)."""
        records, self.previous = self.render(self.collect(), self.previous)
        return records

    def close(self) -> None:
        """Forget the previous tick (the sampler holds no descriptors between ticks)."""
        self.previous = {}
