"""The one scheduler for everything that ticks (stream, serve, top): drift-free slots and
the stop/reopen signals in one place.

Slots are start + k * interval, so a tick that takes 30 ms does not push every later batch
30 ms back; a tick longer than the interval skips the missed slots (said once, through the
diagnostics channel) rather than running back to back. SIGTERM and SIGINT stop after the
current tick (they interrupt only a sleep, never a write: no half line); SIGHUP asks the
sinks to reopen (logrotate). Under a systemd watchdog a long sleep sends keep-alives of its
own every half WatchdogSec=, so any interval works with the shipped unit.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Iterator, Optional

from cgstat import sdnotify
from cgstat.diagnostics import Warner


class _Wake(Exception):
    """Raised from the signal handler to cut a sleep short."""


class Schedule:
    def __init__(self, interval_s: float, warner: Warner, heartbeat_s: Optional[float] = None):
        self.interval_s = interval_s
        self.warner = warner
        self.heartbeat_s = heartbeat_s
        self.stop = False
        self._reopen = False
        self._sleeping = False
        self.start = time.monotonic()

    def install_signals(self) -> "Schedule":
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        return self

    def _on_stop(self, signum, frame) -> None:
        self.stop = True
        if self._sleeping:
            raise _Wake()

    def _on_hup(self, signum, frame) -> None:
        self._reopen = True

    def restart(self) -> None:
        """Count the slots from now: after a warm-up that took longer than an interval, the
        first tick still comes a whole interval later (its rates span a real interval)."""
        self.start = time.monotonic()

    def take_reopen(self) -> bool:
        """True once after each SIGHUP."""
        asked, self._reopen = self._reopen, False
        return asked

    def sleep_until(self, deadline: float) -> None:
        """Sleep until `deadline` (time.monotonic) or a stop signal, whichever comes first."""
        remaining = deadline - time.monotonic()
        if remaining <= 0 or self.stop:
            return
        with self.asleep():
            while remaining > 0 and not self.stop:
                if self.heartbeat_s is not None and remaining > self.heartbeat_s:
                    time.sleep(self.heartbeat_s)
                    sdnotify.watchdog()
                else:
                    time.sleep(remaining)
                remaining = deadline - time.monotonic()

    @contextlib.contextmanager
    def asleep(self) -> Iterator[None]:
        """A wait that a stop signal cuts short: the signal ends the block (a sleep_until
        of one's own, such as one that waits for keys, runs in it)."""
        self._sleeping = True
        try:
            yield
        except _Wake:
            pass
        finally:
            self._sleeping = False

    def ticks(self, count: Optional[int] = None) -> Iterator[int]:
        """Yield 1, 2, ... at start + k * interval until stopped or `count` ticks are done.

        The caller's work happens between yields; its duration decides the slow-tick warning
        and the slots skipped.
        """
        slot = 1
        done = 0
        while not self.stop:
            self.sleep_until(self.start + slot * self.interval_s)
            if self.stop:
                return
            began = time.monotonic()
            yield done + 1
            done += 1
            if count is not None and done >= count:
                return
            now = time.monotonic()
            took = now - began
            if took > self.interval_s:
                self.warner.warn("slow", f"a tick took {took:.3f} s, longer than the {self.interval_s:g} s "
                                         "interval; skipping the missed slots")
            slot = max(slot + 1, int((now - self.start) / self.interval_s) + 1)


def watchdog_heartbeat_s() -> Optional[float]:
    """Half the service manager's watchdog timeout, or None outside a watchdog.

    Under a watchdog, faulthandler is turned on too: systemd's SIGABRT then leaves a
    traceback of where the agent hung in the journal.
    """
    timeout_s = sdnotify.watchdog_interval_s()
    if timeout_s is None:
        return None
    import faulthandler

    faulthandler.enable()
    return timeout_s / 2
