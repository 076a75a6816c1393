"""What a new user meets first: --state and --output never destroy or follow what isn't
cgstat's, bad values are one-line usage errors, never tracebacks (fuzzed), and the common
options work before and after the command."""

import json
import os
import stat
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.contract import ROOT, run_cgstat, validate

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
V2_T0 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t0")


def _snapshot(path):
    """Everything about a path that a refusal must leave as it was."""
    st_ = os.lstat(path)
    content = None
    if stat.S_ISREG(st_.st_mode):
        with open(path, "rb") as f:
            content = f.read()
    elif stat.S_ISLNK(st_.st_mode):
        content = os.readlink(path)
    return (st_.st_mode, st_.st_ino, st_.st_size, st_.st_rdev, st_.st_mtime_ns, content)


def _state_target(tmp_path, kind):
    path = tmp_path / kind
    if kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_text("keep")
    elif kind == "foreign":
        path.write_text("127.0.0.1 localhost\n::1 localhost\n")
    elif kind == "symlink":
        victim = tmp_path / "victim"
        victim.write_text("precious\n")
        path.symlink_to(victim)
    elif kind == "dangling-symlink":
        path.symlink_to(tmp_path / "would-be-created")
    elif kind == "socket":
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    return str(path)


@pytest.mark.parametrize("kind,needle", [
    ("device", "character device"),
    ("fifo", "a FIFO"),
    ("directory", "a directory"),
    ("foreign", "without cgstat's state marker"),
    ("symlink", "symbolic link"),
    ("dangling-symlink", "symbolic link"),
    ("socket", "a socket"),
])
def test_state_that_is_not_cgstats_is_refused_untouched(tmp_path, kind, needle):
    path = _state_target(tmp_path, kind)
    before = _snapshot(path)
    listing = sorted(os.listdir(tmp_path))
    records, err, rc = run_cgstat("once", "--host-root", V2, "--state", path, check=False, timeout=30)
    assert rc == 1 and records == []
    assert len(err.splitlines()) == 1 and needle in err, err
    assert _snapshot(path) == before
    assert sorted(os.listdir(tmp_path)) == listing  # no lock, no temporary file left
    assert not os.path.exists(tmp_path / "would-be-created")


@pytest.mark.parametrize("kind", ["device", "fifo", "symlink", "foreign"])
def test_lock_that_is_not_cgstats_is_refused_untouched(tmp_path, kind):
    lock = _state_target(tmp_path, kind)
    state = str(tmp_path / "once.state")
    os.rename(lock, state + ".lock")
    before = _snapshot(state + ".lock")
    records, err, rc = run_cgstat("once", "--host-root", V2, "--state", state, check=False, timeout=30)
    assert rc == 1 and records == [] and len(err.splitlines()) == 1 and "lock file" in err, err
    assert _snapshot(state + ".lock") == before
    assert not os.path.exists(state) and not os.path.exists(tmp_path / "victim.lock")


@pytest.mark.parametrize("content", [None, b"", b"\n"])
def test_missing_or_empty_state_works_and_becomes_cgstats(tmp_path, content):
    state = tmp_path / "once.state"
    if content is not None:
        state.write_bytes(content)
    first, _, _ = run_cgstat("once", "--host-root", V2_T0, "--state", str(state), "--all")
    assert first and all(r["interval_s"] is None for r in first)
    assert state.read_bytes().startswith(b'{"cgstat":"once-state"')
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o600
    second, err, _ = run_cgstat("once", "--host-root", V2, "--state", str(state), "--all")
    assert any(r["interval_s"] for r in second), err
    for r in second:
        validate(r)


def test_state_of_cgstat_0_1_without_marker_is_still_used(tmp_path):
    state = tmp_path / "once.state"
    run_cgstat("once", "--host-root", V2_T0, "--state", str(state), "--all")
    obj = json.loads(state.read_bytes())
    del obj["cgstat"]  # what cgstat 0.1 wrote
    state.write_text(json.dumps(obj))
    records, err, _ = run_cgstat("once", "--host-root", V2, "--state", str(state), "--all")
    assert any(r["interval_s"] for r in records) and "refusing" not in err


