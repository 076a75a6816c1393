"""Network counters per workload, read from each workload's network namespace.

The kernel does not account network traffic per cgroup; it counts per interface, and an
interface belongs to one network namespace. So, as docker stats and cAdvisor do, a
workload's traffic is the traffic of the interfaces of the namespace its processes are in.
Reads /proc/<pid>/ns/net and /proc/<pid>/net/dev (see NetnsReader), and the host's
namespace once (see detect_host_netns).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Collection, Dict, Hashable, Iterable, List, Mapping, NamedTuple, Optional, Tuple, TypeVar, Union

from cgstat.kernel.hostfs import Denied, Gone, HostFS, Malformed, ReadError, read_bytes, read_error
from cgstat.kernel.netdev import InterfaceCounters, parse_net_dev
from cgstat.kernel.sample import Problem

K = TypeVar("K", bound=Hashable)

# Fixed inodes of initial namespaces (include/uapi/linux/nsfs.h, enum init_ns_ino).
# PID_NS_INIT_INO since Linux 3.8; NET_NS_INIT_INO since 6.18 (older kernels give the initial
# network namespace a dynamic inode >= 0xF0000000, so this value never names another one).
PID_NS_INIT_INO = 0xEFFFFFFC
NET_NS_INIT_INO = 0xEFFFFFF9
_PF_KTHREAD = 0x00200000  # include/linux/sched.h: task flag of kernel threads

SOURCE = "network"
HOST_REASON = "host network namespace: the host's interfaces are not this workload's own"
ERR_HOST = "host_namespace"
ERR_NO_PROCESS = "no_process"
ERR_SEVERAL = "several_namespaces"

# the counters a workload's record carries, summed over its interfaces and per interface:
# the record's names, which are InterfaceCounters' too
TOTAL_FIELDS = ("rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total",
                "rx_errors_total", "tx_errors_total", "rx_dropped_total", "tx_dropped_total")


class HostNetns(NamedTuple):
    """The host's (initial) network namespace, as far as it could be found."""

    inode: Optional[int]  # None: unknown
    source: str  # which file told: "/proc/1/ns/net", "/proc/2/ns/net (kthreadd)", ...
    note: Optional[str] = None  # a line for the user when a fallback was used or it is unknown

    def is_host(self, inode: int) -> bool:
        return inode == NET_NS_INIT_INO or (self.inode is not None and inode == self.inode)


class NetworkSample(NamedTuple):
    """One network namespace's counters at one moment, lo left out, as seen by one workload."""

    netns: int  # inode of /proc/<pid>/ns/net
    shared: bool  # another workload of the same read() is in this namespace too
    time_s: float  # monotonic clock right after the read (what rates divide by)
    totals: Tuple[int, ...]  # the interfaces' sums, one per TOTAL_FIELDS (the record's names)
    interfaces: Tuple[InterfaceCounters, ...]  # every interface but lo, in the kernel's order

    def total(self, name: str) -> int:
        """The sum of one of TOTAL_FIELDS over the interfaces."""
        return self.totals[TOTAL_FIELDS.index(name)]


class NetworkResult(NamedTuple):
    """What read() gives for one workload: a sample, or None and why (problem)."""

    network: Optional[NetworkSample]
    netns: Optional[int] = None  # known also for a host-namespace workload
    problem: Optional[Problem] = None  # {source: "network", error, detail} for `errors`


class TickStats(NamedTuple):
    """What the last read() cost: files opened and stat() calls on /proc."""

    keys: int = 0
    namespaces: int = 0
    net_dev_reads: int = 0
    ns_stats: int = 0


def _stat_ino(path: str, dir_fd: Optional[int] = None) -> int:
    try:
        return os.stat(path, dir_fd=dir_fd).st_ino
    except OSError as exc:
        raise read_error(exc, path) from None


def _is_kthreadd(fs: HostFS) -> bool:
    """/proc/2 is the kernel's kthreadd: PF_KTHREAD in /proc/2/stat field 9 (flags), which no
    user process can set. A container's own PID namespace shows no kernel thread at all."""
    try:
        text = read_bytes(fs.path("/proc/2/stat"))
        rest = text[text.rindex(b")") + 2:].split()
        return int(rest[6]) & _PF_KTHREAD != 0 and rest[1] == b"0"  # flags; ppid 0
    except (ReadError, ValueError, IndexError):
        return False


