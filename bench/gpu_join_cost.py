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
`python -m cgstat stream --interval 0.2 --all --match <that cgroup> --output FILE` twice at
the same time, once with the double on LD_LIBRARY_PATH and once without a library (GPU
metrics off), and reads each process's CPU time (the kernel's per-thread run time in
nanoseconds, /proc/PID/task/*/schedstat, summed over its threads) just after a tick's
batch reaches its file, and again TICKS ticks later: start-up and the first ticks are
outside the window, and what the host does meanwhile (other cgroups made and removed,
which every stream follows; CPU contention) falls on both. The GPU's cost is the
difference per tick, median over REPS such pairs: NVML reading through pynvml, joining
each GPU process to its cgroup and container through /proc, the energy split, the GPU
records and the cgroup's `gpu` object, the events, the JSON -- what a user pays, where
bench/gpu_cost.py measures the NVML reading alone, in-process. The double checks its
scenario file (a stat()) on every call, so that tests can change it between two ticks;
`--double-once` builds it to read the file once (variant full-once), which takes that
cost of the double's own out of the figure.

Needs root (it creates cgroups) and a C compiler (the double).
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
import threading
import time
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


def cpu_ns(pid: int) -> int:
    """The CPU time of a process, all its threads, in nanoseconds (the first field of each
    thread's /proc/PID/task/TID/schedstat: time spent on a CPU)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def _after_next_batch(path: str, size: int, deadline: float) -> int:
    """Wait until the file grows past `size` (a tick's batch written), and return its size."""
    while time.monotonic() < deadline:
        now = os.stat(path).st_size
        if now > size:
            return now
        time.sleep(0.002)
    raise RuntimeError(f"{path}: no batch written in time")


def window_cpu_ms(proc: subprocess.Popen, path: str, interval: float, ticks: int) -> float:
    """CPU milliseconds per tick of a running stream, between just after one batch and just
    after the batch `ticks` ticks later (its schedule is drift-free: one tick an interval)."""
    deadline = time.monotonic() + 60 + ticks * interval * 3
    size = _after_next_batch(path, 0, deadline)  # the first batch: start-up is behind it
    size = _after_next_batch(path, size + 1, deadline)
    time.sleep(interval / 2)
    size = _after_next_batch(path, os.stat(path).st_size, deadline)
    c1, t1 = cpu_ns(proc.pid), time.monotonic()
    time.sleep((ticks - 0.5) * interval)
    _after_next_batch(path, os.stat(path).st_size, deadline)
    c2, t2 = cpu_ns(proc.pid), time.monotonic()
    counted = round((t2 - t1) / interval)
    return (c2 - c1) / counted / 1e6


def paired(argv: List[str], envs: Dict[str, dict], work: str, interval: float, ticks: int) -> Dict[str, float]:
    """CPU ms per tick of `argv` in each environment, the streams running at the same time:
    whatever else the host does meanwhile (other cgroups made and removed, which every
    stream process follows through inotify; CPU contention) falls on both alike, and the
    difference keeps only what the environments change."""
    procs: Dict[str, subprocess.Popen] = {}
    outputs = {}
    try:
        for key, env in envs.items():
            outputs[key] = os.path.join(work, f"stream-{key}.jsonl")
            with open(outputs[key], "w"):
                pass
            procs[key] = subprocess.Popen([*argv, "--output", outputs[key]], env=env, cwd=REPO,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        results: Dict[str, float] = {}
        errors: List[BaseException] = []

        def measure(key: str) -> None:
            try:
                results[key] = window_cpu_ms(procs[key], outputs[key], interval, ticks)
            except BaseException as exc:  # said below, after both
                errors.append(exc)

        threads = [threading.Thread(target=measure, args=(key,)) for key in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait()
        for path in outputs.values():
            os.unlink(path)


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=50, help="real processes, each listed on every GPU")
    ap.add_argument("--ticks", type=int, default=50, help="ticks in each measured window (default 50)")
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=5, help="with/without pairs; the median is shown")
    ap.add_argument("--double-once", action="store_true",
                    help="the double reads its scenario once (variant full-once): its own per-call stat() "
                         "out of the figure")
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
            variant = "full-once" if args.double_once else "full"
            envs: Dict[str, dict] = {"with": double_env(path, variant, base), "without": double_env(None, None, base)}
            match = groups.parent

            argv = [sys.executable, "-m", "cgstat", "stream", "--interval", str(args.interval), "--all",
                    "--match", match]
            check = subprocess.run([*argv, "--count", "2"], env=envs["with"], stdout=subprocess.PIPE,
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
                cpu = paired(argv, envs, work, args.interval, args.ticks)
                for key in ("with", "without"):
                    runs[key].append(cpu[key])
                diffs.append(cpu["with"] - cpu["without"])
        finally:
            for p in sleepers:
                p.kill()
                p.wait()
    result = {
        "gpus": args.gpus, "procs": args.procs, "ticks": args.ticks, "reps": args.reps, "double": variant,
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
              f"their cgroup): {result['gpu_ms_per_tick']:.2f} ms CPU per tick (stream with the {variant} double "
              f"{result['with_ms_per_tick']:.2f} ms, without {result['without_ms_per_tick']:.2f} ms; "
              f"medians of {args.reps}, samples {result['gpu_ms_per_tick_samples']}); load average "
              f"{result['loadavg']:.1f}; budget {BUDGET_MS:g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
