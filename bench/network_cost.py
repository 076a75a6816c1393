#!/usr/bin/env python3
"""What reading network per workload costs a tick: files read and CPU time.

Makes NS network namespaces (`ip netns add cgstat-bench-net-<rand>-<i>`, default 4), starts
`sleep` processes inside them (`ip netns exec`), one per workload key, spread round-robin,
and gives every tenth key a process in the host namespace (our own PID: host networking,
as a systemd service), then for each size N (default 100 and 1000 keys) times

* cgstat: NetnsReader.read({key: [pid]}): one stat of /proc/<pid>/ns/net per key, one read
  of /proc/<pid>/net/dev per namespace (host keys: none);
* naive: a read and parse of /proc/<pid>/net/dev for every key's process (what per-process
  reading would cost), for comparison;

over TICKS ticks, CPU = time.process_time() (user + sys of this process) per tick, median
of REPS. No traffic is made; the namespaces have only lo, which costs the same to read as
a veth. Everything is removed at the end, also on failure or Ctrl-C: only processes and
namespaces this script made are touched.

Run as root:  python3 bench/network_cost.py [--sizes 100,1000] [--namespaces 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from cgstat.kernel.hostfs import HostFS, read_bytes  # noqa: E402
from cgstat.kernel.netdev import parse_net_dev  # noqa: E402
from cgstat.kernel.netns import NetnsReader  # noqa: E402

PREFIX = "cgstat-bench-net-"


class Bench:
    def __init__(self):
        self.tag = secrets.token_hex(3)
        self.names = []
        self.groups = []  # Popen of `ip netns exec NS sh` (own session), killed by their own PGID

    def add_ns(self, i: int) -> str:
        name = f"{PREFIX}{self.tag}-{i}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        self.names.append(name)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        return name

    def sleepers(self, ns: str, count: int):
        """`count` sleep processes in `ns` (bounded: they end by themselves after 10 min)."""
        script = f'for i in $(seq {count}); do sleep 600 & echo $!; done; echo end; wait'
        p = subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c", script], stdout=subprocess.PIPE,
                             universal_newlines=True, start_new_session=True)
        self.groups.append(p)
        pids = []
        for line in p.stdout:
            if line.strip() == "end":
                break
            pids.append(int(line))
        return pids

    def close(self):
        for p in self.groups:
            try:
                os.killpg(p.pid, signal.SIGTERM)  # the group this script started
            except ProcessLookupError:
                pass
            p.wait()
        self.groups = []
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], check=False)
        self.names = []


def naive_tick(fs: HostFS, members):
    for pids in members.values():
        for pid in pids:
            try:
                parse_net_dev(read_bytes(fs.path(f"/proc/{pid}/net/dev")))
            except Exception:
                pass


def measure(fn, ticks: int, reps: int):
    per_tick = []
    for _ in range(reps):
        t0 = time.process_time()
        for _ in range(ticks):
            fn()
        per_tick.append((time.process_time() - t0) / ticks)
    return statistics.median(per_tick), per_tick


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--namespaces", type=int, default=4)
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("network_cost: needs root and iproute2 (`ip`)", file=sys.stderr)
        return 1
    bench = Bench()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(130))
    results = []
    try:
        biggest = max(sizes)
        in_ns = biggest - biggest // 10
        per_ns = -(-in_ns // args.namespaces)
        pools = [bench.sleepers(bench.add_ns(i), per_ns) for i in range(args.namespaces)]
        fs = HostFS("/")
        for n in sizes:
            members = {}
            for k in range(n):
                if k % 10 == 9:
                    members[f"/system.slice/svc-{k}.service"] = [os.getpid()]
                else:
                    pool = pools[k % args.namespaces]
                    members[f"/docker/c{k}"] = [pool[(k // args.namespaces) % len(pool)]]
            reader = NetnsReader(fs)
            out = reader.read(members)
            ok = sum(1 for r in out.values() if r.network is not None)
            host = sum(1 for r in out.values() if r.problem is not None and r.problem.error == "host_namespace")
            stats = reader.last
            cpu, samples = measure(lambda reader=reader, members=members: reader.read(members), args.ticks, args.reps)
            naive_cpu, naive_samples = measure(lambda members=members: naive_tick(fs, members), args.ticks, args.reps)
            results.append({
                "keys": n, "namespaces": stats.namespaces, "keys_with_network": ok, "keys_host": host,
                "net_dev_reads_per_tick": stats.net_dev_reads, "ns_stats_per_tick": stats.ns_stats,
                "cpu_ms_per_tick": round(cpu * 1000, 3), "cpu_ms_samples": [round(s * 1000, 3) for s in samples],
                "naive_net_dev_reads_per_tick": sum(len(p) for p in members.values()),
                "naive_cpu_ms_per_tick": round(naive_cpu * 1000, 3),
                "naive_cpu_ms_samples": [round(s * 1000, 3) for s in naive_samples],
            })
    finally:
        bench.close()
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "results": results}, indent=1))
        return 0
    print(f"python {sys.version.split()[0]}, {args.namespaces} namespaces, {args.ticks} ticks x {args.reps} reps")
    print(f"{'keys':>6} {'host':>5} {'net/dev reads':>14} {'ns stats':>9} {'CPU ms/tick':>12}"
          f" | {'naive reads':>11} {'naive CPU ms':>13}")
    for r in results:
        print(f"{r['keys']:>6} {r['keys_host']:>5} {r['net_dev_reads_per_tick']:>14} {r['ns_stats_per_tick']:>9}"
              f" {r['cpu_ms_per_tick']:>12} | {r['naive_net_dev_reads_per_tick']:>11} {r['naive_cpu_ms_per_tick']:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
