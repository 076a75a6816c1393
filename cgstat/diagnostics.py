"""Warnings on stderr: one line each, prefixed 'cgstat:', rate-limited per distinct problem.

Messages carry names other users control (cgroup folders in delegated subtrees, files in
their homes), so every line is escaped before it is written (`text.escape_controls`) and
names in messages go through `quote()`. Memory and output are bounded (see the constants).
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from typing import Callable, Dict, NamedTuple, Optional

from cgstat.text import escape_controls, quote  # noqa: F401  (quote: for callers)

# Keys often hold names other users control (one per hostile path), so the rate-limit
# memory and the once-only memory are separate, least-recently-used dictionaries with a cap
# (_MAX_KEYS). A key pushed out of the once-only memory may be said again; to keep that (and
# a flood of distinct problems) from filling the journal, at most `burst` lines are written
# per `repeat_s` window; the rest are counted and the count is said when the window ends.
_REPEAT_S = 300.0  # the same problem is repeated at most every 5 minutes
_MAX_KEYS = 4096  # distinct keys remembered, per memory
_BURST = 100  # lines per repeat window; a start-up says a handful


class Diagnostic(NamedTuple):
    """One warning or notice as it goes out: `key` names the problem (the once-only and
    rate-limit rules are per key), `message` is the one line for a person."""

    key: str
    message: str


class Warner:
    """The one diagnostics channel: every module warns through it, never to stderr itself.

    Lines go to `stream` (stderr by default), or to `handler` when one is given: a view
    that owns the terminal (`cgstat top`) takes them there.
    """

    def __init__(self, stream=None, repeat_s: float = _REPEAT_S, max_keys: int = _MAX_KEYS,
                 burst: int = _BURST, handler: Optional[Callable[[Diagnostic], None]] = None):
        self.stream = stream
        self.handler = handler
        self.repeat_s = repeat_s
        self.max_keys = max(1, max_keys)
        self.burst = max(1, burst)
        self._last: "OrderedDict[str, float]" = OrderedDict()  # warn(): key -> when said
        self._suppressed: Dict[str, int] = {}  # only for keys in _last
        self._once: "OrderedDict[str, None]" = OrderedDict()  # once(): keys said
        self._window_start = time.monotonic()
        self._said = 0  # lines written in this window
        self._held = 0  # lines not written in this window (over the burst)

    def warn(self, key: str, message: str) -> None:
        """Say `message` unless `key` was said less than repeat_s ago (then count it)."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.repeat_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            self._last.move_to_end(key)
            return
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self.max_keys:
            old, _ = self._last.popitem(last=False)
            self._suppressed.pop(old, None)
        again = self._suppressed.pop(key, 0)
        suffix = f" (repeated {again} times since last said)" if again else ""
        self._emit(key, message + suffix, now)

    def once(self, key: str, message: str) -> None:
        """Say `message` the first time `key` is seen (while the key stays remembered)."""
        if key in self._once:
            self._once.move_to_end(key)  # a problem still present stays remembered
            return
        self._once[key] = None
        while len(self._once) > self.max_keys:
            self._once.popitem(last=False)
        self._emit(key, message, time.monotonic())

    def _emit(self, key: str, message: str, now: float) -> None:
        if now - self._window_start >= self.repeat_s:
            if self._held:
                self._out("flood", f"{self._held} more warnings were not shown in the last "
                          f"{self.repeat_s:g} s (more than {self.burst} distinct problems)")
            self._window_start = now
            self._said = self._held = 0
        if self._said >= self.burst:
            if not self._held:
                self._out("flood", f"more than {self.burst} warnings within {self.repeat_s:g} s: "
                          "counting the rest instead of showing them")
            self._held += 1
            return
        self._said += 1
        self._out(key, message)

    def _out(self, key: str, message: str) -> None:
        if self.handler is not None:
            self.handler(Diagnostic(key, message))
        else:
            say(message, self.stream)


def say(message: str, stream=None) -> None:
    """Write one line 'cgstat: MESSAGE' with every control character escaped."""
    stream = stream or sys.stderr
    try:
        # escaped: no raw newline to forge a `cgstat: ...` line, no ESC/CSI or bidi control
        # to drive the terminal or reorder the journal
        stream.write(f"cgstat: {escape_controls(message)}\n")
        stream.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nothing better to do
