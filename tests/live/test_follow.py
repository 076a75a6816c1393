"""The walk followed by inotify, and kept descriptors, against real cgroups below our own.

A followed tree must see what a fresh walk sees: children made and removed, a lost event
queue (IN_Q_OVERFLOW: walk again), the watch limit (walk every tick instead); a removed
cgroup's kept descriptors are closed; the descriptor cap holds; a limit written between
two ticks shows in the next one.
"""

import errno
import os
import subprocess

import pytest

from cgstat.kernel import handles, inotify
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.cachekeys import KEYS, SLOW
from cgstat.kernel.handles import KeptFiles
from cgstat.kernel.hierarchy import Hierarchy, detect
from cgstat.kernel.hostfs import HostFS, ReadError
from cgstat.kernel.tree import Folder
from cgstat.pipeline.sampler import Sampler
from tests.helpers.realcg import make_group, realcg_env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.realcg


def _paths(d):
    return {cg.path for cg in d.join()}


def _fresh(layout):
    return _paths(Discoverer(HostFS("/"), layout, follow=False))


def _ours(paths, group):
    """The paths of our group's subtree: other processes make and remove cgroups elsewhere
    on the host between two walks."""
    return {p for p in paths if group.name in p}


@pytest.fixture
def group(make_group):  # noqa: F811
    g = make_group(("cpu", "cpuacct", "memory", "pids", "blkio"))
    made = []

    def mkdir(name):
        for d in g.dirs.values():
            os.mkdir(os.path.join(d, name))
        made.append(name)

    def rmdir(name):
        for d in g.dirs.values():
            os.rmdir(os.path.join(d, name))
        made.remove(name)

    g.mkdir, g.rmdir = mkdir, rmdir
    yield g
    for name in reversed(list(made)):
        for d in g.dirs.values():
            try:
                os.rmdir(os.path.join(d, name))
            except FileNotFoundError:
                pass


def test_followed_tree_sees_children_made_and_removed(group):
    layout = detect(HostFS("/"))
    d = Discoverer(HostFS("/"), layout)
    try:
        assert d.following, "inotify should follow a live cgroupfs"
        first = _paths(d)
        assert group.cgroup in first
        assert d.rescans == len(d.following)
        group.mkdir("a")
        group.mkdir("b")
        os.mkdir(os.path.join(group.dirs["cpuacct"], "a", "deep"))
        try:
            seen = _paths(d)
            assert {group.cgroup + "/a", group.cgroup + "/b", group.cgroup + "/a/deep"} <= seen
            assert d.rescans == len(d.following)  # events, not a walk
            assert _ours(seen, group) == _ours(_fresh(layout), group)
        finally:
            os.rmdir(os.path.join(group.dirs["cpuacct"], "a", "deep"))
        group.rmdir("a")
        seen = _paths(d)
        assert group.cgroup + "/a" not in seen and group.cgroup + "/a/deep" not in seen
        assert group.cgroup + "/b" in seen
        assert _ours(seen, group) == _ours(_fresh(layout), group)
    finally:
        d.close()


