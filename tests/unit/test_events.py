"""Diagnostics events (cgstat/events/): synthetic sequences for every kind, exact
episodes (raised once, resolved once, calm -> nothing), and the detector over real Sampler
ticks of real cgroups (OOM kill, 0.5-core burner, growth, near limit, calm)."""

import json
import os
import time

import pytest

from cgstat.events import KINDS, EventDetector, Thresholds, fit_line, judge_runs, state_extras
from cgstat.timestamps import parse_ts
from tests.helpers.fieldtable import record

MiB = 1024 * 1024
SCHEMA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "cgstat", "contract", "event.schema.json")


def validate(events):
    jsonschema = pytest.importorskip("jsonschema")
    with open(SCHEMA) as f:
        schema = json.load(f)
    for e in events:
        jsonschema.validate(e, schema)
        json.dumps(e)


def rec(path="/docker/abc", t=0.0, interval=0.5, ws=100 * MiB, limit=1024 * MiB, oom=0, cpu_s=0.0,
        periods=0, throttled=0, cores=None, gpu=None, name="trainer", typ="cgroup"):
    whole = 1795000000 + int(t)
    ms = int(round((t - int(t)) * 1000))
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + ".%03dZ" % ms
    return record(typ, ts=ts, cgroup=path, interval_s=interval,
                  container={"runtime": "docker", "id": "a" * 64, "short_id": "a" * 12, "name": name} if name else None,
                  cpu={"usage_seconds_total": cpu_s, "percent": None, "limit_cores": cores, "periods_total": periods,
                       "throttled_periods_total": throttled},
                  memory={"working_set_bytes": ws, "limit_bytes": limit, "oom_kills_total": oom}, gpu=gpu)


def run(detector, seq):
    """seq: list of lists of records (one per tick); returns all events."""
    out = []
    for tick in seq:
        out.extend(detector.observe(tick))
    validate(out)
    return out


def kinds(events):
    return [(e["kind"], e["resolves"]) for e in events]


def test_calm_cgroup_raises_nothing():
    d = EventDetector(window_s=4)
    seq = [[rec(t=i * 0.5, ws=100 * MiB + (i % 3) * 4096, cpu_s=i * 0.01, periods=i * 5, throttled=0, cores=2.0)]
           for i in range(200)]
    assert run(d, seq) == []


def test_oom_kill_once_per_episode():
    d = EventDetector(window_s=4)
    seq = []
    oom = 0
    for i in range(40):
        if i == 10:
            oom = 1
        seq.append([rec(t=i * 0.5, ws=(900 if i < 10 else 10) * MiB, oom=oom)])
    ev = run(d, seq)
    assert kinds(ev) == [("oom_kill", None)]
    e = ev[0]
    assert e["severity"] == "critical"
    assert e["evidence"]["kills"] == 1
    assert e["evidence"]["working_set_bytes_before"] == 900 * MiB
    assert e["evidence"]["limit_bytes"] == 1024 * MiB
    assert "Killed" in e["message"] and "trainer" in e["message"]


def test_oom_burst_every_rise_is_an_event():
    # without the kernel log, each tick's rise is one event with its count: no kill folded
    # into another (the log, when readable, makes it one event per process)
    d = EventDetector(window_s=2)
    seq = [[rec(t=i * 0.5, oom=[0, 0, 1, 2, 2, 5, 5, 5][min(i, 7)])] for i in range(30)]
    ev = run(d, seq)
    assert kinds(ev) == [("oom_kill", None)] * 3
    assert [e["evidence"]["kills"] for e in ev] == [1, 1, 3]
    assert [e["evidence"]["source"] for e in ev] == ["counter"] * 3


def test_oom_first_sight_and_new_life_are_not_kills():
    d = EventDetector(window_s=4)
    seq = [[rec(t=0, interval=None, oom=5)], [rec(t=0.5, oom=5)],
           [rec(t=1.0, interval=None, oom=7)],  # recreated: counters of another life
           [rec(t=1.5, oom=7)]]
    assert run(d, seq) == []


def test_oom_deepest_cgroup_only():
    d = EventDetector(window_s=4)
    seq = [[rec("/kubepods/pod1", oom=0, name=None), rec("/kubepods/pod1/c1", oom=0)],
           [rec("/kubepods/pod1", t=0.5, oom=1, name=None), rec("/kubepods/pod1/c1", t=0.5, oom=1)]]
    ev = run(d, seq)
    assert [(e["kind"], e["cgroup"]) for e in ev] == [("oom_kill", "/kubepods/pod1/c1")]


