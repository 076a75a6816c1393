"""The OTLP push within the series budget (cgstat/outputs/otlp/budget.py): past --max-series
the least-used cgroups' resources are folded into cgstat.cgroup="_other", the request holds
at most that many data points, each metric's sum (by point attributes) is the unbounded
push's (plus, for counters, what _other carries for cgroups that left it), no counter goes
down while cgroups come and go, and metric groups turned off leave out exactly their
metrics. Read back through opentelemetry-proto's decoder (the protobuf push) and as JSON."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from cgstat.outputs.otlp import names as otlp_names
from cgstat.outputs.otlp.budget import OtlpBudget
from cgstat.outputs.otlp.encode import Encoder
from cgstat.outputs.prometheus.budget import OTHER, groups_off

try:
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
except ImportError:  # the otlp extra is not installed: the protobuf checks skip
    metrics_service_pb2 = None

CGROUPS = 300
MAX_SERIES = 1000
TICKS = 8
GPU = {"schema": 1, "type": "gpu", "ts": "", "host": "node1",
       "gpu": {"index": 0, "uuid": "GPU-1", "name": "NVIDIA H100", "utilization_percent": 50,
               "memory_used_bytes": 1 << 30, "memory_total_bytes": 80 << 30}}


def cgroup(i, tick, cpu, ts):
    return {"schema": 1, "type": "cgroup", "ts": ts, "host": "node1", "cgroup": "/system.slice/docker-%d.scope" % i,
            "container": {"runtime": "docker", "id": "%064x" % i, "name": "job-%d" % i, "image": "pytorch/pytorch:2.3"},
            "cpu": {"usage_seconds_total": cpu, "user_seconds_total": cpu / 2, "periods_total": 100 + tick,
                    "percent": cpu % 97.0, "weight": 100},
            "memory": {"usage_bytes": 1048576 * (i + 1), "working_set_bytes": 524288 * (i + 1), "limit_bytes": None,
                       "pgfault_total": 1000 * i + tick, "oom_group": False},
            "io": {"devices": [{"device": "8:0", "name": "sda", "read_bytes_total": 4096 * i + tick,
                                "write_bytes_total": 512 * tick},
                               {"device": "8:16", "name": "sdb", "read_bytes_total": i, "write_bytes_total": 1}]},
            "network": {"interfaces": [{"name": "eth0", "rx_bytes_total": 10 * i + tick, "tx_bytes_total": 20}]},
            "pids": {"current": 3, "limit": None}}


def ticks():
    """TICKS ticks of about CGROUPS cgroups; from the second on, in turn 20 gone, or 10 gone and
    30 new (busier than most: others' places go to them), the rest's counters growing."""
    rng = random.Random(30)
    cpu = {i: rng.uniform(1, 100) for i in range(CGROUPS)}
    next_id = CGROUPS
    out = []
    for tick in range(TICKS):
        if tick:
            for i in rng.sample(sorted(cpu), 20 if tick % 2 else 10):
                del cpu[i]
            for _ in range(0 if tick % 2 else 30):
                cpu[next_id] = rng.uniform(100, 200)
                next_id += 1
            for i in cpu:
                cpu[i] += rng.uniform(0, 2)
        ts = "2026-12-02T10:00:%02d.000Z" % tick
        out.append([cgroup(i, tick, c, ts) for i, c in sorted(cpu.items())] + [dict(GPU, ts=ts)])
    return out


def decoded(encoder, records):
    """[(resource attrs, metric, kind, point attrs, value)] of one request."""
    body = encoder.encode(records)
    out = []
    if encoder.encoding == "protobuf":
        request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
        for rm in request.resource_metrics:
            res = tuple((kv.key, kv.value.string_value) for kv in rm.resource.attributes)
            for m in rm.scope_metrics[0].metrics:
                kind = m.WhichOneof("data")
                for p in getattr(m, kind).data_points:
                    value = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                    out.append((res, m.name, kind, tuple((kv.key, kv.value.string_value) for kv in p.attributes),
                                value))
        return out
    for rm in json.loads(body)["resourceMetrics"]:
        res = tuple((kv["key"], kv["value"].get("stringValue")) for kv in rm["resource"]["attributes"])
        for m in rm["scopeMetrics"][0]["metrics"]:
            kind = "sum" if "sum" in m else "gauge"
            for p in m[kind]["dataPoints"]:
                value = int(p["asInt"]) if "asInt" in p else p["asDouble"]
                out.append((res, m["name"], kind, tuple((kv["key"], kv["value"].get("stringValue"))
                                                         for kv in p["attributes"]), value))
    return out


def encodings():
    return [pytest.param("protobuf", marks=pytest.mark.skipif(metrics_service_pb2 is None,
                                                              reason="opentelemetry-proto not installed")), "json"]


@pytest.fixture(scope="module", params=encodings())
def pushes(request):
    """Per tick: (the bounded push's points, the unbounded push's, what _other carries by
    (metric, point attributes))."""
    budget = OtlpBudget(MAX_SERIES)
    said = []
    budget.say = said.append
    bounded, plain = Encoder(request.param, budget), Encoder(request.param)
    out = []
    for records in ticks():
        got = decoded(bounded, records)
        out.append((got, decoded(plain, records), dict(budget.offsets)))
    return out, said


def _cgroup_of(res):
    return dict(res).get("cgstat.cgroup")


def test_the_push_holds_at_most_max_series_points_and_folds_into_other(pushes):
    ticks_, said = pushes
    for got, full, _ in ticks_:
        assert len(full) > 4 * MAX_SERIES  # the unbounded push is 4x over
        assert len(got) <= MAX_SERIES
        others = {res for res, *_ in got if _cgroup_of(res) == OTHER}
        assert others == {(("host.name", "node1"), ("cgstat.cgroup", OTHER), ("container.name", OTHER))}
        own = {_cgroup_of(res) for res, *_ in got} - {OTHER, None}
        (folded,) = [v for res, name, *_, v in got if name == "cgstat.folded_cgroups"]
        cgroups = len({_cgroup_of(res) for res, *_ in full} - {None})
        assert 200 < folded < cgroups and folded + len(own) == cgroups
        # the GPU is never folded
        assert {n for res, n, *_ in got if _cgroup_of(res) is None} == {n for res, n, *_ in full
                                                                      if _cgroup_of(res) is None}
    assert len(said) == 1 and "--max-series %d" % MAX_SERIES in said[0]


def test_every_metric_sums_to_the_unbounded_push(pushes):
    """Metric by metric and attribute set by attribute set (a device's, an interface's)."""
    ticks_, _ = pushes
    for tick, (got, full, carried) in enumerate(ticks_):
        if tick == 0:
            assert not carried  # nothing has left _other yet: the sums are equal
        sums, want = defaultdict(float), defaultdict(float)
        for res, name, _, attrs, value in got:
            if name != "cgstat.folded_cgroups":
                sums[(name, attrs)] += value
        for res, name, _, attrs, value in full:
            want[(name, attrs)] += value
        assert set(sums) == set(want) and len(want) > 15
        for key, value in want.items():
            assert sums[key] == pytest.approx(value + carried.get(key, 0.0), rel=1e-9), key
    assert ticks_[-1][2]  # cgroups did leave _other: counters carried


def test_no_counter_goes_down_across_the_pushes(pushes):
    ticks_, _ = pushes
    last = {}
    checked = 0
    for got, _, _ in ticks_:
        for res, name, kind, attrs, value in got:
            if kind != "sum":
                continue
            key = (res, name, attrs)
            if key in last:
                assert value >= last[key], key
                checked += 1
            last[key] = value
    assert checked > 1000
    assert any(_cgroup_of(res) == OTHER for res, _, _ in last)


def test_groups_turned_off_leave_out_exactly_their_metrics():
    records = ticks()[0][:3]
    off = groups_off(None, ["cpu", "network"])
    names = {name for _, name, *_ in decoded(Encoder("json", OtlpBudget(0, off)), records)}
    every = {name for _, name, *_ in decoded(Encoder("json"), records)}
    groups = {m.name: m.group for m in otlp_names.CGROUP_METRICS + otlp_names.GPU_METRICS}
    assert names == {n for n in every if groups[n] not in ("cpu", "network")}
    assert "container.cpu.time" in every and "container.network.io" in every and "container.memory.usage" in names


def test_below_the_budget_the_push_is_the_unbounded_one():
    records = ticks()[0]
    assert Encoder("json", OtlpBudget(100000)).encode(records) == Encoder("json").encode(records)
