"""The Prometheus exposition of one tick: records in, bytes out, in text format 0.0.4 or
OpenMetrics 1.0 (counter families named without `_total` in `# HELP`/`# TYPE`, `_info`
gauges as `info` families, timestamps in seconds, `# EOF`).

The families are declared in cgstat/fields.py and rendered here; docs/prometheus.md
lists every one (tests/test_fields.py checks it against FAMILIES). Names, units and
labels follow cAdvisor (google/cadvisor, metrics/prometheus.go) wherever cAdvisor has the
meaning, so its dashboards and rules run unchanged; the rest is under `cgstat_`. Raw
counters, never rates; a null gives no sample, never a fake 0; a cgroup's samples carry
the time it was read (the record's `ts`), so `rate()` is exact whatever the scrape's
phase. Labels are escaped and bounded by prometheus_labels.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, cast

from cgstat import fields
from cgstat.outputs.prometheus_labels import (
    BLKIO_OPS,
    LabelCache,
    WorkloadLabels,
    device_braces,
    escape_value,
    join_labels,
    label_brace,
    render_pairs,
    workload_labels,
)
from cgstat.timestamps import ts_millis

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.records import CgroupRecord, GpuRecord, GpuUse, Sampled

TEXT = "text"
OPENMETRICS = "openmetrics"
CONTENT_TYPES = {
    TEXT: "text/plain; version=0.0.4; charset=utf-8",
    OPENMETRICS: "application/openmetrics-text; version=1.0.0; charset=utf-8",
}

def _num(v: Any) -> Optional[str]:
    """A sample value, or None for what is not a number (left out)."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if math.isinf(v):
            return "+Inf" if v > 0 else "-Inf"
        return repr(v)
    return None


# --------------------------------------------------------------------------- families
#
# The families, their order, help and labels are declared in cgstat/fields.py (FAMILIES).
# A family whose `field` is a cgroup's cpu/memory/pids scalar, a block device's or an
# interface's counter, a pressure total or a GPU device's figure is rendered from that
# field below with no code of its own; the others are named here and made by hand.

FAMILIES = fields.FAMILIES
_INDEX = {family.name: i for i, family in enumerate(FAMILIES)}


def header(family: fields.Family, fmt: str) -> str:
    """# HELP and # TYPE of a family: OpenMetrics names counters without _total, infos without _info."""
    name = family.name
    kind = family.kind
    if fmt == OPENMETRICS:
        if kind == "counter" and name.endswith("_total"):
            name = name[:-6]
        elif kind == "info":
            name = name[:-5]
    elif kind == "info":
        kind = "gauge"
    return "# HELP %s %s\n# TYPE %s %s\n" % (name, family.help, name, kind)


