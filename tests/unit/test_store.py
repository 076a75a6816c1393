"""The flight recorder's store: what is written reads back byte for byte, found by time;
a kill, damage, garbage, a clock going back and a bound on size lose nothing else; a
folder that is not a store of cgstat's is refused."""

import os
import shutil
import signal
import subprocess
import sys
import time

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgstat.store.codec import Decoder, Encoder
from cgstat.store.folder import StoreError, StoreFolder
from cgstat.store.reader import StoreReader
from cgstat.store.shard import FRAME, frame
from cgstat.store.times import parse_size, parse_span, parse_time
from cgstat.store.writer import Recorder
from tests.helpers.contract import ROOT, run_cgstat

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-fields", "t1")
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "v2-fields", "golden.jsonl")
T0 = 1796181120.0  # 2026-12-02T03:12:00Z


def _lines():
    """The golden records of one tick (the file holds two)."""
    out, seen = [], set()
    with open(GOLDEN, "rb") as f:
        for line in f:
            record = orjson.loads(line)
            if (record.get("type"), record.get("cgroup")) not in seen:
                seen.add((record.get("type"), record.get("cgroup")))
                out.append(orjson.dumps(record).decode())
    return out


LINES = _lines()


def _tick(i):
    """Tick i of a made-up recording: the golden records with counters that move."""
    out = []
    for n, line in enumerate(LINES):
        record = orjson.loads(line)
        record["ts"] = "2026-12-02T03:%02d:%02d.%03dZ" % (12 + i // 60, i % 60, n)
        if isinstance(record.get("cpu"), dict):
            record["cpu"]["usage_seconds_total"] = round(15.5 + i * 0.731 + n, 6)
            record["cpu"]["percent"] = (i * 7.3 + n) % 100 or None
        out.append((("cgroup", record.get("cgroup")), orjson.dumps(record)))
    return out


def _record(path, ticks, start=0, step=1.0, said=None, **kw):
    rec = Recorder(str(path), kw.pop("retain_s", None), kw.pop("max_bytes", None),
                   (lambda k, m: said.append(m)) if said is not None else None, **kw)
    rec.open()
    written = {}
    for i in range(start, start + ticks):
        lines = _tick(i)
        rec.write(T0 + i * step, lines)
        written[T0 + i * step] = [line.decode() for _, line in lines]
    rec.close()
    return written


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """150 ticks (3 blocks) in one store."""
    path = tmp_path_factory.mktemp("store") / "s"
    return path, _record(path, 150)


def test_every_tick_reads_back_byte_for_byte(recorded):
    path, written = recorded
    with StoreReader(str(path)) as reader:
        assert [t.wall_s for t in reader.ticks(T0, T0 + 1000)] == sorted(written)
        for wall_s in (T0, T0 + 59, T0 + 60, T0 + 61, T0 + 149):
            tick = reader.at(wall_s + 0.5)  # the last tick at or before the time asked
            assert tick.wall_s == wall_s
            assert tick.lines == written[wall_s]


def test_a_time_outside_the_store_says_what_it_holds(recorded):
    path, _ = recorded
    with StoreReader(str(path)) as reader:
        with pytest.raises(StoreError) as exc:
            reader.at(T0 - 3600)
        assert "holds 2026-12-02T03:12:00Z to 2026-12-02T03:14:29Z" in str(exc.value)
        with pytest.raises(StoreError):
            reader.at(T0 + 149 + 3600)


def test_files_are_ours_and_private(recorded):
    path, _ = recorded
    assert os.stat(path).st_mode & 0o777 == 0o700
    for name in os.listdir(path):
        assert os.stat(path / name).st_mode & 0o777 == 0o600, name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 4), st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)), max_size=6), min_size=1, max_size=8))
def test_codec_round_trips_any_lines(ticks):
    enc, dec = Encoder(), Decoder()
    for n, tick in enumerate(ticks):
        lines = [(key if key < 4 else None, text.encode()) for key, text in tick]
        if n == 4:
            enc.reset()
            dec.reset()
        wall_s, out = dec.decode(enc.encode(float(n), lines))
        assert wall_s == n and out == [text.decode() for _, text in lines]



_PIECE = st.sampled_from(["", "1", "22.5", '"k":3', '{"a":null', "\u00fc]", '"x"}'])


@given(st.lists(st.lists(st.tuples(st.integers(0, 2), st.lists(st.tuples(st.integers(0, 59), _PIECE), max_size=4),
                                   st.integers(0, 2)), max_size=4), min_size=1, max_size=12))
