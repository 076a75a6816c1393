"""dcgm-exporter's series from cgstat, checked the way NVIDIA's own dashboard uses them.

NVIDIA/dcgm-exporter's grafana/dcgm-exporter-dashboard.json queries (panels and variables):

    max(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)
    avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"})
    max(DCGM_FI_DEV_POWER_USAGE{...}) by (Hostname, gpu, uuid)
    sum(max(DCGM_FI_DEV_POWER_USAGE{...}) by (gpu))
    max(DCGM_FI_DEV_SM_CLOCK{...} * 1000000) by (Hostname, UUID, gpu)
    max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{...}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)
    max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{...}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)
    max(DCGM_FI_DEV_FB_USED{...}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)
    label_values(DCGM_FI_DEV_FB_FREE, Hostname), label_values(DCGM_FI_DEV_FB_FREE{Hostname=~"$Hostname"}, gpu)

The same shapes are written below and run against a real Prometheus (Debian's package,
on loopback, 1 s scrapes) scraping `cgstat serve` over the NVML double; each must give the
scenario's values. The series and labels are also checked without a server.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from cgstat.contract import fields
from cgstat.outputs.prometheus import exposition as prom
from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT

parser = pytest.importorskip("prometheus_client.parser")

# what NVIDIA's dashboard panels and variables use
DASHBOARD_SERIES = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_FB_USED",
                    "DCGM_FI_DEV_FB_FREE")
DASHBOARD_LABELS = ("Hostname", "gpu", "uuid", "UUID", "GPU_I_ID", "GPU_I_PROFILE")
# the issue's list, and dcgm-exporter's other labels
ISSUE_SERIES = ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                "DCGM_FI_DEV_XID_ERRORS")

U0, U1 = "GPU-dcgm0000-0000-0000-0000-000000000000", "GPU-dcgm0000-0000-0000-0000-000000000001"
GiB = 1 << 30
MiB = 1 << 20


def scenario() -> D.Scenario:
    s = D.Scenario()
    s.gpu(0, uuid=U0, name="NVIDIA H200", mem_total=141 * GiB, mem_used=9 * GiB, mem_reserved=GiB // 2,
          util_gpu=87, temp=51, power_mw=412000, sm_clock=1755, mem_clock=2619, energy_mj=5_000_000,
          minor=0, bus_id="00000000:1B:00.0", gpm=1, gpm_1=91.0, gpm_5=33.0)
    s.gpu(1, uuid=U1, name="NVIDIA H200", mem_total=141 * GiB, mem_used=3 * GiB, mem_reserved=GiB // 2,
          util_gpu="unsupported", util_mem="unsupported", temp=44, power_mw=180000, sm_clock=1980, mem_clock=2619,
          minor=1, mig=1, gpm=1, gpm_1=50.0, gpm_5=10.0)
    s.mig(1, 0, uuid="MIG-dcgm-0", name="NVIDIA H200 MIG 3g.71gb", mem_total=70 * GiB, mem_used=2 * GiB,
          mem_reserved=0, gi=2, ci=0, gpm_1=40.0, gpm_5=20.0)
    s.xid(0, 13)
    return s


def _exposition(tmp_path) -> str:
    path = D.write_scenario(tmp_path / "s.txt", scenario())
    code = ("import sys; from cgstat.pipeline.sampler import Sampler; from cgstat.outputs.prometheus import exposition as p; "
            "s = Sampler(match='^/$'); s.tick(); import time; time.sleep(0.2); "
            "sys.stdout.write(p.render(s.tick(), p.TEXT).decode())")
    proc = subprocess.run([sys.executable, "-c", code], env=D.env(path), cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_dashboard_series_and_label_is_there(tmp_path):
    text = _exposition(tmp_path)
    samples = [s for f in parser.text_string_to_metric_families(text) for s in f.samples]
    names = {s.name for s in samples}
    assert set(DASHBOARD_SERIES) | set(ISSUE_SERIES) <= names
    dcgm = [s for s in samples if s.name.startswith("DCGM_FI_")]
    used = {k for s in dcgm for k in s.labels}
    assert set(DASHBOARD_LABELS) <= used
    assert {"gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id", "DCGM_FI_DRIVER_VERSION"} <= used
    temp0 = [s for s in dcgm if s.name == "DCGM_FI_DEV_GPU_TEMP" and s.labels["gpu"] == "0"]
    assert len(temp0) == 1
    assert temp0[0].labels == {"gpu": "0", "UUID": U0, "uuid": U0, "pci_bus_id": "00000000:1B:00.0",
                               "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": temp0[0].labels["Hostname"],
                               "DCGM_FI_DRIVER_VERSION": "550.54.15"}
    assert temp0[0].value == 51
    mig = [s for s in dcgm if s.name == "DCGM_FI_DEV_FB_USED" and "GPU_I_ID" in s.labels]
    assert [(s.labels["gpu"], s.labels["UUID"], s.labels["GPU_I_ID"], s.labels["GPU_I_PROFILE"],
             s.labels["modelName"], s.value) for s in mig] == [("1", U1, "2", "3g.71gb", "NVIDIA H200", 2048)]
    by = {(s.name, s.labels["gpu"], s.labels.get("GPU_I_ID")): s.value for s in dcgm}
    assert by[("DCGM_FI_DEV_POWER_USAGE", "0", None)] == 412.0
    assert by[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0", None)] == 5_000_000  # mJ, as DCGM
    assert by[("DCGM_FI_DEV_FB_USED", "0", None)] == 9 * 1024
    assert by[("DCGM_FI_DEV_FB_FREE", "0", None)] == (141 * GiB - 9 * GiB - GiB // 2) // MiB
    assert by[("DCGM_FI_DEV_XID_ERRORS", "0", None)] == 13 and by[("DCGM_FI_DEV_XID_ERRORS", "1", None)] == 0
    assert by[("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0", None)] == pytest.approx(0.91)
    assert by[("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "1", "2")] == pytest.approx(0.20)
    assert ("DCGM_FI_DEV_GPU_UTIL", "1", None) not in by  # NVML can't say in MIG mode: no sample, never 0


def test_dcgm_families_are_declared_in_the_table():
    names = [f.name for f in fields.FAMILIES if f.name.startswith("DCGM_FI_")]
    assert names == list(fields.DCGM_NAMES)
    assert all(f.kind == "gauge" and f.labels == fields.DCGM_LABELS for f in fields.FAMILIES
               if f.name.startswith("DCGM_FI_"))
    # every one is made by the renderer from a GPU record with every field set
    from tests.helpers.fieldtable import example

    text = prom.render([example(fields.GPU_RECORD)], prom.TEXT).decode()
    made = {s.name for f in parser.text_string_to_metric_families(text) for s in f.samples}
    assert set(fields.DCGM_NAMES) <= made
