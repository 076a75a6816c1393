"""cgstat.gpu against the real, unmodified pynvml loading a C double of libnvidia-ml.so.1.

Every test runs its reads in a subprocess (LD_LIBRARY_PATH must be set before the process
starts; tests/helpers/nvmldouble.py). The gateway's monotonic clock is fake there, so back-offs are
stepped, never slept.
"""

import shutil

import pytest

from tests.helpers.nvmldouble import Scenario
from tests.helpers.nvmldouble import run_reads as _run_reads

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")),
                                reason="no C compiler to build the NVML double")

A100 = "NVIDIA A100-SXM4-80GB"
U0 = "GPU-11111111-2222-3333-4444-000000000000"
U1 = "GPU-11111111-2222-3333-4444-000000000001"
U2 = "GPU-11111111-2222-3333-4444-000000000002"
GiB = 1 << 30


def run_reads(*args, **kw):
    """run_reads with the per-process snapshots only: device health, XIDs and versions are
    tested in test_gpu_health.py."""
    r = _run_reads(*args, **kw)
    for snap in r["snapshots"]:
        for key in ("xids", "driver_version", "cuda_version"):
            snap.pop(key)
        for d in snap["devices"]:
            d.pop("health")
            d.pop("gpu_instance_id")
    return r


def gpu(s, index, uuid, **kw):
    fields = dict(uuid=uuid, name=A100, mem_total=80 * GiB, mem_used=3 * GiB, mem_reserved=GiB // 2,
                  util_gpu=40 + index, util_mem=10 + index, temp=50 + index, power_mw=250500 + index)
    fields.update(kw)
    return s.gpu(index, **fields)


def device(index, uuid, **kw):
    d = dict(index=index, uuid=uuid, name=A100, utilization_percent=40 + index,
             memory_utilization_percent=10 + index, memory_total_bytes=80 * GiB,
             memory_used_bytes=3 * GiB, memory_reserved_bytes=GiB // 2, temperature_celsius=50 + index,
             power_watts=(250500 + index) / 1000.0, mig_mode=False, parent_uuid=None, mig_index=None,
             errors=[])
    d.update(kw)
    return d


def proc(pid, index, uuid, mem, sm=0, memp=0, enc=0, dec=0, type="compute"):
    return dict(pid=pid, gpu_index=index, gpu_uuid=uuid, type=type, memory_bytes=mem, sm_percent=sm,
                memory_percent=memp, encoder_percent=enc, decoder_percent=dec)


def unmeasured(pid, index, uuid, mem, type="compute"):
    return dict(proc(pid, index, uuid, mem, type=type), sm_percent=None, memory_percent=None,
                encoder_percent=None, decoder_percent=None)


def by_pid(snapshot):
    return sorted(snapshot["processes"], key=lambda p: (p["gpu_uuid"] or "", p["pid"]))


def test_no_processes_one_gpu_exact(tmp_path):
    r = run_reads(tmp_path, [{"scenario": gpu(Scenario(), 0, U0)}])
    snap = r["snapshots"][0]
    assert snap == {"available": True, "reason": None, "devices": [device(0, U0)], "processes": []}
    assert r["warnings"] == []
    assert r["symbols"] == {"processes": {"compute": "nvmlDeviceGetComputeRunningProcesses_v3",
                                          "graphics": "nvmlDeviceGetGraphicsRunningProcesses_v3"},
                            "utilization": "nvmlDeviceGetProcessesUtilizationInfo",
                            "memory_v2": True, "driver": "550.54.15"}


def test_importing_cgstat_gpu_does_not_import_pynvml(tmp_path):
    r = run_reads(tmp_path, [{"scenario": gpu(Scenario(), 0, U0)}])
    assert r["pynvml_on_import"] is False