def detect_host_netns(fs: HostFS) -> HostNetns:
    """Find the host's network namespace, trying in turn:

    1. /proc/1/ns/net: init's namespace (not readable on every machine, e.g. when PID 1
       belongs to a supervisor in an outer user namespace, as on the dev machines);
    2. /proc/2/ns/net when /proc/2 is kthreadd (PF_KTHREAD in its flags: a kernel thread is
       always in the initial namespace, and is only visible from the host PID namespace);
    3. cgstat's own /proc/self/ns/net, when cgstat runs in the host PID namespace
       (/proc/self/ns/pid has the fixed initial inode): an agent deployed with host PID is
       nearly always deployed with host networking too; the note says which was used.
    1 and 2 are used only where /proc shows the host's PIDs (--host-root, or cgstat in the
    host PID namespace): in a container's own PID namespace PID 1 is the container's init.
    A namespace with the fixed initial inode (Linux >= 6.18) counts as the host's in any case.
    """
    try:
        own_pid_ns: Optional[int] = _stat_ino("/proc/self/ns/pid")
    except ReadError:
        own_pid_ns = None
    try:
        own_net: Optional[int] = _stat_ino("/proc/self/ns/net")
    except ReadError:
        own_net = None
    host_pids = not fs.is_slash or own_pid_ns == PID_NS_INIT_INO
    why = "cgstat runs in its own PID namespace"
    if host_pids:
        try:
            return HostNetns(_stat_ino(fs.path("/proc/1/ns/net")), "/proc/1/ns/net")
        except ReadError as exc:
            why = f"/proc/1/ns/net: {exc.detail}"
        if _is_kthreadd(fs):
            try:
                ino = _stat_ino(fs.path("/proc/2/ns/net"))
                return HostNetns(ino, "/proc/2/ns/net (kthreadd)",
                                 f"{why}; the host network namespace is kthreadd's (PID 2)")
            except ReadError:
                pass
    if own_net is not None and own_net == NET_NS_INIT_INO:
        return HostNetns(own_net, "/proc/self/ns/net (the fixed initial-namespace inode)")
    if own_pid_ns == PID_NS_INIT_INO and own_net is not None:
        return HostNetns(own_net, "/proc/self/ns/net (cgstat runs in the host PID namespace)",
                         f"{why}; taking cgstat's own network namespace as the host's "
                         "(right when it runs with host networking)")
    return HostNetns(None, "unknown",
                     f"the host network namespace is unknown ({why}); a workload with host "
                     "networking would report the host's traffic as its own")


Members = Union[Mapping[K, Iterable[int]], Iterable[Tuple[K, int]]]


def _group(members) -> Dict:
    if isinstance(members, dict) and all(v.__class__ is list for v in members.values()):
        return members  # (only read: not copied, a thousand lists a tick)
    if isinstance(members, Mapping):
        return {k: list(v) for k, v in members.items()}
    out: Dict = {}
    for key, pid in members:
        out.setdefault(key, []).append(pid)
    return out


def _problem(error: str, detail: str) -> Problem:
    return Problem(SOURCE, error, detail)


