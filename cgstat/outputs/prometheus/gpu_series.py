"""A GPU record's series: the device's own (cgstat's and dcgm-exporter's names, converted to
its units), its clocks-event reasons and processes, and a cgroup's share of each GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Tuple

from cgstat.contract import fields
from cgstat.contract.keys import Cgroup, Gpu
from cgstat.outputs.prometheus.families import (
    number_text,
    FAMILIES,
    GPU_SCALARS,
    DCGM,
    ts_suffix,
    object_at,
    F_CGPU_MEM,
    F_CGPU_PMEM,
    F_CGPU_POWER,
    F_CGPU_PPOWER,
    F_CGPU_PSM,
    F_CGPU_SM,
    F_GPU_INFO,
    F_GPU_PROCS,
    F_GPU_REASON,
    F_GPU_UNATTR,
)
from cgstat.outputs.prometheus.labels import join_labels, render_pairs
from cgstat.timestamps import ts_millis

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import GpuRecord, GpuUse


def container_gpu_samples(gpu: GpuUse, add: Callable[[int, Any, str], None]) -> None:
    """The GPU series of a container: per process, and its processes summed per GPU."""
    per_gpu: Dict[Tuple[str, str], List[Any]] = {}
    processes = gpu.get(Cgroup.GPU_PROCESSES[-1])
    if not isinstance(processes, list):
        return
    for p in processes:
        if not isinstance(p, dict):
            continue
        gpu_index = p.get(Cgroup.GPU_PROCESSES_ITEM_GPU_INDEX[-1])
        key = ("" if gpu_index is None else str(gpu_index), p.get(Cgroup.GPU_PROCESSES_ITEM_GPU_UUID[-1]) or "")
        sums: List[Any] = per_gpu.setdefault(key, [None, None, None])
        mem: Any = p.get(Cgroup.GPU_PROCESSES_ITEM_MEMORY_BYTES[-1])
        sm: Any = p.get(Cgroup.GPU_PROCESSES_ITEM_SM_PERCENT[-1])
        watts: Any = p.get(Cgroup.GPU_PROCESSES_ITEM_POWER_WATTS[-1])
        if number_text(mem) is not None:
            sums[0] = (sums[0] or 0) + mem
        if number_text(sm) is not None:
            sums[1] = (sums[1] or 0) + sm
        if number_text(watts) is not None:
            sums[2] = (sums[2] or 0) + watts
        extra = render_pairs((("gpu", key[0]), ("uuid", key[1]), ("pid", p.get(Cgroup.GPU_PROCESSES_ITEM_PID[-1])),
                              ("process", p.get(Cgroup.GPU_PROCESSES_ITEM_NAME[-1])),
                              ("type", p.get(Cgroup.GPU_PROCESSES_ITEM_TYPE[-1]))))
        add(F_CGPU_PMEM, mem, extra)
        add(F_CGPU_PSM, sm, extra)
        add(F_CGPU_PPOWER, watts, extra)
    for (index, uuid), (mem, sm, watts) in per_gpu.items():
        extra = render_pairs((("gpu", index), ("uuid", uuid)))
        add(F_CGPU_MEM, mem, extra)
        add(F_CGPU_SM, sm, extra)
        add(F_CGPU_POWER, watts, extra)


def gpu_samples(record: GpuRecord, out: List[List[bytes]], fmt: str, timestamps: bool) -> None:
    gpu = record.get("gpu")
    if not isinstance(gpu, dict):
        return
    index = gpu.get(Gpu.GPU_INDEX[-1])
    base = render_pairs((("gpu", "" if index is None else str(index)), ("uuid", gpu.get(Gpu.GPU_UUID[-1]))))
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = ts_suffix(millis, fmt)

    def add(family: int, value: Any, extra: str = "") -> None:
        text = number_text(value) if value.__class__ is not bool else str(int(value))
        if text is not None:
            line = FAMILIES[family].name + "{" + join_labels(base, extra) + "} " + text + end
            out[family].append(line.encode("utf-8", "backslashreplace"))

    add(F_GPU_INFO, 1, render_pairs((("model", gpu.get(Gpu.GPU_NAME[-1])), ("mig_mode", gpu.get(Gpu.GPU_MIG_MODE[-1])),
                                     ("parent_uuid", gpu.get(Gpu.GPU_PARENT_UUID[-1])))))
    for keys, series in GPU_SCALARS:
        obj = object_at(record, keys)
        if obj is not None:
            for family, key, labels in series:
                add(family, obj.get(key), labels)
    reasons = gpu.get(Gpu.GPU_CLOCKS_EVENT_REASONS[-1])
    if isinstance(reasons, list):
        for reason in reasons:
            if isinstance(reason, str):
                add(F_GPU_REASON, 1, render_pairs((("reason", reason),)))
    dcgm = render_pairs(_dcgm_labels(record, gpu))
    for family, keys, convert in DCGM:
        text = number_text(_dcgm_value(gpu, keys, convert))
        if text is not None:
            line = FAMILIES[family].name + "{" + dcgm + "} " + text + end
            out[family].append(line.encode("utf-8", "backslashreplace"))
    processes = record.get("processes")
    if isinstance(processes, list):
        add(F_GPU_PROCS, len(processes))
        unattributed = 0
        for p in processes:
            memory: Any = (p.get(Gpu.PROCESSES_ITEM_MEMORY_BYTES[-1])
                           if isinstance(p, dict) and p.get(Gpu.PROCESSES_ITEM_CGROUP[-1]) is None else None)
            if number_text(memory) is not None:
                unattributed += memory
        add(F_GPU_UNATTR, unattributed)


_REASON_BITS = {name: bit for bit, name in fields.CLOCK_EVENT_REASONS}
_MIB = 1 << 20
_SCALE = {"x1000": 1000, "x1e6": 1e6, "/100": 0.01}


def _dcgm_labels(record: Mapping[str, Any], gpu: Mapping[str, Any]) -> List[Tuple[str, Any]]:
    """dcgm-exporter's labels: a MIG device is named as dcgm-exporter names it, by its
    parent GPU's UUID and model, plus GPU_I_ID and GPU_I_PROFILE (the profile in its name)."""
    index = gpu.get(Gpu.GPU_INDEX[-1])
    name = gpu.get(Gpu.GPU_NAME[-1])
    mig = gpu.get(Gpu.GPU_PARENT_UUID[-1]) is not None
    profile = None
    if mig and isinstance(name, str) and " MIG " in name:
        name, profile = name.split(" MIG ", 1)
    minor = gpu.get(Gpu.GPU_MINOR_NUMBER[-1])
    uuid = gpu.get(Gpu.GPU_PARENT_UUID[-1]) if mig else gpu.get(Gpu.GPU_UUID[-1])
    return [("gpu", "" if index is None else str(index)), ("UUID", uuid), ("uuid", uuid),
            ("pci_bus_id", gpu.get(Gpu.GPU_PCI_BUS_ID[-1])),
            ("device", None if not isinstance(minor, int) or isinstance(minor, bool) else "nvidia%d" % minor),
            ("modelName", name), ("Hostname", record.get(Gpu.HOST[-1])),
            ("DCGM_FI_DRIVER_VERSION", gpu.get(Gpu.GPU_DRIVER_VERSION[-1])),
            ("GPU_I_ID", gpu.get(Gpu.GPU_GPU_INSTANCE_ID[-1]) if mig else None), ("GPU_I_PROFILE", profile)]


