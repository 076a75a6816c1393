"""What `cgstat top` shows (app/top.py runs it): the model of a tick's rows and events, the
screen composed from it as a pure function of the model and the terminal's size
(`compose`), the plain frame for a pipe, and the curses terminal (keys, resizes, the
alternate screen). Cells are table.py's; every text that reaches the terminal has its
controls escaped (names are hostile), then what the terminal's encoding can't hold is
written as a backslash escape. Keys: c m g i p n sort, arrows/j k h l PgUp PgDn Home
scroll, Enter opens the processes of the row at the top (cgstat/outputs/process_table.py's tree; Esc
or b goes back), q quits.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple, cast

from cgstat.contract.event_kinds import MARKS
from cgstat.outputs.table import render_table, table_row, text_width
from cgstat.pipeline.build import number_at
from cgstat.text import escape_controls
from cgstat.units import human_size

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import CgroupRecord, EventRecord, Sampled

_EVENT_LINES = 5  # latest events listed under the table (when there is room)
_MIN_ROWS = 3  # rows kept on screen before the event list gets any line
_MIN_NAME = 12  # a name is never cut shorter than this
_GAP = 2  # spaces between the screen's columns

TOP_HEADER = ("NAME", "CONTAINER ID", "CPU %", "CPU LIMIT", "MEM USAGE / LIMIT", "MEM %", "NET I/O/s", "BLOCK I/O/s",
              "PIDS", "GPU MEM", "GPU SM %", "EVENTS")

# sort name -> key; the order of the footer
SORT_KEYS = (("cpu", "c"), ("memory", "m"), ("gpu", "g"), ("io", "i"), ("pids", "p"), ("name", "n"))
SORTS = tuple(name for name, _ in SORT_KEYS)
_SORT_BY_KEY = {k: name for name, k in SORT_KEYS}
_ALIASES = {"mem": "memory", "c": "cpu", "m": "memory", "g": "gpu", "i": "io", "p": "pids", "n": "name"}

_SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def sort_name(sort: str) -> str:
    """`sort` as one of SORTS (also accepts the key letters and "mem"); ValueError otherwise."""
    s = (sort or "").strip().lower()
    s = _ALIASES.get(s, s)
    if s not in SORTS:
        raise ValueError("unknown sort %r (one of %s)" % (sort, ", ".join(SORTS)))
    return s


# -- the model: rows and events ----------------------------------------------------------------

class Row(NamedTuple):
    cgroup: str
    cells: List[str]  # TOP_HEADER's cells, controls escaped
    keys: Dict[str, Any]  # sort name -> value (None: unknown)
    severity: Optional[str]  # the worst open episode's severity


def _rate_pair(a: Optional[float], b: Optional[float]) -> str:
    if a is None and b is None:
        return "--"
    return "%s / %s" % (human_size(a), human_size(b))


def _cpu_limit(cores: Optional[float]) -> str:
    return "--" if cores is None else "%.4g%%" % (cores * 100.0)


def _sum(*values: Optional[float]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def make_row(record: CgroupRecord, open_kinds: Dict[str, str]) -> Row:
    """One workload's row; `open_kinds` is kind -> severity of its open event episodes."""
    cid, name, cpu, mem, mem_pct, _net, _block, pids, gpu_mem, gpu_sm = table_row(record)
    io = record["io"]
    rd = number_at(io["read_bytes_per_second"])
    wr = number_at(io["write_bytes_per_second"])
    net = record["network"]
    rx = tx = None
    if net is not None:
        rx, tx = number_at(net["rx_bytes_per_second"]), number_at(net["tx_bytes_per_second"])
        net_cell = _rate_pair(rx, tx)
    else:
        net_cell = "--"
    marks = ",".join(MARKS.get(k) or escape_controls(str(k)) for k in sorted(open_kinds))
    gpu = record["gpu"]
    gpu_keys = None
    if gpu is not None:
        gpu_keys = (number_at(gpu["memory_bytes"]), number_at(gpu["sm_percent"]))
        if gpu_keys == (None, None):
            gpu_keys = None
    cpu_figures = record["cpu"]
    keys = {
        "cpu": number_at(cpu_figures["percent"]),
        "memory": number_at(record["memory"]["working_set_bytes"]),
        "gpu": gpu_keys,
        "io": None if rd is None and wr is None and rx is None and tx is None
        else (_sum(rd, wr) or 0.0, _sum(rx, tx) or 0.0),
        "pids": number_at(record["pids"]["current"]),
        "name": name.lower(),
    }
    worst = max(open_kinds.values(), key=lambda s: _SEVERITY_RANK.get(s, 0)) if open_kinds else None
    cells = [name, cid, cpu, _cpu_limit(number_at(cpu_figures["limit_cores"])), mem, mem_pct, net_cell,
             _rate_pair(rd, wr), pids, gpu_mem, gpu_sm, marks or ""]
    return Row(record["cgroup"], cells, keys, worst)


