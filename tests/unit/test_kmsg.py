"""The kernel-log follower (cgstat/kernel/kmsg.py): records, the OOM report's lines in every
format the kernel has printed, reports that cgroup names try to forge, the follower's
sequence numbers and losses; and the real /dev/kmsg of this machine's kernel.

Fixtures under tests/fixtures/kmsg/ are records read from this machine's /dev/kmsg
(kernel 6.18, hybrid layout): one memcg OOM kill, and a storm of 20 kills in one cgroup
in ~3 s, where the kernel's rate limit left 7 of them without the report that names the
cgroup ("oom_kill_process: 7 callbacks suppressed"). The pre-4.19 and global-OOM lines
are built from the kernel's own format strings (mm/oom_kill.c, mm/memcontrol.c).
"""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgstat.kernel import kmsg
from cgstat.kernel.kmsg import KmsgFollower
from cgstat.kernel.kmsg_record import Record, parse_record, unescape
from cgstat.kernel.oom_report import OomParser, parse_legacy, parse_summary

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(TESTS, "fixtures", "kmsg")
MEMCG = "/process_api/7903aeea264b59975c32630c94ed0cf4/cgstat-test-oom-probe"


def records_of(data: bytes):
    """Raw records of a recorded log: one per line, dictionary lines (' KEY=value') dropped."""
    return [line + b"\n" for line in data.split(b"\n") if line and not line.startswith(b" ")]


def reader(raws):
    """A read_one over records: one per call, then EAGAIN; an exception in the list is raised."""
    it = iter(raws)

    def one():
        try:
            item = next(it)
        except StopIteration:
            raise BlockingIOError(errno.EAGAIN, "no more") from None
        if isinstance(item, BaseException):
            raise item
        return item

    return one


def follow(raws, **kw):
    return KmsgFollower(read_one=reader(raws), **kw)


def rec(seq: int, text: str, prio: int = 6) -> bytes:
    return b"%d,%d,%d,-;%s\n" % (prio, seq, 1000 + seq, text.encode())


def feed(lines):
    """Kernel records (text) through a parser; the reports."""
    p = OomParser()
    out = [p.feed(Record(0, 6, i, i, False, t)) for i, t in enumerate(lines)]
    return [r for r in out if r is not None], p


# -- records ---------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, want", [
    (b"6,410,465813010,-;memory: usage 32768kB, limit 32768kB, failcnt 19\n",
     Record(0, 6, 410, 465813010, False, "memory: usage 32768kB, limit 32768kB, failcnt 19")),
    (b"3,460,465815468,-;Killed\n SUBSYSTEM=x\n DEVICE=+y\n", Record(0, 3, 460, 465815468, False, "Killed")),
    (b"4,12,99,c;tail\n", Record(0, 4, 12, 99, True, "tail")),
    (b"12,7,5,-,caller=T1;from userspace\n", Record(1, 4, 7, 5, False, "from userspace")),
    (b"6,1,2,-;a\\x0ab\\x5cc\n", Record(0, 6, 1, 2, False, "a\\x0ab\\x5cc")),
    (b"no header at all\n", None),
    (b"6,x,2,-;text\n", None),
    (b"6,1;short\n", None),
])
def test_parse_record(raw, want):
    assert parse_record(raw) == want


@pytest.mark.parametrize("text, want", [
    ("plain", b"plain"),
    ("a\\x0ab", b"a\nb"),
    ("back\\x5cslash", b"back\\slash"),
    ("caf\\xc3\\xa9\\xff", b"caf\xc3\xa9\xff"),
    ("\\x4", b"\\x4"),
])
def test_unescape(text, want):
    assert unescape(text) == want


# -- one line at a time -------------------------------------------------------------------------

REAL_SUMMARY = ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
                "oom_memcg=%s,task_memcg=%s,task=python3,pid=19701,uid=0" % (MEMCG, MEMCG))
REAL_KILLED = ("Memory cgroup out of memory: Killed process 19701 (python3) total-vm:221368kB, "
               "anon-rss:39552kB, file-rss:6652kB, shmem-rss:0kB, UID:0 pgtables:136kB oom_score_adj:0")


