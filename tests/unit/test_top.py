"""`cgstat top` (cgstat/outputs/top_screen.py draws, cgstat/app/top.py runs).

- Through a pipe on a recorded tree: plain periodic tables (a recorded tree gives the same
  sample every tick, so rates are "--"): structure, names, sort order, count, a closed pipe.
- The screen composition without a terminal: hostile names never put a control character
  on screen, a small terminal gets what fits, sorting, event marks.
- In a real terminal (tmux) on real cgroups: a 0.5-core quota burner at about 50 %, sort
  keys reorder the rows, `q` quits with status 0. Waits poll `tmux capture-pane` with a
  deadline; no sleep is a timing assertion.
"""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from cgstat.contract import fields
from cgstat.outputs import top_screen as T
from cgstat.outputs.table import display_name
from cgstat.pipeline.sampler import Sampler
from tests.helpers.fieldtable import blank, example, record

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
TREE = os.path.join(TESTS, "fixtures", "v2-systemd", "t1")
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _top_code(sampler_args, interval, extra=""):
    # a Warner on stderr, as the CLI gives (the Python API's own is silent): its lines
    # are the screen's status line
    return ("import sys\n"
            "from cgstat.app.top import run_top\n"
            "from cgstat.diagnostics import Warner\n"
            "from cgstat.pipeline.sampler import Sampler\n"
            "sys.exit(run_top(Sampler(%s, warner=Warner()), %r%s))\n" % (sampler_args, interval, extra))


def _recorded_names():
    s = Sampler(host_root=TREE)
    s.warm_up()
    return sorted(display_name(r) for r in s.tick() if r.get("type") in ("cgroup", "pod"))


def _blocks(text):
    return [b for b in text.split("\n\n") if b.strip()]


# -- through a pipe ----------------------------------------------------------------------------

def test_plain_tables_through_a_pipe_on_a_recorded_tree():
    code = _top_code("host_root=%r" % TREE, 0.2, ", count=3")
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=REPO, env=_env(), timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert "\x1b" not in text  # no terminal control on a pipe
    blocks = _blocks(text)
    assert len(blocks) == 3
    names = _recorded_names()
    for block in blocks:
        lines = block.splitlines()
        assert lines[0].startswith("cgstat top - cgstat-v2-rec - ")
        assert "%d workloads" % len(names) in lines[0] and "sort: cpu" in lines[0]
        assert re.split(r"\s{3,}", lines[1]) == list(T.TOP_HEADER)
        rows = lines[2:]
        assert len(rows) == len(names)
        shown = sorted(re.split(r"\s{3,}", row)[0] for row in rows)
        assert shown == names
        by_name = {re.split(r"\s{3,}", row)[0]: re.split(r"\s{3,}", row) for row in rows}
        tf = by_name["tf-training"]
        # identical samples: no rates ("--"), but limits and levels are there
        assert re.fullmatch(r"[0-9a-f]{12}", tf[1])  # CONTAINER ID, as docker stats shows it
        assert tf[2] == "--" and tf[3] == "50%" and tf[4] == "25.08MiB / 64MiB" and tf[5] == "39.18%"
        assert by_name["redis-cache"][4].endswith("/ 32MiB")
    # sort: cpu is unknown everywhere, so the order falls back to the names
    rows = blocks[0].splitlines()[2:]
    assert [re.split(r"\s{3,}", row)[0].lower() for row in rows] == sorted(n.lower() for n in names)


