"""The OTLP metrics cgstat pushes: their names, units, kinds and where each value comes from.

Made from the field table (cgstat/contract/fields.py): every number of the cgroup, pod and GPU
records that has a Prometheus series is an OTLP metric too, named after OpenTelemetry's
semantic conventions where they define one (`container.cpu.time`, `k8s.pod.memory.usage`,
`hw.gpu.utilization`, SEMCONV below) and `cgstat.<field path>` without its unit suffix
otherwise (`memory.pgscan_total`: `cgstat.memory.pgscan`, a counter of unit "1"). A field
inside an array's items (`io.devices[]`, `network.interfaces[]`) is one data point per item,
with the item's name as an attribute. docs/otlp.md lists them all (tests/unit/test_otlp.py
checks the list against this table). Reads no host file.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from cgstat.contract import fields

# What each unit suffix of a field's name is in UCUM, as OTLP writes units
_UNITS = (("_joules_total", "J"), ("_seconds_total", "s"), ("_bytes_total", "By"), ("_bytes", "By"),
          ("_seconds", "s"), ("_percent", "%"), ("_watts", "W"), ("_celsius", "Cel"), ("_us", "us"),
          ("_total", "1"))


class Metric(NamedTuple):
    """One OTLP metric made of one record field."""

    name: str  # the OTLP metric name
    path: str  # the field's path in the record (cgstat/contract/fields.py)
    unit: str  # UCUM
    monotonic: bool  # a cumulative Sum (a counter); else a Gauge
    scale: float = 1.0  # the field's value times this (percent -> fraction)
    attributes: Tuple[Tuple[str, str], ...] = ()  # fixed data point attributes (cpu.mode, direction)
    status: str = ""  # the semantic conventions' stability ("" for cgstat's own names)
    keys: Tuple[str, ...] = ()  # the keys to the value in the record (to the array, for an item's field)
    leaf: str = ""  # an item's field: its key in the item ("" for a plain field)
    group: str = ""  # its metric group (fields.METRIC_GROUPS), as its field's series


class Semconv(NamedTuple):
    """A field's name in the semantic conventions: for cgroup records, for pod records."""

    cgroup: str
    pod: str = ""  # "" where the conventions name no pod metric: cgstat's own name
    unit: str = ""  # "" : the unit from the field's name
    scale: float = 1.0
    attributes: Tuple[Tuple[str, str], ...] = ()
    status: str = "development"
    pod_status: str = ""  # the pod name's, where not the same


# The semantic conventions' names (open-telemetry/semantic-conventions, model/container,
# model/k8s, model/hardware). Their stability as the conventions give it: the container
# CPU and memory metrics and k8s.pod.cpu.time are release candidates (semantic-conventions
# #3693 and #4125, the kubeletstats receiver's metrics on their way to stable); the rest,
# k8s.pod.memory.* among them when last looked at, are "development", which may still change. cpu.mode is not given: the conventions want a
# container's CPU time either all with modes or all without, and cgroup v1's cpuacct.stat
# user/system are USER_HZ ticks that don't add up to cpuacct.usage; the total without a mode
# is what docker stats and cAdvisor show.
RC = "release_candidate"
SEMCONV: Dict[str, Semconv] = {
    "cpu.usage_seconds_total": Semconv("container.cpu.time", "k8s.pod.cpu.time", status=RC),
    "memory.usage_bytes": Semconv("container.memory.usage", "k8s.pod.memory.usage", status=RC,
                                  pod_status="development"),
    "memory.working_set_bytes": Semconv("container.memory.working_set", "k8s.pod.memory.working_set", status=RC,
                                        pod_status="development"),
    "memory.anon_bytes": Semconv("container.memory.rss", "k8s.pod.memory.rss", status=RC,
                                 pod_status="development"),
    "io.devices[].read_bytes_total": Semconv("container.disk.io", attributes=(("disk.io.direction", "read"),)),
    "io.devices[].write_bytes_total": Semconv("container.disk.io", attributes=(("disk.io.direction", "write"),)),
    "network.interfaces[].rx_bytes_total": Semconv("container.network.io", "k8s.pod.network.io",
                                                   attributes=(("network.io.direction", "receive"),)),
    "network.interfaces[].tx_bytes_total": Semconv("container.network.io", "k8s.pod.network.io",
                                                   attributes=(("network.io.direction", "transmit"),)),
}
# The GPU record's device metrics (hw.gpu.*, and hw.energy, hw.power with hw.type "gpu")
# stream --processes N (metric group procs, off unless named in --metrics): OpenTelemetry's
# process metrics where it names them (model/process), cgstat's own for PSS, USS and swap
SEMCONV.update({
    "processes.processes[].cpu_seconds_total": Semconv("process.cpu.time", "process.cpu.time"),
    "processes.processes[].rss_bytes": Semconv("process.memory.usage", "process.memory.usage"),
    "processes.processes[].pss_bytes": Semconv("cgstat.process.memory.pss", "cgstat.process.memory.pss", status=""),
    "processes.processes[].uss_bytes": Semconv("cgstat.process.memory.uss", "cgstat.process.memory.uss", status=""),
    "processes.processes[].swap_bytes": Semconv("cgstat.process.memory.swap", "cgstat.process.memory.swap",
                                                status=""),
})

