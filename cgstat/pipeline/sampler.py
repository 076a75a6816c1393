"""The sampler: one tick = discover cgroups, read them, derive rates, name the workloads,
build records (plain dicts, the objects that are streamed). `Sampler` is also the Python API
(`cgstat.Sampler`, docs/usage.md): `tick()` returns the records of one tick (the first
tick's rates are null), `records()` makes the same records one at a time, `close()` releases
what it holds. Reads host files only through kernel/, naming/ and gpu/ (cgroup files, the
kernel log, /proc, NVML).
"""

from __future__ import annotations

import gc
import operator
import os
import time
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Pattern, TYPE_CHECKING, Tuple, Union

from cgstat.errors import CgstatError
from cgstat.kernel.changes import DEFAULT_FULL_EVERY_S, ChangeReader
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.handles import KeptFiles
from cgstat.kernel.hierarchy import detect
from cgstat.kernel.host import HostClock, host_root_note, read_host
from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.kmsg import KmsgFollower, KmsgUnavailable
from cgstat.kernel.xid_report import XidReport
from cgstat.kernel.sample import Sample
from cgstat.kernel.tree import Cgroup
from cgstat.naming.oom_victims import KillNamer, LateCount, NamedKill
from cgstat.naming.paths import PathInfo, classify
from cgstat.naming.runtimes.daemons import DaemonConfig
from cgstat.naming.pids import pid_namespace_note
from cgstat.naming.workload import Namer, Workload
from cgstat.diagnostics import Warner
from cgstat.pipeline.rates import Counters, Rates, counters, derive
from cgstat.pipeline.gpustage import GpuStage
from cgstat.pipeline.build import build
from cgstat.pipeline.same import SameRecords
from cgstat.pipeline.select import Selected, Shown, compile_match, select, would_select
from cgstat.text import quote
from cgstat.timestamps import rfc3339

if TYPE_CHECKING:  # imported where used: a run without GPUs or network namespaces never loads them
    from cgstat.contract.types import GpuProcessUse, Sampled
    from cgstat.kernel.memevents import MemoryEventsWatcher
    from cgstat.gpu.attribution import Attributed
    from cgstat.gpu.reading import GpuSnapshot
    from cgstat.kernel.netns import NetnsReader, NetworkResult, NetworkSample
    from cgstat.pipeline.exits import ExitLedger
    from cgstat.pipeline.processes import TopProcesses

_QUIET_ERRORS = {"missing", "unavailable", "gone"}


