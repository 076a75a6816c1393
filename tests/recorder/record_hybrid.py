#!/usr/bin/env python3
"""Record THIS host's real cgroup tree (v1 / hybrid) as a cgstat test fixture.

usage (root): python3 tests/recorder/record_hybrid.py [DEST] [--gap SECONDS]
    DEST defaults to tests/fixtures/hybrid-local; --gap (start to start) defaults to 2.

What it does
  1. With tests/helpers/realcg.py it creates cgstat-test-* groups below its own cgroup in every
     hierarchy (memory is nested on the dev machines) and starts known workloads in them:
       quota  - busy loop under cpu.cfs_quota_us=50000 / period 100000 (0.5 core)
       burn1s - burned exactly 1.0 s of CPU, then sleeps
       mem    - 64 MiB of anonymous memory touched and held; memory.limit_in_bytes=200000000
       io     - blkio.throttle.write_bps_device "<root disk> 107374182400" (harmless, makes
                v1 throttle stats count); a loop of `dd bs=1M count=4 oflag=direct; sleep 0.2` + a sleeper
       pids   - pids.max=50 and 5 sleepers
       oom    - memory.limit_in_bytes=32 MiB, a sleeper, and an allocator of 128 MiB that the
                OOM killer killed before t0 (oom_kill 1)
     plus one runc container (busybox) with the RELATIVE cgroupsPath
     cgstat-test-ctr-<r>/docker/<64hex>: it lands under runc's own cgroup in each hierarchy, so
     memory is nested differently from cpu; limits 256 MiB / pids 64 / 0.5 core; it fills
     48 MiB of /dev/shm and spins.
  2. Takes two snapshots DEST/t0 and DEST/t1, --gap seconds apart. Each is a fake host root:
       sys/fs/cgroup/<every hierarchy>/...   every readable file's content read to EOF
                                             (cgroupfs reports st_size 0; a copy is empty)
       proc/self/{mountinfo,cgroup}          of the recorder (sits where cgstat would)
       proc/1/mountinfo
       proc/<pid>/{cgroup,status,comm,stat}   every userspace pid (kernel threads skipped;
                                             on this machine every userspace pid is in a
                                             non-root memory cgroup); cmdline too for the
                                             processes the recorder started (not for the
                                             sandbox machinery: its cmdline holds its env)
       proc/{meminfo,stat,partitions,uptime,diskstats,cgroups,...}
       sys/devices/system/cpu/{online,possible,present}
     and metadata next to it (not part of the host root): inodes.txt
     ("<inode> <path relative to /sys/fs/cgroup>"), listing.txt ("<mode> <path>"),
     unreadable.txt (write-only files, skipped), cgroup_read_times.txt, snapshot_time(_end),
     snapshot_clock.
  3. DEST/meta/: scenario.json (names, pids, ids, paths), runc-events-t{0,1}.json
     (`runc events --stats`, runc's own reading), and DEST/SCENARIO.md generated from the
     recorded files.
  4. Kills everything it started and removes every cgroup it created, deepest first.

Nothing recorded is edited afterwards.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, os.path.dirname(TESTS))

from tests.helpers import realcg as R  # noqa: E402

MIB = 1 << 20
PF_KTHREAD = 0x00200000


# --------------------------------------------------------------------------- snapshot


def slurp(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def put(dst, data):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(data)


def is_kthread(pid):
    try:
        st = slurp("/proc/%s/stat" % pid).decode()
    except OSError:
        return True
    fields = st[st.rindex(")") + 2:].split()
    return int(fields[6]) & PF_KTHREAD != 0  # field 9 (flags) overall


def snapshot(out):
    """Mirror /sys/fs/cgroup and the relevant /proc files into OUT (a fake host root)."""
    os.makedirs(out)
    mono0, boot0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    put(os.path.join(out, "snapshot_time"), slurp("/proc/uptime"))
    items = []  # (rel, data or None for dir)
    inodes, listing, unreadable, times = [], [], [], []

    def walk(rel):
        src = "/sys/fs/cgroup" + rel
        items.append((rel, None))
        try:
            inodes.append("%d %s" % (os.stat(src).st_ino, rel or "/"))
            names = sorted(os.listdir(src))
        except OSError as e:  # a cgroup removed under us
            sys.stderr.write("snapshot: %s: %s\n" % (src, e))
            return
        times.append("%.9f %s" % (time.clock_gettime_ns(time.CLOCK_BOOTTIME) / 1e9, rel or "/"))
        subdirs = []
        for n in names:  # files first: one cgroup's files read close together
            p, r = src + "/" + n, rel + "/" + n
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                subdirs.append(r)
                continue
            listing.append("%04o %s" % (st.st_mode & 0o7777, r))
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                items.append((r, slurp(p)))
            except OSError as e:
                unreadable.append("%s %s" % (r, os.strerror(e.errno)))
        for r in subdirs:
            walk(r)

    walk("")
    mono_cg = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    for rel, data in items:
        dst = os.path.join(out, "sys/fs/cgroup" + rel)
        if data is None:
            os.makedirs(dst, exist_ok=True)
        else:
            put(dst, data)

    for g in ("meminfo", "stat", "partitions", "uptime", "loadavg", "diskstats", "cgroups",
              "filesystems", "cpuinfo", "version", "mounts", "vmstat", "swaps",
              "pressure/cpu", "pressure/memory", "pressure/io"):
        try:
            put(os.path.join(out, "proc", g), slurp("/proc/" + g))
        except OSError:
            pass
    for f in ("mountinfo", "cgroup"):
        put(os.path.join(out, "proc/self", f), slurp("/proc/self/" + f))
    put(os.path.join(out, "proc/1/mountinfo"), slurp("/proc/1/mountinfo"))
    for f in ("online", "possible", "present"):
        put(os.path.join(out, "sys/devices/system/cpu", f), slurp("/sys/devices/system/cpu/" + f))

    # per-pid files. cmdline only for the processes this recorder started (its descendants
    # and everything in a cgstat-test-* cgroup): the other userspace processes on the dev
    # machines belong to the sandbox machinery, whose command lines carry its environment;
    # for those only cgroup/status/comm/stat are recorded (cmdline absent, as if unreadable)
    got_all, ppid = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or is_kthread(d):
            continue
        got = {}
        for f in ("cgroup", "status", "comm", "stat"):
            try:
                got[f] = slurp("/proc/%s/%s" % (d, f))
            except OSError:
                pass
        if "cgroup" in got and "stat" in got:  # gone meanwhile otherwise
            st = got["stat"].decode()
            ppid[int(d)] = int(st[st.rindex(")") + 2:].split()[1])
            got_all[int(d)] = got
    me = os.getpid()

    def ours(pid):
        if b"/cgstat-test-" in got_all[pid]["cgroup"]:
            return True
        seen = set()
        while pid and pid not in seen:
            if pid == me:
                return True
            seen.add(pid)
            pid = ppid.get(pid, 0)
        return False

    pids = sorted(got_all)
    for pid in pids:
        got = got_all[pid]
        if ours(pid):
            try:
                got["cmdline"] = slurp("/proc/%d/cmdline" % pid)
            except OSError:
                pass
        for f, data in got.items():
            put(os.path.join(out, "proc", str(pid), f), data)

    mono1, boot1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    put(os.path.join(out, "snapshot_time_end"), slurp("/proc/uptime"))
    for name, lines in (("inodes.txt", inodes), ("listing.txt", listing),
                        ("unreadable.txt", unreadable), ("cgroup_read_times.txt", times)):
        put(os.path.join(out, name), "".join(l + "\n" for l in lines).encode())
    put(os.path.join(out, "snapshot_clock"), (
        "monotonic_ns_start %d\nboottime_ns_start %d\nmonotonic_ns_cgroup_done %d\n"
        "monotonic_ns_end %d\nboottime_ns_end %d\n" % (mono0, boot0, mono_cg, mono1, boot1)
    ).encode())
    return pids


# --------------------------------------------------------------------------- foreign groups


def foreign_now(mine):
    """Top-level cgstat-* groups (below any cgroup, 3 levels deep) that are not ours."""
    found = set()
    for dirpath, dirnames, _ in os.walk("/sys/fs/cgroup"):
        depth = dirpath[len("/sys/fs/cgroup"):].count("/")
        for d in list(dirnames):
            if d.startswith("cgstat-"):
                if d not in mine:
                    found.add(os.path.join(dirpath, d))
                dirnames.remove(d)  # never descend into test groups (ours or not)
        if depth >= 3:
            dirnames[:] = []
    return found


def wait_quiet(mine, timeout):
    deadline = time.monotonic() + timeout
    while True:
        found = foreign_now(mine)
        if not found:
            return
        if time.monotonic() > deadline:
            sys.exit("foreign cgstat-* groups stay: %s" % sorted(found)[:5])
        time.sleep(0.5)


def recorded_foreign(dest, mine):
    bad = set()
    for sub in ("t0", "t1"):
        with open(os.path.join(dest, sub, "inodes.txt")) as f:
            for line in f:
                for part in line.split()[1].split("/"):
                    if part.startswith("cgstat-") and part not in mine:
                        bad.add(part)
    return bad


# --------------------------------------------------------------------------- scenario


def main(argv):
    dest = os.path.join(TESTS, "fixtures", "hybrid-local")
    gap = 2.0
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--gap":
            gap = float(args.pop(0))
        else:
            dest = a
    why = R.skip_reason()
    if why:
        sys.exit("cannot record: " + why)
    for sub in ("t0", "t1", "meta"):
        if os.path.exists(os.path.join(dest, sub)):
            shutil.rmtree(os.path.join(dest, sub))
    os.makedirs(os.path.join(dest, "meta"), exist_ok=True)

    h = R.Hierarchies()
    work = tempfile.mkdtemp(prefix="cgstat-rec-")
    wl = R.build_workload(work)
    groups, scen = {}, {"groups": {}, "container": None}

    def group(label):
        g = R.TestGroup(h, name="%s%s-%s" % (R.PREFIX, label, os.urandom(2).hex()))
        groups[label] = g
        return g

    try:
        dev = R.root_disk()
        g = group("quota")
        g.set_cpu_quota(50000, 100000)
        g.start([wl, "spin"]).wait_line("ready")

        g = group("burn1s")
        g.start([wl, "burn", "1.0"]).wait_line("done", timeout=60)

        g = group("mem")
        g.set_memory_limit(200000000)
        g.start([wl, "hold", "64"]).wait_line("ready")

        g = group("io")
        g.set_blkio_rule(dev)
        g.start([wl, "sleep"]).wait_line("ready")
        g.start(["sh", "-c", "while :; do dd if=/dev/zero of=%s/direct.bin bs=1M count=4 "
                             "oflag=direct 2>/dev/null; sleep 0.2; done" % work], stdout=subprocess.DEVNULL)

        g = group("pids")
        g.set_pids_max(50)
        for _ in range(5):
            g.start([wl, "sleep"]).wait_line("ready")

        g = group("oom")
        g.set_memory_limit(32 * MIB)
        g.start([wl, "sleep"]).wait_line("ready")
        hog = g.start([wl, "alloc", "128"])
        oom_rc = hog.wait(timeout=60)

        rt = R.Runc(R.ensure_runc(), work)
        ctr = rt.container(["/bin/busybox", "sh", "-c",
                            "dd if=/dev/zero of=/dev/shm/fill bs=1M count=48 2>/dev/null; "
                            "while :; do :; done"], h, memory_limit=256 * MIB, pids_limit=64,
                           cpu_quota=50000, cpu_period=100000,
                           parent="%sctr-%s" % (R.PREFIX, os.urandom(2).hex()))
        ctr.run()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if ctr.stats()["data"]["memory"]["usage"]["usage"] >= 48 * MIB:
                break
            time.sleep(0.1)
        time.sleep(1.0)  # let the quota loops and the IO loop settle into a steady state

        for label, g in groups.items():
            scen["groups"][label] = {
                "name": g.name,
                "paths": {k: g.rel(k) for k in g.keys},
                "pids": sorted(int(x) for x in g.read("cpu", "cgroup.procs").split()),
            }
        scen["groups"]["oom"]["oom_killed_allocator"] = {"pid": hog.pid, "returncode": oom_rc}
        scen["container"] = {
            "id": ctr.id, "cgroupsPath": ctr.cgroups_path, "pid": ctr.pid,
            "paths": {k: ctr.rel(k) for k in h.distinct(h.mounts)},
            "limits": ctr.limits,
        }
        scen["root_disk"] = {"device": dev, "name": R.disk_name(dev)}
        scen["recorder_own_cgroup"] = h.own

        # Other sessions on the same machine may create their own cgstat-* test groups
        # (benchmarks make ~100 at a time); those would make the recording huge and not ours.
        # Record only in a quiet moment, and retry when one appeared during the snapshots.
        mine = {g.name for g in groups.values()} | {ctr.parent}
        for attempt in range(1, 41):
            wait_quiet(mine, timeout=300)
            for sub in ("t0", "t1"):
                shutil.rmtree(os.path.join(dest, sub), ignore_errors=True)
            t_start = time.monotonic()
            ev0 = ctr.stats()
            pids0 = snapshot(os.path.join(dest, "t0"))
            t0_done = time.monotonic()
            time.sleep(max(0.0, t_start + gap - time.monotonic()))
            ev1 = ctr.stats()
            pids1 = snapshot(os.path.join(dest, "t1"))
            bad = recorded_foreign(dest, mine)
            if not bad:
                break
            sys.stderr.write("attempt %d: foreign cgroups appeared (%s), retrying\n"
                             % (attempt, ", ".join(sorted(bad)[:3])))
        else:
            sys.exit("no quiet moment to record in; giving up")
        scen["timing"] = {"gap_s": gap, "t0_walk_s": round(t0_done - t_start, 3)}
        scen["recorded_pids"] = {"t0": pids0, "t1": pids1}
        with open(os.path.join(dest, "meta", "runc-events-t0.json"), "w") as f:
            json.dump(ev0, f, indent=1, sort_keys=True)
        with open(os.path.join(dest, "meta", "runc-events-t1.json"), "w") as f:
            json.dump(ev1, f, indent=1, sort_keys=True)
        with open(os.path.join(dest, "meta", "scenario.json"), "w") as f:
            json.dump(scen, f, indent=1, sort_keys=True)
    finally:
        R.cleanup_all()
        shutil.rmtree(work, ignore_errors=True)
    write_summary(dest, scen)
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(dest) for f in fs)
    print("recorded into %s (%d bytes)" % (dest, size))
    if size > 5 * 1000 * 1000:
        sys.stderr.write("warning: recording is larger than 5 MB\n")


# --------------------------------------------------------------------------- SCENARIO.md


def _r(snap, hier, path, fname):
    p = os.path.join(snap, "sys/fs/cgroup", hier + path.rstrip("/"), fname)
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return None


def _kv(text):
    if text is None:
        return {}
    out = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) == 2:
            out[p[0]] = p[1]
    return out


def _blk(text, op):
    if not text:
        return 0
    return sum(int(p[2]) for p in (l.split() for l in text.splitlines())
               if len(p) == 3 and p[1] == op)


def _clock(snap):
    return _kv(open(os.path.join(snap, "snapshot_clock")).read())


def write_summary(dest, scen):
    t0, t1 = os.path.join(dest, "t0"), os.path.join(dest, "t1")
    dt = (int(_clock(t1)["monotonic_ns_start"]) - int(_clock(t0)["monotonic_ns_start"])) / 1e9
    lines = []
    w = lines.append
    w("# hybrid-local: a recording of a real hybrid cgroup host (cgroup v1 + cgroup2 at /unified)")
    w("")
    w("Recorded by `tests/recorder/record_hybrid.py` (rerun it as root to refresh; IDs, pids and")
    w("values change on every run). `t0/` and `t1/` are fake host roots, taken %.3f s apart" % dt)
    w("(CLOCK_MONOTONIC, start to start; see each `snapshot_clock`). `meta/scenario.json` has the")
    w("names, pids and paths below in machine-readable form; `meta/runc-events-t{0,1}.json` is")
    w("`runc events --stats` for the container, taken just before each snapshot. Nothing in t0/t1 is")
    w("hand-edited; files the kernel refuses to read (write-only) are listed in `unreadable.txt`.")
    w("")
    w("## Host layout")
    w("")
    w("- Every v1 controller is mounted on its own: /sys/fs/cgroup/{cpu,cpuacct,cpuset,memory,devices,")
    w("  freezer,blkio,pids,systemd(name=systemd)}; cgroup2 at /sys/fs/cgroup/unified (only cpu.stat,")
    w("  cpu.stat.local, cgroup.*, and {cpu,memory,io}.pressure files; no controllers enabled).")
    w("- The recorder (`proc/self/cgroup`) sits at `/` in every hierarchy except memory: `%s`."
      % scen["recorder_own_cgroup"].get("memory"))
    w("  So every test group's memory cgroup is nested one level deeper than its cpu cgroup.")
    w("- Root disk %s = `%s` (ext4 on /, mq-deadline). No swap. PID 1 is not systemd."
      % (scen["root_disk"]["device"], scen["root_disk"]["name"]))
    w("")
    w("## What ran where")
    w("")
    desc = {
        "quota": "busy loop, cpu.cfs_quota_us=50000 cpu.cfs_period_us=100000 (0.5 core)",
        "burn1s": "burned 1.0 s of CPU (CLOCK_PROCESS_CPUTIME_ID) before t0, then sleeps",
        "mem": "64 MiB anonymous memory touched and held; memory.limit_in_bytes written 200000000",
        "io": "loop of `dd if=/dev/zero bs=1M count=4 oflag=direct; sleep 0.2` to a file on / + a sleeper; "
              "blkio.throttle.write_bps_device \"%s 107374182400\"" % scen["root_disk"]["device"],
        "pids": "pids.max=50, 5 sleepers",
        "oom": "memory.limit_in_bytes=32 MiB, a sleeper; an allocator of 128 MiB was OOM-killed "
               "before t0 (returncode %s)" % scen["groups"]["oom"]["oom_killed_allocator"]["returncode"],
    }
    for label, g in scen["groups"].items():
        w("- **%s** `%s`: %s. pids %s. cpu path `%s`, memory path `%s`." % (
            label, g["name"], desc.get(label, ""), g["pids"], g["paths"].get("cpu"),
            g["paths"].get("memory")))
    c = scen["container"]
    w("- **container** (runc %s, busybox): id `%s`, relative cgroupsPath `%s`, pid %s; fills 48 MiB"
      % (_runc_version(), c["id"], c["cgroupsPath"], c["pid"]))
    w("  of /dev/shm (shmem) then spins; limits memory 256 MiB, pids 64, cpu quota 50000/100000.")
    w("  cpu path `%s`; memory path `%s`." % (c["paths"]["cpu"], c["paths"]["memory"]))
    w("  runc also created it in cpuset, devices, freezer, name=systemd and unified.")
    w("  Its parents `.../%s` and `.../%s/docker` exist in every hierarchy (no processes)."
      % (c["cgroupsPath"].split("/")[0], c["cgroupsPath"].split("/")[0]))
    w("")
    w("## Key values (read from the recorded files)")
    w("")
    w("| cgroup | file | t0 | t1 | note |")
    w("|---|---|---|---|---|")
    rows = []
    targets = [(label, g["paths"]) for label, g in scen["groups"].items()]
    targets.append(("container", c["paths"]))
    for label, paths in targets:
        def both(hier, fname, f=lambda s: s.strip() if s else s, paths=paths):
            return f(_r(t0, hier, paths[hier], fname)), f(_r(t1, hier, paths[hier], fname))

        u0, u1 = both("cpuacct", "cpuacct.usage", lambda s: int(s) if s else None)
        note = ""
        if u0 is not None and u1 is not None:
            note = "%.1f %% of a core over t0..t1" % ((u1 - u0) / 1e9 / dt * 100)
        rows.append((label, "cpuacct.usage (ns)", u0, u1, note))
        s0, s1 = both("cpu", "cpu.stat", _kv)
        rows.append((label, "cpu.stat nr_periods / nr_throttled / throttled_time",
                     "%s / %s / %s" % (s0.get("nr_periods"), s0.get("nr_throttled"), s0.get("throttled_time")),
                     "%s / %s / %s" % (s1.get("nr_periods"), s1.get("nr_throttled"), s1.get("throttled_time")), ""))
        q0, _ = both("cpu", "cpu.cfs_quota_us")
        p0, _ = both("cpu", "cpu.cfs_period_us")
        rows.append((label, "cpu.cfs_quota_us / cfs_period_us", "%s / %s" % (q0, p0), "", ""))
        m0, m1 = both("memory", "memory.usage_in_bytes")
        rows.append((label, "memory.usage_in_bytes", m0, m1, ""))
        l0, _ = both("memory", "memory.limit_in_bytes")
        rows.append((label, "memory.limit_in_bytes", l0, "", ""))
        st0, st1 = both("memory", "memory.stat", _kv)
        rows.append((label, "memory.stat rss / cache / shmem / total_inactive_file",
                     "%s / %s / %s / %s" % (st0.get("rss"), st0.get("cache"), st0.get("shmem"), st0.get("total_inactive_file")),
                     "%s / %s / %s / %s" % (st1.get("rss"), st1.get("cache"), st1.get("shmem"), st1.get("total_inactive_file")), ""))
        o0, o1 = both("memory", "memory.oom_control", _kv)
        rows.append((label, "memory.oom_control oom_kill", o0.get("oom_kill"), o1.get("oom_kill"), ""))
        b0, b1 = both("blkio", "blkio.throttle.io_service_bytes", lambda s: s)
        w0, w1 = _blk(b0, "Write"), _blk(b1, "Write")
        rows.append((label, "blkio.throttle.io_service_bytes Write (sum)", w0, w1,
                     "%.0f B/s" % ((w1 - w0) / dt) if w1 != w0 else ""))
        rows.append((label, "blkio.throttle.io_service_bytes Read (sum)", _blk(b0, "Read"), _blk(b1, "Read"), ""))
        pc0, pc1 = both("pids", "pids.current")
        pm0, _ = both("pids", "pids.max")
        rows.append((label, "pids.current / pids.max", "%s / %s" % (pc0, pm0), pc1, ""))
        if "unified" in paths:
            ps0, ps1 = both("unified", "cpu.pressure", lambda s: (s or "").splitlines()[0] if s else None)
            rows.append((label, "unified cpu.pressure (some)", ps0, ps1, ""))
    for r in rows:
        w("| %s | %s | %s | %s | %s |" % tuple("" if x is None else x for x in r))
    with open(os.path.join(dest, "meta", "runc-events-t0.json")) as f:
        ev = json.load(f)["data"]
    w("")
    w("runc's own reading of the container just before t0: memory usage %s (limit %s), pids %s "
      "(limit %s), cpu total %s ns, throttled periods %s." % (
          ev["memory"]["usage"]["usage"], ev["memory"]["usage"]["limit"], ev["pids"]["current"],
          ev["pids"]["limit"], ev["cpu"]["usage"]["total"], ev["cpu"]["throttling"].get("throttledPeriods")))
    w("")
    w("## Quirks seen on this host")
    w("")
    w("- `memory.limit_in_bytes` written 200000000 reads back page-rounded (see the mem row);")
    w("  unlimited reads 9223372036854771712.")
    w("- The memory hierarchy has a non-standard `memory.shown_ram_in_bytes` in the sandbox cgroups.")
    w("- blkio.bfq.* files exist but stay empty/zero (the disk uses mq-deadline); only")
    w("  blkio.throttle.* count, and only since a throttle rule exists on the device.")
    w("- The cgroup2 hierarchy has no controllers; `cpu.stat` there still has usage/user/system_usec,")
    w("  and v1 CFS throttling shows up as cgroup2 `cpu.pressure` (some and full).")
    w("- Write-only files (not recorded): see `t0/unreadable.txt`.")
    w("- Other sandbox memory cgroups (`/process_api/<hash>`) belong to other sessions on the")
    w("  same machine; their processes are recorded too (every userspace pid is in a non-root")
    w("  memory cgroup here), but without `cmdline`: the sandbox machinery passes its environment")
    w("  on its command line, so only cgroup/status/comm/stat are kept for processes the recorder")
    w("  did not start. pid 1 (`process_api`, not systemd) is recorded the same way.")
    with open(os.path.join(dest, "SCENARIO.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _runc_version():
    try:
        out = subprocess.run([R.ensure_runc(), "--version"], capture_output=True, check=False).stdout.decode()
        return out.split()[2]
    except (OSError, RuntimeError, IndexError):
        return "?"


if __name__ == "__main__":
    main(sys.argv[1:])
