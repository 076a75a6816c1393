"""A real cgroup with a non-UTF-8 name, read end to end."""

import os
import re
import subprocess
import time

import pytest

from tests.helpers.contract import validate
from tests.unit.test_hostile_names import _assert_no_raw_controls, _records, _run


@pytest.mark.realcg
def test_real_cgroup_with_a_non_utf8_name(make_group):
    group = make_group(("cpu", "cpuacct", "memory", "pids", "blkio"))
    leaf = b"bad\xff\x1b[2J"
    made = []
    sleeper = None
    try:
        for d in group.dirs.values():
            child = os.path.join(os.fsencode(d), leaf)
            os.mkdir(child)
            made.append(child)
        procs = [os.path.join(c, b"cgroup.procs") for c in made]
        sleeper = subprocess.Popen([b"sh", b"-c", b'for f in "$@"; do echo $$ > "$f"; done; exec sleep 60',
                                    b"sh"] + procs, stdout=subprocess.PIPE)
        # wait until the shell has joined every hierarchy (it execs sleep afterwards)
        for _ in range(200):
            if all(str(sleeper.pid) in open(p, "rb").read().decode().split() for p in procs):
                break
            time.sleep(0.02)
        code, out, err = _run("once", "--window", "0", "--match", re.escape(group.name))
        assert code == 0, err
        _assert_no_raw_controls(out, "stdout")
        _assert_no_raw_controls(err, "stderr")
        by_path = {r["cgroup"]: r for r in _records(out)}
        want = group.cgroup + "/bad\\xff\x1b[2J"
        rec = by_path[want]
        validate(rec)
        # joined through /proc/<pid>/cgroup: memory sits at another (nested) path here
        assert rec["paths"]["memory"] == group.rel("memory") + "/bad\\xff\x1b[2J"
        assert rec["memory"]["usage_bytes"] is not None and rec["pids"]["current"] == 1
        code, out, err = _run("pid", str(sleeper.pid))
        assert code == 0, err
        (found,) = _records(out)
        assert found["cgroup"] == want and found["paths"]["memory"] == rec["paths"]["memory"]
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        for child in reversed(made):
            for _ in range(100):
                try:
                    os.rmdir(child)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)

