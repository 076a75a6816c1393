"""The Prometheus exposition of one tick: records in, bytes out, in text format 0.0.4 or
OpenMetrics 1.0 (counter families named without `_total` in `# HELP`/`# TYPE`, `_info`
gauges as `info` families, timestamps in seconds, `# EOF`).

The families are declared in cgstat/contract/fields.py and rendered here; docs/prometheus.md
lists every one (tests/unit/test_fields.py checks it against FAMILIES). Names, units and
labels follow cAdvisor (google/cadvisor, metrics/prometheus.go) wherever cAdvisor has the
meaning, so its dashboards and rules run unchanged; the rest is under `cgstat_`. Raw
counters, never rates; a null gives no sample, never a fake 0; a cgroup's samples carry
the time it was read (the record's `ts`), so `rate()` is exact whatever the scrape's
phase. Labels are escaped and bounded by cgstat/outputs/prometheus/labels.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, cast

from cgstat.contract import fields
from cgstat.contract.keys import Cgroup, Gpu
from cgstat.outputs.prometheus.labels import (
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

if TYPE_CHECKING:
    from cgstat.outputs.prometheus.budget import Fold

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import CgroupRecord, GpuRecord, GpuUse, IoDevice, Sampled

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
# The families, their order, help and labels are declared in cgstat/contract/fields.py (FAMILIES),
# and rendered here by kind: a field's series (a number at a path, with the fixed labels
# its declaration gives: a cgroup's cpu/memory/pids figures, memory events by event, page
# faults by failure_type and scope, pressure totals, a GPU's figures), per item of an
# array (a block device's, an interface's counters), dcgm-exporter's device series
# (fields.DCGM_SERIES, converted to its units), and the few made of several fields.

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
F_GPU_LATE = _INDEX["cgstat_gpu_reads_late_total"]
F_CGROUPS = _INDEX["cgstat_cgroups"]
F_GPUS = _INDEX["cgstat_gpus"]
F_RECORD_ERRORS = _INDEX["cgstat_record_errors"]
F_LAST_SEEN = _INDEX["container_last_seen"]
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
F_GPU_REASON = _INDEX["cgstat_gpu_clocks_event_reason"]
F_CPUSET = _INDEX["cgstat_cpuset_info"]
F_IO_LIMIT_BYTES = _INDEX["cgstat_io_limit_bytes_per_second"]
F_IO_LIMIT_OPS = _INDEX["cgstat_io_limit_ops_per_second"]
F_OOM = _INDEX["container_oom_events_total"]
F_HELD_IDLE = _INDEX["cgstat_gpu_held_idle_seconds_total"]
F_EXITED = tuple((_INDEX[name], key) for name, key, _ in fields.EXIT_SERIES)
# families the exporter counts or keeps over ticks (render's `held_idle`, `exited`), not
# rendered from a cgroup or GPU record
COUNTED_OVER_TICKS = frozenset((FAMILIES[F_HELD_IDLE].name,) + tuple(FAMILIES[i].name for i, _ in F_EXITED))
_IO_LIMITS = ((F_IO_LIMIT_BYTES, "read", Cgroup.IO_LIMITS_ITEM_READ_BYTES_PER_SECOND[-1]),
              (F_IO_LIMIT_BYTES, "write", Cgroup.IO_LIMITS_ITEM_WRITE_BYTES_PER_SECOND[-1]),
              (F_IO_LIMIT_OPS, "read", Cgroup.IO_LIMITS_ITEM_READ_OPS_PER_SECOND[-1]),
              (F_IO_LIMIT_OPS, "write", Cgroup.IO_LIMITS_ITEM_WRITE_OPS_PER_SECOND[-1]))

_Series = Tuple[int, str, str]  # (family, key in its object, fixed labels)


def _series(table: Tuple[fields.Field, ...]) -> Tuple[Tuple[Tuple[str, ...], Tuple[_Series, ...]], ...]:
    """The field series of a record that are not in an array's items, by the object holding
    them: ((keys to the object, ((family, key, labels), ...)), ...)."""
    by_object: Dict[Tuple[str, ...], List[_Series]] = {}
    for f in table:
        if f.metrics and "[]" not in f.path:
            *parent, key = f.path.split(".")
            by_object.setdefault(tuple(parent), []).extend((_INDEX[m.family], key, m.labels) for m in f.metrics)
    return tuple((parent, tuple(series)) for parent, series in by_object.items())


def _item_series(table: Tuple[fields.Field, ...], array: str) -> Tuple[Tuple[int, str], ...]:
    """(family, key) of the series of each item of `array` (its label: fields.ITEM_LABELS)."""
    return tuple((_INDEX[m.family], f.path[len(array) + 3:]) for f in table if f.path.startswith(array + "[].")
                 for m in f.metrics)


# (key, key below it or None, series): a cgroup record's objects are at most two deep
_SCALARS = tuple((keys[0], keys[1] if len(keys) > 1 else None, series) for keys, series in _series(fields.RECORD))
if any(len(keys) > 2 for keys, _ in _series(fields.RECORD)):
    raise ValueError("a cgroup series three objects deep: _cgroup_samples reads two")
_IO_DEVICE = _item_series(fields.RECORD, "io.devices")
_NETWORK = _item_series(fields.RECORD, "network.interfaces")
_PROCESSES = _item_series(fields.RECORD, "processes.processes")
_GPU_SCALARS = _series(fields.GPU_RECORD)
_DCGM = tuple((_INDEX[d.name], fields.keys(d.field, fields.GPU_RECORD)[1:], d.convert) for d in fields.DCGM_SERIES)

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
    """_num as bytes, the two common cases first (an int, a finite float: the same text); a
    bool as 1 or 0 (a flag's series)."""
    cls = v.__class__
    if cls is int:
        return b"%d" % v
    if cls is float and math.isfinite(v):
        return repr(v).encode()
    if cls is bool:
        return b"1" if v else b"0"
    text = _num(v)
    return None if text is None else text.encode()


def _object(record: Any, keys: Tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record if isinstance(record, dict) else None


def _cgroup_samples(record: CgroupRecord, out: List[List[bytes]], fmt: str, timestamps: bool,
                    workload: WorkloadLabels) -> None:
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = _ts_suffix(millis, fmt).encode()
    base = workload.base
    names = _NAMES
    brace = workload.brace

    def add(family: int, value: Any, brace: bytes = brace) -> None:
        # most values are ints or null (no series): _value's cases, written out to save the call
        if value is None:
            return
        text = b"%d" % value if value.__class__ is int else _value(value)
        if text is not None:
            out[family] += (names[family], brace, text, end)

    if millis is not None:
        add(F_LAST_SEEN, millis // 1000)
    for top, inner, series in _SCALARS:  # most series: add() written out
        obj: Any = record.get(top)
        if inner is not None and obj.__class__ is dict:
            obj = obj.get(inner)
        if obj.__class__ is not dict:
            continue
        get = obj.get
        for family, key, labels in series:
            value = get(key)
            if value is None:
                continue
            text = b"%d" % value if value.__class__ is int else _value(value)
            if text is not None:  # (the braces with more labels looked up only for a value)
                out[family] += (names[family], workload.with_label(labels) if labels else brace, text, end)

    cpu = cast("Dict[str, Any]", record.get("cpu") or {})
    quota_us = cpu.get(Cgroup.CPU_QUOTA_US[-1])
    period_us = cpu.get(Cgroup.CPU_PERIOD_US[-1])
    limit = cpu.get(Cgroup.CPU_LIMIT_CORES[-1])
    if quota_us is None and isinstance(limit, (int, float)) and not isinstance(limit, bool):
        period_us = DEFAULT_CPU_PERIOD_US
        quota_us = int(round(limit * DEFAULT_CPU_PERIOD_US))
    if quota_us is not None:
        add(F_SPEC_QUOTA, quota_us)
        add(F_SPEC_PERIOD, period_us)
    cpus, mems = cpu.get(Cgroup.CPU_CPUSET_CPUS[-1]), cpu.get(Cgroup.CPU_CPUSET_MEMS[-1])
    if isinstance(cpus, str) or isinstance(mems, str):
        add(F_CPUSET, 1, workload.with_label(render_pairs((("cpus", cpus), ("mems", mems)))))

    io = cast("Dict[str, Any]", record.get("io") or {})
    devices = io.get(Cgroup.IO_DEVICES[-1])
    if isinstance(devices, list):
        seen: Dict[Any, Tuple[bytes, ...]] = {}
        for dev in devices:
            if not isinstance(dev, dict):
                continue
            braces = device_braces(base, cast("IoDevice", dev), workload.devices, seen)
            for family, key in _IO_DEVICE:
                add(family, dev.get(key), braces[0])
            for (_, key), brace in zip(BLKIO_OPS, braces[1:]):
                add(F_BLKIO, dev.get(key), brace)
        workload.devices = seen
    limits = io.get(Cgroup.IO_LIMITS[-1])
    if isinstance(limits, list):
        for lim in limits:
            if not isinstance(lim, dict):
                continue
            dname = lim.get(Cgroup.IO_LIMITS_ITEM_NAME[-1])
            device = "/dev/%s" % dname if dname else str(lim.get(Cgroup.IO_LIMITS_ITEM_DEVICE[-1]) or "")
            for family, op, key in _IO_LIMITS:
                add(family, lim.get(key), label_brace(base, 'device="%s",operation="%s"' % (escape_value(device), op)))

    network = record.get("network")
    interfaces_list = network.get(Cgroup.NETWORK_INTERFACES[-1]) if isinstance(network, dict) else None
    if isinstance(interfaces_list, list):
        interfaces: Dict[str, bytes] = {}
        for iface in interfaces_list:
            if isinstance(iface, dict):
                name = str(iface.get(Cgroup.NETWORK_INTERFACES_ITEM_NAME[-1]))
                brace = workload.interfaces.get(name) or label_brace(base, 'interface="%s"' % escape_value(name))
                interfaces[name] = brace
                for family, key in _NETWORK:
                    add(family, iface.get(key), brace)
        workload.interfaces = interfaces

    add(F_CGROUP_INFO, 1, workload.info)

    processes = record.get("processes")  # stream --processes N: at most N, by the stream's bound
    if isinstance(processes, dict) and isinstance(processes.get("processes"), list):
        for p in processes["processes"]:
            if isinstance(p, dict):
                brace = label_brace(base, render_pairs((("pid", p.get("pid")), ("process", p.get("name")))))
                for family, key in _PROCESSES:
                    add(family, p.get(key), brace)

    gpu = record.get("gpu")
    if isinstance(gpu, dict):
        def add_gpu(family: int, value: Any, extra: str = "") -> None:
            add(family, value, label_brace(base, extra))  # a process's labels change: not kept

        _container_gpu(gpu, add_gpu)


def _container_gpu(gpu: GpuUse, add: Callable[[int, Any, str], None]) -> None:
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
        if _num(mem) is not None:
            sums[0] = (sums[0] or 0) + mem
        if _num(sm) is not None:
            sums[1] = (sums[1] or 0) + sm
        if _num(watts) is not None:
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


def _gpu_samples(record: GpuRecord, out: List[List[bytes]], fmt: str, timestamps: bool) -> None:
    gpu = record.get("gpu")
    if not isinstance(gpu, dict):
        return
    index = gpu.get(Gpu.GPU_INDEX[-1])
    base = render_pairs((("gpu", "" if index is None else str(index)), ("uuid", gpu.get(Gpu.GPU_UUID[-1]))))
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = _ts_suffix(millis, fmt)

    def add(family: int, value: Any, extra: str = "") -> None:
        text = _num(value) if value.__class__ is not bool else str(int(value))
        if text is not None:
            line = FAMILIES[family].name + "{" + join_labels(base, extra) + "} " + text + end
            out[family].append(line.encode("utf-8", "backslashreplace"))

    add(F_GPU_INFO, 1, render_pairs((("model", gpu.get(Gpu.GPU_NAME[-1])), ("mig_mode", gpu.get(Gpu.GPU_MIG_MODE[-1])),
                                     ("parent_uuid", gpu.get(Gpu.GPU_PARENT_UUID[-1])))))
    for keys, series in _GPU_SCALARS:
        obj = _object(record, keys)
        if obj is not None:
            for family, key, labels in series:
                add(family, obj.get(key), labels)
    reasons = gpu.get(Gpu.GPU_CLOCKS_EVENT_REASONS[-1])
    if isinstance(reasons, list):
        for reason in reasons:
            if isinstance(reason, str):
                add(F_GPU_REASON, 1, render_pairs((("reason", reason),)))
    dcgm = render_pairs(_dcgm_labels(record, gpu))
    for family, keys, convert in _DCGM:
        text = _num(_dcgm_value(gpu, keys, convert))
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
            if _num(memory) is not None:
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
    value: Any = _object(gpu, keys[:-1]) if len(keys) > 1 else gpu
    value = value.get(keys[-1]) if value is not None else None
    if not convert:
        return value
    if convert in _SCALE:
        return None if _num(value) is None else value * _SCALE[convert]
    if convert == "MiB":
        return None if _num(value) is None else int(value) // _MIB
    if convert == "0/1":
        return int(value) if isinstance(value, bool) else None
    if convert == "last_xid":
        xids = gpu.get(Gpu.GPU_XID_ERRORS_TOTAL[-1])
        return 0 if xids == 0 else (value if _num(xids) is not None else None)
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
        if _num(value) is None or _num(used) is None:
            return None
        return (value - used - (reserved if _num(reserved) is not None else 0)) // _MIB
    if convert == "nvlink":
        rx: Any = gpu.get(Gpu.GPU_NVLINK_RX_BYTES_TOTAL[-1])
        return value + rx if _num(value) is not None and _num(rx) is not None else None
    if convert == "else_gpm":  # the driver's PCIe counters, else GPM's rate of the same name
        gpm = gpu.get(Gpu.GPU_GPM[-1])
        return value if _num(value) is not None else (gpm.get(keys[-1]) if isinstance(gpm, dict) else None)
    raise ValueError("unknown DCGM conversion %r" % convert)


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
    add(F_GPU_LATE, self_metrics.get("gpu_reads_late_total"))
    counts: Dict[str, int] = {"cgroup": 0, "pod": 0}
    errors: Dict[str, int] = {}
    gpus = 0
    for r in records:
        kind = r.get("type")
        if kind == "gpu":
            gpus += 1
        elif kind in counts:
            counts[kind] += 1
        else:
            continue  # an exit record has no errors of a read
        for e in cast("List[Any]", r.get("errors") or ()):
            code = e.get("error") if isinstance(e, dict) else None
            if isinstance(code, str):
                errors[code] = errors.get(code, 0) + 1
    for kind in sorted(counts):
        add(F_CGROUPS, counts[kind], 'type="%s"' % kind)
    add(F_GPUS, gpus)
    for code in sorted(errors):
        add(F_RECORD_ERRORS, errors[code], 'error="%s"' % escape_value(code))


def render(records: Sequence[Sampled], fmt: str = TEXT, self_metrics: Optional[Dict[str, Any]] = None,
           timestamps: bool = True, cache: Optional[LabelCache] = None,
           retained: Iterable[Tuple[str, int]] = (), held_idle: Iterable[Tuple[str, float]] = (),
           exited: Iterable[Tuple[str, Any]] = (), fold: Optional[Fold] = None) -> bytes:
    """The exposition of one tick.

    `records`: the Sampler's records (types cgroup, pod, gpu; anything else is skipped).
    `self_metrics`: the exporter's own figures (keys: version, ticks_total,
    tick_duration_seconds, render_duration_seconds, last_tick_timestamp_seconds); None
    renders the record-derived ones only. `timestamps`: stamp cgroup and GPU samples with
    their record's `ts`. `cache`: the labels of the last tick's workloads, used and
    replaced by this tick's (the same bytes as without it, made in less time).
    `retained`: (labels, value) of the OOM-kill counters of gone cgroups (OomRetention),
    written without a timestamp (the scrape's time: the series stays current while kept).
    `held_idle`: (labels, GPU-seconds) of cgstat_gpu_held_idle_seconds_total (HeldIdleSeconds).
    `exited`: (labels, exit record) of gone cgroups (ExitRetention): the cgstat_exited_* gauges.
    `fold`: the tick's series budget (cgstat/outputs/prometheus/budget.py): groups turned off, cgroups
    folded into _other; the same Fold gives the same exposition in either format.
    """
    if fmt not in CONTENT_TYPES:
        raise ValueError("unknown exposition format %r" % (fmt,))
    out: List[List[bytes]] = [[] for _ in FAMILIES]
    _self_samples(self_metrics or {}, records, out)
    last = cache.workloads if cache is not None else {}
    kept: Dict[str, WorkloadLabels] = {}
    folding = fold is not None and fold.budget.active and fold.spans
    if fold is not None:  # (a render made again reads them again)
        retained, held_idle, exited = list(retained), list(held_idle), list(exited)
    starts: List[List[int]] = []  # where each cgroup's pieces begin and end, family by family (a fold's)
    ends: List[List[int]] = []
    folds: List[CgroupRecord] = []
    bases: List[str] = []
    mark = list(map(len, out)) if folding else []  # where the next cgroup's pieces begin
    for record in records:
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        if kind == "cgroup" or kind == "pod":
            workload = cast("CgroupRecord", record)
            labels = workload_labels(workload, last, kept)
            if folding:
                starts.append(mark)
                folds.append(workload)
                bases.append(labels.base)
            _cgroup_samples(workload, out, fmt, timestamps, labels)
            if folding:
                mark = list(map(len, out))
                ends.append(mark)
        elif kind == "gpu":
            _gpu_samples(cast("GpuRecord", record), out, fmt, timestamps)
            if folding:
                mark = list(map(len, out))
    if cache is not None:
        cache.workloads = kept  # one reference swap: a render in another thread sees either
    if fold is not None and not folding:
        ends.append(list(map(len, out)))
    oom_name = FAMILIES[F_OOM].name
    for kept_labels, value in retained:
        out[F_OOM].append(("%s{%s} %d\n" % (oom_name, kept_labels, value)).encode("utf-8", "backslashreplace"))
    held_name = FAMILIES[F_HELD_IDLE].name
    for kept_labels, r in exited:
        for index, key in F_EXITED:
            v = _num(r.get(key))
            if v is not None:
                out[index].append(("%s{%s} %s\n" % (FAMILIES[index].name, kept_labels, v)).encode(
                    "utf-8", "backslashreplace"))
    for kept_labels, seconds in held_idle:
        out[F_HELD_IDLE].append(("%s{%s} %s\n" % (held_name, kept_labels, _num(seconds))).encode("utf-8", "backslashreplace"))
    if fold is not None:
        millis = [ts_millis(r.get("ts")) if timestamps else None for r in folds]
        if fold.apply(out, starts, ends, folds, bases, millis, _value, lambda ms: _ts_suffix(ms, fmt).encode()):
            fold.spans = True  # past the budget without noting where each cgroup is: again
            return render(records, fmt, self_metrics, timestamps, cache, retained, held_idle, exited, fold)
    parts: List[bytes] = []
    for family, pieces in zip(FAMILIES, out):
        if pieces:
            parts.append(header(family, fmt).encode())
            parts += pieces
    if fmt == OPENMETRICS:
        parts.append(b"# EOF\n")
    return b"".join(parts)
