"""What real drivers do that tools which met them report (nvtop, nvitop, dcgm-exporter, the
k8s-device-plugin, nvml.h), played by the NVML double, read through the real pynvml: each
test states the quirk and the figure cgstat must still give (docs/gpu.md has the table)."""

import os
import shutil

import pytest

from tests.helpers.nvmldouble import Scenario, run_reads

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")),
                                reason="no C compiler to build the NVML double")

U0 = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
U1 = "GPU-bbbbbbbb-0000-0000-0000-000000000001"
M0 = "MIG-bbbbbbbb-0000-0000-0000-000000000000"
M2 = "MIG-bbbbbbbb-0000-0000-0000-000000000002"
GiB = 1 << 30
HOUR_US = 3_600_000_000


def sm_by_pid(snapshot):
    return {p["pid"]: p["sm_percent"] for p in snapshot["processes"]}


@pytest.mark.parametrize("variant", ["full", "v2"])  # ProcessesUtilizationInfo; ProcessUtilization (driver 535)
def test_nvtop_110_rows_leave_the_figures_right(tmp_path, variant):
    """100 rows for 3 processes (97 of them PID 0 with timestamp 0), a row for a PID that
    is not running, an smUtil of 37100, a stale row that ignores lastSeen and a row an hour
    ahead of the clock: 60, 20 and 30 % read 60, 20 and 30 %, tick after tick (the future
    row moves no lastSeen: the figures do not freeze at 0)."""
    s = Scenario().gpu(0, uuid=U0, util_rows=100)
    for pid in (101, 102, 103):
        s.proc(0, pid, GiB)
    s.sample(0, 101, sm=60, mem=6).sample(0, 102, sm=20).sample(0, 103, sm=30)
    s.sample(0, 102, sm=37100, mem=5)             # a value no percentage can be
    s.sample(0, 999, sm=90)                       # a PID NVML does not list as running
    s.line("sample gpu=0 pid=101 sm=0 ts=1000 stale=1")   # older than any lastSeen, served anyway
    s.sample(0, 103, sm=0, ts=f"ahead+{HOUR_US}")  # an hour ahead of the clock
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 1}, {"advance": 1}], variant=variant)
    for snap in r["snapshots"]:
        assert sm_by_pid(snap) == {101: 60, 102: 20, 103: 30}
        assert [p["memory_percent"] for p in sorted(snap["processes"], key=lambda p: p["pid"])] == [6, 0, 0]


def test_mig_reads_per_instance_never_the_parent_list(tmp_path):
    """nvml.h: a MIG GPU's own process list needs privileges (NO_PERMISSION here, as for
    the shipped unit's DynamicUser); dcgm-exporter reads per instance only, and takes both
    NOT_FOUND and INVALID_ARGUMENT from an empty slot as "empty"."""
    s = Scenario().gpu(0, uuid=U0, mig=1, util_gpu="unsupported", util_mem="unsupported", parent_list="noperm",
                       mig_empty="invalid", mig_max=4)
    s.mig(0, 0, uuid=M0, gi=1, ci=0).mig(0, 2, uuid=M2, gi=2, ci=0)
    s.proc(0, 700, GiB, mig=0).proc(0, 701, 2 * GiB, mig=2)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 1}])
    for snap in r["snapshots"]:
        assert [(d["uuid"], d["errors"]) for d in snap["devices"]] == [(U0, []), (M0, []), (M2, [])]
        assert sorted((p["pid"], p["gpu_uuid"], p["memory_bytes"]) for p in snap["processes"]) == [
            (700, M0, GiB), (701, M2, 2 * GiB)]
    assert r["error_counts"] == {}
    # a MIG device's own failing list is that device's error, counted for it
    s = Scenario().gpu(0, uuid=U0, mig=1, util_gpu="unsupported", util_mem="unsupported", parent_list="noperm",
                       mig_empty="invalid", mig_max=4, compute="unknown")
    s.mig(0, 0, uuid=M0, gi=1, ci=0).mig(0, 2, uuid=M2, gi=2, ci=0)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 1}])
    assert r["error_counts"] == {f"{M0} nvmlDeviceGetComputeRunningProcesses_v3": 2,
                                 f"{M2} nvmlDeviceGetComputeRunningProcesses_v3": 2}


def test_xid_matched_by_uuid_with_its_instance_and_a_stranger_said_once(tmp_path):
    """The event's handle is another pointer value for GPU 1 (nvml.h promises no identity;
    the k8s-device-plugin matches by UUID); it carries the MIG instance. Events from a device
    cgstat did not open are said once, not counted."""
    s = Scenario().gpu(0, uuid=U0).gpu(1, uuid=U1)
    s.line("xid gpu=1 code=79 alias=1 gi=2 ci=1").line("xid gpu=0 code=13 foreign=1")
    later = Scenario().gpu(0, uuid=U0).gpu(1, uuid=U1).line("xid gpu=1 code=79 alias=1 gi=2 ci=1")
    later.line("xid gpu=0 code=13 foreign=1").line("xid gpu=0 code=13 foreign=1 id=9").line("xid gpu=0 code=31")
    r = run_reads(tmp_path, [{"scenario": s}, {"scenario": later, "advance": 1}])
    first, second = r["snapshots"]
    assert first["xids"] == [{"gpu_index": 1, "gpu_uuid": U1, "code": 79, "gpu_instance_id": 2,
                              "compute_instance_id": 1}]
    assert second["xids"] == [{"gpu_index": 0, "gpu_uuid": U0, "code": 31, "gpu_instance_id": None,
                               "compute_instance_id": None}]
    assert first["devices"][1]["health"]["xid_errors_total"] == 1
    said = [w for w in r["warnings"] if "XID 13" in w]
    assert len(said) == 1 and "none of the GPUs" in said[0]


