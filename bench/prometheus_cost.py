#!/usr/bin/env python3
"""What serving Prometheus costs: render CPU per tick, exposition bytes, scrape latency.

    python3 bench/prometheus_cost.py                 # 1,000 cgroups, table
    python3 bench/prometheus_cost.py --cgroups 100 1000 5000 --json

A synthetic cgroup v2 host (tests/helpers/synth.py: every cgroup a Docker container with a name,
an image and 3 labels, one block device, PSI; no root needed) is sampled by the real
Sampler; its records go through the real renderer and the real HTTP server on loopback.

- render: CPU time (process time, all threads) of one `Exporter.publish()` (the text
  format; OpenMetrics and gzip are made only when a scraper asks), median of --reps
  after --warmup publishes (an exporter's first tick renders every label; its later ones
  reuse them, and the allocator has settled); next to it the Sampler's own tick on the
  same tree, for scale.
- bytes: the exposition, plain and gzip.
- scrape: wall time of GET /metrics from a fresh connection to the last byte, plain and
  with `Accept-Encoding: gzip` (the second gzip scrape of a tick reuses the first one's
  bytes), median and max of --scrapes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.helpers import synth  # noqa: E402

from cgstat.outputs.prometheus import exposition as prom  # noqa: E402
from cgstat.outputs.prometheus.exporter import Exporter  # noqa: E402
from cgstat.diagnostics import Warner  # noqa: E402
from cgstat.pipeline.sampler import Sampler  # noqa: E402


def build_host(root: str, n: int) -> None:
    synth.v2_host(root)
    for i in range(n):
        cid = "%064x" % (i + 1)
        synth.v2_cgroup(root, "/system.slice/docker-%s.scope" % cid)
        folder = os.path.join(root, "var/lib/docker/containers", cid)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.v2.json"), "w") as f:
            json.dump({"ID": cid, "Name": "/job-%d" % i,
                       "Config": {"Image": "pytorch/pytorch:2.3.0-cuda12.1",
                                  "Labels": {"com.docker.compose.project": "ml", "team": "vision",
                                             "run": "run-%d" % i}}}, f)


def scrape(addr, gzip_ok: bool) -> (float, int):
    began = time.perf_counter()
    with socket.create_connection(addr) as c:
        c.sendall(b"GET /metrics HTTP/1.1\r\nHost: b\r\nConnection: close\r\n"
                  + (b"Accept-Encoding: gzip\r\n" if gzip_ok else b"") + b"\r\n")
        n = 0
        while True:
            data = c.recv(1 << 20)
            if not data:
                break
            n += len(data)
    return time.perf_counter() - began, n


def measure(n: int, reps: int, scrapes: int, warmup: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as root:
        build_host(root, n)
        import io

        sampler = Sampler(host_root=root, warner=Warner(io.StringIO()))
        sampler.warm_up()
        tick_cpu = []
        records = []
        for _ in range(3):
            t = time.process_time()
            records = sampler.tick()
            tick_cpu.append(time.process_time() - t)
        exporter = Exporter("127.0.0.1:0", Warner(io.StringIO()))
        try:
            for _ in range(warmup):
                exporter.publish(records, 0.01)
            render_cpu = []
            for _ in range(reps):
                t = time.process_time()
                exporter.publish(records, 0.01)
                render_cpu.append(time.process_time() - t)
            text = prom.render(records)
            import gzip

            gz = gzip.compress(text, 5)
            addr = exporter.server.address
            plain = [scrape(addr, False)[0] for _ in range(scrapes)]
            zipped = [scrape(addr, True)[0] for _ in range(scrapes)]
        finally:
            exporter.close()
    return {
        "cgroups": n, "records": len(records),
        "series": sum(1 for line in text.splitlines() if line and not line.startswith(b"#")),
        "tick_cpu_ms": round(statistics.median(tick_cpu) * 1000, 1),
        "render_cpu_ms": round(statistics.median(render_cpu) * 1000, 1),
        "bytes": len(text), "gzip_bytes": len(gz),
        "scrape_ms_median": round(statistics.median(plain) * 1000, 2),
        "scrape_ms_max": round(max(plain) * 1000, 2),
        "scrape_gzip_ms_median": round(statistics.median(zipped) * 1000, 2),
        "scrape_gzip_ms_max": round(max(zipped) * 1000, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cgroups", type=int, nargs="+", default=[1000])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [measure(n, args.reps, args.scrapes, args.warmup) for n in args.cgroups]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| cgroups | series | tick CPU | render CPU | bytes | gzip bytes | scrape (median / max) | gzip scrape (median / max) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| {cgroups} | {series} | {tick_cpu_ms} ms | {render_cpu_ms} ms | {bytes:,} | {gzip_bytes:,} | "
              "{scrape_ms_median} / {scrape_ms_max} ms | {scrape_gzip_ms_median} / {scrape_gzip_ms_max} ms |"
              .format(**r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
