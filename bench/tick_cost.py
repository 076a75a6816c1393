#!/usr/bin/env python3
"""CPU cost of one cgstat tick against N real cgroups, next to a native C floor.

For each N (default 10, 100, 1000) this creates, in every cgroup hierarchy of this host,
a parent ``cgstat-bench-<rand>`` below this process's OWN cgroup and N children
``cgstat-bench-<i>`` in it; then it measures

* cgstat: ``python -m cgstat stream --interval 0.2 --count K --all --match cgstat-bench
  --output /dev/null`` for K=1 and K=1+TICKS; CPU per tick = (user+sys of the K=1+TICKS
  run - user+sys of the K=1 run) / TICKS, user+sys taken from os.wait4's rusage, so
  start-up and the first tick cancel out;
* C: bench/readfiles.c (compiled here with cc -O2) doing the same walk and the same file
  reads natively, timed the same way (-k 1 and -k 1+TICKS, same interval);

each REPS times, reporting the median. Also: cgstat's start-up cost (``--version`` and a
``once --window 0`` snapshot, wall and CPU) and the peak RSS of the streaming process.

Rules kept (see the project's machine notes): cgroups are created only below our own
cgroup in each hierarchy, all carry the ``cgstat-bench-`` prefix, nothing else is written
to, no process is moved, and everything is removed deepest-first at the end, also on
failure, Ctrl-C, SIGTERM or SIGHUP.

Run as root (creating cgroups needs it):  python3 bench/tick_cost.py [--json]
  --setup-only   create and remove the groups, check both, measure nothing
  --no-cgstat    measure only the C side (before cgstat exists)
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import secrets
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.helpers import realcg  # noqa: E402  (the one real-cgroup harness, shared with the tests)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PREFIX = "cgstat-bench-"
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "blkio", "pids")
V2_CONTROLLERS = ("cpu", "memory", "io", "pids")


# --------------------------------------------------------------------------- hierarchies


class Hierarchy:
    """One mounted cgroup hierarchy we create groups in."""

    def __init__(self, kind: str, mount: str, own_dir: str):
        self.kind = kind  # "cpu", "cpu,cpuacct", "memory", ..., "unified", "v2"
        self.mount = mount
        self.own_dir = own_dir  # directory of our own cgroup in it

    def __repr__(self) -> str:
        return f"Hierarchy({self.kind!r}, {self.own_dir!r})"


def find_hierarchies() -> List[Hierarchy]:
    """The v1 hierarchies carrying the controllers cgstat reads (one per mount: co-mounted
    cpu,cpuacct once), plus cgroup2 ("unified" on a hybrid host, "v2" on a pure one), with
    our own cgroup's folder in each, as the test harness reads them (tests/helpers/realcg.py)."""
    h = realcg.Hierarchies()
    found = []
    for key in h.distinct(V1_CONTROLLERS + ("unified",)):
        if key == "unified":
            kind = "unified" if h.v1 else "v2"
        else:
            kind = ",".join(c for c in V1_CONTROLLERS if h.has(c) and h.mounts[c] == h.mounts[key])
        found.append(Hierarchy(kind, h.mounts[key], h.own_dir(key)))
    return found


# --------------------------------------------------------------------------- groups


