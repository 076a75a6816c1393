"""The GPU join: which cgroup and container each GPU process is in, and the GPU use of every
cgroup's whole subtree.

NVML lists host PIDs (the driver ignores PID namespaces, nvidia-docker#1483); the naming
stage maps each to its cgroup through /proc/<pid>/cgroup, checked against the process's
start time so a reused PID is never attributed from a cache (dcgm-exporter's PID -> pod
cache has that flaw). A process that exits between NVML and /proc, or lives in another PID
namespace, stays in the GPU records with cgroup and container null, claimed by no cgroup.

A cgroup's figures sum the GPU processes of its whole subtree, as every cgroup counter
does: a rootless Podman container's nested leaf, a pod's containers, a parent slice with
--all. `sm_percent` is on the scale of `cpu.percent`: 100 = one whole GPU, summed over
the GPUs used; it is null when any of its processes can't be measured (MIG), since a
partial sum would understate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from cgstat.gpu.sample import GpuProcess
from cgstat.kernel.procs import Owner
from cgstat.records import GpuUse


@dataclass(frozen=True)
class Attributed:
    process: GpuProcess
    owner: Owner


def by_subtree(attributed: Iterable[Attributed]) -> Dict[str, Tuple[Attributed, ...]]:
    """cgroup path -> the GPU processes in it or anywhere below it."""
    out: Dict[str, List[Attributed]] = {}
    for a in attributed:
        path = a.owner.cgroup
        if path is None:
            continue
        for ancestor in _ancestors(path):
            out.setdefault(ancestor, []).append(a)
    return {k: tuple(v) for k, v in out.items()}


def _ancestors(path: str) -> List[str]:
    parts = [p for p in path.split("/") if p]
    return ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _sum(values: List[Optional[int]]) -> Optional[int]:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def cgroup_gpu(processes: Tuple[Attributed, ...]) -> GpuUse:
    """The `gpu` object of a cgroup record (no process: zeros and empty lists)."""
    procs = [a.process for a in processes]
    return {
        "memory_bytes": _sum([p.memory_bytes for p in procs]),
        "sm_percent": _sum([p.sm_percent for p in procs]),
        "devices": sorted({p.gpu_uuid for p in procs if p.gpu_uuid}),
        "processes": [{
            "pid": a.process.pid, "name": a.owner.name, "gpu_index": a.process.gpu_index,
            "gpu_uuid": a.process.gpu_uuid, "type": a.process.type,
            "memory_bytes": a.process.memory_bytes, "sm_percent": a.process.sm_percent,
            "memory_percent": a.process.memory_percent, "encoder_percent": a.process.encoder_percent,
            "decoder_percent": a.process.decoder_percent,
        } for a in processes],
    }
