"""The store as a sink: each tick's records, as the JSON lines `stream` writes, kept in the
flight recorder's store (cgstat/store). A record is matched from tick to tick by its type
and cgroup (GPU records by their place among the tick's GPU records); events are kept
whole. A tick that can't be written is said and lost (the store stays whole), the run
goes on.

Beside another output of the stream (`stream --store`), the store takes the tick as it
passes to that output (`tee`): each record is serialised once, its line handed to the
store's encoder and, through `line_of`, to the JSON-lines sink, and no tick is ever held
whole (the records are made one at a time, as for one output)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, Hashable, Iterable, Iterator, Optional

from cgstat.outputs.sink import NO_INFO, Sink, SinkError, TickInfo
from cgstat.store.folder import StoreError
from cgstat.store.writer import Recorder, Warn
from cgstat.text import dumps_record, quote
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:
    from cgstat.contract.types import JsonObject


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
    tees = True  # tee(): the tick taken as it passes to another output

    def __init__(self, path: str, retain_s: Optional[float], max_bytes: Optional[int],
                 warn: Optional[Warn] = None, sync: bool = True):
        self.recorder = Recorder(path, retain_s, max_bytes, warn, sync=sync)
        self.warn = warn
        self._record: Optional[JsonObject] = None  # the record the tee passed on last, and its line
        self._line: Optional[bytes] = None
        self._complete = False
        self._error: Optional[str] = None

    def open(self) -> None:
        try:
            self.recorder.open()
        except StoreError as exc:
            raise SinkError(str(exc)) from None

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        for _ in self.tee(records):
            pass
        self.end_tee()

    def tee(self, records: Iterable[JsonObject]) -> Iterator[JsonObject]:
        """`records`, passed on one at a time, each one's line kept in the tick begun;
        `end_tee()` after the last writes it (the tick is written only if every record
        was taken)."""
        self._complete = False
        self._error = None
        seen: Dict[str, int] = {}
        begun = False
        recorder = self.recorder
        for record in records:
            line = self._line = dumps_record(record)
            self._record = record
            if line is None:
                if self.warn is not None:
                    self.warn("unserialisable", f"{quote(str(record.get('cgroup')))}: record dropped: "
                                                "it cannot be written as JSON")
            elif begun:
                recorder.add(record_key(record, seen), line)
            elif self._error is None:
                wall_s = parse_ts(record.get("ts"))
                try:
                    recorder.begin(wall_s if wall_s is not None else time.time())
                    begun = True
                    recorder.add(record_key(record, seen), line)
                except StoreError as exc:
                    self._error = str(exc)
            yield record
        self._record = self._line = None
        self._complete = begun

    def line_of(self, record: JsonObject) -> Optional[bytes]:
        """The line of the record the tee passed on last (made once), else made now."""
        return self._line if record is self._record else dumps_record(record)

    def end_tee(self) -> None:
        """Write the tick the tee took (SinkError when it can't be); a tick whose records
        stopped coming is not written."""
        self._record = self._line = None
        complete, error, self._complete, self._error = self._complete, self._error, False, None
        if not complete:
            self.recorder.abandon()
        else:
            try:
                self.recorder.finish()
            except StoreError as exc:
                raise SinkError(str(exc)) from None
        if error is not None:
            raise SinkError(error)

    def close(self) -> None:
        try:
            self.recorder.close()
        except OSError:
            pass