class BenchGroups:
    """N empty cgroups per hierarchy; a context manager that always cleans up."""

    def __init__(self, hierarchies: Sequence[Hierarchy], n: int):
        self.hierarchies = list(hierarchies)
        self.n = n
        self.parent = PREFIX + secrets.token_hex(4)
        self.created: List[str] = []  # in creation order; removed in reverse

    def parent_dir(self, h: Hierarchy) -> str:
        return os.path.join(h.own_dir, self.parent)

    def child_dir(self, h: Hierarchy, i: int) -> str:
        return os.path.join(h.own_dir, self.parent, f"{PREFIX}{i}")

    def populate(self) -> None:
        """One sleeping process (started here) in each child, in every hierarchy."""
        self.sleepers = []
        for i in range(self.n):
            p = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            self.sleepers.append(p)
            for h in self.hierarchies:
                with open(os.path.join(self.child_dir(h, i), "cgroup.procs"), "w") as f:
                    f.write(str(p.pid))

    def _mkdir(self, path: str) -> None:
        os.mkdir(path)
        self.created.append(path)

    def create(self) -> None:
        for h in self.hierarchies:
            self._mkdir(self.parent_dir(h))
            if h.kind == "v2":
                self._enable_v2_controllers(self.parent_dir(h))
            for i in range(self.n):
                self._mkdir(self.child_dir(h, i))

    @staticmethod
    def _enable_v2_controllers(parent: str) -> None:
        """Give the children memory/io/pids files where our own cgroup allows it.

        Only in the parent we created (no processes in it, so the no-internal-process rule
        is kept); our own cgroup's subtree_control is never touched.
        """
        try:
            with open(os.path.join(parent, "cgroup.controllers")) as f:
                available = set(f.read().split())
        except OSError:
            return
        for c in V2_CONTROLLERS:
            if c in available:
                try:
                    with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                        f.write("+" + c)
                except OSError:
                    pass

    def cleanup(self) -> List[str]:
        """Remove every created directory, deepest first; returns those that stayed.

        Ctrl-C / SIGTERM / SIGHUP are held back meanwhile, so a second Ctrl-C cannot
        leave half the tree behind; they take effect right after.
        """
        held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            return self._remove_all()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    def _remove_all(self) -> List[str]:
        for p in getattr(self, "sleepers", []):
            p.kill()
            p.wait()
        self.sleepers = []
        left = []
        for path in sorted(self.created, key=lambda p: (-p.count("/"), p)):
            for attempt in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or attempt == 49:
                        left.append(path)
                        print(f"tick_cost: could not remove {path}: {e}", file=sys.stderr)
                        break
                    time.sleep(0.02)
        self.created = []
        return left

    def __enter__(self) -> "BenchGroups":
        try:
            self.create()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()


class _Terminate(BaseException):
    pass


def _raise_terminate(signum, frame):  # SIGTERM / SIGHUP -> unwind through finally/__exit__
    raise _Terminate(signum)


# --------------------------------------------------------------------------- measuring


LAST_USER_SYS = (0.0, 0.0)  # (user, sys) seconds of the last run_rusage child


RUSAGE: Optional[str] = None  # bench/rusage.c, compiled by compile_c


def run_rusage(argv: Sequence[str], env: Optional[dict] = None, stdin=subprocess.DEVNULL) -> Tuple[int, float, float, int, str]:
    """Run argv; return (exit code, cpu seconds user+sys, wall seconds, maxrss KiB, stderr).

    Through bench/rusage.c when it is built: a child forked straight from this Python
    process would count this process's memory in its ru_maxrss (see rusage.c)."""
    global LAST_USER_SYS
    with tempfile.TemporaryFile() as err:
        if RUSAGE is None:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=subprocess.DEVNULL, stderr=err)
            try:
                _, status, ru = os.wait4(proc.pid, 0)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            wall = time.monotonic() - t0
            code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
            proc.returncode = code  # already reaped: keep Popen from waiting again
            user, system, maxrss = ru.ru_utime, ru.ru_stime, ru.ru_maxrss
        else:
            read_end, write_end = os.pipe()
            try:
                t0 = time.monotonic()
                proc = subprocess.Popen([RUSAGE, str(write_end), *argv], env=env, stdin=stdin,
                                        stdout=subprocess.DEVNULL, stderr=err, pass_fds=(write_end,))
                os.close(write_end)
                write_end = -1
                with os.fdopen(read_end, "r") as report:
                    read_end = -1
                    line = report.read()
                proc.wait()
                wall = time.monotonic() - t0
            finally:
                for fd in (read_end, write_end):
                    if fd >= 0:
                        os.close(fd)
            code_s, user_s, sys_s, rss_s = line.split()
            code, user, system, maxrss = int(code_s), float(user_s), float(sys_s), int(rss_s)
        LAST_USER_SYS = (user, system)
        err.seek(0)
        return code, user + system, wall, maxrss, err.read().decode(errors="replace")