def test_codec_round_trips_long_lines_changing_anywhere(ticks):
    """Lines of ~60 pieces (a record's length), each tick changing a few of them: in the
    head, past it, both, none; now and then one piece more or less."""
    enc, dec = Encoder(), Decoder()
    pieces = {key: [str(i) for i in range(50)] for key in range(3)}
    for n, tick in enumerate(ticks):
        lines = []
        for key, changes, grow in tick:
            for at, value in changes:
                if at < len(pieces[key]):
                    pieces[key][at] = value
            if grow == 1:
                pieces[key].append("9")
            elif grow == 2 and len(pieces[key]) > 1:
                pieces[key].pop(0)
            lines.append((key, ",".join(pieces[key]).encode()))
        if n == 6:
            enc.reset()
            dec.reset()
        wall_s, out = dec.decode(enc.encode(float(n), lines))
        assert wall_s == n and out == [line.decode() for _, line in lines]


@pytest.mark.parametrize("at", [0, 2, 22, 23, 24, 25, 49])
def test_codec_one_piece_changed_anywhere(at):
    """A record whose one piece moves, tick after tick, wherever it is (the head is
    compared piece by piece, the rest first whole): read back as written."""
    enc, dec = Encoder(), Decoder()
    pieces = ['"p%d":%d' % (i, i) for i in range(50)]
    for n in range(4):
        pieces[at] = '"p%d":%d' % (at, 1000 + n)
        line = ",".join(pieces)
        assert dec.decode(enc.encode(float(n), [("w", line.encode())]))[1] == [line]

def test_stored_records_equal_what_stream_wrote(tmp_path):
    """stream --store: each tick replayed is the stream's lines for that tick."""
    out = tmp_path / "out.jsonl"
    store = tmp_path / "store"
    run_cgstat("--host-root", V2, "stream", "--interval", "0.1", "--count", "3", "--output", str(out),
               "--store", str(store), "--no-events")
    lines = out.read_text().splitlines()
    with StoreReader(str(store)) as reader:
        ticks = list(reader.ticks(0, time.time() + 10))
    assert len(ticks) == 3 and [line for t in ticks for line in t.lines] == lines
    # a recorded tree's clock stands still: its ticks share one time, and the last is replayed
    records, err, code = run_cgstat("replay", "--store", str(store), "--at", repr(ticks[-1].wall_s))
    assert [orjson.dumps(r).decode() for r in records] == ticks[-1].lines
    records, err, code = run_cgstat("replay", "--store", str(store), "--at", repr(ticks[-1].wall_s),
                                    "--match", "init")
    assert records and all("init" in r["cgroup"] for r in records)


def test_kill_9_loses_at_most_the_tick_being_written(tmp_path):
    store = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "--host-root", V2, "record", "--store", str(store),
                             "--interval", "0.1", "--no-events"], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until a few ticks are in (a wait, not a timing assertion)
            try:
                with StoreReader(str(store)) as reader:
                    if sum(1 for _ in reader.ticks(0, time.time() + 10)) >= 5:
                        break
            except StoreError:
                pass  # not made yet
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    said = []
    with StoreReader(str(store), lambda k, m: said.append(m)) as reader:
        ticks = list(reader.ticks(0, time.time() + 10))
    assert len(ticks) >= 5
    assert all(len(t.lines) == len(ticks[0].lines) for t in ticks)  # every tick read is whole
    assert len(said) <= 1 and all("cut short" in m for m in said)


def test_a_torn_tail_is_skipped_and_said_once_then_recording_goes_on(tmp_path):
    path = tmp_path / "s"
    written = _record(path, 10)
    shard = [n for n in os.listdir(path) if n.endswith(".shard")][0]
    with open(path / shard, "ab") as f:  # the start of an eleventh frame: a write cut short
        f.write(frame(os.urandom(500), T0 + 10, False)[:FRAME.size + 20])
    written.update(_record(path, 5, start=10))  # a new run: a new shard after the torn one
    said = []
    with StoreReader(str(path), lambda k, m: said.append(m)) as reader:
        assert {t.wall_s: t.lines for t in reader.ticks(0, T0 + 100)} == written
        assert reader.at(T0 + 9).lines == written[T0 + 9]
    assert len(said) == 1 and "cut short" in said[0], said


