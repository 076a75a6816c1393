"""The GPU join: which cgroup and container each GPU process is in (its host PID through
/proc/<pid>/cgroup, from the naming stage), and the GPU use of every cgroup's whole subtree.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from cgstat.gpu.energy import Shares, ancestors
from cgstat.gpu.reading import GpuProcess
from cgstat.kernel.membership import Owner

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import GpuProcessUse, GpuUse


# NVML lists host PIDs (the driver ignores PID namespaces, nvidia-docker#1483); the naming
# stage maps each to its cgroup through /proc/<pid>/cgroup, checked against the process's
# start time so a reused PID is never attributed from a cache (dcgm-exporter's PID -> pod
# cache has that flaw). A process that exits between NVML and /proc, or lives in another PID
# namespace, stays in the GPU records with cgroup and container null, claimed by no cgroup.
class Attributed(NamedTuple):
    """A GPU process and who it is (a NamedTuple: one per GPU process per tick)."""

    process: GpuProcess
    owner: Owner
    power_watts: Optional[float] = None  # its share of the GPU's active power (gpu/energy.py)
    energy_joules_total: Optional[float] = None  # since cgstat first saw it


# /proc/<pid>/comm of the MPS server, nvidia-cuda-mps-server cut to the kernel's 15 characters
MPS_SERVER_COMM = "nvidia-cuda-mps"

_PID, _NAME, _CGROUP = attrgetter("pid"), attrgetter("name"), attrgetter("owner.cgroup")


def attribute(processes: Sequence[GpuProcess], owner_of: Callable[[int], Owner],
              shares: Shares) -> Tuple[Attributed, ...]:
    """Who each GPU process is, with its power and energy (`shares`: EnergyModel.update's,
    in the order of `processes`); the MPS server (a compute process named
    nvidia-cuda-mps-server) is typed "mps_server"."""
    owners = list(map(owner_of, map(_PID, processes)))
    # each record's four fields zipped and made in C (hundreds of records a tick)
    out = tuple(map(tuple.__new__, repeat(Attributed),
                    zip(processes, owners, shares.power_watts, shares.energy_joules_total)))
    if MPS_SERVER_COMM not in map(_NAME, owners):
        return out
    return tuple(a._replace(process=a.process._replace(type="mps_server"))
                 if a.process.type == "compute" and a.owner.name == MPS_SERVER_COMM else a for a in out)


def by_subtree(attributed: Iterable[Attributed]) -> Dict[str, Tuple[Attributed, ...]]:
    """cgroup path -> the GPU processes in it or anywhere below it. Cgroups whose subtrees
    hold the same processes (a container and the pod or slices above it) share one tuple,
    so that cgroup_gpu makes their `gpu` object once."""
    out: Dict[str, List[Attributed]] = {}
    lists: Dict[str, List[List[Attributed]]] = {}  # cgroup path -> its ancestors' lists in `out`
    holders: Dict[str, List[str]] = {}  # cgroup path -> the cgroups with processes at or below it
    # a run of processes in one cgroup (a container's, on each GPU) is one step: grouped in C
    for path, run in groupby(attributed, _CGROUP):
        if path is None:
            continue
        mine = lists.get(path)
        if mine is None:  # the same cgroup again (each GPU lists its processes): one walk up
            chain = ancestors(path)
            for ancestor in chain:
                holders.setdefault(ancestor, []).append(path)
            mine = lists[path] = [out.setdefault(ancestor, []) for ancestor in chain]
        processes = list(run)
        for found in mine:
            found.extend(processes)
    # Two cgroups with the same holders hold the same processes in the same order (each
    # list took every process of its holders, in `attributed` order).
    shared: Dict[Tuple[str, ...], Tuple[Attributed, ...]] = {}
    result: Dict[str, Tuple[Attributed, ...]] = {}
    for path, found in out.items():
        key = tuple(holders[path])
        same = shared.get(key)
        if same is None:
            same = shared[key] = tuple(found)
        result[path] = same
    return result


def _sum(values: List[Optional[int]]) -> Optional[int]:
    # `None in` and sum() loop in C: a cgroup's record may sum hundreds of GPU processes
    return None if None in values else sum(values)  # type: ignore[arg-type]


def _fsum(values: List[Optional[float]]) -> Optional[float]:
    return None if None in values else float(sum(values))  # type: ignore[arg-type]


def _entries(processes: Iterable[Attributed]) -> List[GpuProcessUse]:
    """The process entries of a cgroup's `gpu` object (each process unpacked at once: one
    step for its nine fields, where each attribute read is one)."""
    return [{"pid": pid, "name": owner.name, "gpu_index": gpu_index, "gpu_uuid": gpu_uuid, "type": kind,
             "memory_bytes": memory, "sm_percent": sm, "memory_percent": memory_percent,
             "encoder_percent": encoder, "decoder_percent": decoder,
             "power_watts": watts, "energy_joules_total": joules}
            for (pid, gpu_index, gpu_uuid, kind, memory, sm, memory_percent, encoder, decoder), owner, watts, joules
            in processes]


def _entry(a: Attributed, made: Dict[int, Any]) -> GpuProcessUse:
    entry = made[id(a)] = _entries((a,))[0]
    return entry


# A cgroup's figures sum the GPU processes of its whole subtree, as every cgroup counter
# does: a rootless Podman container's nested leaf, a pod's containers, a parent slice with
# --all. `sm_percent` is on the scale of `cpu.percent`: 100 = one whole GPU, summed over
# the GPUs used; it is null when any of its processes can't be measured (MIG), since a
# partial sum would understate.
def cgroup_gpu(processes: Tuple[Attributed, ...], energy_joules: float = 0.0,
               made: Optional[Dict[int, Any]] = None) -> GpuUse:
    """The `gpu` object of a cgroup record (no process: zeros and empty lists).
    `energy_joules`: what the subtree's GPU processes drew since cgstat started watching
    (gpu/energy.py keeps it per cgroup, so a process that exits leaves its share).
    `made`: what this tick made, by id(): each process entry, by id() of its Attributed (a
    process is in the record of each cgroup above it: a pod and its container, --all's
    slices), and each `gpu` object, by id() of the `processes` tuple (by_subtree gives
    cgroups holding the same processes one tuple). One serves them all: records are only
    read after they are made."""
    if made is None:
        made = {}
    same = made.get(id(processes)) if processes else None
    if same is not None:
        return {**same, "energy_joules_total": energy_joules}  # type: ignore[typeddict-item]
    kept = made.get
    # nothing made yet this tick (the first cgroup with GPU processes): no lookups
    cached: List[Optional[GpuProcessUse]] = [kept(id(a)) for a in processes] if made else []
    if not any(cached):  # none made yet this tick (the first cgroup holding them): all at once
        entries = _entries(processes)
        made.update(zip(map(id, processes), entries))
    else:  # some made for another cgroup (a pod's container): only the rest
        entries = [c if c is not None else _entry(a, made) for a, c in zip(processes, cached)]
    if processes:
        # one transposition in C gives each column: the sums loop in C too
        columns: List[Tuple[Any, ...]] = list(zip(*processes))
        procs = list(zip(*columns[0]))
        memory_column, sm_column, uuids = list(procs[4]), list(procs[5]), procs[2]
        power_column = list(columns[2])
    else:
        memory_column, sm_column, uuids, power_column = [], [], (), []
    out: GpuUse = {
        "memory_bytes": _sum(memory_column),
        "sm_percent": _sum(sm_column),
        "power_watts": _fsum(power_column),
        "energy_joules_total": energy_joules,
        "devices": sorted({u for u in uuids if u}),
        "processes": entries,
    }
    if processes:
        made[id(processes)] = out
    return out
