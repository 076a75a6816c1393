"""Container recognition from paths (table), names from recorded runtime state, PID lookup."""

import os

import pytest

from cgstat.naming.paths import classify, unescape_unit
from tests.helpers.contract import ROOT, run_cgstat, validate

H = "0123456789abcdef" * 4
UID = "3f2a1b2c-1111-2222-3333-444455556666"
UID_ = UID.replace("-", "_")

PATHS = [
    # path, kind, runtime, id, pod uid, qos, unit
    (f"/system.slice/docker-{H}.scope", "container", "docker", H, None, None, f"docker-{H}.scope"),
    (f"/docker/{H}", "container", "docker", H, None, None, None),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{H}.scope",
     "container", "containerd", H, UID, "burstable", f"cri-containerd-{H}.scope"),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-{H}.scope", "container", "cri-o", H, UID, "guaranteed",
     f"crio-{H}.scope"),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{H}.scope", "monitor", None, None, UID, "guaranteed",
     f"crio-conmon-{H}.scope"),
    (f"/kubepods/besteffort/pod{UID}/{H}", "container", None, H, UID, "besteffort", None),
    (f"/kubepods/pod{UID}/{H}", "container", None, H, UID, "guaranteed", None),
    (f"/kubepods/burstable/pod{UID}", "pod", None, None, UID, "burstable", None),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice", "pod", None, None, UID,
     "besteffort", f"kubepods-besteffort-pod{UID_}.slice"),
    (f"/machine.slice/libpod-{H}.scope", "container", "podman", H, None, None, f"libpod-{H}.scope"),
    (f"/machine.slice/libpod-conmon-{H}.scope", "monitor", None, None, None, None, f"libpod-conmon-{H}.scope"),
    (f"/libpod_parent/libpod-{H}", "container", "podman", H, None, None, None),
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{H}.scope", "container", "podman", H,
     None, None, f"libpod-{H}.scope"),
    ("/machine/cgstat/conmon", "monitor", None, None, None, None, None),
    ("/lxc.payload.web01", "container", "lxc", "web01", None, None, None),
    ("/lxc.monitor.web01", "monitor", None, None, None, None, None),
    ("/lxc/web01", "container", "lxc", "web01", None, None, None),
    (f"/system.slice/nerdctl-{H}.scope", "container", "containerd", H, None, None, f"nerdctl-{H}.scope"),
    ("/system.slice/system-getty.slice/getty@tty1.service", None, None, None, None, None, "getty@tty1.service"),
    ("/system.slice/dev-disk-by\\x2duuid-abcd.swap", None, None, None, None, None, "dev-disk-by-uuid-abcd.swap"),
    ("/system.slice", None, None, None, None, None, "system.slice"),
    ("/", None, None, None, None, None, None),
    ("/docker", None, None, None, None, None, None),
    (f"/docker/{H[:63]}", None, None, None, None, None, None),  # not a full ID
    (f"/kubepods/besteffort/pod{UID}/not-an-id", None, None, None, None, None, None),
]


@pytest.mark.parametrize("path,kind,runtime,cid,uid,qos,unit", PATHS)
def test_classify(path, kind, runtime, cid, uid, qos, unit):
    info = classify(path)
    assert (info.kind, info.runtime, info.id, info.pod_uid, info.qos, info.unit) == (kind, runtime, cid, uid, qos, unit)


