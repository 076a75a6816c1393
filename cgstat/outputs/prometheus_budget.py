"""The exposition's series budget: metric groups turned off, and past `max_series` the
least-used cgroups folded into one `id="_other"` series per family and label set.

A render (outputs/prometheus.py) gives each tick's per-family pieces and where each
cgroup's begin; `Fold.apply` takes out the turned-off families and the folded cgroups'
series, and adds _other's: the sum of the folded series, label set by label set (a
block device's, an interface's, a memory event's). Identity families (info series) are
not summed; container_last_seen is the latest folded one's.

A counter of _other stays monotone whatever comes and goes: a cgroup that leaves _other
(it died, or got its own series back) takes its counter with it, so its last folded
value is carried in an offset that _other keeps from then on (as Prometheus' own
`increase()` sees a counter that is gone: what it had counted stays counted). A cgroup
that comes in adds its whole counter, an increase. A cgroup path whose counter went
down (removed and made again) is the same: its old value is carried.

Which cgroups keep their own series: those that had them last tick, while they fit; a
freed place goes to the busiest folded or new cgroup (CPU, then working set), so a
series does not flap in and out of _other from tick to tick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from cgstat import fields

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.records import CgroupRecord

OTHER = "_other"
_OTHER_PREFIX = ('{id="%s",name="%s"' % (OTHER, OTHER)).encode()
_FAMILIES = fields.FAMILIES
_INDEX = {family.name: i for i, family in enumerate(_FAMILIES)}
_COUNTERS = frozenset(i for i, family in enumerate(_FAMILIES) if family.kind == "counter")
_NOT_SUMMED = frozenset(i for i, family in enumerate(_FAMILIES) if family.kind == "info")
_LAST_SEEN = _INDEX["container_last_seen"]
_FOLDED_GAUGE = _INDEX["cgstat_folded_cgroups"]
_ALL = range(len(_FAMILIES))
_CGROUP_SCOPE = tuple(i for i, family in enumerate(_FAMILIES) if family.scope == "cgroup")

_Key = Tuple[int, bytes]  # (family, the labels after the workload's: b',device="/dev/vda"} ')


def groups_off(metrics: Optional[Iterable[str]], disable: Optional[Iterable[str]]) -> FrozenSet[str]:
    """The groups turned off by `--metrics` (only these on) and `--disable-metrics`;
    ValueError names an unknown group."""
    known = set(fields.METRIC_GROUPS)
    chosen = [g for g in (metrics or ())] + [g for g in (disable or ())]
    unknown = [g for g in chosen if g not in known]
    if unknown:
        raise ValueError("unknown metric group %s (groups: %s)" % (", ".join(repr(g) for g in unknown),
                                                                   ", ".join(fields.METRIC_GROUPS)))
    on = set(metrics) if metrics else set(known)
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
        self.kept: Set[str] = set()  # cgroups with their own series last tick
        self.folded: Dict[str, Dict[_Key, Any]] = {}  # folded cgroups' counters, last tick
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
                                      or bool(self.folded) or bool(self.offsets))
        return fold


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
        if fixed + sum(counts) <= budget.max_series and not budget.folded and not budget.offsets:
            budget.kept = set(paths)
            return
        order = sorted(range(n), key=lambda i: (paths[i] in budget.kept, _usage(records[i])), reverse=True)
        # room for _other's own series: last tick's count, else one cgroup's worth (the loop
        # below makes sure)
        room = budget.max_series - fixed - (budget.other_series or max(counts, default=0))
        kept: List[int] = []
        folded: List[int] = []
        used = 0
        for i in order:
            if used + counts[i] <= room:
                kept.append(i)
                used += counts[i]
            else:
                folded.append(i)
        sums: Dict[_Key, Any] = {}
        mine: Dict[int, Dict[_Key, Any]] = {}
        for i in folded:
            mine[i] = self._add(out, starts[i], ends[i], bases[i], sums)
        # _other's own series: the label sets of the folded ones and the carried ones (at
        # most those carried and those folded last tick)
        keys = set(sums) | set(budget.offsets)
        for before in budget.folded.values():
            keys.update(before)
        while kept and fixed + used + len(keys) > budget.max_series:
            i = kept.pop()
            used -= counts[i]
            folded.append(i)
            mine[i] = self._add(out, starts[i], ends[i], bases[i], sums)
            keys.update(sums)
        self.folded_at = frozenset(folded)
        self.count = len(folded)
        # counters: carry what left _other (gone, given its own series, or made again lower)
        now = {paths[i]: mine[i] for i in folded}
        offsets = budget.offsets
        for path, before in budget.folded.items():
            after = now.get(path)
            for key, value in before.items():
                if after is None or key not in after or after[key] < value:
                    offsets[key] = offsets.get(key, 0) + value
        budget.folded = now
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

    def _add(self, out: List[List[bytes]], a_row: Sequence[int], b_row: Sequence[int], base: str,
             sums: Dict[_Key, Any]) -> Dict[_Key, Any]:
        """Add one folded record's series to `sums` (by label set); its counters."""
        cut = len(("{" + base).encode("utf-8", "backslashreplace"))
        counters: Dict[_Key, Any] = {}
        dropped = self.budget.dropped
        for family in [f for f, a, b in zip(_ALL, a_row, b_row) if a != b]:
            if family in _NOT_SUMMED or family in dropped:
                continue
            pieces = out[family]
            counter = family in _COUNTERS
            last_seen = family == _LAST_SEEN
            for j in range(a_row[family], b_row[family], 4):
                key = (family, pieces[j + 1][cut:])
                text = pieces[j + 2]
                value = int(text) if text.isdigit() else float(text)
                if last_seen:
                    sums[key] = max(sums.get(key, value), value)
                    continue
                sums[key] = sums.get(key, 0) + value
                if counter:
                    counters[key] = value
        return counters

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


def _usage(record: CgroupRecord) -> Tuple[float, float]:
    cpu: Any = record.get("cpu")
    memory: Any = record.get("memory")
    percent = cpu.get("percent") if isinstance(cpu, dict) else None
    working = memory.get("working_set_bytes") if isinstance(memory, dict) else None
    return (percent if isinstance(percent, (int, float)) else 0.0,
            working if isinstance(working, (int, float)) else 0.0)
