"""A full disk under --output: a clear error, no partial line, retried on the next tick."""

import os
import signal
import subprocess
import time

import pytest

from tests.helpers.waiting import wait_for
from tests.unit.test_cli import V2, _lines_whole, _popen

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "cgstat-test-tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_full_disk_never_leaves_a_partial_line_and_recovers(small_disk):
    out = small_disk / "out.jsonl"
    filler = small_disk / "filler"
    proc = _popen("stream", "--interval", "0.1", "--output", str(out), "--host-root", V2, "--all")
    try:
        # Two ticks' lines: the first batch is whole in the file (a batch is cut back to its
        # start when a later chunk of it fails, so one caught half-written may go)
        assert wait_for(lambda: out.exists() and out.read_bytes().count(b"\n") >= 2 * 34, 20, every_s=0.05)
        # fill the disk: the next batches can't fit
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        size_full = out.stat().st_size
        time.sleep(0.5)  # several ticks fail meanwhile
        kept = _lines_whole(out)  # whole lines only, even now
        # whole batches, those written before the disk filled kept, nothing since
        assert len(kept) >= 34 and len(kept) % 34 == 0, len(kept)
        assert out.stat().st_size <= size_full
        filler.unlink()  # space again: the kept batches go out
        assert wait_for(lambda: out.stat().st_size > size_full, 20, every_s=0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert b"No space left on device" in err and b"will retry" in err
    assert err.count(b"cannot write") == 1  # rate-limited, not a warning per tick
    assert b"Traceback" not in err
    records = _lines_whole(out)
    assert len(records) % 34 == 0  # whole batches only
