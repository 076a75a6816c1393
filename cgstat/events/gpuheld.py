"""Which cgroups hold GPU memory and how busy they keep it, per GPU, from a tick's
`type: "gpu"` records (each lists its processes with their cgroup and container): what the
gpu_held_idle event, the endpoint's held-idle counter and the report's GPU-hours read.
Reads no file.

A cgroup holds a GPU idle when its processes on that GPU hold at least `memory_bytes` of
its memory while their SM use, summed, is at most `idle_sm_percent`. A device whose
processes' SM use NVML cannot measure (MIG) is never judged idle: unknown is not idle.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from cgstat.contract.keys import Gpu as G

DEFAULT_MEMORY_BYTES = 1 << 30  # --gpu-idle-memory
DEFAULT_WINDOW_S = 900.0  # --gpu-idle-window

_GPU, _PROCESSES = G.GPU[0], G.PROCESSES[0]
_INDEX, _UUID = G.GPU_INDEX[-1], G.GPU_UUID[-1]
_P_CGROUP, _P_CONTAINER = G.PROCESSES_ITEM_CGROUP[-1], G.PROCESSES_ITEM_CONTAINER[-1]
_P_MEMORY, _P_SM = G.PROCESSES_ITEM_MEMORY_BYTES[-1], G.PROCESSES_ITEM_SM_PERCENT[-1]


class Holding(NamedTuple):
    """One cgroup's processes on one GPU in one tick."""

    cgroup: str
    container: Optional[Mapping[str, Any]]
    gpu_index: Any
    gpu_uuid: Optional[str]
    memory_bytes: int  # summed (a process whose memory NVML can't say adds 0)
    sm_percent: Optional[float]  # summed; None when any process can't be measured
    record: Mapping[str, Any]  # the GPU record (its ts and host)

    def idle(self, memory_bytes: int, idle_sm_percent: float) -> bool:
        return self.memory_bytes >= memory_bytes and self.sm_percent is not None and self.sm_percent <= idle_sm_percent


def _number(v: Any) -> Optional[float]:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


_PLAIN = (int, float, type(None))  # what _number gives back unchanged (bool is not one)


def holdings(gpu_records: List[Mapping[str, Any]]) -> Dict[Tuple[str, str], Holding]:
    """(cgroup, GPU UUID or index) -> what the cgroup's processes hold there; processes
    whose cgroup is unknown are nobody's (gpu_process_outside_container says them)."""
    # summed in lists first: a Holding made once per key, not _replace()d per process
    # (each GPU lists its processes, so a cgroup's key comes back once per process)
    sums: Dict[Tuple[str, str], List[Any]] = {}
    # the same lists by GPU, then cgroup: a process finds its sum by its cgroup alone, no
    # key tuple made per process; records naming the same GPU add to the same lists
    by_gpu: Dict[str, Dict[str, List[Any]]] = {}
    for r in gpu_records:
        dev = r.get(_GPU)
        if not isinstance(dev, dict):
            continue
        uuid = dev.get(_UUID)
        gpu = str(uuid or dev.get(_INDEX))
        on_gpu = by_gpu.setdefault(gpu, {})
        for p in r.get(_PROCESSES) or ():
            if not isinstance(p, dict):
                continue
            cgroup = p.get(_P_CGROUP)
            if not isinstance(cgroup, str):
                continue
            # the pipeline writes plain ints, floats and None: those skip _number's call
            mem = p.get(_P_MEMORY)
            if mem.__class__ is not int:
                mem = int(_number(mem) or 0)
            sm = p.get(_P_SM)
            if sm.__class__ not in _PLAIN:
                sm = _number(sm)
            s = on_gpu.get(cgroup)
            if s is None:
                on_gpu[cgroup] = sums[(cgroup, gpu)] = [mem, sm, p, dev, uuid, r]
            else:
                s[0] += mem
                s[1] = None if s[1] is None or sm is None else s[1] + sm
    out: Dict[Tuple[str, str], Holding] = {}
    for key, (mem, sm, p, dev, uuid, r) in sums.items():
        container = p.get(_P_CONTAINER)
        out[key] = Holding(key[0], container if isinstance(container, dict) else None,
                           dev.get(_INDEX), uuid, mem, sm, r)
    return out
