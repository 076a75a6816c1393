"""The agent: one tick = discover cgroups, read them, derive rates, build records.

Data flows one way: host files -> Sample (cgroups.py) -> Rates (model.py) -> record
(record.py) -> sink (sinks.py). The agent keeps only what rates need between ticks: the
previous Counters of each cgroup still present.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Dict, List, Optional, Pattern, Tuple

from cgstat import sdnotify
from cgstat.errors import CgstatError
from cgstat.kernel.cgroups import read_cgroup
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.hierarchy import NoCgroupFS, detect
from cgstat.kernel.host import HostClock, host_root_note, read_host
from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.sample import Sample
from cgstat.naming import runtimes as containers
from cgstat.naming.devices import DeviceNames
from cgstat.naming.paths import PathInfo, classify
from cgstat.naming.pids import PidMapper, pid_namespace_note
from cgstat.outputs.jsonl import ReaderGone, Sink, SinkError
from cgstat.pipeline import state as statefile
from cgstat.pipeline.diagnostics import Warner
from cgstat.pipeline.rates import Counters, counters, derive
from cgstat.pipeline.record import build
from cgstat.pipeline.select import select
from cgstat.text import dumps_record, quote

_QUIET_ERRORS = {"missing", "unavailable", "gone"}


class Agent:
    def __init__(self, host_root: str = "/", all_cgroups: bool = False,
                 match: Optional[Pattern[str]] = None, warner: Optional[Warner] = None,
                 read_state: bool = True, max_user_cgroups: Optional[int] = 1000):
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
        self.names = DeviceNames(self.fs)
        self.all_cgroups = all_cgroups
        self.match = match
        self.identities = containers.Identities(self.fs, self.warner.once, read_state)
        self.previous: Dict[str, Counters] = {}
        self._classified: Dict[str, PathInfo] = {}
        note = pid_namespace_note(self.fs)
        if note:
            self.warner.once("pidns", note)
        note = host_root_note(self.fs)
        if note:
            self.warner.once("hostroot", note)

    def collect(self) -> List[Tuple[Sample, PathInfo, bool]]:
        """Read every selected cgroup once."""
        ids = self.identities
        self.clock.start_tick()
        cgroups = self.discoverer.join()
        # What each path says, kept only for the cgroups that still exist (a cache that
        # followed churn would grow for ever).
        known = self._classified
        self._classified = {cg.path: known.get(cg.path) or classify(cg.path) for cg in cgroups}
        classified = [(cg, self._classified[cg.path]) for cg in cgroups]
        ids.retain(x for _, info in classified for x in (info.id, info.pod_uid) if x)
        ids.refresh_if_new(info for _, info in classified)
        ids.note_pod_members(info for cg, info in classified
                             if info.pod_uid and not ids.is_sandbox(info, cg.folders[0].local))
        selected, what = select(classified, self.all_cgroups, self.match,
                                lambda cg, info: ids.is_sandbox(info, cg.folders[0].local))
        self.warner.once("selection", f"{self.layout.kind} cgroup layout; showing {what}")
        out = []
        for cg, info in selected:
            sandbox = ids.is_sandbox(info, cg.folders[0].local)
            now = self.clock.monotonic()
            sample = read_cgroup(cg, self.layout, now, self.clock.wall(now))
            if sample.gone and not all(os.path.isdir(f.local) for f in cg.folders):
                continue  # removed while we read it: its record stops here
            for p in sample.errors:
                if p.error not in _QUIET_ERRORS:
                    self.warner.warn(f"{p.source}:{p.error}", f"{quote(cg.path)}: {p.source}: {p.error}: {p.detail}")
            out.append((sample, info, sandbox))
        return out

    def render(self, samples: List[Tuple[Sample, PathInfo, bool]],
               previous: Dict[str, Counters]) -> Tuple[List[bytes], Dict[str, Counters]]:
        """Records as JSON lines, and the counters to compare the next tick with."""
        lines = []
        current: Dict[str, Counters] = {}
        for sample, info, sandbox in samples:
            c = counters(sample)
            current[sample.path] = c
            rates = derive(previous.get(sample.path), c, self.host.cpus_online)
            container = self.identities.container(info)
            if container is not None and sandbox:
                container["sandbox"] = True
            kind = "pod" if info.kind == "pod" else "cgroup"
            pod = container["pod"] if container is not None else self.identities.pod(info)
            record = build(sample, rates, self.host, self.names, container, info.unit, kind, pod)
            line = dumps_record(record)
            if line is None:
                self.warner.warn("unserialisable", f"{quote(sample.path)}: record dropped: it cannot be written as JSON")
                continue
            lines.append(line + b"\n")
        return lines, current

    def tick(self) -> List[bytes]:
        lines, self.previous = self.render(self.collect(), self.previous)
        return lines


class _Stopper:
    """SIGTERM/SIGINT end the stream after the line being written; SIGHUP reopens."""

    def __init__(self, heartbeat_s: Optional[float] = None):
        self.stop = False
        self.reopen = False
        self.sleeping = False
        # Under a systemd watchdog: a sleep longer than half of WatchdogSec= (an --interval
        # of minutes) still says "alive" in time; the pings between ticks are not the point
        # (a hung tick is), so they come only that often.
        self.heartbeat_s = heartbeat_s

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_stop(self, signum, frame) -> None:
        self.stop = True
        if self.sleeping:
            raise _Wake()

    def _on_hup(self, signum, frame) -> None:
        self.reopen = True

    def sleep_until(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or self.stop:
            return
        self.sleeping = True
        try:
            while remaining > 0 and not self.stop:
                if self.heartbeat_s is not None and remaining > self.heartbeat_s:
                    time.sleep(self.heartbeat_s)
                    sdnotify.watchdog()
                else:
                    time.sleep(remaining)
                remaining = deadline - time.monotonic()
        except _Wake:
            pass
        finally:
            self.sleeping = False


class _Wake(Exception):
    pass


def run_stream(agent: Agent, sink: Sink, interval_s: float, count: Optional[int]) -> int:
    """Batches every interval on a drift-free schedule (start + k * interval)."""
    sink.open()  # an output that can't be opened fails the run now, not silently later
    watchdog_s = sdnotify.watchdog_interval_s()
    if watchdog_s is not None:
        import faulthandler

        faulthandler.enable()  # systemd's watchdog sends SIGABRT: where it hung goes to the journal
    stopper = _Stopper(watchdog_s / 2 if watchdog_s else None)
    stopper.install()
    warner = agent.warner
    start = time.monotonic()
    agent.tick()  # prime: the first batch, one interval later, has rates
    sdnotify.ready()  # Type=notify: started once the first sample is in
    slot = 1
    batches = 0
    try:
        while not stopper.stop:
            stopper.sleep_until(start + slot * interval_s)
            if stopper.stop:
                break
            if stopper.reopen:
                stopper.reopen = False
                sink.reopen()
            began = time.monotonic()
            lines = agent.tick()
            try:
                sink.write(lines)
            except SinkError as exc:
                warner.warn("sink", str(exc))
            sdnotify.watchdog()  # a tick finished: a hung read or write stops these
            batches += 1
            if count is not None and batches >= count:
                break
            now = time.monotonic()
            took = now - began
            if took > interval_s:
                warner.warn("slow", f"a tick took {took:.3f} s, longer than the {interval_s:g} s interval; "
                                    "skipping the missed slots")
            slot = max(slot + 1, int((now - start) / interval_s) + 1)
    except ReaderGone:
        return 0
    finally:
        sdnotify.stopping()
        sink.close()
    if sink.dropped_lines:
        warner.warn("dropped", f"{sink.dropped_lines} lines dropped while the output failed")
    return 0


def run_once(agent: Agent, sink: Sink, state_path: Optional[str], window_s: float) -> int:
    """One batch: rates against the saved state, or over a window of two samples.

    SIGTERM/SIGINT during the window end the run quietly (nothing written); during the
    write they let the batch finish, so a killed cron run never leaves half a line.
    """
    stopper = _Stopper()
    stopper.install()
    try:
        sink.open()
        if state_path:
            # Checked, locked and ready to be replaced before anything is printed.
            with statefile.StateFile(state_path) as state:
                previous, why = state.load(agent.host.boot_id, agent.clock.monotonic())
                if why:
                    agent.warner.warn("state", why)
                lines, current = agent.render(agent.collect(), previous)
                sink.write(lines)
                state.save(agent.host.boot_id, agent.fs.root, agent.clock.monotonic(), current)
        else:
            previous = {}
            if window_s > 0:
                _, previous = agent.render(agent.collect(), {})
                stopper.sleep_until(time.monotonic() + window_s)
                if stopper.stop:
                    return 0
            lines, _ = agent.render(agent.collect(), previous)
            sink.write(lines)
    except ReaderGone:
        return 0
    finally:
        sink.close()
    return 0


def run_pid(agent: Agent, pids: List[int]) -> int:
    """One JSON object per PID on stdout."""
    mapper = PidMapper(agent.fs, agent.layout, agent.identities)
    sink = Sink(None)
    try:
        sink.write([(dumps_record(mapper.describe(pid)) or b"{}") + b"\n" for pid in pids])
    except ReaderGone:
        return 0
    return 0
