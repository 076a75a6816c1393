"""Which runtime state files changed since the last tick, without reading them: one inotify
watch per container folder (IN_MOVED_TO of dockerd's atomic rewrite of config.v2.json),
drained once per tick; where a watch can't be had, the file's stat is compared instead.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Generic, Hashable, List, Optional, Tuple, TypeVar

from cgstat.kernel.inotify import (
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_IGNORED,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
)

K = TypeVar("K", bound=Hashable)
_MASK = IN_MOVED_TO | IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW
Signature = Tuple[int, int, int]


# dockerd rewrites a container's config.v2.json on every change that a name, image or label
# could follow (docker rename, a restart): it writes a temporary file in the container's
# folder and renames it over the old one (AtomicWriteFile), which inotify(7) reports on a
# watch of that folder as IN_MOVED_TO with the file's name. One watch per container folder,
# the events drained once per tick: a steady host costs one non-blocking read per tick,
# whatever the number of containers, and a rename is seen on the next tick.
# Where a watch can't be had (no inotify, fs.inotify.max_user_watches reached) the file's
# identity (inode, mtime, size: `docker.signature`) is compared instead, every tick, for
# those files only. An overflowed queue (IN_Q_OVERFLOW) counts every watched file as changed.
class StateWatch(Generic[K]):
    """Keys whose watched file changed; `signature(folder, name)` is the fallback's stat."""

    def __init__(self, signature: Callable[[str, str], Optional[Signature]]):
        self.signature = signature
        self._inotify: Optional[Inotify] = None
        self._broken = False  # inotify_init1 failed: every file is polled
        self._keys: Dict[int, Tuple[K, bytes]] = {}  # watch descriptor -> (key, file name)
        self._wds: Dict[K, int] = {}
        self._polled: Dict[K, Tuple[str, str, Signature]] = {}  # key -> (folder, name, signature)

    def watch(self, key: K, folder: str, name: str, sig: Optional[Signature]) -> None:
        """Follow `folder`/`name` (local paths) for `key`; `sig`: its identity when read."""
        self.forget(key)
        wd = self._add(folder)
        if wd is not None:
            self._keys[wd] = (key, os.fsencode(name))
            self._wds[key] = wd
        elif sig is not None:
            self._polled[key] = (folder, name, sig)

    def _add(self, folder: str) -> Optional[int]:
        if self._broken:
            return None
        if self._inotify is None:
            try:
                self._inotify = Inotify()
            except OSError:
                self._broken = True
                return None
        try:
            return self._inotify.add_watch(folder, _MASK)
        except OSError:
            return None

    def forget(self, key: K) -> None:
        self._polled.pop(key, None)
        wd = self._wds.pop(key, None)
        if wd is not None:
            self._keys.pop(wd, None)
            if self._inotify is not None:
                self._inotify.rm_watch(wd)

    def retain(self, keep: Callable[[K], bool]) -> None:
        for key in [k for k in list(self._wds) + list(self._polled) if not keep(k)]:
            self.forget(key)

    def changed(self) -> List[K]:
        """The keys whose file changed since the last call (each once)."""
        out: Dict[K, None] = {}
        if self._inotify is not None:
            for wd, mask, name in self._inotify.events():
                if mask & IN_Q_OVERFLOW:
                    out.update((k, None) for k in self._wds)
                    continue
                hit = self._keys.get(wd)
                if hit is None:
                    continue
                if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                    # the folder went (container removed): nothing left to follow
                    self._keys.pop(wd, None)
                    self._wds.pop(hit[0], None)
                elif name == hit[1]:
                    out[hit[0]] = None
        for key, (folder, file, sig) in list(self._polled.items()):
            if self.signature(folder, file) != sig:
                out[key] = None
        return list(out)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        self._keys.clear()
        self._wds.clear()
        self._polled.clear()
