"""One process's own files: what `cgstat procs` and `stream --processes` say of each process.

Reads, under the host root (HostFS), for a PID: /proc/<pid>/stat, status, smaps_rollup (or
smaps), cmdline and fd; and cgroup.procs of a cgroup folder and of the folders below it.
Every read raises a ReadError (hostfs.py): see _read_once.
"""

from __future__ import annotations

import os
from typing import Dict, List, NamedTuple, Optional, Tuple, cast

from cgstat.kernel.hostfs import Gone, HostFS, Malformed, ReadError, Unsupported, read_bytes, read_error
from cgstat.text import decode_bytes, escape_controls


def _sysconf(name: str, default: int) -> int:
    try:
        value = os.sysconf(name)
    except (OSError, ValueError):
        return default
    return value if value > 0 else default


CLOCK_TICKS = _sysconf("SC_CLK_TCK", 100)  # USER_HZ: the unit of stat's times (100 on Linux)
PAGE_BYTES = _sysconf("SC_PAGESIZE", 4096)
CMDLINE_BYTES = 4096  # what is read of a command line (the kernel's own is ARG_MAX long)


# /proc/<pid>/stat: name, state, parent, threads, CPU ticks (utime + stime), start time (the
# PID reuse check: a PID whose start time changed is another process), RSS in pages
class Stat(NamedTuple):
    """/proc/<pid>/stat, the fields cgstat uses (proc(5))."""

    pid: int
    name: str  # comm, up to 15 bytes, \\xNN for bytes that are not UTF-8
    state: str  # R, S, D, Z, T, t, X, I
    ppid: int
    cpu_ticks: int  # utime + stime, in CLOCK_TICKS
    threads: int
    start_ticks: int  # since boot, in CLOCK_TICKS: with the PID, who the process is
    rss_pages: int


# /proc/<pid>/status: NSpid (the PID in each PID namespace, the container's last) and Uid
class Status(NamedTuple):
    """/proc/<pid>/status: the PID in each namespace (outermost first) and the real UID."""

    nspid: Tuple[int, ...]
    uid: Optional[int]


class Memory(NamedTuple):
    """What smaps_rollup (or smaps summed) says, in bytes."""

    rss_bytes: int
    pss_bytes: int
    uss_bytes: int  # Private_Clean + Private_Dirty: what goes away when the process exits
    swap_bytes: int
    source: str  # "smaps_rollup" or "smaps"


