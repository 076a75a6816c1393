"""`cgstat once`: one batch, for cron and scripts; with a state file, rates against the
previous run and the events two runs can judge."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional, Sequence

from cgstat.pipeline.sinks import ReaderGone, Sink
from cgstat.pipeline.schedule import Schedule

if TYPE_CHECKING:
    from cgstat.contract.types import JsonObject
    from cgstat.pipeline.sampler import Sampler


def once(sampler: Sampler, fmt: str, output: Optional[str], output_mode: int, state_path: Optional[str],
         window_s: float, events: bool = True) -> int:
    """`cgstat once`: the sink for `fmt` on `output` (stdout when None), then run_once."""
    from cgstat.outputs.formats import make_sink

    return run_once(sampler, make_sink(fmt, output, output_mode, sampler.warner.warn), state_path, window_s, events)


def run_once(sampler: Sampler, sink: Sink, state_path: Optional[str], window_s: float,
             events: bool = True) -> int:
    """One batch: rates against the saved state, or over a window of two samples.

    SIGTERM/SIGINT during the window end the run quietly (nothing written); during the
    write they let the batch finish, so a killed cron run never leaves half a line.
    """
    schedule = Schedule(window_s or 1.0, sampler.warner).install_signals()
    try:
        sink.open()
        if state_path:
            from cgstat.pipeline import state as statefile
            from cgstat.events import judge_runs, state_extras

            # Checked, locked and ready to be replaced before anything is printed.
            with statefile.StateFile(state_path) as state:
                previous, why = state.load(sampler.host.boot_id, sampler.clock.monotonic())
                if why:
                    sampler.warner.warn("state", why)
                # The kernel log since the last run of this boot (a first run starts at its
                # end; another boot's state: from this boot's first record).
                if events:
                    seq = state.kernel_log_seq
                    sampler.follow_kernel_log(seq if seq is not None else (-1 if state.other_boot else None), numbered=True)
                if not why:
                    sampler.restore_gpu_marks(state.gpu_marks)  # GPU use averaged since the last run
                records, current = sampler.render(sampler.collect(), previous)
                batch: Sequence[JsonObject] = records
                if events:
                    # every rule's judging of the two runs, from what the previous run
                    # kept and the kernel log since
                    batch = [*records, *judge_runs(state.extras if not why else {}, records, kills=sampler.kills,
                                                   xids=sampler.xids)]
                sink.write(batch)
                state.save(sampler.host.boot_id, sampler.fs.root, sampler.clock.monotonic(), current,
                           state_extras(records), sampler.kernel_log_seq, sampler.gpu_marks)
        else:
            if window_s > 0:
                sampler.warm_up()
                schedule.sleep_until(time.monotonic() + window_s)
                if schedule.stop:
                    return 0
            sink.write(sampler.records())  # each record to the output as it is made
    except ReaderGone:
        return 0
    finally:
        sink.close()
    return 0
