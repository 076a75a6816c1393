"""`cgstat top`: the run loop of the live table (cgstat/outputs/top_screen.py draws it): the warm-up,
the first screen after min(interval, 0.5 s), then a screen per slot of the one Schedule,
waiting for keys between them; plain tables every tick when stdout is no terminal."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from cgstat.outputs.jsonl import ReaderGone, SinkError, StdoutSink
from cgstat.outputs.top_screen import Model, Screen, View, ViewLog, plain_frame
from cgstat.events import EventDetector, Thresholds
from cgstat.pipeline.processes import Listing, ProcessWatcher, folder_of, listing_object
from cgstat.pipeline.schedule import Schedule

if TYPE_CHECKING:
    from cgstat.contract.types import Sampled
    from cgstat.pipeline.sampler import Sampler

FIRST_SCREEN_S = 0.5  # the warm-up before the first screen (at most one interval)
_KEY_POLL_S = 0.25  # longest wait for a key before the loop looks at signals again


class _KeyedSchedule(Schedule):
    """The Schedule whose sleeps wait for keys (and resizes) instead of sleeping blind."""

    def __init__(self, interval_s: float, warner: Any, wait_key: Callable[[float], None]):
        super().__init__(interval_s, warner)
        self._wait_key = wait_key

    def sleep_until(self, deadline: float) -> None:
        if self.stop:
            return
        with self.asleep():
            while not self.stop:
                if self.take_reopen():  # SIGHUP: the terminal hung up
                    self.stop = True
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wait_key(min(remaining, _KEY_POLL_S))


class _Judged:
    """The model fed with each tick's records and the events judged on them."""

    def __init__(self, model: Model, detector: Optional[EventDetector], sampler: Optional[Sampler] = None):
        self.model = model
        self.detector = detector
        self.sampler = sampler  # its OOM kills of the tick (the kernel log, v2 counters read as they changed)

    def update(self, records: List[Sampled]) -> None:
        s = self.sampler
        events = (self.detector.observe(records, kills=s.kills if s else None, late=s.late_counts if s else None)
                  if self.detector is not None else [])
        self.model.update(records, events)


def top(sampler: Sampler, interval_s: float, sort: str, count: Optional[int],
        events_window_s: Optional[float]) -> int:
    """`cgstat top`: events judged over `events_window_s` (None: no events)."""
    if events_window_s is None:
        return run_top(sampler, interval_s, sort, False, count)
    return run_top(sampler, interval_s, sort, True, count, Thresholds(window_s=events_window_s))


def run_top(sampler: Sampler, interval_s: float, sort: str = "cpu", events: bool = True,
            count: Optional[int] = None, thresholds: Optional[Thresholds] = None) -> int:
    """`cgstat top`: the live table on a terminal, plain tables every tick on anything else.

    `sort`: one of outputs.top_screen.SORTS; ValueError otherwise. `events`: run an EventDetector
    (with `thresholds`) and mark the episodes. `count`: stop after that many screens (None:
    until q, Ctrl-C or SIGTERM). Returns the exit status (0).
    """
    model = Model(sort, sampler.host.hostname)
    judged = _Judged(model, EventDetector(thresholds) if events else None, sampler)
    if events:
        sampler.follow_kernel_log()  # OOM kills for the events shown under the table
        sampler.watch_memory_events()
    if count is not None and count < 1:
        return 0
    if os.isatty(1):
        try:
            screen = Screen(model, interval_s)  # imports curses: ImportError where _curses is missing
            screen.start()
        except Exception as exc:  # noqa: BLE001 (curses.error: no terminfo for TERM; _curses missing)
            sampler.warner.once("top-plain", "cannot drive the terminal (%s): printing tables instead" % (exc,))
        else:
            return _run_screen(sampler, judged, screen, interval_s, count)
    return _run_plain(sampler, judged, interval_s, count)


def _ticks(sampler: Sampler, schedule: Schedule, interval_s: float, count: Optional[int],
           show: Callable[[List[Sampled]], None]) -> None:
    """The warm-up, the first screen after min(interval, FIRST_SCREEN_S), then the Schedule."""
    sampler.warm_up()
    done = 0
    first = min(interval_s, FIRST_SCREEN_S)
    if first < interval_s:
        schedule.sleep_until(schedule.start + first)
        if schedule.stop:
            return
        show(sampler.tick())
        done = 1
        if count is not None and done >= count:
            return
    for _ in schedule.ticks(None if count is None else count - done):
        show(sampler.tick())


