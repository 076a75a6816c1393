"""A tick's records as one OTLP ExportMetricsServiceRequest, in protobuf or in OTLP's JSON mapping.
Each cgroup, pod and GPU record is a resource with one scope ("cgstat") holding the metrics
of outputs/otlp/names.py; events and other records are left out. With a series budget
(outputs/otlp/budget.py) the resources are folded before either is written. Protobuf needs
the `opentelemetry-proto` package (the `otlp` extra). Reads no host file.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, cast

import orjson

from cgstat import __version__
from cgstat.errors import CgstatError
from cgstat.outputs.otlp.budget import OtlpBudget
from cgstat.outputs.otlp.resource import Attrs, Point, Resource
from cgstat.outputs.otlp.names import CGROUP_METRICS, GPU_METRICS, ITEM_ATTRIBUTE, POD_METRICS, Metric
from cgstat.outputs.prometheus.budget import record_usage
from cgstat.timestamps import ts_millis

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject

# Each cgroup, pod and GPU record is a resource (host.name, container.*, k8s.pod.*,
# k8s.namespace.name, cgstat.cgroup) with one scope ("cgstat"), holding the metrics of
# outputs/otlp/names.py: counters as cumulative monotonic Sums, the rest as Gauges, a JSON
# null giving no data point (never a fake 0). A counter's start time is when cgstat first
# saw its resource (the kernel's counters begin at the cgroup's creation, which no file
# says); it stays the same while the resource is seen, as cumulative temporality wants.
# Protobuf needs the `opentelemetry-proto` package (the `otlp` extra), imported when the
# first request is made; JSON needs nothing (JsonWriter: orjson's bytes of the request, its
# text pieces kept from tick to tick).
ENCODINGS = ("protobuf", "json")
CONTENT_TYPES = {"protobuf": "application/x-protobuf", "json": "application/json"}
CUMULATIVE = 2  # AggregationTemporality AGGREGATION_TEMPORALITY_CUMULATIVE
_INT64_MAX = 2 ** 63 - 1
INSTALL_HINT = ("--otlp-encoding protobuf needs the opentelemetry-proto package: pip install 'cgstat[otlp]' "
                "(or --otlp-encoding json, for a receiver that takes JSON)")

class StartTimes:
    """The time each resource was first seen (a counter's start time); resources gone from a
    tick are forgotten, so a cgroup made again with the same path starts again."""

    def __init__(self) -> None:
        self._first: Dict[Attrs, int] = {}

    def tick(self, seen: Dict[Attrs, int]) -> Dict[Attrs, int]:
        """The start time of each resource of a tick (`seen`: resource -> this tick's time)."""
        self._first = {key: self._first.get(key, now) for key, now in seen.items()}
        return self._first


def _get(obj: Any, keys: Sequence[str]) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _image(image: str) -> Attrs:
    """container.image.name and .tags from `repo/name:tag` (a digest is not a tag)."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or "@" in image:
        return (("container.image.name", image),)
    return (("container.image.name", name), ("container.image.tags", (tag,)))


def _cgroup_attributes(record: JsonObject) -> Attrs:
    out: List[Tuple[str, Any]] = [("host.name", record.get("host")), ("cgstat.cgroup", record.get("cgroup"))]
    unit = record.get("unit")
    if unit:
        out.append(("cgstat.systemd.unit", unit))
    container = record.get("container")
    pod = record.get("pod")
    if isinstance(container, dict):
        for key, attr in (("id", "container.id"), ("name", "container.name"), ("runtime", "container.runtime.name")):
            if container.get(key):
                out.append((attr, container[key]))
        if container.get("image"):
            out.extend(_image(container["image"]))
        labels = container.get("labels")  # only those --label-allow let through (outputs/labelallow.py)
        if isinstance(labels, dict):
            out += [("container.label." + k, v) for k, v in sorted(labels.items()) if isinstance(v, str)]
        slurm = container.get("slurm")
        if isinstance(slurm, dict):  # the job and its user (the step and task are in the cgroup's path)
            out += [("cgstat.slurm.job_id", slurm.get("job_id")), ("cgstat.slurm.user", slurm.get("user"))]
        pod = pod or container.get("pod")
    if isinstance(pod, dict):
        for key, attr in (("uid", "k8s.pod.uid"), ("name", "k8s.pod.name"), ("namespace", "k8s.namespace.name")):
            if pod.get(key):
                out.append((attr, pod[key]))
    return tuple((k, v) for k, v in out if v is not None)


def _gpu_point_attributes(record: JsonObject) -> Attrs:
    gpu: Dict[str, Any] = cast(Dict[str, Any], record.get("gpu") or {})
    out = [("hw.id", gpu.get("uuid")), ("hw.type", "gpu"), ("hw.vendor", "NVIDIA"), ("hw.model", gpu.get("name")),
           ("hw.name", None if gpu.get("index") is None else "gpu%s" % gpu.get("index"))]
    return tuple((k, v) for k, v in out if v is not None)


def _number(value: Any, scale: float) -> Any:
    """A field's value as a data point's (None: no point); `value.__class__ is` is the
    cheap test, and a record's numbers are plain ints, floats and bools."""
    kind = value.__class__
    if kind is float:
        value = value * scale if scale != 1.0 else value
        return value if math.isfinite(value) else None
    if kind is int:
        if scale != 1.0:
            return value * scale
        return value if -_INT64_MAX <= value <= _INT64_MAX else float(value)
    if kind is bool:
        return int(value)
    return None


# A table's metrics grouped by the object their values are in (`memory`, `io.devices`), in
# the table's order within each: a record's object is reached once for all its fields. Each
# metric with what a data point needs of it, looked up once: (metric, key in the object or
# the item, name, scale, fixed attributes).
Prepared = Tuple[Metric, str, str, float, Attrs]
Plan = Tuple[Tuple[Tuple[str, ...], Tuple[Prepared, ...]], ...]


def _plan(table: Tuple[Metric, ...]) -> Plan:
    groups: Dict[Tuple[str, ...], List[Prepared]] = {}
    for metric in table:
        parent = metric.keys if metric.leaf else metric.keys[:-1]
        key = metric.leaf or metric.keys[-1]
        groups.setdefault(parent, []).append((metric, key, metric.name, metric.scale, metric.attributes))
    return tuple((parent, tuple(metrics)) for parent, metrics in groups.items())


_PLANS = {"cgroup": _plan(CGROUP_METRICS), "pod": _plan(POD_METRICS), "gpu": _plan(GPU_METRICS)}


def _add_all(out: Dict[str, Tuple[Metric, List[Point]]], metrics: Tuple[Prepared, ...], obj: Dict[str, Any],
             attrs: Attrs) -> None:
    """The data points of one object's fields (an int in range, most of them, taken as it is;
    the rest through _number)."""
    get = obj.get
    for metric, key, name, scale, fixed in metrics:
        value = get(key)
        if value is None:
            continue
        if value.__class__ is int and scale == 1.0 and -_INT64_MAX <= value <= _INT64_MAX:
            number = value
        else:
            number = _number(value, scale)
            if number is None:
                continue
        kept = out.get(name)
        if kept is None:
            kept = out[name] = (metric, [])
        kept[1].append((fixed + attrs if attrs else fixed, number))


def _fill(res: Resource, record: JsonObject, plan: Plan, attrs: Attrs) -> None:
    out = res.metrics
    for parent, metrics in plan:
        obj = _get(record, parent)
        if obj is None:
            continue
        if obj.__class__ is dict:  # plain fields of one object
            _add_all(out, metrics, obj, attrs)
            continue
        if not isinstance(obj, list):
            continue
        attr, keys = ITEM_ATTRIBUTE[metrics[0][0].path.rsplit(".", 1)[0]]
        for entry in obj:
            if isinstance(entry, dict):
                label = next((entry[k] for k in keys if entry.get(k)), None)
                _add_all(out, metrics, entry, attrs + (((attr, label),) if label is not None else ()))


class Encoder:
    """Makes each tick's request; keeps the resources' start times between ticks."""

    def __init__(self, encoding: str = "protobuf", budget: Optional[OtlpBudget] = None):
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown OTLP encoding {encoding!r} ({', '.join(ENCODINGS)})")
        self.encoding = encoding
        self.content_type = CONTENT_TYPES[encoding]
        self.starts = StartTimes()
        self.budget = budget if budget is not None and budget.active else None  # groups off, --max-series
        self._pb: Optional[ProtobufWriter] = None
        self._json = JsonWriter()
        if encoding == "protobuf":
            self._pb = ProtobufWriter(load_protobuf())

    def resources(self, records: Iterable[JsonObject]) -> List[Resource]:
        """The tick's records as resources (cgroup, pod and GPU records; the rest skipped)."""
        made: List[Tuple[Attrs, int, JsonObject, Plan, Attrs]] = []
        for record in records:
            kind = record.get("type")
            point: Attrs = ()
            if kind in ("cgroup", "pod"):
                attrs, table = _cgroup_attributes(record), _PLANS[kind]
            elif kind == "gpu":
                attrs, table = (("host.name", record.get("host")),), _PLANS["gpu"]
                point = _gpu_point_attributes(record)
            else:
                continue
            millis = ts_millis(record.get("ts"))
            if millis is None:
                continue
            made.append((attrs + point, millis * 1_000_000, record, table, point))
        starts = self.starts.tick({key: now for key, now, _, _, _ in made})
        out = []
        for key, now, record, table, point in made:
            res = Resource(key, key[:len(key) - len(point)] if point else key, now, starts[key])
            if not point:
                res.path, res.usage = str(record.get("cgroup")), record_usage(record)
            _fill(res, record, table, point)
            if res.metrics:
                out.append(res)
        return self.budget.apply(out) if self.budget is not None else out

    def encode(self, records: Iterable[JsonObject]) -> bytes:
        """The request body for one tick."""
        resources = self.resources(records)
        if self.encoding == "json":
            return self._json.write(resources)
        assert self._pb is not None
        return self._pb.write(resources)


def rejected(encoding: str, answer: bytes) -> str:
    """What a 2xx answer's partial_success says the receiver dropped ("" when nothing, or
    when the answer can't be read: an empty body is a full success)."""
    if not answer.strip():
        return ""
    try:
        if encoding == "json":
            partial = orjson.loads(answer).get("partialSuccess") or {}
            points, message = int(partial.get("rejectedDataPoints") or 0), partial.get("errorMessage") or ""
        else:
            service = load_protobuf()[3]
            partial = service.ExportMetricsServiceResponse.FromString(answer).partial_success
            points, message = partial.rejected_data_points, partial.error_message
    except Exception:  # not an OTLP answer (a proxy's page): nothing said of it
        return ""
    if not points and not message:
        return ""
    return f"{points} data points rejected" + (f": {str(message)[:200]}" if message else "")


# -- OTLP's JSON mapping (opentelemetry-proto/docs/specification.md#json-protobuf-encoding) --


def _json_value(value: Any) -> Dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, tuple):
        return {"arrayValue": {"values": [_json_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _json_attrs(attrs: Attrs) -> List[Dict[str, Any]]:
    return [{"key": k, "value": _json_value(v)} for k, v in attrs]


def to_json(resources: Sequence[Resource]) -> Dict[str, Any]:
    """The request as OTLP/JSON: int64 as decimal strings, enums as numbers, camelCase keys.
    What JsonWriter writes, as objects (the reference its bytes are checked against)."""
    out = []
    for res in resources:
        now, start = str(res.time_ns), str(res.start_ns)
        metrics = []
        for name, (metric, points) in res.metrics.items():
            data = []
            for attrs, value in points:
                point: Dict[str, Any] = {"attributes": _json_attrs(attrs), "timeUnixNano": now}
                if metric.monotonic:
                    point["startTimeUnixNano"] = start
                if isinstance(value, int):
                    point["asInt"] = str(value)
                else:
                    point["asDouble"] = value
                data.append(point)
            body: Dict[str, Any] = {"name": name, "unit": metric.unit}
            if metric.monotonic:
                body["sum"] = {"dataPoints": data, "aggregationTemporality": CUMULATIVE, "isMonotonic": True}
            else:
                body["gauge"] = {"dataPoints": data}
            metrics.append(body)
        out.append({"resource": {"attributes": _json_attrs(res.attributes)},
                    "scopeMetrics": [{"scope": {"name": "cgstat", "version": __version__}, "metrics": metrics}]})
    return {"resourceMetrics": out}


class JsonWriter:
    """Requests in OTLP/JSON, the bytes orjson makes of to_json(), made of kept pieces.

    A request is mostly the same text tick after tick: resources' attributes, metric names
    and units, data points' attributes. Those pieces are encoded once (by orjson, so
    escaped as it escapes) and kept; a tick writes only its times and values between them.
    Resource attributes are kept for the resources of the last tick; point attributes (a
    device, an interface, a direction) while they stay few."""

    MAX_POINT_ATTRIBUTES = 4096

    def __init__(self) -> None:
        self._resources: Dict[Attrs, bytes] = {}
        self._points: Dict[Attrs, bytes] = {}
        self._metrics: Dict[Tuple[str, str, bool], Tuple[bytes, bytes]] = {}
        self._scope = b',"scopeMetrics":[{"scope":' + orjson.dumps({"name": "cgstat", "version": __version__}) + \
            b',"metrics":['

    def write(self, resources: Sequence[Resource]) -> bytes:
        kept: Dict[Attrs, bytes] = {}
        points = self._points
        if len(points) > self.MAX_POINT_ATTRIBUTES:
            points.clear()
        dumps = orjson.dumps
        parts: List[bytes] = [b'{"resourceMetrics":[']
        first_resource = True
        for res in resources:
            head = kept.get(res.attributes) or self._resources.get(res.attributes)
            if head is None:
                head = b'{"resource":{"attributes":' + dumps(_json_attrs(res.attributes)) + b"}" + self._scope
            kept[res.attributes] = head
            parts.append(head if first_resource else b"," + head)
            first_resource = False
            gauge_time = b'"timeUnixNano":"%d",' % res.time_ns
            sum_time = b'"timeUnixNano":"%d","startTimeUnixNano":"%d",' % (res.time_ns, res.start_ns)
            first_metric = True
            for name, (metric, pts) in res.metrics.items():
                key = (name, metric.unit, metric.monotonic)
                ends = self._metrics.get(key)
                if ends is None:
                    ends = self._metrics[key] = self._metric_ends(name, metric)
                parts.append(ends[0] if first_metric else b"," + ends[0])
                first_metric = False
                times = sum_time if metric.monotonic else gauge_time
                first_point = True
                for attrs, value in pts:
                    opening = points.get(attrs)
                    if opening is None:
                        opening = points[attrs] = b'{"attributes":' + dumps(_json_attrs(attrs)) + b","
                    if value.__class__ is int:
                        number = b'"asInt":"%d"}' % value
                    else:
                        number = b'"asDouble":' + dumps(value) + b"}"
                    parts += (opening if first_point else b"," + opening, times, number)
                    first_point = False
                parts.append(ends[1])
            parts.append(b"]}]}")
        parts.append(b"]}")
        self._resources = kept
        return b"".join(parts)

    @staticmethod
    def _metric_ends(name: str, metric: Metric) -> Tuple[bytes, bytes]:
        """What stands before a metric's data points and after them."""
        opening = b'{"name":' + orjson.dumps(name) + b',"unit":' + orjson.dumps(metric.unit)
        if metric.monotonic:
            return (opening + b',"sum":{"dataPoints":[',
                    b'],"aggregationTemporality":%d,"isMonotonic":true}}' % CUMULATIVE)
        return opening + b',"gauge":{"dataPoints":[', b"]}}"


# -- protobuf, through opentelemetry-proto ---------------------------------------------------


def load_protobuf() -> Any:
    """opentelemetry-proto's modules (common, resource, metrics, service), or CgstatError
    saying what to install."""
    try:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.metrics.v1 import metrics_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
    except ImportError:
        raise CgstatError(INSTALL_HINT) from None
    return (common_pb2, resource_pb2, metrics_pb2, metrics_service_pb2)


def _pb_value(common: Any, value: Any) -> Any:
    if isinstance(value, bool):
        return common.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common.AnyValue(int_value=value)
    if isinstance(value, float):
        return common.AnyValue(double_value=value)
    if isinstance(value, tuple):
        return common.AnyValue(array_value=common.ArrayValue(values=[_pb_value(common, v) for v in value]))
    return common.AnyValue(string_value=str(value))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_RESOURCE_METRICS_TAG = b"\x0a"  # ExportMetricsServiceRequest.resource_metrics: field 1, length-delimited


class ProtobufWriter:
    """Requests serialised through opentelemetry-proto's messages.

    A resource's message is kept from one tick to the next while its shape (its metrics
    and their points' attributes) stays the same, and only its points' times and values
    are set again: making 50,000 messages a tick costs more than setting their numbers.
    The request is the resources' messages, each serialised, behind their field's tag and
    length (a message is its fields one after the other: what SerializeToString of the
    whole request would write)."""

    def __init__(self, modules: Any):
        self.common, self.resource_pb2, self.metrics_pb2, self.service = modules
        self._kept: Dict[Attrs, Tuple[Any, Any, List[Any]]] = {}  # key -> (shape, message, its points)
        self._scope = self.common.InstrumentationScope(name="cgstat", version=__version__)

    def write(self, resources: Sequence[Resource]) -> bytes:
        kept: Dict[Attrs, Tuple[Any, Any, List[Any]]] = {}
        parts: List[bytes] = []
        for res in resources:
            shape = (res.attributes, tuple((name, tuple(attrs for attrs, _ in pts))
                                           for name, (_, pts) in res.metrics.items()))
            old = self._kept.get(res.key)
            if old is None or old[0] != shape:
                old = (shape, *self._make(res))
            message, points = old[1], old[2]
            made = iter(points)
            for metric, pts in res.metrics.values():
                start = res.start_ns if metric.monotonic else 0
                for _, value in pts:
                    point = next(made)
                    point.time_unix_nano = res.time_ns
                    if start:
                        point.start_time_unix_nano = start
                    if isinstance(value, int):
                        point.as_int = value
                    else:
                        point.as_double = value
            kept[res.key] = old
            body = message.SerializeToString()
            parts += (_RESOURCE_METRICS_TAG, _varint(len(body)), body)
        self._kept = kept
        return b"".join(parts)

    def _made_attrs(self, attrs: Attrs) -> List[Any]:
        return [self.common.KeyValue(key=k, value=_pb_value(self.common, v)) for k, v in attrs]

    def _make(self, res: Resource) -> Tuple[Any, List[Any]]:
        """A resource's message, and its points in the order of res.metrics."""
        m = self.metrics_pb2
        message = m.ResourceMetrics(resource=self.resource_pb2.Resource(attributes=self._made_attrs(res.attributes)))
        scope = message.scope_metrics.add()
        scope.scope.CopyFrom(self._scope)
        points = []
        for name, (metric, pts) in res.metrics.items():
            made = scope.metrics.add(name=name, unit=metric.unit)
            if metric.monotonic:
                made.sum.aggregation_temporality = CUMULATIVE
                made.sum.is_monotonic = True
                data = made.sum.data_points
            else:
                data = made.gauge.data_points
            for attrs, _ in pts:
                point = data.add()
                point.attributes.extend(self._made_attrs(attrs))
                points.append(point)
        return message, points