def test_damage_in_a_shard_loses_only_its_block(tmp_path):
    path = tmp_path / "s"
    written = _record(path, 150)  # blocks at ticks 0, 60, 120
    shard = [n for n in os.listdir(path) if n.endswith(".shard")][0]
    with StoreReader(str(path)) as reader:
        offset = reader._shard(reader.names[0]).blocks[1][1]  # the second block's first frame
    with open(path / shard, "r+b") as f:
        f.seek(offset + FRAME.size + 5)
        f.write(b"\xff" * 40)
    said = []
    with StoreReader(str(path), lambda k, m: said.append(m)) as reader:
        got = {t.wall_s: t.lines for t in reader.ticks(0, T0 + 1000)}
    lost = set(written) - set(got)
    assert lost == {T0 + i for i in range(60, 120)}
    assert all(got[t] == written[t] for t in got)
    assert len(said) == 1 and "damaged" in said[0]


def test_a_shard_of_garbage_is_skipped_and_said(tmp_path):
    path = tmp_path / "s"
    written = _record(path, 5)
    with open(path / "00000009-20261202T040000Z.shard", "wb") as f:
        f.write(os.urandom(5000))
    with open(path / "00000010-20261202T050000Z.shard", "wb") as f:
        f.write(b"")
    said = []
    with StoreReader(str(path), lambda k, m: said.append(m)) as reader:
        assert {t.wall_s: t.lines for t in reader.ticks(0, T0 + 10 ** 5)} == written
        with pytest.raises(StoreError):
            reader.at(T0 + 3 * 3600)
    assert len(said) == 2 and all("not a shard" in m for m in said)
    _record(path, 2, start=100)  # and recording goes on after them
    assert len([n for n in os.listdir(path) if n.endswith(".shard")]) == 4


def test_the_clock_going_back_starts_a_shard_and_replay_believes_the_later(tmp_path):
    path = tmp_path / "s"
    said = []
    rec = Recorder(str(path), None, None, lambda k, m: said.append(m))
    rec.open()
    rec.write(T0 + 100, [(1, b'{"a":1}')])
    rec.write(T0 + 101, [(1, b'{"a":2}')])
    rec.write(T0 + 50, [(1, b'{"a":3}')])  # the clock was set back
    rec.write(T0 + 101, [(1, b'{"a":4}')])
    rec.close()
    assert len(said) == 1 and "clock went back" in said[0]
    with StoreReader(str(path)) as reader:
        assert reader.at(T0 + 101).lines == ['{"a":4}']
        assert reader.at(T0 + 100).lines == ['{"a":3}']  # the later recorded at that time
        assert [t.lines[0] for t in reader.ticks(0, T0 + 200)] == ['{"a":1}', '{"a":2}', '{"a":3}', '{"a":4}']


def test_frames_made_after_one_that_failed_wait_for_the_next_block(tmp_path, monkeypatch):
    # The frames are made in the tick's thread and written in the store's (outputs/store.py):
    # a write that fails leaves the frames already made told against a tick not on disk.
    import errno

    from cgstat.store import writer

    path = tmp_path / "s"
    rec = Recorder(str(path), None, None)
    rec.open()
    rec.write(T0, _tick(0))

    def made(i):
        rec.begin(T0 + i)
        for key, line in _tick(i):
            rec.add(key, line)
        return rec.encode()

    ahead = [made(i) for i in (1, 2, 3)]
    real = os.fdatasync

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer.os, "fdatasync", full)
    with pytest.raises(StoreError, match="cannot write to the store"):
        rec.put(ahead[0])
    monkeypatch.setattr(writer.os, "fdatasync", real)
    for frame_ahead in ahead[1:]:
        assert not frame_ahead.block
        with pytest.raises(StoreError, match="told against a tick that could not be"):
            rec.put(frame_ahead)
    after = made(4)
    assert after.block and not after.shard  # the next tick made begins a block, in the same shard
    rec.put(after)
    rec.write(T0 + 5, _tick(5))
    rec.close()
    with StoreReader(str(path)) as reader:
        got = {t.wall_s: t.lines for t in reader.ticks(0, T0 + 10)}
    assert sorted(got) == [T0, T0 + 4, T0 + 5]
    assert all(got[T0 + i] == [line.decode() for _, line in _tick(i)] for i in (0, 4, 5))


def test_a_tick_abandoned_as_it_began_a_shard_leaves_the_shard_to_the_next(tmp_path):
    path = tmp_path / "s"
    rec = Recorder(str(path), None, None)
    rec.open()
    rec.write(T0, _tick(0))
    rec.begin(T0 + 3600)  # the next hour: a shard begins
    rec.abandon()  # its records stopped coming
    rec.begin(T0 + 3601)
    for key, line in _tick(1):
        rec.add(key, line)
    made = rec.encode()
    assert made.shard and made.block
    rec.put(made)
    rec.close()
    assert len([n for n in os.listdir(path) if n.endswith(".shard")]) == 2


