"""Reading one cgroup's files: each through the descriptor cache, every failure a Problem.

`FileReader` reads the files the controller modules next to it ask for (kernel/handles.py
keeps their descriptors); `key` and `scaled` turn a parsed table into record values.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, TypeVar

from cgstat.kernel.cachekeys import SLOW, Derived, Frozen
from cgstat.kernel.handles import MISSING, KeptFiles
from cgstat.kernel.hostfs import Gone, ReadError, read_text
from cgstat.kernel.sample import Problem
from cgstat.kernel.tree import Folder

T = TypeVar("T")
USER_HZ = 100  # cpuacct.stat is in USER_HZ ticks, 100 on every Linux ABI (see times(2))
NS = 1e9
US = 1e6


class FileReader:
    """Reads files of one cgroup through the descriptor cache, turning every failure into a
    Problem."""

    __slots__ = ("problems", "gone", "kept", "keeping")

    def __init__(self, problems: List[Problem], kept: KeptFiles):
        self.problems = problems
        self.gone = False
        self.kept = kept
        self.keeping = kept.keeping  # mount point -> keeps descriptors (kept.keeps() fills it)

    def get(self, folder: Optional[Folder], name: str, parser: Callable[[str], T]) -> Optional[T]:
        if folder is None:
            return None
        if name not in folder.files:
            self.problems.append(Problem(name, "missing", f"no {name} in {folder.hierarchy.name}:{folder.path}"))
            return None
        keeps = self.keeping.get(folder.hierarchy.mount_dir)
        if keeps is None:
            keeps = self.kept.keeps(folder.hierarchy.mount_dir)
        if name in SLOW:
            if keeps and folder.watched:
                # Most ticks: the kept value, in one lookup (what _uncached would find).
                known = self.kept.slow_value(folder, name)
                if known is not MISSING:
                    return known  # type: ignore[no-any-return,unused-ignore]
            return self._uncached(folder, name, parser, keeps)
        if not keeps:
            return self._uncached(folder, name, parser, keeps)
        # The common case, every tick for every file: one pread on a kept descriptor (and
        # no parse when the bytes are the last read's).
        try:
            return self.kept.read_parsed(folder, name, parser)
        except ReadError as exc:
            self._failed(name, exc)
            return None
        except UnicodeDecodeError:
            self.problems.append(Problem(name, "malformed", "not UTF-8 text"))
            return None
        except ValueError as exc:
            self.problems.append(Problem(name, "malformed", str(exc)))
            return None

    def opt(self, folder: Optional[Folder], name: str, parser: Callable[[str], T]) -> Optional[T]:
        """get() for a file some kernels (or configurations) don't have: absent, None and
        no problem reported."""
        if folder is None or name not in folder.files:
            return None
        return self.get(folder, name, parser)

    def counter(self, folder: Folder, kept_as: Frozen, parser: Callable[[str], Optional[int]],
                state: Any) -> Optional[int]:
        """Counter file `kept_as.file` (absent: None, no problem) that can't move while the
        cgroup stays in the state `state` names (None: it may move). The value read in a state is kept
        and served while the cgroup is found in that same state, read again when it is not.
        v1 raises no IN_MODIFY on these files, so they can't be slow files; this spares
        their read on most ticks."""
        name = kept_as.file
        if name not in folder.files:
            return None
        if not self.keeping.get(folder.hierarchy.mount_dir):
            return self.get(folder, name, parser)
        kept = self.kept
        if state is None:
            kept.modified(folder, kept_as)  # it may move now: what was kept is stale
            return self.get(folder, name, parser)
        known = kept.cached(folder, kept_as)
        if known is not MISSING and known[0] == state:
            return known[1]  # type: ignore[no-any-return,unused-ignore]
        kept.release(folder, name)  # read no more each tick: its slot goes to others
        value = self._uncached(folder, name, parser, False)
        if value is not None:
            kept.keep(folder, kept_as, (state, value))
        return value

    def derived(self, folder: Folder, kept_as: Derived, make: Callable[[], T]) -> T:
        """make(), a value made from slow files of `folder` only (`kept_as.files`),
        kept as one like a slow file's value while none of them is written, so that a tick
        looks it up once instead of once per file. Kept only when made without a problem:
        a file that fails is read, and reported, again next tick."""
        watched = folder.watched and bool(self.keeping.get(folder.hierarchy.mount_dir))
        if watched:
            known = self.kept.slow_value(folder, kept_as)
            if known is not MISSING:
                return known  # type: ignore[no-any-return,unused-ignore]
        before = len(self.problems)
        value = make()
        if watched and len(self.problems) == before:
            self.kept.keep(folder, kept_as, value)
        return value

    def _uncached(self, folder: Folder, name: str, parser: Callable[[str], T], keeps: bool) -> Optional[T]:
        """A slow file (its value kept while the folder is watched, read with
        open/read/close when due: it never holds a descriptor), or any file of a recorded
        tree (no descriptor kept: tests and users replace its files by rename)."""
        slow = keeps and name in SLOW
        if slow:
            known = self.kept.cached(folder, name)
            if known is not MISSING:
                return known  # type: ignore[no-any-return,unused-ignore]
        try:
            text = read_text(folder.local + "/" + name)
        except ReadError as exc:
            self._failed(name, exc)
            return None
        try:
            value = parser(text)
        except ValueError as exc:
            self.problems.append(Problem(name, "malformed", str(exc)))
            return None
        if slow:
            self.kept.keep(folder, name, value)
        return value

    def _failed(self, name: str, exc: ReadError) -> None:
        if isinstance(exc, Gone):
            self.gone = True
        self.problems.append(Problem(name, exc.code, exc.detail))


def key(table: Optional[Dict[str, Optional[int]]], key: str, reader: FileReader, source: str) -> Optional[int]:
    """A key the record needs; absent or unparsable is reported as malformed."""
    if table is None:
        return None
    if key not in table:
        reader.problems.append(Problem(source, "malformed", f"missing key {key!r}"))
        return None
    value = table[key]
    if value is None:
        reader.problems.append(Problem(source, "malformed", f"bad value for key {key!r}"))
    return value


def scaled(value: Optional[int], unit: float) -> Optional[float]:
    return None if value is None else value / unit
