"""The exposition's series budget: metric groups turned off, and past `max_series` the
least-used cgroups folded into one `id="_other"` series per family and label set
(`Fold.apply`), whose counters stay monotone (`carry_counters`) and whose members change
as little as they can (`choose_kept`). Reads no host file.
"""

from __future__ import annotations

import functools
import operator
from typing import (TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence,
                    Set, Tuple)

from cgstat.contract import fields

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import CgroupRecord

OTHER = "_other"
_OTHER_PREFIX = ('{id="%s",name="%s"' % (OTHER, OTHER)).encode()
_FAMILIES = fields.FAMILIES
_INDEX = {family.name: i for i, family in enumerate(_FAMILIES)}
_COUNTERS = frozenset(i for i, family in enumerate(_FAMILIES) if family.kind == "counter")
# info series are not summed, nor one process's (a folded container's processes have none)
_NOT_SUMMED = frozenset(i for i, family in enumerate(_FAMILIES) if family.kind == "info" or family.group == "procs")
_LAST_SEEN = _INDEX["container_last_seen"]
_FOLDED_GAUGE = _INDEX["cgstat_folded_cgroups"]
_ALL = range(len(_FAMILIES))
_CGROUP_SCOPE = tuple(i for i, family in enumerate(_FAMILIES) if family.scope == "cgroup")

_Key = Tuple[int, bytes]  # (family, the labels after the workload's: b',device="/dev/vda"} ')


def groups_off(metrics: Optional[Iterable[str]], disable: Optional[Iterable[str]]) -> FrozenSet[str]:
    """The groups turned off by `--metrics` (only these on; `+GROUP`: the default groups and
    this one, for the opt-in groups, fields.OPT_IN_GROUPS) and `--disable-metrics`;
    ValueError names an unknown group."""
    known = set(fields.METRIC_GROUPS)
    plus = [g[1:] for g in (metrics or ()) if g.startswith("+")]
    only = [g for g in (metrics or ()) if not g.startswith("+")]
    chosen = only + plus + [g for g in (disable or ())]
    unknown = [g for g in chosen if g not in known]
    if unknown:
        raise ValueError("unknown metric group %s (groups: %s)" % (", ".join(repr(g) for g in unknown),
                                                                   ", ".join(fields.METRIC_GROUPS)))
    on = set(only) if only else set(known) - set(fields.OPT_IN_GROUPS)
    on |= set(plus)
    on -= set(disable or ())
    return frozenset(known - on)


class SeriesBudget:
    """What an exporter keeps from tick to tick: the groups off, the budget, which cgroups
    had their own series, and _other's carried counters. `say(message)`: told once when
    folding first starts."""

    def __init__(self, max_series: int = 0, off: FrozenSet[str] = frozenset(),
                 say: Callable[[str], None] = lambda message: None):
        self.max_series = max_series  # 0: no budget
        self.off = off
        self.say = say
        self.dropped = tuple(i for i, family in enumerate(_FAMILIES) if family.group in off)
        # the cgroup families summed into _other's series
        self.summed = tuple(i for i in _CGROUP_SCOPE if i not in _NOT_SUMMED and i not in self.dropped)
        self.kept: Set[str] = set()  # cgroups with their own series last tick
        self.folded = NO_FOLDED  # folded cgroups' counters, last tick
        self.last_keys: FrozenSet[_Key] = frozenset()  # their label sets
        self.rests: Dict[bytes, bytes] = {}  # a folded series' braces -> its labels after the workload's
        self.offsets: Dict[_Key, Any] = {}  # counters carried for cgroups gone from _other
        self.told = False
        self.other_series = 0  # _other's series last tick
        self.last_series: Optional[int] = None  # the exposition's series last tick

    @property
    def active(self) -> bool:
        return self.max_series > 0

    def tick(self) -> Fold:
        """The fold of one tick: decided on its first render, reused by the others."""
        fold = Fold(self)
        # where each cgroup's series are is noted only near the budget (a render that finds
        # itself past it without is made again)
        fold.spans = self.active and (self.last_series is None or self.last_series > 0.9 * self.max_series
                                      or bool(self.folded.paths) or bool(self.offsets))
        return fold