@pytest.mark.parametrize("text, constraint, pid, uid, readings", [
    (REAL_SUMMARY, "CONSTRAINT_MEMCG", 19701, 0, ((MEMCG, MEMCG, "python3"),)),
    # the global killer: no oom_memcg; a node list with commas
    ("oom-kill:constraint=CONSTRAINT_NONE,nodemask=0-1,3,cpuset=/,mems_allowed=0-1,3,global_oom,"
     "task_memcg=/system.slice/x.service,task=java,pid=77,uid=1000",
     "CONSTRAINT_NONE", 77, 1000, ((None, "/system.slice/x.service", "java"),)),
    # a child of the OOM cgroup killed; a task name with a comma
    ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods/pod1,"
     "task_memcg=/kubepods/pod1/abc,task=a,b,pid=5,uid=0",
     "CONSTRAINT_MEMCG", 5, 0, (("/kubepods/pod1", "/kubepods/pod1/abc", "a,b"),)),
    # a folder named to forge: the only reading with task_memcg at or below oom_memcg is the true one
    ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
     "oom_memcg=/u/x,task_memcg=/docker/" + "a" * 64 + ",task=y,"
     "task_memcg=/u/x,task_memcg=/docker/" + "a" * 64 + ",task=y,task=python3,pid=9,uid=1000",
     "CONSTRAINT_MEMCG", 9, 1000,
     (("/u/x,task_memcg=/docker/" + "a" * 64 + ",task=y", "/u/x,task_memcg=/docker/" + "a" * 64 + ",task=y",
       "python3"),)),
])
def test_parse_summary(text, constraint, pid, uid, readings):
    s = parse_summary(text)
    assert s is not None
    assert (s.constraint, s.pid, s.uid, s.readings) == (constraint, pid, uid, readings)


@pytest.mark.parametrize("text", [
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/b,task=x,pid=1,uid=0",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a,task=x,pid=1",
    "oom-kill:garbage",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a,"
    "task=sixteen-chars-xx,pid=1,uid=0",
])
def test_parse_summary_refuses_what_the_kernel_cant_print(text):
    # a task cgroup outside the OOM cgroup, no uid, no fields, a task name over 15 bytes
    assert parse_summary(text) is None


def test_legacy_task_line_splits():
    assert parse_legacy("Task in /docker/abc killed as a result of limit of /docker") == (("/docker", "/docker/abc"),)
    forged = "/u/x killed as a result of limit of /docker/" + "b" * 64
    line = "Task in %s killed as a result of limit of %s" % (forged, forged)
    assert parse_legacy(line) == ((forged, forged),)


# -- whole reports ------------------------------------------------------------------------------

def test_real_memcg_kill_recorded_here():
    batch = follow(records_of(open(os.path.join(FIX, "hybrid-memcg-kill.kmsg"), "rb").read())).read()
    assert len(batch.kills) == 1 and batch.lost == 0
    k = batch.kills[0]
    assert (k.pid, k.task, k.uid, k.task_memcg, k.oom_memcg, k.constraint, k.global_oom, k.summary) == (
        19701, "python3", 0, MEMCG, MEMCG, "CONSTRAINT_MEMCG", False, True)
    assert (k.usage_bytes, k.limit_bytes) == (32768 * 1024, 32768 * 1024)
    assert (k.anon_rss_bytes, k.file_rss_bytes, k.shmem_rss_bytes) == (39552 * 1024, 6652 * 1024, 0)
    assert batch.last_seq == 460


def test_real_storm_every_kill_one_report():
    f = follow(records_of(open(os.path.join(FIX, "hybrid-memcg-storm.kmsg"), "rb").read()))
    batch = f.read()
    storm = MEMCG.replace("probe", "storm")
    assert len(batch.kills) == 20
    assert len({k.pid for k in batch.kills}) == 20
    named = [k for k in batch.kills if k.summary]
    assert len(named) == 13 and all(k.task_memcg == storm for k in named)
    # the rate limit left these with their process only (and said how many it suppressed)
    bare = [k for k in batch.kills if not k.summary]
    assert [k.pid for k in bare] == [23296, 23297, 23299, 23300, 23303, 23306, 23309]
    assert all(k.task_memcg is None and k.task == "python3" and not k.global_oom for k in bare)
    assert f.parser.suppressed == 7