F_BUILD = _INDEX["cgstat_build_info"]
F_TICKS = _INDEX["cgstat_ticks_total"]
F_TICK_SECONDS = _INDEX["cgstat_tick_duration_seconds"]
F_RENDER_SECONDS = _INDEX["cgstat_render_duration_seconds"]
F_LAST_TICK = _INDEX["cgstat_last_tick_timestamp_seconds"]
F_CGROUPS = _INDEX["cgstat_cgroups"]
F_GPUS = _INDEX["cgstat_gpus"]
F_RECORD_ERRORS = _INDEX["cgstat_record_errors"]
F_LAST_SEEN = _INDEX["container_last_seen"]
F_CPU_USAGE = _INDEX["container_cpu_usage_seconds_total"]
F_SPEC_QUOTA = _INDEX["container_spec_cpu_quota"]
F_SPEC_PERIOD = _INDEX["container_spec_cpu_period"]
F_BLKIO = _INDEX["container_blkio_device_usage_total"]
F_CGROUP_INFO = _INDEX["cgstat_cgroup_info"]
F_CGPU_MEM = _INDEX["cgstat_container_gpu_memory_bytes"]
F_CGPU_SM = _INDEX["cgstat_container_gpu_sm_percent"]
F_CGPU_PMEM = _INDEX["cgstat_container_gpu_process_memory_bytes"]
F_CGPU_PSM = _INDEX["cgstat_container_gpu_process_sm_percent"]
F_GPU_INFO = _INDEX["cgstat_gpu_info"]
F_GPU_PROCS = _INDEX["cgstat_gpu_processes"]
F_GPU_UNATTR = _INDEX["cgstat_gpu_unattributed_memory_bytes"]
F_CGPU_POWER = _INDEX["cgstat_container_gpu_power_watts"]
F_CGPU_PPOWER = _INDEX["cgstat_container_gpu_process_power_watts"]
F_CGPU_ENERGY = _INDEX["cgstat_container_gpu_energy_joules_total"]
F_GPU_REASON = _INDEX["cgstat_gpu_clocks_event_reason"]
F_MEM_FAILURES = _INDEX["container_memory_failures_total"]
F_CPUSET = _INDEX["cgstat_cpuset_info"]
F_OOM_GROUP = _INDEX["cgstat_memory_oom_group"]
F_IO_LIMIT_BYTES = _INDEX["cgstat_io_limit_bytes_per_second"]
F_IO_LIMIT_OPS = _INDEX["cgstat_io_limit_ops_per_second"]
# (family, record key, its counts) of the memory event objects, one series per count
F_EVENTS_HIGH = _INDEX["container_memory_events_high_total"]
F_EVENTS_MAX = _INDEX["container_memory_events_max_total"]
_MEMORY_EVENTS = tuple((family, key, tuple((name, 'event="%s"' % name) for name in counts)) for family, key, counts in (
    (_INDEX["cgstat_memory_events_total"], "events", ("low", "oom", "oom_group_kill")),
    (_INDEX["cgstat_memory_events_local_total"], "events_local", ("low", "high", "max", "oom", "oom_kill", "oom_group_kill")),
    (_INDEX["cgstat_memory_swap_events_total"], "swap_events", ("high", "max", "fail"))))
_PGMAJFAULT = 'failure_type="pgmajfault",scope="hierarchy"'  # memory.stat counts the subtree
_IO_LIMITS = ((F_IO_LIMIT_BYTES, "read", "read_bytes_per_second"),
              (F_IO_LIMIT_BYTES, "write", "write_bytes_per_second"),
              (F_IO_LIMIT_OPS, "read", "read_ops_per_second"), (F_IO_LIMIT_OPS, "write", "write_ops_per_second"))


def _from_field(scope: str, prefix: str, labels: Tuple[str, ...] = ()) -> Tuple[Tuple[int, str], ...]:
    """(family, key) of the families read as is from the fields `prefix`<key> (key without dots)."""
    return tuple((i, f.field[len(prefix):]) for i, f in enumerate(FAMILIES)
                 if f.scope == scope and f.labels == labels and f.field.startswith(prefix)
                 and "." not in f.field[len(prefix):])


# the scalars of a cgroup record's cpu, memory and pids sections (half the series)
_SCALARS: Tuple[Tuple[str, Tuple[Tuple[int, str], ...]], ...] = tuple(
    (section, _from_field("cgroup", section + ".")) for section in ("cpu", "memory", "pids"))
_IO_DEVICE = _from_field("cgroup", "io.devices[].", ("device",))
_NETWORK = _from_field("cgroup", "network.interfaces[].", ("interface",))
_GPU_DEVICE = _from_field("gpu", "gpu.")
_BY_FIELD = {family.field: i for i, family in enumerate(FAMILIES) if family.field}
_PSI = tuple((res, _BY_FIELD["pressure.%s.some_seconds_total" % res], _BY_FIELD["pressure.%s.full_seconds_total" % res])
             for res in fields.PRESSURE_RESOURCES)

DEFAULT_CPU_PERIOD_US = 100000  # the kernel's default CFS period

# --------------------------------------------------------------------------- time