def per_tick(argv_for_k, ticks: int, reps: int, env: Optional[dict] = None) -> dict:
    """Median over reps of (cpu(K=1+ticks) - cpu(K=1)) / ticks, plus max RSS seen."""
    samples, rss, walls, users, syss = [], 0, [], [], []
    for _ in range(reps):
        out, split = [], []
        for k in (1, 1 + ticks):
            code, cpu, wall, maxrss, err = run_rusage(argv_for_k(k), env=env)
            if code != 0:
                raise RuntimeError(f"{shlex.join(argv_for_k(k))} exited {code}:\n{err.strip()}")
            out.append(cpu)
            split.append(LAST_USER_SYS)
            rss = max(rss, maxrss)
            walls.append(wall)
        samples.append((out[1] - out[0]) / ticks)
        users.append((split[1][0] - split[0][0]) / ticks)
        syss.append((split[1][1] - split[0][1]) / ticks)
    return {
        "cpu_ms_per_tick": statistics.median(samples) * 1000,
        "user_ms_per_tick": statistics.median(users) * 1000,
        "sys_ms_per_tick": statistics.median(syss) * 1000,
        "cpu_ms_per_tick_samples": [round(s * 1000, 3) for s in samples],
        "peak_rss_mib": rss / 1024,
    }


def compile_c(workdir: str) -> str:
    """Build readfiles.c (returned) and rusage.c (RUSAGE)."""
    global RUSAGE
    binary = os.path.join(workdir, "readfiles")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-o", binary, os.path.join(HERE, "readfiles.c")], check=True)
    launcher = os.path.join(workdir, "rusage")
    subprocess.run([cc, "-O2", "-o", launcher, os.path.join(HERE, "rusage.c")], check=True)
    RUSAGE = launcher
    return binary


def c_argv(binary: str, hierarchies: Sequence[Hierarchy], k: int, interval: float, match: str,
           keep: bool = False) -> List[str]:
    return ([binary, "-k", str(k), "-i", str(interval), "-m", match] + (["-p"] if keep else [])
            + [f"{h.kind}:{h.mount}" for h in hierarchies])


KEPT_PROBE = r"""
import json, os, sys, time
def kmem():
    for line in open("/proc/self/cgroup"):
        _, ctrls, path = line.rstrip("\n").split(":", 2)
        if "memory" in ctrls.split(","):
            try:
                return int(open("/sys/fs/cgroup/memory" + path + "/memory.kmem.usage_in_bytes").read())
            except OSError:
                return None
    return None
before = kmem()
from cgstat.pipeline.sampler import Sampler
s = Sampler(all=True, match=sys.argv[1], gpu=False)
s.tick(); s.tick()
after = kmem()
t0 = time.monotonic(); s.discoverer.follower.lost = True; s.discoverer.join(); rescan = time.monotonic() - t0
print(json.dumps({"kept_fds": s.kept.count, "pinned_estimate_mib": s.kept.pinned_bytes() / 2**20,
                  "watches": len(s.discoverer.follower.wd), "rescan_ms": rescan * 1000,
                  "kmem_delta_mib": None if before is None or after is None else (after - before) / 2**20}))
"""