def test_memory_near_limit_hysteresis():
    d = EventDetector(window_s=4)
    values = [50, 80, 91, 95, 89, 92, 88, 91, 60, 60, 93]  # % of the limit
    seq = [[rec(t=i * 0.5, ws=v * 10 * MiB, limit=1000 * MiB)] for i, v in enumerate(values)]
    ev = run(d, seq)
    assert kinds(ev) == [("memory_near_limit", None), ("resolved", "memory_near_limit"), ("memory_near_limit", None)]
    assert ev[0]["evidence"]["percent"] == pytest.approx(91.0)
    assert ev[1]["since"] == ev[0]["ts"]


def test_no_limit_never_near():
    d = EventDetector(window_s=4)
    assert run(d, [[rec(t=i * 0.5, ws=10 ** 12, limit=None)] for i in range(20)]) == []


def test_memory_growth_slope_and_projection():
    d = EventDetector(window_s=4)
    seq = []
    for i in range(60):
        grow = 16 * MiB * 0.5 * min(i, 30)  # +16 MiB/s for 15 s, then flat
        jitter = ((i * 7919) % 5 - 2) * 256 * 1024
        seq.append([rec(t=i * 0.5, ws=100 * MiB + grow + jitter, limit=2048 * MiB)])
    ev = run(d, seq)
    assert kinds(ev) == [("memory_growth", None), ("resolved", "memory_growth")]
    g = ev[0]["evidence"]
    assert g["bytes_per_second"] == pytest.approx(16 * MiB, rel=0.1)
    assert g["r2"] >= 0.8
    assert g["seconds_to_limit"] == pytest.approx((2048 * MiB - g["working_set_bytes"]) / g["bytes_per_second"], rel=1e-3)
    assert g["window_s"] >= 0.9 * 4
    # raised only once the window is covered
    assert parse_ts(ev[0]["ts"]) - parse_ts(seq[0][0]["ts"]) >= 3.5


def test_memory_sawtooth_is_not_growth():
    d = EventDetector(window_s=4)
    seq = [[rec(t=i * 0.5, ws=100 * MiB + (i % 4) * 40 * MiB)] for i in range(80)]
    assert run(d, seq) == []


def test_slow_growth_under_minimum_is_quiet_and_threshold_changeable():
    seq = [[rec(t=i * 0.5, ws=100 * MiB + i * 0.5 * 64 * 1024)] for i in range(40)]  # 64 KiB/s
    assert run(EventDetector(window_s=4), seq) == []
    ev = run(EventDetector(window_s=4, growth_min_bytes_per_second=32 * 1024), seq)
    assert kinds(ev) == [("memory_growth", None)]


def test_cpu_throttled_once_then_resolved():
    d = EventDetector(window_s=4)
    seq, cpu, periods, thr = [], 0.0, 0, 0
    for i in range(60):
        busy = 10 <= i < 40
        cpu += 0.25 if busy else 0.001
        periods += 5 if busy else 1
        thr += 5 if busy else 0
        seq.append([rec(t=i * 0.5, cpu_s=cpu, periods=periods, throttled=thr, cores=0.5)])
    ev = run(d, seq)
    assert kinds(ev) == [("cpu_throttled", None), ("resolved", "cpu_throttled")]
    e = ev[0]["evidence"]
    assert e["throttled_fraction"] > 0.5 and e["limit_cores"] == 0.5
    assert 35 <= e["cpu_percent"] <= 55
    # sustained: not before most of the window saw the throttling (busy from t=5 s)
    assert parse_ts(ev[0]["ts"]) - parse_ts(seq[10][0]["ts"]) >= 0.75 * 4 - 0.5


def gpu(sm, n=1):
    return {"memory_bytes": 2 * 1024 * MiB, "sm_percent": sm, "devices": ["GPU-1"],
            "processes": [{"pid": 100 + k, "name": "python", "gpu_index": 0, "gpu_uuid": "GPU-1",
                           "type": "compute", "memory_bytes": 1024 * MiB, "sm_percent": sm / n}
                          for k in range(n)]}


def burner_seq(sm_at, n=60, cores=0.5):
    seq, cpu, periods = [], 0.0, 0
    for i in range(n):
        cpu += 0.25
        periods += 5
        seq.append([rec(t=i * 0.5, cpu_s=cpu, periods=periods, throttled=periods, cores=cores, gpu=sm_at(i))])
    return seq


