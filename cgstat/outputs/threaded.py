"""What the sinks written from a thread of their own share (outputs/queued.py's QueuedSink,
the OTLP push): the thread started once, the stop signal watched, and what the thread has
to say kept for the tick's thread to say at its next write (the diagnostics channel is
used from one thread only)."""

from __future__ import annotations

import collections
import threading
from typing import Callable, Deque, Optional, Tuple

from cgstat.pipeline.sinks import Sink


class ThreadedSink(Sink):
    """A sink whose `_run` is its own thread's work."""

    thread_name = "cgstat-sink"
    warn: Optional[Callable[[str, str], None]] = None  # the diagnostics channel's warn(key, message)

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._said: Deque[Tuple[str, str]] = collections.deque()  # (key, message), from the thread
        self._stop_asked: Callable[[], bool] = lambda: False

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        raise NotImplementedError

    def _take_thread(self) -> Optional[threading.Thread]:
        """The thread to wait for at close (None: never started, or closed already)."""
        thread, self._thread = self._thread, None
        return thread

    def watch_stop(self, asked: Callable[[], bool]) -> None:
        self._stop_asked = asked

    def _tell(self, key: str, message: str) -> None:
        """From the thread: a message for the tick's thread to say."""
        self._said.append((key, message))

    def _say(self) -> None:
        """From the tick's thread: say what the thread told."""
        while self._said:
            key, message = self._said.popleft()
            self._heard(key)
            self._warn(key, message)

    def _heard(self, key: str) -> None:
        """A message of `key` is about to be said (a sink that ends an episode on it)."""

    def _warn(self, key: str, message: str) -> None:
        if self.warn is not None:
            self.warn(key, message)
