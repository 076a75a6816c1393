#!/usr/bin/env python3
"""A week of recording, fast-forwarded: is the writer's memory flat, does retention keep
the store bounded, and how long does reading one tick of a week-old store take?

Ticks are written as fast as they are made, stamped `--step` seconds apart (a week of
time in minutes), each with `--records` records whose counters move (the golden records
of a recorded tree), into a store with `--retain` and `--max-size`, no fdatasync (the
disk's flushes are not what is measured). Every simulated day: the process's RSS (from
/proc/self/statm) and the store's size. At the end: the time to find and read one tick
at random times of the week, and the CPU it took.

    python3 bench/store_soak.py                    # 7 days, a tick every 5 s, 20 records
    python3 bench/store_soak.py --step 1 --records 100   # the real thing (an hour or more)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cgstat.store.reader import StoreReader  # noqa: E402
from cgstat.store.writer import Recorder  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "v2-fields",
                      "golden.jsonl")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--step", type=float, default=5.0)
    ap.add_argument("--records", type=int, default=20)
    ap.add_argument("--retain", type=float, default=7 * 86400)
    ap.add_argument("--max-size", type=int, default=2 << 30)
    args = ap.parse_args()
    with open(GOLDEN, "rb") as f:
        base = [orjson.loads(line) for line in f][: args.records]
    rng = random.Random(29)
    work = tempfile.mkdtemp(prefix="cgstat-store-soak-")
    start = 1796169600.0  # 2026-12-02T00:00:00Z
    said = []
    try:
        store = os.path.join(work, "store")
        rec = Recorder(store, args.retain, args.max_size, lambda k, m: said.append(m), sync=False)
        rec.open()
        ticks = int(args.days * 86400 / args.step)
        per_day = int(86400 / args.step)
        c0 = time.process_time()
        print(f"{ticks} ticks of {len(base)} records, {args.step:g} s apart (load {os.getloadavg()[0]:.1f})")
        for i in range(ticks):
            wall_s = start + i * args.step
            lines = []
            for n, record in enumerate(base):
                cpu = record.get("cpu")
                if isinstance(cpu, dict):
                    cpu["usage_seconds_total"] = round(cpu.get("usage_seconds_total") or 0.0, 6) + rng.random()
                record["ts"] = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(wall_s))
                lines.append((n, orjson.dumps(record)))
            rec.write(wall_s, lines)
            if (i + 1) % per_day == 0:
                size = sum(os.path.getsize(os.path.join(store, n)) for n in os.listdir(store))
                print(f"day {(i + 1) // per_day}: RSS {rss_mib():.1f} MiB, store {size / 1e6:.1f} MB in "
                      f"{len(os.listdir(store)) // 2} shards, {1000 * (time.process_time() - c0) / (i + 1):.2f} ms "
                      "CPU a tick")
        rec.close()
        reads = []
        for _ in range(5):
            at = start + rng.random() * ticks * args.step
            w0, p0 = time.perf_counter(), time.process_time()
            with StoreReader(store) as reader:
                tick = reader.at(at)
            reads.append((time.perf_counter() - w0, time.process_time() - p0, len(tick.lines)))
        print("one tick read from the week's store: " +
              ", ".join(f"{1000 * w:.0f} ms ({1000 * c:.0f} ms CPU, {n} records)" for w, c, n in reads))
        print(f"{len(said)} lines said, e.g. {said[:1]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
