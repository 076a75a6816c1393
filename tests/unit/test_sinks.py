"""The Sink interface: a blocked reader never delays a tick, drops are whole ticks said once
per episode, the end of a run flushes in order, SIGHUP's reopen comes between ticks, a
reader gone ends the run with 0; the --format registry; the report as a sink.

No sleep decides anything: the reader is held by an Event until the run has made every
tick, and the run itself is waited for with a generous bound only so that a regression
fails instead of hanging.
"""

import fcntl
import io
import json
import os
import re
import threading

import pytest

from cgstat.app import stream as modes
from cgstat.outputs import formats
from cgstat.outputs.jsonl import StdoutSink
from cgstat.outputs.queued import QueuedSink
from cgstat.pipeline.sinks import Chunker, ChunkSink, SinkError
from cgstat.diagnostics import Warner
from tests.helpers.contract import ROOT

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
LINES_PER_TICK = 10
PAD = "x" * 1000  # ~1 KB a line: a tick (~10 KB) is more than the 4 KiB pipe holds


class FakeSampler:
    """What run_stream uses of a Sampler: ticks of LINES_PER_TICK numbered records."""

    def __init__(self, warner, last_tick=None):
        self.warner = warner
        self.made = 0  # ticks made
        self.kills = []
        self.late_counts = []
        self.last_tick = last_tick  # set when tick number `last_tick[0]` has been made
        self.all_made = threading.Event()

    def warm_up(self):
        pass

    def track_exits(self):  # exit records: none here
        pass

    def gpu_deadline(self, seconds):  # no GPU here
        pass

    gpu_reads_late_total = 0
    gpu_call_errors = {}

    def records(self):
        self.made += 1
        for i in range(LINES_PER_TICK):
            yield {"tick": self.made, "i": i, "pad": PAD}
        if self.last_tick is not None and self.made >= self.last_tick:
            self.all_made.set()

    def tick(self):
        return list(self.records())


def _small_pipe():
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    return r, w