def _ts_suffix(millis: Optional[int], fmt: str) -> str:
    if millis is None:
        return "\n"
    if fmt == OPENMETRICS:
        return " %d.%03d\n" % divmod(millis, 1000)
    return " %d\n" % millis


# --------------------------------------------------------------------------- rendering
#
# The exposition is made as bytes: a series is four pieces (name, `{labels} `, value,
# timestamp) of which only the value and the timestamp are made per tick (the labels are
# kept from tick to tick, see LabelCache), and one b"".join makes the body. A line per
# series, joined as text and then encoded, made the body's bytes three times over.

_NAMES = [family.name.encode() for family in FAMILIES]


def _value(v: Any) -> Optional[bytes]:
    """_num as bytes, the two common cases first (an int, a finite float: the same text)."""
    cls = v.__class__
    if cls is int:
        return b"%d" % v
    if cls is float and math.isfinite(v):
        return repr(v).encode()
    text = _num(v)
    return None if text is None else text.encode()


def _cgroup_samples(record: CgroupRecord, out: List[List[bytes]], fmt: str, timestamps: bool,
                    workload: WorkloadLabels) -> None:
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = _ts_suffix(millis, fmt).encode()
    base = workload.base
    names = _NAMES

    def add(family: int, value: Any, brace: bytes = workload.brace) -> None:
        # most values are ints or null (no series): _value's cases, written out to save the call
        if value is None:
            return
        text = b"%d" % value if value.__class__ is int else _value(value)
        if text is not None:
            out[family] += (names[family], brace, text, end)

    if millis is not None:
        add(F_LAST_SEEN, millis // 1000)
    cpu = record.get("cpu") or {}
    add(F_CPU_USAGE, cpu.get("usage_seconds_total"), workload.cpu_total)
    brace = workload.brace
    for section, scalars in _SCALARS:  # half the series: add() written out
        get = cast("Dict[str, Any]", record.get(section) or {}).get
        for family, key in scalars:
            value = get(key)
            if value is None:
                continue
            text = b"%d" % value if value.__class__ is int else _value(value)
            if text is not None:
                out[family] += (names[family], brace, text, end)
    quota_us = cpu.get("quota_us")
    period_us = cpu.get("period_us")
    limit = cpu.get("limit_cores")
    if quota_us is None and isinstance(limit, (int, float)) and not isinstance(limit, bool):
        period_us = DEFAULT_CPU_PERIOD_US
        quota_us = int(round(limit * DEFAULT_CPU_PERIOD_US))
    if quota_us is not None:
        add(F_SPEC_QUOTA, quota_us)
        add(F_SPEC_PERIOD, period_us)

    io = record.get("io") or {}
    devices = io.get("devices")
    if isinstance(devices, list):
        seen: Dict[Any, Tuple[bytes, ...]] = {}
        for dev in devices:
            if not isinstance(dev, dict):
                continue
            braces = device_braces(base, dev, workload.devices, seen)
            for family, key in _IO_DEVICE:
                add(family, dev.get(key), braces[0])
            for (_, key), brace in zip(BLKIO_OPS, braces[1:]):
                add(F_BLKIO, dev.get(key), brace)
        workload.devices = seen

    network = record.get("network")
    if isinstance(network, dict) and isinstance(network.get("interfaces"), list):
        interfaces: Dict[str, bytes] = {}
        for iface in network["interfaces"]:
            if isinstance(iface, dict):
                name = str(iface.get("name"))
                brace = workload.interfaces.get(name) or label_brace(base, 'interface="%s"' % escape_value(name))
                interfaces[name] = brace
                for family, key in _NETWORK:
                    add(family, iface.get(key), brace)
        workload.interfaces = interfaces

    pressure = record.get("pressure") or {}
    for res, some, full in _PSI:
        psi = pressure.get(res)
        if isinstance(psi, dict):
            add(some, psi.get("some_seconds_total"))
            add(full, psi.get("full_seconds_total"))

    _issue23_samples(record, add, workload)
    add(F_CGROUP_INFO, 1, workload.info)

    gpu = record.get("gpu")
    if isinstance(gpu, dict):
        def add_gpu(family: int, value: Any, extra: str = "") -> None:
            add(family, value, label_brace(base, extra))  # a process's labels change: not kept

        _container_gpu(gpu, add_gpu)


def _issue23_samples(record: CgroupRecord, add: Callable[..., None], workload: WorkloadLabels) -> None:
    """The series of the memory events, major faults, OOM group, cpuset and IO limits."""
    memory: Dict[str, Any] = cast("Dict[str, Any]", record.get("memory") or {})
    cpu: Dict[str, Any] = cast("Dict[str, Any]", record.get("cpu") or {})
    # (the braces with one more label are looked up only for a value: most are null on v1)
    value = memory.get("pgmajfault_total")
    if value is not None:
        add(F_MEM_FAILURES, value, workload.with_label(_PGMAJFAULT))
    events = memory.get("events")
    if isinstance(events, dict):
        add(F_EVENTS_HIGH, events.get("high"))
        add(F_EVENTS_MAX, events.get("max"))
    for family, key, counts in _MEMORY_EVENTS:
        events = memory.get(key)
        if isinstance(events, dict):
            for name, label in counts:
                value = events.get(name)
                if value is not None:
                    add(family, value, workload.with_label(label))
    group = memory.get("oom_group")
    if isinstance(group, bool):
        add(F_OOM_GROUP, int(group))
    cpus, mems = cpu.get("cpuset_cpus"), cpu.get("cpuset_mems")
    if isinstance(cpus, str) or isinstance(mems, str):
        add(F_CPUSET, 1, workload.with_label(render_pairs((("cpus", cpus), ("mems", mems)))))
    limits = cast("Dict[str, Any]", record.get("io") or {}).get("limits")
    if isinstance(limits, list):
        for lim in limits:
            if not isinstance(lim, dict):
                continue
            dname = lim.get("name")
            device = "/dev/%s" % dname if dname else str(lim.get("device") or "")
            for family, op, key in _IO_LIMITS:
                add(family, lim.get(key), label_brace(workload.base, 'device="%s",operation="%s"' % (
                    escape_value(device), op)))


def _container_gpu(gpu: GpuUse, add: Callable[[int, Any, str], None]) -> None:
    per_gpu: Dict[Tuple[str, str], List[Any]] = {}
    processes = gpu.get("processes")
    if not isinstance(processes, list):
        return
    for p in processes:
        if not isinstance(p, dict):
            continue
        gpu_index = p.get("gpu_index")
        key = ("" if gpu_index is None else str(gpu_index), p.get("gpu_uuid") or "")
        sums: List[Any] = per_gpu.setdefault(key, [None, None, None])
        mem: Any = p.get("memory_bytes")
        sm: Any = p.get("sm_percent")
        watts: Any = p.get("power_watts")
        if _num(mem) is not None:
            sums[0] = (sums[0] or 0) + mem
        if _num(sm) is not None:
            sums[1] = (sums[1] or 0) + sm
        if _num(watts) is not None:
            sums[2] = (sums[2] or 0) + watts
        pid = p.get("pid")
        extra = render_pairs((("gpu", key[0]), ("uuid", key[1]), ("pid", pid), ("process", p.get("name")),
                         ("type", p.get("type"))))
        add(F_CGPU_PMEM, mem, extra)
        add(F_CGPU_PSM, sm, extra)
        add(F_CGPU_PPOWER, watts, extra)
    for (index, uuid), (mem, sm, watts) in per_gpu.items():
        extra = render_pairs((("gpu", index), ("uuid", uuid)))
        add(F_CGPU_MEM, mem, extra)
        add(F_CGPU_SM, sm, extra)
        add(F_CGPU_POWER, watts, extra)
    add(F_CGPU_ENERGY, gpu.get("energy_joules_total"), "")


def _gpu_samples(record: GpuRecord, out: List[List[bytes]], fmt: str, timestamps: bool) -> None:
    gpu = record.get("gpu")
    if not isinstance(gpu, dict):
        return
    index = gpu.get("index")
    base = render_pairs((("gpu", "" if index is None else str(index)), ("uuid", gpu.get("uuid"))))
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = _ts_suffix(millis, fmt)

    def add(family: int, value: Any, extra: str = "") -> None:
        text = _num(value)
        if text is not None:
            line = FAMILIES[family].name + "{" + join_labels(base, extra) + "} " + text + end
            out[family].append(line.encode("utf-8", "backslashreplace"))

    add(F_GPU_INFO, 1, render_pairs((("model", gpu.get("name")), ("mig_mode", gpu.get("mig_mode")),
                                ("parent_uuid", gpu.get("parent_uuid")))))
    for family, key in _GPU_DEVICE:
        add(family, gpu.get(key))
    reasons = gpu.get("clocks_event_reasons")
    if isinstance(reasons, list):
        for reason in reasons:
            if isinstance(reason, str):
                add(F_GPU_REASON, 1, render_pairs((("reason", reason),)))
    dcgm = render_pairs(_dcgm_labels(record, gpu))
    for name, value in _dcgm_values(gpu):
        text = _num(value)
        if text is not None:
            line = name + "{" + dcgm + "} " + text + end
            out[_INDEX[name]].append(line.encode("utf-8", "backslashreplace"))
    processes = record.get("processes")
    if isinstance(processes, list):
        add(F_GPU_PROCS, len(processes))
        unattributed = 0
        for p in processes:
            memory: Any = p.get("memory_bytes") if isinstance(p, dict) and p.get("cgroup") is None else None
            if _num(memory) is not None:
                unattributed += memory
        add(F_GPU_UNATTR, unattributed)


_REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100}
_MIB = 1 << 20


