"""The run modes that read the flight recorder's store back: `replay` (one tick),
`dump` (a span, as JSON lines, a table, CSV or OpenMetrics) and `events` (a span's
events), each through the same sinks and views as the live run modes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, List, Optional, Pattern

import orjson

from cgstat.pipeline.sinks import ReaderGone, Sink
from cgstat.store.folder import StoreError
from cgstat.store.reader import StoreReader, Tick, say_time
from cgstat.store.times import parse_time

if TYPE_CHECKING:
    from cgstat.contract.types import JsonObject

Warn = Callable[[str, str], None]


def when(text: str, what: str, now: Optional[float] = None) -> float:
    """A time option's value as Unix seconds; StoreError (one line) when it is not one."""
    try:
        return parse_time(text, time.time() if now is None else now)
    except ValueError as exc:
        raise StoreError(f"{what}: {exc}") from None


def _matching(lines: List[str], match: Optional[Pattern[str]]) -> List[str]:
    """The lines about a cgroup the pattern matches (all of them without one)."""
    if match is None:
        return lines
    out = []
    for line in lines:
        cgroup = orjson.loads(line).get("cgroup")
        if isinstance(cgroup, str) and match.search(cgroup):
            out.append(line)
    return out


def _write_lines(sink: Sink, lines: List[str], raw: bool) -> None:
    """`raw`: the sink is the JSON-lines one, given the bytes as stored."""
    if not lines:
        return
    if raw:
        sink.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))  # type: ignore[attr-defined]
    else:
        sink.write([orjson.loads(line) for line in lines])


def history_sink(fmt: str, output: Optional[str], warn: Warn, output_mode: int = 0o600, utc: bool = False) -> Sink:
    """The sink of a view of the past: its table says when on every row (outputs/history_table.py)."""
    if fmt == "table":
        from cgstat.outputs.history_table import history_table_sink

        return history_table_sink(output, output_mode, warn, utc)
    from cgstat.outputs.formats import make_sink

    return make_sink(fmt, output, output_mode, warn)


def replay(store: str, at: str, match: Optional[Pattern[str]], warn: Warn, output: Optional[str] = None,
           fmt: str = "jsonl", utc: bool = False) -> int:
    """`cgstat replay --at TIME`: the tick at TIME, as stream wrote it (or as a table, CSV)."""
    wall_s = when(at, "--at")
    with StoreReader(store, warn) as reader:
        tick = reader.at(wall_s)
        sink = history_sink(fmt, output, warn, utc=utc)
        return _run(sink, lambda: _write_lines(sink, _matching(tick.lines, match), fmt == "jsonl"))


def span_ticks(reader: StoreReader, since: str, until: Optional[str]) -> Iterator[Tick]:
    """The ticks of --since/--until (until: now); StoreError saying what the store holds
    when there is none."""
    now = time.time()
    first = when(since, "--since", now)
    last = when(until, "--until", now) if until else now
    if last < first:
        raise StoreError(f"--until {say_time(last)} is before --since {say_time(first)}")
    found = False
    for tick in reader.ticks(first, last):
        found = True
        yield tick
    if not found:
        raise StoreError(f"no ticks from {say_time(first)} to {say_time(last)}: {reader.holds()}")


def dump(store: str, since: str, until: Optional[str], fmt: str, match: Optional[Pattern[str]], warn: Warn,
         output: Optional[str] = None, output_mode: int = 0o600, utc: bool = False) -> int:
    """`cgstat dump`: every tick of a span into the sink of `fmt` (openmetrics: one
    exposition with every sample stamped with its tick's time)."""
    with StoreReader(store, warn) as reader:
        ticks = span_ticks(reader, since, until)
        if fmt == "openmetrics":
            from cgstat.outputs.jsonl import FileSink, StdoutSink
            from cgstat.outputs.prometheus.dump import exposition

            om_sink = FileSink(output, output_mode, warn) if output else StdoutSink(warn)

            def write_om() -> None:
                for piece in exposition([orjson.loads(line) for line in _matching(t.lines, match)] for t in ticks):
                    om_sink.write_bytes(piece)
            return _run(om_sink, write_om)
        sink = history_sink(fmt, output, warn, output_mode, utc)

        def write_all() -> None:
            for tick in ticks:
                _write_lines(sink, _matching(tick.lines, match), fmt == "jsonl")
        return _run(sink, write_all)


