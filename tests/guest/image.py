"""Guest images: a Debian root built with mmdebstrap, kept as an ext4 disk in a cache.

One image per recipe: the suite, the Debian packages, the Python wheels baked into the
guest's /opt/cgstat virtualenv (cgstat's dependencies and the test runner, made on the host
for the guest's Python: the guest has no network) and the text of this file and agent.py.
Their hash names the cache folder (default /var/cache/cgstat-guest/<suite>-<hash>/), so a
changed package list builds a new image and an unchanged one is reused; older images of the
same suite are removed once unused for a day. Builds hold a lock per suite (another session may be
building the same image) and appear under their final name only when complete.

What the image holds besides the packages:

* the agent (agent.py) as cgstat-guest-agent.service, the host's way in;
* serial-getty@ttyS0 masked (the login prompt would take over the console), timers that
  would only spend the emulated CPU masked (apt, man-db, e2scrub, fstrim);
* /etc/docker/daemon.json with the systemd cgroup driver;
* /opt/cgstat: a virtualenv with cgstat's dependencies, where bin/install puts cgstat.

The kernel and initrd are copied out beside disk.img for qemu's -kernel/-initrd.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, NamedTuple, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CACHE = os.environ.get("CGSTAT_GUEST_CACHE", "/var/cache/cgstat-guest")
MIRROR = os.environ.get("CGSTAT_GUEST_MIRROR", "http://deb.debian.org/debian")
KEEP_UNUSED_S = 86400
RECIPE_VERSION = "1"  # bump to rebuild every image after a change outside this file

# What every guest gets. The kernel: Debian's cloud flavour (virtio built for VMs, boots
# faster than the generic one under emulation).
PACKAGES = [
    "linux-image-cloud-amd64", "systemd", "systemd-sysv", "udev", "dbus", "dbus-user-session",
    "python3", "python3-venv", "procps", "iproute2", "kmod", "util-linux", "logrotate",
    "busybox-static", "runc", "containerd", "docker.io", "podman", "uidmap", "curl",
]
# Debian 13 splits Docker's CLI out of docker.io; its podman only recommends what a container
# needs for a network (netavark, which runs nft, and aardvark-dns rootful; pasta from passt
# rootless) and
# catatonit (the init of a pod's infra container). Debian 12's Docker 20.10 refuses to run a
# container where the kernel has AppArmor on (Debian's does) and apparmor_parser is missing
# (docker.io only recommends apparmor): a Debian 12 Docker host has it.
SUITE_PACKAGES = {"trixie": ["docker-cli", "netavark", "nftables", "aardvark-dns", "passt", "catatonit"], "bookworm": ["apparmor"]}
PYTHON = {"trixie": "3.13", "bookworm": "3.11"}

# cgstat's runtime dependencies (pyproject.toml) and what the guest's tests import.
WHEELS = ["orjson>=3.6", "typer>=0.9,<0.29", "nvidia-ml-py>=12.535.108", "pytest>=7"]

MASKED = [
    "serial-getty@ttyS0.service", "getty@tty1.service", "apt-daily.timer",
    "apt-daily-upgrade.timer", "man-db.timer", "e2scrub_all.timer", "e2scrub_reap.service",
    "fstrim.timer", "dpkg-db-backup.timer", "systemd-networkd-wait-online.service",
]

AGENT_UNIT = """\
[Unit]
Description=cgstat test harness agent (virtio-serial port cgstat.agent)
DefaultDependencies=no
After=systemd-udevd.service local-fs.target
[Service]
ExecStart=/usr/bin/python3 /usr/local/lib/cgstat-guest/agent.py
Restart=always
RestartSec=1
[Install]
WantedBy=sysinit.target
"""


class Image(NamedTuple):
    suite: str
    dir: str

    @property
    def disk(self) -> str:
        return os.path.join(self.dir, "disk.img")

    @property
    def kernel(self) -> str:
        return os.path.join(self.dir, "vmlinuz")

    @property
    def initrd(self) -> str:
        return os.path.join(self.dir, "initrd.img")

    def info(self) -> Dict[str, object]:
        with open(os.path.join(self.dir, "info.json")) as f:
            return json.load(f)


def packages(suite: str) -> List[str]:
    return PACKAGES + SUITE_PACKAGES.get(suite, [])


def recipe_key(suite: str) -> str:
    """What the image is made of: the packages, the wheels, the build steps and the agent
    (not this file's prose: a changed comment rebuilds nothing)."""
    import inspect

    h = hashlib.sha256()
    for part in (RECIPE_VERSION, suite, MIRROR, ",".join(packages(suite)), ",".join(WHEELS),
                 ",".join(MASKED), AGENT_UNIT, inspect.getsource(_build_into)):
        h.update(part.encode() + b"\0")
    with open(os.path.join(HERE, "agent.py"), "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()[:16]


def image_dir(suite: str) -> str:
    return os.path.join(CACHE, "%s-%s" % (suite, recipe_key(suite)))


def cached(suite: str) -> Optional[Image]:
    d = image_dir(suite)
    if not os.path.exists(os.path.join(d, "info.json")):
        return None
    try:  # when it was last used: images of other recipes unused for long are removed
        os.utime(d)
    except OSError:
        pass
    return Image(suite, d)


def why_not() -> Optional[str]:
    """Why images can't be built here (None: they can)."""
    if os.geteuid() != 0:
        return "building a guest image needs root (mmdebstrap --mode=root)"
    for tool in ("mmdebstrap", "mke2fs", "qemu-system-x86_64"):
        if not shutil.which(tool):
            return "%s not installed (tests/run installs mmdebstrap, e2fsprogs, qemu-system-x86)" % tool
    return None


def _run(argv: List[str], timeout: float, log) -> None:
    log.write(("$ %s\n" % " ".join(argv)).encode())
    log.flush()
    r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                       timeout=timeout, check=False)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d (log: %s)" % (argv[0], r.returncode, log.name))


def _download_wheels(suite: str, dest: str, log) -> None:
    py = PYTHON[suite]
    plats = []
    for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
              "manylinux1_x86_64"):
        plats += ["--platform", p]
    _run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
          "--only-binary=:all:", "--python-version", py, "--implementation", "cp", *plats,
          "-d", dest, *WHEELS], 600, log)


