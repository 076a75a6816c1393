"""`cgstat story WORKLOAD`: one workload's life, read back from the store or a stream file.

One pass over the records: the workload is found by its container's name or ID prefix, its
unit, its pod (`name` or `namespace/name`) or its cgroup path (or the path's last folder);
each life of a matching cgroup (a path made again after its exit record is a new life) is
gathered into a Life: first and last seen, limits and their changes, the kernel's peaks and
counts next to the sampled figures, CPU and throttling, pressure and throttling episodes,
GPU held and busy, IO, its events and its exit record. Several lives matching are listed,
not guessed (StoryError with the list). cgstat/outputs/story_text.py tells a Life as text or JSON.
Reads no kernel file: records only.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import orjson

from cgstat.errors import CgstatError
from cgstat.contract.display import workload_name
from cgstat.pipeline.build import number_at, value_at
from cgstat.text import escape_controls
from cgstat.timestamps import parse_ts

Warn = Callable[[str, str], None]
# a figure at or above this is an episode (throttled_percent, pressure some avg10): the share
# of time a workload waits that a person notices
EPISODE_PERCENT = 25.0
PRESSURE = ("cpu", "memory", "io")


class StoryError(CgstatError):
    """No workload, or several, matched: one line each."""


class Run:
    """Episodes of one sampled figure at or above a threshold: [start, end, peak] each."""

    __slots__ = ("threshold", "episodes", "_open")

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.episodes: List[List[Any]] = []
        self._open: Optional[List[Any]] = None

    def add(self, ts: str, value: Optional[float]) -> None:
        if value is not None and value >= self.threshold:
            if self._open is None:
                self._open = [ts, ts, value]
                self.episodes.append(self._open)
            else:
                self._open[1] = ts
                self._open[2] = max(self._open[2], value)
        elif value is not None:
            self._open = None


class Fit:
    """A least-squares line through (t, y): the memory's growth over a life, in O(1) room."""

    __slots__ = ("n", "t0", "st", "sy", "stt", "sty", "syy")

    def __init__(self) -> None:
        self.n = 0
        self.t0: Optional[float] = None
        self.st = self.sy = self.stt = self.sty = self.syy = 0.0

    def add(self, t: float, y: float) -> None:
        if self.t0 is None:
            self.t0 = t
        t -= self.t0
        self.n += 1
        self.st += t
        self.sy += y
        self.stt += t * t
        self.sty += t * y
        self.syy += y * y

    def slope_r2(self) -> Tuple[Optional[float], Optional[float]]:
        """Bytes a second and how well the line fits (r²); None for fewer than 3 points."""
        n = self.n
        if n < 3:
            return None, None
        vt = n * self.stt - self.st ** 2
        vy = n * self.syy - self.sy ** 2
        if vt <= 0:
            return None, None
        cov = n * self.sty - self.st * self.sy
        slope = cov / vt
        r2 = 1.0 if vy <= 0 else cov * cov / (vt * vy)
        return slope, r2


