#!/usr/bin/env python3
"""cgstat beside its peers, in one run over the same N real cgroups: CPU a tick.

For each N (default 100 and 1000) this makes N cgroups below its own cgroup in every
hierarchy (bench/tick_cost.py's BenchGroups: one ``sleep`` each, all removed at the end,
also on Ctrl-C, SIGTERM and SIGHUP), then measures in rounds, the tools taking turns (the
order rotates each round, so a loaded machine's noise falls on all alike):

* cgstat: ``python -m cgstat stream --interval 1 --all --match PARENT --output /dev/null``;
  after a warm-up, the whole process's CPU time (every thread's schedstat) over a window,
  divided by the ticks in it (one a second);
* netdata (Debian's 1.37, ``netdata -D -c CONF``): only its cgroups plugin on,
  ``update every = 1``, its web server on loopback, only cgroups matching PARENT
  collected, no rename or network scripts run; after a warm-up (its discovery finds and
  makes charts for every cgroup), the cgroups collector thread's CPU time
  (/proc/PID/task/TID/schedstat; the first of the plugin's two threads, the other is its
  discovery) over the same window, divided by its seconds; its discovery thread and the
  whole process beside it;
* systemd-cgtop ``-b -d 0.1 -n K --depth 10``: (CPU of K=11 - CPU of K=1) / 10 (it walks
  the whole tree, which here is the bench's groups and a few others);
* bench/readfiles.c, the C open/read/close of the files cgstat reads: the same, -k 11
  against -k 1.

Needs root, a C compiler, netdata (``apt-get install -y --no-install-recommends netdata``)
and systemd-cgtop; a tool that is missing is left out of the table, said once.
Usage: python3 bench/peers.py [--sizes 100,1000] [--rounds 3] [--window 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tick_cost as T  # noqa: E402  (the groups, the C reader and the rusage runner)

NETDATA_CONF = """[global]
    update every = 1
    memory mode = ram
    history = 60
    run as user = root
    hostname = cgstat-peers
    config directory = {dir}/conf
    cache directory = {dir}/cache
    lib directory = {dir}/lib
    log directory = {dir}/log
    debug log = none
    error log = {dir}/log/error.log
    access log = none
[web]
    bind to = 127.0.0.1:{port}
[ml]
    enabled = no
[health]
    enabled = no
[registry]
    enabled = no
[statsd]
    enabled = no
[plugins]
    enable running new plugins = no
    check for new plugins every = 3600
    idlejitter = no
    netdata monitoring = no
    tc = no
    diskspace = no
    proc = no
    cgroups = yes
    timex = no
    checks = no
    statsd = no
    apps = no
    python.d = no
    charts.d = no
    go.d = no
    node.d = no
    ebpf = no
    perf = no
    slabinfo = no
    fping = no
    ioping = no
    freeipmi = no
    nfacct = no
    cups = no
    debugfs = no
[plugin:cgroups]
    update every = 1
    check for new cgroups every = 10
    enable by default cgroups matching = *{match}*
    search for cgroups in subpaths matching = *
    max cgroups to allow = 100000
    max cgroups depth to monitor = 10
    use unified cgroups = no
    run script to rename cgroups matching = !*
    script to get cgroup network interfaces = /bin/true
"""


def _cpu_ns(task_dirs: List[str]) -> int:
    """CPU time of these tasks in ns (the first field of /proc/.../schedstat: time on a CPU,
    exact where utime+stime come in clock ticks of 10 ms)."""
    total = 0
    for d in task_dirs:
        try:
            with open(d + "/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended
    return total


def _window(pid: int, threads: Callable[[], Dict[str, List[str]]], warm_s: float,
            window_s: float) -> Dict[str, float]:
    """CPU ms a second of the whole process (every thread) and of each named group of its
    threads (name -> task folders), over `window_s` after `warm_s`."""
    time.sleep(warm_s)
    every = [f"/proc/{pid}/task/{t}" for t in os.listdir(f"/proc/{pid}/task")]
    groups = dict(threads(), process=every)
    before = {k: _cpu_ns(v) for k, v in groups.items()}
    t0 = time.monotonic()
    time.sleep(window_s)
    after = {k: _cpu_ns(v) for k, v in groups.items()}
    took = time.monotonic() - t0
    return {k: (after[k] - before[k]) / 1e6 / took for k in groups}


def _stop(proc: subprocess.Popen) -> None:
    """End a tool started here: its own process group (start_new_session), SIGTERM then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def measure_cgstat(match: str, warm_s: float, window_s: float) -> Dict[str, float]:
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "1", "--all", "--match", match,
                             "--no-events"], env=T.cgstat_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        got = _window(proc.pid, dict, warm_s, window_s)
    finally:
        _stop(proc)
    return {"tick_ms": got["process"]}