def _none_low(v: Any) -> Tuple[int, Any]:
    """Sort key for 'largest first, unknown last' (used with reverse=True)."""
    if v is None:
        return (0, 0)
    return (1, v)


def sort_rows(rows: Sequence[Row], sort: str) -> List[Row]:
    """Rows in `sort` order: numbers largest first, unknown last, ties by name; names A-Z."""
    by_name = sorted(rows, key=lambda r: (r.keys["name"], r.cgroup))
    if sort == "name":
        return by_name
    return sorted(by_name, key=lambda r: _none_low(r.keys[sort]), reverse=True)  # stable: ties by name


class Model:
    """What the screen shows: the latest tick's rows, open episodes and the latest events."""

    def __init__(self, sort: str = "cpu", host: str = ""):
        self.sort = sort_name(sort)
        self.host = escape_controls(host)
        self.rows: List[Row] = []
        self.ts: Optional[float] = None  # time.time() of the latest tick
        self.ticks = 0
        self.open: Dict[str, Dict[str, str]] = {}  # cgroup -> kind -> severity
        self.log: Deque[str] = collections.deque(maxlen=_EVENT_LINES)  # latest events, newest last
        self.tick_events: List[str] = []  # this tick's event lines
        self.status = ""  # the latest warning
        self.when: Optional[str] = None  # the tick's date and time, said instead of the clock (a replay)
        # Enter opens a workload's processes (app/top.py reads them each tick), Esc goes back
        self.focus: Optional[Tuple[str, str]] = None  # (cgroup, name) whose processes are shown
        self.focus_listing: Optional[Dict[str, Any]] = None  # pipeline/processes.listing_object's

    def update(self, records: Sequence[Sampled], events: Sequence[EventRecord] = (),
               now: Optional[float] = None) -> None:
        """The tick's records and the events judged on them."""
        workloads = [cast("CgroupRecord", r) for r in records if r["type"] in ("cgroup", "pod")]
        present = {r["cgroup"] for r in workloads}
        self.open = {cg: kinds for cg, kinds in self.open.items() if cg in present}
        stamp = time.strftime("%H:%M:%S", time.localtime(now if now is not None else time.time()))
        self.tick_events = []
        for e in events:
            cg = e.get("cgroup")
            kind = str(e.get("kind"))
            if isinstance(cg, str):
                if kind == "resolved":
                    self.open.get(cg, {}).pop(str(e.get("resolves")), None)
                else:
                    self.open.setdefault(cg, {})[kind] = str(e.get("severity"))
            line = log_line(e)
            self.tick_events.append(line)
            self.log.append("%s %s" % (stamp, line))
        self.rows = [make_row(r, self.open.get(r["cgroup"], {})) for r in workloads]
        self.ts = now if now is not None else time.time()
        self.ticks += 1

    def sorted_rows(self) -> List[Row]:
        return sort_rows(self.rows, self.sort)

    def title(self, interval_s: float) -> str:
        when = self.when or (time.strftime("%H:%M:%S", time.localtime(self.ts)) if self.ts is not None else "--:--:--")
        return "cgstat top - %s - %s - every %gs - %d workloads - sort: %s" % (
            self.host or "--", when, interval_s, len(self.rows), self.sort)


def log_line(e: EventRecord) -> str:
    """An event in top's log: '! severity kind name: message' like table.event_line, but a
    resolved notice names what it resolves ('resolved cpu_throttled') and there is no
    newline (the screen lays the lines out); controls escaped."""
    container = e["container"]
    who = (container["name"] if container is not None else None) or e["cgroup"] or "--"
    kind = e.get("kind")
    if kind == "resolved" and e.get("resolves"):
        kind = "resolved %s" % e.get("resolves")
    return "! %s %s %s: %s" % (escape_controls(str(e.get("severity"))), escape_controls(str(kind)),
                               escape_controls(str(who)), escape_controls(str(e.get("message"))))