def test_periodic_rescans_take_turns(group, monkeypatch):
    """The safety-net walk of each followed hierarchy comes on its own tick, spread over
    rescan_s, not all on one; a folder made unseen by inotify is found on its hierarchy's turn."""
    import time

    from cgstat.kernel import rescan

    now = [5000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    layout = detect(HostFS("/"))
    d = Discoverer(HostFS("/"), layout, rescan_s=60.0)
    try:
        _paths(d)
        n = len(d.following)
        assert n >= 1 and d.rescans == n
        walked = []
        real = rescan.rescan
        monkeypatch.setattr(rescan, "rescan", lambda follower, f: walked.append(f.h) or real(follower, f))
        for step in range(1, n + 1):
            now[0] = 5000.0 + 60.0 * step / n + 0.01
            _paths(d)
            assert len(walked) == step  # one more hierarchy each turn
        assert sorted(h.name for h in walked) == sorted(d.following)  # each once in rescan_s
        # A folder made in the first hierarchy to take its turn, with the watch on its
        # parent removed (events lost): not seen until that hierarchy's next turn.
        h = walked[0]
        parent = next(p for p in group.dirs.values() if p.startswith(h.mount_dir + "/"))
        path = parent[len(h.mount_dir):] + "/unseen"
        for wd, folder in list(d.follower.wd.items()):
            if folder.hierarchy is h and folder.path == parent[len(h.mount_dir):]:
                d.follower.inotify.rm_watch(wd)
        os.mkdir(os.path.join(parent, "unseen"))
        try:
            assert path not in _paths(d)
            walked.clear()
            now[0] = 5000.0 + 60.0 / n + 60.0 + 0.02
            assert path in _paths(d)
            assert walked == [h]
        finally:
            os.rmdir(os.path.join(parent, "unseen"))
    finally:
        d.close()


def test_overflow_walks_again(group, monkeypatch):
    layout = detect(HostFS("/"))
    d = Discoverer(HostFS("/"), layout)
    try:
        _paths(d)
        rescans = d.rescans
        # Events lost: stop watching the group's folders, make a child, then the kernel's
        # IN_Q_OVERFLOW. The next join must walk again and find the child.
        for wd, folder in list(d.follower.wd.items()):
            path = folder.path
            if path == group.rel(folder.hierarchy.name.split(",")[0]) or path.endswith("/" + group.name):
                d.follower.inotify.rm_watch(wd)
        group.mkdir("lost")
        real = d.follower.inotify.events
        monkeypatch.setattr(d.follower.inotify, "events",
                            lambda: real() + inotify.parse_events(inotify.pack_event(-1, inotify.IN_Q_OVERFLOW)))
        seen = _paths(d)
        assert group.cgroup + "/lost" in seen
        assert d.rescans == rescans + len(d.following)
        assert _ours(seen, group) == _ours(_fresh(layout), group)
    finally:
        d.close()


def test_watch_limit_falls_back_to_walking(group, monkeypatch):
    def refuse(self, path, mask=inotify.FOLDER_MASK):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(inotify.Inotify, "add_watch", refuse)
    warned = []
    layout = detect(HostFS("/"))
    d = Discoverer(HostFS("/"), layout, warn=lambda k, m: warned.append(k))
    try:
        assert group.cgroup in _paths(d)
        assert d.following == [] and warned
        group.mkdir("c")
        assert group.cgroup + "/c" in _paths(d)  # walked, not followed
    finally:
        d.close()


def test_removed_cgroup_descriptors_are_closed(group):
    group.mkdir("gone")
    s = Sampler(match=group.name, gpu=False)
    try:
        s.tick()
        recs = {r["cgroup"] for r in s.tick()}
        assert group.cgroup + "/gone" in recs
        kept = [e for _m, p, e in s.kept.entries() if p.endswith("/" + group.name + "/gone")]
        assert len(kept) == len(group.dirs) and all(e.fds() for e in kept)  # one per hierarchy
        fds = [fd for e in kept for fd in e.fds()]
        assert all(os.readlink(f"/proc/self/fd/{fd}").split("/")[-2] == "gone" for fd in fds)
        group.rmdir("gone")
        recs = {r["cgroup"] for r in s.tick()}
        assert group.cgroup + "/gone" not in recs
        assert not [p for _m, p, _e in s.kept.entries() if p.endswith("/" + group.name + "/gone")]
        for fd in fds:  # closed (or reused by something else, not pointing at the old files)
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            assert "/" + group.name + "/gone/" not in target
    finally:
        s.close()
        s.discoverer.close()


def test_limit_written_between_ticks_is_read_next_tick(group):
    s = Sampler(match=group.name, gpu=False)
    try:
        group.set_pids_max(50)
        s.tick()
        rec = [r for r in s.tick() if r["cgroup"] == group.cgroup][0]
        assert rec["pids"]["limit"] == 50
        group.set_pids_max(70)
        rec = [r for r in s.tick() if r["cgroup"] == group.cgroup][0]
        assert rec["pids"]["limit"] == 70
        group.set("cpu", "cpu.cfs_period_us", 100000)
        group.set("cpu", "cpu.cfs_quota_us", 50000)
        rec = [r for r in s.tick() if r["cgroup"] == group.cgroup][0]
        assert rec["cpu"]["limit_cores"] == 0.5
        group.set("cpu", "cpu.cfs_quota_us", -1)
        rec = [r for r in s.tick() if r["cgroup"] == group.cgroup][0]
        assert rec["cpu"]["limit_cores"] is None
        # the v1 cpu settings and io limits are kept as one value each (cachekeys.Derived):
        # a write to any one of their files is seen the next tick
        group.set("cpu", "cpu.shares", 512)
        rec = [r for r in s.tick() if r["cgroup"] == group.cgroup][0]
        assert (rec["cpu"]["shares"], rec["cpu"]["weight"], rec["cpu"]["limit_cores"]) == (512, 50, None)
        disk = _a_disk()
        if disk is not None:
            group.set("blkio", "blkio.throttle.write_iops_device", "%s 300" % disk)
            try:
                rec = [r for r in s.tick() if r["cgroup"] == group.cgroup][0]
                assert [(d["device"], d["write_ops_per_second"], d["read_bytes_per_second"])
                        for d in rec["io"]["limits"]] == [(disk, 300, None)]
            finally:
                group.set("blkio", "blkio.throttle.write_iops_device", "%s 0" % disk)  # the rule removed
            rec = [r for r in s.tick() if r["cgroup"] == group.cgroup][0]
            assert rec["io"]["limits"] == []
    finally:
        s.close()
        s.discoverer.close()


def _a_disk():
    """major:minor of a whole disk of this machine (blk-throttle takes rules for disks), or None."""
    for name in sorted(os.listdir("/sys/block")):
        if name.startswith(("loop", "ram", "zram")):
            continue
        try:
            with open("/sys/block/%s/dev" % name) as f:
                return f.read().strip()
        except OSError:
            continue
    return None


def test_descriptor_cap(group):
    files = KeptFiles(cap=2)
    d = group.dirs["memory"]
    names = ["memory.usage_in_bytes", "memory.stat", "memory.oom_control"]
    folder = Folder(Hierarchy("memory", 1, frozenset({"memory"}), d), "/", d, os.stat(d).st_ino, frozenset(names))
    for _ in range(3):
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                want_prefix = f.read()[:10]
            got = files.read(folder, name)
            if name != "memory.usage_in_bytes":
                assert got[:10] == want_prefix
    assert files.count == 2 and files.overflowed == 3
    assert files.pinned_bytes() == 2 * handles.PIN_ESTIMATE
    files.close_all()
    assert files.count == 0


def test_a_file_read_the_same_is_not_parsed_again(group):
    """Through a kept descriptor, bytes equal to the last read's give the value made of
    them then; new bytes, another parser or a parser that refuses the text parse again."""
    d = group.dirs["pids"]
    folder = Folder(Hierarchy("pids", 1, frozenset({"pids"}), d), "/", d, os.stat(d).st_ino,
                    frozenset({"pids.current"}))
    files = KeptFiles(cap=8)
    calls = []

    def count(text):
        calls.append(text)
        return [int(text)]

    try:
        files.read_parsed(folder, "pids.current", count)  # opened: kept from now on
        second = files.read_parsed(folder, "pids.current", count)
        third = files.read_parsed(folder, "pids.current", count)
        assert second == [0] and third is second and calls == ["0\n", "0\n"]
        proc = group.start(["sleep", "30"])
        try:
            assert files.read_parsed(folder, "pids.current", count) == [1] and len(calls) == 3
            assert files.read_parsed(folder, "pids.current", lambda text: int(text) + 10) == 11
        finally:
            proc.kill()
            proc.wait()

        def refuse(text):
            calls.append(text)
            raise ValueError("no")

        for _ in range(2):
            with pytest.raises(ValueError):
                files.read_parsed(folder, "pids.current", refuse)
        assert len(calls) == 5
    finally:
        files.close_all()


def test_files_that_read_the_same_share_one_value(group):
    """Two cgroups whose pids.current read the same bytes get one value, parsed once; once
    one reads other bytes it gets a value of its own."""
    d = group.dirs["pids"]
    group.mkdir("a")
    group.mkdir("b")
    h = Hierarchy("pids", 1, frozenset({"pids"}), d)
    folders = [Folder(h, "/" + n, os.path.join(d, n), os.stat(os.path.join(d, n)).st_ino,
                      frozenset({"pids.current"})) for n in ("a", "b")]
    files = KeptFiles(cap=8)
    calls = []

    def count(text):
        calls.append(text)
        return [int(text)]

    try:
        for f in folders:
            files.read_parsed(f, "pids.current", count)  # opened: kept from now on
        a, b = (files.read_parsed(f, "pids.current", count) for f in folders)
        assert a == [0] and b is a and calls == ["0\n", "0\n", "0\n"]
        proc = subprocess.Popen(["sleep", "30"])
        try:
            with open(os.path.join(d, "b", "cgroup.procs"), "w") as procs:
                procs.write(str(proc.pid))
            a2, b2 = (files.read_parsed(f, "pids.current", count) for f in folders)
            assert a2 is a and b2 == [1] and len(calls) == 4
        finally:
            proc.kill()
            proc.wait()
    finally:
        files.close_all()


def test_a_write_to_any_file_of_a_kept_setting_drops_it(tmp_path):
    """The values made from several slow files (cachekeys.Derived) go with a write to any of
    them, and only then; the folder's other kept values stay."""
    from cgstat.kernel.controllers.memory import SETTINGS_V2

    h = Hierarchy("unified", 0, frozenset({"memory"}), str(tmp_path))
    folder = Folder(h, "/a", str(tmp_path), 7, frozenset({"memory.high", "memory.max"}), watched=True)
    files = KeptFiles(cap=8)
    for made_from in SETTINGS_V2.files:
        files.keep(folder, SETTINGS_V2, (1, 2, 3, 4, True))
        files.keep(folder, "memory.max", 5)
        files.modified(folder, "memory.max")  # not one of its files
        assert files.slow_value(folder, SETTINGS_V2) == (1, 2, 3, 4, True)
        files.keep(folder, "memory.max", 5)
        files.modified(folder, made_from)
        assert files.slow_value(folder, SETTINGS_V2) is handles.MISSING
        assert files.slow_value(folder, "memory.max") == 5
    files.modified(folder, "memory.max")  # its last value: the folder's entry goes
    assert list(files.entries()) == []


def test_each_kept_setting_is_made_from_the_files_it_is_dropped_with():
    from cgstat.kernel.controllers import cpu, io, memory

    class Spy:  # a FileReader that only says which files are asked for
        def __init__(self):
            self.names, self.problems = [], []

        def get(self, folder, name, parser):
            self.names.append(name)

        opt = get

    for kept_as, make in ((cpu.CPU_SETTINGS_V1, cpu._settings_v1), (io.LIMITS_V1, io._limits_v1),
                          (memory.SETTINGS_V2, memory._settings_v2)):
        spy = Spy()
        make(None, spy)
        assert sorted(spy.names) == sorted(kept_as.files), kept_as
    assert set(KEYS.derived_keys()) == {cpu.CPU_SETTINGS_V1, io.LIMITS_V1, memory.SETTINGS_V2}


def test_inotify_event_parsing():
    data = inotify.pack_event(3, inotify.IN_CREATE | inotify.IN_ISDIR, b"abc") + \
        inotify.pack_event(-1, inotify.IN_Q_OVERFLOW)
    assert inotify.parse_events(data) == [(3, inotify.IN_CREATE | inotify.IN_ISDIR, b"abc"),
                                          (-1, inotify.IN_Q_OVERFLOW, b"")]


def test_processes_of_an_empty_cgroup_without_reading_cgroup_procs(group):
    """pids.current 0 (no task here or below) means an empty cgroup.procs: it is not read,
    and a descriptor kept for it while the cgroup had members is closed."""
    s = Sampler(match=group.name, gpu=False)

    def procs_fd():
        for mount, path, entry in s.kept.entries():
            if mount + path == group.dirs["pids"]:
                return entry.kept.get("cgroup.procs")
        return None

    def record():
        return [r for r in s.tick() if r["cgroup"] == group.cgroup][0]

    try:
        s.tick()
        rec = record()
        assert rec["pids"]["current"] == 0 and rec["pids"]["processes"] == 0
        assert procs_fd() is None
        proc = group.start(["sleep", "30"])
        rec = record()
        assert rec["pids"]["current"] == 1 and rec["pids"]["processes"] == 1
        assert isinstance(procs_fd(), int)
        proc.kill()
        rec = record()
        assert rec["pids"]["current"] == 0 and rec["pids"]["processes"] == 0
        assert procs_fd() is None
        assert not [p for p in rec["errors"] if p["source"] == "cgroup.procs"]
        # limit files are read once a minute or on IN_MODIFY: never through a kept slot
        kept_names = [os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[1]
                      for _m, _p, e in s.kept.entries() for fd in e.fds()]
        assert kept_names and not set(kept_names) & SLOW
        assert s.kept.count == sum(len(e.fds()) for _m, _p, e in s.kept.entries())
    finally:
        s.close()
        s.discoverer.close()


def test_reads_past_the_cap(group):
    """Past the cap a file is opened relative to the mount point's descriptor, or by its full
    path for a name that is not printable UTF-8; close_all() closes that descriptor too."""
    mount = group.hier.mounts["memory"]
    rel = group.rel("memory")
    files = KeptFiles(cap=0)
    h = Hierarchy("memory", 1, frozenset({"memory"}), mount)
    d = group.dirs["memory"]
    folder = Folder(h, rel, d, os.stat(d).st_ino, frozenset({"cgroup.clone_children"}))
    assert folder.mount_relative() == rel[1:]
    hostile = os.path.join(os.fsencode(d), b"bad\xff")
    os.mkdir(hostile)
    try:
        local = os.fsdecode(hostile)
        odd = Folder(h, rel + "/bad\\xff", local, os.stat(hostile).st_ino, frozenset({"cgroup.clone_children"}))
        assert odd.mount_relative() is None and odd.local == local
        for f in (folder, odd):
            with open(os.path.join(f.local, "cgroup.clone_children"), "rb") as fh:
                assert files.read(f, "cgroup.clone_children") == fh.read() == b"0\n"
        gone = Folder(h, rel + "/nothing", d + "/nothing", 1, frozenset({"cgroup.clone_children"}))
        with pytest.raises(ReadError) as err:
            files.read(gone, "cgroup.clone_children")
        assert err.value.code == "gone" and err.value.path == d + "/nothing/cgroup.clone_children"
    finally:
        os.rmdir(hostile)
    assert files.count == 0 and files.overflowed == 3
    [(dir_fd, _checked)] = files._dirs.values()
    assert os.path.samestat(os.fstat(dir_fd), os.stat(mount))
    files.close_all()
    with pytest.raises(OSError):
        os.fstat(dir_fd)


def test_rejoin_keeps_unchanged_cgroups(group):
    """A folder made anywhere joins everything again; the cgroups whose folders did not change
    are the same objects (what a reader derived from them stays)."""
    layout = detect(HostFS("/"))
    d = Discoverer(HostFS("/"), layout)
    try:
        before = {cg.path: cg for cg in d.join()}
        group.mkdir("new")
        after = {cg.path: cg for cg in d.join()}
        assert group.cgroup + "/new" in after and group.cgroup + "/new" not in before
        assert after[group.cgroup] is before[group.cgroup]
        assert after[group.cgroup + "/new"].folders[0].path == group.cgroup + "/new"
    finally:
        d.close()
