"""Where a long run stopped reading the kernel log (cgstat/pipeline/logplace.py): kept per
boot, replaced whole, and a file that isn't one (another boot, a link, junk) says nothing."""
from __future__ import annotations

import json
import os

from cgstat.pipeline.logplace import LogPlace


def test_the_next_run_of_the_same_boot_resumes_after_the_saved_record(tmp_path):
    path = str(tmp_path / "kernel-log.json")
    assert LogPlace(path, "boot-a").load() is None  # the first run: its start time counts
    first = LogPlace(path, "boot-a")
    assert first.save(1234) is None
    assert json.loads(open(path).read()) == {"boot_id": "boot-a", "seq": 1234}
    assert LogPlace(path, "boot-a").load() == 1234
    # another boot's numbers mean nothing here
    assert LogPlace(path, "boot-b").load() is None


def test_an_unchanged_place_is_not_written_again(tmp_path):
    path = str(tmp_path / "kernel-log.json")
    p = LogPlace(path, "boot-a")
    p.save(7)
    os.utime(path, (1, 1))
    assert p.save(7) is None and p.save(None) is None
    assert os.stat(path).st_mtime == 1
    p.save(8)
    assert LogPlace(path, "boot-a").load() == 8


def test_what_is_not_a_place_is_none(tmp_path):
    path = tmp_path / "kernel-log.json"
    for data in (b"", b"{", b"[]", b'{"boot_id": "boot-a", "seq": -1}', b'{"boot_id": "boot-a", "seq": true}',
                 b'{"boot_id": "boot-a", "seq": "9"}', b" " * 5000 + b'{"boot_id": "boot-a", "seq": 9}',
                 b"\xff\xfe"):
        path.write_bytes(data)
        assert LogPlace(str(path), "boot-a").load() is None, data
    # a link is not followed (someone else's file in its place)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"boot_id": "boot-a", "seq": 9}))
    path.unlink()
    path.symlink_to(target)
    assert LogPlace(str(path), "boot-a").load() is None
    # no boot id known: nothing kept, nothing trusted
    assert LogPlace(str(target), None).load() is None
    assert LogPlace(str(tmp_path / "x.json"), None).save(3) is None and not (tmp_path / "x.json").exists()


def test_a_place_that_cannot_be_written_says_why(tmp_path):
    why = LogPlace(str(tmp_path / "missing" / "kernel-log.json"), "boot-a").save(5)
    assert why is not None and "cannot write" in why