# Every read raises a ReadError (hostfs.py): Gone when the process exited between the list and
# the read (normal, at any step), Denied for another user's process when not root
# (smaps_rollup, fd and a hidepid= mount's files need PTRACE_MODE_READ), Malformed for text
# the kernel does not write.
def _read_once(path: str, max_bytes: int) -> bytes:
    """At most `max_bytes` of a file, in one read. Raises ReadError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise read_error(exc, path) from None
    try:
        return os.read(fd, max_bytes)
    except OSError as exc:
        raise read_error(exc, path) from None
    finally:
        os.close(fd)


def read_stat(fs: HostFS, pid: int) -> Stat:
    """Raises ReadError; Malformed when the line is not what proc(5) documents."""
    path = fs.path(f"/proc/{pid}/stat")
    # one read: the line is one seq_file record (proc_pid_stat, ~300 bytes; comm at most 64),
    # so no read to the end (read_bytes's second call): a tick reads this for every process
    data = _read_once(path, 4096)
    # comm is in parentheses and may hold anything, ')' and spaces included: the last ')'
    # ends it (what procps does).
    open_at, close_at = data.find(b"("), data.rfind(b")")
    fields = data[close_at + 2:].split()
    if open_at < 0 or close_at < open_at or len(fields) < 22:
        raise Malformed(path, "not a /proc/<pid>/stat line")
    try:
        return Stat(int(data[:open_at]), decode_bytes(data[open_at + 1:close_at]), fields[0].decode("ascii"),
                    int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[17]), int(fields[19]),
                    int(fields[21]))
    except (ValueError, UnicodeDecodeError):
        raise Malformed(path, "not a /proc/<pid>/stat line") from None


def read_status(fs: HostFS, pid: int) -> Status:
    """NSpid (kernel >= 4.1; older kernels: the one PID) and the real UID. Raises ReadError."""
    path = fs.path(f"/proc/{pid}/status")
    nspid: Tuple[int, ...] = (pid,)
    uid: Optional[int] = None
    try:
        for line in read_bytes(path).split(b"\n"):
            if line.startswith(b"NSpid:"):
                nspid = tuple(int(x) for x in line[6:].split())
            elif line.startswith(b"Uid:"):
                uid = int(line[4:].split()[0])
    except (ValueError, IndexError):
        raise Malformed(path, "not a /proc/<pid>/status file") from None
    return Status(nspid or (pid,), uid)


# /proc/<pid>/smaps_rollup (kernel >= 4.14): Rss, Pss, Private_Clean + Private_Dirty (USS)
# and Swap, the sums smem(8) makes from /proc/<pid>/smaps. An older kernel has no rollup:
# its smaps is summed instead, the same keys per mapping, up to 16 MiB of it (hostfs's
# bound: ~15,000 mappings; a process with more gets null and the reason). Either file is
# walked under the process's mm lock; pipeline/processes.py decides how often.
_ROLLUP_KEYS = {b"Rss": 0, b"Pss": 1, b"Private_Clean": 2, b"Private_Dirty": 2, b"Swap": 3}


def parse_smaps(data: bytes, path: str) -> Tuple[int, int, int, int]:
    """(rss, pss, uss, swap) in bytes, the keys summed over every mapping (a rollup has one)."""
    sums = [0, 0, 0, 0]
    keys = _ROLLUP_KEYS
    try:
        for line in data.split(b"\n"):
            key, sep, rest = line.partition(b":")
            slot = keys.get(key) if sep else None
            if slot is not None:
                value, unit = rest.split()
                if unit != b"kB":
                    raise ValueError(unit)
                sums[slot] += int(value) * 1024
    except ValueError:
        raise Malformed(path, "not a smaps file (KEY: N kB lines)") from None
    return sums[0], sums[1], sums[2], sums[3]


def read_memory(fs: HostFS, pid: int) -> Optional[Memory]:
    """RSS, PSS, USS and swap; None for a process with no memory of its own (a kernel thread,
    a zombie: the kernel gives an empty file). Raises ReadError."""
    path = fs.path(f"/proc/{pid}/smaps_rollup")
    source = "smaps_rollup"
    try:
        data = read_bytes(path)
    except Gone:
        # no rollup on kernels before 4.14 (the process may also have exited: then smaps is
        # gone too, and that is what is raised)
        path, source = fs.path(f"/proc/{pid}/smaps"), "smaps"
        data = read_bytes(path)  # Malformed past its 16 MiB: null, and the reason
    if not data:
        return None
    return Memory(*parse_smaps(data, path), source=source)


# /proc/<pid>/cmdline (bounded, NULs as spaces, undecodable bytes as \xNN, controls
# escaped) and the number of entries of /proc/<pid>/fd
def read_cmdline(fs: HostFS, pid: int, max_bytes: int = CMDLINE_BYTES) -> str:
    """The command line as one line of text: arguments joined by spaces, at most `max_bytes`
    read ("..." marks a cut), bytes that are not UTF-8 as \\xNN and control characters
    (newline, ESC) escaped, so a hostile argv can't forge a table row or drive a terminal.
    "" for a kernel thread or a zombie. Raises ReadError."""
    path = fs.path(f"/proc/{pid}/cmdline")
    data = _read_once(path, max_bytes + 1)
    cut = len(data) > max_bytes
    data = data[:max_bytes].rstrip(b"\0").replace(b"\0", b" ")
    return escape_controls(decode_bytes(data)) + ("..." if cut else "")


def count_fds(fs: HostFS, pid: int) -> int:
    """Open file descriptors: the entries of /proc/<pid>/fd. Raises ReadError."""
    path = fs.path(f"/proc/{pid}/fd")
    try:
        return len(os.listdir(path))
    except OSError as exc:
        raise read_error(exc, path) from None


# cgroup.procs of a cgroup folder and of the folders below it (the processes, thread
# group IDs, of a workload's subtree), bounded.
Listed = Tuple[List[int], List[str], bool]  # a folder's own PIDs, the folders below it, listed in full


def list_folder(folder: str) -> Listed:
    """cgroup.procs of one cgroup folder (its own processes) and the folders below it.
    Raises ReadError when cgroup.procs can't be read."""
    data = read_bytes(os.path.join(folder, "cgroup.procs"))
    pids = []
    for word in data.split():
        try:
            pids.append(int(word))
        except ValueError:
            continue
    try:
        # a folder's link count is 2 + its subfolders on cgroupfs (kernfs sets it so) and the
        # usual file systems: 2 means no child to look for, one stat for a listing of its ~35
        # files (btrfs says 1 for every folder: listed)
        if os.stat(folder).st_nlink == 2:
            return pids, [], True
        below = sorted(e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
    except OSError:
        return pids, [], False
    return pids, below, True


def subtree_pids(folder_local: str, max_pids: int,
                 listed: Optional[Dict[str, object]] = None) -> Tuple[List[int], bool]:
    """The processes (thread group IDs: cgroup.procs) of a cgroup folder and every folder below
    it, in the order met, at most `max_pids`; and whether all were listed (False: cut at the
    bound, or a folder below could not be read). `listed`: each folder's list_folder (or the
    ReadError it raised), kept by the caller for a tick, so that a pod and its containers, or
    --all's slices, list a folder once. Raises ReadError when the folder itself is gone or
    unreadable."""
    pids: List[int] = []
    seen = set()
    complete = True
    stack = [folder_local]
    first = True
    cache: Dict[str, object] = listed if listed is not None else {}
    while stack:
        folder = stack.pop()
        got = cache.get(folder)
        if got is None:
            try:
                got = list_folder(folder)
            except ReadError as exc:
                got = exc
            cache[folder] = got
        if isinstance(got, ReadError):
            if first:
                raise got
            # a folder below removed meanwhile took its processes with it; a v2 threaded
            # cgroup refuses cgroup.procs (EOPNOTSUPP), its threads' processes being listed by
            # its threaded domain above (cgroup-v2.rst, "Threads"); any other failure leaves
            # the list short
            complete = complete and isinstance(got, (Gone, Unsupported))
            continue
        own, below, whole = cast(Listed, got)
        complete = complete and whole
        first = False
        for pid in own:
            if pid not in seen:
                if len(pids) >= max_pids:
                    return pids, False
                seen.add(pid)
                pids.append(pid)
        stack.extend(reversed(below))
    return pids, complete


def hidepid(fs: HostFS) -> Optional[str]:
    """The hidepid= option of the proc mount under the host root ("invisible", "2", ...), or
    None: with it, other users' /proc/<pid> folders are hidden (hidepid=2, invisible) or
    unreadable (hidepid=1, noaccess) to anyone but root (proc(5))."""
    try:
        data = read_bytes(fs.path("/proc/self/mountinfo"))
    except ReadError:
        return None
    for line in data.split(b"\n"):
        head, sep, tail = line.partition(b" - ")
        words, options = head.split(), tail.split()
        if not sep or len(words) < 5 or words[4] != b"/proc" or not options or options[0] != b"proc":
            continue
        for option in options[-1].split(b","):
            if option.startswith(b"hidepid="):
                return option[8:].decode("ascii", "replace")
    return None
