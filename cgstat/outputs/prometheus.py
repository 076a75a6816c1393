"""The Prometheus exposition of one tick: records (the Sampler's dicts) in, bytes out.

Two formats from the same samples:

- Prometheus text format 0.0.4 (`text/plain; version=0.0.4`): what every scraper reads.
- OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`): a counter family is
  named without its `_total` suffix in `# HELP`/`# TYPE` (its samples keep it), `_info`
  gauges are `info` families, timestamps are in seconds, and the body ends in `# EOF`.

Names follow cAdvisor (google/cadvisor, metrics/prometheus.go) for every meaning
cAdvisor has, with its units and labels (`id` = cgroup path, `name`, `image`, and the
kubelet's `namespace`, `pod`, `container`; the container's labels as
`container_label_<key>`), so dashboards and rules written for cAdvisor run unchanged.
What cAdvisor lacks is under `cgstat_` (GPU per container, per process and per device,
the OOM invocations, the exporter's own health). docs/prometheus.md lists every series.

Rules:

- Raw counters, never rates: the query side computes `rate()`.
- A null in the record (unknown, unsupported, no limit) gives no sample; never a fake 0.
- Samples of cgroups carry the time the cgroup was read (the record's `ts`), so
  `rate()` is exact however the scrape and the tick are phased (cAdvisor does the same).
- Names are hostile (docs/security.md): label values are escaped as the format requires
  (backslash, double quote, newline), other control and bidi characters are written as
  the text `\\xNN`/`\\uXXXX`; a container's labels are bounded in number and length, so
  a user's label set cannot blow up the series.
- Python 3.7 syntax, standard library only.
"""

from __future__ import annotations

import calendar
import copy
import math
import re
from typing import Mapping, Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, cast

from cgstat import fields
from cgstat.records import CgroupRecord, Container, GpuRecord, GpuUse, IoDevice, Pod, Sampled

TEXT = "text"
OPENMETRICS = "openmetrics"
CONTENT_TYPES = {
    TEXT: "text/plain; version=0.0.4; charset=utf-8",
    OPENMETRICS: "application/openmetrics-text; version=1.0.0; charset=utf-8",
}

MAX_CONTAINER_LABELS = 32  # container_label_* per container; the rest are left out
MAX_LABEL_NAME = 128  # characters of a sanitised label key
MAX_LABEL_VALUE = 1024  # characters of a label value (a path, an image, a label)

# --------------------------------------------------------------------------- escaping

_UNSAFE = re.compile(
    '[\\\\"\n\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e'
    '\u2066-\u2069\ud800-\udfff]')


def _escape_one(m) -> str:
    c = m.group(0)
    if c == "\\":
        return "\\\\"
    if c == '"':
        return '\\"'
    if c == "\n":
        return "\\n"
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # an undecoded byte, as cgstat.text writes it
        return "\\\\x%02x" % (code - 0xDC00)
    if code <= 0xFF:
        return "\\\\x%02x" % code
    return "\\\\u%04x" % code


def escape_value(value: Any) -> str:
    """A label value as the exposition writes it between double quotes."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_LABEL_VALUE:
        text = text[:MAX_LABEL_VALUE]
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape_one, text)


_LABEL_NAME_BAD = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(key: str) -> str:
    """cAdvisor's rule: every character outside [a-zA-Z0-9_] becomes '_'."""
    return _LABEL_NAME_BAD.sub("_", key[:MAX_LABEL_NAME])


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
_MEMORY_EVENTS = ((_INDEX["cgstat_memory_events_total"], "events", ("low", "oom", "oom_group_kill")),
                  (_INDEX["cgstat_memory_events_local_total"], "events_local",
                   ("low", "high", "max", "oom", "oom_kill", "oom_group_kill")),
                  (_INDEX["cgstat_memory_swap_events_total"], "swap_events", ("high", "max", "fail")))
_PGMAJFAULT = 'failure_type="pgmajfault",scope="hierarchy"'  # memory.stat counts the subtree
_IO_LIMITS = ((F_IO_LIMIT_BYTES, "read", "read_bytes_per_second"), (F_IO_LIMIT_BYTES, "write", "write_bytes_per_second"),
              (F_IO_LIMIT_OPS, "read", "read_ops_per_second"), (F_IO_LIMIT_OPS, "write", "write_ops_per_second"))


def _from_field(scope: str, prefix: str, labels: Tuple[str, ...] = ()) -> Tuple[Tuple[int, str], ...]:
    """(family, key) of the families read as is from the fields `prefix`<key> (key without dots)."""
    return tuple((i, f.field[len(prefix):]) for i, f in enumerate(FAMILIES)
                 if f.scope == scope and f.labels == labels and f.field.startswith(prefix)
                 and "." not in f.field[len(prefix):])


