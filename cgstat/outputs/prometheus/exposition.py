"""The Prometheus exposition of one tick: records in, bytes out, in text format 0.0.4 or
OpenMetrics 1.0. The families are declared in cgstat/contract/fields.py and rendered here
(their table and formatters in families.py, a GPU record's series in gpu_series.py, labels
escaped and bounded by labels.py); docs/prometheus.md lists every one. Reads no host file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, cast

from cgstat.contract.keys import Cgroup
from cgstat.outputs.prometheus.families import (
    CONTENT_TYPES,
    DEFAULT_CPU_PERIOD_US,
    FAMILIES,
    F_BLKIO,
    F_BUILD,
    F_CGROUPS,
    F_CGROUP_INFO,
    F_CPUSET,
    F_EXITED,
    F_GPUS,
    F_GPU_CALL_ERRORS,
    F_GPU_LATE,
    F_HELD_IDLE,
    F_LAST_SEEN,
    F_LAST_TICK,
    F_OOM,
    F_RECORD_ERRORS,
    F_RENDER_SECONDS,
    F_SPEC_PERIOD,
    F_SPEC_QUOTA,
    F_TICKS,
    F_TICK_SECONDS,
    IO_DEVICE_SERIES,
    IO_LIMITS,
    NAME_BYTES,
    NETWORK_SERIES,
    OPENMETRICS,
    PROCESS_SERIES,
    SCALARS,
    TEXT,
    header,
    number_text,
    ts_suffix,
    value_bytes,
)
from cgstat.outputs.prometheus.families import COUNTED_OVER_TICKS  # noqa: F401  (for the exporter's users)
from cgstat.outputs.prometheus.gpu_series import container_gpu_samples, gpu_samples
from cgstat.outputs.prometheus.labels import (
    BLKIO_OPS,
    LabelCache,
    WorkloadLabels,
    device_braces,
    escape_value,
    label_brace,
    render_pairs,
    workload_labels,
)
from cgstat.timestamps import ts_millis

if TYPE_CHECKING:
    from cgstat.outputs.prometheus.budget import Fold

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import CgroupRecord, GpuRecord, IoDevice, Sampled


# OpenMetrics 1.0: counter families named without `_total` in `# HELP`/`# TYPE`, `_info`
# gauges as `info` families, timestamps in seconds, `# EOF`. docs/prometheus.md lists every
# family (tests/unit/test_fields.py checks it against FAMILIES). Names, units and labels
# follow cAdvisor (google/cadvisor, metrics/prometheus.go) wherever cAdvisor has the
# meaning, so its dashboards and rules run unchanged; the rest is under `cgstat_`. Raw
# counters, never rates; a null gives no sample, never a fake 0; a cgroup's samples carry
# the time it was read (the record's `ts`), so `rate()` is exact whatever the scrape's phase.
def _cgroup_samples(record: CgroupRecord, out: List[List[bytes]], fmt: str, timestamps: bool,
                    workload: WorkloadLabels) -> None:
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = ts_suffix(millis, fmt).encode()
    base = workload.base
    names = NAME_BYTES
    brace = workload.brace

    def add(family: int, value: Any, brace: bytes = brace) -> None:
        # most values are ints or null (no series): value_bytes's cases, written out to save the call
        if value is None:
            return
        text = b"%d" % value if value.__class__ is int else value_bytes(value)
        if text is not None:
            out[family] += (names[family], brace, text, end)

    if millis is not None:
        add(F_LAST_SEEN, millis // 1000)
    for top, inner, series in SCALARS:  # most series: add() written out
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
            text = b"%d" % value if value.__class__ is int else value_bytes(value)
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
            for family, key in IO_DEVICE_SERIES:
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
            for family, op, key in IO_LIMITS:
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
                for family, key in NETWORK_SERIES:
                    add(family, iface.get(key), brace)
        workload.interfaces = interfaces

    add(F_CGROUP_INFO, 1, workload.info)

    processes = record.get("processes")  # stream --processes N: at most N, by the stream's bound
    if isinstance(processes, dict) and isinstance(processes.get("processes"), list):
        for p in processes["processes"]:
            if isinstance(p, dict):
                brace = label_brace(base, render_pairs((("pid", p.get("pid")), ("process", p.get("name")))))
                for family, key in PROCESS_SERIES:
                    add(family, p.get(key), brace)

    gpu = record.get("gpu")
    if isinstance(gpu, dict):
        def add_gpu(family: int, value: Any, extra: str = "") -> None:
            add(family, value, label_brace(base, extra))  # a process's labels change: not kept

        container_gpu_samples(gpu, add_gpu)


def _self_samples(self_metrics: Dict[str, Any], records: Sequence[Sampled], out: List[List[bytes]]) -> None:
    def add(family: int, value: Any, labels: str = "") -> None:
        text = number_text(value)
        if text is not None:
            line = FAMILIES[family].name + ("{" + labels + "} " if labels else " ") + text + "\n"
            out[family].append(line.encode("utf-8", "backslashreplace"))

    add(F_BUILD, 1, render_pairs((("version", self_metrics.get("version")),)))
    add(F_TICKS, self_metrics.get("ticks_total"))
    add(F_TICK_SECONDS, self_metrics.get("tick_duration_seconds"))
    add(F_RENDER_SECONDS, self_metrics.get("render_duration_seconds"))
    add(F_LAST_TICK, self_metrics.get("last_tick_timestamp_seconds"))
    add(F_GPU_LATE, self_metrics.get("gpu_reads_late_total"))
    for (gpu, call), n in sorted((self_metrics.get("gpu_call_errors_total") or {}).items()):
        add(F_GPU_CALL_ERRORS, n, render_pairs((("gpu", gpu), ("call", call))))
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
            gpu_samples(cast("GpuRecord", record), out, fmt, timestamps)
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
            v = number_text(r.get(key))
            if v is not None:
                out[index].append(("%s{%s} %s\n" % (FAMILIES[index].name, kept_labels, v)).encode(
                    "utf-8", "backslashreplace"))
    for kept_labels, seconds in held_idle:
        out[F_HELD_IDLE].append(("%s{%s} %s\n" % (held_name, kept_labels, number_text(seconds))).encode("utf-8", "backslashreplace"))
    if fold is not None:
        millis = [ts_millis(r.get("ts")) if timestamps else None for r in folds]
        if fold.apply(out, starts, ends, folds, bases, millis, value_bytes, lambda ms: ts_suffix(ms, fmt).encode()):
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
