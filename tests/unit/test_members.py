"""Cgroups found without processes: asked again for members later (naming/workload.py for
network namespaces, kernel/membership.py for the join across hierarchies), each after its
own delay, not every empty cgroup on the same tick, and without a rejoin while they stay
empty."""

import os
import time

from cgstat.kernel import discover, membership
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.hierarchy import detect
from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.membership import recheck_after_s
from cgstat.naming import workload
from cgstat.naming.workload import Namer
from tests.helpers import synth


def test_recheck_delays_spread_between_5_and_15_seconds():
    delays = [recheck_after_s(inode) for inode in range(4096, 4096 + 1000)]
    assert min(delays) >= 5.0 and max(delays) < 15.0
    # consecutive inodes (cgroupfs numbers new folders in order) land in every second
    per_second = [sum(1 for d in delays if s <= d < s + 1) for s in range(5, 15)]
    assert min(per_second) >= 90 and max(per_second) <= 110, per_second
    # fixed per folder, in every process and run (its inode hashed, no random seed):
    # 10 s x (0.5 + (inode x 2654435761 mod 1024) / 1024)
    assert [recheck_after_s(inode) for inode in (4096, 4242, 4243)] == [5.0, 12.36328125, 6.591796875]


def test_empty_cgroups_are_looked_at_again_a_share_at_a_time(tmp_path, monkeypatch):
    root = str(tmp_path)
    synth.v2_host(root)
    for i in range(200):
        synth.v2_cgroup(root, f"/idle.slice/idle-{i}.scope", {"cgroup.procs": ""})
    synth.v2_cgroup(root, "/busy.slice/busy.scope", {"cgroup.procs": "4242\n"})
    os.makedirs(os.path.join(root, "proc/4242"))
    fs = HostFS(root)
    layout = detect(fs)
    cgroups = [cg for cg in Discoverer(fs, layout, follow=False).join() if cg.path.endswith(".scope")]
    assert len(cgroups) == 201
    namer = Namer(fs, layout)

    looked = []
    real = workload._members_below
    monkeypatch.setattr(workload, "_members_below", lambda local: looked.append(local) or real(local))
    now = [1000.0]
    monkeypatch.setattr(workload.time, "monotonic", lambda: now[0])

    def tick_at(t):
        now[0] = 1000.0 + t
        looked.clear()
        members = namer.member_pids(cgroups)
        assert members["/busy.slice/busy.scope"] == [4242]
        assert sum(1 for pids in members.values() if pids == []) == 200
        return len(looked)

    assert tick_at(0) == 201  # every cgroup, once
    assert tick_at(1) == 0  # the busy one's member is kept while it lives; the empty ones wait
    # 7 s on, only the empty cgroups whose delay (5 to 15 s) has passed: ~20 %, not all
    assert 10 <= tick_at(7) <= 70
    # by 15 s every empty one has been looked at again, at least once
    again = set()
    for t in (7, 7.5, 8, 9, 10, 11, 12, 13, 14, 15):
        tick_at(t)
        again.update(looked)
    assert len(again) == 200


def _v1_nested_memory(root):
    """A v1 host where /job's memory folder sits at /nested/job (the layout of this
    machine's own memory cgroup), beside another /other/job: only a member process can
    tell which of the two is /job's."""
    synth.v1_host(root)
    synth.v1_cgroup(root, "/job")
    mem = os.path.join(root, "sys/fs/cgroup/memory")
    os.makedirs(os.path.join(mem, "nested"))
    os.makedirs(os.path.join(mem, "other/job"))
    os.rename(os.path.join(mem, "job"), os.path.join(mem, "nested/job"))


def _memory_of(cgroups, path):
    cg = next(cg for cg in cgroups if cg.path == path)
    return next((f.path for f in cg.folders if f.hierarchy.name == "memory"), None)


def test_join_asks_empty_cgroups_again_without_rejoining_until_one_has_members(tmp_path, monkeypatch):
    root = str(tmp_path)
    _v1_nested_memory(root)
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    fs = HostFS(root)
    disc = Discoverer(fs, detect(fs), follow=False)
    joins = []
    real_join = discover.join_trees
    monkeypatch.setattr(discover, "join_trees", lambda *a: joins.append(now[0]) or real_join(*a))
    asked = []
    real_members = membership.member_pids
    monkeypatch.setattr(membership, "member_pids", lambda local: asked.append(local) or real_members(local))

    cgroups = disc.join()
    assert joins == [1000.0] and _memory_of(cgroups, "/job") is None  # empty, two of its name: no join
    job = next(cg for cg in cgroups if cg.path == "/job")
    anchor = next(f for f in job.folders if f.hierarchy is disc.layout.anchor)
    job_delay = recheck_after_s(anchor.inode)

    # Still empty when due: asked again, and the cgroups come from the last join.
    now[0] += 15.0
    asked.clear()
    assert [cg.path for cg in disc.join()] == [cg.path for cg in cgroups]
    assert joins == [1000.0] and any(a.endswith("/job") for a in asked)

    # A process arrives: seen once /job is due again, then joined across the hierarchies.
    for d in ("cpu,cpuacct", "blkio", "pids"):
        synth.write(os.path.join(root, "sys/fs/cgroup", d, "job/cgroup.procs"), "4242\n")
    synth.write(os.path.join(root, "proc/4242/cgroup"),
                "4:pids:/job\n3:blkio:/job\n2:memory:/nested/job\n1:cpu,cpuacct:/job\n")
    now[0] += job_delay / 2
    assert _memory_of(disc.join(), "/job") is None and len(joins) == 1  # not due yet
    now[0] += job_delay
    assert _memory_of(disc.join(), "/job") == "/nested/job"
    assert len(joins) == 2
