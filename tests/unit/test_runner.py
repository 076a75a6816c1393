"""The runner's tick: any number of sinks get every record, made one at a time, each
record serialised once for all the sinks that want JSON lines; a sink that needs the
tick whole gets it whole, with what is known of the tick."""

import io

from cgstat import text
from cgstat.diagnostics import Warner
from cgstat.outputs.jsonl import FileSink
from cgstat.outputs.queued import QueuedSink
from cgstat.outputs.store import StoreSink
from cgstat.pipeline.runner import Runner
from cgstat.pipeline.sinks import Sink

RECORDS = 25


class Sampler:
    """What the runner's tick uses of a Sampler: records made one at a time, counted."""

    def __init__(self):
        self.warner = Warner(stream=io.StringIO())
        self.kills = []
        self.late_counts = []
        self.gpu_reads_late_total = 0
        self.gpu_call_errors = 0

    def records(self):
        for i in range(RECORDS):
            yield {"type": "cgroup", "cgroup": f"/c{i}", "ts": "2026-12-07T20:00:00.000Z", "n": i}


class Whole(Sink):
    """A sink that needs the tick whole (the default tee)."""

    def __init__(self):
        self.ticks = []

    def write(self, records, tick=None):
        self.ticks.append((list(records), tick))


class Tap(Sink):
    tees = True
    wants_lines = True

    def __init__(self):
        self.lines = []

    def share_lines(self, line_of):
        self.line_of = line_of

    def tee(self, records):
        for r in records:
            self.lines.append(self.line_of(r))
            yield r

    def end_tee(self, tick=None):
        pass


def test_every_sink_gets_every_record_each_serialised_once(tmp_path, monkeypatch):
    made = []
    real = text.dumps_record
    monkeypatch.setattr(text, "dumps_record", lambda record: made.append(record["n"]) or real(record))
    warn = Warner(stream=io.StringIO()).warn
    store = QueuedSink(StoreSink(str(tmp_path / "store"), None, None, warn, sync=False), warn)
    out = FileSink(str(tmp_path / "out.jsonl"))
    tap, whole = Tap(), Whole()
    sinks = [whole, store, tap, out]
    for sink in sinks:
        sink.open()
    runner = Runner(Sampler(), sinks, 1.0)
    assert runner.last is out  # the file sink pulls: it ends the chain, the others tee
    runner.tick()
    for sink in sinks:
        sink.close()
    assert made == list(range(RECORDS))  # once each, for the file, the store and the tap
    lines = (tmp_path / "out.jsonl").read_bytes().splitlines()
    assert lines == tap.lines == [real(r) for r in Sampler().records()]
    (records, tick), = whole.ticks
    assert [r["n"] for r in records] == list(range(RECORDS)) and tick.seconds is not None
    from cgstat.store.reader import StoreReader

    reader = StoreReader(str(tmp_path / "store"))
    try:
        assert [line.encode() for line in reader.at(reader.span()[1]).lines] == lines
    finally:
        reader.close()