def _dcgm_labels(record: Mapping[str, Any], gpu: Mapping[str, Any]) -> List[Tuple[str, Any]]:
    """dcgm-exporter's labels: a MIG device is named as dcgm-exporter names it, by its
    parent GPU's UUID and model, plus GPU_I_ID and GPU_I_PROFILE (the profile in its name)."""
    index = gpu.get("index")
    name = gpu.get("name")
    mig = gpu.get("parent_uuid") is not None
    profile = None
    if mig and isinstance(name, str) and " MIG " in name:
        name, profile = name.split(" MIG ", 1)
    minor = gpu.get("minor_number")
    uuid = gpu.get("parent_uuid") if mig else gpu.get("uuid")
    return [("gpu", "" if index is None else str(index)), ("UUID", uuid), ("uuid", uuid),
            ("pci_bus_id", gpu.get("pci_bus_id")),
            ("device", None if not isinstance(minor, int) or isinstance(minor, bool) else "nvidia%d" % minor),
            ("modelName", name), ("Hostname", record.get("host")),
            ("DCGM_FI_DRIVER_VERSION", gpu.get("driver_version")),
            ("GPU_I_ID", gpu.get("gpu_instance_id") if mig else None), ("GPU_I_PROFILE", profile)]


def _mib(value: Any) -> Any:
    return None if _num(value) is None else int(value) // _MIB


