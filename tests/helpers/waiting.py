"""Waiting in tests: a condition asked again until it holds or a deadline passes, the one
poll loop the unit, live and guest tests share (never a sleep standing for "long enough")."""

from __future__ import annotations

import time
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout_s: float, every_s: float = 0.25,
             what: Optional[str] = None) -> Optional[T]:
    """check()'s first true value, asked every `every_s` seconds and once more at the deadline.
    After `timeout_s` seconds: None, or where `what` names the condition, an AssertionError
    saying it with check()'s last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = check()
        if last:
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(every_s, left))
    if what is not None:
        raise AssertionError("%s: not within %s s (last: %r)" % (what, timeout_s, last))
    return None