def measure_netdata(match: str, warm_s: float, window_s: float, workdir: str) -> Dict[str, float]:
    folder = tempfile.mkdtemp(prefix="peers-netdata-", dir=workdir)
    for sub in ("conf", "cache", "lib", "log"):
        os.mkdir(os.path.join(folder, sub))
    with socket.socket() as s:  # a free loopback port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = os.path.join(folder, "netdata.conf")
    with open(conf, "w") as f:
        f.write(NETDATA_CONF.format(dir=folder, port=port, match=match))
    proc = subprocess.Popen(["netdata", "-D", "-c", conf], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, cwd=folder)

    def threads() -> Dict[str, str]:
        found = []
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{tid}/comm") as f:
                if f.read().strip() == "PLUGIN[cgroups]":
                    found.append(int(tid))
        if len(found) != 2:
            raise RuntimeError(f"netdata: {len(found)} cgroups plugin threads, expected the collector and discovery")
        # the collector starts its discovery thread: the lower ID is the collector (the one
        # busy every second; the other works every 10 s)
        found.sort()
        return {"collector": [f"/proc/{proc.pid}/task/{found[0]}"],
                "discovery": [f"/proc/{proc.pid}/task/{found[1]}"]}

    try:
        got = _window(proc.pid, threads, warm_s, window_s)
    finally:
        _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)
    return {"tick_ms": got["collector"], "discovery_ms": got["discovery"], "process_ms": got["process"]}


def measure_cgtop() -> Dict[str, float]:
    got = T.per_tick(lambda k: ["systemd-cgtop", "-b", "-d", "0.1", "-n", str(k), "--depth", "10"], 10, 1)
    return {"tick_ms": got["cpu_ms_per_tick"]}


def measure_c(binary: str, groups: "T.BenchGroups", match: str) -> Dict[str, float]:
    got = T.per_tick(lambda k: T.c_argv(binary, groups.hierarchies, k, 0.1, match), 10, 1)
    return {"tick_ms": got["cpu_ms_per_tick"]}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000", help="comma-separated N values (default 100,1000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every tool, alternating (default 3)")
    ap.add_argument("--window", type=float, default=20.0, help="seconds measured per cgstat and netdata run")
    ap.add_argument("--warm", type=float, default=30.0, help="seconds before netdata's window (cgstat: a third)")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("peers: creating cgroups needs root", file=sys.stderr)
        return 1
    tools: List[str] = ["cgstat", "C open/read/close"]
    for name, binary in (("netdata", "netdata"), ("systemd-cgtop", "systemd-cgtop")):
        if shutil.which(binary):
            tools.insert(len(tools) - 1, name)
        else:
            print(f"peers: no {binary} here: left out", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(T.REPO, "cgstat")],
                   stdout=subprocess.DEVNULL, env=T.cgstat_env(), check=False)
    old = {s: signal.signal(s, T._raise_terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
    rows: List[Dict[str, object]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="cgstat-peers-") as workdir:
            binary = T.compile_c(workdir)
            for n in [int(x) for x in args.sizes.split(",") if x]:
                with T.BenchGroups(T.find_hierarchies(), n) as groups:
                    groups.populate()
                    match = groups.parent
                    runs: Dict[str, List[Dict[str, float]]] = {t: [] for t in tools}
                    for r in range(args.rounds):
                        order = tools[r % len(tools):] + tools[:r % len(tools)]
                        for tool in order:
                            if tool == "cgstat":
                                got = measure_cgstat(match, args.warm / 3, args.window)
                            elif tool == "netdata":
                                got = measure_netdata(match, args.warm, args.window, workdir)
                            elif tool == "systemd-cgtop":
                                got = measure_cgtop()
                            else:
                                got = measure_c(binary, groups, match)
                            runs[tool].append(got)
                            print(f"  N={n} round {r + 1}: {tool} {got['tick_ms']:.1f} ms", file=sys.stderr)
                    for tool in tools:
                        row: Dict[str, object] = {"n": n, "tool": tool}
                        for key in runs[tool][0]:
                            row[key] = statistics.median(x[key] for x in runs[tool])
                        row["samples"] = [round(x["tick_ms"], 1) for x in runs[tool]]
                        rows.append(row)
    except (KeyboardInterrupt, T._Terminate):
        return 130
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if args.json:
        print(json.dumps({"load": os.getloadavg(), "rows": rows}, indent=1))
        return 0
    print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs; N populated cgroups (one sleep each); "
          f"CPU ms a tick, median of {args.rounds} alternated rounds; load now {os.getloadavg()[0]:.2f}")
    print(f"{'N':>6} {'tool':<20} {'ms/tick':>8} {'x C':>6}  samples / notes")
    for n in sorted({int(r['n']) for r in rows}):  # type: ignore[call-overload]
        mine = [r for r in rows if r["n"] == n]
        c = next(float(r["tick_ms"]) for r in mine if r["tool"] == "C open/read/close")  # type: ignore[arg-type]
        for r in mine:
            note = str(r["samples"])
            if r["tool"] == "netdata":
                note += f"  collector thread; discovery {r['discovery_ms']:.1f}, process {r['process_ms']:.1f}"
            ms = float(r["tick_ms"])  # type: ignore[arg-type]
            print(f"{n:>6} {r['tool']:<20} {ms:>8.1f} {ms / c:>6.2f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
