"""The store as a sink: each tick's records, as the JSON lines `stream` writes, kept in the
flight recorder's store (cgstat/store). A record is matched from tick to tick by its type
and cgroup (GPU records by their place among the tick's GPU records); events are kept
whole. A tick that can't be written is said and lost (the store stays whole), the run
goes on."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, Hashable, Iterable, List, Optional, Tuple

from cgstat.outputs.sink import NO_INFO, Sink, SinkError, TickInfo
from cgstat.store.folder import StoreError
from cgstat.store.writer import Recorder, Warn
from cgstat.text import dumps_record, quote
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:
    from cgstat.records import JsonObject


def record_key(record: JsonObject, seen: Dict[str, int]) -> Hashable:
    kind = record.get("type")
    if kind == "event":
        return None
    cgroup = record.get("cgroup")
    if isinstance(cgroup, str):
        return (kind, cgroup)
    n = seen.get(str(kind), 0)
    seen[str(kind)] = n + 1
    return (kind, n)


class StoreSink(Sink):
    """Every tick into the store at `path` (writer.Recorder: --retain, --max-size)."""

    streams = True  # a tick's records are taken one at a time; only the lines are kept

    def __init__(self, path: str, retain_s: Optional[float], max_bytes: Optional[int],
                 warn: Optional[Warn] = None, sync: bool = True):
        self.recorder = Recorder(path, retain_s, max_bytes, warn, sync=sync)
        self.warn = warn

    def open(self) -> None:
        try:
            self.recorder.open()
        except StoreError as exc:
            raise SinkError(str(exc)) from None

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        lines: List[Tuple[Hashable, bytes]] = []
        seen: Dict[str, int] = {}
        wall_s: Optional[float] = None
        for record in records:
            line = dumps_record(record)
            if line is None:
                if self.warn is not None:
                    self.warn("unserialisable", f"{quote(str(record.get('cgroup')))}: record dropped: "
                                                "it cannot be written as JSON")
                continue
            if wall_s is None:
                wall_s = parse_ts(record.get("ts"))
            lines.append((record_key(record, seen), line))
        if not lines:
            return
        try:
            self.recorder.write(wall_s if wall_s is not None else time.time(), lines)
        except StoreError as exc:
            raise SinkError(str(exc)) from None

    def close(self) -> None:
        try:
            self.recorder.close()
        except OSError:
            pass