# the scalars of a cgroup record's cpu, memory and pids sections (half the series)
_SCALARS: Tuple[Tuple[int, str, str], ...] = tuple(
    (family, section, key) for section in ("cpu", "memory", "pids")
    for family, key in _from_field("cgroup", section + "."))
_IO_DEVICE = _from_field("cgroup", "io.devices[].", ("device",))
_BLKIO_OPS = (("Read", "read_bytes_total"), ("Write", "write_bytes_total"), ("Discard", "discard_bytes_total"))
_NETWORK = _from_field("cgroup", "network.interfaces[].", ("interface",))
_GPU_DEVICE = _from_field("gpu", "gpu.")
_BY_FIELD = {family.field: i for i, family in enumerate(FAMILIES) if family.field}
_PSI = tuple((res, _BY_FIELD["pressure.%s.some_seconds_total" % res], _BY_FIELD["pressure.%s.full_seconds_total" % res])
             for res in fields.PRESSURE_RESOURCES)

DEFAULT_CPU_PERIOD_US = 100000  # the kernel's default CFS period

# What a record without a container or pod object reads (never changed)
_NO_CONTAINER = cast(Container, {})
_NO_POD = cast(Pod, {})


# --------------------------------------------------------------------------- labels

def _labels(pairs: Iterable[Tuple[str, Any]]) -> str:
    """'a="x",b="y"' for the pairs whose value is neither None nor empty."""
    out = []
    for key, value in pairs:
        if value is None or value == "":
            continue
        out.append('%s="%s"' % (key, escape_value(value)))
    return ",".join(out)


def base_labels(record: CgroupRecord) -> str:
    """id, name, image, namespace, pod, container, container_label_* of a cgroup record.

    As the kubelet's cAdvisor: `container` is the Kubernetes container name (empty for a
    pod-level cgroup and outside Kubernetes), `name` the runtime's name (else its ID).
    Empty values are left out, which PromQL reads the same as `label=""`.
    """
    container = record.get("container") or _NO_CONTAINER
    pod = record.get("pod") or container.get("pod") or _NO_POD
    name = container.get("name") or container.get("id")
    pairs: List[Tuple[str, Any]] = [
        ("id", record.get("cgroup")),
        ("name", name),
        ("image", container.get("image")),
        ("namespace", pod.get("namespace")),
        ("pod", pod.get("name")),
        ("container", container.get("name") if pod and container else None),
    ]
    labels = container.get("labels")
    if isinstance(labels, dict) and labels:
        seen: Set[str] = set()
        for key in sorted(labels)[:MAX_CONTAINER_LABELS * 2]:
            if len(seen) >= MAX_CONTAINER_LABELS:
                break
            value = labels[key]
            if not isinstance(key, str) or not isinstance(value, str):
                continue
            label = "container_label_" + sanitize_label_name(key)
            if label in seen:
                continue  # two keys sanitised alike: the first (sorted) wins
            seen.add(label)
            pairs.append((label, value))
    return _labels(pairs)


def _join(base: str, extra: str) -> str:
    if not extra:
        return base
    if not base:
        return extra
    return base + "," + extra


# --------------------------------------------------------------------------- time

_EPOCH_CACHE: Dict[str, int] = {}


def ts_millis(ts: Any) -> Optional[int]:
    """'2026-11-29T20:10:12.807Z' as Unix milliseconds; None when not in that form."""
    if not isinstance(ts, str) or len(ts) < 20 or ts[4] != "-" or ts[10] != "T":
        return None
    head = ts[:19]
    seconds = _EPOCH_CACHE.get(head)
    if seconds is None:
        try:
            seconds = calendar.timegm((int(ts[0:4]), int(ts[5:7]), int(ts[8:10]),
                                       int(ts[11:13]), int(ts[14:16]), int(ts[17:19]), 0, 0, 0))
        except ValueError:
            return None
        if len(_EPOCH_CACHE) > 4096:
            _EPOCH_CACHE.clear()
        _EPOCH_CACHE[head] = seconds
    millis = 0
    if len(ts) >= 23 and ts[19] == ".":
        try:
            millis = int(ts[20:23])
        except ValueError:
            millis = 0
    return seconds * 1000 + millis


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


