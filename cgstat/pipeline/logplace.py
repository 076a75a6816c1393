"""Where a long run (`stream`, `serve`) stopped reading the kernel log, kept in a small
file (`--log-state`: {"boot_id": ..., "seq": N}, replaced whole) so that the next agent of
the same boot (a restart; a crash, then systemd's Restart=) reports the OOM kills the log
got while no agent was reading, and not those reported before. systemd opens the kmsg
socket unit's /dev/kmsg afresh when the service restarts (PartOf=) or when it fails (its
read position overwritten): the place has to outlive the descriptor. A file of another
boot, or none, says nothing: the run then starts from its own start time (kernel/kmsg.py).
"""

from __future__ import annotations

import json
import os
from typing import Optional

from cgstat.atomic import write_atomic

MAX_BYTES = 4096  # the file is ~80 bytes; a bigger one is not ours


class LogPlace:
    """`load()` the record a run of this boot last read (None: no such run); `save(seq)`
    after each tick that read further (None, or why it could not be written)."""

    def __init__(self, path: str, boot_id: Optional[str]):
        self.path = path
        self.boot_id = boot_id
        self._saved: Optional[int] = None

    def load(self) -> Optional[int]:
        if self.boot_id is None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                data = os.read(fd, MAX_BYTES + 1)
            finally:
                os.close(fd)
            obj = json.loads(data.decode("utf-8")) if len(data) <= MAX_BYTES else None
        except (OSError, ValueError):
            return None
        if not isinstance(obj, dict) or obj.get("boot_id") != self.boot_id:
            return None
        seq = obj.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            self._saved = seq
            return seq
        return None

    def save(self, seq: Optional[int]) -> Optional[str]:
        if seq is None or seq == self._saved or self.boot_id is None:
            return None
        try:
            write_atomic(self.path, json.dumps({"boot_id": self.boot_id, "seq": seq}).encode(), ".log-state-")
        except OSError as exc:
            return f"cannot write {self.path}: {exc.strerror}"
        self._saved = seq
        return None