def _run_in_thread(sampler, sink, count):
    result = {}

    def run():
        result["rc"] = modes.run_stream(sampler, [sink], 0.001, count)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def _read_all(fd):
    chunks = []
    while True:
        data = os.read(fd, 65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _ticks_of(data):
    """tick number -> its lines' i, in the order read; every line whole JSON."""
    assert data.endswith(b"\n")
    ticks = {}
    order = []
    for line in data.split(b"\n")[:-1]:
        r = json.loads(line)  # a torn line fails here
        if r["tick"] not in ticks:
            order.append(r["tick"])
        ticks.setdefault(r["tick"], []).append(r["i"])
    assert order == sorted(order)  # in order
    return ticks


@pytest.fixture
def no_signals(monkeypatch):
    monkeypatch.setattr(modes.Schedule, "install_signals", lambda self: self)  # pytest keeps its own


def test_a_blocked_reader_delays_no_tick_and_drops_are_whole_ticks_said_once(no_signals):
    err = io.StringIO()
    warner = Warner(stream=err)
    count = 50
    sampler = FakeSampler(warner, last_tick=count)
    r, w = _small_pipe()
    sink = QueuedSink(StdoutSink(warner.warn, fd=w), warner.warn, max_bytes=20_000, close_stall_s=30)
    try:
        t, result = _run_in_thread(sampler, sink, count)
        # Nobody reads until the run has made all its ticks: with a write on the tick's
        # thread, the first tick (~10 KB into a 4 KiB pipe) would hold it there for ever.
        assert sampler.all_made.wait(60), f"the run stalled at tick {sampler.made} behind a blocked reader"
        data_holder = {}
        reader = threading.Thread(target=lambda: data_holder.setdefault("d", _read_all(r)), daemon=True)
        reader.start()
        t.join(60)
        assert not t.is_alive() and result["rc"] == 0
    finally:
        os.close(w)
    reader.join(60)
    os.close(r)
    ticks = _ticks_of(data_holder["d"])
    assert sampler.made == count
    assert all(lines == list(range(LINES_PER_TICK)) for lines in ticks.values())  # nothing torn
    assert 1 <= len(ticks) < count  # the queue holds a few ticks, not 50
    dropped = count - len(ticks)
    assert sink.ticks_dropped == dropped and sink.ticks_written == len(ticks)
    said = [x for x in err.getvalue().splitlines() if "did not keep up" in x]
    # One episode as a rule: the reader starts after the last tick. A writer thread that
    # starts late (a loaded machine) lets one more tick in after the first drops: two
    # episodes then, the first said when it ends, the last at close with the run's total.
    assert 1 <= len(said) <= 2, err.getvalue()
    episodes = [int(re.search(r"keep up: (\d+) ticks \((\d+) lines\)", x).group(1)) for x in said]
    assert sum(episodes) == dropped
    if len(said) == 1:
        assert f": {dropped} ticks ({dropped * LINES_PER_TICK} lines) dropped whole" in said[0]
    else:
        assert said[-1].endswith(f"; {dropped} ticks in all"), said


def test_the_end_of_a_run_writes_every_queued_line_in_order(no_signals):
    err = io.StringIO()
    warner = Warner(stream=err)
    count = 20
    sampler = FakeSampler(warner, last_tick=count)
    r, w = _small_pipe()
    sink = QueuedSink(StdoutSink(warner.warn, fd=w), warner.warn, close_stall_s=30)  # room for all
    try:
        t, result = _run_in_thread(sampler, sink, count)
        assert sampler.all_made.wait(60)
        holder = {}
        reader = threading.Thread(target=lambda: holder.setdefault("d", _read_all(r)), daemon=True)
        reader.start()
        t.join(60)  # close() returns once the reader took the last line
        assert not t.is_alive() and result["rc"] == 0
    finally:
        os.close(w)
    reader.join(60)
    os.close(r)
    ticks = _ticks_of(holder["d"])
    assert sorted(ticks) == list(range(1, count + 1))
    assert "dropped" not in err.getvalue()


@pytest.mark.parametrize("stopped", [False, True])
def test_close_waits_for_a_paused_reader_unless_a_stop_came(stopped):
    err = io.StringIO()
    warner = Warner(stream=err)
    r, w = _small_pipe()
    sink = QueuedSink(StdoutSink(warner.warn, fd=w), warner.warn, close_stall_s=0)
    sink.watch_stop(lambda: stopped)
    sink.open()
    for n in range(1, 4):
        sink.write([{"tick": n, "i": i, "pad": PAD} for i in range(LINES_PER_TICK)])
    holder = {}

    def reader():  # a `| less` that reads only once close() has found it taking nothing
        assert sink.waiting.wait(60)
        holder["d"] = _read_all(r)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    sink.close()
    os.close(w)
    t.join(60)
    os.close(r)
    lost = [x for x in err.getvalue().splitlines() if "took nothing" in x]
    if stopped:  # not waited for: said, with what was left
        assert len(lost) == 1 and "lines not written at the end" in lost[0]
    else:  # every line, though the reader took nothing for longer than close_stall_s
        assert lost == []
        assert sorted(_ticks_of(holder["d"])) == [1, 2, 3]


def test_a_reader_gone_ends_the_stream_with_0(no_signals):
    warner = Warner(stream=io.StringIO())
    sampler = FakeSampler(warner)
    r, w = os.pipe()
    os.close(r)  # the reader went away (`| head` done)
    sink = QueuedSink(StdoutSink(warner.warn, fd=w), warner.warn)
    try:
        t, result = _run_in_thread(sampler, sink, 100000)
        t.join(60)
        assert not t.is_alive() and result["rc"] == 0
    finally:
        os.close(w)
    assert sampler.made < 100000  # ended by the reader, not by the count


class Lines(Chunker):
    """A line a piece."""

    def add(self, record):
        return json.dumps(record).encode() + b"\n"


class Recording(ChunkSink):
    """A ChunkSink that notes what its writer thread was given, in order."""

    def __init__(self, fail_first=False):
        self.calls = []
        self.fail_first = fail_first
        self.label = "recording"

    def chunker(self, quiet=False):
        return Lines()

    def write_chunks(self, chunks):
        data = b"".join(chunks)
        if self.fail_first:
            self.fail_first = False
            raise SinkError("recording: cannot write: disk full; will retry")
        self.calls.append(data)

    def reopen(self):
        self.calls.append("reopen")

    def close(self):
        self.calls.append("close")


def test_reopen_comes_between_ticks_and_the_writers_errors_are_said_by_the_tick():
    err = io.StringIO()
    warner = Warner(stream=err)
    inner = Recording(fail_first=True)
    sink = QueuedSink(inner, warner.warn)
    sink.open()
    sink.write([{"n": 1}])
    sink.write([{"n": 2}, {"n": 3}])
    sink.reopen()
    sink.write([{"n": 4}])
    sink.close()
    assert inner.calls == [b'{"n": 2}\n{"n": 3}\n', "reopen", b'{"n": 4}\n', "close"]
    assert err.getvalue().count("disk full") == 1  # said from the tick's thread, at its next write


def test_may_block_only_where_a_reader_can_stop_us(tmp_path):
    r, w = os.pipe()
    try:
        assert StdoutSink(fd=w).may_block()
    finally:
        os.close(r)
        os.close(w)
    with open(tmp_path / "out", "wb") as f:
        assert not StdoutSink(fd=f.fileno()).may_block()
    assert not formats.make_sink("jsonl", str(tmp_path / "file"), queue=True).may_block()


def test_the_formats_are_the_registry():
    assert formats.FORMATS == ("jsonl", "table", "csv", "html")

    @formats.register("test-only")
    def maker(path, mode, warn):
        return StdoutSink(warn)

    try:
        assert isinstance(formats.make_sink("test-only", None), StdoutSink)
    finally:
        del formats._MAKERS["test-only"]


def test_the_report_sink_makes_the_page_cgstat_report_makes(tmp_path):
    from cgstat.outputs.report import build_report
    from cgstat.outputs.report.sink import ReportSink
    from cgstat.pipeline.sampler import Sampler
    from cgstat.text import dumps_record

    sampler = Sampler(FIXTURE, all=True, warner=Warner(stream=io.StringIO()))
    sampler.warm_up()
    ticks = [sampler.tick() for _ in range(3)]
    sampler.close()
    recorded = tmp_path / "stream.jsonl"
    recorded.write_bytes(b"".join(dumps_record(r) + b"\n" for tick in ticks for r in tick))
    build_report(str(recorded), str(tmp_path / "from-file.html"), title="t")
    sink = ReportSink(str(tmp_path / "from-sink.html"), title="t")
    sink.open()
    for tick in ticks:
        sink.write(iter(tick))
    sink.close()
    assert (tmp_path / "from-sink.html").read_bytes() == (tmp_path / "from-file.html").read_bytes()