def several() -> Scenario:
    s = Scenario()
    for i, u in enumerate((U0, U1, U2)):
        gpu(s, i, u)
    s.proc(0, 4242, 5 * GiB).proc(0, 4243, 7 * GiB).proc(0, 4244, "NA", type="graphics")
    s.proc(1, 5000, 2 * GiB)
    s.proc(1, 5000, 2 * GiB, type="graphics")  # one process in both lists: one entry, compute
    s.proc(2, 6000, GiB)                        # GPU 2: listed, idle (no samples)
    # one sample per PID: the driver's own figure (several are averaged: test_gpu_utilization.py)
    s.sample(0, 4242, sm=61, mem=22, enc=3, dec=4, ts="busy")
    s.sample(0, 4243, sm=17, mem=5, ts="busy")
    s.sample(0, 4244, sm=2, mem=1, enc=30, dec=40, ts="busy")
    s.sample(1, 5000, sm=99, mem=50, ts="busy")
    s.sample(1, 7777, sm=80, mem=20, ts="busy")  # a sample of a PID NVML does not list: ignored
    return s


def expected_several():
    return [proc(4242, 0, U0, 5 * GiB, 61, 22, 3, 4), proc(4243, 0, U0, 7 * GiB, 17, 5),
            proc(4244, 0, U0, None, 2, 1, 30, 40, type="graphics"),
            proc(5000, 1, U1, 2 * GiB, 99, 50), proc(6000, 2, U2, GiB)]


def test_several_gpus_processes_exact(tmp_path):
    r = run_reads(tmp_path, [{"scenario": several()}])
    snap = r["snapshots"][0]
    assert snap["devices"] == [device(0, U0), device(1, U1), device(2, U2)]
    assert by_pid(snap) == expected_several()


def test_busy_processes_stay_right_tick_after_tick(tmp_path):
    s = several()
    s.sample(2, 6000, sm=33, mem=7, ts="once")  # one burst: seen on the first read only
    s.sample(2, 6000, sm=70, ts=1)  # an ancient sample: older than lastSeen, never seen
    r = run_reads(tmp_path, [{"scenario": s}] + [{"advance": 1}] * 5)
    assert by_pid(r["snapshots"][0]) == expected_several()[:4] + [proc(6000, 2, U2, GiB, 33, 7)]
    for snap in r["snapshots"][1:]:
        assert by_pid(snap) == expected_several()


def test_idle_gpu_not_found_is_zero_percent(tmp_path):
    s = gpu(Scenario(), 0, U0).proc(0, 100, GiB).proc(0, 101, 2 * GiB, type="graphics")
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 1}])
    for snap in r["snapshots"]:
        assert snap["devices"] == [device(0, U0)]
        assert by_pid(snap) == [proc(100, 0, U0, GiB), proc(101, 0, U0, 2 * GiB, type="graphics")]


def test_processes_appear_between_ticks(tmp_path):
    base = gpu(Scenario(), 0, U0)
    more = gpu(Scenario(), 0, U0).proc(0, 300, GiB).sample(0, 300, sm=45, mem=9)
    r = run_reads(tmp_path, [{"scenario": base}, {"scenario": more, "advance": 1},
                             {"scenario": base, "advance": 1}])
    assert [by_pid(s) for s in r["snapshots"]] == [[], [proc(300, 0, U0, GiB, 45, 9)], []]


M0 = "MIG-aaaaaaaa-0000-0000-0000-000000000000"
M1 = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
MIG_NAME = "NVIDIA A100-SXM4-80GB MIG 3g.40gb"


