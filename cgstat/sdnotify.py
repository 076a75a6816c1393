"""sd_notify(3) and sd_listen_fds(3) for the systemd units, with the standard library only.

systemd passes the address of its notification socket in $NOTIFY_SOCKET (Type=notify,
WatchdogSec=): a file-system path ("/run/systemd/notify") or a Linux abstract-namespace
name written with a leading "@". A message is one datagram of newline-separated
assignments ("READY=1", "WATCHDOG=1", "STOPPING=1", "STATUS=...").

Nothing here raises or blocks: without $NOTIFY_SOCKET (a pipe, cron, a terminal) every
call is a cheap no-op returning False, and a missing, full or refusing socket also
returns False. The datagram is sent on a non-blocking socket, so a receiver that stopped
reading costs EAGAIN, never a wait.
"""

import os
from typing import Optional, Union

__all__ = ["notify", "ready", "watchdog", "stopping", "watchdog_interval_s", "listen_fd"]


def _address(value: str) -> Optional[Union[str, bytes]]:
    """The socket address for $NOTIFY_SOCKET's value, or None when not usable."""
    if value.startswith("@") and len(value) > 1:
        return b"\0" + os.fsencode(value[1:])  # Linux abstract namespace
    if value.startswith("/"):
        return value
    return None  # empty, relative, or a kind this module does not speak (vsock:...)


def notify(message: str) -> bool:
    """Send one notification to systemd; True when the datagram went out."""
    value = os.environ.get("NOTIFY_SOCKET", "")
    if not value or not message:
        return False
    try:
        address = _address(value)
        if address is None:
            return False
        data = message.encode("utf-8")
        import socket  # here: only a systemd unit sends (every start paid the import, a cron run too)

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            return sock.sendto(data, address) == len(data)
        finally:
            sock.close()
    except (OSError, ValueError, TypeError, UnicodeError):
        # ENOENT/ECONNREFUSED (no listener), EAGAIN (queue full), EACCES, ENAMETOOLONG,
        # EAFNOSUPPORT under a seccomp/RestrictAddressFamilies= that forbids AF_UNIX,
        # a NUL in the path: monitoring goes on either way.
        return False


def ready() -> bool:
    """READY=1: start-up finished (Type=notify units stay 'activating' until then)."""
    return notify("READY=1")


def watchdog() -> bool:
    """WATCHDOG=1: still alive; due at least every WatchdogSec= (ideally every half)."""
    return notify("WATCHDOG=1")


def stopping() -> bool:
    """STOPPING=1: shutting down on purpose."""
    return notify("STOPPING=1")


def watchdog_interval_s() -> Optional[float]:
    """The service manager's watchdog timeout in seconds, or None when none applies.

    As sd_watchdog_enabled(3): $WATCHDOG_USEC must be a positive integer, and when
    $WATCHDOG_PID is set it must name this process (a child that inherited the
    environment is not the one being watched). The keep-alive is due before this
    much time has passed; systemd advises sending it every half of it.
    """
    usec_text = os.environ.get("WATCHDOG_USEC", "")
    if not _is_decimal(usec_text) or int(usec_text) <= 0:
        return None
    pid_text = os.environ.get("WATCHDOG_PID", "")
    if pid_text and (not _is_decimal(pid_text) or int(pid_text) != os.getpid()):
        return None
    return int(usec_text) / 1e6


def _is_decimal(text: str) -> bool:
    """Plain ASCII digits only (int() would also take "+5", " 5", "1_0" and "٥")."""
    return bool(text) and all("0" <= c <= "9" for c in text)


_LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START


def listen_fd(name: str) -> Optional[int]:
    """The file descriptor systemd passed under FileDescriptorName=`name`, or None.

    As sd_listen_fds_with_names(3): $LISTEN_PID must name this process, $LISTEN_FDS
    says how many descriptors follow 3, $LISTEN_FDNAMES names them (colon-separated).
    The units pass /dev/kmsg this way (a ListenSpecial= socket unit: PID 1 opens it, so
    the service needs neither CAP_SYSLOG nor access to the device node).
    """
    pid_text, count_text = os.environ.get("LISTEN_PID", ""), os.environ.get("LISTEN_FDS", "")
    if not _is_decimal(pid_text) or int(pid_text) != os.getpid() or not _is_decimal(count_text):
        return None
    names = os.environ.get("LISTEN_FDNAMES", "").split(":")
    for i in range(min(int(count_text), len(names))):
        if names[i] == name:
            return _LISTEN_FDS_START + i
    return None
