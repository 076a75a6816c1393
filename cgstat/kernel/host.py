"""Facts about the host as a whole: name, memory, CPUs, boot identity and its clock.

Reads /proc/sys/kernel/random/boot_id, /proc/stat (btime), /proc/uptime, /proc/meminfo,
/sys/devices/system/cpu/online and /etc/hostname, all under the host root.

The clock used for rates is the host's CLOCK_BOOTTIME (= /proc/uptime): monotonic, shared
by every process of one boot (so a cron run can compute rates against the previous run's
saved counters) and untouched by wall-clock jumps. On the live kernel it is read with
clock_gettime; for a recorded tree (a host root whose boot_id is not ours) it is the
recorded proc/uptime, so rates over two recorded snapshots use their real spacing.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple, Optional

from cgstat.kernel import parse
from cgstat.kernel.hostfs import HostFS, ReadError

_CLOCK_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


class HostInfo(NamedTuple):
    hostname: str
    boot_id: Optional[str]  # random per boot; "btime:<s>" when boot_id isn't readable
    live: bool  # the host root is the kernel we run on
    mem_total_bytes: Optional[int]
    cpus_online: Optional[int]


def _boot_id(fs: HostFS) -> Optional[str]:
    text = fs.read_optional("/proc/sys/kernel/random/boot_id")
    if text and text.strip():
        return text.strip()
    btime = _btime(fs)
    return f"btime:{btime}" if btime is not None else None


def _btime(fs: HostFS) -> Optional[int]:
    text = fs.read_optional("/proc/stat") or ""
    for line in text.splitlines():
        if line.startswith("btime "):
            try:
                return parse.parse_uint(line[6:])
            except ValueError:
                return None
    return None


def _hostname(fs: HostFS) -> str:
    if not fs.is_slash:
        for path in ("/etc/hostname", "/proc/sys/kernel/hostname"):
            text = fs.read_optional(path)
            if text and text.strip():
                return text.strip()
    return os.uname().nodename  # what gethostname(2) gives on Linux, without importing socket


def read_host(fs: HostFS) -> HostInfo:
    boot = _boot_id(fs)
    live = fs.is_slash or (boot is not None and boot == _boot_id(HostFS("/")))
    mem_total = None
    text = fs.read_optional("/proc/meminfo")
    if text:
        mem_total = parse.parse_meminfo(text).get("MemTotal")
    cpus = None
    text = fs.read_optional("/sys/devices/system/cpu/online")
    if text:
        try:
            cpus = parse.parse_cpu_list(text)
        except ValueError:
            cpus = None
    if cpus is None and live:
        cpus = os.cpu_count()
    return HostInfo(_hostname(fs), boot, live, mem_total, cpus)


class HostClock:
    """Monotonic seconds (for rates) and wall seconds (for `ts`) of the host."""

    def __init__(self, fs: HostFS, live: bool):
        self.fs = fs
        self.live = live
        self._btime = None if live else _btime(fs)
        self._recorded: Optional[float] = None

    def start_tick(self) -> None:
        """A recording has one time per snapshot: read it once per tick, not per cgroup."""
        if not self.live:
            self._recorded = self._recorded_uptime()

    def monotonic(self) -> float:
        if self.live:
            return time.clock_gettime(_CLOCK_BOOTTIME)
        if self._recorded is None:
            self._recorded = self._recorded_uptime()
        return self._recorded

    def wall(self, monotonic_s: float) -> float:
        if self.live or self._btime is None:
            return time.time()
        return self._btime + monotonic_s

    def _recorded_uptime(self) -> float:
        try:
            first = self.fs.read_text("/proc/uptime").split()[0]
            return float(first)
        except (ReadError, IndexError, ValueError):
            # No recorded clock: fall back to ours; rates then span the replay, not the
            # recording, which interval_s states honestly.
            return time.clock_gettime(_CLOCK_BOOTTIME)


def host_root_note(fs: HostFS) -> Optional[str]:
    """A warning when `--host-root` is clearly not a host's root, saying what will be missing.

    `--host-root /sys` or `/sys/fs/cgroup` still finds cgroup mounts below it (our own mount
    table lists them), but no /proc: the numbers come out while every PID-based part is
    silently empty. A recorded tree keeps the /proc/<pid> folders it needs.
    """
    if fs.is_slash:
        return None
    problems = []
    if not os.path.isdir(fs.path("/sys/fs/cgroup")):
        problems.append(f"no {fs.path('/sys/fs/cgroup')}")
    try:
        has_pids = any(name.isdigit() for name in os.listdir(fs.path("/proc")))
    except OSError:
        has_pids = False
    if not has_pids:
        problems.append(f"no processes under {fs.path('/proc')}")
    if not problems:
        return None
    return (f"--host-root {fs.root!r} does not look like a host's root ({'; '.join(problems)}): "
            "v1 controllers can't be joined through member processes, and container names, pod "
            "sandboxes and PID lookups will be missing")
