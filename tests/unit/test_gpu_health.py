"""Device health through the real pynvml and the NVML double: every device-health field equals its
scenario value (or is null with an "unsupported" entry), older drivers' symbols, what is
read how often, XIDs drained without waiting, GPM supported and not, MPS clients, and the
energy split (Kepler's way) on a fake clock."""

import shutil

import pytest

from tests.helpers.nvmldouble import Scenario, run_reads

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")),
                                reason="no C compiler to build the NVML double")

U0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
U1 = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GiB = 1 << 30
MiB = 1 << 20

FULL = dict(uuid=U0, name="NVIDIA H200", mem_total=141 * GiB, mem_used=9 * GiB, mem_reserved=GiB // 2,
            util_gpu=87, util_mem=40, temp=51, power_mw=412000,
            sm_clock=1755, mem_clock=2619, sm_clock_max=1980, mem_clock_max=2619,
            reasons=0x4 | 0x40,  # sw_power_cap, hw_thermal_slowdown
            viol_power=2_500_000_000, viol_thermal=750_000_000, energy_mj=123_456_789, power_limit_mw=700000,
            mem_temp=68, pcie_tx_bytes=1_000_000, pcie_rx_bytes=3_000_000, replay=4, nvlink_tx_kib=1000,
            nvlink_rx_kib=3000, enc=12, dec=34, ecc_cor=7, ecc_unc=1, remap_cor=2, remap_unc=1,
            remap_pending=1, remap_failure=0, retired_sbe=3, retired_dbe=1, retired_pending=1, compute_mode=3,
            persistence=1, bus_id="00000000:1B:00.0", serial="1654922013421", minor=5, gpm=1,
            gpm_1=91.5, gpm_2=80.25, gpm_3=40.5, gpm_5=33.0, gpm_10=55.5, gpm_20=100, gpm_21=200,
            gpm_60=300, gpm_61=400)


def health(snapshot, index=0):
    return snapshot["devices"][index]["health"]


def problems(h):
    return {(p["source"], p["error"]) for p in h["errors"]}


def test_every_device_field_equals_its_scenario_value(tmp_path):
    s1 = Scenario().gpu(0, **FULL)
    s2 = Scenario().gpu(0, **dict(FULL, pcie_tx_bytes=5_000_000, pcie_rx_bytes=3_500_000))
    r = run_reads(tmp_path, [{"scenario": s1}, {"scenario": s2, "advance": 2.0}])
    first, second = (health(s) for s in r["snapshots"])
    assert (first["pcie_tx_bytes_per_second"], first["gpm"]) == (None, None)  # rates need two readings
    assert ("nvmlGpmMetricsGet", "unavailable") in problems(first)
    assert second == {
        "sm_clock_mhz": 1755, "memory_clock_mhz": 2619, "sm_clock_max_mhz": 1980, "memory_clock_max_mhz": 2619,
        "clocks_event_reasons": ["sw_power_cap", "hw_thermal_slowdown"],
        "violation_power_seconds_total": 2.5, "violation_thermal_seconds_total": 0.75,
        "energy_joules_total": 123456.789, "power_limit_watts": 700.0, "memory_temperature_celsius": 68,
        "pcie_tx_bytes_per_second": 2_000_000.0, "pcie_rx_bytes_per_second": 250_000.0,  # counter deltas / 2 s
        "pcie_replays_total": 4, "nvlink_tx_bytes_total": 1000 * 1024, "nvlink_rx_bytes_total": 3000 * 1024,
        "encoder_utilization_percent": 12, "decoder_utilization_percent": 34,
        "ecc_corrected_total": 7, "ecc_uncorrected_total": 1, "remapped_rows": [2, 1, 1, 0],
        "retired_pages": [3, 1, True], "xid_errors_total": 0, "last_xid": None,
        "compute_mode": "exclusive_process", "persistence_mode": True, "pci_bus_id": "00000000:1B:00.0",
        "serial": "1654922013421", "minor_number": 5,
        "gpm": {"graphics_activity_percent": 91.5, "sm_activity_percent": 80.25, "sm_occupancy_percent": 40.5,
                "tensor_activity_percent": 33.0, "dram_bandwidth_percent": 55.5,
                "pcie_tx_bytes_per_second": 100.0 * MiB, "pcie_rx_bytes_per_second": 200.0 * MiB,
                "nvlink_tx_bytes_per_second": 400.0 * MiB, "nvlink_rx_bytes_per_second": 300.0 * MiB},
        "errors": []}
    snap = r["snapshots"][1]
    assert (snap["driver_version"], snap["cuda_version"]) == ("550.54.15", "12.4")
    assert r["warnings"] == []


