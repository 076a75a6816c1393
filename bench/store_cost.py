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
    python3 bench/store_cost.py --ab --cgroups 1000   # what --store adds to a real stream

`--ab`: the whole cost of recording as a user pays it: real `cgstat stream` processes
(stdout to /dev/null) over the same synthetic host, with and without `--store`, run in
turn (A B, then B A, ...) so that the machine's load falls on both alike. A thread of
this process moves the host's clock (proc/uptime, so `ts` and the intervals change every
tick, as on a host of idle containers) and, with `--busy`, every counter of every cgroup
(written in place: a read may now and then meet a file half written, on both sides). CPU a tick is (user+sys of a --count 1+T run - that
of a --count 1 run) / T (start-up and the first tick cancel out), peak RSS the runs'
largest; medians over the repetitions, and the median of the pairs' differences.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tests.helpers import synth  # noqa: E402

from cgstat.outputs.store import StoreSink  # noqa: E402
from cgstat.diagnostics import Warner  # noqa: E402
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


def _host(work: str, n: int, rng: random.Random) -> list:
    root = os.path.join(work, "host")
    synth.v2_host(root)
    groups = []
    for _ in range(n):
        cid = "%064x" % rng.getrandbits(256)
        path = f"/system.slice/docker-{cid}.scope"
        synth.v2_cgroup(root, path)
        groups.append((os.path.join(root, "sys/fs/cgroup", path.lstrip("/")), Busy(rng)))
    return groups


def _move(groups: list) -> None:
    for folder, busy in groups:
        for name, content in busy.step().items():
            with open(os.path.join(folder, name), "w") as f:
                f.write(content)


def ab(args: argparse.Namespace) -> dict:
    """`stream` (stdout to /dev/null) against the same with `--store`, interleaved."""
    import statistics

    import tick_cost  # noqa: E402  (bench/: run_rusage, the rusage launcher)

    work = tempfile.mkdtemp(prefix="cgstat-store-bench-")
    here = os.getcwd()
    try:
        groups = _host(work, args.cgroups, random.Random(29))
        _move(groups)
        tick_cost.compile_c(work)
        root = os.path.join(work, "host")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        stop = threading.Event()

        def mover() -> None:
            uptime = 1000.0
            while not stop.wait(args.interval):
                uptime += args.interval
                synth.write(os.path.join(root, "proc/uptime.new"), f"{uptime:.2f} 0.00\n")
                os.replace(os.path.join(root, "proc/uptime.new"), os.path.join(root, "proc/uptime"))
                if args.busy:
                    _move(groups)

        thread = threading.Thread(target=mover, daemon=True)
        thread.start()

        def argv(k: int, store: bool, n: int) -> list:
            out = [sys.executable, "-m", "cgstat", "--host-root", root, "stream", "--interval", str(args.interval),
                   "--count", str(k), "--match", "docker", "--no-events"]  # stdout: /dev/null
            return out + (["--store", os.path.join(work, f"store-{n}-{k}")] if store else [])

        # each checkout's cgstat (this one, and --before's), without and with the store
        trees = [("", env["PYTHONPATH"])] + ([("before ", os.path.abspath(args.before))] if args.before else [])
        variants = [(label, path, store) for label, path in trees for store in (False, True)]
        cpu: dict = {v: [] for v in variants}
        rss: dict = {v: [] for v in variants}
        n = 0
        for rep in range(args.reps):
            for variant in (variants if rep % 2 == 0 else variants[::-1]):
                got = []
                for k in (1, 1 + args.ab_ticks):
                    n += 1
                    os.chdir(variant[1])  # `python -m` looks in the working folder first
                    code, used, _, maxrss, err = tick_cost.run_rusage(argv(k, variant[2], n),
                                                                      env=dict(env, PYTHONPATH=variant[1]))
                    if code != 0:
                        raise RuntimeError(f"stream exited {code}: {err.strip()}")
                    got.append(used)
                    rss[variant].append(maxrss / 1024)
                cpu[variant].append((got[1] - got[0]) / args.ab_ticks * 1000)
        stop.set()
        thread.join()
        out: dict = {"cgroups": args.cgroups, "busy": args.busy, "reps": args.reps, "ticks": args.ab_ticks,
                     "interval_s": args.interval, "load": os.getloadavg()[0]}
        for label, path in trees:
            plain, stored = cpu[(label, path, False)], cpu[(label, path, True)]
            diffs = [b - a for a, b in zip(plain, stored)]
            key = label.strip().replace(" ", "_") + "_" if label else ""
            out.update({
                key + "stream_cpu_ms": statistics.median(plain), key + "stream_store_cpu_ms": statistics.median(stored),
                key + "store_adds_ms": statistics.median(diffs),
                key + "store_adds_share": statistics.median(diffs) / statistics.median(plain),
                key + "stream_cpu_samples_ms": plain, key + "stream_store_cpu_samples_ms": stored,
                key + "stream_peak_rss_mib": max(rss[(label, path, False)]),
                key + "stream_store_peak_rss_mib": max(rss[(label, path, True)])})
        return out
    finally:
        os.chdir(here)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cgroups", type=int, default=100)
    ap.add_argument("--ticks", type=int, default=600)
    ap.add_argument("--no-sync", action="store_true", help="no fdatasync per tick")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ab", action="store_true", help="real streams with and without --store (see above)")
    ap.add_argument("--reps", type=int, default=5, help="--ab: pairs of runs")
    ap.add_argument("--ab-ticks", type=int, default=10, help="--ab: ticks a run, past its first")
    ap.add_argument("--interval", type=float, default=0.5, help="--ab: the streams' --interval")
    ap.add_argument("--busy", action="store_true", help="--ab: every counter moves every tick")
    ap.add_argument("--before", metavar="DIR", help="--ab: also a folder holding another cgstat package (an "
                                                     "earlier checkout), its runs interleaved with this one's")
    args = ap.parse_args()
    if args.ab:
        out = ab(args)
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            print(f"{out['cgroups']} {'busy' if out['busy'] else 'idle'} cgroups, {out['reps']} pairs of "
                  f"{out['ticks']} ticks (load {out['load']:.1f}):")
            for key in ("", "before_"):
                if key + "stream_cpu_ms" in out:
                    print(f"  {key or 'this '}stream {out[key + 'stream_cpu_ms']:.1f} ms CPU a tick, with --store "
                          f"{out[key + 'stream_store_cpu_ms']:.1f} ms; --store adds {out[key + 'store_adds_ms']:.1f} "
                          f"ms ({100 * out[key + 'store_adds_share']:.0f} %, median of the pairs); peak RSS "
                          f"{out[key + 'stream_peak_rss_mib']:.1f} and {out[key + 'stream_store_peak_rss_mib']:.1f} MiB")
        return 0
    rng = random.Random(29)
    work = tempfile.mkdtemp(prefix="cgstat-store-bench-")
    try:
        root = os.path.join(work, "host")
        groups = _host(work, args.cgroups, rng)
        sampler = Sampler(host_root=root, match="docker", warner=Warner(stream=open(os.devnull, "w")), gpu=False)
        store = os.path.join(work, "store")
        sink = StoreSink(store, None, None, warn=None, sync=not args.no_sync)
        sink.open()
        tick_cpu = write_cpu = 0.0
        json_bytes = values = records = 0

        def move() -> None:
            _move(groups)

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
