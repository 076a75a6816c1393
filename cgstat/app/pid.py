"""`cgstat pid`: each PID's cgroup path(s) and container, one JSON object per PID."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from cgstat.outputs.jsonl import ReaderGone, StdoutSink

if TYPE_CHECKING:
    from cgstat.pipeline.sampler import Sampler


def run_pid(sampler: Sampler, pids: List[int]) -> int:
    """One JSON object per PID on stdout."""
    try:
        StdoutSink(sampler.warner.warn).write([sampler.namer.describe_pid(pid) for pid in pids])
    except ReaderGone:
        return 0
    return 0
