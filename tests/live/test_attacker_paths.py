"""Root writes, an unprivileged user attacks: every file cgstat creates or appends to as root
(-o, --state, --log-state, report -o, record --store, bin/cgstat-cron) through a folder link
of another user, into another user's folder or file, into a file others may write, and with
the lock held by another user. Each is refused with one line, nothing is written where the
attacker pointed, and nothing is waited for.

The attacker is uid/gid 4242, an identity no account has: the test forks and drops to it
(setgroups, setgid, setuid) to make its files, links and locks, so nothing is added to
/etc/passwd. Their playground is a root folder with mode 1777, as /tmp is.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from tests.helpers.contract import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root runs cgstat, another uid attacks")

ATTACKER = 4242
V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
CRON = os.path.join(ROOT, "bin", "cgstat-cron")


def drop() -> None:
    os.setgroups([])
    os.setgid(ATTACKER)
    os.setuid(ATTACKER)


def as_attacker(action: Callable[[], None]) -> None:
    """Run `action` in a child process that is uid 4242 only."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            drop()
            os.umask(0o022)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the attacker's step failed"


class Holder:
    """A forked process of uid 4242 holding an exclusive flock on a path until killed."""

    def __init__(self, path: str):
        read_end, write_end = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child
            try:
                os.close(read_end)
                drop()
                flags = os.O_RDONLY if os.path.isdir(path) else os.O_RDONLY | os.O_CREAT
                fd = os.open(path, flags, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(write_end, b"held")
                time.sleep(60)
            finally:
                os._exit(1)
        os.close(write_end)
        got = os.read(read_end, 4)
        os.close(read_end)
        assert got == b"held", "the attacker could not take the lock"

    def __enter__(self) -> "Holder":
        return self

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)


@pytest.fixture
def ground():
    """(shared, victim, private): a sticky world-writable root folder (like /tmp), a root
    0700 folder holding one precious file, and a root 0700 folder for the test's own files."""
    made = [tempfile.mkdtemp(prefix="cgstat-attack-") for _ in range(3)]
    shared, victim, private = (Path(p) for p in made)
    shared.chmod(0o1777)
    (victim / "precious").write_text("root's\n")
    yield shared, victim, private
    for p in made:
        shutil.rmtree(p, ignore_errors=True)


def cgstat(*args: str, env: Optional[Dict[str, str]] = None) -> Tuple[int, str, float]:
    full = dict(os.environ, **(env or {}))
    full.pop("CGSTAT_HOST_ROOT", None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, env=full, cwd=ROOT,
                          timeout=60)
    return proc.returncode, proc.stderr.decode(), time.monotonic() - started


def console_script() -> str:
    found = shutil.which("cgstat", path=os.path.dirname(sys.executable))
    if found is None:
        pytest.skip("no cgstat console script beside this Python")
    return found


def cron(out: str, state: str) -> Tuple[int, str, float]:
    env = dict(os.environ, CGSTAT_CRON_OUT=out, CGSTAT_CRON_STATE=state, CGSTAT_CRON_BIN=console_script(),
               CGSTAT_CRON_WAIT="20")
    started = time.monotonic()
    proc = subprocess.run(["/bin/sh", CRON, "--host-root", V2], capture_output=True, env=env, timeout=60)
    return proc.returncode, proc.stderr.decode(), time.monotonic() - started


def write_with(writer: str, target: Path, private: Path) -> Tuple[int, str, float]:
    """Run `writer` as root aimed at `target` (a file; for record --store, the store folder)."""
    if writer == "-o":
        return cgstat("once", "--host-root", V2, "-o", str(target))
    if writer == "--state":
        return cgstat("once", "--host-root", V2, "--state", str(target))
    if writer == "--log-state":
        return cgstat("stream", "--host-root", V2, "--count", "1", "--interval", "0.2", "--log-state", str(target))
    if writer == "report -o":
        source = private / "in.jsonl"
        if not source.exists():
            rc, err, _ = cgstat("once", "--host-root", V2, "-o", str(source))
            assert rc == 0, err
        return cgstat("report", str(source), "-o", str(target))
    if writer == "record --store":
        return cgstat("record", "--store", str(target), "--host-root", V2, "--count", "1", "--interval", "0.2")
    if writer == "cron -o":
        return cron(str(target), str(private / "lib" / "once.state"))
    assert writer == "cron --state"
    return cron(str(private / "log" / "out.jsonl"), str(target))


WRITERS = ["-o", "--state", "--log-state", "report -o", "record --store", "cron -o", "cron --state"]


def refused(rc: int, err: str, elapsed: float, *words: str) -> None:
    lines = err.strip().splitlines()
    assert rc == 1, err
    assert len(lines) == 1 or all(line.startswith("cgstat") for line in lines), err
    for word in words:
        assert word in err, err
    assert elapsed < 15, f"took {elapsed:.1f} s: waited for something"


