"""A read of a kernel file goes on to its end: seq_file returns a file of many records a
page at a time (mountinfo, cgroup.procs, net/dev), so a short read is not the end."""

import os

from cgstat.kernel import handles, hostfs


def _page_at_a_time(monkeypatch, page=4096):
    """os.read and os.pread return at most `page` bytes, as seq_file does for a file of many
    records (fs/seq_file.c seq_read_iter fills one buffer of whole records)."""
    real_read, real_pread = os.read, os.pread
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, page)))
    monkeypatch.setattr(os, "pread", lambda fd, n, off: real_pread(fd, min(n, page), off))


def test_read_bytes_reads_every_page(tmp_path, monkeypatch):
    body = b"".join(b"%d\n" % (100000 + i) for i in range(3000))  # 21 KB of PIDs
    f = tmp_path / "mountinfo"
    f.write_bytes(body)
    _page_at_a_time(monkeypatch)
    assert hostfs.read_bytes(str(f)) == body
    assert hostfs.read_bytes(str(tmp_path / "mountinfo")).count(b"\n") == 3000


def test_read_bytes_of_an_empty_file(tmp_path):
    f = tmp_path / "empty"
    f.write_bytes(b"")
    assert hostfs.read_bytes(str(f)) == b""


def test_kept_many_records_file_read_to_its_end(tmp_path, monkeypatch):
    body = b"".join(b"%d\n" % (4000000 + i) for i in range(1200))  # 9.6 KB
    f = tmp_path / "cgroup.procs"
    f.write_bytes(body)
    fd = os.open(str(f), os.O_RDONLY)
    try:
        _page_at_a_time(monkeypatch)
        first = os.pread(fd, 65536, 0)
        assert len(first) == 4096  # the double returns a page, as the kernel does
        assert handles._rest_of_records(fd, first, str(f)) == body
    finally:
        os.close(fd)
