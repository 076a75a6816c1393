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
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, cast

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

    __slots__ = ("identity", "base", "brace", "cpu_total", "info", "devices", "interfaces")

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

    add(F_CGROUP_INFO, 1, workload.info)

    gpu = record.get("gpu")
    if isinstance(gpu, dict):
        def add_gpu(family: int, value: Any, extra: str = "") -> None:
            add(family, value, _brace(base, extra))  # a process's labels change: not kept

        _container_gpu(gpu, add_gpu)


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
        sums: List[Any] = per_gpu.setdefault(key, [None, None])
        mem: Any = p.get("memory_bytes")
        sm: Any = p.get("sm_percent")
        if _num(mem) is not None:
            sums[0] = (sums[0] or 0) + mem
        if _num(sm) is not None:
            sums[1] = (sums[1] or 0) + sm
        pid = p.get("pid")
        extra = _labels((("gpu", key[0]), ("uuid", key[1]), ("pid", pid), ("process", p.get("name")),
                         ("type", p.get("type"))))
        add(F_CGPU_PMEM, mem, extra)
        add(F_CGPU_PSM, sm, extra)
    for (index, uuid), (mem, sm) in per_gpu.items():
        extra = _labels((("gpu", index), ("uuid", uuid)))
        add(F_CGPU_MEM, mem, extra)
        add(F_CGPU_SM, sm, extra)


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
    processes = record.get("processes")
    if isinstance(processes, list):
        add(F_GPU_PROCS, len(processes))
        unattributed = 0
        for p in processes:
            memory: Any = p.get("memory_bytes") if isinstance(p, dict) and p.get("cgroup") is None else None
            if _num(memory) is not None:
                unattributed += memory
        add(F_GPU_UNATTR, unattributed)


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
