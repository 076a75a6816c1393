"""The JSON record: one object per cgroup per tick (the contract, docs/schema.md).

Assembles a Sample, its Rates, its Workload (who it is: naming/workload.py) and the host
facts into the documented shape. Nothing here reads files; units are in the names,
unknown is None (JSON null), never a fake 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple, cast

from cgstat.contract.keys import MemoryStat
from cgstat.kernel.host import HostInfo
from cgstat.kernel.netns import NetworkResult
from cgstat.kernel.sample import MemoryEvents, PressureSample, Problem, Sample, SwapEvents
from cgstat.naming.workload import Workload
from cgstat.pipeline.network import network_record
from cgstat.pipeline.rates import NO_IO_RATES, Rates
from cgstat.units import finite
from cgstat.timestamps import rfc3339

if TYPE_CHECKING:  # GPU records are built only with GPUs: a run without any never loads them
    from cgstat.contract import types as records
    from cgstat.contract.types import (CgroupRecord, GpuGpm, GpuRecord, GpuRemappedRows, GpuRetiredPages, GpuUse, IoDevice,
                                MemoryStatCounters, Pressure, Psi, RecordError)
    from cgstat.gpu.attribution import Attributed
    from cgstat.gpu.energy import Idle
    from cgstat.gpu.reading import GpuDevice, GpuSnapshot

SCHEMA_VERSION = 1


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
    return finite(value_at(record, *keys))


def build(sample: Sample, rates: Rates, workload: Workload, host: HostInfo,
          gpu: Optional[GpuUse] = None, network: Optional[NetworkResult] = None) -> CgroupRecord:
    """A cgroup (or pod) record; `gpu` is its GPU object (cgstat/gpu/attribution.py), None when
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

    devices: Optional[List[IoDevice]] = None
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
    pressure: Pressure = {"cpu": _pressure(psi("cpu")), "memory": _pressure(psi("memory")), "io": _pressure(psi("io"))}

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
            "weight": cpu.weight,
            "shares": cpu.shares,
            "max_burst_us": cpu.max_burst_us,
            "cpuset_cpus": cpu.cpuset_cpus,
            "cpuset_mems": cpu.cpuset_mems,
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
            "peak_bytes": mem.peak_bytes,
            "swap_peak_bytes": mem.swap_peak_bytes,
            "high_bytes": mem.high_bytes,
            "low_bytes": mem.low_bytes,
            "min_bytes": mem.min_bytes,
            "swap_limit_bytes": mem.swap_limit_bytes,
            "zswap_bytes": mem.zswap_bytes,
            "events": _events(mem.events),
            "events_local": _events(mem.events_local),
            "swap_events": _swap_events(mem.swap_events),
            "failcnt": mem.failcnt,
            **_memory_stat(mem.stat),
            "hugetlb_bytes": mem.hugetlb_bytes,
            "oom_group": mem.oom_group,
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
            "limits": None if io.limits is None else [{
                "device": d.device,
                "name": workload.device_names.get(d.device),
                "read_bytes_per_second": d.read_bytes_per_second,
                "write_bytes_per_second": d.write_bytes_per_second,
                "read_ops_per_second": d.read_ops_per_second,
                "write_ops_per_second": d.write_ops_per_second,
            } for d in io.limits],
        },
        "network": network_record(network, rates.network),
        "pids": {"current": pids.current, "limit": pids.limit, "processes": pids.processes,
                 "peak": pids.peak, "events_max_total": pids.events_max_total},
        "pressure": pressure,
        "gpu": gpu,
        "errors": _problems(sample.errors if network is None or network.problem is None
                            else list(sample.errors) + [network.problem]),
    }


_NO_MEMORY_STAT = (None,) * len(MemoryStat.RECORD)


def _memory_stat(values: Optional[Tuple[Optional[int], ...]]) -> MemoryStatCounters:
    """The memory.stat counters read as is, named as the field table names them."""
    return cast("MemoryStatCounters", dict(zip(MemoryStat.RECORD, values or _NO_MEMORY_STAT)))