def _scaled(value: Any, scale: float) -> Any:
    return None if _num(value) is None else value * scale


def _dcgm_values(gpu: Mapping[str, Any]) -> List[Tuple[str, Any]]:
    """(series, value) of one GPU record in dcgm-exporter's units; None: no sample."""
    def at(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, dict) else None

    total: Any = gpu.get("memory_total_bytes")
    used: Any = gpu.get("memory_used_bytes")
    reserved: Any = gpu.get("memory_reserved_bytes")
    free = None
    if all(_num(v) is not None for v in (total, used)):
        free = (total - used - (reserved if _num(reserved) is not None else 0)) // _MIB
    xids, last = gpu.get("xid_errors_total"), gpu.get("last_xid")
    reasons = gpu.get("clocks_event_reasons")
    mask = None
    if isinstance(reasons, list):
        mask = 0
        for r in reasons:
            mask |= _REASON_BITS.get(r, 0) if isinstance(r, str) else 0
    nvlink = None
    tx: Any = gpu.get("nvlink_tx_bytes_total")
    rx: Any = gpu.get("nvlink_rx_bytes_total")
    if _num(tx) is not None and _num(rx) is not None:
        nvlink = tx + rx
    viol, ecc, pages, rows, gpm = (gpu.get("violation_seconds_total"), gpu.get("ecc_errors_total"),
                                   gpu.get("retired_pages"), gpu.get("remapped_rows"), gpu.get("gpm"))
    pending = at(pages, "pending")
    pcie_tx = gpu.get("pcie_tx_bytes_per_second")
    pcie_rx = gpu.get("pcie_rx_bytes_per_second")
    return [
        ("DCGM_FI_DEV_SM_CLOCK", gpu.get("sm_clock_mhz")),
        ("DCGM_FI_DEV_MEM_CLOCK", gpu.get("memory_clock_mhz")),
        ("DCGM_FI_DEV_MEMORY_TEMP", gpu.get("memory_temperature_celsius")),
        ("DCGM_FI_DEV_GPU_TEMP", gpu.get("temperature_celsius")),
        ("DCGM_FI_DEV_POWER_USAGE", gpu.get("power_watts")),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT", gpu.get("power_limit_watts")),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", _scaled(gpu.get("energy_joules_total"), 1000)),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu.get("pcie_replays_total")),
        ("DCGM_FI_DEV_GPU_UTIL", gpu.get("utilization_percent")),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", gpu.get("memory_utilization_percent")),
        ("DCGM_FI_DEV_ENC_UTIL", gpu.get("encoder_utilization_percent")),
        ("DCGM_FI_DEV_DEC_UTIL", gpu.get("decoder_utilization_percent")),
        ("DCGM_FI_DEV_XID_ERRORS", 0 if xids == 0 else (last if _num(xids) is not None else None)),
        ("DCGM_FI_DEV_POWER_VIOLATION", _scaled(at(viol, "power"), 1e6)),
        ("DCGM_FI_DEV_THERMAL_VIOLATION", _scaled(at(viol, "thermal"), 1e6)),
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", mask),
        ("DCGM_FI_DEV_FB_FREE", free),
        ("DCGM_FI_DEV_FB_USED", _mib(used)),
        ("DCGM_FI_DEV_FB_RESERVED", _mib(reserved)),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", at(ecc, "corrected")),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", at(ecc, "uncorrected")),
        ("DCGM_FI_DEV_RETIRED_SBE", at(pages, "single_bit")),
        ("DCGM_FI_DEV_RETIRED_DBE", at(pages, "double_bit")),
        ("DCGM_FI_DEV_RETIRED_PENDING", None if not isinstance(pending, bool) else int(pending)),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", nvlink),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", at(rows, "uncorrectable")),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", at(rows, "correctable")),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", at(rows, "failure")),
        ("DCGM_FI_DEV_ROW_REMAP_PENDING", at(rows, "pending")),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", _scaled(at(gpm, "graphics_activity_percent"), 0.01)),
        ("DCGM_FI_PROF_SM_ACTIVE", _scaled(at(gpm, "sm_activity_percent"), 0.01)),
        ("DCGM_FI_PROF_SM_OCCUPANCY", _scaled(at(gpm, "sm_occupancy_percent"), 0.01)),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", _scaled(at(gpm, "tensor_activity_percent"), 0.01)),
        ("DCGM_FI_PROF_DRAM_ACTIVE", _scaled(at(gpm, "dram_bandwidth_percent"), 0.01)),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", pcie_tx if _num(pcie_tx) is not None else at(gpm, "pcie_tx_bytes_per_second")),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", pcie_rx if _num(pcie_rx) is not None else at(gpm, "pcie_rx_bytes_per_second")),
        ("DCGM_FI_PROF_NVLINK_TX_BYTES", at(gpm, "nvlink_tx_bytes_per_second")),
        ("DCGM_FI_PROF_NVLINK_RX_BYTES", at(gpm, "nvlink_rx_bytes_per_second")),
    ]


