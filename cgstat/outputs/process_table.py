"""`cgstat procs`: a workload's processes as a tree table, JSON lines or CSV.

Input: one object per workload as app/procs.py makes it (its identity, then the
`processes` listing of pipeline/processes.py: entries in fork-tree order with `depth` and
`group`, each tree's total in `groups`). The table indents each process under its parent
and ends each workload with its trees' totals; sizes in docker's units (units.bytes_size),
"--" for null. Command lines are escaped by the reader (kernel/processes.py) and again here
(text.escape_controls), CSV cells as outputs/table.py writes them (formula starts defused).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from cgstat.outputs.table import csv_cell, percent, render_table, text_width
from cgstat.text import dumps_record, escape_controls
from cgstat.units import bytes_size

HEADER = ("PID", "NSPID", "S", "THR", "CPU %", "RSS", "PSS", "USS", "SWAP", "FDS", "GPU MEM", "COMMAND")
CSV_COLUMNS = ("cgroup", "workload", "pid", "ns_pid", "ppid", "group", "depth", "name", "state", "uid", "threads",
               "cpu_percent", "cpu_seconds_total", "rss_bytes", "pss_bytes", "uss_bytes", "swap_bytes",
               "memory_age_s", "fds", "gpu_memory_bytes", "gpu_sm_percent", "cmdline", "errors")
COMMAND_WIDTH = 80  # characters of a command line in the table


def _num(value: Any) -> str:
    return "--" if value is None else str(value)


def _command(row: Dict[str, Any]) -> str:
    indent = "  " * (row.get("depth") or 0) + ("└─ " if row.get("depth") else "")
    cmd = row.get("cmdline") or ("[%s]" % (row.get("name") or "?"))
    text = escape_controls(cmd)
    if len(text) > COMMAND_WIDTH:
        text = text[:COMMAND_WIDTH - 3] + "..."
    return indent + text


def table_rows(listing: Dict[str, Any]) -> List[List[str]]:
    rows = []
    for p in listing["processes"]:
        rows.append([_num(p["pid"]), _num(p["ns_pid"]), p["state"] or "?", _num(p["threads"]),
                     percent(p["cpu_percent"]), bytes_size(p["rss_bytes"]), bytes_size(p["pss_bytes"]),
                     bytes_size(p["uss_bytes"]), bytes_size(p["swap_bytes"]), _num(p["fds"]),
                     bytes_size(p["gpu_memory_bytes"]) if p["gpu_memory_bytes"] is not None else "--",
                     _command(p)])
    return rows


def format_workload(item: Dict[str, Any]) -> str:
    """One workload: a title line, the tree table, each tree's total, the workload's sums."""
    listing = item["processes"]
    title = "%s  (%s)" % (escape_controls(item["name"]), escape_controls(item["cgroup"]))
    if listing.get("error"):
        err = listing["error"]
        return "%s\n  cannot list its processes: %s: %s\n" % (title, err["source"], escape_controls(err["detail"]))
    count = listing["count"]
    lines = [title + ": %d process%s%s" % (count, "" if count == 1 else "es",
                                           "" if listing["complete"] else " (not all listed)")]
    text = "\n".join(lines) + "\n"
    if listing["processes"]:
        text += render_table(table_rows(listing), HEADER)
    for g in listing["groups"]:
        if g["processes"] < 2 and len(listing["groups"]) > 1:
            continue  # a lone process is its own row above
        text += ("total of %s %s (%d process%s): CPU %s  RSS %s  PSS %s  USS %s  SWAP %s  GPU MEM %s\n" % (
            g["pid"], escape_controls(g["name"] or "?"), g["processes"], "" if g["processes"] == 1 else "es",
            percent(g["cpu_percent"]), bytes_size(g["rss_bytes"]), bytes_size(g["pss_bytes"]),
            bytes_size(g["uss_bytes"]), bytes_size(g["swap_bytes"]),
            bytes_size(g["gpu_memory_bytes"]) if g["gpu_memory_bytes"] is not None else "--"))
    return text


def format_table(items: Iterable[Dict[str, Any]]) -> str:
    return "\n".join(format_workload(item) for item in items)


def csv_header() -> str:
    return ",".join(CSV_COLUMNS) + "\r\n"


def csv_rows(items: Iterable[Dict[str, Any]]) -> str:
    out = []
    for item in items:
        for p in item["processes"]["processes"]:
            values = []
            for col in CSV_COLUMNS:
                if col == "cgroup":
                    v: Any = item["cgroup"]
                elif col == "workload":
                    v = item["name"]
                elif col == "errors":
                    v = ";".join("%s:%s" % (e["source"], e["error"]) for e in p["errors"]) or None
                else:
                    v = p.get(col)
                values.append(csv_cell(v))
            out.append(",".join(values))
    return "\r\n".join(out) + "\r\n" if out else ""


def jsonl(items: Iterable[Dict[str, Any]]) -> bytes:
    """One JSON object per workload (controls escaped as every record is)."""
    lines = []
    for item in items:
        data = dumps_record(item)
        if data is not None:
            lines.append(data + b"\n")
    return b"".join(lines)


def screen_lines(name: str, listing: Dict[str, Any]) -> Tuple[str, List[str], List[str]]:
    """`cgstat top`'s processes screen for one workload: (the table's header line, a line per
    process in tree order, the trees' totals), columns two spaces apart to fit a terminal."""
    if listing.get("error"):
        err = listing["error"]
        return "", [], ["cannot list the processes of %s: %s: %s" % (escape_controls(name), err["source"],
                                                                     escape_controls(err["detail"]))]
    table = [list(HEADER)] + table_rows(listing)
    widths = [max(text_width(row[i]) for row in table) for i in range(len(HEADER) - 1)]
    lines = ["  ".join(c + " " * (w - text_width(c)) for c, w in zip(row[:-1], widths)) + "  " + row[-1]
             for row in table]
    totals = ["%d process%s%s" % (listing["count"], "" if listing["count"] == 1 else "es",
                                  "" if listing["complete"] else " (not all listed)")]
    for g in listing["groups"]:
        if g["processes"] > 1:
            totals.append("total of %s %s (%d processes): CPU %s  RSS %s  PSS %s  USS %s  GPU MEM %s" % (
                g["pid"], escape_controls(g["name"] or "?"), g["processes"], percent(g["cpu_percent"]),
                bytes_size(g["rss_bytes"]), bytes_size(g["pss_bytes"]), bytes_size(g["uss_bytes"]),
                bytes_size(g["gpu_memory_bytes"]) if g["gpu_memory_bytes"] is not None else "--"))
    return lines[0], lines[1:], totals


def focus_screen(title: str, name: str, listing: Optional[Dict[str, Any]], height: int, offset: int,
                 shift: int) -> Tuple[List[Tuple[str, str]], int]:
    """`cgstat top`'s processes screen, `height` lines of (text, "header"/"normal"/"dim"):
    the title, the table from `offset` down and `shift` columns to the right (the arrows),
    the trees' totals, the keys; and the offset used (clamped)."""
    header, body, totals = (screen_lines(name, listing) if listing is not None
                            else ("", ["reading its processes..."], []))
    foot = "q quit | Esc or b: back to the workloads | arrows scroll"
    if height <= 2:
        return [(title, "header"), (foot, "header")][:max(0, height)], 0
    totals = totals[:3]
    avail = max(0, height - 3 - len(totals))
    offset = max(0, min(offset, max(0, len(body) - avail)))
    lines = [(title, "header"), (header[shift:], "header")] + [(b[shift:], "normal")
                                                             for b in body[offset:offset + avail]]
    lines += [("", "normal")] * (height - 1 - len(totals) - len(lines)) + [(t, "dim") for t in totals]
    return (lines + [(foot, "header")])[:height], offset
