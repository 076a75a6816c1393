"""The GPU read beside the tick: NVML read on a thread of its own, the tick waiting for it
at most a deadline (the stream gives half its interval, at least 0.25 s); a late read gives
the devices last read with every figure null and a `gpu_read_late` problem (see Beside).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, Generic, List, Optional, Tuple, TypeVar

if TYPE_CHECKING:  # imported where used: a run without a driver never loads the GPU readers
    from cgstat.gpu.nvml import Gateway
    from cgstat.gpu.reading import GpuReader, GpuSnapshot

T = TypeVar("T")

# The least a tick waits for the read, whatever the interval: below it a busy host's
# scheduling alone (a 2-core machine at load 20) makes a healthy read of 8 GPUs late
FLOOR_S = 0.25


def deadline_s(interval_s: float) -> float:
    """How long a tick of `interval_s` waits for its GPU read: half the interval, at least FLOOR_S."""
    return max(interval_s / 2, FLOOR_S)


# NVML calls can block: DCGM #313 saw calls blocked over 45 s under ECC error storms,
# dcgm-exporter #227 scrape jitter, nvidia-container-toolkit #1053 an init of 24 s. On the
# tick's own thread one such call would hold every cgroup record, every sink and the
# watchdog. Here a tick whose read is not done by the deadline goes on without it: the GPU
# devices last read are given with every figure null and a `gpu_read_late` problem, no
# process and no cgroup `gpu` object (null, never the figures of an older read passed off as
# this tick's). The read goes on; a tick finding it still running starts none (NVML is never
# called from two threads at once), a tick finding it done late throws its figures away
# (they are of an older moment) but keeps its XIDs, and starts a new one. Each run of late
# ticks is said once (the warner repeats it at most every 5 minutes however long a call
# stays stuck) and counted (`late_total`).
class Beside(Generic[T]):
    """Runs `read` on a daemon thread when a tick asks (`take`), waiting at most a deadline.
    `late(seconds running)` makes what a late tick gets; `keep(late result, next)` carries
    what a read finished too late holds that must not be lost (XIDs) into the next one."""

    def __init__(self, read: Callable[[], T], late: Callable[[float], T], keep: Callable[[T, T], T],
                 warn: Optional[Callable[[str, str], None]] = None,
                 clock: Callable[[], float] = time.monotonic):
        self._read = read
        self._late = late
        self._keep = keep
        self._warn = warn
        self._clock = clock
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._asked = False  # a read is asked for and not done
        self._started = 0.0  # when it was asked (clock s)
        self._done: List[Tuple[T]] = []  # the finished read, until taken
        self._failed: Optional[BaseException] = None  # what the read raised, raised again by take()
        self._leftover: Optional[T] = None  # a late read's result, for what it must pass on
        self._late_run = False  # the previous tick was late
        self.late_total = 0  # ticks that went on without the GPU read
        self.closed = False

    def take(self, deadline_s: float) -> T:
        """This tick's reading, or the late one when it is not done within `deadline_s`."""
        cond = self._cond
        with cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cgstat-gpu", daemon=True)
                self._thread.start()
            if not self._asked:
                if self._done:  # finished after its tick went on: of an older moment
                    self._leftover = self._done.pop()[0]
                self._asked = True
                self._started = self._clock()
                cond.notify_all()
            end = self._clock() + deadline_s
            while self._asked:
                left = end - self._clock()
                if left <= 0:
                    break
                cond.wait(left)
            if self._failed is not None:  # raised on the tick's thread, as a read made there would
                failed, self._failed = self._failed, None
                raise failed
            if not self._asked and self._done:
                result = self._done.pop()[0]
                if self._leftover is not None:
                    result = self._keep(self._leftover, result)
                    self._leftover = None
                self._late_run = False
                return result
            running_s = self._clock() - self._started
        self.late_total += 1
        if not self._late_run and self._warn is not None:
            self._warn("gpu-read-late", f"GPU read late: NVML has not answered within {deadline_s:.2f} s "
                       f"(running {running_s:.1f} s); GPU figures are null (gpu_read_late) until it does, "
                       "the cgroup records go on")
        self._late_run = True
        return self._late(running_s)

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._asked and not self.closed:
                    cond.wait()
                if self.closed:
                    return
            try:
                result = self._read()
            except BaseException as exc:  # a bug, not a driver's answer: the tick says it
                with cond:
                    self._failed = exc
                    self._done[:] = []
                    self._asked = False
                    cond.notify_all()
                continue
            with cond:
                self._done[:] = [(result,)]
                self._asked = False
                cond.notify_all()

    def close(self, wait_s: float = 1.0) -> bool:
        """Stop the thread; False when a read is still running after `wait_s` (a call stuck
        in the driver: the daemon thread is left to the process's exit)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is None:
            return True
        thread.join(wait_s)
        return not thread.is_alive()


class GpuReads:
    """A run's GPU readings through `gateway`: on the tick's own thread (`deadline_s` None,
    the one-shots), or beside it (gpu/beside.py's `Beside`), the tick waiting at most
    `deadline_s`. The GPU record modules are imported on the first reading with a driver."""

    def __init__(self, gateway: Gateway, warn: Optional[Callable[[str, str], None]] = None):
        self.gateway = gateway
        self.deadline_s: Optional[float] = None
        self._warn = warn
        self._reader: Optional[GpuReader] = None
        self._beside: Optional[Beside[GpuSnapshot]] = None
        self._last: Optional[GpuSnapshot] = None  # the last reading that was on time
        # (GPU, call) -> failures, copied after each reading on time (the thread is idle then)
        self.error_counts: Dict[Tuple[str, str], int] = {}

    def read(self) -> Optional[GpuSnapshot]:
        """This tick's reading; None when NVML can't be read (`gateway.reason` says why)."""
        gw = self.gateway
        if self._beside is None and (self.deadline_s is None or not gw.driver_loaded()):
            # no thread yet: asked here (cheap without a driver: no library is touched)
            if not gw.available():
                return None
            if self.deadline_s is None:
                return self._counted(self._reading())
        if self.deadline_s is None:  # pragma: no cover - a deadline is not taken back
            return self._counted(self._reading())
        if self._beside is None:
            from cgstat.gpu.reading import carry_xids, late_snapshot

            self._beside = Beside(self._reading, lambda running_s: late_snapshot(self._last, running_s),
                                  carry_xids, self._warn)
        snapshot = self._beside.take(self.deadline_s)
        if snapshot.available and not snapshot.late:
            self._last = snapshot
            self._counted(snapshot)
        return snapshot

    def _counted(self, snapshot: GpuSnapshot) -> GpuSnapshot:
        if self.gateway.error_counts:
            self.error_counts = dict(self.gateway.error_counts)
        return snapshot

    def _reading(self) -> GpuSnapshot:
        if self._reader is None:
            from cgstat.gpu.reading import GpuReader

            self._reader = GpuReader(self.gateway)
        return self._reader.read()

    @property
    def late_total(self) -> int:
        """Ticks that went on without their GPU read (it missed the deadline)."""
        return 0 if self._beside is None else self._beside.late_total

    def close(self) -> None:
        """Stop the thread and shut NVML down (left to the process's exit where a call is stuck)."""
        if self._beside is not None and not self._beside.close():
            return
        self.gateway.close()
