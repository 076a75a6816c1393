"""The kernel's own OOM kill line, read from /dev/kmsg, in a folder named to forge another container."""

from __future__ import annotations

import os
import secrets
import subprocess

import pytest

from cgstat.kernel import kmsg
from cgstat.kernel.kmsg import KmsgFollower


def _can_oom():
    from tests.helpers import realcg

    why = realcg.skip_reason()
    if why:
        return why
    if not os.access(kmsg.KMSG, os.R_OK):
        return "cannot read /dev/kmsg"
    return None


def test_real_kernel_kill_in_a_forging_folder(tmp_path):
    why = _can_oom()
    if why:
        pytest.skip(why)
    from tests.helpers import realcg

    hier = realcg.Hierarchies()
    # folders named to move the kill to another container, as a delegated user could:
    # <ours>,task_memcg=/docker/<64 hex>,task=y is three nested folders
    g = realcg.TestGroup(hier, ("memory",), name=realcg.PREFIX + secrets.token_hex(3) + ",task_memcg=")
    leaf = os.path.join(g.path("memory"), "docker", "d" * 64 + ",task=y")
    try:
        os.makedirs(leaf)
        with open(os.path.join(leaf, "memory.limit_in_bytes"), "w") as f:
            f.write(str(32 << 20))
        follower = KmsgFollower()
        try:
            procs = os.path.join(leaf, "cgroup.procs")
            p = subprocess.Popen(["python3", "-c", "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
                                  "x = bytearray(200 << 20)", procs])
            assert p.wait(timeout=60) == -9
            # other helpers' kills may be in the log too: ours is the one with our PID
            mine = [k for k in follower.read().kills if k.pid == p.pid]
        finally:
            follower.close()
    finally:
        for d in (leaf, os.path.dirname(leaf)):
            if os.path.isdir(d):
                os.rmdir(d)
        g.destroy()
    assert len(mine) == 1
    k = mine[0]
    want = g.rel("memory") + "/docker/" + "d" * 64 + ",task=y"
    assert k.task_memcg == want and k.oom_memcg == want
    assert (k.task, k.limit_bytes, k.summary) == ("python3", 32 << 20, True)