def _self_samples(self_metrics: Dict[str, Any], records: Sequence[Sampled], out: List[List[bytes]]) -> None:
    def add(family: int, value: Any, labels: str = "") -> None:
        text = _num(value)
        if text is not None:
            line = FAMILIES[family].name + ("{" + labels + "} " if labels else " ") + text + "\n"
            out[family].append(line.encode("utf-8", "backslashreplace"))

    add(F_BUILD, 1, render_pairs((("version", self_metrics.get("version")),)))
    add(F_TICKS, self_metrics.get("ticks_total"))
    add(F_TICK_SECONDS, self_metrics.get("tick_duration_seconds"))
    add(F_RENDER_SECONDS, self_metrics.get("render_duration_seconds"))
    add(F_LAST_TICK, self_metrics.get("last_tick_timestamp_seconds"))
    counts: Dict[str, int] = {"cgroup": 0, "pod": 0}
    errors: Dict[str, int] = {}
    gpus = 0
    for r in records:
        kind = r.get("type")
        if kind == "gpu":
            gpus += 1
        elif kind in counts:
            counts[kind] += 1
        for e in r.get("errors") or ():
            code = e.get("error") if isinstance(e, dict) else None
            if isinstance(code, str):
                errors[code] = errors.get(code, 0) + 1
    for kind in sorted(counts):
        add(F_CGROUPS, counts[kind], 'type="%s"' % kind)
    add(F_GPUS, gpus)
    for code in sorted(errors):
        add(F_RECORD_ERRORS, errors[code], 'error="%s"' % escape_value(code))


