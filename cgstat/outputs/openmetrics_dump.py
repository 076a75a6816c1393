"""Many ticks as one OpenMetrics exposition (`cgstat dump --format openmetrics`), for
`promtool tsdb create-blocks-from openmetrics`: each family once, its header first, then
each series' samples together in time order (OpenMetrics 1.0 forbids a family twice and
a series' samples apart), each stamped with its record's time as the exporter's are,
then `# EOF`. Samples wait in a temporary file per family until the last tick is
rendered; a family is then sorted by series in memory, one at a time (a few hundred MB
at most for a day of 100 containers: dump spans of hours). A sample with no time stamp
(cgstat's own counts) is kept from the first tick only."""

from __future__ import annotations

import tempfile
from typing import IO, Dict, Iterable, Iterator, List, Sequence, Tuple

from cgstat.outputs.prometheus import OPENMETRICS, render


def _series(line: bytes) -> bytes:
    brace = line.find(b"{")
    space = line.find(b" ")
    if 0 <= brace < space:
        return line[: line.rfind(b"}") + 1]
    return line[:space]


def _timed(line: bytes) -> bool:
    return line[len(_series(line)):].strip().count(b" ") >= 1


def exposition(ticks: Iterable[Sequence[object]]) -> Iterator[bytes]:
    families: Dict[bytes, Tuple[List[bytes], IO[bytes]]] = {}
    first = True
    try:
        for records in ticks:
            current = None
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
                elif current is not None and (first or _timed(line)):
                    current[1].write(line)
            first = False
        for head, samples in families.values():
            samples.seek(0)
            lines = samples.read().splitlines(keepends=True)
            lines.sort(key=_series)  # stable: each series' samples stay in time order
            yield b"".join(head) + b"".join(lines)
        yield b"# EOF\n"
    finally:
        for _, samples in families.values():
            samples.close()
