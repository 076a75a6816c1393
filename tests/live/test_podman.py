"""A real rootful Podman container (cgroupfs manager, runc) named and measured by cgstat.

Podman places the container at <cgroup-parent>/libpod-<id> in every hierarchy and its
monitor at <cgroup-parent>/conmon; the parent is put below our own memory cgroup, which
is below our own cgroup in every other hierarchy too (they sit at /), so nothing is
created outside our cgroups. Podman makes the parent's whole path in every hierarchy (our
memory cgroup's path too, where we sit at /): what it made is removed after, deepest first.
Skipped where podman isn't installed (tests/run installs it).
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

from tests.helpers.contract import ROOT, validate
from tests.helpers.realcg import PREFIX

pytestmark = [pytest.mark.realcg,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("runc")
                                 or not os.path.exists("/bin/busybox"), reason="needs root, podman, runc, busybox")]

PODMAN = ["podman", "--cgroup-manager=cgroupfs", "--events-backend=file", "--runtime", shutil.which("runc") or "runc"]
IMAGE = "localhost/cgstat-test-busybox:1"


def _own(controller):
    for line in open("/proc/self/cgroup"):
        _, ctrls, path = line.rstrip("\n").split(":", 2)
        if controller in ctrls.split(","):
            return path
    raise LookupError(controller)


def _missing_along(parent):
    """The folders on `parent`'s path, in every hierarchy, that don't exist yet (podman makes them)."""
    parts = parent.strip("/").split("/")
    missing = []
    for h in os.listdir("/sys/fs/cgroup"):
        base = os.path.join("/sys/fs/cgroup", h)
        if os.path.islink(base) or not os.path.isdir(base):
            continue
        for n in range(1, len(parts)):
            d = os.path.join(base, *parts[:n])
            if not os.path.isdir(d):
                missing.append(d)
    return missing


@pytest.fixture
def podman_container(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in ("sh", "sleep"):
        os.symlink("busybox", rootfs / "bin" / applet)
    with tarfile.open(tmp_path / "rootfs.tar", "w") as tar:
        tar.add(rootfs, arcname=".")
    subprocess.run(PODMAN + ["import", str(tmp_path / "rootfs.tar"), IMAGE], check=True, capture_output=True, timeout=120)
    name = PREFIX + secrets.token_hex(4)
    parent = _own("memory").rstrip("/") + "/" + name
    made = _missing_along(parent)
    try:
        out = subprocess.run(PODMAN + ["run", "-d", "--name", name, "--cgroup-parent", parent,
                                       "--cpus", "0.5", "--memory", "64m", "--pids-limit", "32",
                                       "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
                                       IMAGE, "sh", "-c", "while :; do :; done"],
                             check=True, capture_output=True, timeout=120)
        yield name, out.stdout.decode().strip(), parent
    finally:
        subprocess.run(PODMAN + ["rm", "-f", "-t", "0", name], capture_output=True, timeout=120)
        subprocess.run(PODMAN + ["rmi", "-f", IMAGE], capture_output=True, timeout=120)
        for h in os.listdir("/sys/fs/cgroup"):
            top = os.path.join("/sys/fs/cgroup", h, parent.lstrip("/"))
            if os.path.isdir(top) and not os.path.islink(os.path.join("/sys/fs/cgroup", h)):
                for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                    try:
                        os.rmdir(dirpath)
                    except OSError:
                        pass
        for d in sorted(made, key=lambda d: -d.count("/")):  # only if empty: rmdir says so
            try:
                os.rmdir(d)
            except OSError:
                pass


def test_podman_container_named_and_measured(podman_container):
    name, cid, parent = podman_container
    time.sleep(1.0)  # let the busy loop run under its quota before measuring
    usage_file = f"/sys/fs/cgroup/cpuacct{parent}/libpod-{cid}/cpuacct.usage"
    t0, u0 = time.monotonic(), int(open(usage_file).read())
    proc = subprocess.run([sys.executable, "-m", "cgstat", "once", "--window", "2", "--match", name],
                          capture_output=True, cwd=ROOT, timeout=60)
    t1, u1 = time.monotonic(), int(open(usage_file).read())
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    for r in records:
        validate(r)
    (ctr,) = [r for r in records if r["container"]]
    assert ctr["cgroup"] == f"{parent}/libpod-{cid}"
    c = ctr["container"]
    assert (c["runtime"], c["id"], c["name"], c["image"]) == ("podman", cid, name, IMAGE)
    assert ctr["memory"]["limit_bytes"] == 64 * 1024 * 1024
    assert ctr["pids"]["limit"] == 32 and ctr["pids"]["current"] == 1
    assert ctr["cpu"]["limit_cores"] == 0.5
    # What the kernel counted over the run, the steady busy loop's rate: 50 % on a quiet
    # machine; on a busy one the container (its parent's weight, not its own, is what
    # competes) gets less than its quota, and cgstat must say what it got.
    counted = 100 * (u1 - u0) / 1e9 / (t1 - t0)
    assert abs(ctr["cpu"]["percent"] - counted) <= 5 and ctr["cpu"]["percent"] <= 55, counted
    mem_file = f"/sys/fs/cgroup/memory{parent}/libpod-{cid}/memory.usage_in_bytes"
    assert abs(ctr["memory"]["usage_bytes"] - int(open(mem_file).read())) < 1024 * 1024
    # the conmon monitor is plumbing: with --match it shows, but not as a container
    monitors = [r for r in records if r["cgroup"].endswith("/conmon")]
    assert monitors and all(m["container"] is None for m in monitors)
    # by default (no --match) the container is found and the monitor left out
    proc = subprocess.run([sys.executable, "-m", "cgstat", "once", "--window", "0"],
                          capture_output=True, cwd=ROOT, timeout=60)
    default = [json.loads(line) for line in proc.stdout.splitlines()]
    assert any(r["container"] and r["container"]["id"] == cid for r in default)
    assert not any(r["cgroup"].endswith("/conmon") for r in default)
