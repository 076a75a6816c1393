"""Many ticks as one OpenMetrics exposition (`cgstat dump --format openmetrics`), for
`promtool tsdb create-blocks-from openmetrics`: each family once, its header first, then
each series' samples together in time order (OpenMetrics 1.0 forbids a family twice and
a series' samples apart), each stamped with its record's time as the exporter's are,
then `# EOF`. Samples wait in a temporary file per family until the last tick is
rendered; a family is then sorted by series in memory, one at a time (a few hundred MB
at most for a day of 100 containers: dump spans of hours). A sample the exposition
leaves without a time stamp (cgstat's own counts of the tick's records) is stamped with
its tick's time, the first record's `ts`: promtool's backfill refuses a sample without
one ("expected timestamp for series got none"), and a count is of its tick."""

from __future__ import annotations

import tempfile
from typing import IO, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from cgstat.outputs.prometheus.exposition import OPENMETRICS, render
from cgstat.timestamps import ts_millis


def _series(line: bytes) -> bytes:
    brace = line.find(b"{")
    space = line.find(b" ")
    if 0 <= brace < space:
        return line[: line.rfind(b"}") + 1]
    return line[:space]


def _timed(line: bytes) -> bool:
    return line[len(_series(line)):].strip().count(b" ") >= 1


def _tick_stamp(records: Sequence[object]) -> Optional[bytes]:
    """The tick's time as an OpenMetrics time stamp (` 1796181120.000`), from its first
    record with a `ts`."""
    for record in records:
        if isinstance(record, dict):
            millis = ts_millis(record.get("ts"))
            if millis is not None:
                return b" %d.%03d" % divmod(millis, 1000)
    return None


def exposition(ticks: Iterable[Sequence[object]]) -> Iterator[bytes]:
    families: Dict[bytes, Tuple[List[bytes], IO[bytes]]] = {}
    try:
        for records in ticks:
            current = None
            stamp = _tick_stamp(records)
            for line in render(records, OPENMETRICS, timestamps=True).splitlines(keepends=True):  # type: ignore[arg-type]
                if line.startswith(b"# EOF"):
                    continue
                if line.startswith(b"#"):
                    name = line.split(b" ", 3)[2]
                    if name not in families:
                        families[name] = ([], tempfile.TemporaryFile())
                    current = families[name]
                    if len(current[0]) < 3 and line not in current[0]:
                        current[0].append(line)
                elif current is not None:
                    if _timed(line):
                        current[1].write(line)
                    elif stamp is not None:
                        current[1].write(line.rstrip(b"\n") + stamp + b"\n")
        for head, samples in families.values():
            samples.seek(0)
            lines = samples.read().splitlines(keepends=True)
            lines.sort(key=_series)  # stable: each series' samples stay in time order
            yield b"".join(head) + b"".join(lines)
        yield b"# EOF\n"
    finally:
        for _, samples in families.values():
            samples.close()