# -- layout (pure: tested without a terminal) ------------------------------------------------

NORMAL, HEADER, WARNING, CRITICAL, DIM = range(5)
_KINDS = {"header": HEADER, "dim": DIM}  # outputs/processes.focus_screen's line kinds


def clip(text: str, columns: int) -> str:
    """`text` cut to at most `columns` terminal columns (wide characters count two)."""
    if columns <= 0:
        return ""
    if text_width(text) <= columns:
        return text
    out = []
    used = 0
    for ch in text:
        w = text_width(ch)
        if used + w > columns:
            break
        out.append(ch)
        used += w
    return "".join(out)


def shorten(text: str, columns: int, ellipsis: str = "~") -> str:
    """`text` cut to `columns` with `ellipsis` marking the cut."""
    if text_width(text) <= columns:
        return text
    return clip(text, max(0, columns - text_width(ellipsis))) + ellipsis


def screen_table(rows: Sequence[Row], width: int, skip: int = 0, ellipsis: str = "~") -> Tuple[List[str], int]:
    """The header and rows for the screen: table.py's cells, tighter than docker's spacing
    (two spaces, no 10-column minimum) so more fits; the name column stays, `skip` columns
    after it are scrolled off to the left, and names are cut (not below _MIN_NAME columns)
    so the figures fit `width`. Returns the lines and the skip actually used."""
    table = [list(TOP_HEADER)] + [list(r.cells) for r in rows]
    skip = max(0, min(skip, len(TOP_HEADER) - 2))
    shown = [0] + list(range(1 + skip, len(TOP_HEADER)))
    widths = {i: max(text_width(line[i]) for line in table) for i in shown}
    rest = sum(widths[i] + _GAP for i in shown[1:])
    name_w = max(_MIN_NAME, min(widths[0], width - rest - _GAP))
    lines = []
    for line in table:
        cells = [shorten(line[0], name_w, ellipsis)] + [line[i] for i in shown[1:]]
        colw = [name_w] + [widths[i] for i in shown[1:]]
        out = "".join(c + " " * (w - text_width(c) + _GAP) for c, w in zip(cells[:-1], colw[:-1])) + cells[-1]
        lines.append(out.rstrip())
    return lines, skip


def footer(sort: str, where: str = "") -> str:
    """q first (it must stay on screen), the sort and the scroll position, then the keys."""
    keys = "  ".join("%s %s" % (k, name) for name, k in SORT_KEYS)
    return "q quit | sort: %s%s | %s  arrows scroll  Enter: the top row's processes" % (sort, where, keys)


class View(NamedTuple):
    """Where the screen is scrolled to: `offset` rows down, `skip` columns after NAME."""
    offset: int = 0
    skip: int = 0