def test_unsupported_is_null_with_an_unsupported_entry_and_not_asked_again(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("NVML_DOUBLE_LOG", str(log))
    off = dict(FULL, mem_temp="unsupported", sm_clock="unsupported", reasons="unsupported", viol_thermal="unsupported",
               energy_mj="unsupported", nvlink_tx_kib="unsupported", nvlink_rx_kib="unsupported",
               remap_cor="unsupported", retired_sbe="unsupported", retired_dbe="unsupported",
               retired_pending="unsupported", ecc_unc="noperm", gpm=0, events="unsupported")
    r = run_reads(tmp_path, [{"scenario": Scenario().gpu(0, **off)}] + [{"advance": 1.0}] * 2)
    for snap in r["snapshots"]:
        h = health(snap)
        for key in ("sm_clock_mhz", "clocks_event_reasons", "violation_thermal_seconds_total", "energy_joules_total",
                    "memory_temperature_celsius", "nvlink_tx_bytes_total", "nvlink_rx_bytes_total", "remapped_rows",
                    "retired_pages", "gpm", "xid_errors_total", "last_xid", "ecc_uncorrected_total"):
            assert h[key] is None, key
        assert h["memory_clock_mhz"] == 2619 and h["violation_power_seconds_total"] == 2.5  # the rest is read
        assert problems(h) == {
            ("nvmlDeviceGetClockInfo", "unsupported"), ("nvmlDeviceGetCurrentClocksEventReasons", "unsupported"),
            ("nvmlDeviceGetViolationStatus", "unsupported"), ("nvmlDeviceGetTotalEnergyConsumption", "unsupported"),
            ("nvmlDeviceGetFieldValues NVML_FI_DEV_MEMORY_TEMP", "unsupported"),
            ("nvmlDeviceGetFieldValues NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "unsupported"),
            ("nvmlDeviceGetFieldValues NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", "unsupported"),
            ("nvmlDeviceGetRemappedRows", "unsupported"), ("nvmlDeviceGetRetiredPages", "unsupported"),
            ("nvmlDeviceGetRetiredPagesPendingStatus", "unsupported"), ("nvmlGpmQueryDeviceSupport", "unsupported"),
            ("nvmlDeviceRegisterEvents", "unsupported"),
            ("nvmlDeviceGetTotalEccErrors", "permission_denied"),  # a failure, not unsupported: asked every time
        }
    calls = log.read_text().split("\n")
    assert calls.count("nvmlDeviceGetTotalEnergyConsumption") == 1  # unsupported: asked once, remembered
    assert calls.count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert calls.count("nvmlDeviceGetTotalEccErrors") == 6  # corrected and uncorrected, three reads
    assert calls.count("nvmlDeviceGetClockInfo") == 1 + 3  # SM unsupported once, memory every read


def test_rarely_changing_values_are_read_less_often(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("NVML_DOUBLE_LOG", str(log))
    r = run_reads(tmp_path, [{"scenario": Scenario().gpu(0, **FULL)}] + [{"advance": 1.0}] * 11)
    calls = log.read_text().split("\n")
    count = calls.count
    # once per initialisation
    assert [count(f) for f in ("nvmlDeviceGetSerial", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMinorNumber",
                               "nvmlGpmQueryDeviceSupport")] == [1, 1, 1, 1]
    assert count("nvmlDeviceGetMaxClockInfo") == 2
    # every 10 s (readings at 0..11 s: at 0 and 10)
    assert [count(f) for f in ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetComputeMode",
                               "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetRemappedRows",
                               "nvmlDeviceGetRetiredPagesPendingStatus")] == [2] * 5
    # every tick
    assert [count(f) for f in ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetFieldValues",
                               "nvmlDeviceGetCurrentClocksEventReasons", "nvmlGpmSampleGet")] == [12] * 4
    assert count("nvmlDeviceGetPcieThroughput") == 0  # the byte counters exist: never the 20 ms sample
    assert all(health(s)["serial"] == "1654922013421" for s in r["snapshots"])


def test_pcie_throughput_fallback_every_10_s_where_the_counters_are_missing(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("NVML_DOUBLE_LOG", str(log))
    s = Scenario().gpu(0, **dict(FULL, pcie_tx_bytes="unsupported", pcie_rx_bytes="unsupported",
                                 pcie_tx_kbs=2000, pcie_rx_kbs=500))
    r = run_reads(tmp_path, [{"scenario": s}] + [{"advance": 1.0}] * 12)
    rates = [(health(x)["pcie_tx_bytes_per_second"], health(x)["pcie_rx_bytes_per_second"]) for x in r["snapshots"]]
    assert rates[0] == (None, None) and set(rates[1:]) == {(2000 * 1024.0, 500 * 1024.0)}
    # known missing after the first reading: read then, and again 10 s later
    assert log.read_text().split("\n").count("nvmlDeviceGetPcieThroughput") == 2 * 2


def test_older_driver_throttle_reasons_mps_v2_no_gpm(tmp_path):
    s = Scenario().gpu(0, **FULL).proc(0, 900, GiB, type="mps").proc(0, 901, 2 * GiB)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 1.0}], variant="v2")
    assert r["newer"] == {"reasons": "nvmlDeviceGetCurrentClocksThrottleReasons",
                          "mps": "nvmlDeviceGetMPSComputeRunningProcesses_v2", "gpm": False, "cuda": "12.4"}
    h = health(r["snapshots"][1])
    assert h["clocks_event_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]  # the same mask, older name
    assert h["gpm"] is None and ("nvmlGpmQueryDeviceSupport", "unsupported") in problems(h)
    assert {p["pid"]: p["type"] for p in r["snapshots"][1]["processes"]} == {900: "mps", 901: "compute"}
    said = [w.split(":")[0] for w in r["warnings"]]
    assert "NVML has no nvmlDeviceGetCurrentClocksEventReasons" in said
    assert "NVML has no nvmlGpmQueryDeviceSupport" in said


def test_xids_each_once_drained_with_a_zero_timeout(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("NVML_DOUBLE_LOG", str(log))
    base = Scenario().gpu(0, uuid=U0).gpu(1, uuid=U1)
    one = Scenario().gpu(0, uuid=U0).gpu(1, uuid=U1).xid(1, 79, id=1)
    more = Scenario().gpu(0, uuid=U0).gpu(1, uuid=U1).xid(1, 79, id=1).xid(0, 13, id=2).xid(0, 43, id=3)
    r = run_reads(tmp_path, [{"scenario": base}, {"scenario": one, "advance": 1}, {"advance": 1},
                             {"scenario": more, "advance": 1}, {"advance": 1}])
    assert [[(x["gpu_index"], x["code"]) for x in s["xids"]] for s in r["snapshots"]] == [
        [], [(1, 79)], [], [(0, 13), (0, 43)], []]  # each XID in one reading only
    last = r["snapshots"][-1]
    assert [(health(last, i)["xid_errors_total"], health(last, i)["last_xid"]) for i in (0, 1)] == [(2, 43), (1, 79)]
    waits = [line for line in log.read_text().split("\n") if line.startswith("nvmlEventSetWait")]
    assert waits and set(waits) == {"nvmlEventSetWait_v2 timeout=0"}  # never a wait that could block


def test_gpm_supported_and_not_and_per_mig_instance(tmp_path):
    s = Scenario().gpu(0, **dict(FULL, mig=1, util_gpu="unsupported", util_mem="unsupported"))
    s.mig(0, 0, uuid="MIG-0", name="NVIDIA H200 MIG 3g.71gb", gi=3, ci=0, gpm_2=25.0, gpm_5=12.5)
    s.gpu(1, uuid=U1, gpm=0)
    r = run_reads(tmp_path, [{"scenario": s}, {"advance": 1.0}])
    snap = r["snapshots"][1]
    gpu0, mig, gpu1 = snap["devices"]
    assert gpu0["health"]["gpm"]["sm_activity_percent"] == 80.25
    assert mig["gpu_instance_id"] == 3
    assert (mig["health"]["gpm"]["sm_activity_percent"], mig["health"]["gpm"]["tensor_activity_percent"]) == (25.0, 12.5)
    assert ("mig", "unsupported") in problems(mig["health"])  # board health is the parent's
    assert mig["health"]["sm_clock_mhz"] is None
    assert gpu1["health"]["gpm"] is None
    assert ("nvmlGpmQueryDeviceSupport", "unsupported") in problems(gpu1["health"])


def test_mps_clients_listed_as_mps(tmp_path):
    s = Scenario().gpu(0, uuid=U0).proc(0, 500, GiB).proc(0, 501, 2 * GiB, type="mps").proc(0, 502, GiB, type="mps")
    r = run_reads(tmp_path, [{"scenario": s}])
    assert sorted((p["pid"], p["type"], p["memory_bytes"]) for p in r["snapshots"][0]["processes"]) == [
        (500, "compute", GiB), (501, "mps", 2 * GiB), (502, "mps", GiB)]


def _busy(power_mw, energy_mj):
    return (Scenario().gpu(0, uuid=U0, power_mw=power_mw, energy_mj=energy_mj)
            .proc(0, 700, GiB).proc(0, 701, GiB).sample(0, 700, sm=60).sample(0, 701, sm=20))


def test_energy_300_w_60_w_idle_sm_60_and_20_for_10_ticks(tmp_path):
    """The issue's example: 1,800 J and 600 J to the processes, 3,000 J on the device."""
    idle = Scenario().gpu(0, uuid=U0, power_mw=60000, energy_mj=1_000_000)
    steps = [{"scenario": idle}] + [{"scenario": _busy(300000, 1_000_000 + 300_000 * k), "advance": 1.0}
                                    for k in range(0, 11)]
    r = run_reads(tmp_path, steps)
    last = r["energy"][-1]
    assert last["idle"] == {U0: [60.0, True]}
    p700, p701 = last["processes"][U0 + "/700"], last["processes"][U0 + "/701"]
    assert p700 == [pytest.approx(180.0), pytest.approx(1800.0, rel=0.01)]
    assert p701 == [pytest.approx(60.0), pytest.approx(600.0, rel=0.01)]
    # the first busy reading starts the processes' energy: 10 one-second intervals follow
    assert p700[1] == pytest.approx(1800.0) and p701[1] == pytest.approx(600.0)
    device = [health(s)["energy_joules_total"] for s in r["snapshots"]]
    assert device[-1] - device[1] == pytest.approx(3000.0)


def test_energy_before_an_idle_reading_and_evenly_without_samples(tmp_path):
    busy = (Scenario().gpu(0, uuid=U0, power_mw=200000).proc(0, 1, GiB).proc(0, 2, GiB))  # no SM samples
    lower = (Scenario().gpu(0, uuid=U0, power_mw=150000).proc(0, 1, GiB).proc(0, 2, GiB))
    r = run_reads(tmp_path, [{"scenario": busy}, {"scenario": lower, "advance": 1.0},
                             {"scenario": busy, "advance": 1.0}])
    # never seen idle: the lowest power so far is the floor (200 W, then 150 W)
    assert [e["idle"][U0] for e in r["energy"]] == [[200.0, False], [150.0, False], [150.0, False]]
    assert r["energy"][2]["processes"][U0 + "/1"] == [25.0, 25.0]  # (200 - 150) / 2, for 1 s
    assert r["energy"][2]["processes"][U0 + "/2"] == [25.0, 25.0]


def test_energy_goes_to_mps_clients_not_the_server(tmp_path):
    s = (Scenario().gpu(0, uuid=U0, power_mw=100000).proc(0, 10, GiB).proc(0, 11, GiB, type="mps")
         .proc(0, 12, GiB, type="mps").sample(0, 11, sm=30).sample(0, 12, sm=10))
    idle = Scenario().gpu(0, uuid=U0, power_mw=20000)
    r = run_reads(tmp_path, [{"scenario": idle}, {"scenario": s, "advance": 1.0}])
    shares = r["energy"][1]["processes"]
    assert (shares[U0 + "/10"][0], shares[U0 + "/11"][0], shares[U0 + "/12"][0]) == (0.0, 60.0, 20.0)
