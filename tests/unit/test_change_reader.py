"""kernel/changes.py on a copy of a recorded v2 tree read through kept descriptors (as on a
live cgroupfs; the files are rewritten in place, so a kept descriptor reads the new bytes):
a cgroup whose signal files read the same keeps its last Sample with the new time, one whose
signal moved, that is marked, new or due is read in full."""

import os
import shutil

import pytest

from cgstat.kernel import changes, handles
from cgstat.kernel.changes import ChangeReader, default_full_every_s
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.hierarchy import detect
from cgstat.kernel.hostfs import HostFS
from tests.helpers.contract import ROOT

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
DOCKER = "/system.slice/docker-51136075708308f501039befdd7fe7a087dbb515f5c2380ae7061768d5ac3f65.scope"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    root = str(tmp_path / "root")
    shutil.copytree(V2, root, symlinks=True)
    monkeypatch.setattr(handles, "is_cgroupfs", lambda path: True)  # read as a live cgroupfs is
    fs = HostFS(root)
    layout = detect(fs)
    kept = handles.KeptFiles(cap=10000, enabled=True)
    disc = Discoverer(fs, layout, follow=False, kept=kept)
    (cg,) = [c for c in disc.join() if c.path == DOCKER]
    reader = ChangeReader(layout, kept, full_every_s=10.0)
    yield reader, cg, os.path.join(root, "sys/fs/cgroup" + DOCKER)
    kept.close_all()


@pytest.fixture
def family(tree):
    """The tree's reader with the docker scope's parent, /system.slice, and their folders."""
    reader, cg, folder = tree
    disc = Discoverer(HostFS(folder.split("/sys/fs/cgroup")[0]), reader.layout, follow=False, kept=reader.kept)
    (parent,) = [c for c in disc.join() if c.path == "/system.slice"]
    (child,) = [c for c in disc.join() if c.path == DOCKER]
    return reader, parent, child, os.path.dirname(folder), folder


def _tick(reader, cgroups, t):
    """One tick of the sampler's: begin, every cgroup's still() (for the network), read."""
    reader.begin_tick()
    still = [reader.still(cg) for cg in cgroups]
    samples = [reader.read(cg, t, 1000.0 + t) for cg in cgroups]
    reader.end_tick()
    return still, samples


def _rewrite(folder, name, old, new):
    path = os.path.join(folder, name)
    with open(path) as f:
        text = f.read()
    assert old in text
    with open(path, "r+") as f:  # in place: the kept descriptor reads the new bytes
        f.write(text.replace(old, new))
        f.truncate()


def test_a_still_signal_keeps_the_last_sample_with_the_new_time(tree):
    reader, cg, folder = tree
    first = reader.read(cg, 100.0, 1000.0)
    reader.end_tick()
    _rewrite(folder, "memory.stat", "anon ", "anon 1")  # not a signal file: not looked at
    again = reader.read(cg, 101.0, 1001.0)
    reader.end_tick()
    assert (reader.full_reads, reader.reused) == (1, 1)
    assert again == first._replace(time_s=101.0, wall_s=1001.0)
    # the CPU moved: read in full, the memory.stat change with it
    _rewrite(folder, "cpu.stat", "usage_usec ", "usage_usec 9")
    moved = reader.read(cg, 102.0, 1002.0)
    assert reader.full_reads == 2
    assert moved.cpu.usage_seconds_total != first.cpu.usage_seconds_total
    assert moved.memory.anon_bytes != first.memory.anon_bytes


def test_marked_new_and_due_cgroups_are_read_in_full(tree):
    reader, cg, folder = tree
    reader.read(cg, 100.0, 1000.0)
    reader.end_tick()
    reader.mark([cg.path])  # an event of its (a kill, memory.events)
    reader.read(cg, 100.5, 1000.5)
    reader.end_tick()
    reader.read(cg, 101.0, 1001.0)
    reader.end_tick()
    assert (reader.full_reads, reader.reused) == (2, 1)
    # due: never more than full_every_s after the last full read
    reader.read(cg, 111.0, 1011.0)
    reader.end_tick()
    assert reader.full_reads == 3
    # a cgroup not read in a tick is forgotten: read in full when it comes back
    reader.end_tick()
    reader.read(cg, 111.5, 1011.5)
    assert reader.full_reads == 4


