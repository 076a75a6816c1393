"""`--format table` and `--format csv`: the same records, for people and spreadsheets.
table: one block per batch, laid out as `docker stats --no-stream` prints it; csv: a
header, then one row per cgroup/pod record, per event and per exit record, in fixed columns
(CSV_COLUMNS). Names are hostile: controls escaped in both, formulas defused in CSV. Both
sinks are the JSON-lines sinks with another serialiser (opening, SIGHUP reopening, backlog
on a failing disk and a closed stdout behave exactly as there). Reads no host file.
"""

from __future__ import annotations

import os
import unicodedata
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Optional, Sequence, cast

from cgstat.contract import fields
from cgstat.contract import display as names
from cgstat.contract.keys import Cgroup
from cgstat.outputs.jsonl import FileSink, StdoutSink
from cgstat.pipeline.build import number_at, value_at
from cgstat.pipeline.sinks import Chunker
from cgstat.text import escape_controls
from cgstat.units import bytes_size, human_size

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import CgroupRecord, EventRecord, JsonObject

def percent(value: Optional[float]) -> str:
    return "--" if value is None else "%.2f%%" % value


# -- reading a record ------------------------------------------------------------------------

def display_name(record: CgroupRecord) -> str:
    """names.display_name, controls escaped."""
    return escape_controls(names.display_name(record))


def text_width(text: str) -> int:
    """Terminal columns of `text` (wide East Asian characters take two, combining none)."""
    if text.isascii():
        return len(text)
    w = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        w += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return w


# The table as `docker stats --no-stream` prints it: a header, CONTAINER ID first (a
# container's 12-hex short ID, "--" for other cgroups), columns padded the way Go's
# tabwriter does there (at least 10 wide, 3 spaces apart), sizes in docker's units:
# `units.BytesSize` (binary, "%.4g" + B/KiB/MiB/GiB...) for memory,
# `units.HumanSizeWithPrecision(x, 3)` (decimal, kB/MB/GB) for network and block IO,
# percentages with two decimals and "%". A null figure prints "--". MEM USAGE is the
# working set; with no limit the host's memory stands in (as docker does), found from
# `memory.percent`. Events in the batch follow the table, one line each.
TABLE_HEADER = ("CONTAINER ID", "NAME", "CPU %", "MEM USAGE / LIMIT", "MEM %", "NET I/O", "BLOCK I/O", "PIDS", "GPU MEM",
                "GPU SM %")


def container_id(record: CgroupRecord) -> str:
    """docker's CONTAINER ID: the first 12 hex digits of a container's ID, else "--"."""
    container = record["container"]
    short = container["short_id"] if container is not None else None
    return escape_controls(str(short)) if short else "--"


def table_row(record: CgroupRecord) -> List[str]:
    """The cells of one record, formatted as docker stats formats them."""
    memory = record["memory"]
    ws = number_at(memory["working_set_bytes"])
    limit = number_at(memory["limit_bytes"])
    mem_pct = number_at(memory["percent"])
    if limit is None and ws and mem_pct:
        limit = ws * 100.0 / mem_pct  # docker shows the host's memory for an unlimited container
    mem = "-- / --" if ws is None else "%s / %s" % (bytes_size(ws), bytes_size(limit))
    net = record["network"]
    if net is not None:
        net_io = "%s / %s" % (human_size(number_at(net["rx_bytes_total"])),
                              human_size(number_at(net["tx_bytes_total"])))
    else:
        net_io = "--"
    io = record["io"]
    rd, wr = number_at(io["read_bytes_total"]), number_at(io["write_bytes_total"])
    block = "--" if rd is None and wr is None else "%s / %s" % (human_size(rd), human_size(wr))
    pids = number_at(record["pids"]["current"])
    gpu = record["gpu"]
    gpu_mem = gpu_sm = "--"
    if gpu is not None:
        gpu_mem = bytes_size(number_at(gpu["memory_bytes"]))
        gpu_sm = percent(number_at(gpu["sm_percent"]))
    return [container_id(record), display_name(record), percent(number_at(record["cpu"]["percent"])), mem, percent(mem_pct), net_io,
            block, "--" if pids is None else "%d" % pids, gpu_mem, gpu_sm]