# A render (outputs/prometheus/exposition.py) gives each tick's per-family pieces and where
# each cgroup's begin; `Fold.apply` takes out the turned-off families and the folded
# cgroups' series, and adds _other's: the sum of the folded series, label set by label set
# (a block device's, an interface's, a memory event's). Identity families (info series) are
# not summed; container_last_seen is the latest folded one's. The sums are made a family at
# a time, not a series at a time: the folded records' pieces are sliced out in runs, each
# brace's labels after the workload's are looked up (learnt once: the braces are the same
# objects from tick to tick, prometheus/labels.py's LabelCache) and the values read back in
# one call; a tick that folds the same cgroups as the last, with no counter lower, compares
# their counters a family at a time too.
class Fold:
    """One tick's fold (its text and its OpenMetrics render make the same one)."""

    def __init__(self, budget: SeriesBudget):
        self.budget = budget
        self.decided = False
        self.folded_at: FrozenSet[int] = frozenset()  # the folded records, by position
        self.other: List[Tuple[int, bytes, Any, Optional[int]]] = []  # (family, brace, value, millis)
        self.count = 0  # cgroups folded
        self.spans = True  # the render notes where each cgroup's pieces are

    def apply(self, out: List[List[bytes]], starts: Sequence[Sequence[int]], ends: Sequence[Sequence[int]],
              records: Sequence[CgroupRecord], bases: Sequence[str], millis: Sequence[Optional[int]],
              value_text: Callable[[Any], Optional[bytes]], stamp: Callable[[Optional[int]], bytes]) -> bool:
        """Turn `out` (the render's pieces by family) into the budget's: `starts[i]` and
        `ends[i]` the lengths of every family's pieces before and after cgroup record i
        was rendered (without spans: `ends` the lengths after the last), `bases` their
        base labels, `millis` their times. True: render again, with spans."""
        budget = self.budget
        if budget.active:
            if not self.decided and not self.spans:
                after = ends[0] if ends else [0] * len(out)
                cgroup = set(_CGROUP_SCOPE)
                series = 1 + sum(len(out[f]) - (3 * after[f] // 4 if f in cgroup else 0)
                                 for f in _ALL if f not in budget.dropped)
                if series > budget.max_series:
                    return True
                budget.last_series = series
                budget.kept = set()  # (no cgroup is folded: none was last tick either)
                self.decided = True
            if not self.decided:
                self._decide(out, starts, ends, records, bases, millis)
            if self.folded_at:
                self._take_out(out, starts, ends)
            for family, brace, value, ms in self.other:
                text = value_text(value)
                if text is not None:
                    out[family] += (_FAMILIES[family].name.encode(), brace, text, stamp(ms))
            out[_FOLDED_GAUGE].append(b"%s %d\n" % (_FAMILIES[_FOLDED_GAUGE].name.encode(), self.count))
        for family in budget.dropped:
            out[family] = []
        return False

    def _decide(self, out: List[List[bytes]], starts: Sequence[Sequence[int]], ends: Sequence[Sequence[int]],
                records: Sequence[CgroupRecord], bases: Sequence[str], millis: Sequence[Optional[int]]) -> None:
        budget = self.budget
        self.decided = True
        dropped = budget.dropped
        n = len(records)
        # a cgroup's series are four pieces each, in cgroup families only
        counts = [(sum(ends[i]) - sum(starts[i]) - sum(ends[i][f] - starts[i][f] for f in dropped)) // 4
                  for i in range(n)]
        total = sum(map(len, out)) - sum(len(out[f]) for f in dropped)
        # every other line is one piece; +1: the folded gauge
        fixed = total - 4 * sum(counts) + 1
        paths = [str(r.get("cgroup")) for r in records]
        budget.last_series = fixed + sum(counts)
        if fixed + sum(counts) <= budget.max_series and not budget.folded.paths and not budget.offsets:
            budget.kept = set(paths)
            return
        kept, folded, used = choose_kept(paths, counts, [record_usage(r) for r in records], budget.kept,
                                    budget.max_series - fixed, budget.other_series)
        # _other's own series: the label sets of the folded ones and the carried ones (at
        # most those carried and those folded last tick)
        cuts: Dict[int, int] = {}
        folded.sort()
        sums, now = self._sums(out, starts, ends, bases, folded, cuts)
        keys = set(sums) | set(budget.offsets) | budget.last_keys
        moved = False
        while kept and fixed + used + len(keys) > budget.max_series:
            i = kept.pop()
            used -= counts[i]
            folded.append(i)
            keys.update(self._keys(out, starts, ends, bases, [i], cuts))
            moved = True
        if moved:
            folded.sort()
            sums, now = self._sums(out, starts, ends, bases, folded, cuts)
        self.folded_at = frozenset(folded)
        self.count = len(folded)
        # counters: carry what left _other (gone, given its own series, or made again lower)
        now = now._replace(paths=tuple(paths[i] for i in folded))
        offsets = budget.offsets
        before = budget.folded
        if not before.same_as(now):
            carry_counters(offsets, before.by_path(), now.by_path())
        budget.folded = now
        budget.last_keys = now.keys()
        budget.kept = {paths[i] for i in kept}
        keys = set(sums) | set(offsets)
        budget.other_series = len(keys)
        latest = max((ms for ms in (millis[i] for i in folded) if ms is not None), default=None)
        other = []
        for key in sorted(keys):
            family, rest = key
            value = sums.get(key)
            if family in _COUNTERS:
                value = (value or 0) + offsets.get(key, 0)
            other.append((family, _OTHER_PREFIX + rest, value, None if family == _LAST_SEEN else latest))
        self.other = other
        if folded and not budget.told:
            budget.told = True
            budget.say("%d cgroups' series past --max-series %d: the least used are folded into id=\"%s\" "
                       "(cgstat_folded_cgroups says how many)" % (len(folded), budget.max_series, OTHER))

    def _cut(self, bases: Sequence[str], i: int, cuts: Dict[int, int]) -> int:
        """Where record i's labels after its workload's begin in its braces (b'{' + base)."""
        cut = cuts.get(i)
        if cut is None:
            cut = cuts[i] = len(("{" + bases[i]).encode("utf-8", "backslashreplace"))
        return cut

    def _rests(self, pieces: List[bytes], rows: Iterable[Tuple[int, int, int]]) -> None:
        """Learn the labels after the workload's of the braces in `rows` ((first, end, cut))."""
        rests = self.budget.rests
        for a, b, cut in rows:
            for brace in pieces[a + 1:b:4]:
                if brace not in rests:
                    rests[brace] = brace[cut:]

    def _keys(self, out: List[List[bytes]], starts: Sequence[Sequence[int]], ends: Sequence[Sequence[int]],
              bases: Sequence[str], chosen: Sequence[int], cuts: Dict[int, int]) -> Set[_Key]:
        """The label sets (keys of _other's series) of the records `chosen`."""
        keys: Set[_Key] = set()
        rests = self.budget.rests
        for family in self.budget.summed:
            pieces = out[family]
            rows = [(starts[i][family], ends[i][family], i) for i in chosen]
            rows = [(a, b, i) for a, b, i in rows if a != b]
            if not rows:
                continue
            braces = [brace for a, b, _ in rows for brace in pieces[a + 1:b:4]]
            try:
                found = set(map(rests.__getitem__, braces))
            except KeyError:
                self._rests(pieces, [(a, b, self._cut(bases, i, cuts)) for a, b, i in rows])
                found = set(map(rests.__getitem__, braces))
            keys.update((family, rest) for rest in found)
        return keys

    def _sums(self, out: List[List[bytes]], starts: Sequence[Sequence[int]], ends: Sequence[Sequence[int]],
              bases: Sequence[str], folded: Sequence[int], cuts: Dict[int, int]) -> Tuple[Dict[_Key, Any], Folded]:
        """The sums of the folded records' series by label set, and their counters. A family
        at a time: its folded pieces are sliced out in runs of records, their labels looked
        up (the braces are the same objects tick after tick, see LabelCache) and their
        values read back all at once."""
        runs: List[Tuple[int, int]] = []
        for i in folded:
            if runs and runs[-1][1] == i - 1:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        rests = self.budget.rests
        seen = 0
        sums: Dict[_Key, Any] = {}
        counters: List[Tuple[int, List[bytes], List[Any]]] = []
        for family in self.budget.summed:
            pieces = out[family]
            segment: List[bytes] = []
            for a, b in runs:
                first, last = starts[a][family], ends[b][family]
                if first != last:
                    segment += pieces[first:last]
            if not segment:
                continue
            braces = segment[1::4]
            seen += len(braces)
            try:
                keys = list(map(rests.__getitem__, braces))
            except KeyError:
                rows = [(starts[i][family], ends[i][family], self._cut(bases, i, cuts)) for i in folded]
                self._rests(pieces, [(a, b, cut) for a, b, cut in rows if a != b])
                keys = list(map(rests.__getitem__, braces))
            values = _numbers(segment[2::4])
            if family == _LAST_SEEN:
                for rest, value in zip(keys, values):
                    key = (family, rest)
                    sums[key] = max(sums.get(key, value), value)
                continue
            if family in _COUNTERS:
                counters.append((family, keys, values))
            first_key = keys[0]
            if keys.count(first_key) == len(keys):  # one label set (most families): summed in one go
                sums[(family, first_key)] = functools.reduce(operator.add, values, 0)
                continue
            for rest, value in zip(keys, values):
                key = (family, rest)
                sums[key] = sums.get(key, 0) + value
        if len(rests) > 2 * seen + 1024:
            rests.clear()  # mostly the braces of workloads gone or given their own series: learnt again
        return sums, Folded((), tuple(counters), tuple((starts[i], ends[i]) for i in folded))

    def _take_out(self, out: List[List[bytes]], starts: Sequence[Sequence[int]], ends: Sequence[Sequence[int]]) -> None:
        """Leave only the kept records' pieces in the cgroup families (runs of them, sliced)."""
        n = len(starts)
        runs: List[Tuple[int, int]] = []
        i = 0
        while i < n:
            if i in self.folded_at:
                i += 1
                continue
            j = i
            while j < n and j not in self.folded_at:
                j += 1
            runs.append((i, j - 1))
            i = j
        if not n:
            return
        for family in _CGROUP_SCOPE:
            first, last = starts[0][family], ends[n - 1][family]
            if first == last:
                continue
            pieces = out[family]
            kept = pieces[:first]
            for a, b in runs:
                kept += pieces[starts[a][family]:ends[b][family]]
            kept += pieces[last:]
            out[family] = kept


class Folded(NamedTuple):
    """The counters of one tick's folded records: what _other must not lose when one leaves.

    `counters`: (family, each series' labels after the workload's, their values) of every
    counter family, the folded records' series one after the other in `paths`' order;
    `rows`: where each record's pieces began and ended in each family (render's spans)."""

    paths: Tuple[str, ...]
    counters: Tuple[Tuple[int, List[bytes], List[Any]], ...]
    rows: Tuple[Tuple[Sequence[int], Sequence[int]], ...]

    def same_as(self, now: Folded) -> bool:
        """The same records folded, the same series, no counter lower: nothing to carry
        (compared a family at a time)."""
        if self.paths != now.paths or len(self.counters) != len(now.counters):
            return False
        for (family, keys, values), (family_now, keys_now, values_now) in zip(self.counters, now.counters):
            if family != family_now or keys != keys_now or any(map(operator.lt, values_now, values)):
                return False
        return True

    def by_path(self) -> Dict[str, Dict[_Key, Any]]:
        """{path: {(family, labels): counter}}."""
        out: Dict[str, Dict[_Key, Any]] = {path: {} for path in self.paths}
        for family, keys, values in self.counters:
            at = 0
            for path, (first, end) in zip(self.paths, self.rows):
                mine = out[path]
                length = (end[family] - first[family]) // 4
                for j in range(at, at + length):
                    mine[(family, keys[j])] = values[j]
                at += length
        return out

    def keys(self) -> FrozenSet[_Key]:
        return frozenset((family, rest) for family, keys, _ in self.counters for rest in set(keys))


NO_FOLDED = Folded((), (), ())


def _numbers(texts: List[bytes]) -> List[Any]:
    """Sample values read back, as they were written: an int's text as an int (the sum is
    written as one), a float's (repr: always a '.', an 'e', nan or inf) as a float."""
    try:
        return list(map(int, texts))
    except ValueError:
        pass
    if not any(map(bytes.isdigit, texts)):  # a family of floats
        return list(map(float, texts))
    return [int(text) if text.lstrip(b"-").isdigit() else float(text) for text in texts]


# Which cgroups keep their own series: those that had them last tick, while they fit; a
# freed place goes to the busiest folded or new cgroup (CPU, then working set), so a
# series does not flap in and out of _other from tick to tick.
def choose_kept(paths: Sequence[str], counts: Sequence[int], usages: Sequence[Tuple[float, float]], kept_before: Set[str],
           room: int, other_before: int) -> Tuple[List[int], List[int], int]:
    """Which cgroups keep their own series (the rules of the budget, for /metrics and the
    OTLP push alike): those that had them last tick first, then the busiest (`usages`: CPU,
    then working set), while their `counts` fit in `room` less _other's own series (last
    tick's count, else one cgroup's worth). (kept, folded, series kept), by position; kept
    from the most to the least used."""
    order = sorted(range(len(paths)), key=lambda i: (paths[i] in kept_before, usages[i]), reverse=True)
    room -= other_before or max(counts, default=0)
    kept: List[int] = []
    folded: List[int] = []
    used = 0
    for i in order:
        if used + counts[i] <= room:
            kept.append(i)
            used += counts[i]
        else:
            folded.append(i)
    return kept, folded, used


# A counter of _other stays monotone whatever comes and goes: a cgroup that leaves _other
# (it died, or got its own series back) takes its counter with it, so its last folded
# value is carried in an offset that _other keeps from then on (as Prometheus' own
# `increase()` sees a counter that is gone: what it had counted stays counted). A cgroup
# that comes in adds its whole counter, an increase. A cgroup path whose counter went
# down (removed and made again) is the same: its old value is carried.
def carry_counters(offsets: Dict[Any, Any], before: Dict[str, Dict[Any, Any]], now: Dict[str, Dict[Any, Any]]) -> None:
    """Add to `offsets` the counters that left _other since last tick (`before`, `now`:
    {cgroup: {series: counter}} of the folded ones): a cgroup gone or given its own series,
    a series gone, a counter lower (the cgroup made again). What it had counted stays counted."""
    for path, counters in before.items():
        after = now.get(path)
        if after is not None and list(after) == list(counters) and all(map(operator.le, counters.values(),
                                                                            after.values())):
            continue  # the same series, none lower (most cgroups, most ticks): compared in one go
        for key, value in counters.items():
            if after is None or key not in after or after[key] < value:
                offsets[key] = offsets.get(key, 0) + value


def record_usage(record: Any) -> Tuple[float, float]:
    """How much a cgroup record used: CPU percent, then working set (0 for unknown)."""
    cpu: Any = record.get("cpu")
    memory: Any = record.get("memory")
    percent = cpu.get("percent") if isinstance(cpu, dict) else None
    working = memory.get("working_set_bytes") if isinstance(memory, dict) else None
    return (percent if isinstance(percent, (int, float)) else 0.0,
            working if isinstance(working, (int, float)) else 0.0)
