"""Exit records (pipeline/exits.py) from records made by the field table: the totals of a
cgroup's last record, its peak, GPU seconds summed over its intervals, how it ended, one
for a cgroup known only from the kernel log; and the endpoint keeps them a while."""

from types import SimpleNamespace

from cgstat.outputs.prometheus import exposition as prometheus
from cgstat.outputs.prometheus.retention import ExitRetention
from cgstat.pipeline.exits import ExitLedger
from tests.helpers.contract import validate
from tests.helpers.fieldtable import record

TRAINER = {"id": "c" * 64, "short_id": "c" * 12, "name": "trainer", "runtime": "docker"}
PATH = "/system.slice/docker-%s.scope" % TRAINER["id"]


def _rec(ts, cpu, usage, peak=None, oom=0, sm=None, gmem=0, joules=0.0, interval=10.0):
    gpu = None if sm is None else {"memory_bytes": gmem, "sm_percent": sm, "energy_joules_total": joules,
                                   "devices": ["GPU-1"] if gmem else [], "processes": []}
    return record(cgroup=PATH, container=TRAINER, ts=ts, interval_s=interval,
                  cpu={"usage_seconds_total": cpu},
                  memory={"usage_bytes": usage, "peak_bytes": peak, "oom_kills_total": oom},
                  io={"read_bytes_total": 100, "write_bytes_total": 200},
                  network={"rx_bytes_total": 5, "tx_bytes_total": 6}, gpu=gpu)


def _kill(cgroup, exists=False, named_by="path", usage=None):
    report = SimpleNamespace(usage_bytes=usage, oom_memcg=cgroup, task_memcg=cgroup)
    return SimpleNamespace(cgroup=cgroup, exists=exists, named_by=named_by, report=report, container=None,
                           pod=None, unit=None)


TS = ["2026-11-29T20:10:%02d.000Z" % s for s in (0, 10, 20, 30)]


def test_totals_of_the_last_record_and_peaks_over_its_life():
    ledger = ExitLedger()
    for ts, cpu, usage, sm, gmem in zip(TS[:3], (1.0, 5.0, 9.5), (100, 300, 200), (50.0, 100.0, 0.0),
                                        (1 << 30, 3 << 30, 2 << 30)):
        ledger.see(_rec(ts, cpu, usage, sm=sm, gmem=gmem, joules=cpu * 10))
    assert ledger.end_tick({PATH: None}, [], TS[3]) == []  # still there
    (e,) = ledger.end_tick({}, [], TS[3])
    validate(e)
    assert (e["started"], e["last_seen"], e["ended"], e["ts"]) == (TS[0], TS[2], TS[3], TS[3])
    assert e["lifetime_seconds"] == 20.0 and e["samples"] == 3 and e["cpu_seconds_total"] == 9.5
    assert (e["memory_peak_bytes"], e["memory_peak_source"]) == (300, "highest_seen")
    assert e["gpu_seconds_total"] == 15.0  # 50 % and 100 % of 10 s intervals
    assert e["gpu_memory_peak_bytes"] == 3 << 30 and e["gpu_energy_joules_total"] == 95.0
    assert (e["io_read_bytes_total"], e["io_write_bytes_total"]) == (100, 200)
    assert (e["network_rx_bytes_total"], e["network_tx_bytes_total"]) == (5, 6)
    assert e["ended_by"] == "exit" and e["container"]["name"] == "trainer"
    assert ledger.end_tick({}, [], TS[3]) == []  # said once


def test_a_kill_it_lived_on_after_is_not_how_it_ended():
    ledger = ExitLedger()
    ledger.see(_rec(TS[0], 1.0, 100, oom=0))
    assert ledger.end_tick({PATH: None}, [_kill(PATH, exists=True, named_by="live")], TS[0]) == []
    ledger.see(_rec(TS[1], 2.0, 100, oom=1))  # the counter rose then: killed in that interval...
    ledger.see(_rec(TS[2], 3.0, 100, oom=1))  # ...and it lived on
    (e,) = ledger.end_tick(set(), [], TS[3])
    assert e["ended_by"] == "exit" and e["oom_kills_total"] == 1
    ledger.see(_rec(TS[0], 1.0, 100, oom=0))
    ledger.see(_rec(TS[1], 2.0, 100, oom=1))  # killed in its last interval, the log unreadable
    (e,) = ledger.end_tick(set(), [], TS[2])
    assert e["ended_by"] == "oom_kill"


def test_memory_peak_of_the_kernel_and_an_oom_kill_ending():
    ledger = ExitLedger()
    ledger.see(_rec(TS[0], 1.0, 100, peak=4096))
    ledger.see(_rec(TS[1], 2.0, 50, peak=8192, oom=1))
    (e,) = ledger.end_tick(set(), [_kill(PATH, exists=False, named_by="seen")], TS[2])
    validate(e)
    assert (e["memory_peak_bytes"], e["memory_peak_source"]) == (8192, "memory.peak")
    assert e["ended_by"] == "oom_kill" and e["oom_kills_total"] == 1 and e["gpu_seconds_total"] is None