def test_pre_4_19_report():
    # mm/memcontrol.c mem_cgroup_print_oom_info and mm/oom_kill.c of 4.14
    reports, _ = feed([
        "python invoked oom-killer: gfp_mask=0x14000c0(GFP_KERNEL), nodemask=(null), order=0, oom_score_adj=0",
        "Task in /docker/abc killed as a result of limit of /docker/abc",
        "memory: usage 65536kB, limit 65536kB, failcnt 42",
        "memory+swap: usage 65536kB, limit 9007199254740988kB, failcnt 0",
        "Memory cgroup stats for /docker/abc: cache:0KB rss:65400KB rss_huge:0KB",
        "Memory cgroup out of memory: Kill process 4242 (python) score 998 or sacrifice child",
        "Killed process 4242 (python) total-vm:1000kB, anon-rss:65000kB, file-rss:100kB, shmem-rss:0kB",
    ])
    assert len(reports) == 1
    k = reports[0]
    assert (k.pid, k.task, k.uid, k.task_memcg, k.oom_memcg, k.constraint, k.limit_bytes) == (
        4242, "python", None, "/docker/abc", "/docker/abc", None, 65536 * 1024)
    assert k.summary and not k.global_oom


def test_global_oom_names_the_tasks_cgroup():
    reports, _ = feed([
        "java invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
        "task_memcg=/system.slice/docker-%s.scope,task=java,pid=311,uid=1000" % ("c" * 64),
        "Out of memory: Killed process 311 (java) total-vm:9000kB, anon-rss:8000kB, file-rss:0kB, "
        "shmem-rss:0kB, UID:1000 pgtables:40kB oom_score_adj:0",
    ])
    k = reports[0]
    assert (k.task_memcg, k.oom_memcg, k.global_oom, k.limit_bytes, k.uid) == (
        "/system.slice/docker-%s.scope" % ("c" * 64), None, True, None, 1000)


def test_oom_group_kills_each_task():
    reports, _ = feed([
        "a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "Memory cgroup stats for /pod:",
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/pod,"
        "task_memcg=/pod/c1,task=a,pid=10,uid=0",
        "Memory cgroup out of memory: Killed process 10 (a) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, "
        "UID:0 pgtables:4kB oom_score_adj:0",
        "Tasks in /pod are going to be killed due to memory.oom.group set",
        "Memory cgroup out of memory: Killed process 11 (b) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, "
        "UID:0 pgtables:4kB oom_score_adj:0",
    ])
    assert [(k.pid, k.task_memcg) for k in reports] == [(10, "/pod/c1"), (11, "/pod")]


def test_oom_group_victim_printed_twice_is_one_kill():
    # kernel 6.12 (Debian 13), a memory.oom.group unit of sh, two sleeps and the hog: the
    # victim's `Killed process` comes first, then again among the group's tasks
    killed = ("Memory cgroup out of memory: Killed process %d (%s) total-vm:1kB, anon-rss:1kB, file-rss:0kB, "
              "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0")
    unit = "/system.slice/cgstat-oomsoak-2.service"
    lines = [
        "busybox invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "Memory cgroup stats for %s:" % unit,
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cgstat-oomsoak-2.service,mems_allowed=0,"
        "oom_memcg=%s,task_memcg=%s,task=busybox,pid=655,uid=0" % (unit, unit),
        killed % (655, "busybox"),
        "Tasks in %s are going to be killed due to memory.oom.group set" % unit,
    ] + [killed % (pid, task) for pid, task in ((651, "sh"), (653, "busybox"), (654, "busybox"), (655, "busybox"))]
    # the next report's victim may be a PID seen before: a new report starts afresh
    lines += lines[:4]
    reports, _ = feed(lines)
    assert [(k.pid, k.task_memcg) for k in reports] == [(655, unit), (651, unit), (653, unit), (654, unit), (655, unit)]


def test_hostile_task_name_in_killed_line():
    reports, _ = feed([
        "Memory cgroup out of memory: Killed process 12 (x) total-vm:1kB) total-vm:5kB, anon-rss:2kB, "
        "file-rss:3kB, shmem-rss:4kB, UID:0 pgtables:4kB oom_score_adj:0",
    ])
    assert (reports[0].pid, reports[0].task, reports[0].anon_rss_bytes) == (12, "x) total-vm:1kB", 2048)


