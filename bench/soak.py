#!/usr/bin/env python3
"""Soak: many ticks over a synthetic v2 tree with churn; RSS and descriptors must stay flat.

    python3 bench/soak.py [--ticks 100000] [--cgroups 10] [--json]

Builds a host root in a temporary folder (the same synthetic layout the fault tests use),
runs the agent in-process tick after tick with the output going to /dev/null through the
real sink, removes and creates two cgroups every 100 ticks (new inodes, new names), and
reports RSS (VmRSS of /proc/self/status) and open descriptors after a warm-up of 1,000
ticks and at the end. No sleeping: this measures growth per tick, not time.
"""

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from tests.helpers.synth import v2_cgroup, v2_host  # noqa: E402

from cgstat.outputs.jsonl import StdoutSink  # noqa: E402
from cgstat.diagnostics import Warner  # noqa: E402
from cgstat.pipeline.sampler import Sampler  # noqa: E402


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=100000)
    ap.add_argument("--cgroups", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="cgstat-soak-")
    try:
        v2_host(root)
        live = []
        serial = 0
        for _ in range(args.cgroups):
            path = f"/system.slice/docker-{serial:064x}.scope"
            v2_cgroup(root, path)
            live.append(path)
            serial += 1
        agent = Sampler(root, all=True, warner=Warner(io.StringIO()))
        sink = StdoutSink(fd=os.open("/dev/null", os.O_WRONLY))  # serialised and written, as streamed
        t0 = time.process_time()
        warm_rss = warm_fds = None
        lines_total = 0
        for tick in range(args.ticks):
            if tick and tick % 100 == 0:
                for _ in range(2):  # churn: the oldest two go, two new ones come
                    gone = live.pop(0)
                    shutil.rmtree(os.path.join(root, "sys/fs/cgroup", gone.lstrip("/")))
                    path = f"/system.slice/docker-{serial:064x}.scope"
                    v2_cgroup(root, path)
                    live.append(path)
                    serial += 1
            lines = agent.tick()
            lines_total += len(lines)
            sink.write(lines)
            if tick + 1 == args.warmup:
                warm_rss, warm_fds = rss_kib(), fds()
        cpu = time.process_time() - t0
        result = {
            "ticks": args.ticks, "cgroups": args.cgroups, "records": lines_total,
            "cgroups_created": serial, "rss_kib_after_warmup": warm_rss, "rss_kib_end": rss_kib(),
            "rss_growth_kib": rss_kib() - warm_rss, "fds_after_warmup": warm_fds, "fds_end": fds(),
            "cpu_ms_per_tick": round(cpu / args.ticks * 1000, 3),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
