"""GPU power and energy per process and per cgroup, the way Kepler splits a GPU's power:
idle power stays on the device, active power is split between the GPU's processes by their
SM share, and each process's and cgroup's energy is its power integrated over time (see
EnergyModel). Reads nothing itself: NVML's readings are handed in.
"""

from __future__ import annotations

from itertools import groupby
from operator import add, attrgetter
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from cgstat.gpu.reading import GpuProcess, GpuSnapshot

_GPU_INDEX, _UUID, _PID = attrgetter("gpu_index"), attrgetter("gpu_uuid"), attrgetter("pid")
_TYPE, _SM = attrgetter("type"), attrgetter("sm_percent")


def ancestors(path: str) -> List[str]:
    """"/a/b" -> ["/", "/a", "/a/b"]: the cgroups whose subtree holds `path`."""
    parts = [p for p in path.split("/") if p]
    return ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


class Shares(NamedTuple):
    """Each process's power and energy, by position in the snapshot's `processes` (two
    columns, not a tuple per process: the join zips them straight into its records)."""

    power_watts: List[Optional[float]]  # None where the GPU's power is unknown (a lost GPU's)
    energy_joules_total: List[Optional[float]]


class Idle(NamedTuple):
    power_watts: Optional[float]
    observed: bool  # True: measured with no process on the GPU; False: the lowest seen so far