def compose(model: Model, height: int, width: int, interval_s: float, view: Optional[View] = None,
            ellipsis: str = "~") -> Tuple[List[Tuple[str, int]], View]:
    """The screen: (text, style) per line, each at most width-1 columns, at most `height`
    lines; and the scroll position actually used (clamped to what there is)."""
    cols = width - 1  # the bottom-right cell can't be written; keep every line off the last column
    if height <= 0 or cols <= 0:
        return [], View()
    view = view or View()
    if model.focus is not None:  # Enter opened a workload's processes (app/top.py), in a tree
        from cgstat.outputs.process_table import focus_screen

        title = "%s - processes of %s" % (model.title(interval_s).split(" - sort:")[0], model.focus[1])
        kinds, at = focus_screen(title, model.focus[1], model.focus_listing, height, view.offset, view.skip * 4)
        return [(clip(escape_controls(text), cols), _KINDS.get(kind, NORMAL)) for text, kind in kinds], \
            View(at, view.skip)
    rows = model.sorted_rows()
    table, skip = screen_table(rows, cols, view.skip if view is not None else 0, ellipsis)
    header, body = table[0], table[1:]
    offset = view.offset if view is not None else 0
    styles = [CRITICAL if r.severity == "critical" else WARNING if r.severity == "warning" else NORMAL
              for r in rows]
    top = [(model.title(interval_s), HEADER), (header, HEADER)]
    bottom_fixed = [(footer(model.sort), HEADER)]
    if model.ticks == 0:
        body, styles = ["sampling..."], [DIM]
    extra: List[Tuple[str, int]] = []
    if model.status:
        extra.append((model.status, DIM))
    extra.extend((line, DIM) for line in list(model.log)[::-1])  # newest first
    # Who gets the lines: footer, title, header; then rows (a few), then the events, then rows.
    lines: List[Tuple[str, int]] = []
    if height == 1:
        lines = [top[0]]
    elif height == 2:
        lines = [top[0], bottom_fixed[0]]
    else:
        avail = height - 3
        want_rows = len(body)
        extra_n = max(0, min(len(extra), avail - min(want_rows, _MIN_ROWS)))
        rows_n = min(want_rows, avail - extra_n)
        hidden = want_rows - rows_n
        # down to the last row, not only to the last screenful: Enter opens the row at the
        # top, so every row must be able to get there, also when all of them fit the screen
        offset = max(0, min(offset, want_rows - 1))
        shown = list(zip(body, styles))[offset:offset + rows_n]
        where = ""
        if hidden or offset:
            where += " | rows %d-%d of %d" % (offset + 1, offset + len(shown), want_rows)
        if skip:
            where += " | %d columns scrolled" % skip
        foot_text = footer(model.sort, where)
        lines = top + shown + [("", NORMAL)] * (avail - extra_n - len(shown)) + extra[:extra_n] \
            + [(foot_text, HEADER)]
    # every line escaped once more here (escaping is idempotent): nothing raw reaches the screen
    return [(clip(escape_controls(text), cols), style) for text, style in lines], View(offset, skip)


def plain_frame(model: Model, interval_s: float) -> str:
    """A tick for a pipe: the title, the table (table.render_table), this tick's events."""
    rows = model.sorted_rows()
    text = model.title(interval_s) + "\n" + render_table([r.cells for r in rows], TOP_HEADER)
    for line in model.tick_events:
        text += line + "\n"
    return text


# -- the terminal ------------------------------------------------------------------------------

class ViewLog:
    """A stream for the Warner (and sys.stderr) while the screen is ours: the latest line
    goes to the status line, every line is kept (bounded) to be repeated afterwards."""

    def __init__(self, on_line: Callable[[str], None], keep: int = 200):
        self.on_line = on_line
        self.lines: Deque[str] = collections.deque(maxlen=keep)
        self.dropped = 0
        self._partial = ""

    def write(self, text: str) -> int:
        self._partial += str(text)
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            if not line:
                continue
            if len(self.lines) == self.lines.maxlen:
                self.dropped += 1
            self.lines.append(line)
            self.on_line(escape_controls(line))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _scroll_keys() -> Dict[int, Tuple[Optional[int], int]]:
    """key -> (rows down (None: to the top; +-2: a page), columns right)."""
    import curses

    return {curses.KEY_DOWN: (1, 0), ord("j"): (1, 0), curses.KEY_UP: (-1, 0), ord("k"): (-1, 0),
            curses.KEY_NPAGE: (2, 0), curses.KEY_PPAGE: (-2, 0), curses.KEY_HOME: (None, 0),
            curses.KEY_RIGHT: (0, 1), ord("l"): (0, 1), curses.KEY_LEFT: (0, -1), ord("h"): (0, -1)}