def render_table(rows: Sequence[Sequence[str]], header: Sequence[str] = TABLE_HEADER) -> str:
    """Columns as Go's tabwriter(minwidth 10, padding 3) lays out docker's table."""
    widths = [0] * len(header)
    for row in [header] + list(rows):
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], text_width(cell))
    lines = []
    for row in [header] + list(rows):
        out = []
        for i, cell in enumerate(row):
            if i == len(row) - 1:
                out.append(cell)
            else:
                out.append(cell + " " * (max(10, widths[i] + 3) - text_width(cell)))
        lines.append("".join(out).rstrip())
    return "\n".join(lines) + "\n"


def _is_workload(record: object) -> bool:
    return isinstance(record, dict) and record.get("type") in ("cgroup", "pod")


def _is_event(record: object) -> bool:
    return isinstance(record, dict) and record.get("type") == "event"


def _is_exit(record: object) -> bool:
    return isinstance(record, dict) and record.get("type") == "exit"


def event_line(event: EventRecord) -> str:
    """An event under the table: "! severity kind name: message"."""
    container = event["container"]
    who = (container["name"] if container is not None else None) or event["cgroup"] or "--"
    return "! %s %s %s: %s\n" % (escape_controls(str(event["severity"])), escape_controls(str(event["kind"])),
                                 escape_controls(str(who)), escape_controls(str(event["message"])))


def format_table(records: Iterable[JsonObject]) -> str:
    """One batch: the table, then one line per event."""
    records = list(records)
    text = render_table([table_row(cast("CgroupRecord", r)) for r in records if _is_workload(r)])
    return text + "".join(event_line(cast("EventRecord", e)) for e in records if _is_event(e))


# -- CSV --------------------------------------------------------------------------------------

# CSV: a header, then one row per cgroup/pod record, per event and per exit record (its
# figures in the `exit.*` columns), always the same fixed columns (CSV_COLUMNS, dotted names
# such as `cpu.percent`), so every row has the same width whatever the record holds. GPU
# device records (`type: "gpu"`) are not rows.
# Names are hostile (any byte but '/' and NUL is a valid cgroup name): control, bidi and
# line-separator characters are written as `\xNN`/`\uXXXX` (text.escape_controls) in both
# formats; in CSV every text cell is quoted and one that starts with `=`, `+`, `-`, `@`,
# tab or CR gets a leading `'` so that spreadsheets don't run it as a formula (OWASP, "CSV
# Injection").
CSV_COLUMNS = fields.CSV_COLUMNS  # declared with the record's fields (cgstat/contract/fields.py)
_CSV_KEYS = tuple(() if c in fields.CSV_MADE else fields.keys(c) for c in CSV_COLUMNS)  # checked against the table

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str) -> str:
    """A text cell: controls escaped, a formula start defused with ', quoted, " doubled."""
    value = escape_controls(value)
    if value.startswith(_FORMULA_START):
        value = "'" + value
    return '"' + value.replace('"', '""') + '"'


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else ""
    return csv_text(str(value))