def events(store: str, since: str, until: Optional[str], match: Optional[Pattern[str]], warn: Warn,
           fmt: str = "jsonl", output: Optional[str] = None, utc: bool = False) -> int:
    """`cgstat events --since 1h`: the events (and exit records) of a span, in order; as a
    table, the span's events in one table and its exit records in another."""
    with StoreReader(store, warn) as reader:
        ticks = span_ticks(reader, since, until)
        sink = history_sink(fmt, output, warn, utc=utc)
        kept: List[str] = []

        def write_all() -> None:
            for tick in ticks:
                lines = _matching([line for line in tick.lines if _is_event_or_exit(line)], match)
                if fmt == "table":
                    kept.extend(lines)  # one table for the span, its columns laid out over all rows
                else:
                    _write_lines(sink, lines, fmt == "jsonl")
            _write_lines(sink, kept, False)
        return _run(sink, write_all)


def _is_event_or_exit(line: str) -> bool:
    # a stored line is the stream's: `{"schema":1,"type":"...` (cheap test first)
    return ('"type":"event"' in line or '"type":"exit"' in line) and \
        orjson.loads(line).get("type") in ("event", "exit")


def _run(sink: Sink, job: Callable[[], None]) -> int:
    sink.open()
    try:
        job()
    except ReaderGone:
        return 0
    finally:
        sink.close()
    return 0


def records_of(ticks: Iterable[Tick]) -> Iterator[JsonObject]:
    for tick in ticks:
        for line in tick.lines:
            yield orjson.loads(line)


def top_at(store: str, at: str, sort: str, warn: Warn, match: Optional[Pattern[str]] = None) -> int:
    """`cgstat top --at TIME`: top's table of a past tick; left and right arrows step a
    tick back and forth, [ and ] a minute, q quits (h and l scroll the columns). Not on a
    terminal: that tick's table, printed once."""
    import os
    import sys

    from cgstat.outputs.top_screen import Model, Screen, plain_frame

    with StoreReader(store, warn) as reader:
        tick = reader.at(when(at, "--at"))
        model = Model(sort)

        def show(found: Tick) -> None:
            records = [orjson.loads(line) for line in _matching(found.lines, match)]
            workloads = [r for r in records if r.get("type") in ("cgroup", "pod")]
            if workloads and not model.host:
                model.host = str(workloads[0].get("host") or "")
            events = [r for r in records if r.get("type") == "event" and _shown(r)]
            model.update(workloads, events, now=found.wall_s)
            model.when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(found.wall_s))

        show(tick)
        interval = round(_interval(tick), 2)
        if not (os.isatty(0) and os.isatty(1)):
            sys.stdout.write(plain_frame(model, interval))
            return 0
        import curses

        screen = Screen(model, interval)
        current = [tick]

        def step(to: Callable[[float], Optional[Tick]], what: str) -> None:
            try:
                found = to(current[0].wall_s)
            except StoreError:
                found = None
            if found is None:
                model.status = f"no tick {what} {say_time(current[0].wall_s)}"
                return
            current[0] = found
            model.status = ""
            show(found)

        def later(after: float, span: float = 86400.0) -> Optional[Tick]:
            for found in reader.ticks(after, after + span):
                return found
            return None

        screen.extra_keys = {
            curses.KEY_LEFT: lambda: step(lambda t: reader.at(t - 0.001), "before"),
            curses.KEY_RIGHT: lambda: step(lambda t: later(t + 0.001), "after"),
            ord("["): lambda: step(lambda t: reader.at(t - 60), "a minute before"),
            ord("]"): lambda: step(lambda t: later(t + 60), "a minute after"),
        }
        model.status = "replay: left/right a tick, [ ] a minute, h l scroll columns, q quits"
        screen.start()
        try:
            screen.draw()
            while not screen.quit:
                screen.wait_key(1.0)
        finally:
            screen.stop()
    return 0


def _shown(event: JsonObject) -> bool:
    """Whether top can show an event read back (a store is input: one of another version
    or damaged in a way the checksums missed must not end the screen)."""
    from cgstat.outputs.top_screen import log_line

    try:
        log_line(event)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return True


def _interval(tick: Tick) -> float:
    for line in tick.lines[:1]:
        value = orjson.loads(line).get("interval_s")
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return 1.0


def report(store: str, since: str, until: Optional[str], out: str, title: Optional[str], points: int,
           warn: Warn) -> int:
    """`cgstat report --since --until`: the report's page of a span of the store (the page
    `cgstat report` makes of the same records written by stream)."""
    from cgstat.outputs.report.sink import ReportSink

    with StoreReader(store, warn) as reader:
        sink = ReportSink(out, warn, title=title or f"cgstat report: {since} to {until or 'now'}", points=points)
        sink.open()
        feed = sink.data.feed
        for tick in span_ticks(reader, since, until):
            for line in tick.lines:
                feed(line.encode("utf-8"))
        if not sink.data.workloads:
            raise StoreError(f"no cgroup records from {since} to {until or 'now'} to report on")
        sink.close()
    return 0