def test_nested_cgroup_of_a_container_is_part_of_it():
    info = classify(f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{H}.scope/container")
    assert info.kind is None and info.inside_container and info.id == H and info.runtime == "podman"


def test_unescape_unit():
    assert unescape_unit("dev-disk-by\\x2duuid-abcd.swap") == "dev-disk-by-uuid-abcd.swap"
    assert unescape_unit("plain.service") == "plain.service"


FIX = os.path.join(ROOT, "tests", "fixtures")

# (fixture, container id prefix) -> (runtime, name, image, pod namespace/name, qos)
EXPECTED = {
    "v2-systemd": {
        "51136075708308f5": ("docker", "tf-training", "pytorch/pytorch:2.3.0-cuda12.1", None, None),
        "57534f8a7f6694f8": ("docker", "redis-cache", "redis:7.2-alpine", None, None),
        "cb4a542a9cc3587e": ("docker", None, None, None, None),  # no config.v2.json
        "d13f85dbc4a6ad9e": ("podman", "jupyter", "quay.io/jupyter/base-notebook:2024-05-13", None, None),
        "202a1db9ec0572a5": ("containerd", "trainer", "registry.example.com/ml/trainer:1.0",
                             ("ml", "trainer-7d9f8b6c5d-x2k4q"), "burstable"),
        "0ff0dade5d060743": ("containerd", "shipper", "registry.example.com/ml/shipper:1.0",
                             ("default", "log-shipper-5f6d7c8b94-qw8zt"), "besteffort"),
        "fd88d7c4db246c33": ("cri-o", "api", "registry.example.com/prod/api:2.1", ("prod", "api-server-0"),
                             "guaranteed"),
    },
}


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_recorded_containers_are_named(fixture):
    records, _, _ = run_cgstat("once", "--window", "0", "--host-root", os.path.join(FIX, fixture, "t1"))
    by_id = {}
    for rec in records:
        validate(rec)
        if rec["container"]:
            by_id[rec["container"]["id"]] = rec
    # pause containers and conmon monitors are not application containers
    assert not any(r["container"]["sandbox"] for r in by_id.values())
    assert not any("conmon" in r["cgroup"] for r in records)
    for prefix, (runtime, name, image, pod, qos) in EXPECTED[fixture].items():
        match = [r for cid, r in by_id.items() if cid.startswith(prefix)]
        assert len(match) == 1, prefix
        c = match[0]["container"]
        assert len(c["id"]) == 64 and c["short_id"] == c["id"][:12]
        assert (c["runtime"], c["name"], c["image"]) == (runtime, name, image)
        if pod is None:
            assert c["pod"] is None
        else:
            assert (c["pod"]["namespace"], c["pod"]["name"], c["pod"]["qos"]) == (*pod, qos)
            assert len(c["pod"]["uid"]) == 36
    pods = [r for r in records if r["type"] == "pod"]
    assert len(pods) == 3 and all(p["container"] is None for p in pods)
    assert sorted((p["pod"]["namespace"], p["pod"]["name"], p["pod"]["qos"]) for p in pods) == sorted(
        (*pod, qos) for _, _, _, pod, qos in EXPECTED[fixture].values() if pod)
    for r in records:  # the top-level pod is the container's pod
        assert r["container"] is None or r["pod"] == r["container"]["pod"]


def test_all_shows_sandboxes_marked():
    records, _, _ = run_cgstat("once", "--window", "0", "--all",
                               "--host-root", os.path.join(FIX, "v2-systemd", "t1"))
    sandboxes = [r for r in records if r["container"] and r["container"]["sandbox"]]
    assert sorted(r["container"]["id"][:12] for r in sandboxes) == ["4d823e9e864d", "7d64c3ba39ef"]


def test_pid_lookup_in_recorded_tree():
    out, _, code = run_cgstat("pid", "216", "224", "99999", "--host-root", os.path.join(FIX, "v2-systemd", "t1"))
    assert code == 0
    a, e, dead = out
    assert a["container"]["name"] == "tf-training" and a["container"]["runtime"] == "docker"
    assert e["container"]["name"] == "jupyter"  # in rootless podman's nested "container" leaf
    assert e["cgroup"].endswith("/container")
    assert dead == {"pid": 99999, "error": "no such process", "cgroup": None, "paths": None,
                    "unit": None, "container": None}


def test_pid_lookup_v1_with_differing_memory_path():
    root = os.path.join(FIX, "v1-comounted", "t1")
    # container J sits at /docker/<id> except in memory (/machine/sandbox/docker/<id>)
    import glob
    (jdir,) = glob.glob(os.path.join(root, "sys/fs/cgroup/memory/machine/sandbox/docker/*/"))
    jid = os.path.basename(jdir.rstrip("/"))
    pid = open(os.path.join(jdir, "cgroup.procs")).read().split()[0]
    (out,), _, _ = run_cgstat("pid", pid, "--host-root", root)
    assert out["cgroup"] == f"/docker/{jid}"
    assert out["paths"]["memory"] == f"/machine/sandbox/docker/{jid}"
    assert out["container"]["id"] == jid and out["container"]["name"] == "postgres-db"


def test_kubelet_log_folders_alone_name_single_container_pods(tmp_path):
    """Without CRI state or /var/log/containers links: pause containers are told by their
    process name, and a pod with one application container and one log folder is named."""
    import shutil

    tree = tmp_path / "t1"
    shutil.copytree(os.path.join(FIX, "v2-systemd", "t1"), tree, symlinks=True)
    shutil.rmtree(tree / "var/log/containers")
    shutil.rmtree(tree / "run/containerd")
    shutil.rmtree(tree / "var/lib/containers/storage/overlay-containers", ignore_errors=True)
    records, _, _ = run_cgstat("once", "--window", "0", "--host-root", str(tree))
    named = {r["container"]["id"][:12]: (r["container"]["name"], r["pod"]["name"])
             for r in records if r["container"] and r["pod"]}
    assert named == {"202a1db9ec05": ("trainer", "trainer-7d9f8b6c5d-x2k4q"),
                     "0ff0dade5d06": ("shipper", "log-shipper-5f6d7c8b94-qw8zt"),
                     "fd88d7c4db24": ("api", "api-server-0")}


TREES = sorted(d for d in os.listdir(FIX) if os.path.isdir(os.path.join(FIX, d, "t1")))


@pytest.mark.parametrize("fixture", TREES)
def test_every_recorded_container_named_from_its_state(fixture):
    """Oracle from the state files themselves: each Docker container with a config.v2.json
    carries its Name and Image; each Kubernetes container with a kubelet log link its name
    and pod; no conmon monitor or pause container is reported by default."""
    import json as _json
    import re

    root = os.path.join(FIX, fixture, "t1")
    records, _, _ = run_cgstat("once", "--window", "0", "--host-root", root)
    links = {}
    logdir = os.path.join(root, "var/log/containers")
    for name in os.listdir(logdir) if os.path.isdir(logdir) else []:
        m = re.match(r"^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$", name)
        links[m.group(4)] = (m.group(3), m.group(2), m.group(1))
    seen = 0
    for rec in records:
        validate(rec)
        c = rec["container"]
        assert "conmon" not in rec["cgroup"]
        if not c:
            continue
        assert not c["sandbox"]
        cfg = os.path.join(root, "var/lib/docker/containers", c["id"], "config.v2.json")
        if os.path.exists(cfg):
            doc = _json.load(open(cfg))
            assert (c["runtime"], c["name"], c["image"]) == ("docker", doc["Name"].lstrip("/"), doc["Config"]["Image"])
            seen += 1
        if c["id"] in links:
            name, ns, pod = links[c["id"]]
            assert (c["name"], rec["pod"]["namespace"], rec["pod"]["name"]) == (name, ns, pod)
            seen += 1
    if os.path.isdir(os.path.join(root, "var/lib/docker")):
        assert seen >= 3
    else:  # a recording with no runtime state (hybrid-local: a bare runc container)
        assert any(r["container"] and r["container"]["runtime"] == "docker" for r in records)


def test_a_podman_rootfs_container_has_no_image_not_an_empty_one():
    # `podman run --rootfs DIR` stores "image-name": "" in containers.json
    from cgstat.naming.runtimes.storage import entry_from_item

    meta = '{"image-name": "", "name": "from-a-folder"}'
    entry = entry_from_item({"id": "ab" * 32, "names": ["from-a-folder"], "metadata": meta})
    assert entry is not None and (entry.name, entry.image) == ("from-a-folder", None)
    meta = '{"image-name": "localhost/busybox:1"}'
    assert entry_from_item({"id": "ab" * 32, "names": ["x"], "metadata": meta}).image == "localhost/busybox:1"