# Files read (all under --host-root, through HostFS.path):
# - /proc/<pid>/ns/net     stat() follows the magic link to the namespace's nsfs inode: its
#                          identity (two processes are in one namespace iff the inodes match).
#                          One stat per workload (its first live PID); more only when PIDs vanish.
# - /proc/<pid>/net/dev    the interface counters of <pid>'s namespace. Read ONCE per namespace
#                          per tick, through one member (never once per process). It is opened
#                          relative to an open /proc/<pid> folder, whose namespace inode is
#                          checked before and after the read: a PID that exits and is reused by
#                          another process in between can't lend us the wrong namespace.
# - /proc/1/ns/net, /proc/2/stat + /proc/2/ns/net, /proc/self/ns/pid + /proc/self/ns/net
#                          once per reader, to find the host's namespace (see detect_host_netns).
# A workload in the host's namespace (host networking, plain systemd services) gets no
# network reading, with a reason (HOST_REASON): the host's interfaces are not its own traffic.
class NetnsReader:
    """Reads each workload's network namespace counters, once per namespace per tick.

    One per agent: the host namespace is found on the first read() and kept. Not
    thread-safe. `clock` is the monotonic clock used for NetworkSample.time_s.
    """

    def __init__(self, fs: HostFS, clock: Callable[[], float] = time.monotonic,
                 host: Optional[HostNetns] = None):
        self.fs = fs
        self.clock = clock
        self._host = host
        self.last = TickStats()
        self._key_ns: Dict = {}  # key -> the namespace its first live PID was in, last read
        self._host_results: Dict[int, NetworkResult] = {}  # the host's namespace inode -> its result

    @property
    def host(self) -> HostNetns:
        if self._host is None:
            self._host = detect_host_netns(self.fs)
        return self._host

    def read(self, members: Members, subtrees: Optional[Mapping] = None, still: Collection = ()) -> Dict:
        """key -> NetworkResult for every key of `members`.

        `members`: {key: [pid, ...]} or an iterable of (key, pid). A key's namespace is
        that of its first PID (in the order given) that is still alive; put a container's
        main process first. Never raises for a process or namespace that vanished.

        `subtrees`: {key: complete} for keys with no process of their own, whose PIDs are
        one per cgroup below them (a pod, a slice, a --cgroup-parent over containers).
        Such a key has the one namespace all of them are in; when they are in several (or
        not every cgroup below was looked at, `complete` False) it has no reading, with a
        reason: one child's traffic is not the parent's, and a sum would count a
        namespace shared with workloads outside the subtree.

        `still`: keys none of whose processes ran, came or went since the last read (a
        process changes its namespace only by a call of its own, and a PID is reused only
        after an exit): their namespace is the one found then, without a stat.
        """
        groups = _group(members)
        spread = self._spread(groups, subtrees or {})
        host = self.host
        ns_stats = 0
        pid_ns: Dict[int, Union[int, ReadError]] = {}  # memo within this tick
        key_ns: Dict = {}
        key_fail: Dict = {}
        # namespace -> live candidate PIDs to read through, in order (a dict as an ordered set:
        # a thousand workloads in one namespace, the host's, made a list's `in` quadratic)
        ns_pids: Dict[int, Dict[int, None]] = {}
        last_ns = self._key_ns
        for key, pids in groups.items():
            failure: Optional[ReadError] = None
            known = last_ns.get(key) if pids and key in still and key not in spread else None
            if known is not None:
                key_ns[key] = known
                ns_pids.setdefault(known, {})[pids[0]] = None
                continue
            for pid in pids:
                got = pid_ns.get(pid)
                if got is None:
                    ns_stats += 1
                    try:
                        got = _stat_ino(self.fs.path(f"/proc/{int(pid)}/ns/net"))
                    except ReadError as exc:
                        got = exc
                    pid_ns[pid] = got
                if isinstance(got, ReadError):
                    # keep the most telling failure: denied beats gone
                    if failure is None or isinstance(failure, Gone):
                        failure = got
                    continue
                key_ns[key] = got
                ns_pids.setdefault(got, {})[pid] = None
                break
            else:
                key_fail[key] = failure

        users: Dict[int, int] = {}
        for ino in key_ns.values():
            users[ino] = users.get(ino, 0) + 1

        readings: Dict[int, Union[Tuple[float, Tuple[InterfaceCounters, ...]], Problem]] = {}
        reads = 0
        for ino, cands in ns_pids.items():
            if host.is_host(ino):
                continue
            got, n_reads, n_stats = self._read_namespace(ino, list(cands))
            reads += n_reads
            ns_stats += n_stats
            readings[ino] = got

        out: Dict = {}
        for key in groups:
            if key in spread:
                out[key] = spread[key]
                continue
            ino = key_ns.get(key)
            if ino is None:
                failure = key_fail.get(key)
                if failure is None:
                    out[key] = NetworkResult(None, None, _problem(ERR_NO_PROCESS, "no member process"))
                else:
                    out[key] = NetworkResult(None, None, _problem(failure.code, f"{failure.path}: {failure.detail}"))
                continue
            if host.is_host(ino):
                host_result = self._host_results.get(ino)
                if host_result is None:  # one, shared: the same for every such workload, every tick
                    host_result = self._host_results[ino] = NetworkResult(None, ino, _problem(ERR_HOST, HOST_REASON))
                out[key] = host_result
                continue
            reading = readings[ino]
            if isinstance(reading, Problem):
                out[key] = NetworkResult(None, ino, reading)
                continue
            time_s, interfaces = reading
            own = tuple(i for i in interfaces if i.name != "lo")
            totals = tuple(sum(getattr(i, f) for i in own) for f in TOTAL_FIELDS)
            out[key] = NetworkResult(
                NetworkSample(netns=ino, shared=users[ino] > 1, time_s=time_s, totals=totals, interfaces=own),
                ino)
        self.last = TickStats(len(groups), len(readings), reads, ns_stats)
        self._key_ns = key_ns
        return out

    def _spread(self, groups: Dict, subtrees: Mapping) -> Dict:
        """Results for the subtree keys whose processes are not all in one namespace (or
        not all looked at); the others are read as usual, through their first PID."""
        out: Dict = {}
        host = self.host
        for key, complete in subtrees.items():
            pids = groups.get(key)
            if not pids or len(pids) < 2 and complete:
                continue
            found = set()
            for pid in pids:
                try:
                    found.add(_stat_ino(self.fs.path(f"/proc/{int(pid)}/ns/net")))
                except ReadError:
                    continue  # gone since it was chosen: the others tell
            if any(host.is_host(ino) for ino in found):
                continue  # the usual host-namespace reason, through the first PID
            if len(found) > 1:
                out[key] = NetworkResult(None, None, _problem(
                    ERR_SEVERAL, f"no process of its own; the processes below it are in {len(found)} "
                                 "network namespaces (each one's traffic is in its own cgroup's record)"))
            elif not complete:
                out[key] = NetworkResult(None, None, _problem(
                    ERR_SEVERAL, "no process of its own and too many cgroups below it to tell whether "
                                 "they share one network namespace"))
        return out

    def _read_namespace(self, ino: int, cands: List[int]):
        """(time_s, interfaces) of namespace `ino`, or a Problem; plus reads and stats done.

        Tries the candidate PIDs in turn: one that exited or changed namespace since it was
        looked at is skipped."""
        reads = stats = 0
        last: Optional[ReadError] = None
        for pid in cands:
            folder = self.fs.path(f"/proc/{int(pid)}")
            try:
                dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                last = read_error(exc, folder)
                continue
            try:
                stats += 1
                if _stat_ino("ns/net", dfd) != ino:
                    last = Gone(folder + "/ns/net", "moved to another network namespace")
                    continue
                reads += 1
                data = _read_at(dfd, "net/dev", folder + "/net/dev")
                time_s = self.clock()
                stats += 1
                if _stat_ino("ns/net", dfd) != ino:
                    last = Gone(folder + "/ns/net", "moved to another network namespace")
                    continue
            except ReadError as exc:
                last = exc
                if isinstance(exc, Denied):
                    break
                continue
            finally:
                os.close(dfd)
            try:
                return (time_s, parse_net_dev(data)), reads, stats
            except ValueError as exc:
                return _problem(Malformed.code, f"{folder}/net/dev: {exc}"), reads, stats
        if last is None:
            last = Gone(f"netns {ino}", "no process left in it")
        return _problem(last.code, f"{last.path}: {last.detail}"), reads, stats


def _read_at(dfd: int, name: str, path: str) -> bytes:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        raise read_error(exc, path) from None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(len(c) for c in chunks) > 4 * 1024 * 1024:
                raise Malformed(path, "larger than 4 MiB")
        return b"".join(chunks)
    except OSError as exc:
        raise read_error(exc, path) from None
    finally:
        os.close(fd)
