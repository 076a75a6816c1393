#!/usr/bin/env python3
"""What the flight recorder's store costs: bytes on disk per stored value, per hour and
per day, the CPU a tick's writing adds, and the time to read one tick back.

A synthetic v2 host (tests.helpers.synth) with N Docker-like cgroups whose counters move
every tick as a busy container's do (CPU time, memory and its memory.stat counters, IO,
pids, pressure: each with noise), read by the real Sampler, tick after tick without
waiting (the records' rates and time stamps change every tick, as at 1 s); each tick's
records go through the store's sink into a store in a temporary folder. CPU is
time.process_time() (this process only: the load of other processes on the machine does
not count) around Sampler.tick() and around the sink's write.

    python3 bench/store_cost.py                 # 100 cgroups, 600 ticks, figures for an hour
    python3 bench/store_cost.py --cgroups 1000 --ticks 60
    python3 bench/store_cost.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.helpers import synth  # noqa: E402

from cgstat.outputs.store import StoreSink  # noqa: E402
from cgstat.pipeline.warner import Warner  # noqa: E402
from cgstat.pipeline.sampler import Sampler  # noqa: E402
from cgstat.store.reader import StoreReader  # noqa: E402
from cgstat.text import dumps_record  # noqa: E402

_STAT_KEYS = ("anon", "file", "kernel", "kernel_stack", "pagetables", "sock", "shmem", "file_mapped",
              "file_dirty", "file_writeback", "swapcached", "anon_thp", "inactive_anon", "active_anon",
              "inactive_file", "active_file", "unevictable", "slab_reclaimable", "slab_unreclaimable", "slab",
              "workingset_refault_anon", "workingset_refault_file", "workingset_activate_anon",
              "workingset_activate_file", "pgfault", "pgmajfault", "pgrefill", "pgscan", "pgsteal",
              "pgactivate", "pgdeactivate", "pglazyfree", "thp_fault_alloc")


def _leaves(value: object) -> int:
    """The values of a record: its numbers, strings, booleans and nulls (an empty list or
    object counts as one)."""
    if isinstance(value, dict):
        return sum(map(_leaves, value.values())) or 1
    if isinstance(value, (list, tuple)):
        return sum(map(_leaves, value)) or 1
    return 1


class Busy:
    """One cgroup's counters, moved every tick."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.usage = rng.randrange(10 ** 9, 10 ** 11)
        self.user_share = rng.uniform(0.6, 0.9)
        self.throttled = 0
        self.periods = 0
        self.memory = rng.randrange(100, 4000) << 20
        self.stat = {k: rng.randrange(0, 1 << 30) for k in _STAT_KEYS}
        self.rbytes = rng.randrange(0, 1 << 34)
        self.wbytes = rng.randrange(0, 1 << 34)
        self.rios = self.rbytes // 65536
        self.wios = self.wbytes // 65536
        self.pressure = 0
        self.pids = rng.randrange(5, 200)
        self.load = rng.uniform(0.2, 4.0)  # cores

    def step(self) -> dict:
        r = self.rng
        used = int(self.load * 1e6 * r.uniform(0.8, 1.2))
        self.usage += used
        self.periods += 10
        self.throttled += r.choice((0, 0, 1, 2))
        self.memory = max(1 << 20, self.memory + r.randrange(-(1 << 22), 1 << 22))
        for k in self.stat:
            if r.random() < 0.6:
                self.stat[k] += r.randrange(0, 1 << 16)
        self.rbytes += r.randrange(0, 1 << 22)
        self.wbytes += r.randrange(0, 1 << 22)
        self.rios += r.randrange(0, 64)
        self.wios += r.randrange(0, 64)
        self.pressure += r.randrange(0, 20000)
        self.pids = max(1, self.pids + r.choice((-1, 0, 0, 0, 1)))
        user = int(self.usage * self.user_share)
        avg = r.uniform(0, 30)
        return {
            "cpu.stat": f"usage_usec {self.usage}\nuser_usec {user}\nsystem_usec {self.usage - user}\n"
                        f"nr_periods {self.periods}\nnr_throttled {self.throttled}\n"
                        f"throttled_usec {self.throttled * 3000}\n",
            "memory.current": f"{self.memory}\n",
            "memory.stat": "".join(f"{k} {v}\n" for k, v in self.stat.items()),
            "io.stat": f"254:0 rbytes={self.rbytes} wbytes={self.wbytes} rios={self.rios} wios={self.wios} "
                       "dbytes=0 dios=0\n",
            "pids.current": f"{self.pids}\n",
            "cpu.pressure": f"some avg10={avg:.2f} avg60={avg / 2:.2f} avg300={avg / 4:.2f} total={self.pressure}\n"
                            f"full avg10=0.00 avg60=0.00 avg300=0.00 total={self.pressure // 3}\n",
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cgroups", type=int, default=100)
    ap.add_argument("--ticks", type=int, default=600)
    ap.add_argument("--no-sync", action="store_true", help="no fdatasync per tick")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(29)
    work = tempfile.mkdtemp(prefix="cgstat-store-bench-")
    try:
        root = os.path.join(work, "host")
        synth.v2_host(root)
        groups = []
        for i in range(args.cgroups):
            cid = "%064x" % rng.getrandbits(256)
            path = f"/system.slice/docker-{cid}.scope"
            synth.v2_cgroup(root, path)
            groups.append((os.path.join(root, "sys/fs/cgroup", path.lstrip("/")), Busy(rng)))
        sampler = Sampler(host_root=root, match="docker", warner=Warner(stream=open(os.devnull, "w")), gpu=False)
        store = os.path.join(work, "store")
        sink = StoreSink(store, None, None, warn=None, sync=not args.no_sync)
        sink.open()
        tick_cpu = write_cpu = 0.0
        json_bytes = values = records = 0

        def move() -> None:
            for folder, busy in groups:
                for name, content in busy.step().items():
                    with open(os.path.join(folder, name), "w") as f:
                        f.write(content)

        move()
        sampler.tick()
        for _ in range(args.ticks):
            move()
            c0 = time.process_time()
            batch = sampler.tick()
            c1 = time.process_time()
            sink.write(batch)
            c2 = time.process_time()
            tick_cpu += c1 - c0
            write_cpu += c2 - c1
            for record in batch:
                line = dumps_record(record) or b""
                json_bytes += len(line) + 1
                values += _leaves(record)
                records += 1
        sink.close()
        sampler.close()
        disk = sum(os.path.getsize(os.path.join(store, n)) for n in os.listdir(store))
        reader = StoreReader(store)
        span = reader.span()
        assert span is not None
        c0 = time.process_time()
        w0 = time.perf_counter()
        tick = reader.at((span[0] + span[1]) / 2)
        read_cpu, read_wall = time.process_time() - c0, time.perf_counter() - w0
        reader.close()
        per_tick = disk / args.ticks
        out = {
            "cgroups": args.cgroups, "ticks": args.ticks, "records": records,
            "values_per_record": values / records, "json_bytes_per_record": json_bytes / records,
            "store_bytes": disk, "bytes_per_value": disk / values,
            "mb_per_hour_at_1s": per_tick * 3600 / 1e6, "gb_per_day_at_1s": per_tick * 86400 / 1e9,
            "json_mb_per_hour": json_bytes / args.ticks * 3600 / 1e6,
            "tick_cpu_ms": tick_cpu / args.ticks * 1000, "store_write_cpu_ms": write_cpu / args.ticks * 1000,
            "store_write_share": write_cpu / tick_cpu, "read_one_tick_ms": read_wall * 1000,
            "read_one_tick_cpu_ms": read_cpu * 1000, "read_records": len(tick.lines),
            "load": os.getloadavg()[0],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['cgroups']} cgroups, {out['ticks']} ticks (load {out['load']:.1f}): "
              f"{out['values_per_record']:.0f} values a record, {out['json_bytes_per_record']:.0f} B of JSON\n"
              f"store: {out['bytes_per_value']:.3f} B a value, {out['mb_per_hour_at_1s']:.1f} MB an hour at 1 s "
              f"({out['gb_per_day_at_1s']:.2f} GB a day; the JSON lines: {out['json_mb_per_hour']:.0f} MB an hour)\n"
              f"CPU: tick {out['tick_cpu_ms']:.1f} ms, store write {out['store_write_cpu_ms']:.2f} ms "
              f"({100 * out['store_write_share']:.1f} %); one tick read back in {out['read_one_tick_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