def test_gpu_idle_cpu_bound_and_input_pipeline_message():
    d = EventDetector(window_s=4)
    ev = run(d, burner_seq(lambda i: gpu(0.0 if i < 30 else 80.0)))
    got = [k for k in kinds(ev) if k[0] == "gpu_idle_cpu_bound" or k[1] == "gpu_idle_cpu_bound"]
    assert got == [("gpu_idle_cpu_bound", None), ("resolved", "gpu_idle_cpu_bound")]
    e = [x for x in ev if x["kind"] == "gpu_idle_cpu_bound"][0]
    assert "input pipeline" in e["message"] and "DataLoader" in e["message"] and "prefetch" in e["message"]
    assert e["evidence"]["sm_percent"] == 0.0


def test_gpu_busy_or_absent_is_not_input_bound():
    for g in (lambda i: gpu(70.0), lambda i: None,
              lambda i: {"memory_bytes": 0, "sm_percent": 0.0, "devices": [], "processes": []}):
        ev = run(EventDetector(window_s=4), burner_seq(g))
        assert "gpu_idle_cpu_bound" not in [e["kind"] for e in ev]


def gpu_record(t, procs):
    r = rec(t=t)
    return {"schema": 1, "type": "gpu", "ts": r["ts"], "host": "h", "interval_s": 0.5,
            "gpu": {"index": 0, "uuid": "GPU-1", "name": "H200"},
            "processes": procs, "errors": []}


def test_gpu_process_outside_container():
    d = EventDetector(window_s=4)
    inside = {"pid": 10, "name": "python", "memory_bytes": MiB, "cgroup": "/docker/abc",
              "container": {"name": "trainer"}}
    host = {"pid": 77, "name": "python3", "memory_bytes": 512 * MiB, "cgroup": "/user.slice", "container": None}
    seq = []
    for i in range(20):
        procs = [inside] + ([host] if 4 <= i < 12 else [])
        seq.append([rec(t=i * 0.5), gpu_record(i * 0.5, procs)])
    ev = run(d, seq)
    assert kinds(ev) == [("gpu_process_outside_container", None), ("resolved", "gpu_process_outside_container")]
    assert ev[0]["evidence"]["pid"] == 77 and ev[0]["cgroup"] == "/user.slice" and ev[0]["container"] is None


def test_vanished_cgroups_are_forgotten_and_memory_bounded():
    d = EventDetector(window_s=4, max_samples=32)
    for i in range(100):
        d.observe([rec("/docker/c%d" % (i % 50 + (50 if i >= 50 else 0)), t=i * 0.5)])
    assert len(d._cgroups) == 1
    d2 = EventDetector(window_s=3600, max_samples=32)
    for i in range(500):
        d2.observe([rec(t=i * 0.1, interval=0.1)])
    assert len(d2._cgroups["/docker/abc"].samples) <= 33


def test_messages_name_a_workload_as_every_view_does():
    from cgstat.contract.display import display_name

    d = EventDetector(window_s=4)
    pod = rec(path="/kubepods/burstable/pod1234", ws=950 * MiB, limit=1000 * MiB, name=None, typ="pod")
    pod["pod"] = {"namespace": "ml", "name": "trainer-0", "uid": "1234"}
    unit = rec(path="/system.slice/x.service", ws=950 * MiB, limit=1000 * MiB, name=None)
    unit["unit"] = "x.service"
    ev = run(d, [[pod, unit, rec(ws=950 * MiB, limit=1000 * MiB)]])
    assert [e["message"].split(" uses ")[0] for e in ev] == ["pod ml/trainer-0", "unit x.service", "container trainer"]
    assert [display_name(r) for r in (pod, unit)] == ["ml/trainer-0", "x.service"]


def test_hostile_names_stay_data():
    d = EventDetector(window_s=4)
    name = "=cmd|' /C calc'!A0\x1b[2J\n<script>"
    ev = run(d, [[rec(t=0, ws=950 * MiB, limit=1000 * MiB, name=name)]])
    assert ev[0]["container"]["name"] == name


