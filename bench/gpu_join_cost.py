#!/usr/bin/env python3
"""What the GPU costs a `cgstat stream` process, end to end: its CPU with the NVML double
minus its CPU without, per tick.

    sudo python3 bench/gpu_join_cost.py               # 8 GPUs x the same 50 real processes
    sudo python3 bench/gpu_join_cost.py --gpus 8 --procs 50 --ticks 20 --reps 5 --json

The bench starts PROCS real processes (`sleep`) in one cgroup of its own (created below its
own cgroup in every hierarchy, as tick_cost.py does, and removed at the end), and writes a
scenario for the NVML double (tests/nvml/nvml_double.c) in which each of GPUS devices lists
every one of those PIDs, busy, with everything else on (device health, MPS, GPM, an XID):
the case of a host whose training processes each hold all its GPUs. Then it runs
`python -m cgstat stream --interval 0.2 --count K --all --match <that cgroup>` twice for
K = 1 and K = 1 + TICKS, once with the double on LD_LIBRARY_PATH and once without a
library (GPU metrics off), the two at the same time, and takes (CPU(K=1+TICKS) - CPU(K=1))
/ TICKS of each (user + sys from the child's rusage, as tick_cost.py): start-up and the
first tick cancel out, and what the host does meanwhile (other cgroups made and removed,
which every stream follows; CPU contention) falls on both. The GPU's cost is the
difference, median over REPS such pairs: NVML reading through pynvml, joining each GPU
process to its cgroup and container through /proc, the energy split, the GPU records and
the cgroup's `gpu` object, the JSON -- what a user pays, where bench/gpu_cost.py measures
the NVML reading alone, in-process.

Needs root (it creates cgroups) and a C compiler (the double, bench/rusage.c).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import gpu_cost  # noqa: E402
import tick_cost  # noqa: E402
from tests.helpers.nvmldouble import env as double_env  # noqa: E402
from tests.helpers.nvmldouble import write_scenario  # noqa: E402

BUDGET_MS = 3.0


def scenario_text(gpus: int, pids: List[int]) -> str:
    """gpu_cost.py's devices, each listing every one of `pids` (real processes), busy."""
    s = gpu_cost.scenario(gpus, 0)
    for g in range(gpus):
        for i, pid in enumerate(pids):
            s.proc(g, pid, (i + 1) << 24, type="mps" if i % 10 == 0 else "compute")
            s.sample(g, pid, sm=1 + i % 99, mem=i % 50, ts="busy")
    return s.text()


def paired(argv: List[str], envs: Dict[str, dict]) -> Dict[str, float]:
    """CPU seconds (user + sys) of `argv` run once in each environment, both at the same
    time: whatever else the host does meanwhile (other cgroups made and removed, which
    every stream process follows through inotify; CPU contention) falls on both alike,
    and the difference keeps only what the environments change."""
    procs = {}
    reports = {}
    for key, env in envs.items():
        read_end, write_end = os.pipe()
        procs[key] = subprocess.Popen([tick_cost.RUSAGE, str(write_end), *argv], env=env, cwd=REPO,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, pass_fds=(write_end,))
        os.close(write_end)
        reports[key] = os.fdopen(read_end, "r")
    out = {}
    for key, proc in procs.items():
        with reports[key] as report:
            code, user, system, _rss = report.read().split()
        proc.wait()
        if int(code) != 0:
            raise RuntimeError(f"{' '.join(argv)} ({key} the double) exited {code}")
        out[key] = float(user) + float(system)
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=50, help="real processes, each listed on every GPU")
    ap.add_argument("--ticks", type=int, default=20, help="ticks in the difference run (default 20)")
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=5, help="with/without pairs; the median is shown")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("gpu_join_cost: creating the processes' cgroup needs root", file=sys.stderr)
        return 1
    hierarchies = tick_cost.find_hierarchies()
    base = tick_cost.cgstat_env()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # unwind through the clean-up below
        signal.signal(sig, tick_cost._raise_terminate)
    with tempfile.TemporaryDirectory(prefix="cgstat-bench.") as work, \
            tick_cost.BenchGroups(hierarchies, 1) as groups:
        tick_cost.compile_c(work)
        sleepers = []
        try:
            for _ in range(args.procs):
                p = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                sleepers.append(p)
                for h in hierarchies:
                    with open(os.path.join(groups.child_dir(h, 0), "cgroup.procs"), "w") as f:
                        f.write(str(p.pid))
            path = os.path.join(work, "scenario.txt")
            with open(path, "w"):
                pass
            write_scenario(path, scenario_text(args.gpus, [p.pid for p in sleepers]))
            envs: Dict[str, dict] = {"with": double_env(path, "full", base), "without": double_env(None, None, base)}
            match = groups.parent

            def argv_for(k: int) -> List[str]:
                return [sys.executable, "-m", "cgstat", "stream", "--interval", str(args.interval),
                        "--count", str(k), "--all", "--match", match]

            check = subprocess.run(argv_for(2), env=envs["with"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, universal_newlines=True, check=True, cwd=REPO)
            records = [json.loads(line) for line in check.stdout.splitlines()]
            gpu_records = [r for r in records if r.get("type") == "gpu"]
            joined = [r for r in records if r.get("type") == "cgroup" and r.get("gpu")
                      and r["gpu"].get("processes")]
            if not gpu_records or not joined:
                print(f"gpu_join_cost: the double's GPUs or the join are missing:\n{check.stderr}", file=sys.stderr)
                return 1
            attributed = max(len(r["gpu"]["processes"]) for r in joined)
            runs: Dict[str, List[float]] = {"with": [], "without": []}
            diffs = []
            for _ in range(args.reps):
                cpu = {k: paired(argv_for(k), envs) for k in (1, 1 + args.ticks)}
                for key in ("with", "without"):
                    runs[key].append((cpu[1 + args.ticks][key] - cpu[1][key]) / args.ticks * 1e3)
                diffs.append(runs["with"][-1] - runs["without"][-1])
        finally:
            for p in sleepers:
                p.kill()
                p.wait()
    result = {
        "gpus": args.gpus, "procs": args.procs, "ticks": args.ticks, "reps": args.reps,
        "gpu_records_per_tick": len(gpu_records) // 2, "processes_joined_to_the_cgroup": attributed,
        "with_ms_per_tick": statistics.median(runs["with"]), "without_ms_per_tick": statistics.median(runs["without"]),
        "gpu_ms_per_tick": statistics.median(diffs), "gpu_ms_per_tick_samples": [round(d, 3) for d in diffs],
        "with_samples": [round(x, 3) for x in runs["with"]], "without_samples": [round(x, 3) for x in runs["without"]],
        "loadavg": os.getloadavg()[0], "budget_ms": BUDGET_MS,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"GPU end to end, {args.gpus} GPUs x the same {args.procs} processes ({attributed} joined to "
              f"their cgroup): {result['gpu_ms_per_tick']:.2f} ms CPU per tick (stream with the double "
              f"{result['with_ms_per_tick']:.2f} ms, without {result['without_ms_per_tick']:.2f} ms; "
              f"medians of {args.reps}, samples {result['gpu_ms_per_tick_samples']}); load average "
              f"{result['loadavg']:.1f}; budget {BUDGET_MS:g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