def test_full_reads_spread_over_the_period_and_never_wait_longer():
    dues = [changes._next_due("/c%d" % i, 100.0, 10.0) for i in range(1000)]
    assert all(100.0 < d <= 110.0 for d in dues)
    buckets = {int(d - 100.0) for d in dues}
    assert buckets == set(range(10))  # every second of the period has some
    assert changes._next_due("/c1", 105.0, 10.0) - changes._next_due("/c1", 95.0, 10.0) == 10.0


def test_full_read_every_zero_reads_everything(tree):
    reader, cg, _folder = tree
    reader.full_every_s = 0.0
    for t in (100.0, 101.0):
        reader.read(cg, t, t)
        reader.end_tick()
    assert (reader.full_reads, reader.reused) == (0, 0)  # read_cgroup straight, nothing kept


def test_the_period_from_the_environment(monkeypatch):
    monkeypatch.setenv("CGSTAT_FULL_READ_EVERY_S", "2.5")
    assert default_full_every_s() == 2.5
    for bad in ("x", "-1", "inf", "nan"):
        monkeypatch.setenv("CGSTAT_FULL_READ_EVERY_S", bad)
        assert default_full_every_s() == changes.DEFAULT_FULL_EVERY_S == 20.0


def test_an_unchanged_cgroups_record_is_known_to_equal_its_last(tree):
    """pipeline/same.py: a reused reading with the same rates, workload and network is the
    same record but for its time; a moved one, or other rates, is not."""
    from cgstat.pipeline.rates import NO_RATES
    from cgstat.pipeline.same import SameRecords

    reader, cg, folder = tree
    same = SameRecords()
    seen = []
    busy = NO_RATES._replace(cpu_percent=5.0)
    for t, rates in ((1.0, NO_RATES), (2.0, NO_RATES._replace(interval_s=1.0)), (3.0, busy),
                     (4.0, busy._replace(interval_s=2.0))):
        if t == 4.0:
            _rewrite(folder, "cpu.stat", "usage_usec ", "usage_usec 9")
        sample = reader.read(cg, 100.0 + t, 1000.0 + t)
        reader.end_tick()
        seen.append(same.made(sample, rates, None, None, same.last_of(sample, None, None)))
        same.end_tick()
    assert seen == [False, True, False, False] and same.same == 1


def test_a_still_parent_spares_its_childrens_signal_reads(family):
    """The signal is hierarchical: a parent that reads as at last tick means nothing moved
    below it; a moved parent has its children read their own."""
    reader, parent, child, parent_dir, child_dir = family
    _tick(reader, [parent, child], 100.0)
    assert (reader.full_reads, reader.spared) == (2, 0)
    _rewrite(child_dir, "memory.stat", "anon ", "anon 1")  # not a signal file
    still, samples = _tick(reader, [parent, child], 101.0)
    assert still == [True, True] and (reader.reused, reader.spared) == (2, 1)
    # the child's CPU moved, and with it its parent's (the kernel's counters are hierarchical)
    _rewrite(child_dir, "cpu.stat", "usage_usec ", "usage_usec 9")
    _rewrite(parent_dir, "cpu.stat", "usage_usec ", "usage_usec 9")
    still, samples = _tick(reader, [parent, child], 102.0)
    assert still == [False, False] and reader.spared == 1 and reader.full_reads == 4
    assert str(samples[1].memory.anon_bytes).startswith("1")  # read in full: the memory.stat change with it
    # a tick left unfinished (its consumer stopped) leaves no parent's word for the next one
    reader.begin_tick()
    assert reader.still(parent)
    reader.begin_tick()
    _rewrite(child_dir, "cpu.stat", "usage_usec 9", "usage_usec 99")
    assert not reader.still(child) and reader.spared == 1  # its own signal was read


def test_a_parent_spares_nothing_where_counters_are_not_hierarchical(family):
    reader, parent, child, _parent_dir, child_dir = family
    reader.hierarchical = False  # v1 memory before Linux 5.11 (use_hierarchy=0)
    for t in (100.0, 101.0):
        _tick(reader, [parent, child], t)
    assert (reader.reused, reader.spared) == (2, 0)


