"""The OTLP push: metric names from the field table, the two encodings (the JSON one read back
through protobuf's own JSON parser, which is OTLP's JSON mapping), the sink against a local
HTTP receiver that decodes what it gets (down, refusing, slow), the time-bounded buffer that
drops the oldest, and the command line's options.

No sleep decides anything: a fake receiver or clock drives the buffer; the local server is
waited for with a generous bound only so that a regression fails instead of hanging.
"""

import gzip
import http.server
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading

import orjson
import pytest

from cgstat.contract import fields
from cgstat.errors import CgstatError
from cgstat.outputs.otlp import encode as otlp_encode
from cgstat.outputs.otlp import names as otlp_names
from cgstat.outputs.otlp.sink import OtlpOptions, OtlpSink
from cgstat.outputs.otlp.transport import Outcome, parse_endpoint, parse_header
from tests.helpers.contract import ROOT

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
DOCS = os.path.join(ROOT, "docs", "otlp.md")

try:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
except ImportError:  # the otlp extra is not installed: the protobuf checks skip
    metrics_service_pb2 = None
needs_proto = pytest.mark.skipif(metrics_service_pb2 is None, reason="opentelemetry-proto not installed")


def fixture_records():
    run = subprocess.run([sys.executable, "-m", "cgstat", "--host-root", FIXTURE, "once", "--window", "0"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, timeout=60)
    return [json.loads(line) for line in run.stdout.splitlines()]


def record(ts="2026-12-01T10:00:00.250Z", cgroup="/system.slice/docker-abc.scope", **over):
    rec = {"schema": 1, "type": "cgroup", "ts": ts, "host": "node1", "cgroup": cgroup, "unit": None, "pod": None,
           "container": {"runtime": "docker", "id": "a" * 64, "name": "web", "image": "nginx:1.27", "pod": None},
           "cpu": {"usage_seconds_total": 12.5, "user_seconds_total": None, "periods_total": 7},
           "memory": {"usage_bytes": 1048576, "working_set_bytes": 524288, "limit_bytes": None, "oom_group": True},
           "io": {"devices": [{"device": "8:0", "name": "sda", "read_bytes_total": 4096, "write_bytes_total": 0}]},
           "network": {"interfaces": [{"name": "eth0", "rx_bytes_total": 10, "tx_bytes_total": 20}]}}
    rec.update(over)
    return rec


def points(body, name):
    """{(resource attrs, point attrs): value} of metric `name` in an OTLP/JSON body."""
    def attrs(kvs):
        return tuple((kv["key"], json.dumps(kv["value"]) if "arrayValue" in kv["value"]
                      else next(iter(kv["value"].values()))) for kv in kvs)

    out = {}
    for rm in body["resourceMetrics"]:
        for sm in rm["scopeMetrics"]:
            for m in sm["metrics"]:
                if m["name"] == name:
                    data = m.get("sum") or m.get("gauge")
                    for p in data["dataPoints"]:
                        value = float(p["asInt"]) if "asInt" in p else p["asDouble"]
                        out[(attrs(rm["resource"]["attributes"]), attrs(p["attributes"]))] = value
    return out


# -- names -------------------------------------------------------------------------------


def test_semantic_convention_names_are_fields_of_the_table():
    paths = {f.path for f in fields.RECORD}
    assert set(otlp_names.SEMCONV) <= paths
    assert set(otlp_names.GPU_SEMCONV) <= {f.path for f in fields.GPU_RECORD}
    by_name = {m.name: m for m in otlp_names.CGROUP_METRICS}
    assert by_name["container.cpu.time"].path == "cpu.usage_seconds_total" and by_name["container.cpu.time"].monotonic
    assert by_name["container.memory.working_set"].unit == "By" and not by_name["container.memory.working_set"].monotonic
    assert {m.name for m in otlp_names.POD_METRICS} >= {"k8s.pod.cpu.time", "k8s.pod.memory.usage",
                                                        "k8s.pod.memory.working_set", "k8s.pod.network.io"}
    assert {m.name for m in otlp_names.GPU_METRICS} >= {"hw.gpu.utilization", "hw.gpu.memory.usage",
                                                        "hw.gpu.memory.limit", "hw.energy", "hw.power"}


def test_every_field_with_a_series_is_a_metric_and_names_are_unique():
    """A field given a Prometheus series (cgstat/contract/fields.py) is an OTLP metric too, with no second list."""
    for table, metrics in ((fields.RECORD, otlp_names.CGROUP_METRICS), (fields.GPU_RECORD, otlp_names.GPU_METRICS)):
        made = {m.path for m in metrics}
        for f in table:
            if f.metrics and f.type in ("int", "float", "bool"):
                assert f.path in made, f.path
        keys = [(m.name, m.attributes) for m in metrics]
        assert len(keys) == len(set(keys))
    assert otlp_names.own_name("memory.pgscan_total") == ("cgstat.memory.pgscan", "1")
    assert otlp_names.own_name("pressure.io.some_seconds_total") == ("cgstat.pressure.io.some", "s")
    assert otlp_names.own_name("io.devices[].discard_ops_total") == ("cgstat.io.devices.discard_ops", "1")


def test_docs_list_every_metric_and_its_status():
    text = open(DOCS).read()
    for metric in otlp_names.CGROUP_METRICS + otlp_names.POD_METRICS + otlp_names.GPU_METRICS:
        assert "`%s`" % metric.name in text, metric.name
    for path, conv in list(otlp_names.SEMCONV.items()) + list(otlp_names.GPU_SEMCONV.items()):
        line = next(line for line in text.splitlines() if "`%s`" % conv.cgroup in line and line.startswith("|"))
        assert conv.status.replace("_", " ") in line, (conv.cgroup, conv.status)


# -- encodings ----------------------------------------------------------------------------


def test_json_has_the_records_values_and_no_fake_zero():
    enc = otlp_encode.Encoder("json")
    body = json.loads(enc.encode([record(), {"type": "event", "kind": "oom_kill"}]))
    (rm,) = body["resourceMetrics"]
    res = dict((kv["key"], kv["value"]) for kv in rm["resource"]["attributes"])
    assert res["host.name"] == {"stringValue": "node1"}
    assert res["container.id"] == {"stringValue": "a" * 64} and res["container.name"] == {"stringValue": "web"}
    assert res["container.image.name"] == {"stringValue": "nginx"}
    assert res["container.image.tags"] == {"arrayValue": {"values": [{"stringValue": "1.27"}]}}
    assert res["container.runtime.name"] == {"stringValue": "docker"}
    ((_, cpu),) = points(body, "container.cpu.time").items()
    assert cpu == 12.5
    assert list(points(body, "container.memory.usage").values()) == [1048576]
    assert list(points(body, "cgstat.memory.oom_group").values()) == [1]  # a bool as 0/1
    assert points(body, "cgstat.cpu.user") == {}  # null: no data point
    assert points(body, "cgstat.memory.limit") == {}
    disk = {pa: v for (_, pa), v in points(body, "container.disk.io").items()}
    assert disk == {(("disk.io.direction", "read"), ("system.device", "sda")): 4096,
                    (("disk.io.direction", "write"), ("system.device", "sda")): 0}
    net = {pa: v for (_, pa), v in points(body, "container.network.io").items()}
    assert net[(("network.io.direction", "transmit"), ("network.interface.name", "eth0"))] == 20
    metrics = {m["name"]: m for m in rm["scopeMetrics"][0]["metrics"]}
    cpu_sum = metrics["container.cpu.time"]["sum"]
    assert cpu_sum["aggregationTemporality"] == 2 and cpu_sum["isMonotonic"] is True
    point = cpu_sum["dataPoints"][0]
    assert point["timeUnixNano"] == "1796119200250000000" == point["startTimeUnixNano"]
    assert "gauge" in metrics["container.memory.usage"] and "startTimeUnixNano" not in \
        metrics["container.memory.usage"]["gauge"]["dataPoints"][0]
    assert metrics["cgstat.cpu.periods"]["sum"]["dataPoints"][0]["asInt"] == "7"  # int64 as a string


def test_a_slurm_job_is_named_on_its_resource():
    job = record(container={"runtime": "slurm", "id": None, "name": "job 4242", "image": None, "pod": None,
                            "slurm": {"job_id": 4242, "step": "0", "task": None, "uid": 1000, "user": "ana"}})
    body = json.loads(otlp_encode.Encoder("json").encode([job]))
    res = dict((kv["key"], kv["value"]) for kv in body["resourceMetrics"][0]["resource"]["attributes"])
    assert res["cgstat.slurm.job_id"] == {"intValue": "4242"} and res["cgstat.slurm.user"] == {"stringValue": "ana"}
    assert "container.id" not in res and res["container.runtime.name"] == {"stringValue": "slurm"}


def test_a_counter_keeps_its_start_time_while_its_cgroup_is_seen():
    enc = otlp_encode.Encoder("json")

    def start_of(*records):
        body = json.loads(enc.encode(list(records)))
        return {next(kv["value"]["stringValue"] for kv in rm["resource"]["attributes"] if kv["key"] == "cgstat.cgroup"):
                rm["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"][0]["startTimeUnixNano"]
                for rm in body["resourceMetrics"]}

    first = start_of(record(ts="2026-12-01T10:00:00.000Z"))
    later = start_of(record(ts="2026-12-01T10:00:05.000Z"), record(ts="2026-12-01T10:00:05.000Z", cgroup="/b"))
    assert later["/system.slice/docker-abc.scope"] == first["/system.slice/docker-abc.scope"]
    assert later["/b"] == "1796119205000000000"
    start_of(record(ts="2026-12-01T10:00:06.000Z", cgroup="/b"))  # the first cgroup gone a tick
    again = start_of(record(ts="2026-12-01T10:00:07.000Z"))
    assert again["/system.slice/docker-abc.scope"] == "1796119207000000000"


def test_a_gpu_record_gives_hw_gpu_metrics_with_its_identity():
    gpu = {"schema": 1, "type": "gpu", "ts": "2026-12-01T10:00:00.000Z", "host": "node1", "interval_s": 1.0,
           "gpu": {"index": 0, "uuid": "GPU-1234", "name": "NVIDIA H100", "utilization_percent": 42.0,
                   "memory_used_bytes": 2 ** 30, "memory_total_bytes": 80 * 2 ** 30, "power_watts": None,
                   "energy_joules_total": 1500.5, "xid_errors_total": 0}, "processes": [], "errors": []}
    body = json.loads(otlp_encode.Encoder("json").encode([gpu]))
    ident = (("hw.id", "GPU-1234"), ("hw.type", "gpu"), ("hw.vendor", "NVIDIA"), ("hw.model", "NVIDIA H100"),
             ("hw.name", "gpu0"))
    host = (("host.name", "node1"),)
    assert points(body, "hw.gpu.utilization") == {(host, ident): 0.42}
    assert points(body, "hw.gpu.memory.usage") == {(host, ident): 2 ** 30}
    assert points(body, "hw.gpu.memory.limit") == {(host, ident): 80 * 2 ** 30}
    assert points(body, "hw.energy") == {(host, ident): 1500.5}
    assert points(body, "hw.power") == {}  # null
    assert points(body, "cgstat.gpu.xid_errors") == {(host, ident): 0}


@needs_proto
def test_json_is_otlp_json_and_says_what_protobuf_says():
    """The JSON body parsed by protobuf's JSON parser (OTLP's JSON mapping: camelCase, int64
    as strings, enums as numbers) is the same message as the protobuf body."""
    records = fixture_records()
    assert any(r["type"] == "pod" for r in records) and any(r.get("container") for r in records)
    as_json = otlp_encode.Encoder("json").encode(records)
    as_pb = otlp_encode.Encoder("protobuf").encode(records)
    from_json = json_format.Parse(as_json, metrics_service_pb2.ExportMetricsServiceRequest())
    from_pb = metrics_service_pb2.ExportMetricsServiceRequest.FromString(as_pb)
    assert from_json == from_pb
    names = {m.name for rm in from_pb.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"container.cpu.time", "k8s.pod.cpu.time", "k8s.pod.memory.working_set"} <= names
    pods = [rm for rm in from_pb.resource_metrics
            if any(kv.key == "k8s.pod.uid" for kv in rm.resource.attributes)]
    assert pods and all(kv.value.string_value for rm in pods for kv in rm.resource.attributes
                        if kv.key.startswith("k8s."))


def test_the_json_writer_writes_what_orjson_makes_of_the_request_tick_after_tick():
    """JsonWriter keeps the pieces of the request (attributes, names) from tick to tick and
    writes times and values between them: its bytes are orjson's of to_json() (the request
    as objects), with hostile names, values of every kind, points and resources that change."""
    hostile = {"runtime": "docker", "id": "b" * 64, "name": 'we"b\\\n\u202e\x1b[31m', "image": "ng\tinx:1.27",
               "pod": None}
    first = [record(), record(cgroup="/gone", container=hostile), fixture_records()[0]]
    second = [record(ts="2026-12-01T10:00:01.250Z", container=hostile,
                     cpu={"usage_seconds_total": 13, "user_seconds_total": 1.5e-7, "periods_total": 2 ** 70,
                          "weight": True},
                     memory={"usage_bytes": -1, "working_set_bytes": float("nan"), "oom_group": False}),
              record(ts="2026-12-01T10:00:01.250Z", cgroup="/new")]
    encoder = otlp_encode.Encoder("json")
    for tick in (first, second, second, []):
        body = encoder.encode(tick)
        assert body == orjson.dumps(otlp_encode.to_json(encoder.resources(tick)))
        json.loads(body)
    assert encoder.encode([]) == b'{"resourceMetrics":[]}'
    cpu = points(json.loads(encoder.encode(second)), "cgstat.cpu.periods")
    assert sorted(cpu.values()) == [7.0, float(2 ** 70)]


@needs_proto
def test_protobuf_kept_from_tick_to_tick_is_what_json_says():
    """The protobuf writer keeps a resource's messages between ticks and sets their numbers
    again: a later tick whose values, points and resources changed says what JSON says."""
    first = [record(), record(cgroup="/gone")]
    net = {"interfaces": [{"name": "eth0", "rx_bytes_total": 11, "tx_bytes_total": 25},
                          {"name": "eth1", "rx_bytes_total": 1, "tx_bytes_total": None}]}
    second = [record(ts="2026-12-01T10:00:01.250Z", network=net,
                     cpu={"usage_seconds_total": 13, "user_seconds_total": 1.5, "periods_total": 9}),
              record(ts="2026-12-01T10:00:01.250Z", cgroup="/new")]
    as_json, as_pb = otlp_encode.Encoder("json"), otlp_encode.Encoder("protobuf")
    for tick in (first, second, second):
        from_json = json_format.Parse(as_json.encode(tick), metrics_service_pb2.ExportMetricsServiceRequest())
        from_pb = metrics_service_pb2.ExportMetricsServiceRequest.FromString(as_pb.encode(tick))
        assert from_json == from_pb
    cpu = [p for rm in from_pb.resource_metrics for m in rm.scope_metrics[0].metrics if m.name == "container.cpu.time"
           for p in m.sum.data_points]
    assert [p.as_int or p.as_double for p in cpu] == [13, 12.5]
    assert [p.start_time_unix_nano for p in cpu] == [1796119200250000000, 1796119201250000000]


def test_protobuf_without_the_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.metrics.v1", None)
    with pytest.raises(CgstatError) as err:
        otlp_encode.Encoder("protobuf")
    assert "pip install 'cgstat[otlp]'" in str(err.value) and "\n" not in str(err.value)
    otlp_encode.Encoder("json")  # JSON needs nothing


# -- the sink -----------------------------------------------------------------------------


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver on a free loopback port that decodes each request (gzip, JSON)."""

    daemon_threads = True

    def __init__(self, status=200, tls=None):
        self.status = status  # what it answers
        self.bodies = []
        self.refused = 0
        self.headers_seen = []
        self.got = threading.Condition()
        super().__init__(("127.0.0.1", 0), _Handler)
        scheme = "http"
        if tls is not None:  # (certificate, key)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.socket = context.wrap_socket(self.socket, server_side=True)
            scheme = "https"
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()
        self.url = "%s://127.0.0.1:%d/v1/metrics" % (scheme, self.server_address[1])

    def stamps(self):
        return [p["timeUnixNano"] for body in self.bodies for rm in body["resourceMetrics"]
                for m in rm["scopeMetrics"][0]["metrics"] if m["name"] == "container.cpu.time"
                for p in m["sum"]["dataPoints"]]

    def wait(self, n, timeout=20.0):
        with self.got:
            assert self.got.wait_for(lambda: len(self.stamps()) >= n, timeout), self.stamps()

    def close(self):
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        if server.status != 200:
            with server.got:
                server.refused += 1
                server.got.notify_all()
        else:
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with server.got:
                server.bodies.append(json.loads(body))
                server.headers_seen.append(dict(self.headers))
                server.got.notify_all()
        self.send_response(server.status)
        self.send_header("Content-Length", "8")
        self.end_headers()
        self.wfile.write(b"says no\n" if server.status != 200 else b"\x00" * 8)

    def log_message(self, *args):
        pass


def _tick(n):
    return [record(ts="2026-12-01T10:00:%02d.000Z" % n)]


def test_the_sink_pushes_each_tick_with_its_headers():
    receiver = Receiver()
    said = []
    try:
        sink = OtlpSink(OtlpOptions(receiver.url, "json", (("Authorization", "Bearer t0ken"),)),
                        lambda k, m: said.append(m))
        sink.open()
        for n in range(3):
            sink.write(_tick(n))
        sink.close()
        assert receiver.stamps() == ["17961192%02d000000000" % n for n in range(3)]
        assert all(h["Authorization"] == "Bearer t0ken" and h["Content-Type"] == "application/json"
                   and h["Content-Encoding"] == "gzip" for h in receiver.headers_seen)
        # the token came as --otlp-header does: said once, with the better ways
        assert len(said) == 1 and "--otlp-header Authorization is on the command line" in said[0]
        assert sink.ticks_sent == 3
    finally:
        receiver.close()


def test_a_receiver_down_then_up_gets_every_tick_in_order_batched():
    receiver = Receiver(status=503)
    said = []
    try:
        sink = OtlpSink(OtlpOptions(receiver.url, "json", compression="none"), lambda k, m: said.append(m))
        sink.open()
        for n in range(5):
            sink.write(_tick(n))  # each returns at once: the receiver refuses them all for now
        with receiver.got:
            assert receiver.got.wait_for(lambda: receiver.refused, 20)
        receiver.status = 200
        sink.write(_tick(5))
        receiver.wait(6)
        sink.close()
        assert receiver.stamps() == ["17961192%02d000000000" % n for n in range(6)]
        assert sink.requests_sent < 6  # the backlog went in fewer requests than ticks
        assert any("HTTP 503" in m and "retrying" in m for m in said), said
        assert not any("dropped" in m or "not sent" in m for m in said), said
    finally:
        receiver.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make a certificate")
def test_tls_is_verified_against_the_ca_file(tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    receiver = Receiver(tls=(cert, key))
    try:
        said = []
        trusted = OtlpSink(OtlpOptions(receiver.url, "json", ca_file=cert), lambda k, m: said.append(m))
        trusted.write(_tick(0))
        receiver.wait(1)
        trusted.close()
        assert trusted.ticks_sent == 1 and said == []
        stranger = OtlpSink(OtlpOptions(receiver.url, "json"), lambda k, m: said.append(m), close_timeout_s=3)
        # the system's CAs don't know this certificate: kept, retried, never sent (close waits
        # 3 s: a loaded machine can take over 0.5 s to make the first try's TLS handshake)
        stranger.write(_tick(1))
        stranger.close()
        assert stranger.ticks_sent == 0 and receiver.stamps() == ["1796119200000000000"]
        assert any("CERTIFICATE_VERIFY_FAILED" in m and "retrying" in m for m in said), said
    finally:
        receiver.close()


class FakeReceiver:
    """Answers with `outcome` and records what it was given."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.bodies = []
        self.posted = threading.Event()

    def post(self, body, content_type, gzipped):
        self.bodies.append(body)
        self.posted.set()
        return self.outcome

    def close(self):
        pass


def test_past_the_buffer_the_oldest_ticks_are_dropped_and_said():
    now = [0.0]
    down = FakeReceiver(Outcome(False, True, "http://r/v1/metrics: Connection refused"))
    said = []
    sink = OtlpSink(OtlpOptions("http://r/v1/metrics", "json", buffer_s=300), lambda k, m: said.append(m),
                    receiver=down, clock=lambda: now[0], close_timeout_s=0.5)
    sink.open()
    for n in range(6):
        now[0] = n * 100.0
        sink.write(_tick(n))
    held = [json.loads(gzip.decompress(t.body))["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]
            ["dataPoints"][0]["timeUnixNano"] for t in sink._buffer]
    assert held == ["17961192%02d000000000" % n for n in (2, 3, 4, 5)]  # 0 and 1 were older than 300 s
    assert sink.ticks_dropped == 2
    assert any("the oldest ticks are dropped from now on" in m for m in said), said
    now[0] = 1000.0
    sink.close()
    assert any("2 ticks dropped, the oldest" in m for m in said), said
    assert any("4 ticks not sent at the end" in m for m in said), said


def test_a_refused_body_is_not_retried_and_is_said():
    refuser = FakeReceiver(Outcome(False, False, "http://r/v1/metrics: HTTP 400: json encoding isn't supported"))
    said = []
    sink = OtlpSink(OtlpOptions("http://r/v1/metrics", "json"), lambda k, m: said.append(m), receiver=refuser)
    sink.open()
    sink.write(_tick(0))
    assert refuser.posted.wait(20)
    sink.close()
    assert len(refuser.bodies) == 1 and sink.ticks_refused == 1
    assert any("HTTP 400" in m and "1 tick refused, not retried" in m for m in said), said


def test_a_partial_success_is_said():
    answer = b'{"partialSuccess": {"rejectedDataPoints": "3", "errorMessage": "out of order"}}'
    partial = FakeReceiver(Outcome(True, False, "", answer=answer))
    said = []
    sink = OtlpSink(OtlpOptions("http://r/v1/metrics", "json"), lambda k, m: said.append(m), receiver=partial)
    sink.write(_tick(0))
    assert partial.posted.wait(20)
    sink.close()
    assert sink.ticks_sent == 1
    assert said == ["OTLP: http://r/v1/metrics took the push but says 3 data points rejected: out of order"]
    assert otlp_encode.rejected("json", b"") == "" == otlp_encode.rejected("json", b"{}")
    assert otlp_encode.rejected("json", b"<html>proxy</html>") == ""


@needs_proto
def test_a_partial_success_in_protobuf_is_read():
    answer = metrics_service_pb2.ExportMetricsServiceResponse()
    answer.partial_success.rejected_data_points = 2
    assert otlp_encode.rejected("protobuf", answer.SerializeToString()) == "2 data points rejected"
    assert otlp_encode.rejected("protobuf", metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()) == ""


def test_a_record_the_encoder_cannot_take_is_a_sink_error_not_a_crash():
    from cgstat.pipeline.sinks import SinkError

    ok = FakeReceiver(Outcome(True, False, ""))
    sink = OtlpSink(OtlpOptions("http://r/v1/metrics", "json"), None, receiver=ok)
    with pytest.raises(SinkError) as err:
        sink.write([record(container={"image": 5})])  # an image that is not a string
    assert "a tick not encoded" in str(err.value)
    sink.write(_tick(1))  # the next tick goes
    sink.close()
    assert sink.ticks_sent == 1


def test_a_slow_receiver_never_delays_a_write():
    """The receiver holds its first request until every tick was written: writes return."""
    release = threading.Event()

    class Slow(FakeReceiver):
        def post(self, body, content_type, gzipped):
            release.wait(30)
            return super().post(body, content_type, gzipped)

    slow = Slow(Outcome(True, False, ""))
    sink = OtlpSink(OtlpOptions("http://r/v1/metrics", "json"), None, receiver=slow)
    sink.open()
    for n in range(20):
        sink.write(_tick(n))
    release.set()
    sink.close()
    sent = [gzip.decompress(b) for b in slow.bodies]
    stamps = [p["timeUnixNano"] for body in sent for rm in json.loads(body)["resourceMetrics"]
              for m in rm["scopeMetrics"][0]["metrics"] if m["name"] == "container.cpu.time"
              for p in m["sum"]["dataPoints"]]
    assert stamps == ["17961192%02d000000000" % n for n in range(20)]


@needs_proto
def test_protobuf_backlog_batches_are_one_valid_request():
    refusing = [True]

    class Flaky(FakeReceiver):
        def post(self, body, content_type, gzipped):
            if refusing[0]:
                return Outcome(False, True, "down")
            return super().post(body, content_type, gzipped)

    flaky = Flaky(Outcome(True, False, ""))
    sink = OtlpSink(OtlpOptions("http://r/v1/metrics", "protobuf"), None, receiver=flaky)
    sink.open()
    for n in range(4):
        sink.write(_tick(n))
    refusing[0] = False
    sink.close()
    requests = [metrics_service_pb2.ExportMetricsServiceRequest.FromString(gzip.decompress(b)) for b in flaky.bodies]
    stamps = [p.time_unix_nano for req in requests for rm in req.resource_metrics for m in rm.scope_metrics[0].metrics
              if m.name == "container.cpu.time" for p in m.sum.data_points]
    assert stamps == [1796119200000000000 + n * 10 ** 9 for n in range(4)]


@pytest.mark.parametrize("command", [["serve", "--listen", "127.0.0.1:0"], ["stream", "--no-events"]])
def test_serve_and_stream_push_every_tick_of_a_recorded_tree(command):
    receiver = Receiver()
    try:
        run = subprocess.run([sys.executable, "-m", "cgstat", "--host-root", FIXTURE, *command, "--count", "2",
                              "--interval", "0.2", "--otlp-endpoint", receiver.url, "--otlp-encoding", "json",
                              "--otlp-header", "X-Scope-OrgID=tenant-1"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert run.returncode == 0, run.stderr
        assert "OTLP" not in run.stderr.decode()  # nothing to say: every tick went
        assert len(receiver.bodies) == 2 and all(h["X-Scope-OrgID"] == "tenant-1" for h in receiver.headers_seen)
        cgroups = [{kv["key"]: kv["value"] for kv in rm["resource"]["attributes"]}["cgstat.cgroup"]["stringValue"]
                   for rm in receiver.bodies[0]["resourceMetrics"]]
        assert len(cgroups) == len(set(cgroups)) >= 10
    finally:
        receiver.close()


# -- options --------------------------------------------------------------------------------


def test_endpoint_and_header_parsing():
    assert parse_endpoint("http://vm:8428/opentelemetry/v1/metrics") == ("http", "vm", 8428,
                                                                          "/opentelemetry/v1/metrics")
    assert parse_endpoint("https://collector") == ("https", "collector", 443, "/v1/metrics")
    for bad in ("vm:8428", "ftp://vm/", "http://:80/", "http://vm:99999/"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)
    assert parse_header("Authorization=Bearer a=b") == ("Authorization", "Bearer a=b")
    for bad in ("novalue", "=x", "a b=c", "X=a\nb"):
        with pytest.raises(ValueError):
            parse_header(bad)


@pytest.mark.parametrize("command, args, says", [  # each on one command: both take them from the OTLP sink kind
    ("stream", ["--otlp-endpoint", "vm:8428"], "is not an http:// or https:// URL"),
    ("serve", ["--otlp-endpoint", "http://vm/", "--otlp-header", "nope"], "is not a header NAME=VALUE"),
    ("stream", ["--otlp-endpoint", "http://vm/", "--otlp-buffer", "5x"], "is not a duration"),
    ("serve", ["--otlp-endpoint", "http://vm/", "--otlp-encoding", "xml"], "is not one of protobuf, json"),
])
def test_bad_otlp_options_are_usage_errors(command, args, says):
    run = subprocess.run([sys.executable, "-m", "cgstat", command, *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=60)
    assert run.returncode == 2 and says in run.stderr.decode(), run.stderr


def test_duration_option():
    from cgstat.outputs.values import duration

    assert [duration(v) for v in ("300", "300s", "5m", "1h", "1.5m")] == [300, 300, 300, 3600, 90]