def csv_values(record: JsonObject) -> List[Any]:
    """The CSV_COLUMNS values of one record (cgroup, pod or event): a record field by its
    path (the paths are the field table's), or what the column makes (fields.CSV_MADE)."""
    event = record.get("type") == "event"
    gone = record.get("type") == "exit"
    values: List[Any] = []
    for col, keys in zip(CSV_COLUMNS, _CSV_KEYS):
        if col == "name":
            v = display_name(cast("CgroupRecord", record)) if not event else (
                value_at(record, *Cgroup.CONTAINER_NAME) or record.get("cgroup"))
        elif col == "event.kernel_ts":
            v = value_at(record, "evidence", "kernel_ts") if event else None
        elif col.startswith("event."):
            v = record.get(col[6:]) if event else None
        elif col.startswith("exit."):
            v = record.get(col[5:]) if gone else None
        elif col == "gpu.devices":
            devs = value_at(record, *Cgroup.GPU_DEVICES)
            v = " ".join(str(d) for d in devs) if isinstance(devs, list) else None
        elif col == "gpu.processes":
            procs = value_at(record, *Cgroup.GPU_PROCESSES)
            v = len(procs) if isinstance(procs, list) else None
        elif col == "errors":
            errs = record.get("errors")
            v = ";".join("%s:%s" % (e.get("source"), e.get("error")) for e in errs
                         if isinstance(e, dict)) if errs and isinstance(errs, list) else None
        elif (event or gone) and col.split(".")[0] in ("cpu", "memory", "io", "network", "pids", "pressure", "gpu", "pod"):
            v = None
        else:
            v = value_at(record, *keys)
            if isinstance(v, (dict, list)):
                v = None
        values.append(v)
    return values


def csv_header() -> str:
    return ",".join(CSV_COLUMNS) + "\r\n"


def csv_rows(records: Iterable[JsonObject]) -> str:
    """RFC 4180 rows (CRLF) for the cgroup, pod, event and exit records of a batch."""
    out = []
    for r in records:
        if _is_workload(r) or _is_event(r) or _is_exit(r):
            out.append(",".join(csv_cell(v) for v in csv_values(r)))
    return "\r\n".join(out) + "\r\n" if out else ""


# -- sinks ------------------------------------------------------------------------------------

class _Whole(Chunker):
    """A batch laid out whole (its columns, its header): one piece at its end."""

    def __init__(self, serialise: Callable[[Iterable[JsonObject]], bytes]):
        self.serialise = serialise
        self.records: List[JsonObject] = []

    def add(self, record: JsonObject) -> None:
        self.records.append(record)

    def end(self) -> bytes:
        return self.serialise(self.records)


class _TableFormat:
    """Serialiser mixin: a table per batch (a blank line between batches)."""

    _batches = 0
    wants_lines = False

    def chunker(self, quiet: bool = False) -> Chunker:
        return _Whole(self.serialise)

    def chunks(self, records: Iterable[JsonObject], quiet: bool = False) -> Iterator[bytes]:
        yield self.serialise(records)  # one piece: the columns are laid out over the batch

    def serialise(self, records: Iterable[JsonObject]) -> bytes:
        text = format_table(records)
        if self._batches:
            text = "\n" + text
        self._batches += 1
        return text.encode("utf-8", "backslashreplace")


class _CsvFormat:
    """Serialiser mixin: the header once per output (again after a reopen onto a new file)."""

    _header_due = True
    wants_lines = False

    def chunker(self, quiet: bool = False) -> Chunker:
        return _Whole(self.serialise)

    def _output_empty(self) -> bool:
        return True

    def chunks(self, records: Iterable[JsonObject], quiet: bool = False) -> Iterator[bytes]:
        yield self.serialise(records)  # one piece: the header is decided per batch

    def serialise(self, records: Iterable[JsonObject]) -> bytes:
        text = csv_rows(records)
        if self._header_due and self._output_empty():
            text = csv_header() + text
        self._header_due = False
        return text.encode("utf-8", "backslashreplace")


class TableStdoutSink(_TableFormat, StdoutSink):
    pass


class TableFileSink(_TableFormat, FileSink):
    pass


class CsvStdoutSink(_CsvFormat, StdoutSink):
    pass


class CsvFileSink(_CsvFormat, FileSink):
    """Appends rows; the header only when the file is new or empty (and after logrotate)."""

    def _output_empty(self) -> bool:
        if self._pending:
            return False
        try:
            return os.fstat(self._fd()).st_size == 0
        except OSError:
            return True

    def reopen(self) -> None:
        super().reopen()
        self._header_due = True


