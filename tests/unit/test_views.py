"""The view helpers every output shares: time stamps read by one rule, byte sizes, finite
numbers, the atomic file."""

import os

import pytest

from cgstat.atomic import AtomicFile, write_atomic
from cgstat.units import finite
from cgstat.timestamps import parse_ts, rfc3339, ts_millis
from cgstat.units import binary_size, bytes_size, human_size, mib


@pytest.mark.parametrize("ts, seconds, millis", [
    ("2026-11-29T20:10:12.807Z", 1795983012.807, 1795983012807),
    ("2026-11-29T20:10:12Z", 1795983012.0, 1795983012000),
    ("2026-11-29T20:10:12.8Z", 1795983012.8, 1795983012800),
    ("2026-11-29T20:10:12.807123Z", 1795983012.807123, 1795983012807),
    ("2026-13-29T20:10:12.807Z", None, None),  # no month 13
    ("2026-11-29T20:10:12.807", None, None),  # not UTC
    ("2026-11-29T20:10:12.8x7Z", None, None),
    ("2026-11-29T20:10:12.Z", None, None),
    ("2026-11-29 20:10:12.807Z", None, None),
    (None, None, None), (12, None, None),
])
def test_a_stamp_is_read_by_one_rule(ts, seconds, millis):
    assert parse_ts(ts) == (pytest.approx(seconds) if seconds is not None else None)
    assert ts_millis(ts) == millis


def test_stamps_read_back_what_rfc3339_wrote():
    assert rfc3339(1795983012.5) == "2026-11-29T20:10:12.500Z"
    assert ts_millis(rfc3339(1795983012.5)) == 1795983012500


def test_byte_sizes():
    assert [bytes_size(v) for v in (None, 0, 64 << 20, 25847808)] == ["--", "0B", "64MiB", "24.65MiB"]
    assert [human_size(v) for v in (None, 0, 1234567)] == ["--", "0B", "1.23MB"]
    assert [binary_size(v) for v in (None, 512, 1536, 3 << 30, -2048)] == ["–", "512 B", "1.5 KiB", "3.0 GiB",
                                                                           "-2.0 KiB"]
    assert [mib(v) for v in (None, 100 << 20)] == ["unknown", "100.0 MiB"]


def test_finite_numbers():
    assert [finite(v) for v in (1, 2.5, 0, None, True, float("nan"), float("inf"), "1")] == [
        1, 2.5, 0, None, None, None, None, None]


def test_the_atomic_file_is_whole_or_untouched(tmp_path):
    path = str(tmp_path / "f")
    write_atomic(path, b"one", ".t-")
    assert open(path, "rb").read() == b"one" and oct(os.stat(path).st_mode & 0o777) == "0o600"
    f = AtomicFile(path, ".t-").prepare()
    f.discard()
    assert open(path, "rb").read() == b"one" and os.listdir(str(tmp_path)) == ["f"]
    os.mkdir(str(tmp_path / "d"))
    with pytest.raises(OSError):  # renaming onto a folder fails: the temporary file goes
        write_atomic(str(tmp_path / "d"), b"two", ".t-")
    assert sorted(os.listdir(str(tmp_path))) == ["d", "f"]