class Life:
    """One life of one cgroup, from its records, events and exit record."""

    def __init__(self, cgroup: str) -> None:
        self.cgroup = cgroup
        self.identity: Dict[str, Any] = {}  # type, container, pod, unit, host of its last record
        self.first: Optional[str] = None
        self.last: Optional[str] = None
        self.samples = 0
        self.limits: Dict[str, Optional[float]] = {}
        self.limit_changes: List[Tuple[str, str, Optional[float], Optional[float]]] = []
        self.kernel_peak: Optional[float] = None  # memory.peak / max_usage_in_bytes, last reading
        self.sampled_peak: Optional[Tuple[float, str]] = None  # highest usage_bytes, when
        self.ws: List[Optional[float]] = [None, None]  # working set at its first and last record
        self.ws_peak: Optional[Tuple[float, str]] = None
        self.fit = Fit()
        self.counters: Dict[str, Optional[float]] = {}  # the last reading of each kernel counter
        self.memory_events: Optional[Dict[str, Any]] = None
        self.cpu_peak: Optional[Tuple[float, str]] = None
        self.throttled = Run(EPISODE_PERCENT)
        self.pressure = {r: Run(EPISODE_PERCENT) for r in PRESSURE}
        self.pressure_peak: Dict[str, Tuple[float, str]] = {}
        self.gpu_held: Optional[Tuple[float, str]] = None
        self.gpu_seconds: Optional[float] = None
        self.gpu_held_seconds = 0.0
        self.gpu_devices: List[str] = []
        self.events: List[Dict[str, Any]] = []
        self.exit: Optional[Dict[str, Any]] = None

    # -- records --------------------------------------------------------------------------

    def see(self, r: Dict[str, Any]) -> None:
        ts = r.get("ts")
        if not isinstance(ts, str):
            return
        self.identity = {k: r.get(k) for k in ("type", "container", "pod", "unit", "host")}
        self.first = self.first or ts
        self.last = ts
        self.samples += 1
        for name, keys in (("memory", ("memory", "limit_bytes")), ("cpu", ("cpu", "limit_cores")),
                           ("pids", ("pids", "limit"))):
            value = number_at(r, *keys)
            if name in self.limits and self.limits[name] != value:
                self.limit_changes.append((ts, name, self.limits[name], value))
            self.limits[name] = value
        peak = number_at(r, "memory", "peak_bytes")
        if peak is not None:
            self.kernel_peak = peak
        usage = number_at(r, "memory", "usage_bytes")
        if usage is not None and (self.sampled_peak is None or usage > self.sampled_peak[0]):
            self.sampled_peak = (usage, ts)
        ws = number_at(r, "memory", "working_set_bytes")
        if ws is not None:
            if self.ws[0] is None:
                self.ws[0] = ws
            self.ws[1] = ws
            if self.ws_peak is None or ws > self.ws_peak[0]:
                self.ws_peak = (ws, ts)
            t = parse_ts(ts)
            if t is not None:
                self.fit.add(t, ws)
        for key, keys in (("cpu_seconds", ("cpu", "usage_seconds_total")),
                          ("throttled_seconds", ("cpu", "throttled_seconds_total")),
                          ("throttled_periods", ("cpu", "throttled_periods_total")),
                          ("periods", ("cpu", "periods_total")), ("oom_kills", ("memory", "oom_kills_total")),
                          ("io_read", ("io", "read_bytes_total")), ("io_write", ("io", "write_bytes_total")),
                          ("net_rx", ("network", "rx_bytes_total")), ("net_tx", ("network", "tx_bytes_total"))):
            value = number_at(r, *keys)
            if value is not None:
                self.counters[key] = value
        events = value_at(r, "memory", "events")
        if isinstance(events, dict):
            self.memory_events = events
        cpu = number_at(r, "cpu", "percent")
        if cpu is not None and (self.cpu_peak is None or cpu > self.cpu_peak[0]):
            self.cpu_peak = (cpu, ts)
        self.throttled.add(ts, number_at(r, "cpu", "throttled_percent"))
        for res in PRESSURE:
            value = number_at(r, "pressure", res, "some_avg10")
            self.pressure[res].add(ts, value)
            if value is not None and (res not in self.pressure_peak or value > self.pressure_peak[res][0]):
                self.pressure_peak[res] = (value, ts)
        gpu = r.get("gpu")
        if isinstance(gpu, dict):
            held = number_at(gpu, "memory_bytes")
            if held is not None and (self.gpu_held is None or held > self.gpu_held[0]):
                self.gpu_held = (held, ts)
            sm, dt = number_at(gpu, "sm_percent"), number_at(r, "interval_s")
            if sm is not None and dt is not None:
                self.gpu_seconds = (self.gpu_seconds or 0.0) + sm / 100.0 * dt
            devices = gpu.get("devices")
            if held and dt is not None and isinstance(devices, list):
                self.gpu_held_seconds += len(devices) * dt  # each GPU it held memory on, each interval
            for dev in gpu.get("devices") or ():
                if isinstance(dev, str) and dev not in self.gpu_devices:
                    self.gpu_devices.append(dev)

    @property
    def name(self) -> Tuple[str, str]:
        return workload_name(dict(self.identity, cgroup=self.cgroup))

    def growth(self) -> Tuple[Optional[float], Optional[float]]:
        """(bytes a second, seconds it grew for) where the working set grew steadily (a line
        that fits, r² >= 0.6, rising by at least a tenth of its peak), else (None, None)."""
        slope, r2 = self.fit.slope_r2()
        first, last = parse_ts(self.first), parse_ts(self.last)
        if slope is None or r2 is None or slope <= 0 or r2 < 0.6 or first is None or last is None:
            return None, None
        span = last - first
        peak = self.ws_peak[0] if self.ws_peak else 0.0
        if span <= 0 or slope * span < 0.1 * peak:
            return None, None
        return slope, span


