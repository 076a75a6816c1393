"""The NVIDIA driver's XID lines in the kernel log (`NVRM: Xid`, nv_report_error in
kernel-open/nvidia) as XidReports, and matching their PCI addresses to NVML's."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

from cgstat.kernel.kmsg_record import Record, kernel_text


class XidReport(NamedTuple):
    """One `NVRM: Xid` line of the kernel log."""

    pci_bus_id: str  # as the driver prints it: domain:bus:device, hexadecimal ("0000:3b:00")
    xid: int
    pid: Optional[int]  # the process the driver blames, where it names one
    process: Optional[str]  # its name (comm)
    detail: str  # the rest of the line
    seq: int  # the /dev/kmsg sequence number


_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (\d{1,6})(?:, (.*))?$")
_XID_WHO = re.compile(r"pid=(\d+|'?<unknown>'?), name=([^,]*), ?(.*)$")


def parse_xid(record: Record) -> Optional[XidReport]:
    """The XID an `NVRM: Xid` record reports, or None (another record, or not the kernel's).

    The driver prints a GPU error (nv_report_error, kernel-open/nvidia) as
    `NVRM: Xid (PCI:<domain>:<bus>:<device>): <code>, pid=<PID>, name=<comm>, <details>`
    (the pid and name since driver 470; `pid='<unknown>'` where no process is to blame)."""
    if record.facility != 0 or "NVRM: Xid " not in record.text:
        return None
    m = _XID.search(record.text)
    if m is None:
        return None
    pid = name = None
    detail = m.group(3) or ""
    who = _XID_WHO.match(detail)
    if who is not None:
        pid = int(who.group(1)) if who.group(1).isdigit() else None
        name = None if "<unknown>" in who.group(2) else kernel_text(who.group(2))
        detail = who.group(3)
    return XidReport(m.group(1).lower(), int(m.group(2)), pid, name, kernel_text(detail), record.seq)


def same_pci_device(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two PCI addresses name one device: the driver's `0000:3b:00` and NVML's
    `00000000:3B:00.0` (domain width, case and the function number differ)."""
    if not a or not b:
        return False

    def parts(x: str) -> Optional[Tuple[int, int, int]]:
        f = x.split(".", 1)[0].split(":")
        try:
            return (int(f[-3], 16), int(f[-2], 16), int(f[-1], 16)) if len(f) >= 3 else None
        except ValueError:
            return None

    pa = parts(a)
    return pa is not None and pa == parts(b)