def test_userspace_cannot_forge_a_kill():
    p = OomParser()
    line = ("Memory cgroup out of memory: Killed process 1 (init) total-vm:1kB, anon-rss:1kB, file-rss:0kB, "
            "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0")
    assert p.feed(Record(1, 3, 1, 1, False, line)) is None  # LOG_USER: written to /dev/kmsg by a process
    assert p.feed(Record(0, 3, 2, 2, False, line)) is not None


def test_escaped_bytes_in_a_path_read_as_the_walk_names_them():
    # mkdir $'caf\xc3\xa9\xff' : the kernel writes \xNN for every byte >= 0x7f
    reports, _ = feed([
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/caf\\xc3\\xa9\\xff,"
        "task_memcg=/caf\\xc3\\xa9\\xff,task=a\\x5cb,pid=3,uid=0",
        "Memory cgroup out of memory: Killed process 3 (a\\x5cb) total-vm:1kB, anon-rss:1kB, file-rss:0kB, "
        "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0",
    ])
    assert (reports[0].task_memcg, reports[0].task) == ("/caf\u00e9\\xff", "a\\b")


# -- forging, every way a name can try ---------------------------------------------------------

VICTIM = "/docker/" + "d" * 64
_PIECES = [",task_memcg=" + VICTIM, ",task=", ",oom_memcg=" + VICTIM, ",pid=1", ",uid=0", ",global_oom",
           ",mems_allowed=0", ",", "=", "/", " killed as a result of limit of " + VICTIM, "x", ":", "y"]


def _escaped(s: str) -> str:
    return "".join("\\x%02x" % b if b < 0x20 or b >= 0x7f or b == 0x5c else chr(b) for b in s.encode())


@settings(max_examples=300, deadline=None)
@given(name=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6).map("".join).filter(
           lambda n: "//" not in n and not n.startswith("/") and not n.endswith("/")),
       task=st.lists(st.sampled_from(["p", ",", "task=", "pid=", ")", " "]), min_size=1, max_size=4).map(
           "".join).filter(lambda t: len(t) <= 15),
       parent=st.sampled_from(["/user.slice/user-1000.slice", "/u"]),
       child=st.booleans(), stats=st.booleans(), legacy=st.booleans())
def test_a_name_never_moves_the_kill(name, task, parent, child, stats, legacy):
    oom = parent + "/" + name
    victim_task = oom + "/leaf" + name if child else oom
    lines = ["x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
             "memory: usage 100kB, limit 100kB, failcnt 1"]
    if stats:
        lines.append("Memory cgroup stats for %s:" % _escaped(oom))
    if legacy:
        lines.append("Task in %s killed as a result of limit of %s" % (_escaped(victim_task), _escaped(oom)))
    else:
        lines.append("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=%s,"
                     "task_memcg=%s,task=%s,pid=4242,uid=1000" % (_escaped(oom), _escaped(victim_task), _escaped(task)))
    lines.append("Memory cgroup out of memory: Killed process 4242 (%s) total-vm:1kB, anon-rss:1kB, file-rss:0kB, "
                 "shmem-rss:0kB, UID:1000 pgtables:4kB oom_score_adj:0" % _escaped(task))
    reports, _ = feed(lines)
    assert len(reports) == 1
    k = reports[0]
    assert k.pid == 4242 and k.task == task
    # the true cgroup, or none when two readings were possible: never the victim's
    assert k.task_memcg in (victim_task, None)
    if k.task_memcg is None:
        assert k.ambiguous
    if stats and not legacy:
        assert k.task_memcg == victim_task  # the stats line pins the OOM cgroup, the Killed line the task


# -- following --------------------------------------------------------------------------------

KILL = ("Memory cgroup out of memory: Killed process %d (p) total-vm:1kB, anon-rss:1kB, file-rss:0kB, "
        "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0")


def test_follower_counts_records_lost():
    f = follow([rec(10, "a"), rec(11, KILL % 1, 3), rec(15, KILL % 2, 3), OSError(errno.EPIPE, "overwritten"),
                rec(30, KILL % 3, 3)])
    b = f.read()
    assert [k.pid for k in b.kills] == [1, 2, 3]
    assert (b.lost, b.last_seq) == (3 + 14, 30)
    assert f.read() == kmsg.Batch([], 0, 30)


