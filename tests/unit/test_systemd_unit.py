"""Checks of systemd/cgstat.service with systemd-analyze (no running systemd needed).

- `systemd-analyze verify` must pass with no warning about the unit. verify insists that
  ExecStart's binary exists, so it runs with --root=<tmp>: the unit goes to
  <tmp>/etc/systemd/system/, a stub script stands at every absolute Exec*= path inside
  <tmp>, and a copy of the host's own unit directory supplies sysinit.target & co.
  The unit file itself is verified unmodified.
- `systemd-analyze security --offline=yes` must rate its exposure at most 2.0.
- The sandbox must keep what cgstat needs to read (see the comments in the unit), and
  hide the host's secrets (InaccessiblePaths=) that it never needs.
- Type=notify with a watchdog: the agent sends READY=1 and WATCHDOG=1 (cgstat/sdnotify.py).
- The drop-ins that docs/deploy.md shows pass verify together with the unit.

Not done here: starting the unit for real (systemd-run, systemctl). PID 1 on the test
machines is not systemd, so there is no service manager to run it under.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "cgstat.service"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
MAX_EXPOSURE = 2.0
SYSTEM_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def unit_settings(path: Path = UNIT) -> list[tuple[str, str, str]]:
    """(section, key, value) for every assignment, in file order."""
    section = ""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def values(key: str, unit: Path = UNIT) -> list[str]:
    return [v for s, k, v in unit_settings(unit) if s == "Service" and k == key]


def exec_paths(unit: Path = UNIT) -> set[str]:
    paths = set()
    for section, key, value in unit_settings(unit):
        if section == "Service" and key.startswith("Exec") and value:
            argv0 = value.split()[0].lstrip("-@:+!")
            if argv0.startswith("/"):
                paths.add(argv0)
    return paths


def verify(tmp_path: Path, dropins: dict[str, str] | None = None, unit: Path = UNIT) -> str:
    """Run `systemd-analyze verify` on a unit (plus drop-ins) in a scratch root (shared with
    the serve unit's tests); any line about the unit fails it."""
    UNIT = unit  # noqa: N806  (the body names the unit checked)
    system_dir = next((d for d in SYSTEM_UNIT_DIRS if (d / "sysinit.target").exists()), None)
    if system_dir is None:
        pytest.skip("no systemd unit directory with sysinit.target on this machine")
    root = tmp_path / "root"
    shutil.copytree(system_dir, root / system_dir.relative_to("/"), symlinks=True)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    shutil.copy(UNIT, unit_dir / UNIT.name)
    for socket_unit in (UNIT.parent).glob("*.socket"):  # the kernel log the services are passed
        shutil.copy(socket_unit, unit_dir / socket_unit.name)
    for name, text in (dropins or {}).items():
        dropin_dir = unit_dir / f"{UNIT.name}.d"
        dropin_dir.mkdir(exist_ok=True)
        (dropin_dir / name).write_text(text)
    assert exec_paths(unit), "the unit has no absolute Exec*= path"
    for path in exec_paths(unit):
        stub = root / path.lstrip("/")
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)

    sockets = [f"/etc/systemd/system/{p.name}" for p in sorted(UNIT.parent.glob("*.socket"))
               if ("Service=%s" % UNIT.name) in p.read_text()]
    proc = subprocess.run(
        [ANALYZE, "verify", f"--root={root}", f"/etc/systemd/system/{UNIT.name}"] + sockets,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    # verify exits 0 on unknown keys and unparsable values: it only warns. Fail on those.
    names = [UNIT.name] + [Path(x).name for x in sockets]
    complaints = [line for line in output.splitlines() if any(n in line for n in names)]
    assert not complaints, output
    return output


# the two long-running services; tests/unit/test_serve_unit.py checks what differs for serve
SERVICES = [UNIT, REPO / "systemd" / "cgstat-serve.service"]


@needs_analyze
@pytest.mark.parametrize("unit", SERVICES, ids=lambda p: p.name)
def test_verify_passes_without_warnings(tmp_path: Path, unit: Path) -> None:
    verify(tmp_path, unit=unit)


def documented_dropins() -> dict[str, str]:
    """Every ini block in docs/deploy.md that starts with its drop-in path."""
    found = {}
    text = DEPLOY_DOC.read_text()
    for block in re.findall(r"```ini\n(.*?)```", text, re.S):
        block = textwrap.dedent(block)  # blocks inside a list item are indented
        first = block.splitlines()[0]
        match = re.match(r"# /etc/systemd/system/cgstat\.service\.d/(\S+\.conf)$", first)
        if match:
            found[match.group(1)] = block
    return found


def test_deploy_doc_shows_the_drop_ins() -> None:
    assert {"no-gpu.conf", "docker.conf", "file.conf", "no-homes.conf"} <= set(documented_dropins())


@needs_analyze
@pytest.mark.parametrize("name", sorted(documented_dropins()))
def test_documented_drop_in_verifies(tmp_path: Path, name: str) -> None:
    verify(tmp_path, {name: documented_dropins()[name]})


@needs_analyze
@pytest.mark.parametrize("unit", SERVICES, ids=lambda p: p.name)
def test_security_exposure_at_most_2(unit: Path) -> None:
    proc = subprocess.run(
        [ANALYZE, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = proc.stdout + proc.stderr
    match = re.search(r"Overall exposure level for \S+: ([0-9]+(?:\.[0-9]+)?)", output)
    assert match, f"no exposure score in output (rc={proc.returncode}):\n{output}"
    score = float(match.group(1))
    print(f"exposure score: {score}")
    assert score <= MAX_EXPOSURE, output


def test_sandbox_keeps_what_cgstat_reads() -> None:
    # Other users' processes must stay visible: /proc/<pid>/cgroup of every process.
    assert values("ProtectProc") in ([], ["default"])
    assert values("ProcSubset") in ([], ["all"])
    assert not values("PrivatePIDs")
    # CAP_DAC_READ_SEARCH on root-owned 0600 runtime state would be void in a user ns.
    assert values("PrivateUsers") in ([], ["no"], ["false"])
    # Rootless podman state lives under /home: readable, never hidden.
    assert values("ProtectHome") in (["read-only"], [], ["no"])
    assert not any("/home" in v for v in values("InaccessiblePaths") + values("TemporaryFileSystem"))
    if values("DynamicUser") == ["yes"] or values("User"):
        assert "CAP_DAC_READ_SEARCH" in " ".join(values("AmbientCapabilities"))
    # NVML needs read-write on /dev/nvidiactl and /dev/nvidiaN (major 195).
    allowed = " ".join(values("DeviceAllow"))
    assert "char-nvidia rw" in allowed and "char-nvidia-frontend rw" in allowed
    assert values("PrivateDevices") in ([], ["no"])
    assert values("Restart") == ["on-failure"]
    # AF_UNIX is the journal stream (and the Docker socket).
    families = " ".join(values("RestrictAddressFamilies"))
    assert "AF_UNIX" in families and not families.startswith("~")


# What cgstat reads (cgstat/naming/runtimes/, hierarchy.py, host.py): never hidden.
READ_PATHS = (
    "/sys/fs/cgroup",
    "/proc",
    "/etc/passwd",
    "/etc/hostname",
    "/etc/docker/daemon.json",
    "/var/lib/docker/containers",
    "/var/lib/containers/storage",
    "/var/lib/containers/storage/overlay-containers",
    "/var/lib/containers/storage/vfs-containers",
    "/run/containerd/io.containerd.runtime.v2.task",
    "/var/log/pods",
    "/var/log/containers",
    "/home",
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/dev/nvidiactl",
    "/var/log/cgstat",
)

# Secrets the agent never needs (docs/security.md): all of them listed in InaccessiblePaths=.
SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/root",
    "/run/secrets",
    "/var/lib/kubelet/pods",
    "/var/lib/kubelet/pki",
    "/etc/kubernetes/pki",
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/kubelet.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
    "/var/lib/etcd",
)


def inaccessible() -> list[str]:
    return [p for v in values("InaccessiblePaths") for p in v.split()]


def covers(hidden: str, path: str) -> bool:
    return path == hidden or path.startswith(hidden.rstrip("/") + "/")


def test_secrets_are_inaccessible() -> None:
    entries = inaccessible()
    assert "" not in values("InaccessiblePaths"), "an empty assignment resets the list"
    for entry in entries:
        # "-": a path missing on this host is skipped instead of failing the start.
        assert entry.startswith("-/"), entry
        assert not any(c in entry for c in "*?["), f"systemd does not expand globs: {entry}"
    paths = [e[1:] for e in entries]
    missing = [s for s in SECRETS if not any(covers(p, s) for p in paths)]
    assert not missing, missing
    # No other setting may map something over those paths again.
    for key in ("BindPaths", "BindReadOnlyPaths", "ReadWritePaths", "TemporaryFileSystem"):
        assert not any(covers(s, v.lstrip("-+:")) for s in SECRETS for v in " ".join(values(key)).split()), key


def test_what_cgstat_reads_stays_visible() -> None:
    paths = [e.lstrip("-") for e in inaccessible()]
    hidden = [(r, p) for r in READ_PATHS for p in paths if covers(p, r)]
    assert not hidden, hidden


def seconds(value: str) -> float:
    """A systemd time span such as "30s", "1min 30s", "2m", or bare seconds."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 0.001}
    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total


def test_notify_and_watchdog() -> None:
    assert values("Type") == ["notify"]
    assert values("NotifyAccess") in ([], ["main"])
    watchdog = seconds(values("WatchdogSec")[-1]) if values("WatchdogSec") else 0
    assert watchdog > 0
    interval = [v.split("=", 1)[1] for v in values("Environment") if v.startswith("CGSTAT_INTERVAL=")]
    # The keep-alive comes once per tick: the default interval is well under the timeout.
    assert interval and float(interval[-1]) * 2 <= watchdog
    # A missed keep-alive counts as a failure: the agent is restarted.
    assert values("Restart") == ["on-failure"]
    # sd_notify creates an AF_UNIX datagram socket: the family filter must allow it.
    assert "AF_UNIX" in " ".join(values("RestrictAddressFamilies"))


def test_fd_limit_leaves_room_for_every_kept_descriptor() -> None:
    """setrlimit is filtered out (@resources), so the agent can't raise systemd's soft 1024
    itself: the unit must give the kept-descriptor cap (and a quarter more) room."""
    from cgstat.kernel import handles

    assert "@resources" in " ".join(values("SystemCallFilter"))  # why the unit must say it
    for unit in (UNIT, REPO / "systemd" / "cgstat-serve.service"):
        (limit,) = values("LimitNOFILE", unit)
        soft = int(limit.split(":")[0])
        assert min(handles.DEFAULT_CAP, soft // 4 * 3 - 64, soft - 256) == handles.DEFAULT_CAP


def kmsg_socket(unit: Path = UNIT) -> Path:
    """The socket unit that passes the service /dev/kmsg (its Sockets=)."""
    (name,) = values("Sockets", unit)
    return unit.parent / name


def test_kernel_log_comes_as_a_descriptor_not_a_privilege() -> None:
    """The OOM reports need /dev/kmsg: PID 1 opens it (a ListenSpecial= socket unit) and
    passes it as "kmsg"; the service itself keeps ProtectKernelLogs=yes and no CAP_SYSLOG."""
    for unit in (UNIT, UNIT.parent / "cgstat-serve.service"):
        sock = kmsg_socket(unit)
        socket_values = [(k, v) for s, k, v in unit_settings(sock) if s == "Socket"]
        assert ("ListenSpecial", "/dev/kmsg") in socket_values
        assert ("FileDescriptorName", "kmsg") in socket_values  # what cgstat/sdnotify.listen_fd asks for
        assert ("Service", unit.name) in socket_values
        assert ("Unit", "PartOf", unit.name) in unit_settings(sock)
        unit_keys = [(s, k, v) for s, k, v in unit_settings(unit) if s == "Unit"]
        assert ("Unit", "Wants", sock.name) in unit_keys and ("Unit", "After", sock.name) in unit_keys
        assert values("ProtectKernelLogs", unit) == ["yes"]
        caps = " ".join(values("CapabilityBoundingSet", unit) + values("AmbientCapabilities", unit))
        assert "CAP_SYSLOG" not in caps and "CAP_SYS_ADMIN" not in caps
        assert not any("kmsg" in v for v in values("DeviceAllow", unit))


def test_every_documentation_line_names_a_page_bin_install_installs():
    """Documentation=file:/usr/local/share/doc/cgstat/PAGE: bin/install (as root) copies
    docs/*.md there, so each PAGE must be one of docs/."""
    install = (REPO / "bin" / "install").read_text()
    assert "docdir=${CGSTAT_DOCDIR:-/usr/local/share/doc/cgstat}" in install
    assert 'for doc in "$here"/docs/*.md; do' in install
    seen = 0
    for unit in sorted((REPO / "systemd").iterdir()):
        for line in unit.read_text().splitlines():
            if line.startswith("Documentation="):
                for uri in line.split("=", 1)[1].split():
                    assert uri.startswith("file:/usr/local/share/doc/cgstat/"), (unit.name, uri)
                    assert (REPO / "docs" / uri.rsplit("/", 1)[1]).is_file(), (unit.name, uri)
                    seen += 1
    assert seen >= 6
