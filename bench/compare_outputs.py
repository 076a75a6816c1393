#!/usr/bin/env python3
"""What two checkouts of cgstat write for the same recorded trees: every key path of every
record, every value, every Prometheus family and series, side by side.

    python3 bench/compare_outputs.py OLD_CHECKOUT [NEW_CHECKOUT]   # NEW: this one

For each tree of tests/fixtures (t0, then t1, with one --state file) each checkout runs
`python -m cgstat once --host-root T --state F --all`; the records are then rendered by that
checkout's own exporter (cgstat.outputs.prometheus.exposition.render), with a cgroup and a GPU record
holding every field of that checkout's table (tests/helpers/fieldtable.py) added, so that the
families a recorded tree does not fill (GPU, cpuset, IO limits) are compared too. Reported:
key paths and series (`name{label,names}`) only one side has, and the values of paths both
have that differ, and the value of every sample both expositions have. Exit status 1 when
the new checkout lost a key path or a series, or a value changed; what it adds is listed
and allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, Iterator, List, Set, Tuple

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run inside a checkout: records on stdin (JSON lines), the exposition's series on stdout.
_RENDER = r"""
import json, re, sys
sys.path[:0] = ["tests/helpers", "tests"]  # fieldtable.py: tests/helpers/ since the tests moved
from cgstat.contract import fields
from cgstat.outputs.prometheus import exposition as prometheus
from fieldtable import example
records = [json.loads(line) for line in sys.stdin if line.strip()]
records += [example(fields.RECORD), example(fields.GPU_RECORD)]
text = prometheus.render(records, prometheus.TEXT, {"version": "t", "ticks_total": 1, "tick_duration_seconds": 0.5,
                         "render_duration_seconds": 0.1, "last_tick_timestamp_seconds": 1.0}).decode()
series = set()
for line in text.splitlines():
    if line.startswith("# TYPE "):
        series.add("family " + " ".join(line.split()[2:4]))
    elif line and not line.startswith("#"):
        m = re.match(r'([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? ', line)
        labels = sorted(set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', m.group(2) or "")))
        fixed = sorted(set(re.findall(r'((?:failure_type|scope|event|operation|reason|type)="[^"]*")', m.group(2) or "")))
        series.add("%s{%s}%s" % (m.group(1), ",".join(labels), "".join(" " + f for f in fixed)))
        head, _, rest = line.rpartition("} ") if "{" in line else (line.split(" ")[0], " ", line.split(" ", 1)[1])
        series.add("= %s} %s" % (head, rest.split(" ")[0]))  # the sample's value, its timestamp aside
print("\n".join(sorted(series)))
"""


def _run(checkout: str, args: List[str], stdin: str = "") -> str:
    env = dict(os.environ, PYTHONPATH=checkout)
    env.pop("CGSTAT_HOST_ROOT", None)
    proc = subprocess.run([sys.executable] + args, cwd=checkout, env=env, input=stdin.encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if proc.returncode != 0:
        sys.exit("%s: %s exited %d: %s" % (checkout, args, proc.returncode, proc.stderr.decode()[-2000:]))
    return proc.stdout.decode()


def _paths(value: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """(path, leaf value) of a record: a list's items as [i]... and as [] for the shape."""
    if isinstance(value, dict):
        if prefix:
            yield prefix, "{}"
        for key, item in value.items():
            yield from _paths(item, prefix + "." + key if prefix else key)
    elif isinstance(value, list):
        yield prefix, "[]"
        for i, item in enumerate(value):
            yield from _paths(item, "%s[%d]" % (prefix, i))
    else:
        yield prefix, value


def outputs(checkout: str) -> Tuple[Dict[str, Any], Set[str], Dict[str, str]]:
    """Every (tree, record, path) -> value, and the exposition's series, of one checkout."""
    fixtures = os.path.join(HERE, "tests", "fixtures")
    values: Dict[str, Any] = {}
    lines: List[str] = []
    for tree in sorted(os.listdir(fixtures)):
        if not os.path.isdir(os.path.join(fixtures, tree, "t1")):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, "state")
            for step in ("t0", "t1"):
                out = _run(checkout, ["-m", "cgstat", "once", "--host-root", os.path.join(fixtures, tree, step),
                                      "--state", state, "--all"])
                lines += out.splitlines()
                for line in out.splitlines():
                    record = json.loads(line)
                    where = "%s/%s %s %s" % (tree, step, record.get("type"), record.get("cgroup"))
                    for path, value in _paths(record):
                        values["%s: %s" % (where, path)] = value
    series: Set[str] = set()
    samples: Dict[str, str] = {}
    for line in _run(checkout, ["-c", _RENDER], "\n".join(lines) + "\n").splitlines():
        if line.startswith("= "):
            head, _, value = line[2:].rpartition(" ")
            samples[head] = value
        else:
            series.add(line)
    return values, series, samples


def main(argv: List[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    old, new = os.path.abspath(argv[0]), os.path.abspath(argv[1] if len(argv) == 2 else HERE)
    old_values, old_series, old_samples = outputs(old)
    new_values, new_series, new_samples = outputs(new)
    lost = sorted(set(old_values) - set(new_values))
    added = sorted(set(new_values) - set(old_values))
    changed = sorted(p for p in set(old_values) & set(new_values) if old_values[p] != new_values[p])
    paths = lambda keys: sorted({k.split(": ", 1)[1] for k in keys})  # noqa: E731 - the paths, trees aside
    print("records: %d values compared; key paths lost %d, added %d; values changed %d"
          % (len(set(old_values) & set(new_values)), len(lost), len(added), len(changed)))
    for title, keys in (("lost", lost), ("added", added), ("changed", changed)):
        for path in paths(keys):
            print("  %s: %s" % (title, path))
    moved = sorted(k for k in set(old_samples) & set(new_samples) if old_samples[k] != new_samples[k])
    print("prometheus: %d families/series compared; lost %d, added %d; %d samples compared, values changed %d"
          % (len(old_series & new_series), len(old_series - new_series), len(new_series - old_series),
             len(set(old_samples) & set(new_samples)), len(moved)))
    for title, names in (("lost", old_series - new_series), ("added", new_series - old_series), ("changed", moved)):
        for name in sorted(names):
            print("  %s: %s" % (title, name))
    return 1 if lost or changed or old_series - new_series or moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
