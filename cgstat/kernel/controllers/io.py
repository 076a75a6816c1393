"""The IO (v1: blkio) controller's files of one cgroup, as an IoSample.

Reads (v2) io.stat and io.max; (v1) blkio.throttle.io_service_bytes_recursive and
blkio.throttle.io_serviced_recursive (or the fallbacks below) and
blkio.throttle.{read,write}_{bps,iops}_device.
"""

from __future__ import annotations

from typing import Optional, Tuple

from cgstat.kernel import parse
from cgstat.kernel.cachekeys import KEYS
from cgstat.kernel.controllers.files import FileReader
from cgstat.kernel.sample import DeviceIo, DeviceLimit, IoSample, Problem
from cgstat.kernel.tree import Folder

# v1 block IO statistics, in order of preference. The throttle files are filled by the
# blk-throttle layer for every IO scheduler; on kernel 6.x (mq-deadline) they stay at 0 for
# a device until some cgroup sets a throttle rule on it (see docs/metrics.md). The CFQ
# files exist only on old kernels, the BFQ ones only count when BFQ schedules the device.
_BLKIO_V1 = (
    ("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_serviced_recursive"),
    ("blkio.io_service_bytes_recursive", "blkio.io_serviced_recursive"),
    ("blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced"),
    ("blkio.bfq.io_service_bytes_recursive", "blkio.bfq.io_serviced_recursive"),
)


_IO_MAX_KEYS = ("rbps", "wbps", "riops", "wiops")


def _io_limits_v2(folder: Folder, r: FileReader) -> Optional[Tuple[DeviceLimit, ...]]:
    table = r.opt(folder, "io.max", parse.parse_io_max)
    if table is None:
        return None
    return tuple(DeviceLimit(dev, *(table[dev].get(k) for k in _IO_MAX_KEYS))
                 for dev in sorted(table, key=device_order))


_BLKIO_LIMIT_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                      "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device")


# Kept as values (kernel/cachekeys.py): limits change only when written.
KEYS.slow_files("io.max", "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device")
# the files _limits_v1 reads, kept as one value
LIMITS_V1 = KEYS.derived("blkio limits", ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                                          "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"))


def _io_limits_v1(folder: Folder, r: FileReader) -> Optional[Tuple[DeviceLimit, ...]]:
    return r.derived(folder, LIMITS_V1, lambda: _limits_v1(folder, r))


def _limits_v1(folder: Folder, r: FileReader) -> Optional[Tuple[DeviceLimit, ...]]:
    tables = [r.opt(folder, name, parse.parse_blkio_device_values) for name in _BLKIO_LIMIT_FILES]
    if any(t is None for t in tables):
        return None
    if not any(tables):  # no throttle rule (the common case): nothing to sort
        return ()
    devices = set().union(*tables)  # type: ignore[arg-type]
    return tuple(DeviceLimit(dev, *(t.get(dev) for t in tables))  # type: ignore[union-attr]
                 for dev in sorted(devices, key=device_order))


def io_v2(folder: Folder, r: FileReader) -> IoSample:
    table = r.get(folder, "io.stat", parse.parse_io_stat)
    limits = _io_limits_v2(folder, r)
    if table is None:
        return IoSample(None, limits)
    devices = []
    for dev in sorted(table, key=device_order):
        f = table[dev]
        devices.append(DeviceIo(dev, f.get("rbytes", 0), f.get("wbytes", 0), f.get("rios", 0),
                                f.get("wios", 0), f.get("dbytes"), f.get("dios")))
    # A device line with no keys carries no IO yet: its counters are 0, not unknown.
    return IoSample(tuple(devices), limits)


def io_v1(folder: Folder, r: FileReader) -> IoSample:
    limits = _io_limits_v1(folder, r)
    for bytes_file, ops_file in _BLKIO_V1:
        if bytes_file in folder.files and ops_file in folder.files:
            nbytes = r.get(folder, bytes_file, parse.parse_blkio_v1)
            nops = r.get(folder, ops_file, parse.parse_blkio_v1)
            if nbytes is None or nops is None:
                return IoSample(None, limits)
            devices = []
            for dev in sorted(set(nbytes) | set(nops), key=device_order):
                b = nbytes.get(dev, {})
                o = nops.get(dev, {})
                devices.append(DeviceIo(dev, b.get("Read", 0), b.get("Write", 0), o.get("Read", 0),
                                        o.get("Write", 0), b.get("Discard"), o.get("Discard")))
            return IoSample(tuple(devices), limits)
    r.problems.append(Problem("io", "missing", f"no blkio statistics files in blkio:{folder.path}"))
    return IoSample(None, limits)


def device_order(dev: str):
    major, _, minor = dev.partition(":")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (1 << 32, 0)
