"""Read what changed: a cgroup whose change signal stands still keeps its last Sample.

Reads each tick a cgroup's change signal (v2: cpu.stat, memory.current, pids.current; v1:
cpuacct.usage or cgroup2's cpu.stat, memory.usage_in_bytes, pids.current), and the cgroup's
files in full (kernel/cgroups.py) only when it moved, or the cgroup is new, marked or due
(see ChangeReader). docs/reading.md says which fields can be up to `full_every_s` old and why.
"""

from __future__ import annotations

import os
import zlib
from typing import Dict, Iterable, List, Optional, Set, Tuple

from cgstat.kernel.cgroups import read_cgroup
from cgstat.kernel.handles import KeptFiles
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import ReadError
from cgstat.kernel.sample import Sample
from cgstat.kernel.tree import Cgroup, Folder

DEFAULT_FULL_EVERY_S = 10.0


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
    """What is kept of a cgroup: the Cgroup it was read as, its signal files, the signal
    read before its last full read, that read's Sample, and when its next full read is due."""

    __slots__ = ("cg", "files", "signal", "sample", "due", "now")

    def __init__(self, cg: Cgroup, files: _Files, signal: int, sample: Sample, due: float):
        self.cg = cg
        self.files = files
        self.signal = signal
        self.sample = sample
        self.due = due
        self.now: Optional[int] = None  # this tick's signal, read by still() before read()


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
# Sample is older than `full_every_s`. Only on a live cgroupfs whose descriptors are kept
# (a recorded tree's files are replaced by rename in tests: always read in full there).
class ChangeReader:
    """Reads the cgroups of each tick, in full only where their change signal moved (see
    the comment above). `full_every_s` 0: always in full (`--full-read`)."""

    __slots__ = ("layout", "kept", "full_every_s", "full_reads", "reused", "_state", "_seen", "_marked")

    def __init__(self, layout: Layout, kept: KeptFiles, full_every_s: float = DEFAULT_FULL_EVERY_S):
        self.layout = layout
        self.kept = kept
        self.full_every_s = full_every_s
        self.full_reads = 0  # cgroups read in full, since made
        self.reused = 0  # cgroups given their last Sample again, since made
        self._state: Dict[str, _Last] = {}  # last tick's, by cgroup path
        self._seen: Dict[str, _Last] = {}  # this tick's, by cgroup path
        self._marked: Set[str] = set()  # cgroup paths to read in full next time

    def mark(self, paths: Iterable[str]) -> None:
        """Read these cgroups in full the next time they are read (an event of theirs)."""
        if self.full_every_s > 0:
            self._marked.update(paths)

    def begin_tick(self) -> None:
        """Before the tick's reads: cgroups one of whose folders had a limit file written
        (kernel/follow.py fills KeptFiles.written) are read in full."""
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

    def still(self, cg: Cgroup) -> bool:
        """Whether the cgroup's signal reads as before its last full read: nothing ran in it,
        none of its tasks came or went (read now, and kept for this tick's read())."""
        state = self._state.get(cg.path)
        if state is None or state.cg is not cg or self.full_every_s <= 0:
            return False
        state.now = self._signal(state.files)
        return state.now is not None and state.now == state.signal

    def read(self, cg: Cgroup, time_s: float, wall_s: float) -> Sample:
        """The cgroup's Sample at this time: read in full, or its last one when its signal
        did not move (with this time)."""
        every = self.full_every_s
        if every <= 0:
            return read_cgroup(cg, self.layout, time_s, wall_s, self.kept)
        path = cg.path
        state = self._state.get(path)
        files: Optional[_Files]
        if state is not None and state.cg is cg and time_s < state.due:
            signal, state.now = (self._signal(state.files) if state.now is None else state.now), None
            if signal is not None and signal == state.signal and path not in self._marked:
                self._seen[path] = state
                self.reused += 1
                return state.sample._replace(time_s=time_s, wall_s=wall_s)
            files = state.files
            due = state.due
        else:
            files = self._signal_files(cg)
            if files is None:  # not on a kept cgroupfs: in full, every tick
                return read_cgroup(cg, self.layout, time_s, wall_s, self.kept)
            signal = self._signal(files)
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
            self._seen[path] = _Last(cg, files, signal, sample, due)
        return sample

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

    def _signal(self, files: _Files) -> Optional[int]:
        """The hash of the signal files' bytes now; None when one can't be read (read in
        full: the full read says why). Bytes' hash is SipHash under a key drawn per process
        (as in KeptFiles.read_parsed): two readings that differ yet hash the same happen
        by chance one time in 2^64, and can't be aimed at by a workload steering its
        counters; the hash, not the bytes, is kept (a few hundred bytes a cgroup)."""
        read = self.kept.read
        try:
            return hash(tuple([read(folder, name) for folder, name in files]))
        except ReadError:
            return None


def _next_due(path: str, time_s: float, every: float) -> float:
    """The first time after `time_s` on the cgroup's own grid of full reads: every `every`
    seconds at a phase drawn from its path (crc32: the same in every run)."""
    phase = (zlib.crc32(path.encode("utf-8", "surrogateescape")) & 0xFFFF) / 65536.0 * every
    return phase + (((time_s - phase) // every) + 1) * every