def listing(folder: Path) -> List[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("writer", WRITERS)
def test_folder_link_of_another_user_is_not_followed(ground, writer: str) -> None:
    shared, victim, private = ground
    as_attacker(lambda: os.symlink(str(victim), str(shared / "link")))
    # cron makes missing folders: one level deeper, so a mkdir -p would go through the link
    target = shared / "link" / ("sub/out" if writer.startswith("cron") else "out")
    refused(*write_with(writer, target, private), "symbolic link")
    assert listing(victim) == ["precious"] and (victim / "precious").read_text() == "root's\n"


@pytest.mark.parametrize("writer", WRITERS)
def test_folder_of_another_user_is_refused(ground, writer: str) -> None:
    """A user's folder inside a sticky /tmp: they may rename anything in it."""
    shared, _, private = ground
    as_attacker(lambda: os.mkdir(str(shared / "mine"), 0o755))
    refused(*write_with(writer, shared / "mine" / "out", private), "uid 4242")
    assert listing(shared / "mine") == []


@pytest.mark.parametrize("writer", WRITERS)
def test_file_of_another_user_is_refused(ground, writer: str) -> None:
    """The attacker made the file (0666, so they read what root appends) or the store folder."""
    shared, _, private = ground
    target = shared / "theirs"

    def plant() -> None:
        if writer == "record --store":
            os.mkdir(str(target), 0o777)
        else:
            fd = os.open(str(target), os.O_WRONLY | os.O_CREAT, 0o666)
            os.fchmod(fd, 0o666)
            os.close(fd)

    as_attacker(plant)
    if writer.startswith("cron"):  # the cron script's folders are its own: the file goes in one of root's
        target = private / ("lib" if writer == "cron --state" else "log") / "theirs"
        target.parent.mkdir(mode=0o700)
        shutil.move(str(shared / "theirs"), str(target))
    refused(*write_with(writer, target, private), "uid 4242")
    assert target.lstat().st_uid == ATTACKER
    assert (listing(target) == [] if target.is_dir() else target.read_bytes() == b"")


@pytest.mark.parametrize("writer", WRITERS)
def test_file_others_may_write_is_refused(ground, writer: str) -> None:
    """root's own file, but mode 0666 (0777 for a store folder): anyone may change it."""
    _, _, private = ground
    folder = private / "lib" if writer == "cron --state" else private / "log" if writer == "cron -o" else private
    folder.mkdir(mode=0o700, exist_ok=True)
    target = folder / "loose"
    if writer == "record --store":
        target.mkdir()
        target.chmod(0o777)
    else:
        target.write_bytes(b"")
        target.chmod(0o666)
    refused(*write_with(writer, target, private), "may write")
    assert (listing(target) == [] if target.is_dir() else target.read_bytes() == b"")


def test_state_lock_held_by_another_user_is_refused_at_once(ground) -> None:
    shared, _, private = ground
    with Holder(str(shared / "st.lock")):
        refused(*write_with("--state", shared / "st", private), "lock file", "uid 4242")
    assert not (shared / "st").exists()


def test_state_lock_others_may_open_is_refused_at_once(ground) -> None:
    """root's lock file, but readable by all: whoever opens it may flock it."""
    _, _, private = ground
    lock = private / "st.lock"
    lock.write_bytes(b"")
    lock.chmod(0o644)
    private.chmod(0o755)
    with Holder(str(lock)):
        refused(*write_with("--state", private / "st", private), "lock file", "may open")
    assert not (private / "st").exists()


def test_cron_lock_held_by_another_user_is_refused_at_once(ground) -> None:
    """The cron script's lock is an flock on the state folder: one others can open is refused."""
    _, _, private = ground
    lib = private / "lib"
    lib.mkdir(mode=0o755)
    lib.chmod(0o755)
    private.chmod(0o755)
    with Holder(str(lib)):
        refused(*cron(str(private / "log" / "out.jsonl"), str(lib / "once.state")), "hold the run's lock")
    assert listing(lib) == [] and not (private / "log" / "out.jsonl").exists()


@pytest.mark.parametrize("writer", ["-o", "--state", "report -o", "record --store"])
def test_own_paths_in_a_sticky_folder_still_work(ground, writer: str) -> None:
    """root's own folder inside the shared sticky one is fine: nobody else can change it."""
    shared, _, private = ground
    mine = shared / "root-only"
    mine.mkdir(mode=0o700)
    rc, err, _ = write_with(writer, mine / "out", private)
    assert rc == 0, err
    assert (mine / "out").exists()


def test_lock_holder_helper_really_holds(ground) -> None:
    """The attacker's lock is real: root can't take it either while it is held."""
    shared, _, _ = ground
    with Holder(str(shared / "x.lock")):
        fd = os.open(str(shared / "x.lock"), os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        assert (shared / "x.lock").stat().st_uid == ATTACKER


@pytest.mark.parametrize("writer", ["-o", "--state", "--log-state", "report -o", "record --store"])
def test_a_link_root_made_is_followed(ground, writer: str) -> None:
    """As systemd makes /var/log/NAME a link to private/NAME for a DynamicUser= service:
    root's own link, in root's folder, to root's folder, is followed."""
    _, _, private = ground
    (private / "private" / "cgstat").mkdir(parents=True, mode=0o700)
    os.symlink("private/cgstat", str(private / "cgstat"))
    rc, err, _ = write_with(writer, private / "cgstat" / "out", private)
    assert rc == 0, err
    # (--log-state is written once the kernel log is read further: a recorded tree has none)
    assert writer == "--log-state" or (private / "private" / "cgstat" / "out").exists()


def test_a_link_root_made_into_another_users_folder_is_refused(ground) -> None:
    """Following root's link, the walk goes on checking: the attacker's folder it leads to is refused."""
    shared, _, private = ground
    as_attacker(lambda: os.mkdir(str(shared / "theirs"), 0o755))
    os.symlink(str(shared / "theirs"), str(private / "to-theirs"))
    refused(*write_with("-o", private / "to-theirs" / "out", private), "uid 4242")
    assert listing(shared / "theirs") == []


def test_a_loop_of_links_is_one_line(ground) -> None:
    _, _, private = ground
    os.symlink("b", str(private / "a"))
    os.symlink("a", str(private / "b"))
    refused(*write_with("--state", private / "a" / "st", private), "Too many levels of symbolic links")