# Data flows one way: host files -> Sample (kernel/cgroups.py) -> Rates (pipeline/rates.py)
# -> who each workload is (naming/) -> record (cgstat/pipeline/build.py); sinks and views
# (outputs/) only format the records. The sampler keeps between ticks what rates need (the
# previous Counters of each cgroup still present) and last tick's cgroups with what their
# paths say (classified again only when the tree changed). A tick reads one cgroup at a
# time, as its record is made.
class Sampler:
    """Samples the host's cgroups, tick after tick.

    `host_root`: where the host's / is (a recorded tree, or the host mounted in a
    container). `all`: every cgroup, not only workloads. `match`: a regular expression
    (string or compiled) on cgroup paths. `max_user_cgroups`: cgroups walked per user's
    delegated subtree. `follow`: walk the folders once and follow them with inotify (a
    long run); False walks them on every tick (a one-shot, where watching every folder
    would be work for nothing). The kernel log's OOM reports and v2 memory.events as they
    change are followed once asked (`follow_kernel_log()`, `watch_memory_events()`: the run
    modes do; each holds a descriptor, the second a thread, until close()); `kernel_log`: a
    KmsgFollower to read instead (a recorded log). `daemons`: Docker's data root and socket
    when given (--docker-data-root, --docker-host), else found (naming/runtimes/daemons.py).
    `warner`: where notices go (what is shown, what can't be read, each once): a
    `Warner()` writes them to stderr as the CLI does, `Warner(handler=f)` passes each to f
    as a Diagnostic(key, message); by default they are dropped. `full_read_every_s`: how
    long an idle cgroup keeps its last full read's values (kernel/changes.py; 0: --full-read).
    Raises CgstatError (one line) when the host can't be read.
    """

    def __init__(self, host_root: str = "/", all: bool = False,
                 match: Union[None, str, Pattern[str]] = None, warner: Optional[Warner] = None,
                 read_state: bool = True, max_user_cgroups: Optional[int] = 1000, gpu: bool = True,
                 follow: bool = True, kernel_log: Optional[KmsgFollower] = None,
                 daemons: DaemonConfig = DaemonConfig(), full_read_every_s: float = DEFAULT_FULL_EVERY_S):
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
        self.layout = detect(self.fs)  # NoCgroupFS is a CgstatError: one line, exit 1
        self.host = read_host(self.fs)
        self.clock = HostClock(self.fs, self.host.live)
        # The Python API prints nothing unless given a Warner (the CLI gives one on stderr).
        self.warner = warner if warner is not None else Warner(handler=_unsaid)
        # The descriptors kept for cgroup files, read by read_cgroup, closed as the
        # discoverer sees folders go, and all at close().
        self.kept = KeptFiles()
        self.changes = ChangeReader(self.layout, self.kept, full_read_every_s)
        # an idle cgroup's values are its kept Sample's: the files' parsed values aren't kept too
        self.kept.remember = full_read_every_s <= 0
        self._same = SameRecords() if full_read_every_s > 0 else None  # (no reading is reused otherwise)
        self.discoverer = Discoverer(self.fs, self.layout, max_user_cgroups=max_user_cgroups,
                                     warn=self.warner.once, follow=None if follow else False, kept=self.kept)
        self.all_cgroups = all_cgroups
        self.match = match
        self.namer = Namer(self.fs, self.layout, self.warner.once, read_state, daemons)
        # GPUs only on the live kernel (a recorded tree's processes aren't NVML's); pynvml
        # is imported on the first read, never at start-up.
        self._gpus: Optional[GpuStage] = None
        if gpu and self.host.live:
            from cgstat.gpu.nvml import Gateway, driver_version_file

            self._gpus = GpuStage(Gateway(self.warner.once, driver_file=driver_version_file(self.fs.root)),
                                  self.warner.once, self.namer, self.warner.warn)
        # Network namespaces are read through member processes' /proc/<pid>/ns/net: only on
        # the live kernel (a recording has no namespaces to open).
        self._netns: Optional[NetnsReader] = None
        if self.host.live:
            from cgstat.kernel.netns import NetnsReader

            self._netns = NetnsReader(self.fs)
        self.previous: Dict[str, Counters] = {}
        self.exits: Optional[ExitLedger] = None  # track_exits(): a record of each workload's life
        self.processes: Optional[TopProcesses] = None  # watch_processes(): each record's largest processes
        self._classified: Dict[str, PathInfo] = {}
        # Last tick's cgroups, what their paths say, and the selection made of them.
        self._tree: Tuple[List[Cgroup], List[Tuple[Cgroup, PathInfo]], Optional[Shown]] = ([], [], None)
        self._shown_kind: Optional[str] = None  # what kind of set the last tick showed (said when it changes)
        self.kills: List[NamedKill] = []  # the last tick's OOM kills from the kernel log
        # Every kill the log reports, wherever it happened (NamedKill.selected says whether
        # its cgroup is one the records show); False: only those (`--oom-kills shown`)
        self.kills_outside_shown = True
        self.xids: List[XidReport] = []  # the last tick's XIDs the NVIDIA driver logged
        self.late_counts: List[LateCount] = []  # gone cgroups' OOM-kill counters read as they changed
        self._memevents: Optional[MemoryEventsWatcher] = None
        self._followed: Any = None  # the selection whose memory.events are watched
        self._kmsg: Optional[KmsgFollower] = None
        self._kill_namer = KillNamer(self.layout, self.namer)
        if kernel_log is not None:
            self._kmsg = kernel_log
        note = pid_namespace_note(self.fs)
        if note:
            self.warner.once("pidns", note)
        note = host_root_note(self.fs)
        if note:
            self.warner.once("hostroot", note)

    def follow_kernel_log(self, after_seq: Optional[int] = None, numbered: bool = False,
                          since_usec: Optional[int] = None) -> bool:
        """Read the kernel log's OOM reports from now on (after record `after_seq` when given:
        a position saved by an earlier run of this boot; `numbered`: know where "now" is
        even before a record comes; `since_usec`: from the backlog, the kills since then or
        since a restarted agent's last read; see KmsgFollower). False, said once, when it can't be
        read (not root, kernel.dmesg_restrict) or the host is a recording (no log: nothing said)."""
        if not self.host.live:
            return False
        from cgstat import sdnotify

        try:
            # under systemd the units pass /dev/kmsg open (systemd/cgstat-kmsg*.socket)
            self._kmsg = KmsgFollower(after_seq=after_seq, numbered=numbered, fd=sdnotify.listen_fd("kmsg"),
                                      since_usec=since_usec)
        except KmsgUnavailable as exc:
            self.warner.once("kmsg", f"{exc.reason}: OOM kills of cgroups removed before the next tick "
                             "can't be seen, nor who was killed; the OOM-kill counters are still reported")
            return False
        return True

    def watch_memory_events(self) -> bool:
        """v2: read each reported cgroup's memory.events the moment the kernel says it
        changed (kernel/memevents.py), so a kill's count is known before its cgroup goes.
        False where there is no v2 memory controller or no inotify instance to spare."""
        if self.layout.kind != "v2" or self._memevents is not None:
            return self._memevents is not None
        from cgstat.kernel.memevents import MemoryEventsWatcher

        try:
            self._memevents = MemoryEventsWatcher()
        except OSError:
            return False
        return True

    @property
    def kernel_log_seq(self) -> Optional[int]:
        """The last kernel log record read (None: not following, or nothing read yet)."""
        return None if self._kmsg is None else self._kmsg.last_seq

    @property
    def gpu_marks(self) -> Dict[str, Any]:
        """Per GPU, what the next reading averages per-process utilization from (a cron
        run's --state keeps it, so each run averages over the whole minute since the last)."""
        return self._gpus.gateway.utilization_marks() if self._gpus is not None else {}

    def restore_gpu_marks(self, marks: Any) -> None:
        if self._gpus is not None:
            self._gpus.gateway.restore_utilization_marks(marks)

    def same_record(self, path: str) -> bool:
        """Whether this tick's record of the cgroup at `path`, made already, equals its last
        one but for ts and interval_s (pipeline/same.py): the events' window takes the last
        sample again (Runner hands this to the detector)."""
        return self._same is not None and self._same.is_same(path)

    def track_exits(self) -> None:
        """From now on, an exit record (pipeline/exits.py) in the tick after a cgroup goes."""
        if self.exits is None:
            from cgstat.pipeline.exits import ExitLedger

            self.exits = ExitLedger()

    def watch_processes(self, n: int, by: str = "pss") -> None:
        """From now on, each cgroup and pod record holds its `n` largest processes by `by`
        ("pss" or "cpu"): pipeline/processes.py."""
        from cgstat.pipeline.processes import TopProcesses

        self.processes = TopProcesses(self.fs, self.layout, n, by)

    def collect(self) -> Collected:
        """Read every selected cgroup once, and the GPUs; say who each workload is."""
        return self._collect(lazy=False)

    def _collect(self, lazy: bool) -> Collected:
        """What collect() says; `lazy`: the cgroups are read as `samples` is iterated (once),
        so that a tick holds one sample at a time, not every one (~2 KiB each)."""
        namer = self.namer
        self.clock.start_tick()
        cgroups = self.discoverer.join()
        last = self._tree
        if len(last[0]) == len(cgroups) and all(map(operator.is_, last[0], cgroups)):
            # The same cgroups as last tick (the walk keeps them while nothing changed):
            # what each path says is known, and so is a selection by --match or --all.
            classified, selection = last[1], last[2]
        else:
            # What each path says, kept only for the cgroups that still exist (a cache that
            # followed churn would grow for ever).
            known = self._classified
            self._classified = {cg.path: known.get(cg.path) or classify(cg.path) for cg in cgroups}
            classified = [(cg, self._classified[cg.path]) for cg in cgroups]
            selection = None
            if (self._kmsg is not None or self._memevents is not None) and last[1]:
                # named while the naming stage still knows them: a kill the log reports
                # after its cgroup went keeps the name it had
                now = set(map(id, cgroups))
                self._kill_namer.note_gone([(cg, info) for cg, info in last[1] if id(cg) not in now],
                                           [cg.path for cg, _ in last[2][0]] if last[2] else ())
        named = namer.begin_tick(classified)
        if named is not classified:
            # candidates a runtime knows are containers: what select() sees, this tick
            classified, selection = named, (selection if named is last[1] else None)
        if selection is None or (self.match is None and not self.all_cgroups):
            # (the default selection leaves pod sandboxes out: runtime state, per tick)
            selection = select(classified, self.all_cgroups, self.match, namer.is_sandbox)
        self._tree = (cgroups, classified, selection)
        selected = selection.cgroups
        if self._memevents is not None and selection is not self._followed:
            self._followed = selection
            unified = self.layout.unified
            self._memevents.follow({cg.path: f.local for cg, _ in selected
                                    for f in [cg.folder(unified)] if f is not None} if unified else {})
        self._say_shown(selection)
        # Network namespaces and GPUs first (they need only which cgroups): the cgroups'
        # own files are then read one by one as the records are made.
        network: Dict[str, NetworkResult] = {}
        self.changes.begin_tick()  # before still(): what this tick reads of each cgroup starts here
        if self._netns is not None:
            still = {cg.path for cg, _ in selected if self.changes.still(cg)}  # last tick's netns
            members = namer.member_pids((cg for cg, _ in selected), still)
            network = self._netns.read(members, namer.subtrees, still)
            if self._netns.host.note:
                self.warner.once("netns-host", self._netns.host.note)
        gpu = self._read_gpus()
        samples = self._read(selected)
        return Collected(samples if lazy else list(samples), network, *gpu)

    def _say_shown(self, shown: Shown) -> None:
        """What is shown, said at the start and again when its kind changes: the root's
        children give way to the first container and come back when the last one goes,
        and a --match that matched nothing matches something. Per kind at most every
        repeat window (a set that flips every tick is said twice, not every tick)."""
        last, self._shown_kind = self._shown_kind, shown.kind
        if last is None:
            self.warner.once("selection", f"{self.layout.kind} cgroup layout; showing {shown.what}")
        elif shown.kind != last:
            self.warner.warn(f"selection:{shown.kind}", f"now showing {shown.what}")

    def _read(self, selected: Selected) -> Iterator[Tuple[Sample, Workload]]:
        namer = self.namer
        clock = self.clock
        changes = self.changes
        if self._memevents is not None:
            changes.mark(self._memevents.pending())  # memory.events changed: read in full
        for cg, info in selected:
            now = clock.monotonic()
            sample = changes.read(cg, now, clock.wall(now))
            if sample.gone and not all(os.path.isdir(f.local) for f in cg.folders):
                continue  # removed while we read it: its record stops here
            for p in sample.errors:
                if p.error not in _QUIET_ERRORS:
                    self.warner.warn(f"{p.source}:{p.error}", f"{quote(cg.path)}: {p.source}: {p.error}: {p.detail}")
            yield sample, namer.workload(cg, info, sample)
        changes.end_tick()

    def _read_gpus(self) -> Tuple[Optional[GpuSnapshot], Tuple[Attributed, ...], float]:
        """NVML's view and who each GPU process is; (None, (), now) when GPU metrics are off."""
        if self._gpus is None:
            return None, (), time.monotonic()
        return self._gpus.read(self._classified)

    def gpu_deadline(self, seconds: float) -> None:
        """Read NVML on a thread of its own, each tick waiting for it at most `seconds`
        (gpu/beside.py): a hung driver call then never holds the cgroup records."""
        if self._gpus is not None:
            self._gpus.reads.deadline_s = seconds

    @property
    def gpu_reads_late_total(self) -> int:
        """Ticks that went on without their GPU read (past the gpu_deadline)."""
        return 0 if self._gpus is None else self._gpus.reads.late_total

    @property
    def gpu_call_errors(self) -> Dict[Tuple[str, str], int]:
        """(GPU UUID, NVML call) -> the calls that failed so far, as of the last reading on time."""
        return {} if self._gpus is None else self._gpus.reads.error_counts

    def advance(self, tick: Collected) -> Dict[str, Counters]:
        """The counters of a warm-up sample: what the next tick's rates start from."""
        if tick.gpu is not None and self._gpus is not None:
            self._gpus.advance(tick.gpu, tick.gpu_time_s)
        return {sample.path: counters(sample, self._net_sample(tick, sample.path)) for sample, _ in tick.samples}

    @staticmethod
    def _net_sample(tick: "Collected", path: str) -> Optional[NetworkSample]:
        result = tick.network.get(path)
        return None if result is None else result.network

    def render(self, tick: Collected,
               previous: Dict[str, Counters]) -> Tuple[List[Sampled], Dict[str, Counters]]:
        """The records (cgroups, then GPUs), and the counters to compare the next tick with."""
        current: Dict[str, Counters] = {}
        return list(self._render(tick, previous, current)), current

    def _render(self, tick: Collected, previous: Dict[str, Counters],
                current: Dict[str, Counters]) -> Iterator[Sampled]:
        """The records one by one; fills `current` with the counters as it goes."""
        subtrees: Dict[str, Any] = {}
        energy: Dict[str, float] = {}
        made: Dict[int, Any] = {}  # this tick's GPU process entries and gpu objects (gpu/attribution.cgroup_gpu)
        if tick.gpu is not None:
            from cgstat.gpu.attribution import by_subtree, cgroup_gpu

            subtrees = by_subtree(tick.attributed)
            if self._gpus is not None and self._gpus.energy is not None and not tick.gpu.late:
                energy = self._gpus.energy.by_subtree()
        network = tick.network
        host = self.host
        cpus = host.cpus_online
        exits = self.exits
        processes = self.processes
        if processes is not None:
            processes.begin_tick()
        same = self._same
        if same is not None:
            same.begin_tick()
        gpus = tick.gpu is not None and not tick.gpu.late
        for sample, workload in tick.samples:
            path = sample.path
            net = network.get(path)
            prev = previous.get(path)
            # an idle cgroup (pipeline/same.py): its counters stood still for two ticks, so its
            # rates are the last ones over this interval, exactly what derive() would give
            last = same.last_of(sample, workload, net) if same is not None else None
            if (last is not None and last.same and last.rates[0] is not None and prev is not None
                    and prev.time_s == last.time_s and sample.time_s > prev.time_s):
                c = current[path] = tuple.__new__(Counters, (prev[0], sample.time_s) + prev[2:])
                rates = tuple.__new__(Rates, (sample.time_s - prev.time_s,) + last.rates[1:])
            else:
                c = current[path] = counters(sample, None if net is None else net.network)
                rates = derive(prev, c, cpus)
            gpu = cgroup_gpu(subtrees.get(path, ()), energy.get(path, 0.0), made) if gpus else None
            record = build(sample, rates, workload, host, gpu, net)
            if processes is not None:
                processes.add(record)
            # equal to its last record but for the time: what is made of it alone is kept
            if gpu is None and same is not None and same.made(sample, rates, workload, net, last):
                if exits is not None:
                    exits.again(record)
            elif exits is not None:
                exits.see(record)
            yield record
        if processes is not None:
            processes.end_tick()
        if same is not None:
            same.end_tick()
        self._read_kills()
        if tick.gpu is not None and self._gpus is not None:
            yield from self._gpus.records(tick.gpu, tick.attributed, tick.gpu_time_s, host)
        if exits is not None:
            # the cgroups gone since the last tick (no longer discovered), after this tick's
            # records: their totals as of their last record
            from cgstat.pipeline.exits import folders_there  # loaded with the ledger

            mounts = {h.name: h.mount_dir for h in self.layout.hierarchies}
            yield from exits.end_tick(self._classified, self.kills, rfc3339(time.time()),
                                      lambda paths: folders_there(mounts, paths))

    # After a tick's records, `kills` holds the OOM kills the kernel log reported since the
    # tick before (kernel/kmsg.py), named (cgstat/naming/oom_victims.py), also those of cgroups
    # the records don't show (`kills_outside_shown`): the log is read after the cgroups, so a
    # kill counted in a record is in the same tick's log; `xids` the NVIDIA driver's XIDs it
    # carried.
    def _read_kills(self) -> None:
        """The kernel log since the last tick: this tick's OOM kills, named (after the
        cgroups were read: see the comment above)."""
        self.kills = []
        self.xids = []
        self.late_counts = []
        if self._memevents is not None:
            counts = self._memevents.take()
            self.changes.mark(counts)  # changed after this tick read it, maybe: in full next tick
            if counts:
                selection = self._tree[2]
                self.late_counts = self._kill_namer.late(counts, [cg.path for cg, _ in selection[0]] if selection else ())
        follower = self._kmsg
        if follower is None:
            return
        batch = follower.read()
        if batch.lost:
            self.warner.warn("kmsg-lost", f"kernel log: {batch.lost} records were overwritten before cgstat "
                             "read them; OOM kills among them are counted only by the cgroups' counters")
        self.xids = list(batch.xids)
        if not batch.kills:
            return
        _, classified, selection = self._tree
        match, all_cgroups = self.match, self.all_cgroups
        named = self._kill_namer.name(
            batch.kills, classified, [cg.path for cg, _ in selection[0]] if selection else (),
            lambda path, info: would_select(path, info, all_cgroups, match))
        self.changes.mark(k.cgroup for k in named if k.cgroup is not None)  # read in full next tick
        if self.kills_outside_shown:
            self.kills = named  # a kill is worth saying wherever it happens
        else:
            # A kill the log can't place (a storm) is kept unless --match asked for a subset.
            self.kills = [k for k in named if k.selected and (k.named_by != "none" or match is None)]

    def warm_up(self) -> None:
        """A tick that only advances the counters (no records are built)."""
        paused = _pause_gc()
        try:
            self.previous = self.advance(self._collect(lazy=True))
        finally:
            if paused:
                gc.enable()

    def tick(self) -> List[Sampled]:
        """The records of one tick, with rates since the previous tick (null on the first)."""
        return list(self.records())

    def records(self) -> Iterator[Sampled]:
        """The records of one tick, as tick() returns them, made one at a time as each
        cgroup is read: a consumer that keeps none (stream writing each to its output)
        holds one record of a tick, not all of them (~3.7 KiB each). The counters advance
        once the last record has been taken; a tick left unfinished leaves them as they were."""
        paused = _pause_gc()
        try:
            current: Dict[str, Counters] = {}
            yield from self._render(self._collect(lazy=True), self.previous, current)
            self.previous = current
        finally:
            if paused:
                gc.enable()

    def close(self) -> None:
        """Forget the previous tick; release the inotify watches (cgroups and runtime
        state), kept descriptors and NVML."""
        self.previous = {}
        self.discoverer.close()
        self.namer.close()
        self.kept.close_all()
        if self._kmsg is not None:
            self._kmsg.close()
        if self._memevents is not None:
            self._memevents.close()
        if self._gpus is not None:
            self._gpus.reads.close()


class Collected(NamedTuple):
    """What one tick read: each selected cgroup with its workload, and the GPUs."""

    samples: Iterable[Tuple[Sample, Workload]]  # iterated once (read as it is, in a tick)
    network: Dict[str, NetworkResult]  # cgroup path -> its network namespace's counters
    gpu: Optional[GpuSnapshot]  # None: GPU metrics off
    attributed: Tuple[Attributed, ...]  # every GPU process with who it is
    gpu_time_s: float  # time.monotonic() of the GPU read


def _unsaid(diagnostic: Any) -> None:
    """The handler of the Python API's default Warner: notices are dropped."""


def _pause_gc() -> bool:
    """Pause the cyclic garbage collector for one tick; True when it was running (and must
    be enabled again). A tick allocates tens of thousands of containers (samples, counters,
    records: ~28,000 at 1,000 cgroups) that live until the next tick, and the collector's
    passes over them, triggered by the allocations alone, were ~20 % of a tick's CPU there.
    Reference counting frees them as before; the structures built hold no cycles, and any
    that appear are collected after the tick."""
    if not gc.isenabled():
        return False
    gc.disable()
    return True