def _brace(base: str, extra: str = "") -> bytes:
    """b'{labels} ', what stands between a sample's name and its value (b' ' for none)."""
    labels = _join(base, extra)
    return ("{" + labels + "} " if labels else " ").encode("utf-8", "backslashreplace")


def _text_or_none(*values: Any) -> bool:
    """Whether equal values of these are sure to render the same (1 == 1.0 == True)."""
    return all(v is None or isinstance(v, str) for v in values)


class _Workload:
    """The labels of one workload's series, rendered (escaped, joined, encoded) once.

    `identity` is a copy of what they were rendered from (the record's type, unit,
    container and pod; its cgroup path is the key it is kept under): a record whose own
    compares equal gets these labels again. Only workloads whose named values are text (or
    null) are kept: 1, 1.0 and True compare equal but are written differently.
    """

    __slots__ = ("identity", "base", "brace", "cpu_total", "info", "devices", "interfaces", "extra")

    def __init__(self, record: CgroupRecord, identity: Tuple[Any, ...]):
        container = record.get("container") or _NO_CONTAINER
        pod = record.get("pod") or container.get("pod") or _NO_POD
        keep = _text_or_none(record.get("type"), record.get("unit"), container.get("runtime"),
                             container.get("id"), container.get("name"), container.get("image"),
                             pod.get("namespace"), pod.get("name"), pod.get("qos"))
        self.identity = copy.deepcopy(identity) if keep else None
        self.base = base_labels(record)
        self.brace = _brace(self.base)
        self.cpu_total = _brace(self.base, 'cpu="total"')
        self.info = _brace(self.base, _labels((
            ("type", record.get("type")), ("runtime", container.get("runtime")),
            ("container_id", container.get("id")), ("unit", record.get("unit")), ("qos", pod.get("qos")),
            ("sandbox", "true" if container.get("sandbox") else None))))
        # the braces of its block devices and network interfaces, by what they are rendered
        # from; each render keeps only those its record has
        self.devices: Dict[Any, Tuple[bytes, ...]] = {}
        self.interfaces: Dict[str, bytes] = {}
        self.extra: Dict[str, bytes] = {}  # braces with one more constant label (event="high")

    def with_label(self, extra: str) -> bytes:
        brace = self.extra.get(extra)
        if brace is None:
            brace = self.extra[extra] = _brace(self.base, extra)
        return brace


class LabelCache:
    """The rendered labels of the workloads of the last tick, for the next one.

    A series is `name{labels} value timestamp`, and a workload's labels (cgroup path,
    container name, image, labels ...) are the same tick after tick: escaping and joining
    them again was a quarter of a render. One per exporter, passed to each `render`: a
    render keeps only the workloads of its own records, so the cache holds one tick's
    worth whatever the churn (~3.7 KiB a workload, 3.6 MiB at 1,000 containers; a
    render's peak is ~10 MiB lower than it was without). Kept workloads are never changed
    but for their device and interface braces, which are the same whoever makes them: a
    render in the HTTP server's thread (OpenMetrics) may use the cache while the next
    tick renders.
    """

    __slots__ = ("workloads",)

    def __init__(self) -> None:
        self.workloads: Dict[str, _Workload] = {}


def _workload(record: CgroupRecord, last: Dict[str, _Workload], kept: Dict[str, _Workload]) -> _Workload:
    """The record's workload from the last tick if it is the same, else a new one."""
    key = record.get("cgroup")
    identity = (record.get("type"), record.get("unit"), record.get("container"), record.get("pod"))
    if not isinstance(key, str):
        return _Workload(record, identity)
    workload = last.get(key)
    if workload is None or workload.identity is None or workload.identity != identity:
        workload = _Workload(record, identity)
    if workload.identity is not None:
        kept[key] = workload
    return workload


def _device_braces(base: str, dev: IoDevice, known: Dict[Any, Tuple[bytes, ...]],
                   seen: Dict[Any, Tuple[bytes, ...]]) -> Tuple[bytes, ...]:
    """A block device's braces: for its IO counters, then blkio Read, Write, Discard.

    `known`: those of the workload's devices last tick, by MAJ:MIN and name; `seen` gets
    this one's."""
    key = (dev.get("device"), dev.get("name"))
    if not _text_or_none(*key):
        return _new_device_braces(base, dev)
    braces = known.get(key) or _new_device_braces(base, dev)
    seen[key] = braces
    return braces