def test_gpm_samples_at_least_100_ms_apart(tmp_path):
    """nvml.h: GPM samples closer than 100 ms give no metrics. At 60 ms a tick, the second
    reading takes no sample (null, and why); the third, 120 ms after the first sample, has
    the metrics."""
    s = Scenario().gpu(0, uuid=U0, gpm=1, gpm_2=80.25)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 0.06}, {"advance": 0.06}])
    gpms = [snap["devices"][0]["health"]["gpm"] for snap in r["snapshots"]]
    assert gpms[0] is None and gpms[1] is None
    assert gpms[2]["sm_activity_percent"] == 80.25
    why = {(p["source"], p["error"]) for p in r["snapshots"][1]["devices"][0]["health"]["errors"]}
    assert ("nvmlGpmSampleGet", "unavailable") in why


@pytest.mark.parametrize("field_type", [0, 1, 4, 5])  # double, unsigned int, signed long long, signed int
def test_field_values_read_as_their_value_type(tmp_path, field_type):
    """nvmlFieldValue_t carries a valueType; the driver writes that member of the union only
    (the double fills the rest with 0xAB, as a buffer's old bytes)."""
    s = Scenario().gpu(0, uuid=U0, field_type=field_type, mem_temp=45, nvlink_tx_kib=1000)
    r = run_reads(tmp_path, [{"scenario": s}])
    h = r["snapshots"][0]["devices"][0]["health"]
    assert (h["memory_temperature_celsius"], h["nvlink_tx_bytes_total"]) == (45, 1000 * 1024)


def test_pcie_byte_counters_that_wrap(tmp_path):
    """nvml.h: the PCIe byte counters may wrap. A 32-bit counter (valueType unsigned int)
    going from 2^32 - 296 to 1000 in 2 s counted 1296 bytes: 648 B/s, not a reset."""
    before = Scenario().gpu(0, uuid=U0, field_type=1, pcie_tx_bytes=(1 << 32) - 296, pcie_rx_bytes=10)
    after = Scenario().gpu(0, uuid=U0, field_type=1, pcie_tx_bytes=1000, pcie_rx_bytes=20)
    r = run_reads(tmp_path, [{"scenario": before}, {"scenario": after, "advance": 2.0}])
    h = r["snapshots"][1]["devices"][0]["health"]
    assert (h["pcie_tx_bytes_per_second"], h["pcie_rx_bytes_per_second"]) == (648.0, 5.0)


def test_535_early_drivers_32_byte_process_struct(tmp_path):
    """Drivers 535.43-535.86 fill the _v3 lists with 32-byte structs; nvitop tells them by
    their symbols. Read with a 24-byte stride the second PID is garbage."""
    s = Scenario(driver="535.54.03").gpu(0, uuid=U0)
    for pid, mem in ((4242, GiB), (4243, 2 * GiB), (4244, 3 * GiB)):
        s.proc(0, pid, mem)
    r = run_reads(tmp_path, [{"scenario": s}], variant="535-early")
    assert sorted((p["pid"], p["memory_bytes"]) for p in r["snapshots"][0]["processes"]) == [
        (4242, GiB), (4243, 2 * GiB), (4244, 3 * GiB)]


def test_persistence_mode_off_said_once(tmp_path):
    s = Scenario().gpu(0, uuid=U0, persistence=0).gpu(1, uuid=U1)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 11}, {"advance": 11}])
    said = [w for w in r["warnings"] if "persistence mode is off" in w]
    assert len(said) == 1 and U0 in said[0]
    assert [d["health"]["persistence_mode"] for d in r["snapshots"][2]["devices"]] == [False, True]


def test_no_library_initialised_where_the_kernel_has_no_driver(tmp_path):
    """A library that would make a device node at nvmlInit (as Debian's libnvidia-ml does as
    root) is never initialised where /proc/driver/nvidia/version is absent; the reason says so."""
    dev = tmp_path / "dev"
    dev.mkdir()
    mark = dev / "nvidiactl"
    absent = str(tmp_path / "proc" / "driver" / "nvidia" / "version")
    r = run_reads(tmp_path, [{"scenario": Scenario().gpu(0, uuid=U0)}, {"advance": 61}], retry_s=60,
                  extra_env={"NVML_DOUBLE_INIT_MARK": str(mark), "CGSTAT_NVIDIA_VERSION_FILE": absent})
    assert os.listdir(dev) == []
    for snap in r["snapshots"]:
        assert snap["available"] is False
        assert snap["reason"].startswith(f"NVIDIA driver not loaded ({absent} absent)")
    assert r["pynvml_loaded"] is False
    # the same library with the driver's file present: initialised, the node made
    r = run_reads(tmp_path, [{"scenario": Scenario().gpu(0, uuid=U0)}],
                  extra_env={"NVML_DOUBLE_INIT_MARK": str(mark)})
    assert r["snapshots"][0]["available"] is True and os.listdir(dev) == ["nvidiactl"]
