#!/usr/bin/env python3
"""What `stream --processes N` costs: the tick's CPU and the record's size at C cgroups of P
processes each, against the same stream without the option, and that stream against an
older checkout (`--base REV`: the cost without the option must not move).

Makes C test cgroups below this process's own (tests/helpers/realcg.py: the prefix, the
clean-up), each holding a shell and P-1 `sleep`s; measures with tick_cost.py's rusage
difference (a run of 1+TICKS ticks minus a run of 1), alternating the variants REPS times,
the median reported. Also the time of one smaps_rollup read: of the small processes, and of
this process holding ~200 MB of Python objects.

Run as root:  python3 bench/processes_cost.py [--cgroups 100] [--processes 10] [--base 75bf800]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
from tests.helpers import realcg  # noqa: E402
import tick_cost  # noqa: E402  (run_rusage: CPU of a child from wait4)


def _cgstat(pythonpath: str, match: str, ticks: int, interval: float, extra, out=None):
    """The stream's argv: stdout is thrown away by run_rusage, or into `out`."""
    return [sys.executable, "-c", "import sys; sys.path.insert(0, %r); from cgstat.cli import main; main()"
            % pythonpath, "stream", "--all", "--match", match, "--count", str(ticks), "--interval", str(interval),
            "--no-events", *(["--output", out] if out else []), *extra]


def _per_tick(argv_for_k, ticks: int) -> float:
    cpu = []
    for k in (1, 1 + ticks):
        code, used, _, _, err = tick_cost.run_rusage(argv_for_k(k))
        if code != 0:
            raise RuntimeError(err)
        cpu.append(used)
    return (cpu[1] - cpu[0]) / ticks * 1000


def _record_bytes(pythonpath: str, match: str, extra) -> float:
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        code, _, _, _, err = tick_cost.run_rusage(_cgstat(pythonpath, match, 2, 0.5, extra, f.name))
        if code != 0:
            raise RuntimeError(err)
        lines = [line for line in open(f.name, "rb").read().splitlines()
                 if b'"type":"cgroup"' in line and match.encode() in line]
    return statistics.mean(len(line) + 1 for line in lines) if lines else 0.0


def _smaps_us(pids) -> float:
    t0 = time.perf_counter()
    n = 0
    for pid in pids:
        try:
            with open("/proc/%d/smaps_rollup" % pid, "rb") as f:
                f.read()
            n += 1
        except OSError:
            pass
    return (time.perf_counter() - t0) / max(n, 1) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cgroups", type=int, default=100)
    ap.add_argument("--processes", type=int, default=10, help="processes per cgroup (a shell and N-1 sleeps)")
    ap.add_argument("--top", type=int, default=5, help="--processes N of the stream measured")
    ap.add_argument("--ticks", type=int, default=10)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--base", default="75bf800",
                    help="checkouts (comma-separated) the stream without the option is compared with")
    args = ap.parse_args()
    hier = realcg.Hierarchies()
    groups = []
    bases = {rev: tempfile.mkdtemp(prefix="cgstat-bench-base-") for rev in args.base.split(",")}
    try:
        for rev, folder in bases.items():
            subprocess.run("git -C %s archive %s cgstat | tar -x -C %s" % (REPO, rev, folder), shell=True, check=True)
        script = "for i in $(seq %d); do sleep 3600 & done; echo started; wait" % (args.processes - 1)
        for _ in range(args.cgroups):
            g = realcg.TestGroup(hier)
            groups.append(g)
            g.start(["sh", "-c", script]).wait_line("started")
        match = realcg.PREFIX
        pids = [pid for g in groups for pid in g.members("cpu")]
        variants = {"without": lambda k: _cgstat(REPO, match, k, args.interval, [])}
        for rev, folder in bases.items():
            variants["without, at " + rev] = (lambda f: lambda k: _cgstat(f, match, k, args.interval, []))(folder)
        variants["processes"] = lambda k: _cgstat(REPO, match, k, args.interval, ["--processes", str(args.top)])
        cpu = {name: [] for name in variants}
        for _ in range(args.reps):
            for name, argv in variants.items():
                cpu[name].append(_per_tick(argv, args.ticks))
        sizes = {"without": _record_bytes(REPO, match, []),
                 "processes": _record_bytes(REPO, match, ["--processes", str(args.top)])}
        small = _smaps_us(pids)
        data = [float(i) for i in range(6_500_000)]  # ~200 MB of Python objects in this process
        large = _smaps_us([os.getpid()] * 20)
        del data
        result = {
            "cgroups": args.cgroups, "processes_per_cgroup": args.processes, "top": args.top,
            "listed_processes": len(pids),
            "tick_cpu_ms": {k: round(statistics.median(v), 1) for k, v in cpu.items()},
            "tick_cpu_ms_samples": {k: [round(x, 1) for x in v] for k, v in cpu.items()},
            "record_bytes": {k: round(v) for k, v in sizes.items()},
            "smaps_rollup_us": {"small process": round(small, 1), "200 MB of Python objects": round(large, 1)},
            "load": os.getloadavg()[0],
        }
        print(json.dumps(result, indent=2))
    finally:
        for g in reversed(groups):
            g.destroy()
        for folder in bases.values():
            subprocess.run(["rm", "-rf", folder], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