def _new_device_braces(base: str, dev: IoDevice) -> Tuple[bytes, ...]:
    majmin = str(dev.get("device") or "")
    major, _, minor = majmin.partition(":")
    dname = dev.get("name")
    device = "/dev/" + dname if dname else majmin
    dlabel = 'device="%s"' % escape_value(device)
    blk = '%s,major="%s",minor="%s",operation=' % (dlabel, escape_value(major), escape_value(minor))
    return (_brace(base, dlabel),) + tuple(_brace(base, blk + '"' + op + '"') for op, _ in _BLKIO_OPS)


def _cgroup_samples(record: CgroupRecord, out: List[List[bytes]], fmt: str, timestamps: bool,
                    workload: _Workload) -> None:
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = _ts_suffix(millis, fmt).encode()
    base = workload.base
    names = _NAMES

    def add(family: int, value: Any, brace: bytes = workload.brace) -> None:
        # most values are ints: _value's first case, written out to save the call
        text = b"%d" % value if value.__class__ is int else _value(value)
        if text is not None:
            out[family] += (names[family], brace, text, end)

    if millis is not None:
        add(F_LAST_SEEN, millis // 1000)
    cpu = record.get("cpu") or {}
    add(F_CPU_USAGE, cpu.get("usage_seconds_total"), workload.cpu_total)
    sections = {"cpu": cpu, "memory": record.get("memory") or {}, "pids": record.get("pids") or {}}
    brace = workload.brace
    for family, section, key in _SCALARS:  # half the series: add() written out
        value = sections[section].get(key)
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
            braces = _device_braces(base, dev, workload.devices, seen)
            for family, key in _IO_DEVICE:
                add(family, dev.get(key), braces[0])
            for (_, key), brace in zip(_BLKIO_OPS, braces[1:]):
                add(F_BLKIO, dev.get(key), brace)
        workload.devices = seen

    network = record.get("network")
    if isinstance(network, dict) and isinstance(network.get("interfaces"), list):
        interfaces: Dict[str, bytes] = {}
        for iface in network["interfaces"]:
            if isinstance(iface, dict):
                name = str(iface.get("name"))
                brace = workload.interfaces.get(name) or _brace(base, 'interface="%s"' % escape_value(name))
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
            add(family, value, _brace(base, extra))  # a process's labels change: not kept

        _container_gpu(gpu, add_gpu)


def _issue23_samples(record: CgroupRecord, add: Callable[..., None], workload: _Workload) -> None:
    """The series of the memory events, major faults, OOM group, cpuset and IO limits."""
    memory: Dict[str, Any] = cast(Dict[str, Any], record.get("memory") or {})
    cpu: Dict[str, Any] = cast(Dict[str, Any], record.get("cpu") or {})
    add(F_MEM_FAILURES, memory.get("pgmajfault_total"), workload.with_label(_PGMAJFAULT))
    events = memory.get("events")
    if isinstance(events, dict):
        add(F_EVENTS_HIGH, events.get("high"))
        add(F_EVENTS_MAX, events.get("max"))
    for family, key, counts in _MEMORY_EVENTS:
        events = memory.get(key)
        if isinstance(events, dict):
            for name in counts:
                add(family, events.get(name), workload.with_label('event="%s"' % name))
    group = memory.get("oom_group")
    if isinstance(group, bool):
        add(F_OOM_GROUP, int(group))
    cpus, mems = cpu.get("cpuset_cpus"), cpu.get("cpuset_mems")
    if isinstance(cpus, str) or isinstance(mems, str):
        add(F_CPUSET, 1, workload.with_label(_labels((("cpus", cpus), ("mems", mems)))))
    limits = cast(Dict[str, Any], record.get("io") or {}).get("limits")
    if isinstance(limits, list):
        for lim in limits:
            if not isinstance(lim, dict):
                continue
            dname = lim.get("name")
            device = "/dev/%s" % dname if dname else str(lim.get("device") or "")
            for family, op, key in _IO_LIMITS:
                add(family, lim.get(key), _brace(workload.base, 'device="%s",operation="%s"' % (
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
        extra = _labels((("gpu", key[0]), ("uuid", key[1]), ("pid", pid), ("process", p.get("name")),
                         ("type", p.get("type"))))
        add(F_CGPU_PMEM, mem, extra)
        add(F_CGPU_PSM, sm, extra)
        add(F_CGPU_PPOWER, watts, extra)
    for (index, uuid), (mem, sm, watts) in per_gpu.items():
        extra = _labels((("gpu", index), ("uuid", uuid)))
        add(F_CGPU_MEM, mem, extra)
        add(F_CGPU_SM, sm, extra)
        add(F_CGPU_POWER, watts, extra)
    add(F_CGPU_ENERGY, gpu.get("energy_joules_total"), "")


def _gpu_samples(record: GpuRecord, out: List[List[bytes]], fmt: str, timestamps: bool) -> None:
    gpu = record.get("gpu")
    if not isinstance(gpu, dict):
        return
    index = gpu.get("index")
    base = _labels((("gpu", "" if index is None else str(index)), ("uuid", gpu.get("uuid"))))
    millis = ts_millis(record.get("ts")) if timestamps else None
    end = _ts_suffix(millis, fmt)

    def add(family: int, value: Any, extra: str = "") -> None:
        text = _num(value)
        if text is not None:
            line = FAMILIES[family].name + "{" + _join(base, extra) + "} " + text + end
            out[family].append(line.encode("utf-8", "backslashreplace"))

    add(F_GPU_INFO, 1, _labels((("model", gpu.get("name")), ("mig_mode", gpu.get("mig_mode")),
                                ("parent_uuid", gpu.get("parent_uuid")))))
    for family, key in _GPU_DEVICE:
        add(family, gpu.get(key))
    reasons = gpu.get("clocks_event_reasons")
    if isinstance(reasons, list):
        for reason in reasons:
            if isinstance(reason, str):
                add(F_GPU_REASON, 1, _labels((("reason", reason),)))
    dcgm = _labels(_dcgm_labels(record, gpu))
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

    add(F_BUILD, 1, _labels((("version", self_metrics.get("version")),)))
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
RETAIN_OOM_S = 900.0  # how long a gone cgroup's OOM-kill counter is still exposed


class OomRetention:
    """The OOM-kill counters (container_oom_events_total) of cgroups that are gone, kept
    `keep_s` after the last tick that had them, so that a kill that ended its container
    (runc removes the cgroup as its init dies) is still there for an alert rule.

    `update(records, kills, now_ts)` once per tick: `kills` are the tick's kernel-log kills
    (naming/kills.py NamedKill). A cgroup that had a record last tick and has none now
    keeps its last value; a kill the log reports for a cgroup with no record this tick (gone,
    or never read: killed in its first second) adds 1, from 0 when there was no series (the
    series then first appears at 1: the alert rule handles that, deploy/prometheus/rules.yml).
    The value never changes otherwise, so increase() over any range counts only the real
    kills; when the series ends it just goes stale, which increase() doesn't read as a reset,
    and a cgroup that comes back under the same labels starts from its own counter (read as
    a reset, counted from 0). Memory: one entry per cgroup gone within keep_s, the last
    tick's records (held by the exporter anyway).
    """

    def __init__(self, keep_s: float = RETAIN_OOM_S):
        self.keep_s = keep_s
        self._last: Dict[str, Any] = {}  # path -> last tick's record
        self._kept: Dict[str, List[Any]] = {}  # path -> [labels, value, until (monotonic)]

    def update(self, records: Sequence[Sampled], kills: Iterable[Any], now: float) -> List[Tuple[str, int]]:
        """(labels, value) of every kept series this tick."""
        current: Dict[str, Any] = {}
        for rec in records:
            r: Any = rec  # a cgroup, pod or GPU record
            if isinstance(r, dict) and r.get("type") in ("cgroup", "pod") and isinstance(r.get("cgroup"), str):
                current[r["cgroup"]] = r
        kept = self._kept
        for path, r in self._last.items():
            if path not in current:
                value = _oom_total(r)
                if value is not None and path not in kept:
                    kept[path] = [base_labels(r), value, now + self.keep_s]
        for k in kills:
            where = getattr(k, "cgroup", None)
            if not isinstance(where, str) or where in current:
                continue  # a live cgroup's own counter has it
            entry = kept.get(where)
            if entry is None:
                like: Any = {"cgroup": where, "container": k.container, "pod": k.pod}  # what labels need of a record
                entry = kept[where] = [base_labels(like), 0, 0.0]
            entry[1] += 1
            entry[2] = now + self.keep_s
        for path in [p for p, e in kept.items() if p in current or e[2] <= now]:
            del kept[path]
        self._last = current
        return [(e[0], e[1]) for e in kept.values()]


def _oom_total(record: Any) -> Optional[int]:
    mem = record.get("memory")
    value = mem.get("oom_kills_total") if isinstance(mem, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
    kept: Dict[str, _Workload] = {}
    for record in records:
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        if kind == "cgroup" or kind == "pod":
            workload = cast(CgroupRecord, record)
            _cgroup_samples(workload, out, fmt, timestamps, _workload(workload, last, kept))
        elif kind == "gpu":
            _gpu_samples(cast(GpuRecord, record), out, fmt, timestamps)
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
