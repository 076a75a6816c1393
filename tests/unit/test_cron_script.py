"""bin/cgstat-cron: with stub `cgstat` commands on PATH (the script's own logic) and with
the real cgstat (what the two give together: private files, whole lines, refused links).

The script must refuse unsafe folders and files before running anything, hand the output
and the state to cgstat (`once --state S --output O`), run under umask 077, serialise
overlapping runs, and say why on stderr with the documented exit statuses.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bin" / "cgstat-cron"

LINE1 = '{"cgroup": "/a", "cpu_usage_pct": 1.5}'
LINE2 = '{"cgroup": "/b", "cpu_usage_pct": null}'

# Appends two lines to --output, like `cgstat once --output` (whose own safety is tested
# in the cgstat tests; this stub only stands in for it), and records its arguments.
STUB_OK = f"""#!/bin/sh
printf '%s\\n' "$*" >> "$STUB_ARGS"
out=
while [ $# -gt 0 ]; do
    case $1 in --output) out=$2; shift ;; esac
    shift
done
: > "$STUB_PROBE"
printf '%s\\n' '{LINE1}' '{LINE2}' >> "$out"
"""

STUB_FAIL = """#!/bin/sh
printf '%s\\n' "$*" >> "$STUB_ARGS"
echo "cgstat: /sys/fs/cgroup unreadable" >&2
exit 1
"""

STUB_USAGE = """#!/bin/sh
echo "cgstat: No such option: --bogus (see cgstat once --help)" >&2
exit 2
"""

# Succeeds with a notice on stderr (cgstat prints the layout it found).
STUB_NOTICE = f"""#!/bin/sh
out=
while [ $# -gt 0 ]; do
    case $1 in --output) out=$2; shift ;; esac
    shift
done
echo "cgstat: hybrid cgroup layout; showing every cgroup" >&2
printf '%s\\n' '{LINE1}' >> "$out"
"""

# Holds the lock long enough for a second run to find it taken.
STUB_SLOW = f"""#!/bin/sh
out=
while [ $# -gt 0 ]; do
    case $1 in --output) out=$2; shift ;; esac
    shift
