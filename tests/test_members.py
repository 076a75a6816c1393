"""Who is a member of each cgroup, for its network namespace (naming/workload.py member_pids):
a cgroup found empty is looked at again later, and not every empty cgroup on the same tick."""

import os

import synth
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.hierarchy import detect
from cgstat.kernel.hostfs import HostFS
from cgstat.naming import workload
from cgstat.naming.workload import Namer, recheck_after_s


def test_recheck_delays_spread_between_5_and_15_seconds():
    delays = [recheck_after_s(inode) for inode in range(4096, 4096 + 1000)]
    assert min(delays) >= 5.0 and max(delays) < 15.0
    # consecutive inodes (cgroupfs numbers new folders in order) land in every second
    per_second = [sum(1 for d in delays if s <= d < s + 1) for s in range(5, 15)]
    assert min(per_second) >= 90 and max(per_second) <= 110, per_second
    assert recheck_after_s(4242) == recheck_after_s(4242)  # fixed per folder


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
    real = workload._first_member
    monkeypatch.setattr(workload, "_first_member", lambda local: looked.append(local) or real(local))
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