# -- what is told ------------------------------------------------------------------------------

def _num(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _kill_time(event: Dict[str, Any]) -> Tuple[Any, str]:
    """A kill's time: the kernel log's where the event has it, else the tick's."""
    kernel = value_at(event, "evidence", "kernel_ts")
    return (kernel, "kernel log") if isinstance(kernel, str) else (event.get("ts"), "tick")


def _peak(life: Life) -> Tuple[Optional[float], str]:
    """The peak to tell: the kernel's where it has one, else the exit record's, else sampled."""
    if life.kernel_peak is not None:
        return life.kernel_peak, "memory.peak"
    gone = life.exit or {}
    if _num(gone.get("memory_peak_bytes")) is not None:
        return _num(gone.get("memory_peak_bytes")), str(gone.get("memory_peak_source"))
    if life.sampled_peak is not None:
        return life.sampled_peak[0], "highest_seen"
    return None, "unknown"


def _episodes(run: Run) -> List[Dict[str, Any]]:
    return [{"start": a, "end": b, "peak_percent": p} for a, b, p in run.episodes]


def _ending(life: Life) -> Dict[str, Any]:
    """How it ended: oom_kill (its exit record says so, or a kill after its last record),
    exit, or running (no exit record); when, by which clock, at what limit."""
    gone = life.exit or {}
    killed = [e for e in life.events if e.get("kind") == "oom_kill"]
    last_kill = _kill_time(killed[-1]) if killed else (None, "")
    limit = life.limits.get("memory")
    if limit is None and killed:
        limit = number_at(killed[-1], "evidence", "limit_bytes")
    after_last = bool(killed) and (parse_ts(last_kill[0]) or 0.0) >= (parse_ts(life.last) or 0.0)
    if gone.get("ended_by") == "oom_kill" or (not gone and after_last):
        at, clock = last_kill if killed else (gone.get("ended"), "exit record")
        return {"how": "oom_kill", "at": at, "clock": clock, "limit_bytes": limit,
                "global_oom": bool(killed and value_at(killed[-1], "evidence", "global_oom"))}
    if gone:
        return {"how": "exit", "at": gone.get("ended"), "clock": "exit record", "limit_bytes": limit,
                "global_oom": False}
    return {"how": "running", "at": life.last, "clock": "last record", "limit_bytes": limit, "global_oom": False}


def summary(life: Life) -> Dict[str, Any]:
    """Everything told of a life, as plain figures (times as the records have them, RFC
    3339 UTC): what `--format json` prints and what cgstat/outputs/story_text.py phrases."""
    kind, name = life.name
    first, last = parse_ts(life.first), parse_ts(life.last)
    seen = None if first is None or last is None else last - first
    top, source = _peak(life)
    slope, span = life.growth()
    c = life.counters
    periods, throttled, cpu_s = c.get("periods"), c.get("throttled_periods"), c.get("cpu_seconds")
    kills = [e for e in life.events if e.get("kind") == "oom_kill"]
    return {
        "workload": dict(life.identity, kind=kind, name=name, cgroup=life.cgroup),
        "first_seen": life.first, "last_seen": life.last, "seen_seconds": seen, "samples": life.samples,
        "limits": {"memory_bytes": life.limits.get("memory"), "cpu_cores": life.limits.get("cpu"),
                   "pids": life.limits.get("pids")},
        "limit_changes": [{"ts": ts, "limit": what, "from": old, "to": new}
                          for ts, what, old, new in life.limit_changes],
        "memory": {"peak_bytes": top, "peak_source": source, "kernel_peak_bytes": life.kernel_peak,
                   "sampled_peak_bytes": life.sampled_peak[0] if life.sampled_peak else None,
                   "sampled_peak_at": life.sampled_peak[1] if life.sampled_peak else None,
                   "working_set_first_bytes": life.ws[0], "working_set_last_bytes": life.ws[1],
                   "growth_bytes_per_second": slope, "growth_seconds": span, "events": life.memory_events},
        "cpu": {"seconds_total": cpu_s,
                "cores_average": cpu_s / seen if seen and cpu_s is not None else None,
                "peak_percent": life.cpu_peak[0] if life.cpu_peak else None,
                "peak_at": life.cpu_peak[1] if life.cpu_peak else None,
                "throttled_seconds_total": c.get("throttled_seconds"), "throttled_periods_total": throttled,
                "periods_total": periods,
                "throttled_percent": 100.0 * throttled / periods if periods and throttled is not None else None},
        "throttled_episodes": _episodes(life.throttled),
        "pressure_episodes": {res: _episodes(life.pressure[res]) for res in PRESSURE},
        "pressure_peaks": {res: {"some_avg10": v, "at": ts} for res, (v, ts) in sorted(life.pressure_peak.items())},
        "gpu": {"held_bytes": life.gpu_held[0] if life.gpu_held else None,
                "held_at": life.gpu_held[1] if life.gpu_held else None, "held_seconds": life.gpu_held_seconds,
                "busy_seconds": life.gpu_seconds,
                "devices": life.gpu_devices},
        "io": {"read_bytes_total": c.get("io_read"), "write_bytes_total": c.get("io_write"),
               "network_rx_bytes_total": c.get("net_rx"), "network_tx_bytes_total": c.get("net_tx")},
        "oom_kills": [{"ts": e.get("ts"), "at": _kill_time(e)[0], "clock": _kill_time(e)[1],
                       "pid": value_at(e, "evidence", "pid"), "process": value_at(e, "evidence", "process")}
                      for e in kills],
        "events": life.events,
        "ending": _ending(life),
        "exit": life.exit,
    }


# -- finding the workload -----------------------------------------------------------------------

def matches(record: Dict[str, Any], query: str) -> bool:
    """Whether a record (cgroup, pod, event or exit) is about the workload the user named."""
    cgroup = record.get("cgroup")
    if isinstance(cgroup, str) and (cgroup == query or cgroup.rstrip("/").rsplit("/", 1)[-1] == query):
        return True
    container = record.get("container")
    if isinstance(container, dict):
        cid = container.get("id")
        if container.get("name") == query or (
                isinstance(cid, str) and len(query) >= 3 and cid.startswith(query.lower())):
            return True
    unit = record.get("unit")
    if isinstance(unit, str) and unit in (query, query + ".service"):
        return True
    pod = record.get("pod")
    if record.get("type") in ("pod", "exit") and isinstance(pod, dict) and pod.get("name"):
        if query in (pod["name"], "%s/%s" % (pod.get("namespace") or "", pod["name"])):
            return record.get("type") == "pod" or not isinstance(container, dict) or not container
    return False


def _quick(query: str) -> bytes:
    """What a stored line about the workload must hold (orjson writes names as it escapes
    them; a pod's `ns/name` is written as two keys, so only the name is looked for)."""
    needle = query.rsplit("/", 1)[-1] if not query.startswith("/") else query
    return orjson.dumps(needle)[1:-1]


def gather(lines: Iterable[bytes], query: str, span: Optional[Tuple[float, float]] = None) -> List[Life]:
    """Every life of a cgroup matching `query`, in the order first seen; with `span`
    (first, last Unix seconds), only the records stamped within it (a stream file's)."""
    needle = _quick(query)
    lower = needle.lower()  # an ID prefix may be given in capitals
    lives: Dict[str, Life] = {}  # the current life of each matching cgroup
    order: List[Life] = []
    for line in lines:
        if needle not in line and lower not in line and not (lives and any(p.encode() in line for p in _escaped(lives))):
            continue
        try:
            r = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(r, dict):
            continue
        if span is not None:
            ts = r.get("ts")
            t = parse_ts(ts) if isinstance(ts, str) else None
            if t is None or not span[0] <= t <= span[1]:
                continue
        kind, cgroup = r.get("type"), r.get("cgroup")
        mine = matches(r, query) or cgroup in lives
        if not mine or not isinstance(cgroup, str):
            continue
        life = lives.get(cgroup)
        if kind in ("cgroup", "pod"):
            if life is None:
                life = lives[cgroup] = Life(cgroup)
                order.append(life)
            life.see(r)
        elif kind in ("event", "exit"):
            if life is None:  # known from the kernel log or an event only: a life of no record
                life = lives[cgroup] = Life(cgroup)
                life.identity = {k: r.get(k) for k in ("container", "pod", "unit", "host")}
                order.append(life)
            if kind == "event":
                life.events.append(r)
            else:
                life.exit = r
                del lives[cgroup]  # the path made again is a new life
    return order


def _escaped(lives: Dict[str, Life]) -> Iterator[str]:
    # the cgroup paths as a stored line has them (an event of a unit-named cgroup names
    # neither the unit nor the container, only the path)
    for path in lives:
        yield orjson.dumps(path)[1:-1].decode()


def choose(lives: List[Life], query: str, clock: Any) -> Life:
    """The one life matching, or StoryError listing them (none: saying so)."""
    if not lives:
        raise StoryError(f"no workload called {query!r} in the records read (a container's name or ID "
                         "prefix, a unit, a pod or a cgroup path)")
    if len(lives) == 1:
        return lives[0]
    rows = ["%d workloads match %r; name one by its cgroup path, or narrow with --since/--until:" % (
        len(lives), query)]
    for life in lives:
        kind, name = life.name
        ended = life.exit.get("ended_by") if life.exit else "no exit record"
        rows.append(escape_controls("  %s  %s %s, %s to %s (%s)" % (  # a name's newline stays in its row
            life.cgroup, kind, name, clock.day(life.first), clock.day(life.last), ended)))
    raise StoryError("\n".join(rows))


# -- reading ------------------------------------------------------------------------------------

def span_of(since: Optional[str], until: Optional[str]) -> Tuple[float, float]:
    """--since and --until as (first, last) Unix seconds: all until now when not given."""
    from cgstat.app.history import when

    now = time.time()
    first = when(since, "--since", now) if since else 0.0
    last = when(until, "--until", now) if until else now
    return first, last


def store_lines(store: str, since: Optional[str], until: Optional[str], warn: Warn) -> Iterator[bytes]:
    from cgstat.store.reader import StoreReader

    first, last = span_of(since, until)
    with StoreReader(store, warn) as reader:
        for tick in reader.ticks(first, last):
            for line in tick.lines:
                yield line.encode("utf-8")


def file_lines(path: str) -> Iterator[bytes]:
    from cgstat.outputs.report.source import lines

    return lines(path)


def story(workload: str, store: str, file: Optional[str], since: Optional[str], until: Optional[str],
          fmt: str, utc: bool, warn: Warn) -> int:
    """`cgstat story WORKLOAD`: print its life (text or JSON); StoryError when none or
    several match."""
    import sys

    from cgstat.diagnostics import say
    from cgstat.outputs.clock import Clock
    from cgstat.outputs.story_text import story_json, story_text

    clock = Clock(utc)
    source = file_lines(file) if file else store_lines(store, since, until, warn)
    span = span_of(since, until) if file and (since or until) else None  # the store's reader cuts its own
    try:
        life = choose(gather(source, workload, span), workload, clock)
    except StoryError as exc:
        lines = str(exc).split("\n")
        if len(lines) == 1:
            raise
        for line in lines:  # the lives listed, a line each (escaped one by one)
            say(line)
        return 1
    told = summary(life)
    out = story_json(told) if fmt == "json" else story_text(told, clock)
    sys.stdout.write(out)
    sys.stdout.flush()
    return 0
