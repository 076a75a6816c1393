"""Per-process GPU use averaged over the whole interval between readings, from NVML's
sample buffer (the double's `ts=periodic` samples): a stream at --interval 30 and a cron run
every minute read a GPU busy 30 % of the time as 30 %, not as whatever the last sample said."""

import json
import os
import subprocess
import sys

from cgstat.gpu.utilization import UtilizationMark, average
from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT

GPU0 = "GPU-00000000-aaaa-0000-0000-000000000000"
T0 = 1_700_000_000_000_000  # µs of the Unix epoch: where the fake clocks start
MINUTE = 60_000_000


def _bursts(start: int, end: int, period: int, cycle: int, busy: int, sm: int = 100):
    """The samples a driver holds for a process busy `busy` µs of every `cycle`."""
    return [(7, t, sm, 10, 0, 0) for t in range(start - start % period + period, end + 1, period)
            if t % cycle < busy]


def test_bursts_average_over_the_interval():
    mark = UtilizationMark(T0, T0, None)
    samples = _bursts(T0, T0 + MINUTE, 166_667, 10_000_000, 3_000_000)
    usage, after = average(samples, mark, T0 + MINUTE, {7})
    sm, mem, enc, dec = usage[7]
    assert abs(sm - 30) <= 1 and abs(mem - 3) <= 0.5 and (enc, dec) == (0, 0)
    assert after.called_us == T0 + MINUTE and after.last_seen_us == max(s[1] for s in samples)
    assert abs(after.period_us - 166_667) <= 1


def test_a_burst_after_an_idle_stretch_counts_only_its_own_periods():
    """The first sample after 50 s of nothing stands for one sampling period, not 50 s."""
    mark = UtilizationMark(T0, T0, 166_667)
    samples = [(7, T0 + 50_000_000 + k * 166_667, 100, 0, 0, 0) for k in range(6)]  # 1 s busy
    usage, _ = average(samples, mark, T0 + MINUTE, {7})
    assert abs(usage[7][0] - 100 / 60) < 0.2


def test_one_sample_per_process_and_no_period_is_the_drivers_figure():
    """A driver that answers one sample per process (NVML's reference describes that) gives
    its own figure for the interval: taken as it is."""
    usage, after = average([(7, T0 + 500, 42, 5, 1, 2)], UtilizationMark(T0, T0, None), T0 + 1_000_000, {7})
    assert usage == {7: (42, 5, 1, 2)} and after.period_us is None


def test_marks_survive_json_and_refuse_garbage():
    m = UtilizationMark(T0, T0 + 1, 166_667)
    assert UtilizationMark.from_json(json.loads(json.dumps(list(m)))) == m
    for bad in (None, [1, 2], ["a", 1, None], [1, -2, None], [1, 2, 0], [True, 2, None], {"a": 1}):
        assert UtilizationMark.from_json(bad) is None


# A cron run every minute, each a fresh process with its own Gateway: the marks go from one
# run to the next through JSON as --state keeps them; the double's clock and the gateway's
# wall clock are the same fake minute.
_CRON = r"""
import json, sys
from cgstat.gpu.nvml import Gateway
from cgstat.gpu.reading import GpuReader
from tests.helpers import nvmldouble as D
scenario_path, marks_path, now_us, text = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
D.write_scenario(scenario_path, text)
gw = Gateway(wallclock=lambda: now_us / 1e6)
try:
    with open(marks_path) as f:
        marks = json.load(f)
except FileNotFoundError:
    marks = None
gw.restore_utilization_marks(marks)
snap = GpuReader(gw).read()
with open(marks_path, "w") as f:
    json.dump(gw.utilization_marks(), f)
print(json.dumps([[p.pid, p.sm_percent] for p in snap.processes]))
"""


def _cron_runs(tmp_path, runs, **pattern):
    scenario_path = str(tmp_path / "s.txt")
    marks_path = str(tmp_path / "marks.json")
    out = []
    for i in range(runs):
        now = T0 + 7_000_000 + i * MINUTE  # not on a cycle boundary
        text = (D.Scenario().clock(now).gpu(0, uuid=GPU0).proc(0, 4242, 20 << 30)
                .periodic(0, 4242, **pattern).text())
        proc = D.run_python(_CRON, scenario_path, args=[scenario_path, marks_path, str(now), text])
        assert proc.returncode == 0, proc.stderr
        ((pid, sm),) = json.loads(proc.stdout)
        assert pid == 4242
        out.append(sm)
    return out


def test_cron_every_minute_over_a_gpu_busy_30_percent_reads_30(tmp_path):
    """Busy 3 s of every 10 s, sampled every 1/6 s (nvidia-smi's shortest period): every
    run after the first reads 30 ± 5 % (the first, with no mark, averages its last second)."""
    readings = _cron_runs(tmp_path, 4, cycle=10_000_000, busy=3_000_000)
    assert all(abs(sm - 30) <= 5 for sm in readings[1:]), readings


def test_past_the_buffer_the_oldest_part_reads_idle(tmp_path):
    """A buffer of 100 periods (~17 s at 1/6 s) read a minute apart: what it lost counts
    as idle, as docs/gpu.md says (17 s of the 60 s held: 30 % of them busy)."""
    readings = _cron_runs(tmp_path, 3, cycle=10_000_000, busy=3_000_000, depth=100)
    assert all(5 <= sm <= 12 for sm in readings[1:]), readings


def test_cgstat_once_state_keeps_the_marks(tmp_path):
    """Two real `cgstat once --state` runs: the state holds each GPU's mark, and the second
    run's figure is the average since the first (busy 6 ms of every 20 ms, a sample a ms;
    the runs are at least a few hundred ms apart, many cycles). No cgroup is shown: the GPU
    records list every process anyway, and a host's thousands of cgroups cost seconds."""
    scenario = D.write_scenario(tmp_path / "s.txt", D.Scenario().gpu(0, uuid=GPU0).proc(0, os.getpid(), 1 << 30)
                                .periodic(0, os.getpid(), period=1000, cycle=20_000, busy=6000, depth=1_000_000))
    state = str(tmp_path / "state.json")
    figures = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "cgstat", "once", "--state", state, "--match", "^/no-such-cgroup$"],
                              env=D.env(scenario), cwd=ROOT, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        gpus = [json.loads(line) for line in proc.stdout.splitlines() if b'"type":"gpu"' in line]
        (p,) = [p for g in gpus for p in g["processes"] if p["pid"] == os.getpid()]
        figures.append(p["sm_percent"])
    saved = json.load(open(state))["gpu_utilization"]
    last_seen, called, period = saved[GPU0]
    assert period == 1000 and last_seen <= called
    assert abs(figures[1] - 30) <= 5, figures
