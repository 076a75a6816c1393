"""The GPU health rules (cgstat/events/gpu.py) on made-up GPU records, tick by tick:
each raised once per episode, ended once, and XIDs naming who was on the GPU."""

import time

from cgstat.events import EventDetector
from tests.helpers.contract import validate

U0, U1, M0 = "GPU-ev000000-0000-0000-0000-000000000000", "GPU-ev000000-0000-0000-0000-000000000001", "MIG-ev0"
T0 = 1_795_000_000.0


def ts(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % int(round((t % 1) * 1000))


def gpu_record(t, uuid=U0, index=0, processes=(), parent=None, **gpu):
    g = {"index": index, "uuid": uuid, "parent_uuid": parent, "clocks_event_reasons": [], "recent_xids": [],
         "ecc_errors_total": {"corrected": 0, "uncorrected": 0},
         "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": 0, "failure": 0},
         "sm_clock_mhz": 1400, "sm_clock_max_mhz": 1980, "temperature_celsius": 85, "power_watts": 300.0,
         "power_limit_watts": 700.0}
    g.update(gpu)
    return {"schema": 1, "type": "gpu", "ts": ts(t), "host": "h", "interval_s": 1.0, "gpu": g,
            "processes": list(processes), "errors": []}


def proc(pid, cgroup, name):
    return {"pid": pid, "name": "python", "type": "compute", "cgroup": cgroup,
            "container": {"id": name * 8, "name": name}}


def run(ticks, window_s=5.0):
    d = EventDetector(window_s=window_s)
    out = []
    for records in ticks:
        events = d.observe(records)
        for e in events:
            validate(e)
        out.append(events)
    return out


def kinds(events):
    return [(e["kind"], e.get("resolves")) for e in events]


def test_an_xid_names_who_is_on_that_gpu_counts_repeats_and_ends_after_the_window():
    on0 = [proc(10, "/docker/a", "a")]
    on1 = [proc(20, "/docker/b", "b")]
    ticks = []
    for i in range(10):
        xids = [79] if i in (1, 3) else []
        ticks.append([gpu_record(T0 + i, U0, 0, on0), gpu_record(T0 + i, U1, 1, on1, recent_xids=xids)])
    ticks[3][1]["gpu"]["recent_xids"] = [79, 79]  # two more in one reading: the same episode
    out = run(ticks, window_s=5.0)
    raised = [e for evs in out for e in evs if e["kind"] == "gpu_xid"]
    assert len(raised) == 1
    (ev,) = raised
    assert (ev["cgroup"], ev["container"]["name"], ev["evidence"]["pids"], ev["severity"]) == ("/docker/b", "b", [20],
                                                                                               "critical")
    assert "fallen off the bus" in ev["message"] and "/docker/a" not in ev["message"]
    ends = [(i, e) for i, evs in enumerate(out) for e in evs if e["kind"] == "resolved"]
    assert [(i, e["resolves"], e["evidence"]["count"]) for i, e in ends] == [(8, "gpu_xid", 3)]  # 5 s after the last


def test_an_xid_on_a_mig_gpu_names_the_processes_of_its_instances():
    ticks = [[gpu_record(T0, U0, 0, [], mig_mode=True, recent_xids=[43]),
              gpu_record(T0, M0, 0, [proc(30, "/docker/m", "m")], parent=U0)]]
    (events,) = run(ticks)
    (ev,) = events
    assert ev["kind"] == "gpu_xid" and ev["evidence"]["pids"] == [30] and ev["severity"] == "warning"
    assert ev["evidence"]["meaning"] == "GPU stopped processing"


def test_throttled_over_the_window_once_and_resolved():
    ticks = []
    for i in range(12):
        reasons = ["sw_power_cap", "hw_thermal_slowdown"] if i < 9 else ["sw_power_cap"]
        ticks.append([gpu_record(T0 + i, clocks_event_reasons=reasons), gpu_record(T0 + i, U1, 1,
                                                                                   clocks_event_reasons=["sw_power_cap"])])
    out = run(ticks, window_s=5.0)
    assert [(i, kinds(evs)) for i, evs in enumerate(out) if evs] == [
        (5, [("gpu_throttled", None)]), (9, [("resolved", "gpu_throttled")])]  # 0.9 x 5 s held; the power cap alone is not it
    assert out[5][0]["evidence"]["reasons"] == ["hw_thermal_slowdown"]


def test_ecc_and_row_remapping_while_above_zero():
    ticks = []
    for i, (unc, pending, failure) in enumerate([(0, 0, 0), (1, 1, 0), (2, 1, 1), (2, 0, 1), (0, 0, 0)]):
        ticks.append([gpu_record(T0 + i, ecc_errors_total={"corrected": 5, "uncorrected": unc},
                                 remapped_rows={"correctable": 0, "uncorrectable": 1, "pending": pending,
                                                "failure": failure})])
    out = run(ticks)
    assert [kinds(evs) for evs in out] == [
        [],
        [("gpu_ecc_uncorrected", None), ("gpu_row_remap_pending", None)],
        [("gpu_row_remap_failure", None)],
        [("resolved", "gpu_row_remap_pending")],
        [("resolved", "gpu_ecc_uncorrected"), ("resolved", "gpu_row_remap_failure")]]
    assert out[1][0]["severity"] == "critical" and out[1][1]["severity"] == "warning"
    assert out[4][0]["evidence"]["duration_s"] == 3.0


def test_an_xid_of_a_mig_instance_names_who_is_on_that_instance():
    """NVML's event names the GPU and compute instance (recent_xid_instances): the event
    names the processes of that instance's MIG device, not the whole board's."""
    m1, m2 = "MIG-ev1", "MIG-ev2"
    parent = gpu_record(T0, U0, 0, recent_xids=[94], recent_xid_instances=[
        {"xid": 94, "gpu_instance_id": 2, "compute_instance_id": 0}])
    on1 = gpu_record(T0, m1, 0, [proc(10, "/docker/a", "a")], parent=U0, gpu_instance_id=1)
    on2 = gpu_record(T0, m2, 0, [proc(20, "/docker/b", "b")], parent=U0, gpu_instance_id=2)
    ((ev,),) = [[e for e in evs if e["kind"] == "gpu_xid"] for evs in run([[parent, on1, on2]])]
    assert (ev["evidence"]["pids"], ev["evidence"]["gpu_instance_id"], ev["evidence"]["compute_instance_id"],
            ev["cgroup"]) == ([20], 2, 0, "/docker/b")
    assert "On GPU instance 2: container b" in ev["message"]
