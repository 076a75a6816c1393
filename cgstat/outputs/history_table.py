"""`--format table` of the views of the past (`dump`, `replay`, `events`): every row says when.
A batch (one tick read back, or a span's events) is laid out as up to three tables (the
workloads, the events, the exit records), each left out when it has no row; see
format_history. Reads no host file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, List, Optional, cast

from cgstat.contract.display import display_name
from cgstat.outputs.clock import Clock, duration
from cgstat.outputs.jsonl import FileSink, JsonLinesSink, StdoutSink
from cgstat.outputs.table import TABLE_HEADER, render_table, table_row
from cgstat.pipeline.build import number_at
from cgstat.text import escape_controls
from cgstat.units import bytes_size, human_size

if TYPE_CHECKING:
    from cgstat.contract.types import CgroupRecord, JsonObject

# docker stats' columns, and the kernel's peak after MEM % (memory.peak, v1
# max_usage_in_bytes: what the workload needed, also between two samples)
# - the workloads: TIME (the record's), then the columns of outputs/table.py's docker-stats
#   table with MEM PEAK (the kernel's memory.peak / max_usage_in_bytes) after MEM %;
# - the events: TIME, SEVERITY, KIND, WORKLOAD, MESSAGE (an OOM kill's kernel-log time, where
#   the event has it, is the message's first words: `[kernel 03:12:07]`);
# - the exit records: WORKLOAD, START, END, LIFETIME, CPU S, PEAK MEM (with where it is from),
#   OOM KILLS, IO R / W, GPU S, ENDED BY.
# Times are local with the zone in the header (`TIME (CET)`), or UTC. Names are hostile:
# controls escaped (text.escape_controls) as in every table.
WORKLOAD_HEADER = TABLE_HEADER[:5] + ("MEM PEAK",) + TABLE_HEADER[5:]
EVENT_HEADER = ("SEVERITY", "KIND", "WORKLOAD", "MESSAGE")
EXIT_HEADER = ("WORKLOAD", "START", "END", "LIFETIME", "CPU S", "PEAK MEM", "OOM KILLS", "IO R / W", "GPU S",
               "ENDED BY")
PEAK_FROM = {"memory.peak": "kernel", "highest_seen": "sampled", "kernel_log": "kernel log"}


def _num(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def event_row(event: JsonObject, clock: Clock) -> List[str]:
    evidence = event.get("evidence")
    kernel = evidence.get("kernel_ts") if isinstance(evidence, dict) else None
    message = escape_controls(str(event.get("message") or ""))
    if kernel:
        message = "[kernel %s] %s" % (clock.time(kernel), message)
    return [clock.day(event.get("ts")), escape_controls(str(event.get("severity") or "--")),
            escape_controls(str(event.get("kind") or "--")), escape_controls(display_name(event)), message]


def exit_row(record: JsonObject, clock: Clock) -> List[str]:
    cpu = _num(record.get("cpu_seconds_total"))
    peak = _num(record.get("memory_peak_bytes"))
    source = PEAK_FROM.get(str(record.get("memory_peak_source")))
    kills = record.get("oom_kills_total")
    rd, wr = _num(record.get("io_read_bytes_total")), _num(record.get("io_write_bytes_total"))
    gpu = _num(record.get("gpu_seconds_total"))
    return [escape_controls(display_name(record)), clock.day(record.get("started")), clock.day(record.get("ended")),
            duration(_num(record.get("lifetime_seconds"))), "--" if cpu is None else "%.2f" % cpu,
            "--" if peak is None else bytes_size(peak) + (" (%s)" % source if source else ""),
            "--" if kills is None else str(kills),
            "--" if rd is None and wr is None else "%s / %s" % (human_size(rd), human_size(wr)),
            "--" if gpu is None else "%.1f" % gpu, escape_controls(str(record.get("ended_by") or "--"))]


def format_history(records: Iterable[JsonObject], clock: Clock) -> str:
    """The tables of one batch, a blank line between them."""
    workloads, events, exits = [], [], []
    for r in records:
        kind = r.get("type") if isinstance(r, dict) else None
        if kind in ("cgroup", "pod"):
            row = table_row(cast("CgroupRecord", r))
            peak = number_at(r, "memory", "peak_bytes")
            row.insert(5, "--" if peak is None else bytes_size(peak))
            workloads.append([clock.day(r.get("ts"))] + row)
        elif kind == "event":
            events.append([clock.day(r.get("ts"))] + event_row(r, clock)[1:])
        elif kind == "exit":
            exits.append(exit_row(r, clock))
    when = "TIME (%s)" % clock.zone
    parts = []
    if workloads:
        parts.append(render_table(workloads, (when,) + WORKLOAD_HEADER))
    if events:
        parts.append(render_table(events, (when,) + EVENT_HEADER))
    if exits:
        parts.append(render_table(exits, EXIT_HEADER[:1] + ("START (%s)" % clock.zone, "END") + EXIT_HEADER[3:]))
    return "\n".join(parts)


class _HistoryTableFormat:
    """Serialiser mixin: the tables of each batch (a blank line between batches)."""

    _batches = 0
    clock = Clock()

    def chunks(self, records: Iterable[JsonObject], quiet: bool = False) -> Iterator[bytes]:
        yield self.serialise(records)

    def serialise(self, records: Iterable[JsonObject]) -> bytes:
        text = format_history(records, self.clock)
        if not text:
            return b""
        if self._batches:
            text = "\n" + text
        self._batches += 1
        return text.encode("utf-8", "backslashreplace")


class HistoryTableStdoutSink(_HistoryTableFormat, StdoutSink):
    pass


class HistoryTableFileSink(_HistoryTableFormat, FileSink):
    pass


def history_table_sink(path: Optional[str], mode: int, warn: Any, utc: bool = False) -> JsonLinesSink:
    sink: JsonLinesSink = HistoryTableFileSink(path, mode, warn) if path else HistoryTableStdoutSink(warn)
    sink.clock = Clock(utc)  # type: ignore[attr-defined]
    return sink
