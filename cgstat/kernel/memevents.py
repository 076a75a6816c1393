"""cgroup v2 `memory.events`, read the moment the kernel says it changed, so an OOM kill is
counted before a container removed right after it goes (when the kernel log can't be read).

`MemoryEventsWatcher.follow({cgroup path: local folder})` once per tick sets the watched
cgroups; `take()` returns the oom_kill counts read since the last take. One inotify
instance and one daemon thread blocked in select(); `close()` ends both.
Reads: <cgroup>/memory.events of the followed cgroups.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Dict, Mapping, Optional, Tuple

from cgstat.kernel import parse
from cgstat.kernel.inotify import IN_IGNORED, IN_MODIFY, Inotify


# The kernel notifies a change of memory.events (cgroup_file_notify, mm/memcontrol.c
# memcg_memory_event) as IN_MODIFY on the file. A container whose init is OOM-killed is
# removed ~0.15 s later (runc), before the next tick can read its counter; a watch on its
# memory.events lets a thread read the file within milliseconds of the kill, so the count
# is known before the cgroup goes. memory.events counts the cgroup's descendants' events
# too (memory.events.local is its own): a pod's count moves with its containers'.
class MemoryEventsWatcher:
    """Watches memory.events of the followed cgroups; a thread reads each one that changes."""

    def __init__(self) -> None:
        self._ino = Inotify()
        self._lock = threading.Lock()
        self._by_path: Dict[str, Tuple[int, str]] = {}  # cgroup path -> (watch, file)
        self._by_wd: Dict[int, Tuple[str, str]] = {}  # watch -> (cgroup path, file)
        self._seen: Dict[str, int] = {}  # cgroup path -> the last oom_kill read (since take())
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()  # close() wakes the thread from its select()
        self._thread = threading.Thread(target=self._run, name="cgstat-memory-events", daemon=True)
        self._thread.start()

    def follow(self, folders: Mapping[str, str]) -> None:
        """Watch these cgroups' memory.events (path -> local folder); stop watching the others."""
        with self._lock:
            for path in [p for p in self._by_path if p not in folders]:
                wd, _ = self._by_path.pop(path)
                self._by_wd.pop(wd, None)
                self._ino.rm_watch(wd)
            for path, local in folders.items():
                if path in self._by_path:
                    continue
                name = os.path.join(local, "memory.events")
                try:
                    wd = self._ino.add_watch(name, IN_MODIFY)
                except OSError:
                    continue  # gone, no memory controller there, or past the watch limit
                self._by_path[path] = (wd, name)
                self._by_wd[wd] = (path, name)

    def take(self) -> Dict[str, int]:
        """cgroup path -> oom_kill as last read, for the files that changed since the last take."""
        with self._lock:
            seen, self._seen = self._seen, {}
        return seen

    def pending(self) -> Tuple[str, ...]:
        """The cgroup paths whose memory.events changed since the last take(), left to take()."""
        with self._lock:
            return tuple(self._seen)

    def _run(self) -> None:
        while not self._stop.is_set():
            fd = self._ino.fd
            if fd is None:
                return
            try:
                ready, _, _ = select.select([fd, self._wake_r], [], [])
            except (OSError, ValueError):
                return
            if self._stop.is_set() or fd not in ready:
                continue
            try:
                events = self._ino.events()
            except OSError:
                return
            for wd, mask, _ in events:
                with self._lock:
                    hit = self._by_wd.get(wd)
                    if mask & IN_IGNORED:
                        self._by_wd.pop(wd, None)  # the cgroup went: the watch with it
                if hit is None or not mask & IN_MODIFY:
                    continue
                kills = _oom_kill(hit[1])
                if kills is not None:
                    with self._lock:
                        self._seen[hit[0]] = kills

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(2.0)
        self._ino.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


def _oom_kill(name: str) -> Optional[int]:
    try:
        with open(name, "rb") as f:
            text = f.read(4096).decode("ascii", "replace")
        return parse.parse_flat_keyed(text).get("oom_kill")
    except (OSError, ValueError):
        return None
