"""bin/cgstat-cron with stub `cgstat` commands on PATH (no real cgstat needed).

The script must append whole batches only, leave the file untouched when cgstat fails
or when the append itself fails, serialise overlapping runs, and say why on stderr.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bin" / "cgstat-cron"

LINE1 = '{"cgroup": "/a", "cpu_usage_pct": 1.5}'
LINE2 = '{"cgroup": "/b", "cpu_usage_pct": null}'

STUB_OK = f"""#!/bin/sh
printf '%s\\n' "$*" >> "$STUB_ARGS"
printf '%s\\n' '{LINE1}'
printf '%s\\n' '{LINE2}'
"""

# Fails half-way through a line: nothing of it may reach the output file.
STUB_FAIL = """#!/bin/sh
printf '%s\\n' '{"cgroup": "/a", "cpu_usage_pct": 1.5}'
printf '%s' '{"cgroup": "/b", "cpu_'
echo "cgstat: /sys/fs/cgroup unreadable" >&2
exit 1
"""

# Exits 0 but its last line is cut short.
STUB_NO_EOL = """#!/bin/sh
printf '%s\\n' '{"cgroup": "/a"}'
printf '%s' '{"cgroup": "/b"'
"""

STUB_EMPTY = "#!/bin/sh\nexit 0\n"

# Succeeds with a notice on stderr (cgstat prints the layout it found).
STUB_NOTICE = f"""#!/bin/sh
echo "cgstat: hybrid cgroup layout; showing every cgroup" >&2
printf '%s\\n' '{LINE1}'
"""

# Holds the lock long enough for a second run to find it taken.
STUB_SLOW = f"""#!/bin/sh
: > "$STUB_STARTED"
sleep 2
printf '%s\\n' '{LINE1}'
"""


def make_stub(tmp_path: Path, body: str) -> Path:
    bindir = tmp_path / "stubbin"
    bindir.mkdir(exist_ok=True)
    stub = bindir / "cgstat"
    stub.write_text(body)
    stub.chmod(0o755)
    return bindir


def env_for(tmp_path: Path, bindir: Path, path_rest: str | None = None, **extra: str) -> dict:
    env = dict(os.environ)
    env.update(
        PATH=f"{bindir}:{path_rest if path_rest is not None else os.environ.get('PATH', '/usr/bin:/bin')}",
        CGSTAT_CRON_OUT=str(tmp_path / "log" / "cgstat.jsonl"),
        CGSTAT_CRON_STATE=str(tmp_path / "lib" / "once.state"),
        STUB_ARGS=str(tmp_path / "args"),
        STUB_STARTED=str(tmp_path / "started"),
    )
    env.pop("CGSTAT_CRON_BIN", None)
    env.update(extra)
    return env


def run(env: dict, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30, check=False, **kw
    )


def out_file(tmp_path: Path) -> Path:
    return tmp_path / "log" / "cgstat.jsonl"


def leftovers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "log").iterdir() if p.name.startswith(".cgstat-cron."))


def test_appends_two_lines_per_run_and_passes_state(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    for _ in range(2):
        proc = run(env, "--all")
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
    text = out_file(tmp_path).read_text()
    assert text == f"{LINE1}\n{LINE2}\n" * 2
    assert [json.loads(line)["cgroup"] for line in text.splitlines()] == ["/a", "/b"] * 2
    state = tmp_path / "lib" / "once.state"
    assert (tmp_path / "args").read_text().splitlines() == [f"once --state {state} --all"] * 2
    assert state.parent.is_dir()  # created for cgstat, which writes the state itself
    assert leftovers(tmp_path) == []


def test_failure_appends_nothing_and_reports(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    assert run(env).returncode == 0
    before = out_file(tmp_path).read_bytes()

    env = env_for(tmp_path, make_stub(tmp_path, STUB_FAIL))
    proc = run(env)
    assert proc.returncode == 1
    assert "cgstat once failed (exit 1)" in proc.stderr
    assert "unreadable" in proc.stderr  # cgstat's own message passes through
    assert out_file(tmp_path).read_bytes() == before
    assert leftovers(tmp_path) == []


def test_failure_on_first_run_creates_no_partial_file(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_FAIL))
    proc = run(env)
    assert proc.returncode == 1
    assert not out_file(tmp_path).exists() or out_file(tmp_path).read_bytes() == b""


def test_incomplete_last_line_is_rejected(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_NO_EOL))
    proc = run(env)
    assert proc.returncode == 1
    assert "incomplete last line" in proc.stderr
    assert not out_file(tmp_path).exists() or out_file(tmp_path).read_bytes() == b""


def test_empty_batch_is_success(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_EMPTY))
    proc = run(env)
    assert proc.returncode == 0, proc.stderr
    assert not out_file(tmp_path).exists() or out_file(tmp_path).read_bytes() == b""


def test_stderr_is_quiet_on_success_unless_asked(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_NOTICE))
    proc = run(env)
    assert proc.returncode == 0
    assert proc.stderr == ""  # cron mails nothing while all is well
    proc = run({**env, "CGSTAT_CRON_QUIET": "0"})
    assert proc.returncode == 0
    assert "hybrid cgroup layout" in proc.stderr
    assert out_file(tmp_path).read_text() == f"{LINE1}\n" * 2
    assert leftovers(tmp_path) == []


def test_missing_cgstat_is_reported(tmp_path: Path) -> None:
    bindir = tmp_path / "empty"
    bindir.mkdir()
    env = env_for(tmp_path, bindir, CGSTAT_CRON_BIN=str(tmp_path / "no-such-cgstat"))
    proc = run(env)
    assert proc.returncode == 127
    assert "command not found" in proc.stderr


def test_failed_append_cuts_the_file_back(tmp_path: Path) -> None:
    """The append stops half-way (file size limit): the file returns to its old size."""
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    out = out_file(tmp_path)
    out.parent.mkdir(parents=True)
    before = b'{"old": 1}\n' * 100
    out.write_bytes(before)
    limit = len(before) + len(LINE1) // 2  # room for half of the first new line

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = run(env, preexec_fn=limit_file_size)
    assert proc.returncode != 0
    assert "appending to" in proc.stderr
    assert out.read_bytes() == before
    assert leftovers(tmp_path) == []


def wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def overlapping_runs(tmp_path: Path, path_rest: str | None = None) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_SLOW), path_rest=path_rest)
    first = subprocess.Popen(
        ["/bin/sh", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(tmp_path / "started")
        second = run({**env, "CGSTAT_CRON_WAIT": "0"})
        assert second.returncode == 75
        assert "still holds" in second.stderr
    finally:
        _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert out_file(tmp_path).read_text() == f"{LINE1}\n"
    # The lock is free again: a later run goes through.
    third = run(env)
    assert third.returncode == 0, third.stderr
    assert out_file(tmp_path).read_text() == f"{LINE1}\n" * 2


def test_overlapping_runs_are_serialised_with_flock(tmp_path: Path) -> None:
    if shutil.which("flock") is None:
        pytest.skip("flock(1) not installed")
    overlapping_runs(tmp_path)


def test_overlapping_runs_without_flock(tmp_path: Path) -> None:
    """The mkdir lock used where flock(1) is missing."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("cat", "dirname", "mkdir", "mktemp", "od", "rm", "sleep", "stat", "tail",
                 "timeout", "tr", "truncate", "wc"):
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} not installed")
        (tools / name).symlink_to(found)
    overlapping_runs(tmp_path, path_rest=str(tools))
    assert not (tmp_path / "lib" / "once.state.cron.lock.d").exists()