def build(suite: str, log_path: str) -> Image:
    """Build (or wait for another build of) the image of ``suite``; returns it."""
    import fcntl

    os.makedirs(CACHE, exist_ok=True)
    final = image_dir(suite)
    # One build per suite at a time, across processes (xdist workers, two sessions, two
    # checkouts): the second waits here, then finds the first one's image complete.
    with open(os.path.join(CACHE, ".lock-" + suite), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached(suite):
            return Image(suite, final)
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        work = tempfile.mkdtemp(prefix=".build-%s-" % suite, dir=CACHE)
        try:
            with open(log_path, "wb") as log:
                _build_into(suite, work, log)
            os.rename(work, final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        # other recipes' images of this suite go once unused for a day (another checkout,
        # on another branch, may still boot its own: removing it at once would rebuild it)
        for old in glob.glob(os.path.join(CACHE, suite + "-*")):
            try:
                stale = time.time() - os.stat(old).st_mtime > KEEP_UNUSED_S
            except OSError:
                continue
            if old != final and stale:
                shutil.rmtree(old, ignore_errors=True)
    return Image(suite, final)


def _build_into(suite: str, work: str, log) -> None:
    t0 = time.monotonic()
    wheels = os.path.join(work, "wheels")
    _download_wheels(suite, wheels, log)
    t_wheels = time.monotonic() - t0
    root = os.path.join(work, "root")
    agent = os.path.join(HERE, "agent.py")
    hooks = [
        'mkdir -p "$1/usr/local/lib/cgstat-guest" "$1/etc/docker" "$1/etc/systemd/system/sysinit.target.wants"',
        'cp %s "$1/usr/local/lib/cgstat-guest/agent.py"' % agent,
        "printf '%%s' '%s' > \"$1/etc/systemd/system/cgstat-guest-agent.service\"" % AGENT_UNIT,
        'ln -sf /etc/systemd/system/cgstat-guest-agent.service '
        '"$1/etc/systemd/system/sysinit.target.wants/cgstat-guest-agent.service"',
        'for u in %s; do ln -sf /dev/null "$1/etc/systemd/system/$u"; done' % " ".join(MASKED),
        "echo cgstat-guest > \"$1/etc/hostname\"",
        # the runtimes start when a test asks (docker.socket stays, a docker command starts
        # the daemon): at boot they would cost ~80 s of emulated CPU that most tests don't need
        'rm -f "$1/etc/systemd/system/multi-user.target.wants/docker.service" '
        '"$1/etc/systemd/system/multi-user.target.wants/containerd.service" '
        '"$1"/etc/systemd/system/*.wants/netavark-dhcp-proxy.*',
        # first-boot work done here at native speed (ConditionNeedsUpdate= units skip it)
        'chroot "$1" ldconfig && touch "$1/etc/.updated" "$1/var/.updated"',
        "echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' > \"$1/etc/fstab\"",
        "echo '{\"exec-opts\": [\"native.cgroupdriver=systemd\"]}' > \"$1/etc/docker/daemon.json\"",
        # cgstat's virtualenv, where bin/install will find it; its dependencies offline
        'cp -r %s "$1/opt/cgstat-wheels"' % wheels,
        'chroot "$1" python3 -m venv /opt/cgstat',
        'chroot "$1" /opt/cgstat/bin/pip install -q --no-index --disable-pip-version-check '
        '--find-links /opt/cgstat-wheels %s' % " ".join("'%s'" % w for w in WHEELS),
        'rm -rf "$1/opt/cgstat-wheels" "$1/var/cache/apt/archives"/*.deb "$1/var/lib/apt/lists"/*',
    ]
    argv = ["mmdebstrap", "--variant=apt", "--mode=root", "--format=directory",
            "--include=" + ",".join(packages(suite))]
    argv += ["--customize-hook=" + h for h in hooks]
    argv += [suite, root, MIRROR]
    t1 = time.monotonic()
    _run(argv, 1200, log)
    t_debootstrap = time.monotonic() - t1
    vmlinuz = sorted(glob.glob(os.path.join(root, "boot", "vmlinuz-*")))[-1]
    initrd = sorted(glob.glob(os.path.join(root, "boot", "initrd.img-*")))[-1]
    shutil.copy(vmlinuz, os.path.join(work, "vmlinuz"))
    shutil.copy(initrd, os.path.join(work, "initrd.img"))
    t2 = time.monotonic()
    _run(["mke2fs", "-q", "-F", "-t", "ext4", "-L", "cgstat-guest", "-d", root,
          os.path.join(work, "disk.img"), "6G"], 600, log)
    t_mkfs = time.monotonic() - t2
    kernel = os.path.basename(vmlinuz)[len("vmlinuz-"):]
    shutil.rmtree(root)
    shutil.rmtree(wheels)
    info = {"suite": suite, "key": recipe_key(suite), "kernel": kernel,
            "packages": packages(suite), "wheels": WHEELS,
            "seconds": {"wheels": round(t_wheels, 1), "mmdebstrap": round(t_debootstrap, 1),
                        "mke2fs": round(t_mkfs, 1), "total": round(time.monotonic() - t0, 1)}}
    with open(os.path.join(work, "info.json"), "w") as f:
        json.dump(info, f, indent=1)