F_OOM = _INDEX["container_oom_events_total"]
def render(records: Sequence[Sampled], fmt: str = TEXT, self_metrics: Optional[Dict[str, Any]] = None,
           timestamps: bool = True, cache: Optional[LabelCache] = None,
           retained: Iterable[Tuple[str, int]] = ()) -> bytes:
    """The exposition of one tick.

    `records`: the Sampler's records (types cgroup, pod, gpu; anything else is skipped).
    `self_metrics`: the exporter's own figures (keys: version, ticks_total,
    tick_duration_seconds, render_duration_seconds, last_tick_timestamp_seconds); None
    renders the record-derived ones only. `timestamps`: stamp cgroup and GPU samples with
    their record's `ts`. `cache`: the labels of the last tick's workloads, used and
    replaced by this tick's (the same bytes as without it, made in less time).
    `retained`: (labels, value) of the OOM-kill counters of gone cgroups (OomRetention),
    written without a timestamp (the scrape's time: the series stays current while kept).
    """
    if fmt not in CONTENT_TYPES:
        raise ValueError("unknown exposition format %r" % (fmt,))
    out: List[List[bytes]] = [[] for _ in FAMILIES]
    _self_samples(self_metrics or {}, records, out)
    last = cache.workloads if cache is not None else {}
    kept: Dict[str, WorkloadLabels] = {}
    for record in records:
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        if kind == "cgroup" or kind == "pod":
            workload = cast("CgroupRecord", record)
            _cgroup_samples(workload, out, fmt, timestamps, workload_labels(workload, last, kept))
        elif kind == "gpu":
            _gpu_samples(cast("GpuRecord", record), out, fmt, timestamps)
    if cache is not None:
        cache.workloads = kept  # one reference swap: a render in another thread sees either
    oom_name = FAMILIES[F_OOM].name
    for labels, value in retained:
        out[F_OOM].append(("%s{%s} %d\n" % (oom_name, labels, value)).encode("utf-8", "backslashreplace"))
    parts: List[bytes] = []
    for family, pieces in zip(FAMILIES, out):
        if pieces:
            parts.append(header(family, fmt).encode())
            parts += pieces
    if fmt == OPENMETRICS:
        parts.append(b"# EOF\n")
    return b"".join(parts)
