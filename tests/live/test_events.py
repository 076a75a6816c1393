"""Event rules on real cgroups: an OOM kill, a burner at its quota, steady growth, near the limit."""

import sys
import time

import pytest

from cgstat.events import EventDetector
from tests.unit.test_events import MiB, gpu, validate


def drive(group, seconds, interval=0.25, window=2.0, until=None, **kw):
    """Sample the group every `interval` (pacing only) and feed the detector; all events."""
    from cgstat.pipeline.sampler import Sampler

    sampler = Sampler(match="^" + group.cgroup.replace("/", "\\/") + "$")
    d = EventDetector(window_s=window, **kw)
    events, records = [], []
    sampler.warm_up()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(interval)
        tick = sampler.tick()
        records.extend(tick)
        events.extend(d.observe(tick))
        if until is not None and until(events):
            break
    sampler.close()
    validate(events)
    return events, records


GROW = ("import sys, time\n"
        "step = 1 << 20; rate = float(sys.argv[1]); held = []\n"
        "print('ready', flush=True); t0 = time.monotonic()\n"
        "while True:\n"
        "    want = int((time.monotonic() - t0) * rate)\n"
        "    while len(held) < want: held.append(b'\\x01' * step)\n"
        "    time.sleep(0.01)\n")


@pytest.mark.realcg
def test_real_oom_kill_raises_exactly_one(make_group, workload_bin):
    g = make_group()
    g.set_memory_limit(64 * MiB)
    # a member process: on hybrid hosts the sampler finds the memory cgroup through it
    keeper = g.start([workload_bin, "sleep"])
    keeper.wait_line("ready")
    started = []

    def after_start(events):
        if not started:
            p = g.start([workload_bin, "alloc", "200"])
            started.append(p)
            assert p.wait(60) in (-9, 137)
        return False

    ev, records = drive(g, 3.0, until=after_start)
    assert [e["kind"] for e in ev] == ["oom_kill"], ev
    assert ev[0]["evidence"]["kills"] == 1
    assert ev[0]["evidence"]["limit_bytes"] == 64 * MiB
    keeper.kill()


@pytest.mark.realcg
def test_real_burner_at_quota_raises_cpu_throttled_once(make_group, workload_bin):
    g = make_group()
    g.set_cpu_quota(50000)
    p = g.start([workload_bin, "spin"])
    p.wait_line("ready")
    ev, _ = drive(g, 4.0, window=2.0)
    assert [e["kind"] for e in ev] == ["cpu_throttled"], ev
    assert ev[0]["evidence"]["cpu_percent"] == pytest.approx(50, abs=10)
    p.kill()


@pytest.mark.realcg
def test_real_burner_with_idle_gpu_process_is_input_bound(make_group, workload_bin):
    """Real CPU figures of a 0.5-core burner, with the gpu object an idle NVML process gives."""
    from cgstat.pipeline.sampler import Sampler

    g = make_group()
    g.set_cpu_quota(50000)
    p = g.start([workload_bin, "spin"])
    p.wait_line("ready")
    sampler = Sampler(match="^" + g.cgroup.replace("/", "\\/") + "$")
    d = EventDetector(window_s=2.0)
    sampler.warm_up()
    events = []
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        time.sleep(0.25)
        tick = sampler.tick()
        for r in tick:
            r["gpu"] = gpu(0.0)
        events.extend(d.observe(tick))
    validate(events)
    idle = [e for e in events if e["kind"] == "gpu_idle_cpu_bound"]
    assert len(idle) == 1 and "input pipeline" in idle[0]["message"]
    p.kill()


@pytest.mark.realcg
def test_real_steady_growth_raises_one_memory_growth(make_group):
    g = make_group()
    g.set_memory_limit(1024 * MiB)
    p = g.start([sys.executable, "-c", GROW, "16"])
    p.wait_line("ready")
    ev, _ = drive(g, 5.0, window=2.0)
    assert [e["kind"] for e in ev] == ["memory_growth"], ev
    assert ev[0]["evidence"]["bytes_per_second"] == pytest.approx(16 * MiB, rel=0.4)
    p.kill()


@pytest.mark.realcg
def test_real_near_limit_and_calm(make_group, workload_bin):
    g = make_group()
    g.set_memory_limit(64 * MiB)
    p = g.start([workload_bin, "hold", "60"])
    p.wait_line("ready")
    calm = make_group()
    q = calm.start([workload_bin, "sleep"])
    q.wait_line("ready")
    ev, _ = drive(g, 3.0)
    assert [e["kind"] for e in ev] == ["memory_near_limit"], ev
    ev, _ = drive(calm, 3.0)
    assert ev == []
    p.kill()
    q.kill()