done
: > "$STUB_STARTED"
sleep 2
printf '%s\\n' '{LINE1}' >> "$out"
"""

STUB_HANG = "#!/bin/sh\nexec sleep 30\n"


def make_stub(tmp_path: Path, body: str) -> Path:
    bindir = tmp_path / "stubbin"
    bindir.mkdir(exist_ok=True)
    stub = bindir / "cgstat"
    stub.write_text(body)
    stub.chmod(0o755)
    return bindir


def env_for(tmp_path: Path, bindir: Path | None = None, path_rest: str | None = None, **extra: str) -> dict:
    env = dict(os.environ)
    rest = path_rest if path_rest is not None else os.environ.get("PATH", "/usr/bin:/bin")
    env.update(
        PATH=f"{bindir}:{rest}" if bindir else rest,
        CGSTAT_CRON_OUT=str(out_file(tmp_path)),
        CGSTAT_CRON_STATE=str(state_file(tmp_path)),
        STUB_ARGS=str(tmp_path / "args"),
        STUB_STARTED=str(tmp_path / "started"),
        STUB_PROBE=str(tmp_path / "probe" / "made-by-cgstat"),
    )
    (tmp_path / "probe").mkdir(exist_ok=True)
    env.pop("CGSTAT_CRON_BIN", None)
    env.pop("CGSTAT_CRON_WAIT", None)
    env.pop("CGSTAT_CRON_TIMEOUT", None)
    env.pop("CGSTAT_CRON_QUIET", None)
    env.update(extra)
    return env


def run(env: dict, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False, **kw
    )


def out_file(tmp_path: Path) -> Path:
    return tmp_path / "log" / "cgstat.jsonl"


def state_file(tmp_path: Path) -> Path:
    return tmp_path / "lib" / "once.state"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def stub_ran(tmp_path: Path) -> bool:
    return (tmp_path / "args").exists()


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# --- With a stub cgstat: the script's own logic.


def test_hands_output_and_state_to_cgstat(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    for _ in range(2):
        proc = run(env, "--all")
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
    text = out_file(tmp_path).read_text()
    assert text == f"{LINE1}\n{LINE2}\n" * 2
    state, out = state_file(tmp_path), out_file(tmp_path)
    assert (tmp_path / "args").read_text().splitlines() == [f"once --state {state} --output {out} --all"] * 2
    # Folders made for cgstat, private to the running user.
    assert mode(state.parent) == 0o700 and mode(out.parent) == 0o700
    # Nothing of the script's own beside the output (no temporary or lock files).
    assert sorted(p.name for p in out.parent.iterdir()) == ["cgstat.jsonl"]
    assert sorted(p.name for p in state.parent.iterdir()) == []


def test_cgstat_runs_under_umask_077(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    proc = run(env)
    assert proc.returncode == 0, proc.stderr
    assert mode(tmp_path / "probe" / "made-by-cgstat") == 0o600
    assert mode(out_file(tmp_path)) == 0o600  # the stub's `>>` obeys the umask too


def test_nested_missing_folders_are_created_private(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out.jsonl"
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK), CGSTAT_CRON_OUT=str(out))
    proc = run(env)
    assert proc.returncode == 0, proc.stderr
    assert mode(tmp_path / "a") == 0o700 and mode(tmp_path / "a" / "b") == 0o700


def test_failure_is_reported_with_cgstats_reason(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_FAIL))
    proc = run(env)
    assert proc.returncode == 1
    assert "cgstat once failed (exit 1)" in proc.stderr
    assert "unreadable" in proc.stderr  # cgstat's own message passes through
    assert not out_file(tmp_path).exists()


def test_bad_usage_keeps_status_2(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_USAGE))
    proc = run(env, "--bogus")
    assert proc.returncode == 2
    assert "No such option" in proc.stderr


def test_stderr_is_quiet_on_success_unless_asked(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_NOTICE))
    proc = run(env)
    assert proc.returncode == 0
    assert proc.stderr == ""  # cron mails nothing while all is well
    proc = run({**env, "CGSTAT_CRON_QUIET": "0"})
    assert proc.returncode == 0
    assert "hybrid cgroup layout" in proc.stderr
    assert out_file(tmp_path).read_text() == f"{LINE1}\n" * 2


def test_missing_cgstat_is_reported(tmp_path: Path) -> None:
    env = env_for(tmp_path, CGSTAT_CRON_BIN=str(tmp_path / "no-such-cgstat"))
    proc = run(env)
    assert proc.returncode == 127
    assert "command not found" in one_line(proc.stderr)


def test_timeout_kills_cgstat(tmp_path: Path) -> None:
    if shutil.which("timeout") is None:
        pytest.skip("timeout(1) not installed")
    env = env_for(tmp_path, make_stub(tmp_path, STUB_HANG), CGSTAT_CRON_TIMEOUT="1")
    start = time.monotonic()
    proc = run(env)
    assert time.monotonic() - start < 20
    assert proc.returncode == 124
    assert "timed out after 1s" in proc.stderr


@pytest.mark.parametrize("name,value", [
    ("CGSTAT_CRON_WAIT", "soon"),
    ("CGSTAT_CRON_TIMEOUT", "-1"),
    ("CGSTAT_CRON_OUT", "relative/out.jsonl"),
    ("CGSTAT_CRON_STATE", "once.state"),
])
def test_malformed_settings_are_usage_errors(tmp_path: Path, name: str, value: str) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK), **{name: value})
    proc = run(env)
    assert proc.returncode == 2
    assert name in one_line(proc.stderr)
    assert not stub_ran(tmp_path)


def test_defaults_are_root_only_folders_apart_from_the_service() -> None:
    text = SCRIPT.read_text()
    assert "OUT=${CGSTAT_CRON_OUT:-/var/log/cgstat-cron/cgstat.jsonl}" in text
    assert "STATE=${CGSTAT_CRON_STATE:-/var/lib/cgstat-cron/once.state}" in text
    assert "umask 077" in text
    # No shell redirection onto a file path: cgstat opens the output and the state.
    code = [line.split("#")[0] for line in text.splitlines()]
    assert not any(">>" in line or "truncate" in line or "mktemp" in line for line in code)


# --- Refusals: nothing is run, nothing is written through a link.


@pytest.mark.parametrize("which", ["output", "lock", "state"])
@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-file", "dangling"])
def test_symlinked_output_lock_or_state_is_refused(tmp_path: Path, which: str, target_exists: bool) -> None:
    """Nothing is written through the link: an existing target is left as it was, a missing
    one is not created."""
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    state = state_file(tmp_path)
    link = {"output": out_file(tmp_path), "lock": Path(f"{state}.lock"), "state": state}[which]
    link.parent.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    if target_exists:
        target.write_text("precious\n")
    link.symlink_to(target)
    proc = run(env)
    assert proc.returncode == 1
    assert "symbolic link" in one_line(proc.stderr)
    if target_exists:
        assert target.read_text() == "precious\n"
    else:
        assert not target.exists()
    assert not stub_ran(tmp_path)


def test_fifo_as_output_is_refused_without_hanging(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    out = out_file(tmp_path)
    out.parent.mkdir(mode=0o700)
    os.mkfifo(out)
    proc = run(env)
    assert proc.returncode == 1
    assert "not a regular file" in one_line(proc.stderr)


@pytest.mark.parametrize("which", ["output", "state"])
def test_symlinked_folder_is_refused(tmp_path: Path, which: str) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    folder = out_file(tmp_path).parent if which == "output" else state_file(tmp_path).parent
    folder.symlink_to(real)
    proc = run(env)
    assert proc.returncode == 1
    assert f"the {which} folder" in one_line(proc.stderr) and "symbolic link" in proc.stderr
    assert list(real.iterdir()) == []
    assert not stub_ran(tmp_path)


@pytest.mark.parametrize("folder_mode", [0o770, 0o707, 0o722])
def test_folder_writable_by_others_is_refused(tmp_path: Path, folder_mode: int) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    folder = out_file(tmp_path).parent
    folder.mkdir()
    folder.chmod(folder_mode)
    proc = run(env)
    assert proc.returncode == 1
    assert "writable by group or others" in one_line(proc.stderr)
    assert not stub_ran(tmp_path)


def test_parent_writable_by_anyone_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = shared / "cron" / "out.jsonl"
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK), CGSTAT_CRON_OUT=str(out))
    proc = run(env)
    assert proc.returncode == 1
    assert "writable by others" in one_line(proc.stderr)
    assert not stub_ran(tmp_path)
    shared.chmod(0o1777)  # like /tmp: others cannot rename or remove our folder
    proc = run(env)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == f"{LINE1}\n{LINE2}\n"


# --- Overlapping runs.


def test_overlapping_runs_are_serialised_with_flock(tmp_path: Path) -> None:
    if shutil.which("flock") is None:
        pytest.skip("flock(1) not installed")
    env = env_for(tmp_path, make_stub(tmp_path, STUB_SLOW))
    first = subprocess.Popen(
        ["/bin/sh", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for((tmp_path / "started").exists, 10, every_s=0.02, what="the first run started")
        second = run({**env, "CGSTAT_CRON_WAIT": "0"})
        assert second.returncode == 75
        assert "still holds" in one_line(second.stderr)
        # With time to wait, a run queues behind the first one instead.
        third = run({**env, "CGSTAT_CRON_WAIT": "20"})
        assert third.returncode == 0, third.stderr
    finally:
        _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert out_file(tmp_path).read_text() == f"{LINE1}\n" * 2
    # The lock is a flock on the state folder: no lock file is left anywhere.
    assert list(state_file(tmp_path).parent.iterdir()) == []


def test_lock_is_the_state_folder(tmp_path: Path) -> None:
    """Whoever holds an flock on the state folder makes the run wait, then skip."""
    if shutil.which("flock") is None:
        pytest.skip("flock(1) not installed")
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK), CGSTAT_CRON_WAIT="1")
    state_file(tmp_path).parent.mkdir(mode=0o700)
    fd = os.open(state_file(tmp_path).parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = time.monotonic()
        proc = run(env)
        assert proc.returncode == 75
        assert time.monotonic() - start >= 0.9
        assert not stub_ran(tmp_path)
    finally:
        os.close(fd)
    assert run(env).returncode == 0


# --- With the real cgstat: private files, whole lines, cgstat's own lock.


def real_cgstat() -> Path:
    found = Path(sys.executable).parent / "cgstat"
    if not found.exists():
        pytest.skip("no cgstat console script beside this Python")
    return found


def check_lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


def test_real_cgstat_files_are_private_and_lines_whole(tmp_path: Path) -> None:
    env = env_for(tmp_path, CGSTAT_CRON_BIN=str(real_cgstat()))
    for _ in range(2):
        proc = run(env)
        assert proc.returncode == 0, proc.stderr
    out, state = out_file(tmp_path), state_file(tmp_path)
    records = check_lines(out)
    assert records, "cgstat printed no record"
    assert mode(out) == 0o600
    assert mode(state) == 0o600
    assert mode(out.parent) == 0o700 and mode(state.parent) == 0o700


def test_real_cgstat_failed_write_leaves_no_partial_batch(tmp_path: Path) -> None:
    """The write stops half-way (file size limit): cgstat cuts the file back, exit 1."""
    env = env_for(tmp_path, CGSTAT_CRON_BIN=str(real_cgstat()))
    out = out_file(tmp_path)
    out.parent.mkdir(mode=0o700)
    before = b'{"old": 1}\n' * 100
    out.write_bytes(before)
    out.chmod(0o600)
    limit = len(before) + 40  # room for less than one record

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = run(env, preexec_fn=limit_file_size)
    assert proc.returncode == 1, proc.stderr
    assert out.read_bytes() == before


def test_real_cgstat_concurrent_runs_append_whole_batches(tmp_path: Path) -> None:
    env = env_for(tmp_path, CGSTAT_CRON_BIN=str(real_cgstat()), CGSTAT_CRON_WAIT="50")
    procs = [subprocess.Popen(["/bin/sh", str(SCRIPT)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    check_lines(out_file(tmp_path))


def test_real_cgstat_lock_serialises_without_flock_tool(tmp_path: Path) -> None:
    """Where flock(1) is missing, cgstat's own flock on STATE.lock makes the run wait."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("dirname", "id", "mkdir", "stat", "timeout", "sleep"):
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} not installed")
        (tools / name).symlink_to(found)
    env = env_for(tmp_path, CGSTAT_CRON_BIN=str(real_cgstat()), path_rest=str(tools))
    state = state_file(tmp_path)
    state.parent.mkdir(mode=0o700)
    lock = Path(f"{state}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    releaser = threading.Timer(1.5, os.close, (fd,))
    releaser.start()
    try:
        start = time.monotonic()
        proc = run(env)
        took = time.monotonic() - start
    finally:
        releaser.join()
    assert proc.returncode == 0, proc.stderr
    assert took >= 1.4, f"the run did not wait for the lock ({took:.2f} s)"
    check_lines(out_file(tmp_path))
