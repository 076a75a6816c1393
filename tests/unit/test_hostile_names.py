"""Names from the kernel and users are bytes until proven text; volume stays bounded.

Fake host roots are copies of the recorded v2-systemd tree with folders added under the
delegated subtree `user@1000.service`: names that are not UTF-8, that hold ESC/CSI/C1/DEL
or bidi controls, a newline with a forged `cgstat:` line, and systemd escapes of a CSI.
The run must exit 0, print valid UTF-8 JSON with every other record unchanged, and let no
raw control reach stdout or stderr. The volume test puts 20,000 service cgroups there. The
real-cgroup test makes a cgroup with a non-UTF-8 name below our own (hybrid host) and
checks the cross-hierarchy join and `cgstat pid` through /proc/<pid>/cgroup.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgstat.kernel import parse
from cgstat.kernel.discover import Discoverer
from cgstat.kernel.hierarchy import detect
from cgstat.kernel.hostfs import HostFS
from cgstat.naming.paths import unescape_unit
from cgstat.diagnostics import Warner, say
from cgstat.text import (
    decode_bytes,
    decode_name,
    dumps_record,
    escape_controls,
    escape_json,
    quote,
)
from tests.helpers.contract import ROOT, run_cgstat, validate

FIX = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
USER = "/user.slice/user-1000.slice/user@1000.service"

# Byte sequences that must never appear raw in what cgstat writes.
RAW_UNSAFE = [b"\x1b", b"\x7f", b"\xc2\x9b", b"\xc2\x85", b"\xe2\x80\xae", b"\xe2\x81\xa6",
              b"\xe2\x80\x8f", b"\xd8\x9c"]
# folder name (bytes) -> the `cgroup` leaf the record must carry (decoded JSON value)
HOSTILE = {
    b"app\xff.service": "app\\xff.service",
    b"esc\x1b[2J.service": "esc\x1b[2J.service",
    b"csi\xc2\x9b2J.service": "csi\x9b2J.service",
    b"del\x7f.service": "del\x7f.service",
    b"bidi\xe2\x80\xaeecivres.service": "bidi\u202eecivres.service",
    b"iso\xe2\x81\xa6rlm\xe2\x80\x8f\xd8\x9c.service": "iso\u2066rlm\u200f\u061c.service",
    b"nel\xc2\x85x.service": "nel\x85x.service",
    b"x\\x9b2J.service": "x\\x9b2J.service",
    b"y\\xc2\\x9b\\x1b.service": "y\\xc2\\x9b\\x1b.service",
    b"half\xc3.service": "half\\xc3.service",
    b"nl\ncgstat: forged line.service": "nl\ncgstat: forged line.service",
}
# A few small files: enough for a record (cpu.stat, memory.current, pids.current).
FILES = {b"cgroup.procs": b"", b"cpu.stat": b"usage_usec 1000\nuser_usec 600\nsystem_usec 400\n",
         b"memory.current": b"4096\n", b"pids.current": b"1\n"}


def _copy(tmp_path):
    dst = tmp_path / "t1"
    shutil.copytree(FIX, dst, symlinks=True)
    return str(dst)


def _cgroup_dir(root, path):
    return os.fsencode(os.path.join(root, "sys/fs/cgroup", path.lstrip("/")))


def _make(parent: bytes, name: bytes, files=FILES):
    d = os.path.join(parent, name)
    os.mkdir(d)
    for fname, data in files.items():
        fd = os.open(os.path.join(d, fname), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return d


def _run(*args):
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, cwd=ROOT,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "CGSTAT_HOST_ROOT"})
    return proc.returncode, proc.stdout, proc.stderr


def _records(out: bytes):
    text = out.decode("utf-8")  # strict: every byte valid UTF-8
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.split("\n") if line]


def _assert_no_raw_controls(data: bytes, what: str):
    for seq in RAW_UNSAFE:
        assert seq not in data, f"raw {seq!r} on {what}"


# -- end to end on a fake host root ----------------------------------------------------------


def test_hostile_folder_names(tmp_path):
    root = _copy(tmp_path)
    code, clean_out, _ = _run("once", "--window", "0", "--all", "--host-root", root)
    assert code == 0
    before = {r["cgroup"]: r for r in _records(clean_out)}
    user = _cgroup_dir(root, USER)
    for name in HOSTILE:
        _make(user, name)
    # A malformed file makes the agent warn with the path in the message.
    with open(os.path.join(user, b"nl\ncgstat: forged line.service", b"cpu.stat"), "wb") as f:
        f.write(b"usage_usec \x1b[31mjunk\n")

    for args in (("--all",), ()):
        code, out, err = _run("once", "--window", "0", "--host-root", root, *args)
        assert code == 0, err
        _assert_no_raw_controls(out, "stdout")
        _assert_no_raw_controls(err, "stderr")
        records = _records(out)
        by_path = {r["cgroup"]: r for r in records}
        for rec in records:
            validate(rec)
        for leaf in HOSTILE.values():
            if "\n" in leaf and not args:
                continue  # not a unit name (systemd forbids the newline): not a workload
            rec = by_path[USER + "/" + leaf]
            assert rec["paths"] == {"unified": USER + "/" + leaf}
            assert rec["memory"]["usage_bytes"] == 4096 and rec["pids"]["current"] == 1
            # no escape in these decodes to a control
            assert rec["unit"] == (None if "\n" in leaf else leaf)
        assert by_path[USER + "/app\\xff.service"]["cpu"]["usage_seconds_total"] == 0.001
        # the other records are complete and unchanged
        for path, rec in before.items():
            if path in by_path:
                assert by_path[path] == rec
        # each stderr line is one whole warning: the newline in a name forged nothing
        lines = err.decode("utf-8").splitlines()
        assert lines and all(line.startswith("cgstat: ") for line in lines)
        assert not any(line.startswith("cgstat: forged") for line in lines)
        if args:
            assert set(before) <= set(by_path)
            assert len(records) == len(before) + len(HOSTILE)
            assert any("nl\\x0acgstat: forged line.service" in line for line in lines), lines


def test_systemd_escapes_decode_as_utf8(tmp_path):
    root = _copy(tmp_path)
    user = _cgroup_dir(root, USER)
    _make(user, b"ok\\x2dname.service")
    _make(user, b"\\xc3\\xa9t\\xc3\\xa9.service")
    code, out, err = _run("once", "--window", "0", "--host-root", root)
    assert code == 0, err
    units = {r["cgroup"].rsplit("/", 1)[-1]: r["unit"] for r in _records(out)}
    assert units["ok\\x2dname.service"] == "ok-name.service"
    assert units["\\xc3\\xa9t\\xc3\\xa9.service"] == "été.service"


def test_pid_in_a_cgroup_with_a_non_utf8_name(tmp_path):
    root = _copy(tmp_path)
    _make(_cgroup_dir(root, USER), b"app\xff\x1b.service")
    proc = os.path.join(root, "proc")
    shutil.copytree(os.path.join(proc, "216"), os.path.join(proc, "4242"))
    with open(os.path.join(proc, "4242", "cgroup"), "wb") as f:
        f.write(b"0::" + USER.encode() + b"/app\xff\x1b.service\n")
    code, out, err = _run("pid", "4242", "--host-root", root)
    assert code == 0, err
    _assert_no_raw_controls(out, "stdout")
    (rec,) = _records(out)
    assert rec["error"] is None
    assert rec["cgroup"] == USER + "/app\\xff\x1b.service"
    assert rec["paths"] == {"unified": rec["cgroup"]}


def test_forged_proc_cgroup_lines_are_refused(tmp_path):
    """A name holding a newline can't make one /proc/<pid>/cgroup line read as two."""
    forged = b"4:memory:/user/a\n5:memory:/system.slice/docker-x.scope\n2:cpu:/user/a\n"
    with pytest.raises(ValueError):
        parse.parse_proc_cgroup(forged)
    with pytest.raises(ValueError):
        parse.parse_proc_cgroup(b"0::/user/a\n0::/system.slice/docker-x.scope\n")
    assert parse.parse_proc_cgroup(b"4:memory:/a\xff\n2:cpu,cpuacct:/b\xc2\x85c\n0::/d\n") == [
        ("memory", "/a\\xff"), ("cpu,cpuacct", "/b\x85c"), ("", "/d")]


