"""The processes of a workload, tick after tick: CPU from stat deltas, memory on a schedule,
the fork tree and each tree's total (the record part of `procs` and `stream --processes`).

Reads through kernel/processes.py: cgroup.procs of the workload's folder and those below,
/proc/<pid>/stat, status and cmdline, and smaps_rollup and the fd count on a schedule (see
ProcessWatcher). GPU figures per process come from the workload record's `gpu.processes`.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.hostfs import Denied, Gone, HostFS, ReadError
from cgstat.kernel.processes import (CLOCK_TICKS, PAGE_BYTES, Memory, Status, count_fds, hidepid, read_cmdline,
                                     read_memory, read_stat, read_status, subtree_pids)

# smaps_rollup of one process at most this often. Measured (bench/processes_cost.py): ~0.1 ms
# for a small process, 3-20 ms for one holding 200 MB of Python objects; every 10 s keeps the
# walk at 100 containers x 10 small processes near 1 % of a core on average, while a
# DataLoader worker's PSS, which moves as pages are touched over seconds, is at most 10 s old.
MEMORY_EVERY_S = 10.0
# Time a tick may spend on smaps_rollup and fd counts; what is left waits for the next tick.
BUDGET_S = 0.05
MAX_PROCESSES = 10000  # listed per workload; more: the first 10,000 met, `complete` false
BY = ("pss", "cpu")  # what `--processes-by` ranks by


class Options(NamedTuple):
    memory_every_s: float = MEMORY_EVERY_S
    budget_s: float = BUDGET_S
    max_processes: int = MAX_PROCESSES


class _Known:
    """What is kept of one process between ticks (slots: thousands of them)."""

    __slots__ = ("start_ticks", "cpu_ticks", "at", "name", "status", "cmdline", "memory", "memory_at",
                 "memory_got_at", "fds", "errors")

    def __init__(self, start_ticks: int, name: str):
        self.start_ticks = start_ticks
        self.cpu_ticks: Optional[int] = None
        self.at = 0.0
        self.name = name
        self.status: Optional[Status] = None
        self.cmdline: Optional[str] = None
        self.memory: Optional[Memory] = None
        self.memory_at: Optional[float] = None  # when smaps was last asked
        self.memory_got_at: Optional[float] = None  # when `memory` was read
        self.fds: Optional[int] = None
        self.errors: Dict[str, Tuple[str, str]] = {}  # source -> (error, detail)


class Listing(NamedTuple):
    """One workload's processes at one tick: entries in tree order, each tree's total."""

    processes: List[Dict[str, Any]]
    groups: List[Dict[str, Any]]
    listed: int  # processes listed (those that exited mid-read not counted)
    complete: bool  # every process of the subtree listed and its folders read
    error: Optional[Dict[str, str]]  # the workload's folder could not be listed


# Reads through kernel/processes.py. Per tick and workload: cgroup.procs of its folder and
# those below (at most `max_processes`), /proc/<pid>/stat of each (CPU, RSS, parent, state);
# once per process (a PID and start time: a PID reused between ticks is a new process, its
# CPU delta never taken against the old one) its status (NSpid, UID) and command line, again
# when its name changes (an exec); smaps_rollup and the fd count at most every
# `memory_every_s` per process, while the tick's `budget_s` lasts: a process not due, or left
# over when the budget ran out, keeps its last figures and says how old they are
# (`memory_age_s`). smaps_rollup walks every mapping under the process's mm lock: ~0.1 ms for
# a small process, 3-20 ms for one holding 200 MB of Python objects (bench/README.md), and the
# process waits for it.
class ProcessWatcher:
    """Keeps each process's last CPU ticks and memory figures between ticks.

    `clock`: seconds, monotonic (tests give their own)."""

    def __init__(self, fs: HostFS, options: Options = Options(), clock: Callable[[], float] = time.monotonic):
        self.fs = fs
        self.options = options
        self.clock = clock
        self._known: Dict[int, _Known] = {}
        self._seen: Dict[int, _Known] = {}
        self._rows: Dict[int, Optional[Dict[str, Any]]] = {}
        self._listed: Dict[str, object] = {}  # this tick's cgroup folders listed (kernel/processes.subtree_pids)
        self._spent = 0.0
        self._hidepid = hidepid(fs)

    def begin_tick(self) -> None:
        self._seen = {}
        # this tick's rows: a pod and its containers, --all's slices list the same processes
        self._rows = {}
        self._listed = {}
        self._spent = 0.0

    def end_tick(self) -> None:
        """Forget the processes not seen this tick (exited, or their workload is gone)."""
        self._known = self._seen
        self._seen = {}

    def read(self, folder_local: str, gpu: Optional[Dict[str, Any]] = None, memory: bool = True) -> Listing:
        """The processes of the cgroup at `folder_local` and below. `gpu`: the workload
        record's `gpu` object (its processes joined by PID); `memory`: read smaps_rollup
        when due (False: CPU and stat only, a first sample)."""
        try:
            pids, complete = subtree_pids(folder_local, self.options.max_processes, self._listed)
        except ReadError as exc:
            return Listing([], [], 0, False, {"source": "cgroup.procs", "error": exc.code, "detail": exc.detail})
        gpus = _gpu_by_pid(gpu)
        rows: List[Dict[str, Any]] = []
        made = self._rows
        for pid in pids:
            if pid in made:
                row = made[pid]
                row = dict(row) if row is not None else None  # tree() sets depth and group per workload
            else:
                row = made[pid] = self._one(pid, gpus, memory)
            if row is not None:
                rows.append(row)
        processes, groups = tree(rows)
        return Listing(processes, groups, len(processes), complete, None)

    # A process that exits mid-read is dropped from the tick's list (it is gone); one that can't
    # be read for another reason (not root: another user's smaps_rollup and fd folder; a hidepid=
    # mount) keeps what could be read, the rest null, with the reason in its `errors`.
    def _one(self, pid: int, gpus: Optional[Dict[int, Tuple[Optional[int], Optional[float]]]],
             memory: bool) -> Optional[Dict[str, Any]]:
        fs = self.fs
        try:
            stat = read_stat(fs, pid)
        except Gone as exc:
            if self._hidepid and os.geteuid() != 0:
                # hidepid=2/invisible: another user's /proc/<pid> is not there for us at all
                return _unreadable(pid, Denied(exc.path, "not visible (or it exited)"), self._hidepid)
            return None  # exited between cgroup.procs and here
        except ReadError as exc:
            return _unreadable(pid, exc, self._hidepid)
        now = self.clock()
        known = self._seen.get(pid)
        if known is None:
            known = self._known.get(pid)
            if known is None or known.start_ticks != stat.start_ticks:
                known = _Known(stat.start_ticks, stat.name)  # new, or a reused PID: nothing carried
            self._seen[pid] = known
        try:
            if known.status is None:
                known.status = read_status(fs, pid)
            if known.cmdline is None or known.name != stat.name:  # an exec changes both
                known.cmdline = read_cmdline(fs, pid)
                known.name = stat.name
        except Gone:
            return None
        except ReadError as exc:
            known.errors[exc.path.rsplit("/", 1)[-1]] = (exc.code, self._why(exc))
        if memory and stat.state != "Z" and self._due(known, now):
            started = time.monotonic()
            known.memory_at = now  # asked: not again before it is due, whatever the answer
            try:
                got = read_memory(fs, pid)
                known.memory, known.memory_got_at = got, now
                known.errors.pop("smaps_rollup", None)
                if got is None:
                    known.errors["smaps_rollup"] = ("missing", "no memory of its own (a kernel thread)")
            except Gone:
                return None
            except ReadError as exc:
                known.errors["smaps_rollup"] = (exc.code, self._why(exc))
            try:
                known.fds = count_fds(fs, pid)
                known.errors.pop("fd", None)
            except Gone:
                return None
            except ReadError as exc:
                known.errors["fd"] = (exc.code, self._why(exc))
            self._spent += time.monotonic() - started
        cpu_percent = None
        if known.cpu_ticks is not None and now > known.at and stat.cpu_ticks >= known.cpu_ticks:
            cpu_percent = (stat.cpu_ticks - known.cpu_ticks) / CLOCK_TICKS / (now - known.at) * 100.0
        known.cpu_ticks, known.at = stat.cpu_ticks, now
        mem = known.memory
        status = known.status
        gpu_memory, gpu_sm = gpus.get(pid, (None, None)) if gpus else (None, None)
        if gpus is not None and pid not in gpus:
            gpu_memory, gpu_sm = 0, 0.0
        errors = [{"source": s, "error": e, "detail": d} for s, (e, d) in known.errors.items()]
        if memory and mem is None and known.memory_at is None and stat.state != "Z":
            errors.append({"source": "smaps_rollup", "error": "deferred",
                           "detail": "not read yet: this tick's time for smaps_rollup was spent"})
        if stat.state == "Z":
            errors.append({"source": "smaps_rollup", "error": "missing", "detail": "a zombie: no memory left"})
        return {
            "pid": pid,
            "ns_pid": status.nspid[-1] if status is not None else None,
            "ppid": stat.ppid,
            "name": stat.name,
            "cmdline": known.cmdline,
            "state": stat.state,
            "uid": status.uid if status is not None else None,
            "threads": stat.threads,
            "cpu_percent": cpu_percent,
            "cpu_seconds_total": stat.cpu_ticks / CLOCK_TICKS,
            "rss_bytes": mem.rss_bytes if mem is not None else stat.rss_pages * PAGE_BYTES,
            "pss_bytes": mem.pss_bytes if mem is not None else None,
            "uss_bytes": mem.uss_bytes if mem is not None else None,
            "swap_bytes": mem.swap_bytes if mem is not None else None,
            "memory_age_s": None if mem is None or known.memory_got_at is None else round(now - known.memory_got_at, 3),
            "fds": known.fds,
            "gpu_memory_bytes": gpu_memory,
            "gpu_sm_percent": gpu_sm,
            "errors": errors,
        }

    def _due(self, known: _Known, now: float) -> bool:
        """Whether its smaps_rollup is to be read now: not read for memory_every_s, and the
        tick's budget not spent."""
        if known.memory_at is not None and now - known.memory_at < self.options.memory_every_s:
            return False
        return self._spent < self.options.budget_s

    def _why(self, exc: ReadError) -> str:
        if isinstance(exc, Denied):
            extra = f"; /proc is mounted hidepid={self._hidepid}" if self._hidepid else ""
            return f"{exc.detail}: another user's process, readable by root (PTRACE_MODE_READ){extra}"
        return exc.detail