def test_kernel_release_compared_as_numbers():
    assert changes.kernel_at_least(5, 11, "6.1.0-18-amd64")
    assert changes.kernel_at_least(5, 11, "5.11.0")
    assert not changes.kernel_at_least(5, 11, "5.10.209-1")
    assert not changes.kernel_at_least(5, 11, "4.19.0-26-amd64")
    assert changes.kernel_at_least(5, 11, "5.15.0-91-generic")
    assert not changes.kernel_at_least(5, 11, "garbage")
    assert not changes.kernel_at_least(5, 11, "5.4-rc1")


def test_a_cgroup_that_moved_is_read_again_soon_after_it_goes_quiet(tree):
    """What moves on after activity (pressure averages decaying, writeback) shows within
    SETTLE_FRACTION of the period, not a whole period later."""
    reader, cg, folder = tree
    settle = 2.5  # SETTLE_FRACTION of 10 s
    assert reader.full_every_s * changes.SETTLE_FRACTION == settle
    t0 = changes._next_due(cg.path, 100.0, 10.0) + 0.1  # just after a due read: the next is ~10 s away
    reader.read(cg, t0, t0)
    reader.end_tick()
    _rewrite(folder, "cpu.stat", "usage_usec ", "usage_usec 9")  # it ran
    reader.read(cg, t0 + 1.0, t0 + 1.0)
    reader.end_tick()
    quiet = [t0 + 1.0 + d for d in (1.0, 2.0, settle + 0.1, settle + 1.0)]
    fulls = []
    for t in quiet:
        before = reader.full_reads
        reader.read(cg, t, t)
        reader.end_tick()
        fulls.append(reader.full_reads - before)
    assert fulls == [0, 0, 1, 0]


def test_kept_samples_share_their_equal_parts(tree):
    """Idle cgroups' memory, IO, task, pressure figures and problems are mostly alike: a
    kept Sample's part equal to another's is that one, the values unchanged."""
    reader, cg, _folder = tree
    first = reader.read(cg, 100.0, 1000.0)
    reader.end_tick()
    import copy
    twin = copy.deepcopy(first)._replace(path="/twin")  # equal values, other objects
    shared = reader._share(twin)
    assert shared == twin and shared.cpu is twin.cpu
    assert shared.memory is first.memory and shared.io is first.io and shared.pids is first.pids
    assert shared.pressure is first.pressure and shared.errors is first.errors
    other = twin._replace(memory=twin.memory._replace(usage_bytes=1))
    assert reader._share(other).memory is not first.memory


def test_the_same_record_book_keeps_one_of_equal_rates_and_workloads():
    """pipeline/same.py: idle cgroups' rates and workloads are mostly alike; the book keeps
    one of each (a rate's interval aside), not one per cgroup, and judges the same."""
    from cgstat.naming.workload import Workload
    from cgstat.pipeline.rates import NO_RATES
    from cgstat.pipeline.same import SameRecords

    book = SameRecords()
    idle = NO_RATES._replace(cpu_percent=0.0)
    made = []
    for i in range(3):
        rates = idle._replace(interval_s=1.0 + i)  # other intervals: still alike
        work = Workload("cgroup", None, None, None, False, {})
        book.made(_sample("/c%d" % i), rates, work, None, None)
        made.append(book._now["/c%d" % i])
    assert made[0].rates is made[1].rates is made[2].rates and made[0].workload is made[2].workload
    book.made(_sample("/busy"), idle._replace(interval_s=1.0, cpu_percent=3.0),
              Workload("cgroup", "x.service", None, None, False, {}), None, None)
    busy = book._now["/busy"]
    assert busy.rates is not made[0].rates and busy.workload is not made[0].workload
    book.made(_sample("/new"), NO_RATES, Workload("cgroup", None, None, None, False, {}), None, None)
    assert book._now["/new"].rates is not made[0].rates  # an unknown interval is not a known one


def _sample(path):
    from cgstat.kernel.sample import CpuSample, IoSample, MemorySample, PidsSample, Sample

    return Sample(path, {}, (), 1.0, 1.0, CpuSample(), MemorySample(), IoSample(None, None), PidsSample(), {}, ())