def test_a_cgroup_killed_before_any_record_gets_one_from_the_kernel_log():
    ledger = ExitLedger()
    ledger.see(_rec(TS[0], 1.0, 100))  # another cgroup, alive
    short = "/system.slice/docker-%s.scope" % ("d" * 64)
    kills = [_kill(short, usage=64 << 20), _kill(short, usage=60 << 20), _kill(PATH, exists=True, named_by="live")]
    (e,) = ledger.end_tick({PATH: None}, kills, TS[1])
    validate(e)
    assert e["cgroup"] == short and e["samples"] == 0 and e["started"] is None
    assert e["oom_kills_total"] == 2 and e["ended_by"] == "oom_kill"
    assert (e["memory_peak_bytes"], e["memory_peak_source"]) == (64 << 20, "kernel_log")
    assert e["cpu_seconds_total"] is None and e["host"] == "h"


def test_the_endpoint_keeps_exit_records_a_while():
    ledger = ExitLedger()
    ledger.see(_rec(TS[0], 1.0, 100))
    ledger.see(_rec(TS[1], 7.25, 100, oom=1))
    (e,) = ledger.end_tick(set(), [], TS[2])
    kept = ExitRetention(keep_s=900)
    exited = kept.update([e], 1000.0)
    text = prometheus.render([], exited=exited).decode()
    line = [x for x in text.splitlines() if x.startswith("cgstat_exited_cpu_seconds{")]
    assert len(line) == 1 and 'name="trainer"' in line[0] and 'ended_by="oom_kill"' in line[0]
    assert line[0].endswith(" 7.25")
    assert "cgstat_exited_lifetime_seconds{" in text and "cgstat_exited_oom_kills{" in text
    assert "cgstat_exited_gpu_seconds{" not in text  # null: no sample, never a fake 0
    assert kept.update([], 1899.0) and not kept.update([], 1900.0)  # 15 min, then gone
    kept.update([e], 2000.0)
    assert kept.update([_rec(TS[3], 0.1, 10)], 2001.0) == []  # the path lives again: its old exit goes


def test_a_cgroup_left_out_of_the_list_whose_folder_is_there_has_not_ended():
    """A v1 cgroup of another hierarchy is joined to its CPU cgroup one tick and listed on
    its own the next: while its folder exists it has not ended."""
    ledger = ExitLedger()
    ledger.see(_rec(TS[0], 1.0, 100))
    asked = []
    assert ledger.end_tick(set(), [], TS[1], lambda paths: asked.append(paths) or True) == []
    assert asked == [{"unified": "/x"}]  # the record's paths are what is checked
    (e,) = ledger.end_tick(set(), [], TS[2], lambda paths: False)
    assert e["cgroup"] == PATH


def test_a_kill_then_figures_gone_before_the_cgroup_still_ended_by_the_kill():
    """A v1 host: the memory cgroup, nested apart from the CPU one, is joined to the record
    through its members; once the only one is killed the records lack memory figures until
    the empty cgroup is removed. The kill (from the log) is how it ended, and the totals are
    the last ones read."""
    ledger = ExitLedger()
    ledger.see(_rec(TS[0], 1.0, 100 << 20, oom=0))
    assert ledger.end_tick({PATH: None}, [_kill(PATH, exists=True, named_by="live")], TS[1]) == []
    after = record(cgroup=PATH, container=TRAINER, ts=TS[2], interval_s=10.0,
                   cpu={"usage_seconds_total": 1.0}, memory={"usage_bytes": None, "oom_kills_total": None},
                   pids={"current": 0})
    ledger.see(after)
    (e,) = ledger.end_tick(set(), [], TS[3])
    assert e["ended_by"] == "oom_kill"
    assert e["oom_kills_total"] == 0 and e["memory_peak_bytes"] == 100 << 20 and e["cpu_seconds_total"] == 1.0
    # one that lived on, its processes still there after the kill
    ledger.see(_rec(TS[0], 1.0, 100, oom=0))
    ledger.end_tick({PATH: None}, [_kill(PATH, exists=True, named_by="live")], TS[1])
    ledger.see(record(cgroup=PATH, container=TRAINER, ts=TS[2], interval_s=10.0,
                      cpu={"usage_seconds_total": 1.0}, memory={"usage_bytes": None, "oom_kills_total": None},
                      pids={"current": 3}))
    (e,) = ledger.end_tick(set(), [], TS[3])
    assert e["ended_by"] == "exit"


def test_the_exit_record_has_the_throttling_of_its_last_record():
    ledger = ExitLedger()
    for ts, n in zip(TS[:2], (1, 2)):
        rec = _rec(ts, float(n), 100)
        rec["cpu"].update(periods_total=100 * n, throttled_periods_total=80 * n, throttled_seconds_total=4.0 * n)
        ledger.see(rec)
    rec = _rec(TS[2], 3.0, 100)
    rec["cpu"].update(periods_total=None, throttled_periods_total=None, throttled_seconds_total=None)
    ledger.see(rec)  # a record without them keeps the last reading
    (e,) = ledger.end_tick(set(), [], TS[3])
    validate(e)
    assert (e["cpu_throttled_seconds_total"], e["cpu_throttled_periods_total"], e["cpu_periods_total"]) == \
        (8.0, 160, 200)
