"""What the descriptor cache (kernel/handles.py) keeps as a parsed value instead of a
descriptor: slow files by name, `Derived` and `Frozen` keys, each declared by the
controller module that reads it (kernel/controllers/). Reads no files.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Set, Tuple, Union


# - A slow file, by its file name: a value only a write changes (limits, protections,
#   weights), and a write shows as IN_MODIFY on a watched folder; v2 event counters the
#   kernel notifies on every change (cgroup_file_notify: "a value change in this file
#   generates a file modified event", cgroup-v2.rst); the effective cpusets, which a
#   parent's write or CPU hotplug changes without an event on the file, kept until the
#   folder's rescan (a minute at most).
# - `Derived`: one value made from several slow files of one folder, kept as one (one lookup
#   a tick, not one per file); a write to any file it is made from drops it.
# - `Frozen`: a counter's value kept while the cgroup's state keeps it from changing
#   (pids.events and pids.peak with no task, v1 memory.failcnt with no limit), which v1 does
#   not notify.
# A Derived or Frozen key is an object the reader and the cache share (no name to spell the
# same in two modules), hashed by identity: the readers look one up every tick.
class Derived:
    """The key of a value made from the slow files `files` of one folder."""

    __slots__ = ("name", "files")

    def __init__(self, name: str, files: Tuple[str, ...]):
        self.name = name
        self.files = files

    def __repr__(self) -> str:
        return "Derived(%r)" % (self.name,)


class Frozen:
    """The key of counter file `file`'s value while the cgroup's state holds it still."""

    __slots__ = ("file",)

    def __init__(self, file: str):
        self.file = file

    def __repr__(self) -> str:
        return "Frozen(%r)" % (self.file,)


class Registry:
    """Every key the controllers declared: `slow` holds the slow file names and every
    Derived and Frozen key (what handles.KeptFiles keeps as a value), `derived_from` the
    Derived keys made from each slow file."""

    __slots__ = ("slow", "derived_from")

    def __init__(self) -> None:
        self.slow: Set[Any] = set()
        self.derived_from: Dict[str, Tuple[Derived, ...]] = {}

    def slow_files(self, *names: str) -> Tuple[str, ...]:
        self.slow.update(names)
        return names

    def derived(self, name: str, files: Iterable[str]) -> Derived:
        files = tuple(files)
        not_slow = [f for f in files if f not in self.slow]
        if not_slow:  # a value kept past a write nothing would drop it for
            raise ValueError("%s: not slow files: %s" % (name, ", ".join(not_slow)))
        key = Derived(name, files)
        self.slow.add(key)
        for f in files:
            self.derived_from[f] = self.derived_from.get(f, ()) + (key,)
        return key

    def frozen(self, file: str) -> Frozen:
        key = Frozen(file)
        self.slow.add(key)
        return key

    def derived_keys(self) -> List[Derived]:
        return [k for k in self.slow if isinstance(k, Derived)]

    def frozen_keys(self) -> List[Frozen]:
        return [k for k in self.slow if isinstance(k, Frozen)]

    def slow_file_names(self) -> Set[str]:
        return {k for k in self.slow if isinstance(k, str)}


Key = Union[str, Derived, Frozen]  # what KeptFiles keeps per folder: file names and these

# The one registry of the process: its keys are declared once, at import, by the code that
# reads the files, and never change after: the controller modules register theirs when
# imported, and kernel/cgroups.py imports them all before anything is read.
KEYS = Registry()
SLOW = KEYS.slow  # the set handles.KeptFiles and the readers test membership in