def kept_probe(cgstat_env_: dict, match: str) -> dict:
    """Descriptors and watches one sampler keeps, their kernel memory, a full rescan's time."""
    proc = subprocess.run([sys.executable, "-c", KEPT_PROBE, match], env=cgstat_env_, capture_output=True,
                          text=True, timeout=600, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-300:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def once_state_wall(cgstat: List[str], match: str, reps: int, workdir: str) -> float:
    """Median wall ms of `once --state` (a cron run with a saved state) over the groups."""
    state = os.path.join(workdir, "state.json")
    argv = cgstat + ["once", "--state", state, "--all", "--match", match]
    run_rusage(argv, env=cgstat_env())
    walls = []
    for _ in range(reps):
        code, _, wall, _, err = run_rusage(argv, env=cgstat_env())
        if code != 0:
            raise RuntimeError(f"once --state exited {code}: {err.strip()}")
        walls.append(wall)
    return statistics.median(walls) * 1000


def c_census(binary: str, hierarchies: Sequence[Hierarchy], match: str) -> dict:
    """cgroups and files one C tick sees (from its summary line)."""
    code, _, _, _, err = run_rusage(c_argv(binary, hierarchies, 1, 0, match))
    if code != 0:
        raise RuntimeError(f"readfiles exited {code}: {err}")
    fields = dict(kv.split("=", 1) for kv in err.split() if "=" in kv)
    return {"cgroups_per_tick": int(fields["cgroups_per_tick"]), "files_per_tick": int(fields["files_per_tick"])}


USE_REPO = True  # run this checkout: put the repository first on PYTHONPATH


def cgstat_census(cgstat: List[str], match: str) -> int:
    """Records one cgstat snapshot produces for the bench groups (a check it sees them)."""
    proc = subprocess.run(cgstat + ["once", "--window", "0", "--all", "--match", match],
                          env=cgstat_env(), capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cgstat once exited {proc.returncode}:\n{proc.stderr.strip()}")
    return sum(1 for line in proc.stdout.splitlines() if match in line)


def cgstat_env() -> dict:
    env = dict(os.environ)
    if USE_REPO:
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("CGSTAT_OUTPUT", None)
    env.pop("CGSTAT_INTERVAL", None)
    env.pop("CGSTAT_HOST_ROOT", None)
    # An installed agent starts from cached bytecode (pip compiles it at install): so do
    # the start-up and once --state figures (see main()).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def startup_cost(cgstat: List[str], match: str, reps: int) -> dict:
    env = cgstat_env()
    result = {}
    for name, args in (("version", ["--version"]), ("once_window0", ["once", "--window", "0", "--all", "--match", match])):
        walls, cpus, rss = [], [], 0
        for _ in range(reps):
            code, cpu, wall, maxrss, err = run_rusage(cgstat + args, env=env)
            if code != 0:
                raise RuntimeError(f"{shlex.join(cgstat + args)} exited {code}:\n{err.strip()}")
            walls.append(wall)
            cpus.append(cpu)
            rss = max(rss, maxrss)
        result[name] = {
            "wall_ms": statistics.median(walls) * 1000,
            "cpu_ms": statistics.median(cpus) * 1000,
            "peak_rss_mib": rss / 1024,
        }
    return result


# --------------------------------------------------------------------------- main


def check_groups(groups: BenchGroups) -> None:
    for h in groups.hierarchies:
        for i in (0, groups.n - 1):
            d = groups.child_dir(h, i)
            if not os.path.isfile(os.path.join(d, "cgroup.procs")):
                raise RuntimeError(f"{d} is not a cgroup")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10,100,1000,5000", help="comma-separated N values (default 10,100,1000,5000)")
    ap.add_argument("--populated", default="100",
                    help="sizes also measured with one process in each cgroup (default 100; '' for none)")
    ap.add_argument("--ticks", type=int, default=10, help="ticks in the difference run (default 10)")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between ticks (default 0.2)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per measurement; the median is reported")
    ap.add_argument("--cgstat", default=None,
                    help="command that runs an installed cgstat, e.g. /usr/local/bin/cgstat "
                         "(default: this Python -m cgstat from this checkout)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    ap.add_argument("--no-cgstat", action="store_true", help="measure only the C side")
    ap.add_argument("--setup-only", action="store_true", help="create, check and remove the groups; no measuring")
    ap.add_argument("--hold", action="store_true",
                    help="create the groups of the first size (populated if it is in --populated), print "
                         "the --match pattern, keep them until stdin closes, Enter, Ctrl-C or SIGTERM, "
                         "then remove them: for profiling cgstat by hand")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    global USE_REPO
    USE_REPO = args.cgstat is None
    cgstat = [sys.executable, "-m", "cgstat"] if USE_REPO else shlex.split(args.cgstat)
    match = PREFIX.rstrip("-")

    if os.geteuid() != 0:
        print("tick_cost: creating cgroups needs root", file=sys.stderr)
        return 1
    if USE_REPO:  # this checkout's bytecode, as pip install would have written it
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(REPO, "cgstat")],
                       stdout=subprocess.DEVNULL, env=cgstat_env(), check=False)
    hierarchies = find_hierarchies()
    if not hierarchies:
        print("tick_cost: no usable cgroup hierarchy found", file=sys.stderr)
        return 1

    old = {s: signal.signal(s, _raise_terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
    report = {
        "host": {
            "kernel": os.uname().release,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "hierarchies": [{"kind": h.kind, "own_dir": h.own_dir} for h in hierarchies],
        },
        "method": {"ticks": args.ticks, "interval_s": args.interval, "reps": args.reps,
                   "cgstat": cgstat, "match": match},
        "rows": [],
    }
    if args.hold:
        n = sizes[0]
        try:
            with BenchGroups(hierarchies, n) as groups:
                check_groups(groups)
                if n in [int(x) for x in args.populated.split(",") if x]:
                    groups.populate()
                print(f"{len(groups.created)} groups under {groups.parent}; --all --match {match}", flush=True)
                sys.stdin.readline()
        except (KeyboardInterrupt, _Terminate):
            pass
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        return 0

    if USE_REPO and not args.no_cgstat:
        # Measure the agent as installed: pip compiles an installed package's bytecode, but a
        # checkout run with PYTHONDONTWRITEBYTECODE=1 (as on the dev machines) would compile
        # every module on every start (~60 ms and several MiB more).
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(REPO, "cgstat")], check=True)

    try:
        with tempfile.TemporaryDirectory(prefix="cgstat-bench.") as work:
            binary = None if args.setup_only else compile_c(work)
            if not args.setup_only and not args.no_cgstat:
                report["startup"] = startup_cost(cgstat, match, args.reps)
            populated = [int(x) for x in args.populated.split(",") if x]
            runs = [(n, False) for n in sizes] + [(n, True) for n in populated]
            for n, full in runs:
                with BenchGroups(hierarchies, n) as groups:
                    check_groups(groups)
                    if full and not args.setup_only:
                        groups.populate()
                    row: dict = {"n": n, "populated": full, "parent": groups.parent}
                    # Only this run's groups: another run's (a second checkout measured at
                    # the same time) would double what both read.
                    match = groups.parent  # hex: the same as a regex (cgstat) and a substring (C)
                    if args.setup_only:
                        row["created"] = len(groups.created)
                        report["rows"].append(row)
                        continue
                    row.update(c_census(binary, hierarchies, match))
                    row["c"] = per_tick(lambda k: c_argv(binary, hierarchies, k, args.interval, match),
                                        args.ticks, args.reps)
                    row["c_kept"] = per_tick(lambda k: c_argv(binary, hierarchies, k, args.interval, match, True),
                                             args.ticks, args.reps)
                    if not args.no_cgstat:
                        row["cgstat_records"] = cgstat_census(cgstat, match)
                        row["cgstat"] = per_tick(
                            lambda k: cgstat + ["stream", "--interval", str(args.interval), "--count", str(k),
                                                "--all", "--match", match],
                            args.ticks, args.reps, env=cgstat_env())
                        c_ms = row["c"]["cpu_ms_per_tick"]
                        row["ratio"] = row["cgstat"]["cpu_ms_per_tick"] / c_ms if c_ms > 0 else None
                        row["once_state_wall_ms"] = once_state_wall(cgstat, match, args.reps, work)
                        if USE_REPO:
                            row["kept"] = kept_probe(cgstat_env(), match)
                    report["rows"].append(row)
                    if not args.json:
                        print(f"  N={n} done", file=sys.stderr)
    except (KeyboardInterrupt, _Terminate):
        print("tick_cost: interrupted; cgroups removed", file=sys.stderr)
        return 130
    finally:
        for s, h in old.items():
            signal.signal(s, h)

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


def print_table(report: dict, others: bool = True) -> None:
    host = report["host"]
    m = report["method"]
    print(f"kernel {host['kernel']}, {host['cpus']} CPUs, Python {host['python']}; "
          f"hierarchies: {', '.join(h['kind'] for h in host['hierarchies'])}")
    print(f"CPU per tick = (CPU of {m['ticks'] + 1} ticks - CPU of 1 tick) / {m['ticks']}, "
          f"interval {m['interval_s']} s, median of {m['reps']}")
    if "startup" in report:
        for name, s in report["startup"].items():
            print(f"cgstat {name}: wall {s['wall_ms']:.0f} ms, CPU {s['cpu_ms']:.0f} ms, "
                  f"peak RSS {s['peak_rss_mib']:.1f} MiB")
    print()
    head = (f"{'N':>6} {'pop':>3} {'cgroups':>7} {'files':>6} {'records':>7} {'cgstat ms':>9} {'(user/sys)':>11} "
            f"{'C open ms':>9} {'C kept ms':>9} {'ratio':>5} {'RSS MiB':>7} {'once--state':>11} "
            f"{'fds':>6} {'pinned MiB':>10} {'kmem MiB':>8} {'rescan ms':>9}")
    print(head)
    print("-" * len(head))
    for r in report["rows"]:
        if "c" not in r:
            print(f"{r['n']:>6} created {r['created']} directories, removed")
            continue
        cg = r.get("cgstat")
        cg_ms = f"{cg['cpu_ms_per_tick']:.2f}" if cg else "-"
        cg_split = f"{cg['user_ms_per_tick']:.1f}/{cg['sys_ms_per_tick']:.1f}" if cg else "-"
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "-"
        rss = f"{cg['peak_rss_mib']:.1f}" if cg else "-"
        k = r.get("kept") or {}
        kmem = k.get("kmem_delta_mib")
        print(f"{r['n']:>6} {'yes' if r.get('populated') else 'no':>3} {r['cgroups_per_tick']:>7} "
              f"{r['files_per_tick']:>6} {r.get('cgstat_records', '-'):>7} {cg_ms:>9} {cg_split:>11} "
              f"{r['c']['cpu_ms_per_tick']:>9.2f} {r['c_kept']['cpu_ms_per_tick']:>9.2f} {ratio:>5} {rss:>7} "
              f"{r.get('once_state_wall_ms', 0):>9.0f}ms {k.get('kept_fds', '-'):>6} "
              f"{k.get('pinned_estimate_mib', 0):>10.1f} {'-' if kmem is None else f'{kmem:.1f}':>8} "
              f"{k.get('rescan_ms', 0):>9.1f}")
    rows = {r["n"]: r for r in report["rows"] if not r.get("populated") and r.get("cgstat")}
    if 1000 in rows and 5000 in rows:
        print(f"\n5000/1000 cgstat tick cost: "
              f"{rows[5000]['cgstat']['cpu_ms_per_tick'] / rows[1000]['cgstat']['cpu_ms_per_tick']:.2f}")
    if others:
        print("\nOther costs, all in one run with this table: bench/all.py (GPU reading through the NVML "
              "double, naming 1,000 containers, Prometheus rendering, network per workload); "
              "bench/soak.py: RSS and descriptors over 100,000 ticks.")


if __name__ == "__main__":
    sys.exit(main())
