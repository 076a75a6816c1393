"""Where a long run (`stream`, `serve`) stopped reading the kernel log, kept in a small file
(`--log-state`: {"boot_id": ..., "seq": N}, replaced whole) so that the next agent of the
same boot reports the OOM kills the log got while no agent was reading, and not those
reported before. A file of another boot, or none, says nothing: the run then starts from
its own start time (kernel/kmsg.py). Guarded as `--state` is (see LogPlace.check).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Optional, Tuple

from cgstat.atomic import write_atomic
from cgstat.errors import CgstatError, file_kind, os_reason
from cgstat.safepath import UnsafePath, place
from cgstat.text import escape_controls

# The next agent of the same boot: a restart; a crash, then systemd's Restart=. systemd
# opens the kmsg socket unit's /dev/kmsg afresh when the service restarts (PartOf=) or when
# it fails (its read position overwritten): the place has to outlive the descriptor.
MAX_BYTES = 4096  # the file is ~80 bytes; a bigger one is not ours


# Guarded as `--state` is: the path is checked when the run starts (`check()`), through
# folders no other user can change (safepath.py), and replaced only when it is missing,
# empty or a place file of cgstat's that is the running user's and writable by no one else;
# a link, a device, FIFO or folder, or any other file is refused with one line before
# anything is written.
class LogPlace:
    """`load()` the record a run of this boot last read (None: no such run); `save(seq)`
    after each tick that read further (None, or why it could not be written)."""

    def __init__(self, path: str, boot_id: Optional[str]):
        self.path = path
        self.boot_id = boot_id
        self._saved: Optional[int] = None

    def check(self) -> None:
        """CgstatError (one line) unless the path may be replaced: see the comment above LogPlace."""
        _, obj = self._read()
        if obj is not None and not (isinstance(obj, dict) and "boot_id" in obj and set(obj) <= {"boot_id", "seq"}):
            raise CgstatError(f"refusing --log-state {escape_controls(self.path)}: not a kernel log place of "
                              "cgstat's (cgstat replaces only its own files)")

    def _read(self) -> Tuple[bool, object]:
        """(whether the file exists, its JSON or None when empty); CgstatError when it can't be ours."""
        shown = escape_controls(self.path)
        with place(self.path, "--log-state") as where:
            st = where.lstat()
            if st is None:
                return False, None
            if not stat.S_ISREG(st.st_mode):
                raise CgstatError(f"refusing --log-state {shown}: it is {file_kind(st.st_mode)} (cgstat replaces "
                                  "only its own files and writes through no link)")
            where.check_owned(st)
            try:
                fd = where.open(os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
                try:
                    data = os.read(fd, MAX_BYTES + 1)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise CgstatError(f"cannot read --log-state {shown}: {os_reason(exc)}") from None
        if not data.strip():
            return True, None
        try:
            return True, json.loads(data.decode("utf-8")) if len(data) <= MAX_BYTES else ""
        except ValueError:
            return True, ""

    def load(self) -> Optional[int]:
        if self.boot_id is None:
            return None
        try:
            obj = self._read()[1]
        except CgstatError:
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
            write_atomic(self.path, json.dumps({"boot_id": self.boot_id, "seq": seq}).encode(), ".log-state-",
                         "--log-state")
        except OSError as exc:
            return f"cannot write {escape_controls(self.path)}: {exc.strerror}"
        except UnsafePath as exc:
            return f"cannot write {escape_controls(self.path)}: {os.strerror(exc.errno)}" if exc.errno else str(exc)
        self._saved = seq
        return None