def _unreadable(pid: int, exc: ReadError, hidden: Optional[str]) -> Dict[str, Any]:
    """A process whose stat can't be read (hidepid=1 lets the folder be listed, not read)."""
    detail = exc.detail + (f"; /proc is mounted hidepid={hidden}" if hidden else "")
    row: Dict[str, Any] = dict.fromkeys(_FIELDS)
    row.update(pid=pid, errors=[{"source": "stat", "error": exc.code, "detail": detail}])
    return row


_FIELDS = ("pid", "ns_pid", "ppid", "name", "cmdline", "state", "uid", "threads", "cpu_percent",
           "cpu_seconds_total", "rss_bytes", "pss_bytes", "uss_bytes", "swap_bytes", "memory_age_s", "fds",
           "gpu_memory_bytes", "gpu_sm_percent", "errors")
_SUMMED = ("cpu_percent", "rss_bytes", "pss_bytes", "uss_bytes", "swap_bytes", "gpu_memory_bytes")


# GPU memory and SM % per process come from the GPU join's entries of the workload's record
# (`gpu.processes`, NVML's host PIDs already mapped to cgroups: cgstat/gpu/attribution.py).
def _gpu_by_pid(gpu: Optional[Dict[str, Any]]) -> Optional[Dict[int, Tuple[Optional[int], Optional[float]]]]:
    """PID -> (GPU memory, SM %) summed over the GPUs NVML lists it on; None: GPU metrics off."""
    if not gpu:
        return None
    out: Dict[int, Tuple[Optional[int], Optional[float]]] = {}
    for entry in gpu.get("processes") or ():
        pid = entry.get("pid")
        memory, sm = out.get(pid, (0, 0.0))
        m, s = entry.get("memory_bytes"), entry.get("sm_percent")
        out[pid] = (None if memory is None or m is None else memory + m, None if sm is None or s is None else sm + s)
    return out