def test_judge_runs_across_two_runs():
    prev = state_extras([rec("/docker/a", oom=1, ws=500 * MiB), rec("/docker/b", oom=0, ws=950 * MiB, limit=1000 * MiB)])
    prev = json.loads(json.dumps(prev))  # what a state file gives back
    now = [rec("/docker/a", oom=3, ws=10 * MiB, interval=300.0),
           rec("/docker/b", oom=0, ws=960 * MiB, limit=1000 * MiB, interval=300.0),
           rec("/docker/c", oom=9, interval=None),  # new: nothing to compare
           rec("/docker/d", ws=950 * MiB, limit=1000 * MiB, interval=None)]
    ev = judge_runs(prev, now)
    validate(ev)
    got = sorted((e["kind"], e["cgroup"]) for e in ev)
    assert got == [("memory_near_limit", "/docker/d"), ("oom_kill", "/docker/a")]
    oom = [e for e in ev if e["kind"] == "oom_kill"][0]
    assert oom["evidence"]["kills"] == 2 and oom["evidence"]["working_set_bytes_before"] == 500 * MiB
    # full previous records work too
    assert [e["kind"] for e in judge_runs({"/docker/a": rec("/docker/a", oom=1)}, now[:1])] == ["oom_kill"]


def test_fit_line_and_thresholds():
    slope, r2 = fit_line([(0, 0), (1, 2), (2, 4)])
    assert slope == pytest.approx(2) and r2 == pytest.approx(1)
    assert parse_ts("2026-11-29T20:10:12.807Z") == pytest.approx(1795983012.807)
    with pytest.raises(ValueError):
        Thresholds(window_s=0)
    assert EventDetector(Thresholds(window_s=10), near_limit_percent=80).th.near_limit_percent == 80


# -- real cgroups: the detector over real Sampler ticks ------------------------------------------


def test_watch_passes_each_record_and_then_the_events_as_observe_would():
    """stream feeds the detector one record at a time (EventDetector.watch): the same
    events as observe() over the list, after the tick's records, in the same order."""
    seq = []
    for i in range(40):
        grow = 16 * MiB * 0.5 * min(i, 20)
        seq.append([rec(t=i * 0.5, ws=100 * MiB + grow, limit=2048 * MiB),
                    rec(path="/docker/near", t=i * 0.5, ws=(950 if 10 <= i < 30 else 100) * MiB),
                    rec(path="/docker/calm", t=i * 0.5, ws=5 * MiB, limit=None)])
    listed, watched = EventDetector(window_s=4), EventDetector(window_s=4)
    expected, got = [], []
    for tick in seq:
        events = listed.observe(tick)
        passed = list(watched.watch(iter(tick)))
        assert passed[:len(tick)] == tick  # the records first, unchanged, in order
        expected.extend(events)
        got.extend(passed[len(tick):])
    assert got == expected
    assert sorted(kinds(got), key=str) == sorted([("memory_near_limit", None), ("memory_growth", None),
                                                  ("resolved", "memory_growth"), ("resolved", "memory_near_limit")],
                                                 key=str)


def test_a_flat_window_is_not_fitted_but_still_resolves_an_open_growth():
    """An idle cgroup's window is not fitted every tick (no climb is possible), while an
    open growth episode still ends when the working set stops moving."""
    d = EventDetector(window_s=4)
    fits = []
    import cgstat.events.rules as events_mod

    real = events_mod.fit_line
    events_mod.fit_line = lambda points: fits.append(len(points)) or real(points)
    try:
        flat = run(d, [[rec(path="/docker/idle", t=i * 0.5, ws=100 * MiB)] for i in range(40)])
        assert flat == [] and fits == []
        seq = [[rec(t=i * 0.5, ws=100 * MiB + 16 * MiB * 0.5 * min(i, 20))] for i in range(60)]
        assert kinds(run(d, seq)) == [("memory_growth", None), ("resolved", "memory_growth")]
        assert fits  # a changing window is fitted
    finally:
        events_mod.fit_line = real


def test_the_window_holds_unchanged_values_once_and_gives_back_each_sample_as_it_was():
    from cgstat.events.window import WindowSample, Window

    def sample(ws, limit, kills, usage):
        return WindowSample(ws, limit, kills, usage, None, None, None, None, None)

    window = Window()
    samples = [(0.0, sample(5, None, 0, 0.0)), (1.0, sample(5, None, 0, 0.0)), (2.0, sample(5.0, None, 0, 0.0)),
               (3.0, sample(5.0, None, 0, -0.0)), (4.0, sample(5.0, None, 0, -0.0)), (5.0, sample(6, 7, 8, 9.5))]
    for t, s in samples:
        window.append(t, s)
    assert list(window) == samples and len(window) == 6
    assert [tuple(map(type, s)) for _, s in window] == [tuple(map(type, s)) for _, s in samples]  # 5 stays 5
    got = [s for _, s in window]
    assert str(got[3].cpu_usage_seconds_total) == "-0.0" and str(got[1].cpu_usage_seconds_total) == "0.0"
    assert window.vs[0] is window.vs[1] and window.vs[3] is window.vs[4] and window.vs[1] is not window.vs[2]
    assert window.points("working_set_bytes") == [(t, s.working_set_bytes) for t, s in samples]
    assert window.points("limit_bytes") == [(5.0, 7)]
    assert window.span_s() == 5.0
    window.popleft()
    assert list(window)[0] == samples[1] and list(window)[-1] == samples[-1]
    window.thin()  # five samples: the 1st, 3rd and 5th (the newest) stay
    assert list(window) == [samples[1], samples[3], samples[5]]
    window.popleft()
    window.thin()  # two: the first and the newest
    assert list(window) == [samples[3], samples[5]]


