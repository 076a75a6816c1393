#!/usr/bin/env python3
"""Write FIXTURE/SCENARIO.md: the cgroups of interest with ID, runtime, name, limits,
workload and their key recorded counters at t0 and t1 (read from the recorded files),
followed by the detailed per-cgroup values of summarize_v1.py.

usage: make_scenario.py FIXTURE_DIR TITLE [INTRO_FILE]
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from add_runtime_state import DOCKER, PODS  # noqa: E402

D, TITLE = sys.argv[1], sys.argv[2]
INTRO = open(sys.argv[3]).read() if len(sys.argv) > 3 else ""


def rd(t, rel):
    try:
        with open(os.path.join(D, t, rel)) as f:
            return f.read()
    except OSError:
        return None


def kv(text):
    return {l.split()[0]: l.split()[1] for l in (text or "").splitlines() if len(l.split()) == 2}


ids = {}
for line in rd("meta", "record.log").splitlines():
    if line.startswith("ids "):
        ids = dict(x.split("=", 1) for x in line.split()[1:])
pids = [l.split(" ", 2) for l in rd("meta", "pids.txt").splitlines()]

mi = {}
for line in rd("t0", "proc/self/mountinfo").splitlines():
    a, b = line.split(" - ")
    mp = a.split()[4]
    fstype, _, opts = b.split()
    if fstype in ("cgroup", "cgroup2") and mp.startswith("/sys/fs/cgroup"):
        mi[mp[len("/sys/fs/cgroup"):] or "/"] = (fstype, opts.split(","))
V2 = mi.get("/", ("",))[0] == "cgroup2"


def hier(ctl):
    for h, (fs, opts) in mi.items():
        if (ctl == "" and fs == "cgroup2") or ctl in opts:
            return h
    return None


def inodes(t):
    return {l.split(" ", 1)[1]: l.split(" ", 1)[0] for l in rd(t, "inodes.txt").splitlines()}


I0, I1 = inodes("t0"), inodes("t1")


def paths_of(pid):
    for t in ("t0", "t1"):
        txt = rd(t, "proc/%s/cgroup" % pid)
        if txt:
            out = {}
            for line in txt.splitlines():
                _, ctls, p = line.split(":", 2)
                for c in (ctls.split(",") if ctls else [""]):
                    out[c] = p
            return out
    return None


def f(t, ctl, path, name):
    h = hier(ctl)
    if h is None or path is None:
        return None
    rel = "sys/fs/cgroup" + (h if h != "/" else "") + (path if path != "/" else "") + "/" + name
    return rd(t, rel)


def key(t, paths):
    """(cpu usage in µs, memory bytes, oom_kill, io 'read/write' bytes, pids.current)"""
    if V2:
        p = paths[""]
        if f(t, "", p, "cgroup.procs") is None:
            return None
        cpu = kv(f(t, "", p, "cpu.stat")).get("usage_usec")
        mem = (f(t, "", p, "memory.current") or "").strip() or None
        oom = kv(f(t, "", p, "memory.events")).get("oom_kill")
        rb = wb = 0
        for line in (f(t, "", p, "io.stat") or "").splitlines():
            d = dict(x.split("=") for x in line.split()[1:])
            rb += int(d.get("rbytes", 0))
            wb += int(d.get("wbytes", 0))
        pc = (f(t, "", p, "pids.current") or "").strip() or None
        return cpu, mem, oom, "%d/%d" % (rb, wb), pc
    if f(t, "pids", paths.get("pids"), "cgroup.procs") is None:
        return None
    u = f(t, "cpuacct", paths.get("cpuacct"), "cpuacct.usage")
    cpu = str(int(u) // 1000) if u else None
    mem = (f(t, "memory", paths.get("memory"), "memory.usage_in_bytes") or "").strip() or None
    oom = kv(f(t, "memory", paths.get("memory"), "memory.oom_control")).get("oom_kill")
    rb = wb = 0
    for line in (f(t, "blkio", paths.get("blkio"), "blkio.throttle.io_service_bytes") or "").splitlines():
        p = line.split()
        if len(p) == 3 and p[1] == "Read":
            rb += int(p[2])
        if len(p) == 3 and p[1] == "Write":
            wb += int(p[2])
    pc = (f(t, "pids", paths.get("pids"), "pids.current") or "").strip() or None
    return cpu, mem, oom, "%d/%d" % (rb, wb), pc


def ino(paths):
    c = "" if V2 else "memory"
    h = hier(c)
    k = paths[c] if h == "/" else h + (paths[c] if paths[c] != "/" else "")
    return I0.get(k, "-"), I1.get(k, "-")


# label -> (ID label, runtime, name, limits, workload)
L = {
    "A_main": ("A", "docker", None, "cpu 50000/100000 µs (50 %), memory 64M, pids.max 50",
               "busy loop + 5 sleeps + shell; 24 MiB written to /dev/shm (shmem charged here)"),
    "B1_busy": ("B1", "containerd (k8s burstable pod B)", "trainer", "cpu weight/shares only",
                "busy loop (1 full CPU)"),
    "B2_pause": ("B2", "containerd (k8s pod B pause)", "(none: pause container)", "-", "pause"),
    "B3_besteffort": ("B3", "containerd (k8s besteffort pod BE)", "shipper", "cpu weight 1 / shares 2",
                      "sleep"),
    "C_sleep": ("C", "docker", None, "memory 32M",
                "sleeper; a 64 MiB dd in it was OOM-killed once before t0 (oom_kill 1)"),
    "D_sleep": ("D", "docker", "(no config.v2.json: the unnamed case)",
                "v2: io.max rbps=100MiB/s wbps=50MiB/s on vda; v1: harmless blkio.throttle read/write_bps 100 GiB/s on vda",
                "16 MiB O_DIRECT write + 8 MiB O_DIRECT read to /dev/vda before t0, 4 MiB more writes between t0 and t1"),
    "E_ctr": ("E", "rootless podman (uid 1000)", "jupyter", "-", "sleep in the nested `container` leaf"),
    "F_app": ("F", "CRI-O/containerd (k8s guaranteed pod F)", "api", "cpu 100000/100000, memory 128M (pod and container)", "sleep"),
    "F_pause": ("FP", "CRI-O/containerd (k8s pod F pause)", "(none: pause container)", "-", "pause"),
    "G_main": ("G", "docker", None, "-", "~1 s CPU then sleep; RESTARTED between t0 and t1 (same path, new inode, counters from 0)"),
    "G_restarted": ("G", "docker", None, "-", "the restarted G: sleep (t1 only)"),
    "H_main": ("H", "docker", None, "-", "sleep; REMOVED between t0 and t1 (t0 only)"),
    "I_main": ("I", "docker", None, "-", "sleep; ADDED between t0 and t1 (t1 only)"),
    "J_main": ("J", "docker", None, "memory 256M (in its memory-hierarchy cgroup)",
               "~1 s CPU, 8 MiB shmem, sleep; its MEMORY cgroup path differs from its other paths"),
}

out = ["# %s\n" % TITLE, INTRO.strip() + "\n" if INTRO else "",
       "## Cgroups of interest\n",
       "IDs are the 64-hex container IDs (pod UIDs below). Names come from the runtime-state files "
       "added next to the recording (see below); `-` = no limit set.\n",
       "| label | pid(s) | ID | runtime | name | limits set | workload |",
       "|---|---|---|---|---|---|---|"]
for lab, pid, path in pids:
    if lab not in L:
        continue
    idl, rt, name, lim, wl = L[lab]
    if name is None:
        name = DOCKER[idl][0] if idl in DOCKER else "?"
    if "CRI-O/containerd" in rt:
        rt = rt.replace("CRI-O/containerd", "CRI-O" if "crio-" in path else "containerd")
    if lab == "D_sleep":
        lim = lim.split("; ")[0 if V2 else 1]
    out.append("| %s | %s | `%s` | %s | %s | %s | %s |" % (lab, pid, ids.get(idl, "?"), rt, name, lim, wl))
out.append("")
out.append("Pods (kubelet dirs `var/log/pods/<namespace>_<pod>_<uid>/<container>/0.log`):\n")
for lab, (uk, ns, pod, ctrs) in sorted(PODS.items()):
    if uk in ids:
        out.append("- %s: uid `%s`, namespace `%s`, pod `%s`, containers with a log dir: %s" % (
            lab, ids[uk].replace("_", "-"), ns, pod, ", ".join("%s=%s" % (c, ids[c][:12]) for c, _ in ctrs)))
out.append("")
out.append("## Key counters (read from the recorded files)\n")
if V2:
    out.append("cpu = cpu.stat usage_usec; mem = memory.current; oom = memory.events oom_kill; "
               "io = io.stat rbytes/wbytes summed over devices; pids = pids.current; inode of the cgroup dir.\n")
else:
    out.append("cpu = cpuacct.usage / 1000 (µs); mem = memory.usage_in_bytes (memory-hierarchy path); "
               "oom = memory.oom_control oom_kill; io = blkio.throttle.io_service_bytes Read/Write "
               "summed over devices; pids = pids.current; inode = the memory-hierarchy dir.\n")
out.append("| label | inode t0 | inode t1 | cpu µs t0 | cpu µs t1 | mem t0 | mem t1 | oom t0/t1 | io r/w t0 | io r/w t1 | pids t0/t1 |")
out.append("|---|---|---|---|---|---|---|---|---|---|---|")
rows = [(lab, pid, paths_of(pid)) for lab, pid, _ in pids]
for lab, (uk, *_r) in sorted(PODS.items()):
    src = {"B": "B1_busy", "BE": "B3_besteffort", "F": "F_app"}[lab]
    for l2, pid, p in rows:
        if l2 == src and p:
            rows.append(("pod " + lab, "-", {c: v.rsplit("/", 1)[0] for c, v in p.items()}))
            break
merged = []
for lab, pid, p in rows:
    if not p:
        continue
    for m in merged:
        if m[2] == p:
            m[0] += ", " + lab
            break
    else:
        merged.append([lab, pid, p])
for lab, pid, p in merged:
    k0, k1 = key("t0", p), key("t1", p)
    i0, i1 = ino(p)
    g = lambda k, i: (k[i] if k and k[i] is not None else "-")
    out.append("| %s | %s | %s | %s | %s | %s | %s | %s/%s | %s | %s | %s/%s |" % (
        lab, i0, i1, g(k0, 0), g(k1, 0), g(k0, 1), g(k1, 1), g(k0, 2), g(k1, 2),
        g(k0, 3), g(k1, 3), g(k0, 4), g(k1, 4)))
out.append("")
out.append("(For G the row of G_main shows the OLD cgroup at t0 and the restarted one at t1: "
           "same path, different inode, counters restarted.)\n")
out.append("## Snapshot times\n")
for t in ("t0", "t1"):
    out.append("- %s: /proc/uptime at start `%s`, at end `%s`; per-cgroup read times in "
               "`%s/cgroup_read_times.txt` (CLOCK_BOOTTIME)" % (
                   t, rd(t, "snapshot_time").strip(), rd(t, "snapshot_time_end").strip(), t))
out.append("")
out.append("## Runtime-state files added (identical in t0 and t1; everything else is recorded)\n")
for t in ("t0",):
    for root, dirs, files in sorted(os.walk(os.path.join(D, t))):
        rel = os.path.relpath(root, os.path.join(D, t))
        if rel.split(os.sep)[0] in ("etc", "var", "home"):
            for fn in sorted(files):
                out.append("- `%s`" % os.path.join(rel, fn))
out.append("")
out.append("## Detailed values per cgroup\n")
det = subprocess.run([sys.executable, os.path.join(HERE, "summarize_v1.py"), D],
                     capture_output=True, text=True, check=True).stdout
det = det.replace("# Recorded values (generated by tests/recorder/summarize_v1.py)\n", "")
out.append(det.replace("\n## ", "\n### "))
with open(os.path.join(D, "SCENARIO.md"), "w") as fo:
    fo.write("\n".join(out))
