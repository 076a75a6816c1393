"""containerd 1.7 live in the Debian 13 guest: `ctr` with runc's systemd cgroup driver, and a
Kubernetes pod's layout made with real containerd state.

* ctr: `ctr run --runc-systemd-cgroup --cgroup system.slice:<prefix>:<id>`, the scope runc
  makes from it (<prefix>-<id>.scope), named from the task's config.json;
* a pod: what a kubelet with the systemd cgroup driver and containerd's CRI plugin leave
  (kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/cri-containerd-<id>.scope
  for the sandbox and each container, in containerd's `k8s.io` namespace, with the CRI
  annotations in each OCI spec and the kubelet's io.kubernetes.* labels on each
  container). No kubelet runs: ctr makes the same containerd state and cgroups.
The containers run from a busybox root folder (`ctr run --rootfs`: the guest has no
registry), so no image is named: a pod container's image comes from its CRI annotation.
"""
from __future__ import annotations

import json
import secrets
import time

import pytest

from tests.guest.busybox import tarball

ROOTFS = "/var/tmp/cgstat-live-ctr-rootfs"
POD_UID = "7f3c2a9e-1b4d-4e8a-9c6f-2d5b8e1a0c3f"
POD = {"name": "shop-web-0", "namespace": "shop"}


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _hex64():
    return secrets.token_hex(32)


@pytest.fixture(scope="module")
def containerd(guest):
    if guest.suite != "trixie":
        pytest.skip("written for Debian 13's containerd 1.7 (the other guests run the Docker checks)")
    g = guest
    t0 = time.monotonic()
    g.run(["systemctl", "start", "containerd.service"], timeout_s=300, check=True)
    t = tarball(g)
    g.sh("mkdir -p %s && tar -xf %s -C %s" % (ROOTFS, t, ROOTFS), check=True)
    g.times["containerd_start_s"] = round(time.monotonic() - t0, 1)
    made = []

    def run(ns, cid, cgroup, cmd, annotations=(), labels=()):
        argv = ["ctr", "-n", ns, "run", "-d", "--runc-systemd-cgroup", "--cgroup", cgroup]
        for k, v in annotations:
            argv += ["--annotation", "%s=%s" % (k, v)]
        for k, v in labels:
            argv += ["--label", "%s=%s" % (k, v)]
        g.run(argv + ["--rootfs", ROOTFS, cid] + cmd, timeout_s=180, check=True)
        made.append((ns, cid))

    yield g, run
    for ns, cid in made:
        g.sh("ctr -n {ns} task kill -s KILL {c}; sleep 0.5; ctr -n {ns} task rm -f {c}; ctr -n {ns} container rm {c}"
             .format(ns=ns, c=cid), timeout_s=120)


def _once(g, *args):
    r = g.run(["cgstat", "once", "--window", "0"] + list(args), timeout_s=180, check=True)
    return {rec["container"]["id"]: rec for rec in records(r.out) if rec.get("container")}


def test_ctr_with_runc_systemd_cgroups_is_named(containerd):
    g, run = containerd
    cid = _hex64()
    run("default", cid, "system.slice:cgstat-ctr:%s" % cid, ["/bin/sleep", "100000"],
        annotations=[("nerdctl/name", "live-ctr")])
    by_id = _once(g)
    rec = by_id.get(cid)
    assert rec is not None, sorted(by_id)
    assert rec["cgroup"] == "/system.slice/cgstat-ctr-%s.scope" % cid
    c = rec["container"]
    assert (c["runtime"], c["id"], c["name"], c["image"]) == ("containerd", cid, "live-ctr", None), c
    assert rec["pids"]["current"] == 1


def test_kubernetes_pod_layout_from_containerd_state(containerd):
    g, run = containerd
    qos = "burstable"
    pod_slice = "kubepods-%s-pod%s.slice" % (qos, POD_UID.replace("-", "_"))
    sandbox, app = _hex64(), _hex64()
    kube_labels = [("io.kubernetes.pod.name", POD["name"]), ("io.kubernetes.pod.namespace", POD["namespace"]),
                   ("io.kubernetes.pod.uid", POD_UID)]
    cri = [("io.kubernetes.cri.sandbox-name", POD["name"]), ("io.kubernetes.cri.sandbox-namespace", POD["namespace"]),
           ("io.kubernetes.cri.sandbox-uid", POD_UID)]
    run("k8s.io", sandbox, "%s:cri-containerd:%s" % (pod_slice, sandbox), ["/bin/sleep", "100000"],
        annotations=cri + [("io.kubernetes.cri.container-type", "sandbox"), ("io.kubernetes.cri.sandbox-id", sandbox)],
        labels=kube_labels + [("io.cri-containerd.kind", "sandbox")])
    run("k8s.io", app, "%s:cri-containerd:%s" % (pod_slice, app), ["/bin/sh", "-c", "sleep 100000 & exec sleep 100000"],
        annotations=cri + [("io.kubernetes.cri.container-type", "container"), ("io.kubernetes.cri.sandbox-id", sandbox),
                           ("io.kubernetes.cri.container-name", "web"),
                           ("io.kubernetes.cri.image-name", "registry.example/shop/web:1.4")],
        labels=kube_labels + [("io.kubernetes.container.name", "web"), ("io.cri-containerd.kind", "container")])
    base = "/kubepods.slice/kubepods-%s.slice/%s" % (qos, pod_slice)
    by_id = _once(g)
    rec = by_id.get(app)
    assert rec is not None, sorted(r["cgroup"] for r in by_id.values())
    assert rec["cgroup"] == "%s/cri-containerd-%s.scope" % (base, app)
    c = rec["container"]
    assert (c["runtime"], c["name"], c["image"], c["sandbox"]) == \
        ("containerd", "web", "registry.example/shop/web:1.4", False), c
    pod = {"uid": POD_UID, "name": POD["name"], "namespace": POD["namespace"], "qos": qos}
    assert rec["pod"] == pod and c["pod"] == pod
    assert rec["pids"]["current"] == 2
    # the sandbox: only with --all, said so
    assert sandbox not in by_id
    every = _once(g, "--all")
    s = every[sandbox]
    assert s["container"]["sandbox"] is True and s["pod"] == pod, s["container"]