def tree(rows: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The rows in fork-tree order (each parent before its children, siblings by PID), each
    with its `depth` and `group` (the PID of its tree's top process: the topmost ancestor
    in the workload), and each tree's total: the processes, and the sums of CPU %, RSS, PSS,
    USS, swap and GPU memory (null when a member's is unknown: a partial sum would understate;
    RSS summed counts shared pages once per process, which is why PSS is there)."""
    by_pid = {row["pid"]: row for row in rows}
    children: Dict[int, List[int]] = {}
    roots: List[int] = []
    for row in rows:
        parent = row["ppid"]
        if parent in by_pid and parent != row["pid"]:
            children.setdefault(parent, []).append(row["pid"])
        else:
            roots.append(row["pid"])
    ordered: List[Dict[str, Any]] = []
    groups: List[Dict[str, Any]] = []
    placed = set()
    for root in sorted(roots):
        members: List[Dict[str, Any]] = []
        stack = [(root, 0)]
        while stack:  # depth first, iterative: a 10,000-deep chain of forks is no recursion limit
            pid, depth = stack.pop()
            if pid in placed:
                continue
            placed.add(pid)
            row = by_pid[pid]
            row["depth"], row["group"] = depth, root
            members.append(row)
            stack.extend((child, depth + 1) for child in sorted(children.get(pid, ()), reverse=True))
        ordered.extend(members)
        groups.append(_group(members))
    return ordered, groups


def _group(members: List[Dict[str, Any]]) -> Dict[str, Any]:
    top = members[0]
    out: Dict[str, Any] = {"pid": top["pid"], "name": top["name"], "processes": len(members)}
    for key in _SUMMED:
        values = [m[key] for m in members]
        out[key] = None if None in values else sum(values)
    return out


def ranked(rows: Iterable[Dict[str, Any]], by: str, n: int) -> List[Dict[str, Any]]:
    """The n largest by PSS (RSS where PSS isn't known yet) or by CPU %."""
    if by == "cpu":
        def key(row: Dict[str, Any]) -> Tuple[float, int]:
            return (row["cpu_percent"] or 0.0, -row["pid"])
    else:
        def key(row: Dict[str, Any]) -> Tuple[float, int]:
            value = row["pss_bytes"] if row["pss_bytes"] is not None else row["rss_bytes"]
            return (value or 0, -row["pid"])
    return sorted(rows, key=key, reverse=True)[:n]


def folder_of(layout: Layout, record: Dict[str, Any]) -> Optional[str]:
    """The local folder whose cgroup.procs lists a workload record's processes: its path in
    the records' own hierarchy (cgroup v2; on v1 the CPU accounting one), else in any other
    it has (a v1 join may lack one); None when no folder of it is left."""
    paths = record.get("paths")
    if not isinstance(paths, dict):
        return None
    order = [layout.anchor] + [h for h in layout.hierarchies if h is not layout.anchor]
    for h in order:
        path = paths.get(h.name)
        if isinstance(path, str) and path.startswith("/"):
            folder = h.mount_dir + path.rstrip("/")
            if os.path.isdir(folder):
                return folder
    return None


def listing_object(listing: Listing, top: Optional[int] = None, by: str = "pss") -> Dict[str, Any]:
    """The `processes` object of a record: every process (top None, `cgstat procs`) or the
    `top` largest by `by` with the trees they are in (`stream --processes N`)."""
    processes, groups = listing.processes, listing.groups
    if top is not None:
        processes = ranked(processes, by, top)
        kept = {p["group"] for p in processes}
        groups = [g for g in groups if g["pid"] in kept]
    return {"count": listing.listed, "complete": listing.complete, "by": by if top is not None else None,
            "processes": processes, "groups": groups, "error": listing.error}


class TopProcesses:
    """`stream --processes N`: the N largest processes of each workload (by PSS or CPU), and
    the trees they are in, added to its record as `processes` (its last key, as in the
    field table). Only made when asked: a stream without it reads no /proc/<pid>."""

    def __init__(self, fs: HostFS, layout: Layout, n: int, by: str = "pss", options: Options = Options()):
        if by not in BY:
            raise ValueError(f"--processes-by: {by!r} is not one of {', '.join(BY)}")
        self.watcher = ProcessWatcher(fs, options)
        self.layout = layout
        self.n = n
        self.by = by

    def begin_tick(self) -> None:
        self.watcher.begin_tick()

    def end_tick(self) -> None:
        self.watcher.end_tick()

    def add(self, record: Any) -> None:
        """Add `processes` to a cgroup or pod record (a dict, as cgstat/pipeline/build.py builds it)."""
        folder = folder_of(self.layout, record)
        if folder is None:
            listing = Listing([], [], 0, False, {"source": "cgroup.procs", "error": "gone",
                                                 "detail": "no folder of this cgroup is left"})
        else:
            gpu = record.get("gpu")
            listing = self.watcher.read(folder, gpu if isinstance(gpu, dict) else None)
        record["processes"] = listing_object(listing, self.n, self.by)
