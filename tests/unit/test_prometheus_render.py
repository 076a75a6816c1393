"""The exposition (cgstat/outputs/prometheus/exposition.py): parsed by prometheus_client's text and
OpenMetrics parsers, `promtool check metrics` clean, cAdvisor names and labels, nulls left
out, hostile names escaped, a container's labels bounded, GPU records rendered when present
and skipped when absent."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess

import pytest

from cgstat.contract import fields
from cgstat.outputs.prometheus import exposition as prom
from cgstat.outputs.prometheus import labels as prom_labels
from tests.helpers.contract import validate
from tests.helpers.fieldtable import blank, example, record

parser = pytest.importorskip("prometheus_client.parser")
om_parser = pytest.importorskip("prometheus_client.openmetrics.parser")
PROMTOOL = shutil.which("promtool")

def _device(**values):
    return dict(blank(fields.RECORD, "io.devices[]"), **values)


def _psi(**values):
    return dict(blank(fields.RECORD, "pressure.cpu", True), **values)


RECORD = record(**{
    "ts": "2026-11-29T20:10:12.807Z", "host": "gpu-node-3",
    "cgroup": "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu.slice/cri-containerd-"
              + "5" * 64 + ".scope",
    "paths": {"unified": "/x"}, "interval_s": 1.0, "unit": "cri-containerd-" + "5" * 64 + ".scope",
    "pod": {"uid": "u-1", "name": "trainer-0", "namespace": "ml", "qos": "burstable"},
    "container": {"runtime": "containerd", "id": "5" * 64, "short_id": "5" * 12, "name": "trainer",
                  "image": "pytorch/pytorch:2.3.0", "labels": {"io.kubernetes.pod.name": "trainer-0", "team": "vision"},
                  "pod": {"uid": "u-1", "name": "trainer-0", "namespace": "ml", "qos": "burstable"},
                  "sandbox": False},
    "cpu": {"usage_seconds_total": 4.506998, "user_seconds_total": 4.5, "system_seconds_total": 0.006998,
            "percent": 50.1, "limit_cores": 0.5, "periods_total": 89, "throttled_periods_total": 87,
            "throttled_seconds_total": 4.3, "throttled_percent": 97.6},
    "memory": {"usage_bytes": 26296320, "working_set_bytes": 20000000, "limit_bytes": 67108864, "percent": 39.2,
               "anon_bytes": 1000, "file_bytes": 2000, "inactive_file_bytes": 6296320, "shmem_bytes": 0,
               "swap_bytes": None, "oom_kills_total": 2, "oom_events_total": 3},
    "io": {"read_bytes_total": 10, "write_bytes_total": 20, "read_ops_total": 1, "write_ops_total": 2,
           "devices": [_device(device="254:0", name="vda", read_bytes_total=10, write_bytes_total=20,
                               read_ops_total=1, write_ops_total=2, discard_bytes_total=0, discard_ops_total=0)]},
    "pids": {"current": 7, "limit": None},
    "pressure": {"cpu": _psi(some_avg10=1.0, some_seconds_total=1.5, full_seconds_total=0.5),
                 "memory": None, "io": _psi(some_seconds_total=0.25, full_seconds_total=None)},
    "errors": [{"source": "memory.swap.current", "error": "missing", "detail": "x"}],
})

GPU_OBJ = {"memory_bytes": 3000, "sm_percent": 70.0, "power_watts": None, "energy_joules_total": 512.5,
           "devices": ["GPU-a", "GPU-b"],
           "processes": [
               {"pid": 11, "name": "python", "gpu_index": 0, "gpu_uuid": "GPU-a", "type": "compute",
                "memory_bytes": 1000, "sm_percent": 50.0, "memory_percent": 1.0, "encoder_percent": 0,
                "decoder_percent": 0, "power_watts": 120.0, "energy_joules_total": 400.0},
               {"pid": 12, "name": "python", "gpu_index": 0, "gpu_uuid": "GPU-a", "type": "compute",
                "memory_bytes": 1500, "sm_percent": 20.0, "memory_percent": 1.0, "encoder_percent": 0,
                "decoder_percent": 0, "power_watts": 48.0, "energy_joules_total": 112.5},
               {"pid": 12, "name": "python", "gpu_index": 1, "gpu_uuid": "GPU-b", "type": "compute",
                "memory_bytes": 500, "sm_percent": None, "memory_percent": None, "encoder_percent": None,
                "decoder_percent": None, "power_watts": None, "energy_joules_total": None}]}

GPU_RECORD = record("gpu", **{
              "ts": "2026-11-29T20:10:12.900Z", "host": "gpu-node-3", "interval_s": 1.0,
              "gpu": {"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200", "utilization_percent": 70.0,
                      "memory_utilization_percent": 10.0, "memory_total_bytes": 150000000000,
                      "memory_used_bytes": 3000, "memory_reserved_bytes": None, "temperature_celsius": 40,
                      "power_watts": 300.5, "mig_mode": None, "parent_uuid": None},
              "processes": [dict(blank(fields.GPU_RECORD, "processes[]"), pid=11, cgroup="/x", memory_bytes=1000),
                            dict(blank(fields.GPU_RECORD, "processes[]"), pid=99, cgroup=None, memory_bytes=4096)],
              "errors": []})


@pytest.fixture(autouse=True)
def _validated(monkeypatch):
    """Every record a test renders is valid against the schema, but for the label cache
    test's container names 1 and True (odd on purpose: equal values written differently)."""
    render = prom.render

    def checked(records, *args, **kwargs):
        for r in records:
            if (r.get("container") or {}).get("name") not in (1, True):
                validate(r)
        return render(records, *args, **kwargs)

    monkeypatch.setattr(prom, "render", checked)