def test_state_below_a_file_says_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    records, err, rc = run_cgstat("once", "--host-root", V2, "--state", str(tmp_path / "file" / "x"), check=False)
    assert rc == 1 and records == [] and "Not a directory" in err and len(err.splitlines()) == 1


def test_output_that_cannot_be_opened_fails_at_start(tmp_path):
    for args, env in ((["--output", "/nonexistent-cgstat-dir/x.jsonl"], {}),
                      ([], {"CGSTAT_OUTPUT": "/nonexistent-cgstat-dir/x.jsonl"})):
        records, err, rc = run_cgstat("stream", "--count", "2", "--host-root", V2, *args, env=env,
                                      check=False, timeout=30)
        assert rc == 1 and records == [], err
        assert err.splitlines() == ["cgstat: cannot open /nonexistent-cgstat-dir/x.jsonl: No such file or directory"]


@pytest.mark.parametrize("kind", ["symlink", "dangling-symlink", "fifo", "device", "directory"])
@pytest.mark.parametrize("mode", ["stream", "once"])
def test_output_link_or_special_file_is_refused(tmp_path, kind, mode):
    path = _state_target(tmp_path, kind)
    before = _snapshot(path)
    extra = ["--count", "1", "--interval", "0.1"] if mode == "stream" else ["--window", "0"]
    records, err, rc = run_cgstat(mode, "--host-root", V2, "--output", path, *extra, check=False, timeout=30)
    assert rc == 1 and records == [] and len(err.splitlines()) == 1 and "refusing" in err, err
    assert _snapshot(path) == before
    assert not os.path.exists(tmp_path / "would-be-created")


def test_new_output_file_is_0600_unless_asked(tmp_path):
    os.umask(0o022)
    run_cgstat("once", "--window", "0", "--host-root", V2, "--output", str(tmp_path / "a.jsonl"))
    run_cgstat("once", "--window", "0", "--host-root", V2, "--output", str(tmp_path / "b.jsonl"),
               "--output-mode", "640")
    assert stat.S_IMODE(os.stat(tmp_path / "a.jsonl").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "b.jsonl").st_mode) == 0o640
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) > 0


@pytest.mark.parametrize("args,env", [
    (["stream", "--interval", "inf"], {}),
    (["stream", "--interval", "1e300"], {}),
    (["stream", "--interval", "nan"], {}),
    (["stream", "--interval", "0.001"], {}),
    (["stream"], {"CGSTAT_INTERVAL": "inf"}),
    (["once", "--window", "inf"], {}),
    (["once", "--window", "nan"], {}),
    (["once", "--window", "0.01"], {}),
    (["once", "--match", "a{99999999999}"], {}),
    (["once", "--match", "("], {}),
    (["once", "--state", ""], {}),
    (["once", "--output", ""], {}),
    (["once", "--output-mode", "999"], {}),
    (["pid", "99999999999999999999"], {}),
    (["pid", "--", "-5"], {}),
    (["pid", "0"], {}),
    (["stream", "--count", "0"], {}),
])
def test_bad_values_are_one_line_usage_errors(args, env):
    records, err, rc = run_cgstat(*args, env=env, check=False, timeout=30)
    assert rc == 2 and records == [], err
    assert len(err.splitlines()) == 1 and err.startswith("cgstat: ") and "Traceback" not in err, err


@pytest.mark.parametrize("argv", [
    ["--host-root", V2, "once", "--window", "0", "--match", "docker-5113"],
    ["once", "--host-root", V2, "--window", "0", "--match", "docker-5113"],
    ["--match", "docker-5113", "--host-root", V2, "once", "--window", "0"],
    ["--host-root", "/nonexistent", "once", "--host-root", V2, "--window", "0", "--match", "docker-5113"],
])
def test_common_options_before_or_after_the_command(argv):
    records, _, _ = run_cgstat(*argv)
    assert [r["container"]["name"] for r in records] == ["tf-training"]


def test_all_before_the_command():
    every, _, _ = run_cgstat("--all", "--host-root", V2, "once", "--window", "0")
    default, _, _ = run_cgstat("--host-root", V2, "once", "--window", "0")
    assert len(every) == 34 and len(default) < len(every)


