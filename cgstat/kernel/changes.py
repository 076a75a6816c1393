"""Read what changed: a cgroup whose change signal stands still keeps its last Sample.

Reads each tick a cgroup's change signal (v2: cpu.stat, memory.current, pids.current; v1:
cpuacct.usage or cgroup2's cpu.stat, memory.usage_in_bytes, pids.current), and the cgroup's
files in full (kernel/cgroups.py) only when it moved, or the cgroup is new, marked or due
(see ChangeReader). docs/reading.md says which fields can be up to `full_every_s` old and why.
"""

from __future__ import annotations

import os
import re
import zlib
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from cgstat.kernel.cgroups import read_cgroup
from cgstat.kernel.handles import KeptFiles
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import ReadError
from cgstat.kernel.sample import Sample
from cgstat.kernel.tree import Cgroup, Folder

# The longest an idle cgroup's kept values go unread, chosen from measurement (bench/README.md:
# 10 -> 20 s spares a sixth of a tick at 1,000 idle cgroups, 30 s little more; cAdvisor's
# dynamic housekeeping backs off to 60 s for containers whose stats stand still).
DEFAULT_FULL_EVERY_S = 20.0
# After a read in full that its activity (or an event) asked for, the next one comes at
# most this fraction of the period later: what moves on after the cgroup went quiet
# (the pressure averages decaying, writeback of its dirty pages) shows within 5 s of it.
SETTLE_FRACTION = 0.25


def default_full_every_s() -> float:
    """The longest a kept value may go unread: CGSTAT_FULL_READ_EVERY_S (seconds, 0: read
    everything every tick), else DEFAULT_FULL_EVERY_S."""
    env = os.environ.get("CGSTAT_FULL_READ_EVERY_S", "").strip()
    try:
        value = float(env)
    except ValueError:
        return DEFAULT_FULL_EVERY_S
    return value if 0 <= value < float("inf") else DEFAULT_FULL_EVERY_S

# The signal files, by controller: the first of each list the cgroup's folder has.
_V2_SIGNAL = ("cpu.stat", "memory.current", "pids.current")
_V1_SIGNAL = (("cpuacct", "cpuacct.usage"), ("memory", "memory.usage_in_bytes"), ("pids", "pids.current"))

_Files = Tuple[Tuple[Folder, str], ...]


class _Last:
    """What is kept of a cgroup: the Cgroup it was read as, the folders of its signal files
    and their kinds (which controller's which file: one tuple shared by every cgroup that
    watches the same), the signal read before its last full read, that read's Sample, and
    when its next full read is due."""

    __slots__ = ("cg", "folders", "kinds", "signal", "sample", "due", "now", "now_tick")

    def __init__(self, cg: Cgroup, folders: Tuple[Folder, ...], kinds: Tuple[Tuple[str, str], ...], signal: int,
                 sample: Sample, due: float):
        self.cg = cg
        self.folders = folders
        self.kinds = kinds
        self.signal = signal
        self.sample = sample
        self.due = due
        self.now: Optional[int] = None  # the signal found in tick `now_tick` (by still(), before read())
        self.now_tick = -1


