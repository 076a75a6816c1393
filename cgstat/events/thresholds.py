"""Every threshold of every event rule, with its default (docs/events.md)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from cgstat.events.gpuheld import DEFAULT_MEMORY_BYTES, DEFAULT_WINDOW_S


class Thresholds:
    """Every threshold of every rule, with its default (docs/events.md).

    window_s: the window sustained conditions must hold over (`--events-window`).
    coverage: the share of the window the history must span before a sustained rule judges.
    near_limit_percent / near_limit_clear_percent: working set vs the memory limit
        (raise above, resolve below: hysteresis so a value hovering at the line raises once).
    growth_min_bytes_per_second, growth_min_r2, growth_min_samples: a least-squares line
        through the working set over the window must climb at least this fast and fit this
        well (R², 1 = a straight line) over at least this many samples; it resolves when the
        slope falls below half the minimum or the fit below growth_clear_r2.
    throttled_fraction / throttled_clear_fraction: throttled periods / periods over the window.
    throttled_min_periods: CFS periods the window must hold (an idle quota'd cgroup has few).
    sustained_share: the share of the window's time (tick to tick) the throttling itself must
        be seen in (each tick's own throttled fraction >= throttled_fraction), so a burst
        at the end of an idle window (idle time has few periods) does not count.
    young_min_s: a cgroup born while the run watched and younger than the window has
        cpu_throttled judged over its whole life once that spans this long (a job throttled
        for most of a 30 s life is said, though it never fills a 60 s window).
    cpu_at_limit_fraction: CPU counts as "at its limit" at >= this share of limit_cores.
    gpu_idle_sm_percent: SM % (summed over the container's GPUs, 100 = one GPU) at or under
        which a GPU counts as idle; gpu_busy_sm_percent ends such an episode.
    gpu_idle_memory_bytes / gpu_idle_window_s: a cgroup holding at least this much of a GPU's
        memory at or under gpu_idle_sm_percent for this long holds it idle (gpu_held_idle;
        `--gpu-idle-memory`, `--gpu-idle-window`).
    pids_quiet_s: further fork failures at a pids limit within this many seconds of the
        previous one belong to the same episode (no new event; the total comes with the
        resolved notice); default: the window.
    max_samples: cap on the history kept per cgroup (thinned, never truncated).
    """

    def __init__(self, window_s: float = 60.0, coverage: float = 0.9,
                 near_limit_percent: float = 90.0, near_limit_clear_percent: float = 85.0,
                 growth_min_bytes_per_second: float = 256 * 1024, growth_min_r2: float = 0.8,
                 growth_clear_r2: float = 0.5, growth_min_samples: int = 5,
                 throttled_fraction: float = 0.5, throttled_clear_fraction: float = 0.25,
                 throttled_min_periods: int = 5, sustained_share: float = 0.75, young_min_s: float = 10.0,
                 cpu_at_limit_fraction: float = 0.9,
                 gpu_idle_sm_percent: float = 5.0, gpu_busy_sm_percent: float = 20.0,
                 gpu_idle_memory_bytes: int = DEFAULT_MEMORY_BYTES, gpu_idle_window_s: float = DEFAULT_WINDOW_S,
                 pids_quiet_s: Optional[float] = None, max_samples: int = 1024):
        if not window_s > 0:
            raise ValueError("window_s must be > 0")
        self.window_s = float(window_s)
        self.coverage = coverage
        self.near_limit_percent = near_limit_percent
        self.near_limit_clear_percent = min(near_limit_clear_percent, near_limit_percent)
        self.growth_min_bytes_per_second = growth_min_bytes_per_second
        self.growth_min_r2 = growth_min_r2
        self.growth_clear_r2 = growth_clear_r2
        self.growth_min_samples = max(3, int(growth_min_samples))
        self.throttled_fraction = throttled_fraction
        self.throttled_clear_fraction = min(throttled_clear_fraction, throttled_fraction)
        self.throttled_min_periods = throttled_min_periods
        self.sustained_share = sustained_share
        self.young_min_s = float(young_min_s)
        self.cpu_at_limit_fraction = cpu_at_limit_fraction
        self.gpu_idle_sm_percent = gpu_idle_sm_percent
        self.gpu_busy_sm_percent = max(gpu_busy_sm_percent, gpu_idle_sm_percent)
        self.gpu_idle_memory_bytes = int(gpu_idle_memory_bytes)
        self.gpu_idle_window_s = float(gpu_idle_window_s)
        self.pids_quiet_s = self.window_s if pids_quiet_s is None else float(pids_quiet_s)
        self.max_samples = max(16, int(max_samples))

    def as_dict(self) -> Dict[str, Any]:
        return dict(vars(self))
