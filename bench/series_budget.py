#!/usr/bin/env python3
"""What the series budget does: series per container by metric group, the endpoint's series
at 100 and 1,000 cgroups with and without `--max-series`, and the render's CPU time.

    python3 bench/series_budget.py                     # 100 and 1,000 cgroups, tables
    python3 bench/series_budget.py --cgroups 1000 --max-series 10000 --reps 9
    python3 bench/series_budget.py --against main~3     # and the fold as it was there, interleaved

The synthetic host of bench/prometheus_cost.py (every cgroup a Docker container with a
name, an image and 3 labels, one block device, PSI). Render CPU: process time of one
`Exporter.publish()` (text format), median of --reps taken in turn after 3 warm-up
publishes each, for: no
budget (the exporter as it was), a budget not reached (the default 100,000: what counting
costs), and --max-series (folding); with --against REF, also --max-series with
cgstat/outputs/prometheus/budget.py as it is at git REF (bench/against.py), in the same turns.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from prometheus_cost import build_host  # noqa: E402

from cgstat.contract import fields  # noqa: E402
from cgstat.outputs.prometheus.budget import SeriesBudget  # noqa: E402
from cgstat.outputs.prometheus.exporter import Exporter  # noqa: E402
from cgstat.pipeline.sampler import Sampler  # noqa: E402
from cgstat.diagnostics import Warner  # noqa: E402

GROUP = {f.name: f.group for f in fields.FAMILIES}


def _series(text: bytes) -> Counter:
    """Series by group."""
    by = Counter()
    for line in text.split(b"\n"):
        if line and not line.startswith(b"#"):
            name = line.split(b"{", 1)[0].split(b" ", 1)[0].decode()
            by[GROUP.get(name, "?")] += 1
    return by


def _cgroups_only(text: bytes) -> bytes:
    """The exposition without the exporter's own timings (they differ from one exporter to
    another), to compare two folds' bytes."""
    skip = (b"cgstat_render_duration_seconds ", b"cgstat_tick_duration_seconds ", b"cgstat_last_tick_timestamp_seconds ")
    return b"\n".join(line for line in text.split(b"\n") if not line.startswith(skip))


def measure(n: int, max_series: int, reps: int, against: str = "") -> dict:
    with tempfile.TemporaryDirectory() as root:
        build_host(root, n)
        sampler = Sampler(host_root=root, warner=Warner(io.StringIO()))
        sampler.warm_up()
        records = sampler.tick()
        out = {"cgroups": n}
        labels = ("none", "100000", str(max_series))
        budgets = [None, SeriesBudget(100000), SeriesBudget(max_series)]
        if against:
            from against import module_at

            labels += ("at " + against,)
            budgets.append(module_at(against, "cgstat/outputs/prometheus/budget.py", "cgstat/outputs/prometheus_budget.py").SeriesBudget(max_series))
        exporters = [Exporter("127.0.0.1:0", Warner(io.StringIO()), budget=budget) for budget in budgets]
        times = {label: [] for label in labels}
        try:
            for exporter in exporters:
                for _ in range(3):
                    exporter.publish(records, 0.01)
            for _ in range(reps):  # in turn: the machine's load falls on all three alike
                for label, exporter in zip(labels, exporters):
                    t = time.process_time()
                    exporter.publish(records, 0.01)
                    times[label].append(time.process_time() - t)
            for label, exporter in zip(labels, exporters):
                text = exporter.server._snapshot.body(False, False)[0]  # what /metrics serves
                groups = _series(text)
                out[label] = {"series": sum(groups.values()),
                              "render_cpu_ms": round(statistics.median(times[label]) * 1000, 1),
                              "bytes": len(text), "groups": dict(groups), "body": _cgroups_only(text)}
        finally:
            for exporter in exporters:
                exporter.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cgroups", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--max-series", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--against", metavar="REF", default="",
                    help="also fold with cgstat/outputs/prometheus/budget.py as it is at git REF, interleaved")
    args = ap.parse_args()
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    results = [measure(n, args.max_series, args.reps, args.against) for n in args.cgroups]
    m = str(args.max_series)
    print("| cgroups | series | series, --max-series %s | render CPU: no budget | budget not reached | "
          "--max-series %s | bytes / with budget |" % (m, m))
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print("| %d | %d | %d | %.1f ms | %.1f ms | %.1f ms | %s / %s |" % (
            r["cgroups"], r["none"]["series"], r[m]["series"], r["none"]["render_cpu_ms"],
            r["100000"]["render_cpu_ms"], r[m]["render_cpu_ms"], format(r["none"]["bytes"], ","),
            format(r[m]["bytes"], ",")))
    if args.against:
        print("\n| cgroups | --max-series %s at %s | here | bytes alike |" % (m, args.against))
        print("|---:|---:|---:|---|")
        for r in results:
            there = r["at " + args.against]
            print("| %d | %.1f ms | %.1f ms | %s |" % (r["cgroups"], there["render_cpu_ms"], r[m]["render_cpu_ms"],
                                                     there["body"] == r[m]["body"]))
    last = results[-1]
    print("\nseries per container by group (unfolded, %d cgroups):" % last["cgroups"])
    for group in fields.METRIC_GROUPS:
        count = last["none"]["groups"].get(group, 0)
        print("  %-10s %6.2f" % (group, count / last["cgroups"]))
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
