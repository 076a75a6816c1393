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
