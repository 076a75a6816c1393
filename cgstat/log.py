"""Warnings on stderr: one line each, prefixed 'cgstat:', rate-limited per distinct problem."""

from __future__ import annotations

import sys
import time
from typing import Dict

_REPEAT_S = 300.0  # the same problem is repeated at most every 5 minutes


class Warner:
    def __init__(self, stream=None, repeat_s: float = _REPEAT_S):
        self.stream = stream
        self.repeat_s = repeat_s
        self._last: Dict[str, float] = {}
        self._suppressed: Dict[str, int] = {}

    def warn(self, key: str, message: str) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.repeat_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        if len(self._last) > 10000:  # keys include paths: never grow without bound
            self._last.clear()
        self._last[key] = now
        again = self._suppressed.pop(key, 0)
        suffix = f" (repeated {again} times since last said)" if again else ""
        say(message + suffix, self.stream)

    def once(self, key: str, message: str) -> None:
        if key in self._last:
            return
        self._last[key] = time.monotonic()
        say(message, self.stream)


def say(message: str, stream=None) -> None:
    stream = stream or sys.stderr
    try:
        stream.write(f"cgstat: {message}\n")
        stream.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nothing better to do