def test_mig_devices_with_parent_and_processes(tmp_path):
    s = gpu(Scenario(), 0, U0, mig=1, util_gpu="unsupported", util_mem="unsupported")
    s.mig(0, 0, uuid=M0, name=MIG_NAME, mem_total=40 * GiB, mem_used=GiB, mem_reserved=0, gi=1, ci=0)
    s.mig(0, 2, uuid=M1, name=MIG_NAME, mem_total=20 * GiB, mem_used=2 * GiB, mem_reserved=4096, gi=2, ci=0)
    s.proc(0, 700, GiB, mig=0).proc(0, 701, 2 * GiB, mig=2).proc(0, 702, 3 * GiB, mig=2, type="graphics")
    s.sample(0, 700, sm=50)  # not served: per-process utilization is not supported on MIG
    gpu(s, 1, U1).proc(1, 800, GiB).sample(1, 800, sm=25, mem=5)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 1}])
    for snap in r["snapshots"]:
        mig = dict(utilization_percent=None, memory_utilization_percent=None, temperature_celsius=None,
                   power_watts=None, mig_mode=True, parent_uuid=U0, name=MIG_NAME)
        assert snap["devices"] == [
            device(0, U0, utilization_percent=None, memory_utilization_percent=None, mig_mode=True),
            device(0, M0, memory_total_bytes=40 * GiB, memory_used_bytes=GiB, memory_reserved_bytes=0,
                   mig_index=0, **mig),
            device(0, M1, memory_total_bytes=20 * GiB, memory_used_bytes=2 * GiB, memory_reserved_bytes=4096,
                   mig_index=2, **mig),
            device(1, U1)]
        assert by_pid(snap) == [proc(800, 1, U1, GiB, 25, 5), unmeasured(700, 0, M0, GiB),
                                unmeasured(701, 0, M1, 2 * GiB),
                                unmeasured(702, 0, M1, 3 * GiB, type="graphics")]
        assert all(not d["errors"] for d in snap["devices"])