def _pressure(p: Optional[PressureSample]) -> Optional[Psi]:
    if p is None:
        return None
    return {
        "some_avg10": p.some_avg10, "some_avg60": p.some_avg60, "some_avg300": p.some_avg300,
        "some_seconds_total": p.some_seconds_total,
        "full_avg10": p.full_avg10, "full_avg60": p.full_avg60, "full_avg300": p.full_avg300,
        "full_seconds_total": p.full_seconds_total,
    }


def _events(e: Optional[MemoryEvents]) -> Optional[records.MemoryEvents]:
    if e is None:
        return None
    return {"low": e.low, "high": e.high, "max": e.max, "oom": e.oom, "oom_kill": e.oom_kill,
            "oom_group_kill": e.oom_group_kill}


def _swap_events(e: Optional[SwapEvents]) -> Optional[records.MemorySwapEvents]:
    return None if e is None else {"high": e.high, "max": e.max, "fail": e.fail}


def _problems(problems: Iterable[Problem]) -> List[RecordError]:
    return [{"source": p.source, "error": p.error, "detail": p.detail} for p in problems]


def _remapped(rows: Optional[Tuple[int, int, int, int]]) -> Optional[GpuRemappedRows]:
    if rows is None:
        return None
    return {"correctable": rows[0], "uncorrectable": rows[1], "pending": rows[2], "failure": rows[3]}


def _retired(pages: Optional[Tuple[Optional[int], Optional[int], Optional[bool]]]) -> Optional[GpuRetiredPages]:
    if pages is None:
        return None
    return {"single_bit": pages[0], "double_bit": pages[1], "pending": pages[2]}


def _gpm(values: Optional[Dict[str, Optional[float]]]) -> Optional[GpuGpm]:
    if values is None:
        return None
    g = values.get
    return {"graphics_activity_percent": g("graphics_activity_percent"), "sm_activity_percent": g("sm_activity_percent"),
            "sm_occupancy_percent": g("sm_occupancy_percent"), "tensor_activity_percent": g("tensor_activity_percent"),
            "dram_bandwidth_percent": g("dram_bandwidth_percent"),
            "pcie_tx_bytes_per_second": g("pcie_tx_bytes_per_second"),
            "pcie_rx_bytes_per_second": g("pcie_rx_bytes_per_second"),
            "nvlink_tx_bytes_per_second": g("nvlink_tx_bytes_per_second"),
            "nvlink_rx_bytes_per_second": g("nvlink_rx_bytes_per_second")}


def build_gpu(device: GpuDevice, processes: Iterable[Attributed], host: HostInfo, wall_s: float,
              interval_s: Optional[float], snapshot: Optional[GpuSnapshot] = None,
              idle: Optional[Idle] = None) -> GpuRecord:
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
            "remapped_rows": _remapped(h.remapped_rows), "retired_pages": _retired(h.retired_pages),
            "xid_errors_total": h.xid_errors_total, "last_xid": h.last_xid,
            "recent_xids": [] if snapshot is None or device.parent_uuid is not None else
            [x.code for x in snapshot.xids if x.gpu_index == device.index],
            "recent_xid_instances": [] if snapshot is None or device.parent_uuid is not None else
            [{"xid": x.code, "gpu_instance_id": x.gpu_instance_id, "compute_instance_id": x.compute_instance_id}
             for x in snapshot.xids if x.gpu_index == device.index and x.gpu_instance_id is not None],
            "compute_mode": h.compute_mode, "persistence_mode": h.persistence_mode,
            "pci_bus_id": h.pci_bus_id, "serial": h.serial, "minor_number": h.minor_number,
            "driver_version": None if snapshot is None else snapshot.driver_version,
            "cuda_version": None if snapshot is None else snapshot.cuda_version,
            "gpm": _gpm(h.gpm),
        },
        "processes": [{  # each process unpacked at once: one step for its fields
            "pid": pid, "name": o.name, "type": kind,
            "memory_bytes": memory, "sm_percent": sm, "memory_percent": memory_percent,
            "encoder_percent": encoder, "decoder_percent": decoder,
            "power_watts": watts, "energy_joules_total": joules,
            "cgroup": o.cgroup, "container": o.container,
        } for (pid, _, _, kind, memory, sm, memory_percent, encoder, decoder), o, watts, joules in processes],
        "errors": _problems(errors),
    }
