"""The command line end to end: modes, exit codes, pipes, signals, output and state faults."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.contract import ROOT, run_cgstat, validate

FIX = os.path.join(ROOT, "tests", "fixtures")
V2 = os.path.join(FIX, "v2-systemd", "t1")


def _popen(*args, **kw):
    env = dict(os.environ)
    env.pop("CGSTAT_HOST_ROOT", None)
    env.update(kw.pop("env", {}))
    return subprocess.Popen([sys.executable, "-m", "cgstat", *args], cwd=ROOT, env=env,
                            stdout=kw.pop("stdout", subprocess.PIPE), stderr=subprocess.PIPE, **kw)


def _lines_whole(path):
    data = open(path, "rb").read()
    assert data == b"" or data.endswith(b"\n"), "a partial line was left behind"
    return [json.loads(line) for line in data.splitlines()]


def test_env_host_root_and_match():
    records, _, _ = run_cgstat("once", "--window", "0", "--match", "docker-5113", env={"CGSTAT_HOST_ROOT": V2})
    assert len(records) == 1 and records[0]["container"]["name"] == "tf-training"


@pytest.mark.parametrize("args,code,needle", [
    (["stream", "--interval", "0"], 2, "from 0.1 to 86400 seconds"),
    (["stream", "--interval", "abc"], 2, "interval"),
    (["once", "--window", "-1"], 2, "from 0 or 0.1 to 3600 seconds"),
    (["once", "--match", "("], 2, "'(' is not a regular expression"),
    (["frobnicate"], 2, "No such command"),
    (["once", "--host-root", "/nonexistent-cgstat-root"], 1, "No such file or directory"),
    (["once", "--host-root", "/tmp"], 1, "no cgroup filesystem"),
    # an empty workload names nothing (not the root cgroup)
    (["story", ""], 2, "WORKLOAD"),
    (["procs", ""], 2, "WORKLOAD"),
    # an option without the one it works on is said, not silently ignored
    (["stream", "--processes-by", "cpu", "--count", "1"], 2, "give --processes N too"),
    (["record", "--processes-by", "cpu", "--count", "1"], 2, "give --processes N too"),
    (["stream", "--label-allow", "x", "--count", "1"], 2, "give --listen or --otlp-endpoint too"),
    (["stream", "--metrics", "+procs", "--count", "1"], 2, "give --listen or --otlp-endpoint too"),
    (["stream", "--otlp-headers-file", "/nonexistent", "--count", "1"], 2, "give --otlp-endpoint too"),
    (["serve", "--otlp-client-key", "/nonexistent", "--count", "1"], 2, "give --otlp-endpoint too"),
])
def test_exit_codes_and_one_line_reasons(args, code, needle):
    _, err, rc = run_cgstat(*args, check=False)
    assert rc == code, err
    assert needle in err and "Traceback" not in err
    assert len(err.splitlines()) == 1, err


def test_pipe_closed_by_reader_exits_zero():
    proc = subprocess.run(f"set -o pipefail; {sys.executable} -m cgstat stream --interval 0.1 "
                          f"--host-root {V2} --all | head -n 1", shell=True, cwd=ROOT,
                          capture_output=True, executable="/bin/bash", timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert b"Traceback" not in proc.stderr and b"BrokenPipe" not in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_exit_zero_with_whole_lines(tmp_path, sig):
    out = str(tmp_path / "out.jsonl")
    proc = _popen("stream", "--interval", "0.1", "--output", out, "--host-root", V2, "--all")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not os.path.exists(out) or os.path.getsize(out) == 0):
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    records = _lines_whole(out)
    assert records and len(records) % 34 == 0  # whole batches of the 34 cgroups


def test_sighup_reopens_rotated_file(tmp_path):
    out = tmp_path / "out.jsonl"
    proc = _popen("stream", "--interval", "0.1", "--output", str(out), "--host-root", V2)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not out.exists() or out.stat().st_size == 0):
            time.sleep(0.05)
        os.rename(out, tmp_path / "out.jsonl.1")  # logrotate's move
        proc.send_signal(signal.SIGHUP)
        while time.monotonic() < deadline and not out.exists():
            time.sleep(0.05)
        while time.monotonic() < deadline and out.stat().st_size == 0:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert _lines_whole(tmp_path / "out.jsonl.1") and _lines_whole(out)


def test_once_state_rates_and_corrupt_state(tmp_path):
    state = str(tmp_path / "state")
    t0, t1 = os.path.join(FIX, "v2-systemd", "t0"), V2
    with open(state, "w") as f:
        f.write('{"cgstat":"once-state","version": 1, "boot_id": ')  # truncated, but cgstat's
    first, err, _ = run_cgstat("once", "--host-root", t0, "--state", state, "--all")
    assert "corrupt" in err and all(r["interval_s"] is None for r in first)
    second, err, _ = run_cgstat("once", "--host-root", t1, "--state", state, "--all")
    assert "corrupt" not in err
    assert any(r["interval_s"] for r in second)
    assert not any(f.startswith(".cgstat-state-") for f in os.listdir(tmp_path))  # no temp left


@pytest.mark.parametrize("edit,needle", [
    (lambda s: {**s, "version": 99}, "format version"),
    (lambda s: {**s, "boot_id": "another-boot"}, "another boot"),
    (lambda s: {**s, "time_s": s["time_s"] + 10**6}, "future"),
    (lambda s: {**s, "cgroups": {"/x": {"inodes": "junk"}}}, "corrupt"),
    (lambda s: {**s, "time_s": "soon"}, "corrupt"),
])
def test_untrusted_state_is_reported_and_replaced(tmp_path, edit, needle):
    state = str(tmp_path / "state")
    t0 = os.path.join(FIX, "v2-systemd", "t0")
    run_cgstat("once", "--host-root", t0, "--state", state, "--all")
    saved = json.load(open(state))
    with open(state, "w") as f:
        json.dump(edit(saved), f)
    records, err, _ = run_cgstat("once", "--host-root", V2, "--state", state, "--all")
    assert needle in err
    assert all(r["interval_s"] is None for r in records)  # nothing trusted
    assert json.load(open(state))["version"] == 1  # replaced by a good one


def test_overlapping_cron_runs_share_the_state_safely(tmp_path):
    state = str(tmp_path / "state")
    # Each to a file, not a pipe: a run holds the lock while it writes, and a batch over a
    # pipe's 64 KiB would wait for this test to read that pipe while the test waits on another.
    files = [open(str(tmp_path / ("out%d" % i)), "w+b") for i in range(4)]
    procs = [_popen("once", "--state", state, "--host-root", V2, "--all", stdout=f) for f in files]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    for f in files:
        f.seek(0)
        for line in f.read().splitlines():
            validate(json.loads(line))
        f.close()
    assert json.load(open(state))["version"] == 1


def test_host_without_gpu_or_runtimes_has_no_names_and_no_errors_about_them():
    # A recording of a host with no runtime state (a bare runc container, cgroupfs paths):
    # whatever containers this machine runs, they are not in it.
    records, err, _ = run_cgstat("once", "--window", "0", "--all", "--host-root",
                                 os.path.join(FIX, "hybrid-local", "t1"))
    assert err.splitlines() == ["cgstat: hybrid cgroup layout; showing every cgroup"]
    containers = [r["container"] for r in records if r["container"]]
    assert [(c["runtime"], c["name"], c["image"]) for c in containers] == [("docker", None, None)]


def test_slow_tick_warns_once_and_skips_missed_slots(monkeypatch, capfd):
    from cgstat.app import stream as modes
    from cgstat.outputs.jsonl import StdoutSink
    from cgstat.diagnostics import Warner

    class SlowAgent:
        ticks = 0

        def __init__(self):
            self.warner = Warner(stream=sys.stderr)

        def tick(self):
            SlowAgent.ticks += 1
            time.sleep(0.25)  # makes the tick slow; the assertion is on the warning, not the time
            return [{"n": SlowAgent.ticks}]

        def records(self):  # what stream takes: the records one at a time
            yield from self.tick()

        def track_exits(self):  # exit records: none here
            pass

        def gpu_deadline(self, seconds):  # no GPU here
            pass

        gpu_reads_late_total = 0
        gpu_call_errors = {}

        def warm_up(self):
            SlowAgent.ticks += 1

    monkeypatch.setattr(modes.Schedule, "install_signals", lambda self: self)  # pytest keeps its own
    assert modes.run_stream(SlowAgent(), [StdoutSink()], 0.1, 4) == 0
    out, err = capfd.readouterr()
    assert [json.loads(x)["n"] for x in out.splitlines()] == [2, 3, 4, 5]  # every batch out
    assert err.count("longer than the 0.1 s interval") == 1


def test_sigterm_during_the_once_window_exits_quietly():
    proc = _popen("once", "--window", "30", "--host-root", V2)
    # first sample taken (the naming stage's warnings, if any, come before): in the window now
    lines = [proc.stderr.readline()]
    while b"showing" not in lines[-1] and len(lines) < 3:
        lines.append(proc.stderr.readline())
    assert b"showing" in lines[-1], lines
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and out == b"" and b"Traceback" not in err


def test_state_folder_is_created(tmp_path):
    state = tmp_path / "new" / "folder" / "once.state"
    run_cgstat("once", "--host-root", V2, "--state", str(state))
    assert json.load(open(state))["version"] == 1


def test_help_and_version_load_no_pipeline_server_or_gpu_library():
    """A cron line's --version, --help or usage error must not pay for the sampler, the HTTP
    server, pynvml or importlib.metadata: the commands import what they run."""
    probe = ("import sys, cgstat.cli\n"
             "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('cgstat', 'pynvml', 'socket', "
             "'gzip') or m == 'importlib.metadata')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout.split()
    assert "cgstat.cli" in out
    for heavy in ("cgstat.pipeline.sampler", "cgstat.kernel.discover", "cgstat.outputs.prometheus.http",
                  "cgstat.outputs.jsonl", "pynvml", "socket", "gzip", "importlib.metadata"):
        assert heavy not in out, out


def _nofile(soft, hard):
    def set_limit():
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return set_limit


def test_agent_raises_a_systemd_soft_fd_limit_and_sizes_its_kept_descriptors():
    """systemd starts services at soft 1024 / hard 524288: the agent raises its own soft
    limit (never past the hard one), and the kept-descriptor cap follows."""
    probe = ("import resource\n"
             "from cgstat.kernel import handles, rlimits\n"
             "before = handles.KeptFiles().cap\n"
             "soft = rlimits.raise_nofile_limit()\n"
             "print(before, soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0], handles.KeptFiles().cap)")
    env = dict(os.environ)
    env.pop("CGSTAT_MAX_KEPT_FDS", None)
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         universal_newlines=True, check=True, preexec_fn=_nofile(1024, 2048)).stdout.split()
    assert [int(x) for x in out] == [704, 2048, 2048, 2048 // 4 * 3 - 64]

    # the CLI does it for the agent's process: read the running stream's own limits
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # raising it would need CAP_SYS_RESOURCE
    hard = 40000 if hard == resource.RLIM_INFINITY else hard
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "0.2", "--match", "^/$"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            preexec_fn=_nofile(1024, hard))
    try:
        assert proc.stdout.readline().startswith(b"{")
        with open(f"/proc/{proc.pid}/limits") as f:
            line = next(x for x in f if x.startswith("Max open files"))
        assert line.split()[3:5] == [str(min(hard, 32768)), str(hard)]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["stream", "--help"]])
def test_version_and_help_import_neither_the_store_nor_the_sampler(args):
    probe = ("import runpy, sys\n"
             f"sys.argv = ['cgstat'] + {args!r}\n"
             "try:\n"
             "    runpy.run_module('cgstat', run_name='__main__')\n"
             "except SystemExit as exc:\n"
             "    assert exc.code == 0, exc.code\n"
             "print(' '.join(sorted(m for m in sys.modules if m.startswith(('cgstat.store', 'cgstat.outputs.store', "
             "'cgstat.pipeline.sampler', 'cgstat.kernel.discover')))))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, universal_newlines=True)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.splitlines()[-1].split()
    if args == ["stream", "--help"]:  # the store's sink kind is registered: its options, not the store
        assert "cgstat.outputs.store" in loaded
        loaded.remove("cgstat.outputs.store")
    assert loaded == []


def test_events_format_offers_exactly_what_works():
    _, err, rc = run_cgstat("events", "--format", "html", check=False)
    assert rc == 2 and "'html' is not one of jsonl, csv, table" in err, err