def test_plain_sort_by_memory_and_a_closed_pipe():
    code = _top_code("host_root=%r" % TREE, 0.2, ", sort='memory', count=1")
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=REPO, env=_env(), timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    rows = _blocks(r.stdout.decode())[0].splitlines()[2:]
    first = [re.split(r"\s{3,}", row)[0] for row in rows[:2]]
    assert first == ["tf-training", "init.scope"]  # 25 MiB, then 12.7 MiB

    # the reader goes away: exit 0, no traceback
    p = subprocess.Popen([sys.executable, "-c", _top_code("host_root=%r" % TREE, 0.1)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=REPO, env=_env())
    assert p.stdout.readline().startswith(b"cgstat top - ")
    p.stdout.close()
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert b"Traceback" not in err


# -- the screen without a terminal -------------------------------------------------------------

HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07\n\u202etxt.exe\u009b31m\r"


def _record(name, cgroup, cpu=None, ws=None, limit_cores=None, gpu=None, network=None, read_rate=None):
    container = dict(blank(fields.RECORD, "container", True), name=name) if name is not None else None
    if gpu is not None:
        gpu = dict(blank(fields.RECORD, "gpu", True), **gpu)
    if network is not None:
        network = dict(example(fields.RECORD, "network"), **network)
    return record(host="h\x1b[31m", cgroup=cgroup, interval_s=1.0, container=container,
                  cpu={"percent": cpu, "limit_cores": limit_cores},
                  memory={"working_set_bytes": ws, "limit_bytes": 64 << 20},
                  io={"read_bytes_per_second": read_rate, "write_bytes_per_second": 0.0 if read_rate is not None else None,
                      "read_bytes_total": 0, "write_bytes_total": 0},
                  pids={"current": 3}, gpu=gpu, network=network)


def _event(cgroup, kind, severity="warning", resolves=None, message="msg"):
    return record("event", kind=kind, severity=severity, cgroup=cgroup, message=message, resolves=resolves)


def _model(records, sort="cpu", events=()):
    m = T.Model(sort, host="h\x1b[31m")
    m.update(records, events[0] if events else (), now=0.0)
    return m


def _records():
    return [
        _record("burner", "/a", cpu=50.1, ws=1 << 20, limit_cores=0.5),
        _record("holder", "/b", cpu=0.2, ws=64 << 20, gpu={"memory_bytes": 2 << 30, "sm_percent": 87}),
        _record(None, "/" + HOSTILE, cpu=None, ws=None, read_rate=5e6,
                network={"rx_bytes_per_second": 1e3, "tx_bytes_per_second": 2e3}),
    ]


def test_hostile_names_never_reach_the_screen_raw():
    m = _model(_records(), events=[[_event("/" + HOSTILE, "memory_near_limit", message=HOSTILE)]])
    m.status = "cgstat: " + HOSTILE
    for h, w in ((40, 200), (6, 40), (3, 10)):
        lines, _ = T.compose(m, h, w, 1.0)
        assert lines
        for text, _style in lines:
            assert not UNSAFE.search(text), repr(text)
    frame = T.plain_frame(m, 1.0)
    assert len(frame.splitlines()) == 2 + 3 + 1  # title, header, 3 rows, the event: no forged line
    for line in frame.splitlines():
        assert not UNSAFE.search(line), repr(line)
    assert "\\x1b[2J" in T.plain_frame(m, 1.0)  # shown, escaped


def test_small_terminals_show_what_fits():
    m = _model(_records() + [_record("w%d" % i, "/w%d" % i, cpu=float(i)) for i in range(30)])
    for h, w in ((1, 1), (1, 80), (2, 80), (3, 80), (5, 30), (10, 15), (24, 80), (60, 250)):
        lines, view = T.compose(m, h, w, 1.0, T.View(offset=1000, skip=1000))
        assert len(lines) <= h
        for text, _style in lines:
            assert T.text_width(text) <= max(0, w - 1), (h, w, text)
        if h >= 3:
            assert lines[-1][0].startswith("q quit")  # the footer survives
            assert lines[1][0].startswith("NAME")
    lines, view = T.compose(m, 10, 80, 1.0)
    assert "rows 1-7 of 33" in lines[-1][0]
    lines, view = T.compose(m, 10, 80, 1.0, T.View(offset=5, skip=3))
    assert view == T.View(5, 3)
    assert "CPU" not in lines[1][0] and re.match(r"NAME +MEM USAGE", lines[1][0])  # scrolled right
    assert "rows 6-12 of 33" in lines[-1][0]
    # a long name is cut so the figures stay on screen
    m2 = _model([_record("x" * 300, "/long", cpu=12.5)])
    lines, _ = T.compose(m2, 10, 120, 1.0)
    row = lines[2][0]
    assert "12.50%" in row and "~" in row


def test_every_row_can_be_scrolled_to_the_top_for_enter():
    # Enter opens the row at the top of the screen: with every row on screen, scrolling
    # down must still bring the second and third there
    m = _model(_records())
    names = [r.cells[0] for r in m.sorted_rows()]
    for offset in range(len(names)):
        lines, view = T.compose(m, 40, 200, 1.0, T.View(offset=offset))
        assert view.offset == offset and lines[2][0].startswith(names[offset])
    lines, view = T.compose(m, 40, 200, 1.0, T.View(offset=1000))
    assert view.offset == len(names) - 1
    assert "rows 3-3 of 3" in lines[-1][0]


def test_sorting_and_formatting():
    m = _model(_records())
    def order():
        return [r.cells[0] for r in m.sorted_rows()]

    hostile_shown = T.escape_controls("/" + HOSTILE)
    assert order() == ["burner", "holder", hostile_shown]  # unknown CPU last
    m.sort = "memory"
    assert order() == ["holder", "burner", hostile_shown]
    m.sort = "gpu"
    assert order()[0] == "holder"
    m.sort = "io"
    assert order()[0] == hostile_shown
    m.sort = "name"
    assert order() == sorted(order(), key=str.lower)
    rows = {r.cells[0]: r.cells for r in m.rows}
    assert rows["burner"][1] == "--"  # CONTAINER ID: not a container
    assert rows["burner"][2:4] == ["50.10%", "50%"]
    assert rows["holder"][9:11] == ["2GiB", "87.00%"]
    assert rows["burner"][6] == "--" and rows["burner"][9] == "--"  # no network, gpu null
    assert rows[hostile_shown][6] == "1kB / 2kB" and rows[hostile_shown][7] == "5MB / 0B"
    for bad in ("bogus", ""):
        with pytest.raises(ValueError):
            T.sort_name(bad)
    assert T.sort_name("m") == "memory" and T.sort_name("MEM") == "memory"


def test_events_mark_rows_until_resolved():
    m = T.Model("cpu", host="h")
    recs = _records()[:2]
    m.update(recs, [_event("/a", "cpu_throttled"), _event("/b", "oom_kill", "critical")], now=0.0)
    rows = {r.cells[0]: r for r in m.rows}
    assert rows["burner"].cells[-1] == "throttled" and rows["burner"].severity == "warning"
    assert rows["holder"].cells[-1] == "oom" and rows["holder"].severity == "critical"
    lines, _ = T.compose(m, 24, 200, 1.0)
    styles = {t.split()[0]: s for t, s in lines[2:4]}
    assert styles == {"burner": T.WARNING, "holder": T.CRITICAL}
    assert any("! warning cpu_throttled /a: msg" in t for t, _ in lines)  # the event list
    m.update(recs, [], now=1.0)
    assert {r.cells[0]: r.cells[-1] for r in m.rows}["burner"] == "throttled"  # still open
    m.update(recs, [_event("/a", "resolved", "info", resolves="cpu_throttled")], now=2.0)
    rows = {r.cells[0]: r for r in m.rows}
    assert rows["burner"].cells[-1] == "" and rows["burner"].severity is None
    assert "! info resolved cpu_throttled /a: msg" in m.tick_events


# -- in a real terminal --------------------------------------------------------------------------

class Tmux:
    def __init__(self, tmp_path):
        self.tmux = shutil.which("tmux")
        if not self.tmux:
            pytest.skip("tmux not installed (Debian package tmux)")
        self.sock = str(tmp_path / "tmux.sock")
        self.rc_file = tmp_path / "rc"

    def cmd(self, *args, check=True):
        return subprocess.run([self.tmux, "-S", self.sock, "-f", "/dev/null"] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=30, check=check)

    def start(self, argv, width=200, height=40):
        shell = " ".join("'%s'" % a.replace("'", "'\\''") for a in argv)
        line = "cd '%s' && %s; echo $? > '%s'" % (REPO, shell, self.rc_file)
        self.cmd("new-session", "-d", "-x", str(width), "-y", str(height), "-s", "top", line)

    def screen(self):
        r = self.cmd("capture-pane", "-p", "-t", "top", check=False)
        return r.stdout.decode("utf-8", "replace")

    def keys(self, *keys):
        self.cmd("send-keys", "-t", "top", *keys)

    def wait(self, pred, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            got = pred(text)
            if got:
                return got
            time.sleep(0.1)
        size = self.cmd("display", "-p", "-t", "top", "#{pane_width}x#{pane_height}", check=False).stdout
        raise AssertionError("timed out waiting for %s; pane %s; screen:\n%s" % (what, size, text))

    def rc(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.rc_file.exists() and self.rc_file.read_text().strip():
                return int(self.rc_file.read_text())
            time.sleep(0.1)
        raise AssertionError("top did not exit; screen:\n%s" % self.screen())

    def close(self):
        self.cmd("kill-server", check=False)


def test_tmux_resize_shows_what_fits_and_ctrl_c_exits_0(tmp_path):
    tm = Tmux(tmp_path)
    try:
        tm.start([sys.executable, "-c", _top_code("host_root=%r" % TREE, 1.0)], width=200, height=40)
        tm.wait(lambda s: "tf-training" in s and "GPU SM %" in s and "q quit" in s, "the table at 200x40")
        tm.cmd("resize-window", "-t", "top", "-x", "50", "-y", "8")

        def small(screen):
            lines = screen.rstrip("\n").splitlines()
            return (lines and lines[-1].startswith("q quit") and "rows 1-4 of 19" in screen
                    and max(len(line.rstrip()) for line in lines) <= 49 and "GPU SM %" not in screen)

        tm.wait(small, "the table cut to 50x8")
        tm.keys("Right", "Right", "Right")
        tm.wait(lambda s: re.search(r"NAME +MEM USAGE", s), "scrolled three columns right")
        tm.keys("C-c")
        assert tm.rc() == 0
    finally:
        tm.close()