def test_every_kind_a_rule_raises_is_in_the_event_schema():
    with open(SCHEMA) as f:
        schema = json.load(f)
    assert list(KINDS) == schema["properties"]["kind"]["enum"]
    assert [None] + list(KINDS[:-1]) == schema["properties"]["resolves"]["enum"]
    # every rule's kind is listed (cgstat/contract/event_kinds.py), each once, in the rules' order
    from cgstat.events.rules import CGROUP_RULES, GPU_RULES

    assert [r.kind for r in CGROUP_RULES + GPU_RULES] + ["resolved"] == list(KINDS)


def _throttled_life(start, ticks):
    """A job at its 0.5-core quota, throttled in every period, from tick `start` for `ticks`."""
    out, cpu, periods = {}, 0.0, 0
    for i in range(start, start + ticks):
        cpu += 0.25
        periods += 5
        out[i] = rec(path="/docker/job", t=i * 0.5, cpu_s=cpu, periods=periods, throttled=periods, cores=0.5,
                     name="job")
    return out


@pytest.mark.parametrize("born_at", [0, 4])
def test_a_job_throttled_for_its_whole_short_life_is_said_once_it_is_young_min_s_old(born_at):
    job = _throttled_life(born_at, 60)  # 30 s of life, half the 60 s window
    seq = [[rec(path="/docker/clock", t=i * 0.5, name="clock")] + ([job[i]] if i in job else [])
           for i in range(born_at + 60)]
    ev = run(EventDetector(window_s=60), seq)
    if born_at == 0:  # there at the first tick: its age is unknown, the full window is needed
        assert ev == []
        return
    (e,) = ev  # born while watched: its whole life is the window, from 10 s of age
    assert e["kind"] == "cpu_throttled" and "its whole life so far" in e["message"]
    age = parse_ts(e["ts"]) - parse_ts(job[born_at]["ts"])
    assert 10.0 <= age <= 10.5 and e["evidence"]["throttled_fraction"] == 1.0
    assert e["evidence"]["window_s"] == pytest.approx(age)


def test_a_record_said_to_be_the_last_one_again_judges_the_same():
    """Sampler.same_record: the detector takes the last window sample again for a record
    equal to its last but for ts and interval_s; the events and windows are what judging
    each record afresh gives."""
    values = [50, 95, 95, 95, 95, 60, 60, 60, 93, 93, 93, 93, 93, 40]  # % of the limit: idle stretches
    seq = [[rec(t=i * 0.5, ws=v * 10 * MiB, limit=1000 * MiB, cpu_s=1.0 + (i >= 8), oom=int(i >= 11))]
           for i, v in enumerate(values)]

    def rest(r):
        return {k: v for k, v in r.items() if k not in ("ts", "interval_s")}

    hinted, plain = EventDetector(window_s=2), EventDetector(window_s=2)
    got, want, said = [], [], 0
    for i, tick in enumerate(seq):
        same = {r["cgroup"] for r in tick if i and rest(r) == rest(seq[i - 1][0])}
        said += len(same)
        got.extend(e for e in hinted.watch(tick, same=same.__contains__) if e.get("type") == "event")
        want.extend(plain.observe(tick))
    assert said == 8 and got == want and kinds(got)[:2] == [("memory_near_limit", None), ("resolved", "memory_near_limit")]
    (h1,), (h2,) = hinted._cgroups.values(), plain._cgroups.values()
    assert list(h1.samples.ts) == list(h2.samples.ts) and h1.samples.vs == h2.samples.vs and h1.last == h2.last
    # a detector told wrongly would differ: the hint is what the window keeps
    wrong = EventDetector(window_s=2)
    for tick in seq:
        list(wrong.watch(tick, same=lambda path: True))
    (h3,) = wrong._cgroups.values()
    assert h3.samples.vs != h2.samples.vs
