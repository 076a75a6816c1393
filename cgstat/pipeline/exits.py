"""A record of each workload's life (`type: "exit"`): what every cgroup record said, kept per
cgroup as running totals, and one exit record when the cgroup is gone. Reads no file: fed
the tick's records, the cgroups that still exist and the kernel log's OOM kills.
"""

from __future__ import annotations

import os

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional

from cgstat.contract.keys import Cgroup
from cgstat.units import finite
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import ExitRecord

# a cgroup's running totals, a list indexed by these (one per cgroup, updated in place).
# Cheap at 1,000 cgroups: a few dict reads per record and one list per cgroup.
(_FIRST, _LAST, _SAMPLES, _CPU, _PEAK, _PEAK_SEEN, _OOM, _IO_R, _IO_W, _NET_RX, _NET_TX, _GPU_S,
 _GPU_MEM, _GPU_J, _HAS_GPU, _CONTAINER, _POD, _UNIT, _HOST, _KILLED, _PATHS, _THR_S, _THR_N, _PERIODS) = range(24)
_SIZE = 24
_NONE: Dict[str, Any] = {}
# the record's keys read here (cgstat/contract/keys.py): the object, then the key in it
_CPU_OBJ, _K_CPU = Cgroup.CPU_USAGE_SECONDS_TOTAL
_K_THR_S, _K_THR_N = Cgroup.CPU_THROTTLED_SECONDS_TOTAL[-1], Cgroup.CPU_THROTTLED_PERIODS_TOTAL[-1]
_K_PERIODS = Cgroup.CPU_PERIODS_TOTAL[-1]
_MEM_OBJ, _K_PEAK = Cgroup.MEMORY_PEAK_BYTES
_K_USAGE, _K_OOM = Cgroup.MEMORY_USAGE_BYTES[-1], Cgroup.MEMORY_OOM_KILLS_TOTAL[-1]
_IO_OBJ, _K_IO_R = Cgroup.IO_READ_BYTES_TOTAL
_K_IO_W = Cgroup.IO_WRITE_BYTES_TOTAL[-1]
_NET_OBJ, _K_RX = Cgroup.NETWORK_RX_BYTES_TOTAL
_K_TX = Cgroup.NETWORK_TX_BYTES_TOTAL[-1]
_GPU_OBJ, _K_SM = Cgroup.GPU_SM_PERCENT
_K_GPU_MEM, _K_GPU_J = Cgroup.GPU_MEMORY_BYTES[-1], Cgroup.GPU_ENERGY_JOULES_TOTAL[-1]
(_K_INTERVAL,) = Cgroup.INTERVAL_S
_PIDS_OBJ, _K_PIDS = Cgroup.PIDS_CURRENT


def _kept(new: Optional[float], old: Optional[float]) -> Optional[float]:
    return old if new is None else new


