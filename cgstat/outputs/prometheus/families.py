"""The exposition's families as rendered: each family's place in the table declared in
cgstat/contract/fields.py (FAMILIES) and its `# HELP`/`# TYPE` header, which record paths
feed which series, and the small value and time-stamp formatters every part shares."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from cgstat.contract import fields
from cgstat.contract.keys import Cgroup

TEXT = "text"
OPENMETRICS = "openmetrics"
CONTENT_TYPES = {
    TEXT: "text/plain; version=0.0.4; charset=utf-8",
    OPENMETRICS: "application/openmetrics-text; version=1.0.0; charset=utf-8",
}

def number_text(v: Any) -> Optional[str]:
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
INDEX = {family.name: i for i, family in enumerate(FAMILIES)}


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


F_BUILD = INDEX["cgstat_build_info"]
F_TICKS = INDEX["cgstat_ticks_total"]
F_TICK_SECONDS = INDEX["cgstat_tick_duration_seconds"]
F_RENDER_SECONDS = INDEX["cgstat_render_duration_seconds"]
F_LAST_TICK = INDEX["cgstat_last_tick_timestamp_seconds"]
F_GPU_LATE = INDEX["cgstat_gpu_reads_late_total"]
F_GPU_CALL_ERRORS = INDEX["cgstat_gpu_call_errors_total"]
F_CGROUPS = INDEX["cgstat_cgroups"]
F_GPUS = INDEX["cgstat_gpus"]
F_RECORD_ERRORS = INDEX["cgstat_record_errors"]
F_LAST_SEEN = INDEX["container_last_seen"]
F_SPEC_QUOTA = INDEX["container_spec_cpu_quota"]
F_SPEC_PERIOD = INDEX["container_spec_cpu_period"]
F_BLKIO = INDEX["container_blkio_device_usage_total"]
F_CGROUP_INFO = INDEX["cgstat_cgroup_info"]
F_CGPU_MEM = INDEX["cgstat_container_gpu_memory_bytes"]
F_CGPU_SM = INDEX["cgstat_container_gpu_sm_percent"]
F_CGPU_PMEM = INDEX["cgstat_container_gpu_process_memory_bytes"]
F_CGPU_PSM = INDEX["cgstat_container_gpu_process_sm_percent"]
F_GPU_INFO = INDEX["cgstat_gpu_info"]
F_GPU_PROCS = INDEX["cgstat_gpu_processes"]
F_GPU_UNATTR = INDEX["cgstat_gpu_unattributed_memory_bytes"]
F_CGPU_POWER = INDEX["cgstat_container_gpu_power_watts"]
F_CGPU_PPOWER = INDEX["cgstat_container_gpu_process_power_watts"]
F_GPU_REASON = INDEX["cgstat_gpu_clocks_event_reason"]
F_CPUSET = INDEX["cgstat_cpuset_info"]
F_IO_LIMIT_BYTES = INDEX["cgstat_io_limit_bytes_per_second"]
F_IO_LIMIT_OPS = INDEX["cgstat_io_limit_ops_per_second"]
F_OOM = INDEX["container_oom_events_total"]
F_HELD_IDLE = INDEX["cgstat_gpu_held_idle_seconds_total"]
F_EXITED = tuple((INDEX[name], key) for name, key, _ in fields.EXIT_SERIES)
# families the exporter counts or keeps over ticks (render's `held_idle`, `exited`), not
# rendered from a cgroup or GPU record
COUNTED_OVER_TICKS = frozenset((FAMILIES[F_HELD_IDLE].name,) + tuple(FAMILIES[i].name for i, _ in F_EXITED))
IO_LIMITS = ((F_IO_LIMIT_BYTES, "read", Cgroup.IO_LIMITS_ITEM_READ_BYTES_PER_SECOND[-1]),
              (F_IO_LIMIT_BYTES, "write", Cgroup.IO_LIMITS_ITEM_WRITE_BYTES_PER_SECOND[-1]),
              (F_IO_LIMIT_OPS, "read", Cgroup.IO_LIMITS_ITEM_READ_OPS_PER_SECOND[-1]),
              (F_IO_LIMIT_OPS, "write", Cgroup.IO_LIMITS_ITEM_WRITE_OPS_PER_SECOND[-1]))

SeriesSlot = Tuple[int, str, str]  # (family, key in its object, fixed labels)


def series_of(table: Tuple[fields.Field, ...]) -> Tuple[Tuple[Tuple[str, ...], Tuple[SeriesSlot, ...]], ...]:
    """The field series of a record that are not in an array's items, by the object holding
    them: ((keys to the object, ((family, key, labels), ...)), ...)."""
    by_object: Dict[Tuple[str, ...], List[SeriesSlot]] = {}
    for f in table:
        if f.metrics and "[]" not in f.path:
            *parent, key = f.path.split(".")
            by_object.setdefault(tuple(parent), []).extend((INDEX[m.family], key, m.labels) for m in f.metrics)
    return tuple((parent, tuple(series)) for parent, series in by_object.items())


def item_series_of(table: Tuple[fields.Field, ...], array: str) -> Tuple[Tuple[int, str], ...]:
    """(family, key) of the series of each item of `array` (its label: fields.ITEM_LABELS)."""
    return tuple((INDEX[m.family], f.path[len(array) + 3:]) for f in table if f.path.startswith(array + "[].")
                 for m in f.metrics)


# (key, key below it or None, series): a cgroup record's objects are at most two deep
SCALARS = tuple((keys[0], keys[1] if len(keys) > 1 else None, series) for keys, series in series_of(fields.RECORD))
if any(len(keys) > 2 for keys, _ in series_of(fields.RECORD)):
    raise ValueError("a cgroup series three objects deep: _cgroup_samples reads two")
IO_DEVICE_SERIES = item_series_of(fields.RECORD, "io.devices")
NETWORK_SERIES = item_series_of(fields.RECORD, "network.interfaces")
PROCESS_SERIES = item_series_of(fields.RECORD, "processes.processes")
GPU_SCALARS = series_of(fields.GPU_RECORD)
DCGM = tuple((INDEX[d.name], fields.keys(d.field, fields.GPU_RECORD)[1:], d.convert) for d in fields.DCGM_SERIES)

DEFAULT_CPU_PERIOD_US = 100000  # the kernel's default CFS period

# --------------------------------------------------------------------------- time

def ts_suffix(millis: Optional[int], fmt: str) -> str:
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

NAME_BYTES = [family.name.encode() for family in FAMILIES]


def value_bytes(v: Any) -> Optional[bytes]:
    """number_text as bytes, the two common cases first (an int, a finite float: the same text); a
    bool as 1 or 0 (a flag's series)."""
    cls = v.__class__
    if cls is int:
        return b"%d" % v
    if cls is float and math.isfinite(v):
        return repr(v).encode()
    if cls is bool:
        return b"1" if v else b"0"
    text = number_text(v)
    return None if text is None else text.encode()


def object_at(record: Any, keys: Tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record if isinstance(record, dict) else None
