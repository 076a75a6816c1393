"""The state file of `cgstat once --state FILE`: the raw counters of the previous run.

Written atomically (a temporary file in the same folder, fsync, rename), so a crash or a
full disk never leaves a half-written state behind; `FILE.lock` (flock) keeps two
overlapping cron runs from interleaving. A state that is corrupt, of another format
version, from another boot (counters restarted) or dated in the future is reported and
replaced, never trusted: its rates would be garbage.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from typing import Dict, Optional, Tuple

import orjson

from cgstat.model import Counters

STATE_VERSION = 1


class StateError(Exception):
    pass


class StateLock:
    """An exclusive flock on FILE.lock, waited for at most `timeout_s`."""

    def __init__(self, path: str, timeout_s: float = 30.0):
        self.path = path + ".lock"
        self.timeout_s = timeout_s
        self.fd: Optional[int] = None

    def __enter__(self) -> "StateLock":
        import time

        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(f"cannot open lock {self.path}: {os.strerror(exc.errno)}") from None
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    self.fd = None
                    raise StateError(f"another cgstat holds {self.path} for over {self.timeout_s:.0f} s") from None
                time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


def load(path: str, boot_id: Optional[str], now_s: float) -> Tuple[Dict[str, Counters], Optional[str]]:
    """The saved counters by cgroup path, and a reason when the file was not usable."""
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024 * 1024)
    except FileNotFoundError:
        return {}, None  # first run
    except OSError as exc:
        return {}, f"cannot read state {path}: {os.strerror(exc.errno)}; starting afresh"
    try:
        obj = orjson.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        if obj.get("version") != STATE_VERSION:
            return {}, f"state {path} has format version {obj.get('version')!r}, not {STATE_VERSION}; replacing it"
        if obj.get("boot_id") != boot_id:
            return {}, f"state {path} is from another boot or host; rates restart"
        saved_at = float(obj["time_s"])
        if saved_at > now_s + 1.0:
            return {}, f"state {path} is dated in the future ({saved_at:.1f} s > now {now_s:.1f} s); replacing it"
        cgroups = obj["cgroups"]
        if not isinstance(cgroups, dict):
            raise ValueError("cgroups is not an object")
        return {str(k): Counters.from_json(v) for k, v in cgroups.items()}, None
    except (ValueError, TypeError, KeyError, AttributeError, orjson.JSONDecodeError) as exc:
        return {}, f"state {path} is corrupt ({exc}); replacing it"


def save(path: str, boot_id: Optional[str], host_root: str, now_s: float,
         cgroups: Dict[str, Counters]) -> None:
    obj = {
        "version": STATE_VERSION,
        "boot_id": boot_id,
        "host_root": host_root,
        "time_s": now_s,
        "cgroups": {k: v.to_json() for k, v in cgroups.items()},
    }
    data = orjson.dumps(obj)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cgstat-state-", dir=folder)
    except OSError as exc:
        raise StateError(f"cannot write state in {folder}: {os.strerror(exc.errno)}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StateError(f"cannot write state {path}: {os.strerror(exc.errno)}") from None
