"""The Prometheus series of peaks, limits, weights, memory events and reclaim from real records (the v2-fields recording): their
values are the record fields, their names cAdvisor's where it has them, and promtool's
`check metrics` finds nothing to say."""

import io
import os
import shutil
import subprocess

import pytest

import cgstat
from cgstat.contract import fields
from cgstat.outputs.prometheus import exposition as prom
from cgstat.diagnostics import Warner
from tests.helpers.contract import ROOT
from tests.helpers.fieldtable import example

parser = pytest.importorskip("prometheus_client.parser")
PROMTOOL = shutil.which("promtool")
J = "/system.slice/docker-f56dd1ff992a14d84d9133e27d77b442f4bb8e4ab8dfe7e73119f0c8d9baf44e.scope"
K = "/system.slice/docker-179a3868c03f4184f9689fa5e8ad7871e89687a4cce83ad3e76574f07b42b792.scope"
D = "/system.slice/docker-a00407037581a3faa0db7daf724474f2effa2fdc2e9de4c8c3db5f7b0d41d26d.scope"

# cAdvisor's names (google/cadvisor metrics/prometheus.go) for what this issue added
CADVISOR = {"container_memory_max_usage_bytes", "container_memory_failcnt", "container_memory_failures_total",
            "container_spec_cpu_shares", "container_spec_memory_reservation_limit_bytes",
            "container_spec_memory_swap_limit_bytes", "container_memory_events_high_total",
            "container_memory_events_max_total"}


def _records():
    root = os.path.join(ROOT, "tests", "fixtures", "v2-fields", "t1")
    return cgstat.Sampler(host_root=root, all=True, warner=Warner(io.StringIO())).tick()


def _samples(text):
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _one(samples, name, cgroup, **labels):
    hits = [s for s in samples.get(name, []) if s.labels.get("id") == cgroup
            and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, cgroup, labels, hits)
    return hits[0].value


def test_new_series_carry_the_recorded_values():
    records = _records()
    by = {r["cgroup"]: r for r in records}
    s = _samples(prom.render(records).decode())
    assert _one(s, "container_memory_max_usage_bytes", J) == by[J]["memory"]["peak_bytes"] == 13094912
    assert _one(s, "container_memory_events_high_total", J) == 238
    assert _one(s, "container_memory_events_max_total", J) == 0
    assert _one(s, "cgstat_memory_events_local_total", J, event="high") == 238
    assert _one(s, "cgstat_memory_swap_events_total", J, event="fail") == 3041
    assert _one(s, "container_memory_failures_total", J, failure_type="pgmajfault", scope="hierarchy") == 72
    assert _one(s, "container_spec_memory_reservation_limit_bytes", J) == 4 << 20
    assert _one(s, "container_spec_memory_swap_limit_bytes", J) == 8 << 20
    assert _one(s, "cgstat_memory_high_bytes", J) == 8 << 20
    assert _one(s, "cgstat_cpu_weight", J) == 200
    assert _one(s, "cgstat_memory_pgscan_total", J) == 16377
    assert _one(s, "cgstat_pids_limit_hits_total", K) == 2
    assert _one(s, "cgstat_pids_max_usage", K) == 4
    assert _one(s, "cgstat_io_limit_bytes_per_second", D, device="/dev/vda", operation="read") == 104857600
    assert not [x for x in s.get("cgstat_io_limit_ops_per_second", []) if x.labels.get("id") == D]  # max: none
    # v2 has no failcnt and no cpu.shares: no sample rather than a fake 0
    assert not [x for x in s.get("container_memory_failcnt", []) if x.labels.get("id") == J]
    assert not [x for x in s.get("container_spec_cpu_shares", []) if x.labels.get("id") == J]


def test_cadvisor_names_are_kept_and_the_rest_are_cgstat():
    names = {f.name for f in fields.FAMILIES}
    assert CADVISOR <= names
    new = {f.name for f in fields.FAMILIES if f.field.split(".")[0] in ("memory", "cpu", "pids", "io")} | CADVISOR
    for name in new:
        assert name.startswith(("container_", "cgstat_")), name


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_check_metrics_on_recorded_and_full_records():
    full = example(fields.RECORD)
    full["io"]["limits"][0]["name"] = "vda"
    data = prom.render(_records() + [full], prom.TEXT, {"version": "t", "ticks_total": 1})
    assert b"container_memory_events_high_total{" in data and b"cgstat_cpuset_info{" in data
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
