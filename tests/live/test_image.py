"""cgstat's image (deploy/container/Containerfile), built here with no registry, run in a real
dockerd as the DaemonSet (deploy/kubernetes/cgstat.yaml) runs it.

deploy/container/build makes it: the mmdebstrap base (cached in CGSTAT_IMAGE_CACHE between
runs), wheels made on this host, `docker build` in a private dockerd (tests/helpers/
realdocker.py: its own data root, socket and bridge; overlay2, no iptables). The
cgstat container then gets what the manifest gives the pod, read from the manifest itself:
its args (the interval cut to 1 s), env, user, capabilities, limits, read-only root, tmpfs,
host PID namespace and every volume mount (host path -> mount path, read-only; Docker's
from where this dockerd keeps it; an empty folder for one this host lacks, as the kubelet
makes a DirectoryOrCreate one). Beside it, two containers of that dockerd: one idle, one
whose child is OOM-killed. The test scrapes /metrics at the container's address, as
Prometheus scrapes a pod, and finds the containers named, the OOM kill counted; then runs
the image once more with the host's / at /host read-only (`docker run -v /:/host:ro`).
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request

import pytest

import cgstat
from cgstat.kernel.hierarchy import detect
from cgstat.kernel.hostfs import HostFS
from tests.helpers import realdocker
from tests.helpers.contract import ROOT

yaml = pytest.importorskip("yaml")
parser = pytest.importorskip("prometheus_client.parser")

pytestmark = pytest.mark.realcg

MANIFEST = os.path.join(ROOT, "deploy", "kubernetes", "cgstat.yaml")
BUILD = os.path.join(ROOT, "deploy", "container", "build")
OOM_LIMIT = 48 << 20


def _daemonset():
    with open(MANIFEST) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def daemon():
    if not realdocker.skip_reason() and not _which("mmdebstrap"):
        pytest.skip("mmdebstrap not installed (tests/run installs it)")
    try:
        # overlay2: a build's every step is a layer, not a copy of the whole root (vfs:
        # ~15 s a step here, 170 s the build)
        d = realdocker.start("overlay2")
    except realdocker.Unavailable as exc:
        pytest.skip(f"no private dockerd here: {exc}")
    yield d
    realdocker.stop(d)


def _which(tool):
    return any(os.access(os.path.join(p, tool), os.X_OK) for p in os.environ.get("PATH", "").split(os.pathsep))


@pytest.fixture(scope="module")
def image(daemon):
    tag = f"cgstat-test-image-{daemon.tag}:1"
    start = time.monotonic()
    proc = subprocess.run([BUILD, tag], env=dict(daemon.env, PYTHON=sys.executable), capture_output=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    out_tag, size = proc.stdout.decode().split()
    assert out_tag == tag
    sys.stderr.write(f"\ntest_image: built {tag} in {time.monotonic() - start:.1f} s, {int(size) / 1e6:.1f} MB\n")
    return tag


def test_image_holds_the_agent_and_nothing_to_build_with(daemon, image):
    info = _inspect(daemon, image)["Config"]
    assert info["User"] == "65534:65534"
    assert info["Entrypoint"] == ["python3", "-m", "cgstat"]
    labels = info["Labels"]
    assert labels["org.opencontainers.image.version"] == cgstat.__version__
    assert labels["org.opencontainers.image.title"] == "cgstat"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert labels["org.opencontainers.image.revision"] == (head or "unknown")
    script = ("import importlib.util as u, os, site; d = site.getsitepackages()[0]; "
              "print(sorted(n for n in os.listdir(d) if not n.endswith('.dist-info') and n != '__pycache__')); "
              "print([m for m in ('pip', 'setuptools', 'rich', 'pygments') if u.find_spec(m)])")
    out = daemon.docker("run", "--rm", "--entrypoint", "python3", image, "-c", script).stdout.decode().splitlines()
    # nvidia-ml-py is pynvml.py and its example.py; typer's own needs: annotated_doc, shellingham
    assert out[0] == "['annotated_doc', 'cgstat', 'example.py', 'orjson', 'pynvml.py', 'shellingham', 'typer']", out
    assert out[1] == "[]", out
    tools = daemon.docker("run", "--rm", "--entrypoint", "sh", image, "-c",
                          "for t in cc gcc c++ make ld as apt-get pip pip3; do command -v $t; done; true")
    assert tools.stdout.decode() == ""
    assert daemon.docker("run", "--rm", image, "--version").stdout.decode().strip() == f"cgstat {cgstat.__version__}"


def _inspect(daemon, what):
    return json.loads(daemon.docker("inspect", what).stdout)[0]


def _propagation_ok(path: str) -> bool:
    """Whether a bind of `path` may be rslave (its mount is shared or a slave): dockerd
    refuses rslave of a private mount, and this test never changes the host's mounts."""
    best = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4]
            if path == point or path.startswith(point.rstrip("/") + "/"):
                if best is None or len(point) > len(best[0]):
                    best = (point, fields[6:fields.index("-")])
    return best is not None and any(o.startswith(("shared:", "master:")) for o in best[1])