@pytest.mark.parametrize("variant, compute, utilization, memory_v2", [
    ("v2", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetProcessUtilization", True),
    ("old", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetProcessUtilization", False),
])
def test_only_old_symbols_fallback_chosen_once(tmp_path, variant, compute, utilization, memory_v2):
    r = run_reads(tmp_path, [{"scenario": several()}] + [{"advance": 1}] * 3, variant=variant)
    assert r["symbols"]["processes"]["compute"] == compute
    assert r["symbols"]["processes"]["graphics"] == compute.replace("Compute", "Graphics")
    assert r["symbols"]["utilization"] == utilization
    assert r["symbols"]["memory_v2"] is memory_v2
    assert r["inits"] == 1
    if memory_v2:
        devices = [device(0, U0), device(1, U1), device(2, U2)]
    else:  # v1: used includes the reserved memory (drivers >= 510), reserved unknown
        devices = [device(i, u, memory_used_bytes=3 * GiB + GiB // 2, memory_reserved_bytes=None)
                   for i, u in enumerate((U0, U1, U2))]
    for snap in r["snapshots"]:
        assert snap["devices"] == devices
        assert by_pid(snap) == expected_several()
    missing = ["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
               "nvmlDeviceGetProcessesUtilizationInfo"] + ([] if memory_v2 else ["nvmlDeviceGetMemoryInfo_v2"]) + [
               "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetMPSComputeRunningProcesses_v3",
               "nvmlGpmQueryDeviceSupport"]
    # each missing symbol said exactly once over four reads
    assert [w.split(":")[0] for w in r["warnings"]] == [f"NVML has no {m}" for m in missing]


def test_driver_not_loaded_is_unavailable_with_reason(tmp_path):
    r = run_reads(tmp_path, [{"scenario": Scenario(init="driver_not_loaded")}, {"advance": 1}])
    for snap in r["snapshots"]:
        assert snap == {"available": False, "devices": [], "processes": [],
                        "reason": "NVIDIA driver not loaded (libnvidia-ml.so.1 is there, the nvidia kernel "
                                  "module is not running)"}


def test_no_library_is_unavailable_with_reason(tmp_path):
    r = run_reads(tmp_path, [{"scenario": gpu(Scenario(), 0, U0)}], variant=None)
    assert r["snapshots"] == [{"available": False, "devices": [], "processes": [],
                               "reason": "NVIDIA driver library libnvidia-ml.so.1 not found "
                                         "(no NVIDIA driver installed here)"}]
    assert r["pynvml_loaded"] is False  # a GPU-less host never pays for importing it


def test_with_the_library_pynvml_is_what_reads(tmp_path):
    r = run_reads(tmp_path, [{"scenario": gpu(Scenario(), 0, U0)}])
    assert r["pynvml_loaded"] is True and r["snapshots"][0]["available"] is True


def test_no_gpu_is_unavailable(tmp_path):
    r = run_reads(tmp_path, [{"scenario": Scenario()}])
    assert r["snapshots"][0]["available"] is False
    assert r["snapshots"][0]["reason"] == "no NVIDIA GPU found (NVML lists none)"


def test_unavailable_retried_after_retry_s(tmp_path):
    r = run_reads(tmp_path, [{"scenario": Scenario(init="driver_not_loaded")},
                             {"scenario": gpu(Scenario(), 0, U0), "advance": 59},
                             {"advance": 1}], retry_s=60)
    assert [s["available"] for s in r["snapshots"]] == [False, False, True]
    assert r["snapshots"][2]["devices"] == [device(0, U0)]


def lost_error(source):
    return {"source": source, "error": "gpu_lost", "detail": "NVML error 15: GPU is lost"}


def test_gpu_lost_mid_stream_then_recovers_after_backoff(tmp_path):
    ok = gpu(gpu(Scenario(), 0, U0), 1, U1).proc(0, 10, GiB).proc(1, 11, 2 * GiB).sample(1, 11, sm=30)
    lost = gpu(gpu(Scenario(), 0, U0), 1, U1, lost=1).proc(0, 10, GiB).proc(1, 11, 2 * GiB)
    steps = [{"scenario": ok},
             {"scenario": lost, "advance": 1},   # lost: re-init due at +10 s
             {"advance": 5},                     # still lost, not called again
             {"scenario": ok, "advance": 3},     # back on the bus, but the back-off is not over
             {"advance": 2}]                     # re-initialised: GPU 1 read again
    r = run_reads(tmp_path, steps, reinit_backoff_s=10)
    snaps = r["snapshots"]
    good = [device(0, U0), device(1, U1)]
    procs = [proc(10, 0, U0, GiB), proc(11, 1, U1, 2 * GiB, 30)]
    assert snaps[0]["devices"] == good and by_pid(snaps[0]) == procs
    err = [lost_error("nvmlDeviceGetMigMode")]
    gone = device(1, U1, utilization_percent=None, memory_utilization_percent=None, memory_total_bytes=None,
                  memory_used_bytes=None, memory_reserved_bytes=None, temperature_celsius=None,
                  power_watts=None, mig_mode=None, errors=err)
    for snap in snaps[1:4]:
        assert snap["available"] is True
        assert snap["devices"] == [device(0, U0), gone]
        assert by_pid(snap) == [proc(10, 0, U0, GiB)]  # GPU 0 and its process unaffected
    assert snaps[4]["devices"] == good
    assert by_pid(snaps[4])[0] == proc(10, 0, U0, GiB)
    assert by_pid(snaps[4])[1]["pid"] == 11 and by_pid(snaps[4])[1]["memory_bytes"] == 2 * GiB
    # only the lost GPU was opened again: the library was never shut down for GPU 0
    assert r["inits"] == 1 and r["reopened"] == 1


def test_gpu_lost_at_init_is_an_entry_with_the_error(tmp_path):
    s = gpu(gpu(Scenario(), 0, U0), 1, U1, lost=1)
    r = run_reads(tmp_path, [{"scenario": s}], reinit_backoff_s=10)
    gone = dict(index=1, uuid=None, name=None, utilization_percent=None, memory_utilization_percent=None,
                memory_total_bytes=None, memory_used_bytes=None, memory_reserved_bytes=None,
                temperature_celsius=None, power_watts=None, mig_mode=None, parent_uuid=None, mig_index=None,
                errors=[lost_error("nvmlDeviceGetHandleByIndex")])
    assert r["snapshots"][0]["devices"] == [device(0, U0), gone]


def test_stale_handles_after_a_reload_reopen_the_gpu_not_the_library(tmp_path):
    ok = gpu(Scenario(), 0, U0).proc(0, 10, GiB)
    reloaded = gpu(Scenario(), 0, U0).proc(0, 10, GiB).line("epoch n=1")
    r = run_reads(tmp_path, [{"scenario": ok}, {"scenario": reloaded, "advance": 1}, {"advance": 10}],
                  reinit_backoff_s=10)
    assert [d["errors"] for d in r["snapshots"][1]["devices"]] == [[lost_error("nvmlDeviceGetMigMode")]]
    assert r["snapshots"][2]["devices"] == [device(0, U0)]
    assert by_pid(r["snapshots"][2]) == [proc(10, 0, U0, GiB)]
    assert r["inits"] == 1 and r["reopened"] == 1


def test_driver_gone_under_us_reinitialises_the_library(tmp_path):
    ok = gpu(Scenario(), 0, U0).proc(0, 10, GiB)
    reloaded = gpu(Scenario(), 0, U0).proc(0, 10, GiB).line("epoch n=1 stale=driver_not_loaded")
    r = run_reads(tmp_path, [{"scenario": ok}, {"scenario": reloaded, "advance": 1}, {"advance": 10}],
                  reinit_backoff_s=10)
    assert r["snapshots"][1]["devices"][0]["errors"][0]["error"] == "read_failed"
    assert r["snapshots"][2]["devices"] == [device(0, U0)]
    assert by_pid(r["snapshots"][2]) == [proc(10, 0, U0, GiB)]
    assert r["inits"] == 2


def test_one_unknown_error_costs_that_value_only(tmp_path):
    """NVML_ERROR_UNKNOWN from one call of one GPU: that value null with its reason, counted
    per device and call; no shutdown, no re-initialisation, the other GPU untouched."""
    s = gpu(gpu(Scenario(), 0, U0, temp="unknown"), 1, U1).proc(0, 10, GiB).proc(1, 11, GiB)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 31}, {"advance": 31}], reinit_backoff_s=30)
    for snap in r["snapshots"]:
        assert snap["available"] is True
        assert snap["devices"] == [
            device(0, U0, temperature_celsius=None, errors=[
                {"source": "nvmlDeviceGetTemperature", "error": "read_failed",
                 "detail": "NVML error 999: Unknown Error"}]),
            device(1, U1)]
        assert by_pid(snap) == [proc(10, 0, U0, GiB), proc(11, 1, U1, GiB)]
    assert r["inits"] == 1 and r["reopened"] == 0
    assert r["error_counts"] == {f"{U0} nvmlDeviceGetTemperature": 3}