def test_host_root_that_is_not_a_root_is_said(tmp_path):
    (tmp_path / "sys" / "fs" / "cgroup").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    _, err, _ = run_cgstat("--host-root", "/sys", "once", "--window", "0", check=False)
    assert "does not look like a host's root" in err and "no processes under /sys/proc" in err
    _, err, _ = run_cgstat("--host-root", V2, "once", "--window", "0")
    assert "does not look like" not in err  # a recorded tree has its /proc/<pid> folders


# -- the command line fuzzed: any combination is a clean exit, never a traceback ----------

_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1", "0.1", "0.05", "inf", "-inf", "nan", "1e300", "1e-300", "3601",
                     "86401", "99999999999999999999", "", " ", "abc", "(", "a{99999999999}", "((((",
                     "/", "/nonexistent", V2, "--", "-5", "0x10", "1_000", "７", "\x00", "600", "999"]),
    st.text(max_size=12),
)
_OPTIONS = ["--interval", "--count", "--window", "--state", "--output", "--output-mode", "--match",
            "--host-root", "--all", "--version", "--help", "--format", "--events-window", "--no-events",
            "--listen", "--max-user-cgroups", "-o", "--points", "--sort", "--gpu-idle-memory", "--gpu-idle-window"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(["stream", "once", "pid", "serve", "report", "top", "", "frob"]),
       before=st.lists(st.tuples(st.sampled_from(_OPTIONS), _VALUES), max_size=2),
       after=st.lists(st.tuples(st.sampled_from(_OPTIONS), _VALUES), max_size=4),
       args=st.lists(_VALUES, max_size=2))
def test_fuzzed_command_lines_never_give_a_traceback(monkeypatch, command, before, after, args):
    """In-process, with the runs replaced: what is fuzzed is parsing and checking values.
    A value that gets through must be within the documented bounds."""
    import math

    from cgstat import cli

    seen = []

    def fake_stream(agent, sink, interval, count, events=None, listen=None, gpu_idle_memory_bytes=1 << 30,
                    log_state=None, budget=None, label_allow=None, web_config=None):
        assert budget is None or budget.max_series >= 0
        assert web_config is None or listen  # --web-config-file guards /metrics: only with --listen
        assert math.isfinite(interval) and cli.MIN_INTERVAL_S <= interval <= cli.MAX_INTERVAL_S
        assert gpu_idle_memory_bytes >= 1
        assert count is None or count >= 1
        seen.append("stream")
        return 0

    def fake_once(agent, sink, state, window, events=True):
        assert window == 0 or cli.MIN_INTERVAL_S <= window <= cli.MAX_WINDOW_S
        assert state is None or state != ""
        seen.append("once")
        return 0

    def fake_pid(agent, pids):
        assert pids and all(1 <= p <= cli.MAX_PID for p in pids)
        seen.append("pid")
        return 0

    import cgstat.app.once as once_mod
    import cgstat.app.pid as pid_mod
    import cgstat.app.stream as stream_mod
    import cgstat.pipeline.sampler as sampler_mod

    monkeypatch.setattr(stream_mod, "run_stream", fake_stream)  # the commands import them when run
    monkeypatch.setattr(once_mod, "run_once", fake_once)
    monkeypatch.setattr(pid_mod, "run_pid", fake_pid)
    import cgstat.outputs.report as report_mod

    monkeypatch.setattr(report_mod, "build_report", lambda *a, **k: None)
    import cgstat.app.top as top_mod

    monkeypatch.setattr(top_mod, "run_top", lambda *a, **k: 0)
    monkeypatch.setattr(sampler_mod, "Sampler", lambda *a, **k: _FakeSampler())
    argv = [x for opt, val in before for x in (opt, val)]
    argv += [command] if command else []
    argv += [x for opt, val in after for x in (opt, val)] + args
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code in (0, 1, 2), argv


def test_no_arguments_prints_the_help():
    proc = subprocess.run([sys.executable, "-m", "cgstat"], capture_output=True, cwd=ROOT, timeout=30)
    assert proc.returncode == 0 and b"Usage: cgstat" in proc.stdout and proc.stderr == b""


class _FakeSampler:
    class warner:  # noqa: N801  (the attribute the CLI hands to the sinks)
        @staticmethod
        def warn(key, message):
            pass
