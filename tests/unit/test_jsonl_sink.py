"""The JSON lines sink: a batch goes out whole or not at all, in chunks, with a bounded backlog."""

import errno
import os

import orjson
import pytest

from cgstat import text
from cgstat.outputs import jsonl as sinks


def _big_records(n, pad=200):
    return [{"schema": 1, "type": "cgroup", "cgroup": f"/g{i}", "x": "y" * pad} for i in range(n)]


def _third_write_fails(monkeypatch, err):
    """os.write raises OSError(err) on its third call and writes the others; the data of
    every call, in order."""
    real_write = os.write
    calls = []

    def write(fd, data):
        calls.append(bytes(data))
        if len(calls) == 3:
            raise OSError(err, os.strerror(err))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return calls


def _read_all(fd):
    parts = []
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            return b"".join(parts)
        parts.append(data)


def test_a_batch_goes_out_in_chunks_and_a_failed_chunk_keeps_the_batch_whole(tmp_path, monkeypatch):
    """A batch bigger than a chunk is written in several writes; a failure on a later chunk
    cuts the file back to where the batch began and keeps the whole batch, which goes out
    unchanged (the same bytes as a clean write) on the next tick."""
    records = _big_records(3000)  # ~700 KB: three chunks
    expected = b"".join(orjson.dumps(r) + b"\n" for r in records)
    out = tmp_path / "out.jsonl"
    sink = sinks.FileSink(str(out))
    sink.write_bytes(b'{"a":1}\n')
    real_write = os.write
    sizes = []
    failed = []

    def second_chunk_fails(fd, data):
        sizes.append(len(data))
        if len(sizes) == 2 and not failed:
            failed.append(True)
            real_write(fd, bytes(data[:100]))  # part of it reaches the disk, then ENOSPC
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", second_chunk_fails)
    with pytest.raises(sinks.SinkError, match="No space left"):
        sink.write(records)
    assert out.read_bytes() == b'{"a":1}\n'  # the first chunk and the partial second were cut back
    assert max(sizes) <= sinks._CHUNK_BYTES + 1024  # never the batch in one piece
    sizes.clear()
    sink.write([{"b": 2}])  # next tick: the kept batch first, whole
    assert out.read_bytes() == b'{"a":1}\n' + expected + b'{"b":2}\n'
    assert len(sizes) == 2  # the kept batch, then the new one
    assert sink.serialise(records) == expected


def test_stdout_keeps_only_what_did_not_go_out(monkeypatch):
    """stdout can't be cut back: what went out stays, the rest (completing the line begun)
    goes first on the next tick; nothing is written twice and no line is left half."""
    r, w = os.pipe()
    sink = sinks.StdoutSink(fd=w)
    records = _big_records(3000)
    expected = b"".join(orjson.dumps(x) + b"\n" for x in records)
    real_write = os.write
    calls = {"n": 0}

    def fails_midway(fd, data):
        calls["n"] += 1
        if calls["n"] == 2:
            return real_write(fd, bytes(data[:1000]))  # a short write...
        if calls["n"] == 3:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")  # ...then a failure
        return real_write(fd, data)

    got = []
    import threading

    reader = threading.Thread(target=lambda: got.append(_read_all(r)))
    reader.start()
    try:
        monkeypatch.setattr(os, "write", fails_midway)
        with pytest.raises(sinks.SinkError, match="temporarily unavailable"):
            sink.write(records)
        assert sink._head_continues
        sink.write([{"b": 2}])
        assert not sink._pending and not sink._head_continues
    finally:
        os.close(w)
        reader.join()
        os.close(r)
    assert got[0] == expected + b'{"b":2}\n'


def test_the_backlog_is_bounded_but_never_drops_a_line_stdout_began(monkeypatch):
    sink = sinks.StdoutSink(fd=1)

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")  # stdout redirected to a full disk

    monkeypatch.setattr(os, "write", full)
    monkeypatch.setattr(sinks, "_PENDING_MAX_BYTES", 100)
    sink._pending.append(b'rest of a line"}\n')  # stdout wrote the start of this line
    sink._pending_bytes = 17
    sink._head_continues = True
    for i in range(5):
        with pytest.raises(sinks.SinkError):
            sink.write_bytes(b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * 40))
    # the line begun and the newest batch (together past the bound: the newest is always kept)
    assert [x[:6] for x in sink._pending] == [b'rest o', b'{"n":4']
    assert sink._pending_bytes == sum(len(x) for x in sink._pending)
    assert sink.dropped_lines == 4