def test_not_supported_is_null_without_error_and_other_errors_are_kept(tmp_path):
    s = gpu(Scenario(), 0, U0, temp="unsupported", power_mw="noperm", mig="unsupported",
            procutil="unsupported").proc(0, 10, GiB).sample(0, 10, sm=40)
    r = run_reads(tmp_path, [{"scenario": s}])
    snap = r["snapshots"][0]
    assert snap["devices"] == [device(0, U0, temperature_celsius=None, power_watts=None, mig_mode=None, errors=[
        {"source": "nvmlDeviceGetPowerUsage", "error": "permission_denied",
         "detail": "NVML error 4: Insufficient Permissions"}])]
    assert by_pid(snap) == [unmeasured(10, 0, U0, GiB)]


def test_release_known_to_shuffle_pids_is_refused():
    from cgstat.gpu.nvml import release_problem
    assert "12.535.77" in release_problem("12.535.77", 32)
    assert "12.535.108" in release_problem("12.535.77", 24)
    assert "32-byte" in release_problem(None, 32)
    assert release_problem("13.615.71", 24) is None
    assert release_problem(None, None) is None


def test_gateway_refuses_the_shuffling_release_before_reading_anything(tmp_path):
    s = gpu(Scenario(), 0, U0).proc(0, 4242, 5 * GiB)
    r = run_reads(tmp_path, [{"scenario": s}], distribution_version="12.535.77")
    snap = r["snapshots"][0]
    assert snap["available"] is False
    assert "12.535.77" in snap["reason"] and "12.535.108" in snap["reason"]
    assert snap["devices"] == [] and snap["processes"] == []
    assert r["inits"] == 0