class Screen:
    """curses: set up, draw `compose`'s lines, read keys; always given back."""

    def __init__(self, model: Model, interval_s: float):
        import curses

        self.curses = curses
        self.model = model
        self.interval_s = interval_s
        self.view = View()
        self.quit = False
        self.win: Any = None
        self.attrs = {NORMAL: 0, HEADER: 0, WARNING: 0, CRITICAL: 0, DIM: 0}
        self.encoding = "utf-8"
        self.keys = os.isatty(0)
        self.scroll = _scroll_keys()
        self.saved_env: Dict[str, str] = {}
        self.extra_keys: Dict[int, Callable[[], None]] = {}  # keys of a run mode's own, before the others

    def start(self) -> None:
        curses = self.curses
        # The terminal's own size (TIOCGWINSZ), not LINES/COLUMNS from the environment, which
        # ncurses prefers, at start and on every resize: a shell may have exported them stale
        # (seen under tmux: 80x24 in a 200x40 pane). use_env(False) is no cure: ncurses then
        # skips the ioctl too and takes terminfo's size.
        for name in ("LINES", "COLUMNS"):
            value = os.environ.pop(name, None)
            if value is not None:
                self.saved_env[name] = value
        try:
            self.win = curses.initscr()  # curses.error without a usable terminfo entry
            curses.noecho()
            curses.cbreak()  # keys without Enter; Ctrl-C still a SIGINT (the Schedule's stop)
            self.win.keypad(True)
            try:
                curses.curs_set(0)
            except curses.error:
                pass
            self.encoding = getattr(self.win, "encoding", None) or "utf-8"
            self.attrs[HEADER] = curses.A_REVERSE
            self.attrs[DIM] = curses.A_DIM
            self.attrs[WARNING] = curses.A_BOLD
            self.attrs[CRITICAL] = curses.A_BOLD
            if curses.has_colors():
                try:
                    curses.start_color()
                    try:
                        curses.use_default_colors()
                        bg = -1
                    except curses.error:
                        bg = curses.COLOR_BLACK
                    curses.init_pair(1, curses.COLOR_YELLOW, bg)
                    curses.init_pair(2, curses.COLOR_RED, bg)
                    self.attrs[WARNING] |= curses.color_pair(1)
                    self.attrs[CRITICAL] |= curses.color_pair(2)
                except curses.error:
                    pass
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        curses = self.curses
        os.environ.update(self.saved_env)
        self.saved_env = {}
        if self.win is None:
            return
        try:
            self.win.keypad(False)
            curses.nocbreak()
            curses.echo()
        except curses.error:
            pass
        try:
            curses.endwin()
        except curses.error:
            pass
        self.win = None

    def _safe(self, text: str) -> str:
        # controls are escaped already (cells, messages); what the terminal's encoding can't
        # hold is written as an escape rather than failing the draw
        text = escape_controls(text)
        try:
            text.encode(self.encoding)
            return text
        except (UnicodeEncodeError, LookupError):
            return text.encode(self.encoding, "backslashreplace").decode(self.encoding, "replace")

    def draw(self) -> None:
        win = self.win
        if win is None:
            return
        height, width = win.getmaxyx()
        ellipsis = "\u2026" if self.encoding.lower().replace("-", "") == "utf8" else "~"
        lines, self.view = compose(self.model, height, width, self.interval_s, self.view, ellipsis)
        win.erase()
        for y, (text, style) in enumerate(lines):
            try:
                win.addstr(y, 0, self._safe(text), self.attrs.get(style, 0))
            except self.curses.error:
                pass  # a line past the edge after a shrink: the next draw fits it
        win.refresh()

    def wait_key(self, timeout_s: float) -> None:
        """Wait up to timeout_s for a key; act on it (sort, scroll, quit, resize)."""
        win = self.win
        if win is None or not self.keys:
            time.sleep(timeout_s)
            return
        win.timeout(max(1, int(timeout_s * 1000)))
        key = win.getch()
        if key == -1:
            return
        self.on_key(key)

    def on_key(self, key: int) -> None:
        curses = self.curses
        if key in (ord("q"), ord("Q"), 3):  # 3: Ctrl-C as a character (raw terminals)
            self.quit = True
            return
        if key in self.extra_keys:
            self.extra_keys[key]()
        elif key == curses.KEY_RESIZE:
            try:
                curses.update_lines_cols()
            except (AttributeError, curses.error):
                pass
        elif 0 <= key < 128 and chr(key).lower() in _SORT_BY_KEY:
            self.model.sort = _SORT_BY_KEY[chr(key).lower()]
            self.view = self.view._replace(offset=0)
        elif key in self.scroll:
            page = max(1, self.win.getmaxyx()[0] - 4)
            rows, cols = self.scroll[key]
            step = 0 if rows is None else (page if abs(rows) > 1 else 1) * (1 if rows > 0 else -1)
            offset = 0 if rows is None else max(0, self.view.offset + step)
            self.view = View(offset, max(0, self.view.skip + cols))
        else:
            return
        self.draw()