class _Focus:
    """The processes of the workload the screen has open (Enter), read at each tick (and at
    once when opened), CPU % from one read to the next (pipeline/processes.py)."""

    def __init__(self, sampler: Sampler, model: Model):
        self.sampler = sampler
        self.model = model
        self.records: List[Sampled] = []
        self.watcher: Optional[ProcessWatcher] = None
        self.cgroup: Optional[str] = None

    def keys(self, screen: Screen) -> None:
        """Enter opens the processes of the row at the top of the screen (scroll to bring the
        one wanted there); Esc, Backspace or b goes back to the workloads where they were."""
        saved = [View()]
        model = self.model

        def enter() -> None:
            rows = model.sorted_rows()
            if model.focus is None and rows:
                row = rows[min(screen.view.offset, len(rows) - 1)]
                saved[0], screen.view = screen.view, View()
                model.focus, model.focus_listing = (row.cgroup, row.cells[0]), None
                self.read()

        def back() -> None:
            if model.focus is not None:
                model.focus, model.focus_listing = None, None
                screen.view = saved[0]

        curses = screen.curses
        screen.extra_keys.update({key: enter for key in (10, 13, curses.KEY_ENTER)})
        screen.extra_keys.update({key: back for key in (27, 8, 127, curses.KEY_BACKSPACE, ord("b"))})

    def read(self) -> None:
        focus = self.model.focus
        if focus is None:
            self.watcher = self.cgroup = None
            return
        if self.watcher is None or self.cgroup != focus[0]:
            self.watcher, self.cgroup = ProcessWatcher(self.sampler.fs), focus[0]
        record = next((r for r in self.records if r.get("cgroup") == focus[0]), None)
        folder = folder_of(self.sampler.layout, dict(record)) if record is not None else None
        if folder is None:
            self.model.focus_listing = listing_object(Listing([], [], 0, False, {
                "source": "cgroup.procs", "error": "gone", "detail": "the workload is gone"}))
            return
        gpu = record.get("gpu") if record is not None else None
        self.watcher.begin_tick()
        self.model.focus_listing = listing_object(self.watcher.read(folder, gpu if isinstance(gpu, dict) else None))
        self.watcher.end_tick()


def _run_screen(sampler: Sampler, judged: _Judged, screen: Screen, interval_s: float,
                count: Optional[int]) -> int:
    warner = sampler.warner
    saved_stream, saved_stderr = warner.stream, sys.stderr

    def on_line(line: str) -> None:
        judged.model.status = line
        screen.draw()

    log = ViewLog(on_line)
    warner.stream = log
    sys.stderr = log

    def wait_key(timeout_s: float) -> None:
        screen.wait_key(timeout_s)
        if screen.quit:
            schedule.stop = True

    schedule = _KeyedSchedule(interval_s, warner, wait_key).install_signals()

    focus = _Focus(sampler, judged.model)
    focus.keys(screen)

    def show(records: List[Sampled]) -> None:
        judged.update(records)
        focus.records = records
        focus.read()
        screen.draw()

    try:
        screen.draw()  # "sampling..." at once
        _ticks(sampler, schedule, interval_s, count, show)
    finally:
        screen.stop()
        warner.stream, sys.stderr = saved_stream, saved_stderr
        # what was said while the screen was ours, now where it belongs
        out = saved_stream or saved_stderr
        try:
            if log.dropped:
                out.write("cgstat: %d earlier warnings not repeated\n" % log.dropped)
            for line in log.lines:
                out.write(line + "\n")
            out.flush()
        except (OSError, ValueError):
            pass
    return 0


def _run_plain(sampler: Sampler, judged: _Judged, interval_s: float, count: Optional[int]) -> int:
    sink = StdoutSink(sampler.warner.warn)
    schedule = Schedule(interval_s, sampler.warner).install_signals()
    shown = [0]

    def show(records: List[Sampled]) -> None:
        judged.update(records)
        text = plain_frame(judged.model, interval_s)
        if shown[0]:
            text = "\n" + text
        shown[0] += 1
        try:
            sink.write_bytes(text.encode("utf-8", "backslashreplace"))
        except SinkError as exc:
            sampler.warner.warn("sink", str(exc))

    try:
        _ticks(sampler, schedule, interval_s, count, show)
    except ReaderGone:
        return 0
    return 0