def test_records_that_come_one_at_a_time_are_kept_whole_when_a_later_chunk_fails(tmp_path, monkeypatch):
    """stream hands the sink its records one at a time (a generator): the file still gets
    the batch whole or not at all, from the chunks already written and the rest."""
    records = _big_records(3000)
    expected = b"".join(orjson.dumps(r) + b"\n" for r in records)
    out = tmp_path / "out.jsonl"
    sink = sinks.FileSink(str(out))
    _third_write_fails(monkeypatch, errno.ENOSPC)
    taken = []

    def one_at_a_time():
        for r in records:
            taken.append(r)
            yield r

    with pytest.raises(sinks.SinkError, match="No space left"):
        sink.write(one_at_a_time())
    assert out.read_bytes() == b"" and len(taken) == len(records)
    sink.write(iter([{"b": 2}]))
    assert out.read_bytes() == expected + b'{"b":2}\n'


def test_what_cannot_be_read_back_is_lost_whole_lines_and_the_rest_kept(tmp_path, monkeypatch):
    """The chunks gone out of a batch whose records came one at a time are read back from
    the file when a later chunk fails; a file that can't be read back loses them (at most
    once), and what is kept is whole lines: this chunk and the rest."""
    records = _big_records(3000)
    lines = [orjson.dumps(r) + b"\n" for r in records]
    out = tmp_path / "out.jsonl"
    sink = sinks.FileSink(str(out))
    calls = _third_write_fails(monkeypatch, errno.EIO)

    def unreadable(fd, n, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pread", unreadable)
    with pytest.raises(sinks.SinkError, match="Input/output error"):
        sink.write(iter(records))
    assert out.read_bytes() == b""
    lost = calls[0].count(b"\n") + calls[1].count(b"\n")
    assert 0 < lost < len(records)
    monkeypatch.undo()
    sink.write(iter([{"b": 2}]))
    assert out.read_bytes() == b"".join(lines[lost:]) + b'{"b":2}\n'


def test_records_that_stop_coming_half_way_leave_nothing_of_the_batch(tmp_path):
    out = tmp_path / "out.jsonl"
    sink = sinks.FileSink(str(out))
    sink.write([{"a": 1}])

    def fails_after_a_chunk():
        yield from _big_records(2000)
        raise RuntimeError("the tick failed")

    with pytest.raises(RuntimeError):
        sink.write(fails_after_a_chunk())
    assert out.read_bytes() == b'{"a":1}\n'



def test_records_sharing_a_gpu_process_list_write_what_each_would_alone(monkeypatch):
    """A container and the pod above it carry one `gpu.processes` list (one object): the
    batch serialises it once, and every line is byte for byte what serialising that record
    alone writes; a short list, another list, and a list that can't be serialised (a name
    nobody decoded) take the plain path, the last dropped with a warning as ever."""
    procs = [{"pid": 100 + i, "name": "python3", "power_watts": 1.0 / 3 + i, "energy_joules_total": 2.5e-7 * i,
              "sm_percent": i % 7, "memory_bytes": None} for i in range(40)]
    other = [dict(p, pid=p["pid"] + 1000) for p in procs]
    records = [
        {"type": "cgroup", "cgroup": "/kubepods/pod1/c1", "gpu": {"memory_bytes": 1, "processes": procs}},
        {"type": "cgroup", "cgroup": "/kubepods/pod1", "gpu": {"memory_bytes": 1, "processes": procs},
         "extra": "a DEL \x7f"},
        {"type": "cgroup", "cgroup": "/k/short", "gpu": {"memory_bytes": 1, "processes": procs[:3]}},
        {"type": "cgroup", "cgroup": "/k/other", "gpu": {"memory_bytes": 1, "processes": other}},
        {"type": "gpu", "gpu": {"index": 0, "uuid": "GPU-1"}, "processes": procs},
        {"type": "cgroup", "cgroup": "/k/bad", "gpu": {"processes": [dict(p, name="\udcff") for p in procs]}},
        {"type": "cgroup", "cgroup": "/kubepods", "gpu": {"memory_bytes": 2, "processes": procs}},
    ]
    warned = []
    sink = sinks.JsonLinesSink(warn=lambda key, message: warned.append(key))
    alone = [sinks.dumps_record(r) for r in records]
    assert alone[5] is None
    assert sink.serialise(iter(records)) == b"".join(line + b"\n" for line in alone if line is not None)
    assert warned == ["unserialisable"]
    assert b"\\u007f" in alone[1] and orjson.loads(alone[6])["gpu"]["processes"] == procs
    if text._Fragment is not None:  # serialised apart: the shared list once, the other long one once
        calls = []
        real = text._Fragment
        monkeypatch.setattr(text, "_Fragment", lambda data: calls.append(data) or real(data))
        assert sink.serialise(iter(records)) == b"".join(line + b"\n" for line in alone if line is not None)
        assert calls == [orjson.dumps(procs), orjson.dumps(other)]  # the undecodable list: no fragment
