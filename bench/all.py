#!/usr/bin/env python3
"""Most figures of bench/README.md's table, in one run and one printed table.

    sudo python3 bench/all.py                # ticks at 10/100/1,000/5,000 cgroups and the rest
    sudo python3 bench/all.py --quick        # without 5,000 (that size takes minutes)
    sudo python3 bench/all.py --json         # one JSON document with every script's output

Runs, one after the other (each script's own text says how it measures):

- tick_cost.py: CPU per tick against real cgroups beside the C reader (open/read/close and
  kept descriptors), the ratio, peak RSS, `once --state` wall, kept descriptors and the
  kernel memory they pin, start-up;
- gpu_cost.py: one GPU read through pynvml and the NVML double, 8 GPUs x 50 processes;
- gpu_join_cost.py: what the GPU costs a `cgstat stream` end to end, 8 GPUs x the same 50
  real processes (the stream's CPU with the double minus without);
- naming_cost.py: a tick of 1,000 containers with their runtime state, names on and off;
- prometheus_cost.py: rendering and scraping the exposition of 1,000 cgroups;
- network_cost.py: network per workload, 100 and 1,000 workloads over 4 namespaces.

Needs root (real cgroups and network namespaces) and a C compiler (the C reader and the
NVML double).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(script: str, args: List[str]) -> Any:
    """Run bench/<script> --json with args; its JSON output (stderr passes through)."""
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), "--json", *args], stdout=subprocess.PIPE)
    if proc.returncode != 0 and not proc.stdout.strip():
        raise RuntimeError(f"bench/{script} exited {proc.returncode} without a result")
    # a script over its budget (gpu_cost.py) says so by its exit status, its figures on stdout
    return json.loads(proc.stdout)


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sizes 10, 100, 1,000 only (no 5,000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each tick measurement")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/all.py: real cgroups and network namespaces need root", file=sys.stderr)
        return 1
    sizes = "10,100,1000" if args.quick else "10,100,1000,5000"
    results: Dict[str, Any] = {}
    steps = [
        ("ticks", "tick_cost.py", ["--sizes", sizes, "--populated", "100,1000", "--reps", str(args.reps)]),
        ("gpu", "gpu_cost.py", ["--gpus", "8", "--procs", "50"]),
        ("gpu_join", "gpu_join_cost.py", ["--gpus", "8", "--procs", "50", "--reps", "3"]),
        ("naming", "naming_cost.py", ["--containers", "1000", "--ticks", "20", "--reps", "3"]),
        ("prometheus", "prometheus_cost.py", ["--cgroups", "1000"]),
        ("network", "network_cost.py", ["--sizes", "100,1000"]),
    ]
    for key, script, script_args in steps:
        print(f"bench/all.py: {script} {' '.join(script_args)}", file=sys.stderr, flush=True)
        results[key] = run_json(script, script_args)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print_table(results)
    return 0


def print_table(r: Dict[str, Any]) -> None:
    sys.path.insert(0, HERE)
    import tick_cost

    tick_cost.print_table(r["ticks"], others=False)
    print()
    g = r["gpu"]
    print(f"\nGPU read (NVML double, {g['gpus']} GPUs x {g['procs_per_gpu']} processes): "
          f"median {g['median_cpu_ms']:.2f} ms CPU, p95 {g['p95_cpu_ms']:.2f} ms")
    j = r["gpu_join"]
    print(f"GPU end to end (stream, {j['gpus']} GPUs x the same {j['procs']} processes): "
          f"{j['gpu_ms_per_tick']:.2f} ms CPU per tick (samples {j['gpu_ms_per_tick_samples']})")
    n = r["naming"]
    print(f"naming {n['containers']} containers ({n['named_records']} named): "
          f"{n['ms_per_tick_with_names']:.1f} ms per tick with names, {n['ms_per_tick_ids_only']:.1f} ms "
          f"with IDs only ({n['naming_overhead_percent']:+.1f} %)")
    for p in r["prometheus"]:
        print(f"Prometheus, {p['cgroups']} cgroups: render {p['render_cpu_ms']:.1f} ms CPU per tick "
              f"(tick {p['tick_cpu_ms']:.1f} ms), {p['series']} series, {p['bytes'] / 1e6:.1f} MB "
              f"({p['gzip_bytes'] / 1e3:.0f} KB gzip), scrape median {p['scrape_ms_median']:.1f} ms")
    for w in r["network"]["results"]:
        print(f"network, {w['keys']} workloads over {w['namespaces']} namespaces: "
              f"{w['cpu_ms_per_tick']:.1f} ms CPU per tick, {w['net_dev_reads_per_tick']} net/dev reads")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