def _run_args(daemon, spec):
    """`docker run` options for the manifest's cgstat container, and its args."""
    ctr = spec["containers"][0]
    sc, csc = spec.get("securityContext", {}), ctr["securityContext"]
    args = ["--pid", "host"] if spec.get("hostPID") else []
    args += ["--user", f"{sc['runAsUser']}:{sc['runAsGroup']}", "--cap-drop", "ALL"]
    for cap in csc["capabilities"]["add"]:
        args += ["--cap-add", cap]
    if csc.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if csc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    assert not csc.get("privileged")
    limits = ctr["resources"]["limits"]
    args += ["--cpus", str(limits["cpu"]), "--memory", limits["memory"].replace("Mi", "m")]
    for env in ctr.get("env", []):
        args += ["-e", f"{env['name']}={env['value']}"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    stand_in = []
    for m in ctr["volumeMounts"]:
        vol = volumes[m["name"]]
        if "emptyDir" in vol:
            size = vol["emptyDir"].get("sizeLimit", "16Mi").replace("Mi", "m")
            args += ["--tmpfs", f"{m['mountPath']}:rw,size={size}"]
            continue
        src = vol["hostPath"]["path"]
        if src == "/var/lib/docker/containers":
            src = os.path.join(daemon.data_root, "containers")  # where this host's dockerd keeps it
        elif not os.path.exists(src):
            # absent here: the kubelet makes a DirectoryOrCreate one (and would refuse a
            # missing Directory); an empty folder of ours stands in
            stand_in.append(src)
            src = os.path.join(daemon.dir, "stand-in" + src.replace("/", "-"))
            os.makedirs(src, exist_ok=True)
        opts = "ro" if m.get("readOnly") else "rw"
        if m.get("mountPropagation") == "HostToContainer" and _propagation_ok(src):
            opts += ",rslave"
        args += ["-v", f"{src}:{m['mountPath']}:{opts}"]
    cmd = list(ctr["args"])
    cmd[cmd.index("--interval") + 1] = "1"  # the manifest's 5 s, shortened for the test
    return args, cmd, stand_in


def _without_volumes(args):
    """The docker run options less the volumes (-v SRC:DST) and tmpfs ones."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-v", "--tmpfs"):
            skip = True
            continue
        out.append(a)
    return out + ["--tmpfs", "/tmp:rw,size=16m"]


def _get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def _oom_kills(daemon, cid):
    """The kernel's count of OOM kills in the container's memory cgroup (v1 here)."""
    own = realdocker.own_cgroups()["memory"]
    path = os.path.normpath(f"{realdocker.CGROOT}/memory/{own}/{daemon.parent}/{cid}/memory.oom_control")
    with open(path) as f:
        return int(dict(line.split() for line in f)["oom_kill"])


def test_runs_as_the_daemonset_and_is_scraped(daemon, image):
    spec = _daemonset()
    assert spec["containers"][0]["image"].startswith("cgstat:"), "the manifest names the image built here"
    tag = secrets.token_hex(3)
    idle_name, oom_name = f"cgstat-test-idle-{tag}", f"cgstat-test-oom-{tag}"
    idle = daemon.run(idle_name, "--memory", "32m", cmd="exec sleep 100000")
    # the child (tail holding 100 MB) is killed, the container's shell lives on
    oom = daemon.run(oom_name, "--memory", str(OOM_LIMIT), "--memory-swap", str(OOM_LIMIT),
                     cmd="head -c 100000000 /dev/zero | tail -c 100000000 >/dev/null; exec sleep 100000")
    args, cmd, stand_in = _run_args(daemon, spec)
    agent = daemon.docker("run", "-d", "--name", f"cgstat-test-agent-{tag}", *args, image, *cmd,
                          timeout=120).stdout.decode().strip()
    address = _inspect(daemon, agent)["NetworkSettings"]["IPAddress"]
    base = f"http://{address}:17923"
    deadline = time.monotonic() + 30
    while True:
        try:
            if _get(base + "/healthz")[0] == 200:
                break
        except OSError:
            pass
        state = _inspect(daemon, agent)["State"]
        assert state["Running"], daemon.docker("logs", agent, check=False).stderr.decode()
        assert time.monotonic() < deadline, "no /healthz within 30 s: " + daemon.docker(
            "logs", agent, check=False).stderr.decode()
        time.sleep(0.2)
    while _oom_kills(daemon, oom) < 1:
        assert time.monotonic() < deadline + 30, "the OOM container was never killed"
        time.sleep(0.2)

    def scrape():
        status, text = _get(base + "/metrics")
        assert status == 200
        return {f.name: f for f in parser.text_string_to_metric_families(text)}, text

    deadline = time.monotonic() + 20
    while True:
        families, text = scrape()
        seen = families.get("container_last_seen")
        named = {s.labels.get("name"): s for s in seen.samples} if seen else {}
        oom_family = families.get("container_oom_events")
        ooms = [s for s in (oom_family.samples if oom_family else ()) if s.labels.get("name") == oom_name]
        # the kernel's count as the scrape came back: on a loaded host the container may
        # count a second kill after a scrape that showed the first (seen in CI's run)
        kills = _oom_kills(daemon, oom)
        if idle_name in named and oom_name in named and ooms and ooms[0].value == kills >= 1:
            break
        assert time.monotonic() < deadline, (sorted(str(n) for n in named), ooms,
                                            daemon.docker("logs", agent, check=False).stderr.decode())
        time.sleep(0.5)
    # named from this dockerd's state, by ID, at the host's cgroup paths
    for name, cid in ((idle_name, idle), (oom_name, oom)):
        labels = named[name].labels
        assert labels["id"].endswith("/" + cid), labels
        assert labels["image"] == realdocker.IMAGE
    assert ooms[0].value == kills >= 1
    # the agent's own container is one of the host's containers too
    assert f"cgstat-test-agent-{tag}" in named
    logs = daemon.docker("logs", agent, check=False).stderr.decode()
    # a non-privileged pod may not open /dev/kmsg: said once, counters still reported
    assert logs.count("/dev/kmsg") == 1, logs
    # the pod sees the host's layout through its own mount table (hybrid here: unified too)
    assert f"{detect(HostFS('/')).kind} cgroup layout" in logs, logs
    sys.stderr.write(f"\ntest_image: empty stand-ins for {stand_in} (absent here)\n")

    # `docker run` with the host's / at /host read-only (docs/metrics.md), the data root
    # given: the same names from the same image
    once = daemon.docker("run", "--rm", *_without_volumes(args), "-v", "/:/host:ro", image, "--host-root", "/host",
                         "--docker-data-root", daemon.data_root, "once", "--window", "0", timeout=120)
    by_name = {(r.get("container") or {}).get("name"): r for r in map(json.loads, once.stdout.decode().splitlines())}
    assert by_name[idle_name]["container"]["id"] == idle
    assert by_name[oom_name]["memory"]["oom_kills_total"] == 1