# -- volume ----------------------------------------------------------------------------------

N_SERVICES = 20000
CAP = 1000  # discover.MAX_USER_CGROUPS, the default


def _volume_tree(tmp_path):
    root = _copy(tmp_path)
    base = _make(_cgroup_dir(root, USER), b"app.slice")
    for i in range(N_SERVICES):
        _make(base, b"svc-%d.service" % i)
    return root


_RSS = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True)
sys.stdout.buffer.write(b"%d %d\\n" % (p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.stdout.buffer.write(p.stderr)
open(sys.argv[-1] + ".out", "wb").write(p.stdout)
"""


def _measured(root, *args):
    """(exit status, peak RSS in KiB, stdout, stderr) of one cgstat run, measured in a
    fresh process so that no earlier child of the test runner counts."""
    proc = subprocess.run([sys.executable, "-c", _RSS, sys.executable, "-m", "cgstat", "once",
                           "--window", "0", *args, "--host-root", root],
                          capture_output=True, cwd=ROOT, timeout=300)
    head, _, err = proc.stdout.partition(b"\n")
    code, rss = (int(x) for x in head.split())
    with open(root + ".out", "rb") as f:
        out = f.read()
    return code, rss, out, err


def _memory_backed_dir(need_bytes=1 << 30):
    """/dev/shm where it is a tmpfs with room to spare, else None."""
    try:
        vfs = os.statvfs("/dev/shm")
        with open("/proc/self/mounts") as f:
            tmpfs = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in f)
    except OSError:
        return None
    return "/dev/shm" if tmpfs and vfs.f_bavail * vfs.f_frsize >= need_bytes else None


@pytest.fixture(scope="module")
def volume_root(tmp_path_factory):
    # 80,000 small files: in memory, as a cgroupfs is, where there is room (a disk's
    # filesystem spends seconds on their inodes); ~250 MiB, freed after the module.
    base = _memory_backed_dir()
    if base is None:
        yield _volume_tree(tmp_path_factory.mktemp("volume"))
        return
    top = tempfile.mkdtemp(prefix="cgstat-test-volume-", dir=base)
    try:
        yield _volume_tree(pathlib.Path(top))
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("args", [(), ("--all",)], ids=["default", "all"])
def test_20000_delegated_service_cgroups(volume_root, args):
    baseline, _, _ = run_cgstat("once", "--window", "0", "--all", "--host-root", FIX)
    code, rss_kib, out, err = _measured(volume_root, *args)
    assert code == 0, err
    assert rss_kib <= 80 * 1024, f"peak RSS {rss_kib / 1024:.1f} MiB"
    records = _records(out)
    in_user = [r for r in records if r["cgroup"].startswith(USER + "/")]
    assert len(in_user) <= CAP
    assert len(records) <= CAP + len(baseline)
    # The subtree's own listing (app.slice, init.scope, user.slice) comes first, then the
    # smallest names of app.slice; what is left: the rest of app.slice and, with the
    # budget spent, the podman container in user.slice.
    left = N_SERVICES - (CAP - 3) + 1
    assert f"{left} of them" in err.decode(), err
    assert err.decode().count("holds more than") == 1


def test_cap_choice_is_deterministic_and_counted(volume_root):
    fs = HostFS(volume_root)
    layout = detect(fs)
    seen = []
    first = Discoverer(fs, layout, max_user_cgroups=CAP, warn=lambda k, m: seen.append((k, m)))
    paths = [cg.path for cg in first.join()]
    again = [cg.path for cg in first.join()]
    assert paths == again
    below = sorted(p for p in paths if p.startswith(USER + "/"))
    assert len(below) == CAP
    services = [p for p in below if "/app.slice/svc-" in p]
    assert services == sorted(f"{USER}/app.slice/svc-{i}.service" for i in range(N_SERVICES))[:CAP - 3]
    left = N_SERVICES - (CAP - 3) + 1
    assert first.left_out == {USER: left}
    assert seen and all(k == "capped:" + USER and f"{left} of them" in m for k, m in seen)
    unbounded = Discoverer(fs, layout, max_user_cgroups=None)
    assert len([cg for cg in unbounded.join() if cg.path.startswith(USER + "/")]) == N_SERVICES + 5
    assert unbounded.left_out == {}


def test_walk_shares_file_name_sets(volume_root):
    fs = HostFS(volume_root)
    d = Discoverer(fs, detect(fs), max_user_cgroups=None)
    folders = [cg.folders[0] for cg in d.join() if "/svc-" in cg.path]
    assert len(folders) == N_SERVICES
    assert len({id(f.files) for f in folders}) == 1


# -- the pieces ------------------------------------------------------------------------------


def test_decode_names():
    assert decode_name("plain.service") == "plain.service"
    assert decode_name("app\udcff.service") == "app\\xff.service"
    assert decode_name("\u00e9\u202e") == "\u00e9\u202e"  # valid UTF-8 stays as is
    for raw in (b"a\xff", b"\xed\xa0\x80", b"\xc3", b"ok", b"\xe2\x82\xac\x80"):
        assert decode_bytes(raw) == decode_name(os.fsdecode(raw))
    assert decode_bytes(b"\xed\xa0\x80") == "\\xed\\xa0\\x80"  # an encoded surrogate is bad bytes


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_escaped_json_is_valid_and_lossless(s):
    data = escape_json(orjson.dumps({"k": s, "l": [s]}))
    assert json.loads(data.decode("utf-8")) == {"k": s, "l": [s]}
    _assert_no_raw_controls(data, "json")


def test_dumps_record():
    assert dumps_record({"a": "x\x9b\u202e"}) == b'{"a":"x\\u009b\\u202e"}'
    assert dumps_record({"a": "plain"}) == b'{"a":"plain"}'
    assert dumps_record({"a": "\udcff"}) is None  # an undecoded name
    assert dumps_record({"a": 2 ** 70}) is None


def test_log_lines_escape_controls():
    assert escape_controls("a\nb\x1b[2J\x7f\x9b\u202e\t\udcff") == "a\\x0ab\\x1b[2J\\x7f\\x9b\\u202e\\x09\\xff"
    assert quote("/x/it's\\x2d\n") == "'/x/it\\'s\\\\x2d\\x0a'"

    class Out:
        text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    out = Out()
    say("/evil\ncgstat: forged \x1b]0;title\x07", out)
    assert out.text.count("\n") == 1 and "\x1b" not in out.text and "\x07" not in out.text


def test_unescape_unit_never_makes_controls():
    assert unescape_unit("dev-disk-by\\x2duuid-abcd.swap") == "dev-disk-by-uuid-abcd.swap"
    assert unescape_unit("caf\\xc3\\xa9.service") == "café.service"
    for name in ("x\\x9b2J.service", "x\\x1b[2J.service", "a\\xc2\\x9b.service", "d\\x7f.service",
                 "b\\xe2\\x80\\xae.service", "i\\xe2\\x81\\xa6.service", "m\\xd8\\x9c.service",
                 "n\\x00.service", "bad\\xff.service", "cut\\xc3.service"):
        assert unescape_unit(name) == name
    assert unescape_unit("a\\x2d\\x9b\\x2D.service") == "a-\\x9b-.service"


class _Lines:
    def __init__(self):
        self.lines = []

    def write(self, s):
        self.lines.append(s)

    def flush(self):
        pass


def test_warning_memory_is_bounded_and_once_keys_stay_apart():
    out = _Lines()
    w = Warner(out, max_keys=100, burst=1000)
    w.once("selection", "said once")
    for i in range(10000):  # one rate-limit key per hostile path
        w.warn(f"path:{i}", f"problem {i}")
    assert len(w._last) <= 100 and len(w._once) <= 100 and len(w._suppressed) <= 100
    w.once("selection", "said once")  # the rate-limit churn did not forget it
    assert sum(1 for s in out.lines if "said once" in s) == 1


def test_a_flood_of_distinct_warnings_is_counted_not_printed():
    out = _Lines()
    w = Warner(out, max_keys=50, burst=20)
    for _ in range(3):  # more once-keys than remembered, every tick
        for i in range(200):
            w.once(f"denied:/home/u{i}", f"cannot read /home/u{i}")
    assert len(out.lines) == 21  # the burst, then one line saying the rest are counted
    assert "counting the rest" in out.lines[-1]


# -- a real cgroup with a non-UTF-8 name (hybrid host, root) ----------------------------------


def test_diagnostics_channel_hands_typed_lines_to_a_view():
    """A view that owns the terminal takes warnings as Diagnostic(key, message), with the
    once-only and rate-limit rules applied before it sees them."""
    from cgstat.diagnostics import Diagnostic, Warner

    got = []
    w = Warner(handler=got.append)
    w.once("k", "first")
    w.once("k", "first again")
    w.warn("r", "repeat")
    w.warn("r", "repeat")
    assert got == [Diagnostic("k", "first"), Diagnostic("r", "repeat")]