def test_a_store_bounded_in_size_never_exceeds_it_oldest_first(tmp_path):
    path = tmp_path / "s"
    said = []
    bound = 1 << 20
    rec = Recorder(str(path), None, bound, lambda k, m: said.append(m), sync=False)
    rec.open()
    sizes = []
    for i in range(600):  # ~5 KB a tick that doesn't compress
        rec.write(T0 + i, [(k, orjson.dumps({"t": i, "noise": os.urandom(300).hex()})) for k in range(8)])
        sizes.append(sum(os.path.getsize(path / n) for n in os.listdir(path)))
    rec.close()
    assert max(sizes) <= bound
    assert len(said) >= 2 and all("removed its oldest shard" in m and "--max-size 1M" in m for m in said)
    removed = [int(m.split("shard ")[1][:8]) for m in said]
    assert removed == sorted(removed) and removed[0] == 1
    with StoreReader(str(path)) as reader:
        span = reader.span()
        assert span is not None and span[1] == T0 + 599
        assert len(list(reader.ticks(span[0], span[1]))) == int(span[1] - span[0]) + 1  # nothing inside lost


def test_retention_by_age_removes_shards_older_than_it(tmp_path):
    path = tmp_path / "s"
    said = []
    # a tick every half hour from 03:12 to 05:42: shards begun at 03:12, 04:12, 05:12
    _record(path, 6, step=1800.0, said=said, retain_s=3600.0)
    names = sorted(n for n in os.listdir(path) if n.endswith(".shard"))
    # at 05:42, the first shard ended (its next began) at 04:12, more than an hour before
    assert [n[9:24] for n in names] == ["20261202T041200", "20261202T051200"]
    assert len(said) == 1 and "00000001-20261202T031200Z.shard" in said[0] and "older than --retain 1h" in said[0]


@pytest.mark.parametrize("kind", ["symlink", "file", "foreign", "not-a-store", "world-writable"])
def test_a_folder_that_is_not_a_store_of_ours_is_refused(tmp_path, kind):
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    path = tmp_path / "store"
    if kind == "symlink":
        path.symlink_to(target)
    elif kind == "file":
        path.write_text("precious\n")
    elif kind == "foreign":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        path.mkdir(mode=0o700)
        os.chown(path, 65534, 65534)
    elif kind == "not-a-store":
        path.mkdir(mode=0o700)
        (path / "passwd").write_text("root:x:0:0\n")
    else:
        path.mkdir()
        os.chmod(path, 0o777)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(StoreError) as exc:
        StoreFolder.open(str(path), writing=True)
    assert "refusing --store" in str(exc.value)
    if kind == "file":
        assert "it is a regular file, not a folder" in str(exc.value)
    assert sorted(os.listdir(tmp_path)) == before
    if kind == "not-a-store":
        assert os.listdir(path) == ["passwd"]
    _, err, code = run_cgstat("--host-root", V2, "record", "--store", str(path), "--count", "1", check=False)
    assert code == 1 and "refusing --store" in err and "Traceback" not in err


def test_readers_say_what_is_wrong_in_one_line(tmp_path, recorded):
    path, _ = recorded
    _, err, code = run_cgstat("replay", "--store", str(tmp_path / "none"), "--at", "now", check=False)
    assert code == 1 and "no store at" in err and "Traceback" not in err
    _, err, code = run_cgstat("replay", "--store", str(path), "--at", "10 min ago", check=False)
    assert code == 1 and "the store" in err and "holds 2026-12-02T03:12:00Z" in err
    _, err, code = run_cgstat("replay", "--store", str(path), "--at", "yesterday-ish", check=False)
    assert code == 2 and "is not a time" in err