# Each tick `ChangeReader.read` reads a cgroup's change signal first: the raw bytes of the
# files that move with any activity in it (v2: cpu.stat, memory.current, pids.current; v1
# and hybrid: cpuacct.usage, or the cgroup2 cpu.stat without cpuacct, memory.usage_in_bytes,
# pids.current; those the cgroup has). Bytes equal to last tick's: the cgroup is given the
# Sample of its last full read with this tick's time (rates of 0, as a full read would give
# where the counters stand still); otherwise it is read in full (kernel/cgroups.py).
#
# A cgroup is read in full anyway: when it is new (discovery, or its folders made again:
# a new Cgroup), when `mark()`ed (an event of its: memory.events changed, a kill, a write to
# one of its limit files) and at least every `full_every_s` seconds, at a time of the
# period of its own (its phase comes from its path), so that the full reads of cgroups
# that went quiet together spread over the ticks instead of landing on one. No value of a
# Sample is older than `full_every_s`; after a read in full that activity or an event asked
# for, the next comes within SETTLE_FRACTION of it. Only on a live cgroupfs whose
# descriptors are kept (a recorded tree's files are replaced by rename in tests: always read
# in full there).
#
# The signal is hierarchical: a cgroup's CPU usage, memory charge and task count include
# its descendants' (cgroup v2 always; v1's cpuacct and pids always, its memory controller
# since Linux 5.11, which removed use_hierarchy=0). So where a cgroup's signal reads as at
# the tick before, nothing ran, forked, exited or allocated anywhere below it, and a child
# read last tick (still, or in full) reads as it did then without being read: a still
# parent spares its children's signal reads. The parent is read first (paths in order);
# the child must watch the same files as its parent (the same controllers).
class ChangeReader:
    """Reads the cgroups of each tick, in full only where their change signal moved (see
    the comment above). `full_every_s` 0: always in full (`--full-read`)."""

    __slots__ = ("layout", "kept", "full_every_s", "full_reads", "reused", "spared", "hierarchical", "_state",
                 "_seen", "_marked", "_tick", "_unmoved", "_kinds", "_shared")

    def __init__(self, layout: Layout, kept: KeptFiles, full_every_s: float = DEFAULT_FULL_EVERY_S,
                 hierarchical: Optional[bool] = None):
        self.layout = layout
        self.kept = kept
        self.full_every_s = full_every_s
        self.full_reads = 0  # cgroups read in full, since made
        self.reused = 0  # cgroups given their last Sample again, since made
        self.spared = 0  # signal reads spared by a still parent, since made
        # whether a parent's signal includes its children's (see the comment above)
        self.hierarchical = (layout.kind == "v2" or kernel_at_least(5, 11)) if hierarchical is None else hierarchical
        self._state: Dict[str, _Last] = {}  # last tick's, by cgroup path
        self._seen: Dict[str, _Last] = {}  # this tick's, by cgroup path
        self._marked: Set[str] = set()  # cgroup paths to read in full next time
        self._tick = 0  # ticks begun or ended so far: which tick a _Last's `now` was found in
        # this tick's cgroups whose signal reads as at last tick: path -> its kinds
        self._unmoved: Dict[str, Tuple[Tuple[str, str], ...]] = {}
        self._kinds: Dict[Tuple[Tuple[str, str], ...], Tuple[Tuple[str, str], ...]] = {}  # one tuple per kind
        self._shared: Dict[Any, Any] = {}  # a kept Sample's part -> the equal one kept first (_share)

    def mark(self, paths: Iterable[str]) -> None:
        """Read these cgroups in full the next time they are read (an event of theirs)."""
        if self.full_every_s > 0:
            self._marked.update(paths)

    def begin_tick(self) -> None:
        """Before the tick's still() and reads: cgroups one of whose folders had a limit file
        written (kernel/follow.py fills KeptFiles.written) are read in full."""
        if self._seen:  # the last tick was left unfinished: what it read is the latest
            self._state.update(self._seen)
            self._seen = {}
        self._tick += 1
        self._unmoved = {}
        written = self.kept.written
        if written:
            if self.full_every_s > 0:
                for path, state in self._state.items():
                    if any(f.path in written for f in state.cg.folders):
                        self._marked.add(path)
            written.clear()

    def end_tick(self) -> None:
        """The tick's cgroups are read: forget those it did not read (gone, or no longer shown)."""
        self._state, self._seen = self._seen, {}
        self._tick += 1
        self._unmoved = {}
        if len(self._shared) > 8 * len(self._state) + 256:  # (parts no kept Sample uses any more)
            self._shared = {}

    def still(self, cg: Cgroup) -> bool:
        """Whether the cgroup's signal reads as before its last full read: nothing ran in it,
        none of its tasks came or went (found now, and kept for this tick's read())."""
        state = self._state.get(cg.path)
        if state is None or state.cg is not cg or self.full_every_s <= 0:
            return False
        now = self._now(cg.path, state)
        return now is not None and now == state.signal

    def _now(self, path: str, state: _Last) -> Optional[int]:
        """The cgroup's signal this tick: its last one where its parent's reads as at last
        tick (the comment above ChangeReader), else read; found once a tick."""
        if state.now_tick == self._tick:
            return state.now
        parent = self._unmoved.get(path.rpartition("/")[0] or "/") if self.hierarchical else None
        if parent is not None and parent is state.kinds:
            now: Optional[int] = state.signal
            self.spared += 1
        else:
            now = self._signal(state.folders, state.kinds)
        state.now, state.now_tick = now, self._tick
        if now is not None and now == state.signal:
            self._unmoved[path] = state.kinds
        return now

    def read(self, cg: Cgroup, time_s: float, wall_s: float) -> Sample:
        """The cgroup's Sample at this time: read in full, or its last one when its signal
        did not move (with this time)."""
        every = self.full_every_s
        if every <= 0:
            return read_cgroup(cg, self.layout, time_s, wall_s, self.kept)
        path = cg.path
        state = self._state.pop(path, None)  # (let go as the tick goes: not two ticks' worth at its end)
        if state is not None and state.cg is cg and time_s < state.due:
            signal = self._now(path, state)
            if signal is not None and signal == state.signal and path not in self._marked:
                self._seen[path] = state
                self.reused += 1
                return _at(state.sample, time_s, wall_s)
            folders, kinds = state.folders, state.kinds
            due = min(state.due, time_s + every * SETTLE_FRACTION)  # (see SETTLE_FRACTION)
        elif state is not None and state.cg is cg:  # due: the same folders, the same signal files
            folders, kinds = state.folders, state.kinds
            signal = self._now(path, state)
            due = _next_due(path, time_s, every)
        else:
            files = self._signal_files(cg)
            if files is None:  # not on a kept cgroupfs: in full, every tick
                return read_cgroup(cg, self.layout, time_s, wall_s, self.kept)
            folders, kinds = tuple(f for f, _ in files), self._kinds_of(files)
            signal = self._signal(folders, kinds)  # (a new cgroup or life: its children read their own)
            due = _next_due(path, time_s, every)
        self._marked.discard(path)
        # the signal read before the files: a change after it shows in the next signal
        sample = read_cgroup(cg, self.layout, time_s, wall_s, self.kept)
        self.full_reads += 1
        if time_s >= due:
            due = _next_due(path, time_s, every)
        if signal is None or sample.gone:
            self._seen.pop(path, None)  # read in full again next tick
        else:
            sample = self._share(sample)  # (returned too: its record's objects are the kept ones)
            self._seen[path] = _Last(cg, folders, kinds, signal, sample, due)
        return sample

    def _share(self, sample: Sample) -> Sample:
        """The Sample to keep, its parts that equal another kept Sample's being that one's:
        idle cgroups' memory, IO, task and pressure figures are mostly alike (a thousand
        kept Samples held ~3,000 pressure readings of 5 values). Equal means equal values
        of the same types here: each field's parser always makes the same type."""
        shared = self._shared
        try:
            memory = shared.setdefault(sample.memory, sample.memory)
            io = shared.setdefault(sample.io, sample.io)
            pids = shared.setdefault(sample.pids, sample.pids)
            errors = shared.setdefault(sample.errors, sample.errors)
            pressure = sample.pressure
            if pressure:
                values = tuple((k, shared.setdefault(v, v)) for k, v in pressure.items())
                pressure = shared.setdefault(("pressure", values), dict(values))
        except TypeError:  # a part that can't be hashed: kept as it is
            return sample
        return tuple.__new__(Sample, sample[:6] + (memory, io, pids, pressure, errors) + sample[11:])

    def _kinds_of(self, files: _Files) -> Tuple[Tuple[str, str], ...]:
        """Which controller's which file each signal file is, as one tuple shared by every
        cgroup that watches the same (compared by identity)."""
        kinds = tuple((f.hierarchy.name, name) for f, name in files)
        return self._kinds.setdefault(kinds, kinds)

    def _signal_files(self, cg: Cgroup) -> Optional[_Files]:
        """The (folder, file) pairs of the cgroup's change signal; None where a folder's
        descriptors are not kept (a recorded tree) or it has no CPU file to watch."""
        layout = self.layout
        files: List[Tuple[Folder, str]] = []
        if layout.kind == "v2":
            unified = cg.folder(layout.unified) if layout.unified is not None else None
            if unified is not None:
                files = [(unified, name) for name in _V2_SIGNAL if name in unified.files]
        else:
            for controller, name in _V1_SIGNAL:
                h = layout.find(controller)
                folder = cg.folder(h) if h is not None else None
                if folder is not None and name in folder.files:
                    files.append((folder, name))
            if not files or files[0][1] != "cpuacct.usage":
                unified = cg.folder(layout.unified) if layout.unified is not None else None
                if unified is not None and "cpu.stat" in unified.files:
                    files.insert(0, (unified, "cpu.stat"))
        if not files or files[0][1] not in ("cpu.stat", "cpuacct.usage"):
            return None
        if not all(self.kept.keeps(f.hierarchy.mount_dir) for f, _ in files):
            return None
        return tuple(files)

    def _signal(self, folders: Tuple[Folder, ...], kinds: Tuple[Tuple[str, str], ...]) -> Optional[int]:
        """The hash of the signal files' bytes now; None when one can't be read (read in
        full: the full read says why). Bytes' hash is SipHash under a key drawn per process
        (as in KeptFiles.read_parsed): two readings that differ yet hash the same happen
        by chance one time in 2^64, and can't be aimed at by a workload steering its
        counters; the hash, not the bytes, is kept (a few hundred bytes a cgroup)."""
        read = self.kept.read
        try:
            return hash(tuple([read(folder, kind[1]) for folder, kind in zip(folders, kinds)]))
        except ReadError:
            return None


def _at(sample: Sample, time_s: float, wall_s: float) -> Sample:
    """The Sample with these times (Sample._replace, without its keyword machinery: once per
    idle cgroup per tick)."""
    return tuple.__new__(Sample, (sample[0], sample[1], sample[2], time_s, wall_s) + sample[5:])


def kernel_at_least(major: int, minor: int, release: Optional[str] = None) -> bool:
    """Whether the running kernel (os.uname().release, e.g. "6.1.0-18-amd64") is at least
    major.minor; False where the release can't be read as numbers."""
    found = re.match(r"(\d+)\.(\d+)", release if release is not None else os.uname().release)
    return found is not None and (int(found.group(1)), int(found.group(2))) >= (major, minor)


def _next_due(path: str, time_s: float, every: float) -> float:
    """The first time after `time_s` on the cgroup's own grid of full reads: every `every`
    seconds at a phase drawn from its path (crc32: the same in every run)."""
    phase = (zlib.crc32(path.encode("utf-8", "surrogateescape")) & 0xFFFF) / 65536.0 * every
    return phase + (((time_s - phase) // every) + 1) * every
