#!/usr/bin/env python3
"""What `cgstat story` costs: the time to tell one workload's life from a store of N
workloads over T ticks (the store read back whole, each tick decoded; only the lines
that name the workload parsed as JSON).

The store is made first (not timed): N copies of a made-up job (tests/helpers/history.py:
a cgroup record of the golden v2 file whose CPU, memory and throttling move every tick),
each its own unit, T ticks 1 s apart, written by the store's Recorder. Then story's
reading and summing (app/story.py: store_lines, gather, summary) runs R times; CPU is
time.process_time(), wall time time.perf_counter(); the medians are printed.

    python3 bench/story_cost.py                       # 100 workloads, 600 ticks
    python3 bench/story_cost.py --workloads 1000 --ticks 60 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import orjson  # noqa: E402

from cgstat.app.story import gather, store_lines, summary  # noqa: E402
from cgstat.store.writer import Recorder  # noqa: E402
from cgstat.timestamps import rfc3339  # noqa: E402
from tests.helpers import history as H  # noqa: E402


def make_store(path: str, workloads: int, ticks: int) -> int:
    rec = Recorder(path, None, None)
    rec.open()
    size = 0
    for i in range(ticks):
        base = H.job_record(i % H.KILL)
        base["ts"] = rfc3339(H.T0 + i)
        lines = []
        for n in range(workloads):
            base["cgroup"] = "/system.slice/job-%d.service" % n
            base["unit"] = "job-%d.service" % n
            line = orjson.dumps(base)
            size += len(line) + 1
            lines.append((("cgroup", base["cgroup"]), line))
        rec.write(H.T0 + i, lines)
    rec.close()
    return size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=100)
    ap.add_argument("--ticks", type=int, default=600)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cgstat-story-bench-") as tmp:
        store = os.path.join(tmp, "s")
        json_bytes = make_store(store, args.workloads, args.ticks)
        cpu, wall = [], []
        for _ in range(args.reps):
            c0, w0 = time.process_time(), time.perf_counter()
            lives = gather(store_lines(store, "0", None, lambda k, m: None), "job-7.service")
            told = summary(lives[0])
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        assert told["samples"] == args.ticks, told["samples"]
    out = {"workloads": args.workloads, "ticks": args.ticks, "records": args.workloads * args.ticks,
           "json_mb": round(json_bytes / 1e6, 1), "cpu_s_median": round(statistics.median(cpu), 3),
           "wall_s_median": round(statistics.median(wall), 3),
           "us_per_record": round(1e6 * statistics.median(cpu) / (args.workloads * args.ticks), 2),
           "load": round(os.getloadavg()[0], 1)}
    if args.json:
        print(json.dumps(out))
    else:
        print("story of one workload in a store of %(records)d records (%(workloads)d workloads x %(ticks)d "
              "ticks, %(json_mb)s MB of JSON lines): %(cpu_s_median)s s CPU, %(wall_s_median)s s wall (medians), "
              "%(us_per_record)s us CPU a record; load %(load)s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