def test_dump_formats(recorded):
    path, written = recorded
    since, until = repr(T0 + 10), repr(T0 + 12)
    records, _, _ = run_cgstat("dump", "--store", str(path), "--since", since, "--until", until)
    assert [orjson.dumps(r).decode() for r in records] == [x for t in (10, 11, 12) for x in written[T0 + t]]
    proc = subprocess.run([sys.executable, "-m", "cgstat", "dump", "--store", str(path), "--since", since,
                           "--until", until, "--format", "csv"], capture_output=True, cwd=ROOT, check=True)
    rows = proc.stdout.decode().splitlines()
    assert rows[0].startswith("type,ts,") and len(rows) == 1 + 3 * len(LINES)
    proc = subprocess.run([sys.executable, "-m", "cgstat", "dump", "--store", str(path), "--since", since,
                           "--until", until, "--format", "openmetrics"], capture_output=True, cwd=ROOT, check=True)
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    usage = [s for f in text_string_to_metric_families(proc.stdout.decode()) for s in f.samples
             if s.name == "container_cpu_usage_seconds_total" and s.labels.get("id") == "/"]
    assert [s.value for s in usage] == [15.5 + t * 0.731 for t in (10, 11, 12)]


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_dump_openmetrics_backfills_with_promtool(tmp_path, recorded):
    """What `dump --format openmetrics` writes is what Prometheus's own backfill takes:
    every sample stamped (cgstat's counts too), each family once; the samples read back
    from the blocks made are the store's."""
    path, _ = recorded
    since, until = repr(T0 + 10), repr(T0 + 12)
    proc = subprocess.run([sys.executable, "-m", "cgstat", "dump", "--store", str(path), "--since", since,
                           "--until", until, "--format", "openmetrics"], capture_output=True, cwd=ROOT, check=True)
    dumped, tsdb = tmp_path / "dump.om", tmp_path / "tsdb"
    dumped.write_bytes(proc.stdout)
    made = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(dumped), str(tsdb)],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr + made.stdout
    (tsdb / "wal").mkdir(exist_ok=True)  # `tsdb dump` opens the folder as a TSDB, which has one
    out = subprocess.run([PROMTOOL, "tsdb", "dump", "--match", '{__name__=~"container_cpu_usage_seconds_total|'
                          'cgstat_cgroups",id=~"/|",type=~"pod|"}', str(tsdb)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    usage = [line for line in out if 'container_cpu_usage_seconds_total' in line and 'id="/"' in line]
    assert [float(line.split()[-2]) for line in usage] == [15.5 + t * 0.731 for t in (10, 11, 12)]
    assert [int(line.split()[-1]) for line in usage] == [int((T0 + t) * 1000) for t in (10, 11, 12)]
    pods = [line for line in out if "cgstat_cgroups" in line]
    assert [line.split()[-2:] for line in pods] == [[str(sum(orjson.loads(x)["type"] == "pod" for x in LINES)),
                                                     str(int((T0 + t) * 1000))] for t in (10, 11, 12)]


def test_times_and_sizes():
    now = 1796181120.0
    assert parse_time("10 min ago", now) == now - 600
    assert parse_time("90s ago", now) == now - 90
    assert parse_time("1h", now) == now - 3600
    assert parse_time("2026-12-02T03:12:00Z", now) == T0
    assert parse_time("2026-12-02T05:12:00+02:00", now) == T0
    assert parse_time("1796181120", now) == T0
    assert parse_time("0", now) == 0.0 and parse_time("86400.5", now) == 86400.5  # Unix seconds, any size
    day = parse_time("03:12", now)
    assert 0 <= now - day < 86400 and time.localtime(day)[3:6] == (3, 12, 0)
    assert parse_span("7d") == 7 * 86400
    assert parse_size("2G") == 2 << 30
    for bad in ("soon", "10 parsecs ago", "2026-13-40"):
        with pytest.raises(ValueError):
            parse_time(bad, now)


def test_events_top_and_report_read_the_store(tmp_path, recorded):
    path = tmp_path / "s"
    event = orjson.dumps({"schema": 1, "type": "event", "ts": "2026-12-02T03:12:01.000Z", "kind": "oom_kill",
                          "severity": "critical", "cgroup": "/init.scope", "message": "killed", "host": "vm",
                          "container": None, "evidence": {}, "resolves": None, "since": None}).decode()
    rec = Recorder(str(path), None, None)
    rec.open()
    for i in range(3):
        lines = _tick(i)
        rec.write(T0 + i, lines + ([(None, event.encode())] if i == 1 else []))
    rec.close()
    records, _, _ = run_cgstat("events", "--store", str(path), "--since", repr(T0), "--until", repr(T0 + 5))
    assert [orjson.dumps(r).decode() for r in records] == [event]
    proc = subprocess.run([sys.executable, "-m", "cgstat", "top", "--store", str(path), "--at", repr(T0 + 1.5)],
                          capture_output=True, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(T0 + 1)) in out.splitlines()[0]
    assert "oom_kill" in out and "/init.scope" in out
    page = tmp_path / "r.html"
    run_cgstat("report", "--store", str(path), "--since", repr(T0), "--until", repr(T0 + 5), "-o", str(page))
    assert "/init.scope" in page.read_text()