GPU_SEMCONV: Dict[str, Semconv] = {
    "gpu.utilization_percent": Semconv("hw.gpu.utilization", unit="1", scale=0.01),
    "gpu.memory_used_bytes": Semconv("hw.gpu.memory.usage"),
    "gpu.memory_total_bytes": Semconv("hw.gpu.memory.limit"),
    "gpu.power_watts": Semconv("hw.power"),
    "gpu.energy_joules_total": Semconv("hw.energy"),
}

# The attribute of one data point per item of an array field, and the item key it is read from
ITEM_ATTRIBUTE: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "io.devices[]": ("system.device", ("name", "device")),  # vda, else MAJ:MIN
    "network.interfaces[]": ("network.interface.name", ("name",)),
    "processes.processes[]": ("process.pid", ("pid",)),  # stream --processes N; group procs, opt-in
}
# GPU record fields without a Prometheus series that OpenTelemetry names all the same
_GPU_EXTRA = ("gpu.energy_joules_total",)
# per-container GPU use, a series of several fields in the exposition
_CGROUP_EXTRA = ("gpu.memory_bytes", "gpu.sm_percent", "gpu.power_watts")


def item_of(path: str) -> Optional[str]:
    """The array a field's items are in (`io.devices[]`), or None for a plain field."""
    return path.rsplit(".", 1)[0] if "[]." in path else None


def own_name(path: str) -> Tuple[str, str]:
    """cgstat's name of a field without a conventional one, and its unit:
    `memory.pgscan_total` is ("cgstat.memory.pgscan", "1")."""
    name = path.replace("[]", "")
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return "cgstat." + name[:-len(suffix)], unit
    return "cgstat." + name, "1"


def _counter(f: fields.Field) -> bool:
    """Whether a field is a counter: its series is one (a family's name ends in _total), or,
    without a series, its name says so."""
    for m in f.metrics:
        return m.kind == "counter" or (not m.kind and m.family.endswith("_total"))
    return f.path.endswith("_total")


def _metric(f: fields.Field, scope: str) -> Metric:
    monotonic = _counter(f)
    conv = (GPU_SEMCONV if scope == "gpu" else SEMCONV).get(f.path)
    name = (conv.pod if scope == "pod" else conv.cgroup) if conv else ""
    own, unit = own_name(f.path)
    item = item_of(f.path)
    keys = tuple((item[:-2] if item else f.path).split("."))
    leaf = f.path.rsplit(".", 1)[1] if item else ""
    group = fields.field_group(f.path)
    if conv is None or not name:
        return Metric(own, f.path, unit, monotonic, keys=keys, leaf=leaf, group=group)
    status = conv.pod_status if scope == "pod" and conv.pod_status else conv.status
    return Metric(name, f.path, conv.unit or unit, monotonic, conv.scale, conv.attributes, status, keys, leaf, group)


def _numbers(table: Tuple[fields.Field, ...], extra: Tuple[str, ...]) -> List[fields.Field]:
    return [f for f in table if f.type in ("int", "float", "bool") and (f.metrics or f.path in extra)
            and ("[]" not in f.path or f.path.rsplit(".", 1)[0] in ITEM_ATTRIBUTE)]


def _table(table: Tuple[fields.Field, ...], scope: str, extra: Tuple[str, ...]) -> Tuple[Metric, ...]:
    return tuple(_metric(f, scope) for f in _numbers(table, extra))


CGROUP_METRICS = _table(fields.RECORD, "cgroup", _CGROUP_EXTRA)
POD_METRICS = _table(fields.RECORD, "pod", _CGROUP_EXTRA)
GPU_METRICS = _table(fields.GPU_RECORD, "gpu", _GPU_EXTRA)