def _dcgm_value(gpu: Mapping[str, Any], keys: Tuple[str, ...], convert: str) -> Any:
    """One dcgm-exporter series of a GPU record's `gpu` object, in its units (fields.Dcgm);
    None: no sample."""
    value: Any = object_at(gpu, keys[:-1]) if len(keys) > 1 else gpu
    value = value.get(keys[-1]) if value is not None else None
    if not convert:
        return value
    if convert in _SCALE:
        return None if number_text(value) is None else value * _SCALE[convert]
    if convert == "MiB":
        return None if number_text(value) is None else int(value) // _MIB
    if convert == "0/1":
        return int(value) if isinstance(value, bool) else None
    if convert == "last_xid":
        xids = gpu.get(Gpu.GPU_XID_ERRORS_TOTAL[-1])
        return 0 if xids == 0 else (value if number_text(xids) is not None else None)
    if convert == "mask":
        if not isinstance(value, list):
            return None
        mask = 0
        for r in value:
            mask |= _REASON_BITS.get(r, 0) if isinstance(r, str) else 0
        return mask
    if convert == "free":
        used: Any = gpu.get(Gpu.GPU_MEMORY_USED_BYTES[-1])
        reserved: Any = gpu.get(Gpu.GPU_MEMORY_RESERVED_BYTES[-1])
        if number_text(value) is None or number_text(used) is None:
            return None
        return (value - used - (reserved if number_text(reserved) is not None else 0)) // _MIB
    if convert == "nvlink":
        rx: Any = gpu.get(Gpu.GPU_NVLINK_RX_BYTES_TOTAL[-1])
        return value + rx if number_text(value) is not None and number_text(rx) is not None else None
    if convert == "else_gpm":  # the driver's PCIe counters, else GPM's rate of the same name
        gpm = gpu.get(Gpu.GPU_GPM[-1])
        return value if number_text(value) is not None else (gpm.get(keys[-1]) if isinstance(gpm, dict) else None)
    raise ValueError("unknown DCGM conversion %r" % convert)
