"""Synthetic host trees for fault and churn tests (recorded trees cover real layouts)."""

import os

V2_FILES = {
    "cgroup.procs": "",
    "cpu.stat": "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\n"
                "nr_periods 100\nnr_throttled 10\nthrottled_usec 250000\n",
    "cpu.max": "50000 100000\n",
    "memory.current": "104857600\n",
    "memory.max": "209715200\n",
    "memory.stat": "anon 52428800\nfile 41943040\ninactive_file 20971520\nshmem 0\nactive_file 20971520\n",
    "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
    "memory.swap.current": "0\n",
    "io.stat": "254:0 rbytes=8388608 wbytes=16777216 rios=8 wios=16 dbytes=0 dios=0\n",
    "pids.current": "7\n",
    "pids.max": "50\n",
    "cpu.pressure": "some avg10=1.00 avg60=0.50 avg300=0.10 total=1000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    "memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    "io.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
}


def write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as f:
        f.write(content)


def v2_host(root, uptime="1000.00"):
    """A minimal v2 host root: mount table, uptime, meminfo, one CPU list."""
    write(os.path.join(root, "proc/self/mountinfo"),
          "30 20 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    write(os.path.join(root, "proc/uptime"), f"{uptime} 0.00\n")
    write(os.path.join(root, "proc/stat"), "cpu  1 2 3 4\nbtime 1700000000\n")
    write(os.path.join(root, "proc/meminfo"), "MemTotal:       1048576 kB\n")
    write(os.path.join(root, "sys/devices/system/cpu/online"), "0-3\n")
    write(os.path.join(root, "proc/partitions"), "major minor  #blocks  name\n\n 254        0   1048576 vda\n")
    write(os.path.join(root, "etc/hostname"), "synth\n")
    top = os.path.join(root, "sys/fs/cgroup")
    write(os.path.join(top, "cgroup.controllers"), "cpu io memory pids\n")
    write(os.path.join(top, "cgroup.procs"), "1\n")
    write(os.path.join(top, "cpu.stat"), "usage_usec 9000000\nuser_usec 6000000\nsystem_usec 3000000\n")


def v2_cgroup(root, path, overrides=None):
    """A cgroup folder with every v2 file; overrides map file -> content (None: absent)."""
    files = dict(V2_FILES)
    files.update(overrides or {})
    folder = os.path.join(root, "sys/fs/cgroup", path.lstrip("/"))
    os.makedirs(folder, exist_ok=True)
    for name, content in files.items():
        if content is not None:
            write(os.path.join(folder, name), content)
    return folder


V1_FILES = {
    "cpuacct": {"cgroup.procs": "", "cpuacct.usage": "2000000000\n", "cpuacct.stat": "user 150\nsystem 50\n"},
    "cpu": {"cgroup.procs": "", "cpu.stat": "nr_periods 100\nnr_throttled 10\nthrottled_time 250000000\n",
            "cpu.cfs_quota_us": "50000\n", "cpu.cfs_period_us": "100000\n"},
    "memory": {"cgroup.procs": "", "memory.usage_in_bytes": "104857600\n", "memory.limit_in_bytes": "209715200\n",
               "memory.stat": "rss 1\ncache 2\ntotal_rss 52428800\ntotal_cache 41943040\n"
                              "total_inactive_file 20971520\ntotal_shmem 0\n",
               "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"},
    "blkio": {"cgroup.procs": "",
              "blkio.throttle.io_service_bytes_recursive": "254:0 Read 8388608\n254:0 Write 16777216\n"
                                                           "254:0 Total 25165824\nTotal 25165824\n",
              "blkio.throttle.io_serviced_recursive": "254:0 Read 8\n254:0 Write 16\n254:0 Total 24\nTotal 24\n"},
    "pids": {"cgroup.procs": "", "pids.current": "7\n", "pids.max": "50\n"},
}


def v1_host(root):
    """A v1 host with cpu,cpuacct co-mounted and the rest each on its own."""
    mounts = [("cpu,cpuacct", "cpu,cpuacct"), ("memory", "memory"), ("blkio", "blkio"), ("pids", "pids")]
    lines = [f"{30 + i} 20 0:{40 + i} / /sys/fs/cgroup/{d} rw - cgroup cgroup rw,{opts}\n"
             for i, (d, opts) in enumerate(mounts)]
    write(os.path.join(root, "proc/self/mountinfo"), "".join(lines))
    write(os.path.join(root, "proc/uptime"), "1000.00 0.00\n")
    write(os.path.join(root, "proc/stat"), "btime 1700000000\n")
    write(os.path.join(root, "proc/meminfo"), "MemTotal:       1048576 kB\n")
    for d, _ in mounts:
        write(os.path.join(root, "sys/fs/cgroup", d, "cgroup.procs"), "1\n")


def v1_cgroup(root, path, overrides=None):
    """The same cgroup path in every hierarchy; overrides map file -> content (None: absent)."""
    overrides = overrides or {}
    for controller, files in V1_FILES.items():
        d = "cpu,cpuacct" if controller in ("cpu", "cpuacct") else controller
        folder = os.path.join(root, "sys/fs/cgroup", d, path.lstrip("/"))
        os.makedirs(folder, exist_ok=True)
        for name, content in files.items():
            content = overrides.get(name, content)
            if content is not None:
                write(os.path.join(folder, name), content)