def test_follower_after_a_saved_position():
    raws = [rec(s, KILL % s, 3) for s in range(5, 12)]
    b = follow(raws, after_seq=8).read()
    assert ([k.pid for k in b.kills], b.lost, b.last_seq) == ([9, 10, 11], 0, 11)
    # the ring moved on past the saved position: the records in between are lost
    b = follow(raws, after_seq=2).read()
    assert (len(b.kills), b.lost) == (7, 2)


def test_follower_reads_a_flood_over_several_ticks():
    f = follow([rec(s, "line %d" % s) for s in range(100)])
    assert f.read(limit=40).last_seq == 39
    assert f.read(limit=40).last_seq == 79
    assert f.read().last_seq == 99


def test_unreadable_log_says_why(tmp_path):
    with pytest.raises(kmsg.KmsgUnavailable) as exc:
        KmsgFollower(str(tmp_path / "no-such-kmsg"))
    assert "no-such-kmsg" in exc.value.reason


# -- this machine's kernel ------------------------------------------------------------------------


def test_a_passed_descriptor_must_be_the_kernel_log():
    r, w = os.pipe()
    try:
        with pytest.raises(kmsg.KmsgUnavailable) as exc:
            KmsgFollower(fd=r)
        assert "not /dev/kmsg" in exc.value.reason
    finally:
        os.close(r)
        os.close(w)


def _open_kernel_log(flags: int = 0) -> int:
    try:
        return os.open(kmsg.KMSG, os.O_RDONLY | flags)
    except OSError as exc:  # not root, kernel.dmesg_restrict, no /dev/kmsg in this container
        pytest.skip("%s can't be read here: %s" % (kmsg.KMSG, exc.strerror))


def _last_seq_of_the_log() -> int:
    """The sequence number of the kernel log's newest record, read here without cgstat."""
    fd = _open_kernel_log(os.O_NONBLOCK)
    last = None
    try:
        while True:
            try:
                raw = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # overwritten under us: the next read gives the oldest left
                continue
            last = int(raw.split(b",", 2)[1])
    finally:
        os.close(fd)
    if last is None:
        pytest.skip("the kernel log is empty")
    return last


def test_the_kernel_log_passed_as_a_descriptor_is_read_and_left_open():
    newest = _last_seq_of_the_log()
    fd = _open_kernel_log()
    try:
        f = KmsgFollower(fd=fd, numbered=True)  # numbered: the backlog read through to its end
        assert f.last_seq is not None and f.last_seq >= newest
        assert f.read().last_seq >= f.last_seq
        f.close()
        os.fstat(fd)  # still open: it is systemd's, not the follower's
    finally:
        os.close(fd)


def kill_at(seq: int, usec: int) -> bytes:
    return b"3,%d,%d,-;%s\n" % (seq, usec, (KILL % seq).encode())


def test_a_new_agent_reports_the_kills_since_it_started_from_the_backlog():
    # the kill at 5 s came while the agent (started at 4 s) was still importing: it is in
    # the backlog when reading starts, the one at 3 s is older than this run
    f = follow([kill_at(1, 3_000_000), kill_at(2, 5_000_000), rec(3, "x")], since_usec=4_000_000)
    assert [k.pid for k in f.read().kills] == [2]
    # a saved position wins: a cron run's state says where it was
    f = follow([kill_at(1, 3_000_000), kill_at(2, 5_000_000)], since_usec=4_000_000, after_seq=0)
    assert [k.pid for k in f.read().kills] == [1, 2]


def test_this_process_started_before_now_on_the_log_clock(tmp_path):
    import time

    t = kmsg.started_usec()
    assert t is not None and 0 <= t <= time.monotonic() * 1e6
    assert kmsg.started_usec(str(tmp_path / "missing")) is None
    stat = tmp_path / "stat"
    stat.write_bytes(b"1 (a) b) S " + b" ".join(b"0" for _ in range(18)) + b" 100 0 0\n")
    assert kmsg.started_usec(str(stat)) is not None  # a ')' in the name: read after the last one
