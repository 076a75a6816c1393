#!/usr/bin/env python3
"""What the OTLP push costs: encode CPU per tick, request bytes, a push's wall time.

    python3 bench/otlp_cost.py                  # 100 and 1,000 cgroups, table
    python3 bench/otlp_cost.py --cgroups 1000 --json
    python3 bench/otlp_cost.py --against main~3      # and the encoder as it was there, interleaved

The synthetic host of bench/prometheus_cost.py (every cgroup a Docker container with a name
and an image, one block device, PSI; no root needed) is sampled by the real Sampler; its
records go through the real encoder (cgstat/outputs/otlp/encode.py) and the real sink to a local
receiver on loopback that reads each request and answers 200.

- encode: CPU time (process time) of one Encoder.encode() of the tick, protobuf (needs
  opentelemetry-proto) and JSON, median of --reps after --warmup encodes (the protobuf
  writer keeps a resource's messages from one tick to the next: the first tick, in the
  table too, makes them all); the Sampler's own tick beside it, for scale.
- bytes: the request, plain and gzip level 1 (what the sink sends).
- push: wall time from OtlpSink.write() to the receiver having read the request (gzip
  included), median of --reps.
- --max-series: encode CPU and bytes with the series budget folding to that many data
  points (cgstat/outputs/otlp/budget.py), in the same turns.
- --against REF: cgstat/outputs/otlp/encode.py as it is at git REF (bench/against.py) encodes the same
  records in the same turns, and says whether its bytes are this checkout's.
"""

from __future__ import annotations

import argparse
import gzip
import http.server
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from prometheus_cost import build_host  # noqa: E402

from cgstat.outputs.otlp.sink import OtlpOptions, OtlpSink  # noqa: E402
from cgstat.outputs.otlp.budget import OtlpBudget  # noqa: E402
from cgstat.outputs.otlp.encode import Encoder  # noqa: E402
from cgstat.pipeline.sampler import Sampler  # noqa: E402
from cgstat.diagnostics import Warner  # noqa: E402


class _Receiver(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.got = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.server.got.set()

    def log_message(self, *args):
        pass


def _turns(jobs: dict, reps: int, warmup: int) -> dict:
    """Process time of each job, median of `reps` taken in turn after `warmup` each."""
    for job in jobs.values():
        for _ in range(warmup):
            job()
    spent: dict = {label: [] for label in jobs}
    for _ in range(reps):
        for label, job in jobs.items():
            t = time.process_time()
            job()
            spent[label].append(time.process_time() - t)
    return {label: round(statistics.median(s) * 1000, 1) for label, s in spent.items()}


def measure(n: int, reps: int, warmup: int, max_series: int = 10000, against: str = "") -> dict:
    with tempfile.TemporaryDirectory() as root:
        build_host(root, n)
        sampler = Sampler(host_root=root, warner=Warner(io.StringIO()))
        sampler.warm_up()
        tick_cpu = []
        records = []
        for _ in range(3):
            t = time.process_time()
            records = sampler.tick()
            tick_cpu.append(time.process_time() - t)
    row = {"cgroups": n, "records": len(records), "tick_cpu_ms": round(statistics.median(tick_cpu) * 1000, 1)}
    row["points"] = sum(len(points) for res in Encoder("json").resources(records) for _, points in res.metrics.values())
    old = None
    if against:
        from against import module_at

        old = module_at(against, "cgstat/outputs/otlp/encode.py", "cgstat/outputs/otlp_encode.py")
    for encoding in ("protobuf", "json"):
        try:
            encoder = Encoder(encoding)
        except Exception as exc:  # no opentelemetry-proto
            row[encoding] = str(exc)
            continue
        t = time.process_time()
        body = encoder.encode(records)
        first = round((time.process_time() - t) * 1000, 1)
        bounded = Encoder(encoding, OtlpBudget(max_series))
        jobs = {"here": lambda: encoder.encode(records), "bounded": lambda: bounded.encode(records)}
        if old is not None:
            there = old.Encoder(encoding)
            jobs["there"] = lambda: there.encode(records)
        cpu = _turns(jobs, reps, warmup)
        small = bounded.encode(records)
        row[encoding] = {"first_ms": first, "encode_ms": cpu["here"], "bytes": len(body),
                         "gzip_bytes": len(gzip.compress(body, 1)), "bounded_ms": cpu["bounded"],
                         "bounded_bytes": len(small), "bounded_points": sum(
                             len(p) for res in bounded.resources(records) for _, p in res.metrics.values())}
        if old is not None:
            row[encoding].update(against_ms=cpu["there"], against_same_bytes=there.encode(records) == body)
    receiver = _Receiver()
    sink = OtlpSink(OtlpOptions("http://127.0.0.1:%d/v1/metrics" % receiver.server_address[1],
                                "protobuf" if isinstance(row["protobuf"], dict) else "json"), None)
    pushes = []
    try:
        sink.open()
        for _ in range(reps):
            receiver.got.clear()
            began = time.perf_counter()
            sink.write(records)
            receiver.got.wait(60)
            pushes.append(time.perf_counter() - began)
    finally:
        sink.close()
        receiver.shutdown()
        receiver.server_close()
    row["push_ms_median"] = round(statistics.median(pushes) * 1000, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cgroups", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-series", type=int, default=10000)
    ap.add_argument("--against", metavar="REF", default="",
                    help="also encode with cgstat/outputs/otlp/encode.py as it is at git REF, interleaved")
    args = ap.parse_args()
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    rows = [measure(n, args.reps, args.warmup, args.max_series, args.against) for n in args.cgroups]
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| cgroups | tick CPU | encoding | encode CPU (first tick) | bytes | gzip bytes |")
    print("|---:|---:|---|---:|---:|---:|")
    for r in rows:
        for encoding in ("protobuf", "json"):
            e = r[encoding]
            if isinstance(e, str):
                print("| %d | %s ms | %s | %s | | |" % (r["cgroups"], r["tick_cpu_ms"], encoding, e))
                continue
            print("| {0} | {1} ms | {2} | {encode_ms} ms ({first_ms} ms) | {bytes:,} | {gzip_bytes:,} |".format(
                r["cgroups"], r["tick_cpu_ms"], encoding, **e))
    print("\n| cgroups | data points | encoding | encode CPU | --max-series %d: points | encode CPU | bytes |"
          % args.max_series + (" at %s: encode CPU | same bytes |" % args.against if args.against else ""))
    print("|---:|---:|---|---:|---:|---:|---:|" + ("---:|---|" if args.against else ""))
    for r in rows:
        for encoding in ("protobuf", "json"):
            e = r[encoding]
            if isinstance(e, str):
                continue
            print("| {0} | {1:,} | {2} | {encode_ms} ms | {bounded_points:,} | {bounded_ms} ms | {bounded_bytes:,} |"
                  .format(r["cgroups"], r["points"], encoding, **e)
                  + (" {against_ms} ms | {against_same_bytes} |".format(**e) if args.against else ""))
    for r in rows:
        print("push to a loopback receiver, %d cgroups: %s ms median (write to the request read)"
              % (r["cgroups"], r["push_ms_median"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
