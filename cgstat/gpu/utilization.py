"""Per-process GPU utilization averaged over the time between two readings, from NVML's
samples (`nvmlDeviceGetProcessUtilization` / `nvmlDeviceGetProcessesUtilizationInfo` with
the newest timestamp seen before as lastSeen). Reads no file; the gateway makes the calls.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Container, Dict, List, NamedTuple, Optional, Sequence, Tuple, cast

MAX_PERIOD_US = 1_000_000  # nvidia-smi's longest documented sampling period
_STAMP = itemgetter(1)  # a sample's timeStamp
_Figures = Dict[int, Tuple[Any, Any, Any, Any]]  # pid -> (sm, mem, enc, dec); made once, not per cast


class UtilizationMark(NamedTuple):
    """What the next reading of one device averages from (µs of the Unix epoch)."""

    last_seen_us: int  # the newest sample timestamp seen: lastSeen of the next call
    called_us: int  # when the previous call was made: the interval starts there
    period_us: Optional[int]  # the driver's sampling period as last measured (None: not yet)

    @staticmethod
    def from_json(value: Any) -> Optional["UtilizationMark"]:
        if not isinstance(value, list) or len(value) != 3:
            return None
        last, called, period = value
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (last, called)):
            return None
        if period is not None and not (isinstance(period, int) and not isinstance(period, bool) and period > 0):
            return None
        return UtilizationMark(last, called, period)


def _figure(x: float) -> Any:
    """A percentage to one decimal; an int when whole (as NVML's own figures are)."""
    # four per busy process each tick: compares, not min/max calls (the same for any number)
    if x > 100.0:
        x = 100.0
    elif x < 0.0:
        x = 0.0
    v = round(x, 1)
    return int(v) if v.is_integer() else v


def _median(values: List[int]) -> int:
    values.sort()
    return values[len(values) // 2]


def trusted(samples: Sequence[Tuple[int, ...]], pids: Container[int], last_seen_us: int,
            now_us: int) -> List[Tuple[int, ...]]:
    """The samples worth believing, as nvtop keeps them (`extract_gpuinfo_nvidia.c`, its
    process-utilisation loop, after nvtop #110 met a driver answering 100 rows for 3
    processes, rows of PID 0 and timestamp 0, rows older than lastSeen and an smUtil of
    37100): the PID is one the process lists hold, every value is a percentage (<= 100),
    and the timestamp is newer than lastSeen. Also not ahead of the clock by more than
    the longest sampling period: one such row would move lastSeen ahead and leave every
    process at 0 % until the clock caught up."""
    high = now_us + MAX_PERIOD_US
    return [s for s in samples if last_seen_us < s[1] <= high and s[0] in pids
            and s[2] <= 100 and s[3] <= 100 and s[4] <= 100 and s[5] <= 100]


# The driver samples each busy process every sampling period (nvidia-smi documents 1/6 s to
# 1 s) into a ring buffer and hands back the samples newer than lastSeen; an idle period
# leaves no sample. So a process's use over an interval is the sum of its samples, each
# weighted by the period it stands for, divided by the interval: a GPU busy 30 % of the time
# reads 30 % whether the readings are 1 s or a cron minute apart, not whatever the last
# period happened to be. The period is the median gap between one process's consecutive
# samples (each sample is capped at it, so a burst after an idle stretch does not count the
# stretch); where no process has two samples (a driver that answers one sample per process,
# as NVML's reference describes), that one sample is the driver's own figure for the
# interval and is taken as it is. Past the buffer's depth the oldest samples are gone:
# docs/gpu.md says what that means for long intervals.
def average(samples: Sequence[Tuple[int, ...]], mark: UtilizationMark, now_us: int,
            pids: Container[int]) -> Tuple[Dict[int, Tuple[Any, Any, Any, Any]], UtilizationMark]:
    """pid -> (sm, mem, enc, dec) % over (mark.called_us, now_us], and the next mark.
    `samples`: (pid, timeStamp µs, sm, mem, enc, dec) as the driver returned them; only
    the `trusted` ones count, and only they move lastSeen (`pids`: the listed processes)."""
    samples = trusted(samples, pids, mark.last_seen_us, now_us)
    if mark.period_us is None:
        # one sample per process (a driver answering only its newest, or a first reading):
        # no gap to measure a period from, each sample is the driver's figure as it is
        figures = cast(_Figures, {s[0]: s[2:] for s in samples})  # a 6-tuple's last 4
        if len(figures) == len(samples):
            top = max(mark.last_seen_us, max(map(_STAMP, samples), default=mark.last_seen_us))
            return figures, UtilizationMark(top, now_us, None)
    # Run for every busy process of every GPU each tick: plain loops, locals and no
    # per-sample calls (a `max` or a lambda per sample cost more than the arithmetic).
    by_pid: Dict[int, List[Tuple[int, ...]]] = {}
    top = mark.last_seen_us
    for s in samples:
        rows = by_pid.get(s[0])
        if rows is None:
            by_pid[s[0]] = [s]
        else:
            rows.append(s)
        if s[1] > top:
            top = s[1]
    gaps: List[int] = []
    for rows in by_pid.values():
        if len(rows) > 1:
            rows.sort(key=_STAMP)
            gaps.extend(b[1] - a[1] for a, b in zip(rows, rows[1:]) if b[1] > a[1])
    period = min(_median(gaps), MAX_PERIOD_US) if gaps else mark.period_us
    out: Dict[int, Tuple[Any, Any, Any, Any]] = {}
    if period is None:
        # one sample per process and no period known: the driver's figure for the interval
        for pid, rows in by_pid.items():
            newest = rows[0] if len(rows) == 1 else max(rows, key=_STAMP)
            out[pid] = (newest[2], newest[3], newest[4], newest[5])
        return out, UtilizationMark(top, now_us, None)
    start = mark.called_us
    last_seen = mark.last_seen_us
    weighted: List[Tuple[int, float, float, float, float]] = []
    for pid, rows in by_pid.items():
        sm = mem = enc = dec = 0.0
        prev = last_seen
        for r in rows:
            ts = r[1]
            gap = ts - prev
            w = period if gap <= 0 or gap >= period else gap  # the gap, capped at the period; none: one period
            prev = ts
            if ts - w < start:
                start = ts - w  # a sample from before the previous call, first served now
            sm += r[2] * w
            mem += r[3] * w
            enc += r[4] * w
            dec += r[5] * w
        weighted.append((pid, sm, mem, enc, dec))
    span = max(now_us - start, period)
    for pid, sm, mem, enc, dec in weighted:
        # a zero sum (most processes use no encoder or decoder) is 0 without the rounding
        out[pid] = (_figure(sm / span) if sm else 0, _figure(mem / span) if mem else 0,
                    _figure(enc / span) if enc else 0, _figure(dec / span) if dec else 0)
    return out, UtilizationMark(top, now_us, period)