def _max(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None:
        return b
    return a if b is None or a >= b else b


def folders_there(mounts: Dict[str, str], paths: Any) -> bool:
    """Whether any folder of a record's `paths` (hierarchy -> path) still exists, by the
    hierarchies' mount points (`mounts`: name -> mount point)."""
    if not isinstance(paths, dict):
        return False
    return any(isinstance(p, str) and k in mounts and os.path.isdir(mounts[k] + p.rstrip("/"))
               for k, p in paths.items())


# When a cgroup goes its files go with it (the kernel frees the counters with the cgroup), so
# the totals are those of its last record, at most one interval old; `last_seen` says when.
# A cgroup that lived less than a tick had no record: the kernel log's kill of it (a
# `Killed process` in a memory cgroup gone before it was read) still gives one, with what
# the log says (the OOM cgroup's usage, the time) and null for the rest. Nothing is said of
# a short-lived cgroup that ended without a kill: nothing saw it.
class ExitLedger:
    """`see(record)` for each cgroup/pod record of a tick; `end_tick(existing, kills, ts, still_there)`
    once the tick's records are made: the exit records of the cgroups gone since."""

    def __init__(self) -> None:
        self._alive: Dict[str, List[Any]] = {}
        self.host: Any = None  # the host the records named (for a cgroup known from the log only)

    def again(self, r: Mapping[str, Any]) -> None:
        """see() for a record equal to the cgroup's last one but for ts and interval_s
        (pipeline/same.py): only its time and count move."""
        row = self._alive.get(r["cgroup"])
        if row is None:
            self.see(r)
            return
        row[_LAST] = r["ts"]
        row[_SAMPLES] += 1

    def see(self, r: Mapping[str, Any]) -> None:
        path = r.get("cgroup")
        if not isinstance(path, str):
            return
        row = self._alive.get(path)
        ts = r.get("ts")
        if row is None:
            row = self._alive[path] = [None] * _SIZE
            row[_FIRST] = ts
            row[_SAMPLES] = 0
            row[_GPU_S] = 0.0
            row[_KILLED] = False
        row[_LAST] = ts
        row[_SAMPLES] += 1
        row[_CONTAINER], row[_POD], row[_UNIT] = r.get("container"), r.get("pod"), r.get("unit")
        row[_HOST] = self.host = r.get("host")
        row[_PATHS] = r.get("paths")
        # the record's objects read once each (a record is built by cgstat/pipeline/build.py: its
        # objects are dicts, or null where a controller is missing)
        cpu, mem, io, net = (r.get(_CPU_OBJ) or _NONE, r.get(_MEM_OBJ) or _NONE, r.get(_IO_OBJ) or _NONE,
                             r.get(_NET_OBJ) or _NONE)
        # A total a record lacks keeps its last reading: a controller's figures can go before
        # the cgroup does (on a v1 host a memory cgroup nested apart from the CPU one is joined
        # to the record through its members, and a killed workload has none).
        cpu_s = finite(cpu.get(_K_CPU))
        oom = finite(mem.get(_K_OOM))
        pids = r.get(_PIDS_OBJ)
        current = finite(pids.get(_K_PIDS)) if isinstance(pids, dict) else None
        if oom is not None and row[_OOM] is not None and oom > row[_OOM]:
            row[_KILLED] = True  # killed in this interval (the kernel log, where readable, says it too)
        elif row[_KILLED] and (current > 0 if current is not None else
                               cpu_s is not None and row[_CPU] is not None and cpu_s > row[_CPU]):
            row[_KILLED] = False  # it lived on after the kill: not how it ended
        row[_CPU] = _kept(cpu_s, row[_CPU])
        row[_THR_S] = _kept(finite(cpu.get(_K_THR_S)), row[_THR_S])
        row[_THR_N] = _kept(finite(cpu.get(_K_THR_N)), row[_THR_N])
        row[_PERIODS] = _kept(finite(cpu.get(_K_PERIODS)), row[_PERIODS])
        row[_OOM] = _kept(oom, row[_OOM])
        row[_PEAK] = _kept(finite(mem.get(_K_PEAK)), row[_PEAK])
        row[_PEAK_SEEN] = _max(row[_PEAK_SEEN], finite(mem.get(_K_USAGE)))
        row[_IO_R], row[_IO_W] = _kept(finite(io.get(_K_IO_R)), row[_IO_R]), _kept(finite(io.get(_K_IO_W)), row[_IO_W])
        row[_NET_RX], row[_NET_TX] = _kept(finite(net.get(_K_RX)), row[_NET_RX]), _kept(finite(net.get(_K_TX)), row[_NET_TX])
        gpu = r.get(_GPU_OBJ)
        if isinstance(gpu, dict):
            row[_HAS_GPU] = True
            sm = finite(gpu.get(_K_SM))
            dt = finite(r.get(_K_INTERVAL))
            if sm is not None and dt is not None:
                row[_GPU_S] += sm / 100.0 * dt
            row[_GPU_MEM] = _max(row[_GPU_MEM], finite(gpu.get(_K_GPU_MEM)))
            row[_GPU_J] = finite(gpu.get(_K_GPU_J))

    def end_tick(self, existing: Iterable[str], kills: Iterable[Any], ts: str,
                 still_there: Callable[[Any], bool] = lambda paths: False) -> List[ExitRecord]:
        """The exit records of this tick: each cgroup seen before, no longer in `existing`
        (the paths discovered this tick) and whose folders are gone (`still_there(paths)`,
        the record's `paths`: a v1 cgroup of another hierarchy can be joined to its CPU
        cgroup one tick and listed on its own the next), and each kernel-log kill
        (naming/oom_victims.NamedKill) of a cgroup gone before any record of it."""
        alive = self._alive
        there = existing if isinstance(existing, (set, dict, frozenset)) else set(existing)
        kills = list(kills)
        for k in kills:
            row = alive.get(k.cgroup) if isinstance(k.cgroup, str) else None
            if row is not None:
                row[_KILLED] = True
        out: List[ExitRecord] = []
        for path in [p for p in alive if p not in there]:
            if not still_there(alive[path][_PATHS]):
                out.append(_exit(path, alive.pop(path), ts, self.host))
        never: Dict[str, List[Any]] = {}
        for k in kills:
            if isinstance(k.cgroup, str) and k.exists is False and k.named_by not in ("live", "seen") \
                    and k.cgroup not in there:
                never.setdefault(k.cgroup, []).append(k)
        for path, ks in never.items():
            out.append(_from_log(path, ks, ts, self.host))
        return out


def _exit(path: str, row: List[Any], ts: str, host: Any) -> ExitRecord:
    first, last = parse_ts(row[_FIRST]), parse_ts(row[_LAST])
    if row[_PEAK] is not None:
        peak, source = row[_PEAK], "memory.peak"
    elif row[_PEAK_SEEN] is not None:
        peak, source = row[_PEAK_SEEN], "highest_seen"
    else:
        peak, source = None, None
    return {
        "schema": 1, "type": "exit", "ts": ts, "host": row[_HOST] if row[_HOST] is not None else host,
        "cgroup": path, "unit": row[_UNIT], "pod": row[_POD], "container": row[_CONTAINER],
        "started": row[_FIRST], "last_seen": row[_LAST], "ended": ts,
        "lifetime_seconds": None if first is None or last is None else round(max(last - first, 0.0), 3),
        "samples": row[_SAMPLES],
        "cpu_seconds_total": row[_CPU], "cpu_throttled_seconds_total": row[_THR_S],
        "cpu_throttled_periods_total": _int(row[_THR_N]), "cpu_periods_total": _int(row[_PERIODS]),
        "memory_peak_bytes": None if peak is None else int(peak),
        "memory_peak_source": source,
        "oom_kills_total": None if row[_OOM] is None else int(row[_OOM]),
        "io_read_bytes_total": _int(row[_IO_R]), "io_write_bytes_total": _int(row[_IO_W]),
        "network_rx_bytes_total": _int(row[_NET_RX]), "network_tx_bytes_total": _int(row[_NET_TX]),
        "gpu_seconds_total": round(row[_GPU_S], 3) if row[_HAS_GPU] else None,
        "gpu_memory_peak_bytes": _int(row[_GPU_MEM]), "gpu_energy_joules_total": row[_GPU_J],
        "ended_by": "oom_kill" if row[_KILLED] else "exit",  # removed: its processes are gone
    }


def _int(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(v)


def _from_log(path: str, kills: List[Any], ts: str, host: Any) -> ExitRecord:
    """A cgroup known only from the kernel log: killed before any record of it."""
    last = kills[-1]
    usages = [k.report.usage_bytes for k in kills if k.report.usage_bytes is not None
              and k.report.oom_memcg is not None and k.report.oom_memcg == k.report.task_memcg]
    return {
        "schema": 1, "type": "exit", "ts": ts, "host": host, "cgroup": path, "unit": last.unit,
        "pod": last.pod, "container": last.container, "started": None, "last_seen": None, "ended": ts,
        "lifetime_seconds": None, "samples": 0, "cpu_seconds_total": None, "cpu_throttled_seconds_total": None,
        "cpu_throttled_periods_total": None, "cpu_periods_total": None,
        "memory_peak_bytes": max(usages) if usages else None,
        "memory_peak_source": "kernel_log" if usages else None,
        "oom_kills_total": len(kills), "io_read_bytes_total": None, "io_write_bytes_total": None,
        "network_rx_bytes_total": None, "network_tx_bytes_total": None, "gpu_seconds_total": None,
        "gpu_memory_peak_bytes": None, "gpu_energy_joules_total": None, "ended_by": "oom_kill",
    }