# Each reading, per GPU:
# - idle power is the lowest power seen on that GPU while NVML listed no process on it.
#   Until such a reading, the lowest power seen at all is used (the GPU has only been seen
#   busy: what it draws at the least busy moment is the best bound, and it never gives
#   processes more than the GPU drew); `idle_observed` says which.
# - active power = power - idle power (never below 0). It is split between the GPU's
#   processes by their SM share (`sm_percent` over the sum of all of theirs), evenly when
#   none has a sample (all idle, or MIG: NVML has no per-process SM there, so the GPU's
#   active power is split evenly between the processes of all its MIG instances). With MPS
#   clients on the GPU, the split is between the clients: the MPS server runs their work.
# - each process's energy grows by its power times the time since the previous reading
#   (monotonic); the first reading of a process adds nothing. Idle power stays on the device.
# Per cgroup, the energy of the processes that ran in it is kept (by the cgroup they were
# in) while that cgroup exists, so a container's total does not drop when one of its
# processes exits; a record sums its whole subtree, as the other GPU figures do.
class EnergyModel:
    """Keeps idle power per GPU, energy per process and per cgroup between readings."""

    def __init__(self) -> None:
        self._idle: Dict[str, float] = {}  # GPU UUID -> lowest power with no process
        self._floor: Dict[str, float] = {}  # GPU UUID -> lowest power seen at all
        self._energy: Dict[Optional[str], Dict[int, float]] = {}  # device UUID -> pid -> joules
        self._cgroups: Dict[str, float] = {}  # cgroup path (where the process was) -> joules
        self._last: Optional[float] = None
        self._added: List[Optional[float]] = []  # joules each process drew since the last reading, by position

    def idle(self, uuid: Optional[str]) -> Idle:
        if uuid is None:
            return Idle(None, False)
        if uuid in self._idle:
            return Idle(self._idle[uuid], True)
        return Idle(self._floor.get(uuid), False)

    def update(self, snapshot: GpuSnapshot, now: float) -> Shares:
        """Each process's power and energy after this reading, in the order of
        `snapshot.processes`."""
        dt = 0.0 if self._last is None or now <= self._last else now - self._last
        self._last = now
        processes = snapshot.processes
        # positions in `processes` by GPU index: the shares come back in the snapshot's
        # order, so that the join pairs them by position (hundreds of pairs a tick).
        # GpuReader lists a GPU's processes in one run: one step a run, the runs counted in C
        by_gpu: Dict[int, List[int]] = {}
        start = 0
        for index, run in groupby(map(_GPU_INDEX, processes)):
            end = start + len(list(run))
            by_gpu.setdefault(index, []).extend(range(start, end))
            start = end
        n = len(processes)
        power: List[Optional[float]] = [None] * n
        totals: List[Optional[float]] = [None] * n
        added: List[Optional[float]] = [None] * n
        energy: Dict[Optional[str], Dict[int, float]] = {}
        before = self._energy
        for device in snapshot.devices:
            if device.parent_uuid is not None:
                continue  # MIG devices have no power reading: their GPU's is split below
            at = by_gpu.get(device.index, [])
            first, count = (at[0], len(at)) if at else (0, 0)
            contiguous = at[-1] - first + 1 == count if at else True
            procs = processes[first:first + count] if contiguous else tuple(processes[i] for i in at)
            watts = self._split(device.uuid, device.power_watts, procs)
            pids = list(map(_PID, procs))
            uuid = device.uuid
            was: List[Optional[float]] = list(map(before.get(uuid, {}).get, pids))
            gained: List[Optional[float]]
            now_total: List[Optional[float]]
            if (None not in watts and None not in was
                    and list(map(_UUID, procs)).count(uuid) == count):  # not on a MIG device
                # the steady state (power known, every process seen before): in C but the products
                gained = [w * dt for w in watts]  # type: ignore[operator]
                now_total = list(map(add, was, gained))
                energy.setdefault(uuid, {}).update(zip(pids, now_total))  # type: ignore[arg-type]
            else:
                gained, now_total = [None] * count, []
                for j, (p, w) in enumerate(zip(procs, watts)):
                    total = before.get(p.gpu_uuid, {}).get(p.pid)
                    if w is not None:
                        if total is None:
                            total = 0.0  # first seen: its energy starts now
                        else:
                            joules = w * dt
                            gained[j] = joules
                            total += joules
                    if total is not None:
                        energy.setdefault(p.gpu_uuid, {})[p.pid] = total
                    now_total.append(total)
            if contiguous:  # by slice: one step for the GPU's processes
                power[first:first + count], totals[first:first + count] = watts, now_total
                added[first:first + count] = gained
            else:
                for i, w, sofar, drew in zip(at, watts, now_total, gained):
                    power[i], totals[i], added[i] = w, sofar, drew
        self._energy = energy  # processes gone are forgotten (their cgroup keeps their share)
        self._added = added
        return Shares(power, totals)

    def charge(self, paths: Iterable[Optional[str]], exists: Iterable[str]) -> None:
        """Add this reading's energy of each process to the cgroup it is in (`paths`: each
        process's cgroup path, in the order of the snapshot update() read); forget the
        cgroups not in `exists` (removed: their total goes with their records)."""
        kept = self._cgroups
        for path, joules in zip(paths, self._added):
            if path is not None and joules is not None:
                kept[path] = kept.get(path, 0.0) + joules
        live = set(exists)
        for path in [p for p in kept if p not in live]:
            del kept[path]

    def by_subtree(self) -> Dict[str, float]:
        """cgroup path -> the energy of the GPU processes that ran in it or below it."""
        out: Dict[str, float] = {}
        for path, joules in self._cgroups.items():
            for ancestor in ancestors(path):
                out[ancestor] = out.get(ancestor, 0.0) + joules
        return out

    def _split(self, uuid: Optional[str], power: Optional[float],
               procs: Sequence[GpuProcess]) -> List[Optional[float]]:
        """Each of `procs`' share of the GPU's active power, in their order."""
        if power is None or uuid is None:
            return [None] * len(procs)
        floor = self._floor.get(uuid)
        if floor is None or power < floor:
            self._floor[uuid] = power
        if not procs:
            idle = self._idle.get(uuid)
            if idle is None or power < idle:
                self._idle[uuid] = power
            return []
        idle_w = self.idle(uuid).power_watts or 0.0
        active = max(power - idle_w, 0.0)
        if "mps" not in map(_TYPE, procs):  # no MPS client (the usual case): by columns, in C
            sm = list(map(_SM, procs))
            total = 0 if None in sm else sum(sm)
            if total > 0:
                return [active * s / total for s in sm]
            return [active / len(procs)] * len(procs)
        # MPS clients share the GPU's active power; the other processes (the server) get 0
        sm = [p.sm_percent for p in procs if p.type == "mps"]
        total = 0 if None in sm else sum(sm)
        if total > 0:
            return [active * (p.sm_percent or 0) / total if p.type == "mps" else 0.0 for p in procs]
        even = active / len(sm)
        return [even if p.type == "mps" else 0.0 for p in procs]