def samples(text: str, name: str):
    return [s for f in parser.text_string_to_metric_families(text) for s in f.samples if s.name == name]


def one(text: str, name: str, **labels):
    hits = [s for s in samples(text, name) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def render_text(records, **kw) -> str:
    return prom.render(records, prom.TEXT, {"version": "t", "ticks_total": 3, "tick_duration_seconds": 0.01}, **kw).decode()


def test_cadvisor_names_units_and_labels():
    text = render_text([RECORD])
    base = {"id": RECORD["cgroup"], "name": "trainer", "image": "pytorch/pytorch:2.3.0", "namespace": "ml",
            "pod": "trainer-0", "container": "trainer"}
    s = one(text, "container_cpu_usage_seconds_total", cpu="total")
    assert {k: s.labels[k] for k in base} == base
    assert s.value == 4.506998 and s.timestamp == pytest.approx(1795983012.807)
    assert s.labels["container_label_team"] == "vision"
    assert s.labels["container_label_io_kubernetes_pod_name"] == "trainer-0"
    expect = {
        "container_cpu_user_seconds_total": 4.5, "container_cpu_system_seconds_total": 0.006998,
        "container_cpu_cfs_periods_total": 89, "container_cpu_cfs_throttled_periods_total": 87,
        "container_cpu_cfs_throttled_seconds_total": 4.3, "container_spec_cpu_quota": 50000,
        "container_spec_cpu_period": 100000, "container_memory_usage_bytes": 26296320,
        "container_memory_working_set_bytes": 20000000, "container_memory_rss": 1000,
        "container_memory_cache": 2000, "container_memory_total_inactive_file_bytes": 6296320,
        "container_spec_memory_limit_bytes": 67108864, "container_oom_events_total": 2,
        "cgstat_memory_oom_total": 3, "container_threads": 7,
        "container_pressure_cpu_waiting_seconds_total": 1.5, "container_pressure_cpu_stalled_seconds_total": 0.5,
        "container_pressure_io_waiting_seconds_total": 0.25,
    }
    for name, value in expect.items():
        assert one(text, name, id=RECORD["cgroup"]).value == value, name
    assert one(text, "container_fs_reads_bytes_total", device="/dev/vda").value == 10
    assert one(text, "container_fs_writes_total", device="/dev/vda").value == 2
    assert one(text, "container_blkio_device_usage_total", operation="Write", major="254", minor="0").value == 20
    info = one(text, "cgstat_cgroup_info")
    assert info.labels["runtime"] == "containerd" and info.labels["qos"] == "burstable"


def test_nulls_give_no_sample_never_a_zero():
    text = render_text([RECORD])
    for name in ("container_memory_swap", "container_threads_max", "container_pressure_io_stalled_seconds_total",
                 "container_pressure_memory_waiting_seconds_total", "container_processes"):
        assert samples(text, name) == [], name
    rec = copy.deepcopy(RECORD)
    rec["memory"]["limit_bytes"] = None
    rec["cpu"]["limit_cores"] = None
    rec["io"]["devices"] = None
    text = render_text([rec])
    for name in ("container_spec_memory_limit_bytes", "container_spec_cpu_quota", "container_spec_cpu_period",
                 "container_fs_reads_bytes_total"):
        assert samples(text, name) == [], name


def test_self_metrics_and_error_kinds():
    text = render_text([RECORD])
    assert one(text, "cgstat_cgroups", type="cgroup").value == 1
    assert one(text, "cgstat_record_errors", error="missing").value == 1
    assert one(text, "cgstat_tick_duration_seconds").value == 0.01
    assert one(text, "cgstat_ticks_total").value == 3
    assert one(text, "cgstat_build_info").labels["version"] == "t"


def test_hostile_names_are_escaped_and_labels_bounded():
    rec = copy.deepcopy(RECORD)
    evil = 'a"b\\c\nd\x1b[2J\u202eE\x9b'
    rec["cgroup"] = "/user.slice/" + evil
    rec["container"]["name"] = evil
    rec["container"]["labels"] = {"k%03d.x-y" % i: "v" for i in range(500)}
    rec["container"]["labels"]["bad key!"] = evil
    text = render_text([rec])
    s = one(text, "container_memory_usage_bytes")
    # the format's own escapes decode back; other controls become visible text
    assert s.labels["id"] == '/user.slice/a"b\\c\nd\\x1b[2J\\u202eE\\x9b'
    assert "\x1b" not in text and "\u202e" not in text and "\x9b" not in text
    label_keys = [k for k in s.labels if k.startswith("container_label_")]
    assert len(label_keys) == prom_labels.MAX_CONTAINER_LABELS
    assert all(set(k) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") for k in label_keys)
    rec["container"]["labels"] = {"long": "x" * 100000}
    s = one(render_text([rec]), "container_memory_usage_bytes")
    assert len(s.labels["container_label_long"]) == prom_labels.MAX_LABEL_VALUE


def test_gpu_rendered_when_present():
    rec = copy.deepcopy(RECORD)
    rec["gpu"] = GPU_OBJ
    text = render_text([rec, GPU_RECORD])
    assert one(text, "cgstat_container_gpu_memory_bytes", gpu="0", uuid="GPU-a").value == 2500
    assert one(text, "cgstat_container_gpu_sm_percent", gpu="0", uuid="GPU-a").value == 70
    assert one(text, "cgstat_container_gpu_memory_bytes", gpu="1", uuid="GPU-b").value == 500
    assert samples(text, "cgstat_container_gpu_sm_percent") and not [
        s for s in samples(text, "cgstat_container_gpu_sm_percent") if s.labels["gpu"] == "1"]
    p = one(text, "cgstat_container_gpu_process_memory_bytes", pid="12", gpu="0")
    assert p.value == 1500 and p.labels["process"] == "python" and p.labels["name"] == "trainer"
    assert one(text, "cgstat_gpu_utilization_percent", gpu="0", uuid="GPU-a").value == 70
    assert one(text, "cgstat_gpu_info").labels["model"] == "NVIDIA H200"
    assert one(text, "cgstat_gpu_unattributed_memory_bytes").value == 4096
    assert one(text, "cgstat_gpus").value == 1
    assert samples(text, "cgstat_gpu_memory_reserved_bytes") == []
    # per-container GPU power (per GPU: 120 + 48 W on GPU-a, none known on GPU-b) and energy
    assert one(text, "cgstat_container_gpu_power_watts", gpu="0", uuid="GPU-a").value == 168.0
    assert not [s for s in samples(text, "cgstat_container_gpu_power_watts") if s.labels["gpu"] == "1"]
    assert one(text, "cgstat_container_gpu_process_power_watts", pid="11", gpu="0").value == 120.0
    assert one(text, "cgstat_container_gpu_energy_joules_total").value == 512.5


def test_gpu_absent_or_null_is_skipped_quietly():
    rec = copy.deepcopy(RECORD)
    rec["gpu"] = None
    text = render_text([rec])
    assert not [line for line in text.splitlines() if "gpu" in line and not line.startswith(("#", "cgstat_gpus"))]


def test_openmetrics_counters_info_and_eof():
    rec = copy.deepcopy(RECORD)
    rec["gpu"] = GPU_OBJ
    data = prom.render([rec, GPU_RECORD], prom.OPENMETRICS, {"version": "t", "ticks_total": 1}).decode()
    assert data.endswith("# EOF\n")
    families = {f.name: f for f in om_parser.text_string_to_metric_families(data)}
    assert families["container_cpu_usage_seconds"].type == "counter"
    assert families["cgstat_build"].type == "info"
    assert families["container_memory_working_set_bytes"].type == "gauge"
    s = [x for x in families["container_cpu_usage_seconds"].samples][0]
    assert s.name == "container_cpu_usage_seconds_total" and float(s.timestamp) == pytest.approx(1795983012.807)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_check_metrics_is_clean(tmp_path):
    rec = copy.deepcopy(RECORD)
    rec["gpu"] = GPU_OBJ
    pod = copy.deepcopy(RECORD)
    pod.update(type="pod", cgroup="/kubepods.slice/pod", container=None)
    full = example(fields.GPU_RECORD)  # every GPU field set: every DCGM_FI_* series has a sample
    data = prom.render([rec, pod, GPU_RECORD, full], prom.TEXT, {"version": "t", "ticks_total": 1,
                                                            "tick_duration_seconds": 0.1,
                                                            "render_duration_seconds": 0.01,
                                                            "last_tick_timestamp_seconds": 1.0})
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=data, capture_output=True, timeout=60)
    # The lint promtool has is about dcgm-exporter's own names, kept as they are (its
    # dashboards and alerts use them): its label modelName is camelCase, and one of its series
    # is named ..._COUNTER. Each DCGM_FI_* family says so, and nothing else does.
    problems = (proc.stdout + proc.stderr).decode().splitlines()
    dcgm = [p for p in problems if re.fullmatch(r"DCGM_FI_\w+ label names should be written in 'snake_case' "
                                                r"not 'camelCase'", p)
            or p == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'"]
    assert proc.returncode == (3 if dcgm else 0) and problems == dcgm, problems
    assert len({p.split()[0] for p in dcgm}) == len(fields.DCGM_NAMES)
    rest = b"".join(line + b"\n" for line in data.splitlines() if b"DCGM_FI_" not in line)
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=rest, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_real_records_parse(tmp_path):
    # a recorded v2 host, through the Sampler, into both formats
    import io

    import cgstat
    from cgstat.diagnostics import Warner

    root = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "v2-systemd", "t1")
    sampler = cgstat.Sampler(host_root=root, all=True, warner=Warner(io.StringIO()))
    records = sampler.tick()
    assert records
    text = prom.render(records).decode()
    assert len(list(parser.text_string_to_metric_families(text))) > 10
    list(om_parser.text_string_to_metric_families(prom.render(records, prom.OPENMETRICS).decode()))


def test_network_series_per_interface_as_cadvisor_names_them():
    from prometheus_client.parser import text_string_to_metric_families

    from cgstat.outputs.prometheus import exposition as prometheus

    iface = {"name": "eth0", "rx_bytes_total": 8388608, "tx_bytes_total": 4096, "rx_packets_total": 6000,
             "tx_packets_total": 300, "rx_errors_total": 1, "tx_errors_total": 2, "rx_dropped_total": 3,
             "tx_dropped_total": 4}
    rec = record(ts="2026-11-30T13:00:00.000Z", network=dict(example(fields.RECORD, "network"), interfaces=[iface]))
    got = {}
    for fam in text_string_to_metric_families(prometheus.render([rec]).decode()):
        for s in fam.samples:
            if s.name.startswith("container_network_"):
                got[s.name] = (s.labels, s.value)
    assert got["container_network_receive_bytes_total"] == ({"id": "/x", "interface": "eth0"}, 8388608)
    assert got["container_network_transmit_packets_dropped_total"][1] == 4
    assert len(got) == 8


def test_label_cache_gives_the_same_bytes_tick_after_tick():
    # a workload's rendered labels are kept from one render to the next (LabelCache);
    # whatever changes between ticks, even in place in the same dicts, is seen
    rec = copy.deepcopy(RECORD)
    rec["gpu"] = copy.deepcopy(GPU_OBJ)
    other = copy.deepcopy(RECORD)
    other.update(cgroup="/other", container=None,
                 network=dict(example(fields.RECORD, "network"),
                              interfaces=[dict(example(fields.RECORD, "network.interfaces[]"), name="eth0")]))
    changes = [
        lambda: None,
        lambda: rec["container"]["labels"].update(team="speech"),
        lambda: rec["container"].update(name="trainer-2"),
        lambda: rec["container"].update(sandbox=True),
        lambda: rec["io"]["devices"][0].update(name="vdb"),
        lambda: rec["io"]["devices"].append(dict(rec["io"]["devices"][0], device="8:0", name=None)),
        lambda: rec["pod"].update(qos="guaranteed"),
        lambda: rec["container"].update(name=1),
        lambda: rec["container"].update(name=True),  # equal to 1, written differently
        lambda: other["network"]["interfaces"][0].update(name='e"th1'),
        lambda: rec.update(unit=None, type="pod"),
    ]
    for fmt in (prom.TEXT, prom.OPENMETRICS):
        cache = prom.LabelCache()
        for change in changes:
            change()
            assert prom.render([rec, other], fmt, cache=cache) == prom.render([rec, other], fmt)
        assert prom.render([other], fmt, cache=cache) == prom.render([other], fmt)
        assert list(cache.workloads) == ["/other"]  # the last tick's workloads only
