"""The JSON record: one object per cgroup per tick (the contract, docs/schema.md).

Assembles a Sample, its Rates, its Workload (who it is: naming/workload.py) and the host
facts into the documented shape. Nothing here reads files; units are in the names,
unknown is None (JSON null), never a fake 0.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

from cgstat.kernel.host import HostInfo
from cgstat.kernel.netns import NetworkResult
from cgstat.kernel.sample import PressureSample, Problem, Sample
from cgstat.naming.workload import Workload
from cgstat.pipeline.network import network_record
from cgstat.pipeline.rates import NO_IO_RATES, Rates

if TYPE_CHECKING:  # GPU records are built only with GPUs: a run without any never loads them
    from cgstat.gpu.join import Attributed
    from cgstat.gpu.energy import Idle
    from cgstat.gpu.sample import GpuDevice, GpuSnapshot

SCHEMA_VERSION = 1
_REMAPPED = ("correctable", "uncorrectable", "pending", "failure")
_RETIRED = ("single_bit", "double_bit", "pending")


def value_at(record: Any, *keys: str) -> Any:
    """record[k1][k2]..., or None where a level is missing or not an object (for views and
    rules that read records, which may come from a file another version wrote)."""
    obj = record
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def number_at(record: Any, *keys: str) -> Optional[float]:
    """The finite number at record[k1][k2]..., else None (null, missing, not a number)."""
    value = value_at(record, *keys)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


_second: Tuple[int, str] = (-1, "")  # the last second formatted: a tick's records share it


def rfc3339(wall_s: float) -> str:
    global _second
    whole = int(wall_s)
    ms = int((wall_s - whole) * 1000)
    last = _second  # one read, one write: a thread beside this one at worst formats again
    if last[0] != whole:
        last = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{last[1]}.{ms:03d}Z"


def build(sample: Sample, rates: Rates, workload: Workload, host: HostInfo,
          gpu: Optional[Dict[str, Any]] = None, network: Optional[NetworkResult] = None) -> Dict[str, Any]:
    """A cgroup (or pod) record; `gpu` is its GPU object (cgstat/gpu/join.py), None when
    GPU metrics are off; `network` what its network namespace's counters were (None: not
    read, as for a recorded tree)."""
    cpu, mem, io, pids = sample.cpu, sample.memory, sample.io, sample.pids
    limit = mem.limit_bytes
    # docker stats: MEM % = usage / limit, with the host's MemTotal standing in for an
    # absent limit (and for a limit larger than the host's memory).
    denominator = limit
    if denominator is None or (host.mem_total_bytes and denominator > host.mem_total_bytes):
        denominator = host.mem_total_bytes
    mem_percent = None
    if mem.working_set_bytes is not None and denominator:
        mem_percent = mem.working_set_bytes / denominator * 100.0

    devices: Optional[List[Dict[str, Any]]] = None
    rows = io.devices
    read_bytes: Optional[int]
    write_bytes: Optional[int]
    read_ops: Optional[int]
    write_ops: Optional[int]
    if rows is None:
        read_bytes = write_bytes = read_ops = write_ops = None
    elif not rows:  # an IO controller without devices: zero moved (IoSample.total of nothing)
        read_bytes = write_bytes = read_ops = write_ops = 0
        devices = []
    else:
        read_bytes, write_bytes, read_ops, write_ops = (io.total("read_bytes_total"), io.total("write_bytes_total"),
                                                        io.total("read_ops_total"), io.total("write_ops_total"))
        devices = []
        dev_rates_of = rates.devices or {}
        for d in rows:
            dev_rates = dev_rates_of.get(d.device, NO_IO_RATES)
            devices.append({
                "device": d.device,
                "name": workload.device_names.get(d.device),
                "read_bytes_total": d.read_bytes_total,
                "write_bytes_total": d.write_bytes_total,
                "read_ops_total": d.read_ops_total,
                "write_ops_total": d.write_ops_total,
                "discard_bytes_total": d.discard_bytes_total,
                "discard_ops_total": d.discard_ops_total,
                "read_bytes_per_second": dev_rates.read_bytes_per_second,
                "write_bytes_per_second": dev_rates.write_bytes_per_second,
                "read_ops_per_second": dev_rates.read_ops_per_second,
                "write_ops_per_second": dev_rates.write_ops_per_second,
            })

    psi = sample.pressure.get  # the record has every resource of kernel/sample.PRESSURE_RESOURCES
    pressure = {"cpu": _pressure(psi("cpu")), "memory": _pressure(psi("memory")), "io": _pressure(psi("io"))}

    return {
        "schema": SCHEMA_VERSION,
        "type": workload.kind,
        "ts": rfc3339(sample.wall_s),
        "host": host.hostname,
        "cgroup": sample.path,
        "paths": sample.paths,
        "interval_s": rates.interval_s,
        "unit": workload.unit,
        "pod": workload.pod,
        "container": workload.container,
        "cpu": {
            "usage_seconds_total": cpu.usage_seconds_total,
            "user_seconds_total": cpu.user_seconds_total,
            "system_seconds_total": cpu.system_seconds_total,
            "percent": rates.cpu_percent,
            "limit_cores": cpu.limit_cores,
            "quota_us": cpu.quota_us,
            "period_us": cpu.period_us,
            "periods_total": cpu.periods_total,
            "throttled_periods_total": cpu.throttled_periods_total,
            "throttled_seconds_total": cpu.throttled_seconds_total,
            "throttled_percent": rates.cpu_throttled_percent,
        },
        "memory": {
            "usage_bytes": mem.usage_bytes,
            "working_set_bytes": mem.working_set_bytes,
            "limit_bytes": limit,
            "percent": mem_percent,
            "anon_bytes": mem.anon_bytes,
            "file_bytes": mem.file_bytes,
            "inactive_file_bytes": mem.inactive_file_bytes,
            "shmem_bytes": mem.shmem_bytes,
            "swap_bytes": mem.swap_bytes,
            "oom_kills_total": mem.oom_kills_total,
            "oom_events_total": mem.oom_events_total,
        },
        "io": {
            "read_bytes_total": read_bytes,
            "write_bytes_total": write_bytes,
            "read_ops_total": read_ops,
            "write_ops_total": write_ops,
            "read_bytes_per_second": rates.read_bytes_per_second,
            "write_bytes_per_second": rates.write_bytes_per_second,
            "read_ops_per_second": rates.read_ops_per_second,
            "write_ops_per_second": rates.write_ops_per_second,
            "devices": devices,
        },
        "network": network_record(network, rates.network),
        "pids": {"current": pids.current, "limit": pids.limit, "processes": pids.processes},
        "pressure": pressure,
        "gpu": gpu,
        "errors": _problems(sample.errors if network is None or network.problem is None
                            else list(sample.errors) + [network.problem]),
    }


def _pressure(p: Optional[PressureSample]) -> Optional[Dict[str, Optional[float]]]:
    if p is None:
        return None
    return {
        "some_avg10": p.some_avg10, "some_avg60": p.some_avg60, "some_avg300": p.some_avg300,
        "some_seconds_total": p.some_seconds_total,
        "full_avg10": p.full_avg10, "full_avg60": p.full_avg60, "full_avg300": p.full_avg300,
        "full_seconds_total": p.full_seconds_total,
    }


def _problems(problems: Iterable[Problem]) -> List[Dict[str, str]]:
    return [{"source": p.source, "error": p.error, "detail": p.detail} for p in problems]


def build_gpu(device: GpuDevice, processes: Iterable[Attributed], host: HostInfo, wall_s: float,
              interval_s: Optional[float], snapshot: Optional[GpuSnapshot] = None,
              idle: Optional[Idle] = None) -> Dict[str, Any]:
    """A `type: "gpu"` record: one GPU (or MIG device), its health, and every process NVML
    lists on it. `snapshot`: the reading it is from (driver and CUDA versions); `idle`: the
    GPU's idle power as the energy model knows it (None on MIG devices)."""
    h = device.health
    if h is None:  # a lost GPU: every health figure unknown
        from cgstat.gpu.health import DeviceHealth

        h = DeviceHealth()
    errors = list(device.errors) + list(h.errors)
    return {
        "schema": SCHEMA_VERSION,
        "type": "gpu",
        "ts": rfc3339(wall_s),
        "host": host.hostname,
        "interval_s": interval_s,
        "gpu": {
            "index": device.index, "uuid": device.uuid, "name": device.name,
            "utilization_percent": device.utilization_percent,
            "memory_utilization_percent": device.memory_utilization_percent,
            "memory_total_bytes": device.memory_total_bytes, "memory_used_bytes": device.memory_used_bytes,
            "memory_reserved_bytes": device.memory_reserved_bytes,
            "temperature_celsius": device.temperature_celsius, "power_watts": device.power_watts,
            "mig_mode": device.mig_mode, "parent_uuid": device.parent_uuid,
            "gpu_instance_id": device.gpu_instance_id,
            "sm_clock_mhz": h.sm_clock_mhz, "memory_clock_mhz": h.memory_clock_mhz,
            "sm_clock_max_mhz": h.sm_clock_max_mhz, "memory_clock_max_mhz": h.memory_clock_max_mhz,
            "clocks_event_reasons": None if h.clocks_event_reasons is None else list(h.clocks_event_reasons),
            "violation_seconds_total": {"power": h.violation_power_seconds_total,
                                        "thermal": h.violation_thermal_seconds_total},
            "energy_joules_total": h.energy_joules_total,
            "idle_power_watts": None if idle is None else idle.power_watts,
            "idle_power_observed": None if idle is None else idle.observed,
            "power_limit_watts": h.power_limit_watts,
            "memory_temperature_celsius": h.memory_temperature_celsius,
            "pcie_tx_bytes_per_second": h.pcie_tx_bytes_per_second,
            "pcie_rx_bytes_per_second": h.pcie_rx_bytes_per_second,
            "pcie_replays_total": h.pcie_replays_total,
            "nvlink_tx_bytes_total": h.nvlink_tx_bytes_total, "nvlink_rx_bytes_total": h.nvlink_rx_bytes_total,
            "encoder_utilization_percent": h.encoder_utilization_percent,
            "decoder_utilization_percent": h.decoder_utilization_percent,
            "ecc_errors_total": {"corrected": h.ecc_corrected_total, "uncorrected": h.ecc_uncorrected_total},
            "remapped_rows": None if h.remapped_rows is None else dict(zip(_REMAPPED, h.remapped_rows)),
            "retired_pages": None if h.retired_pages is None else dict(zip(_RETIRED, h.retired_pages)),
            "xid_errors_total": h.xid_errors_total, "last_xid": h.last_xid,
            "recent_xids": [] if snapshot is None or device.parent_uuid is not None else
            [x.code for x in snapshot.xids if x.gpu_index == device.index],
            "compute_mode": h.compute_mode, "persistence_mode": h.persistence_mode,
            "pci_bus_id": h.pci_bus_id, "serial": h.serial, "minor_number": h.minor_number,
            "driver_version": None if snapshot is None else snapshot.driver_version,
            "cuda_version": None if snapshot is None else snapshot.cuda_version,
            "gpm": h.gpm,
        },
        "processes": [{
            "pid": a.process.pid, "name": a.owner.name, "type": a.process.type,
            "memory_bytes": a.process.memory_bytes, "sm_percent": a.process.sm_percent,
            "memory_percent": a.process.memory_percent, "encoder_percent": a.process.encoder_percent,
            "decoder_percent": a.process.decoder_percent,
            "power_watts": a.power_watts, "energy_joules_total": a.energy_joules_total,
            "cgroup": a.owner.cgroup, "container": a.owner.container,
        } for a in processes],
        "errors": _problems(errors),
    }
