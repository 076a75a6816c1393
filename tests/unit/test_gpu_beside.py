"""The GPU read beside the tick (cgstat/gpu/beside.py) with a read that blocks until told:
a late tick gets the late value at once, the stuck read is never run twice at a time, its
late result is thrown away but what it must pass on is kept, and a run of late ticks is
said once and counted."""

import threading

from cgstat.gpu.beside import Beside
from tests.helpers.waiting import wait_for


class Blocking:
    def __init__(self):
        self.release = threading.Event()
        self.calls = 0
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def read(self):
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            n = self.calls
        self.release.wait(30)
        with self.lock:
            self.running -= 1
        return ("read", n)


def test_a_stuck_read_makes_late_ticks_said_once_and_counted():
    b = Blocking()
    said = []
    beside = Beside(b.read, lambda running_s: ("late", None), lambda late, after: after + ("kept", late[1]),
                    warn=lambda key, message: said.append(key))
    assert beside.take(0.05) == ("late", None)
    assert beside.take(0.05) == ("late", None)
    assert beside.take(0.05) == ("late", None)
    assert b.calls == 1  # never asked again while it runs
    assert said == ["gpu-read-late"] and beside.late_total == 3
    b.release.set()
    wait_for(lambda: b.running == 0 and not beside._asked, 10, 0.01, what="the stuck read to finish")
    # the first read finished after its tick: thrown away, what it passes on kept, a new read made
    assert beside.take(5.0) == ("read", 2, "kept", 1)
    assert beside.take(5.0) == ("read", 3)
    assert b.most_at_once == 1 and beside.late_total == 3
    assert beside.close(1.0) is True


def test_reads_on_time_are_given_as_they_are():
    n = iter(range(100))
    beside = Beside(lambda: next(n), lambda running_s: -1, lambda late, after: after)
    assert [beside.take(5.0) for _ in range(3)] == [0, 1, 2]
    assert beside.late_total == 0
    assert beside.close(1.0) is True


def test_close_leaves_a_stuck_call_to_the_process_exit():
    b = Blocking()
    beside = Beside(b.read, lambda running_s: None, lambda late, after: after)
    beside.take(0.01)
    assert beside.close(0.05) is False  # the daemon thread is still in the call
    b.release.set()


def test_the_late_count_and_the_call_errors_are_self_metrics():
    from cgstat.outputs.prometheus import exposition

    text = exposition.render([], exposition.TEXT, {"gpu_reads_late_total": 3, "gpu_call_errors_total": {
        ("GPU-1", "nvmlDeviceGetTemperature"): 2}})
    text = text.decode() if isinstance(text, bytes) else text
    assert "# TYPE cgstat_gpu_reads_late_total counter" in text
    assert "\ncgstat_gpu_reads_late_total 3\n" in text
    assert '\ncgstat_gpu_call_errors_total{gpu="GPU-1",call="nvmlDeviceGetTemperature"} 2\n' in text


def test_the_stream_waits_half_its_interval_at_least_a_quarter_second():
    from cgstat.gpu.beside import deadline_s

    assert (deadline_s(1.0), deadline_s(30.0), deadline_s(0.2)) == (0.5, 15.0, 0.25)


def test_what_the_read_raises_is_raised_on_the_ticks_thread_and_the_next_read_is_made():
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in the reading")
        return "fine"

    beside = Beside(read, lambda running_s: "late", lambda late, after: after)
    try:
        beside.take(5.0)
    except RuntimeError as exc:
        assert str(exc) == "a bug in the reading"
    else:
        raise AssertionError("the read's exception was swallowed")
    assert beside.take(5.0) == "fine"
    assert beside.close(1.0) is True
