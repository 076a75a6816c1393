#!/usr/bin/env python3
"""Add the kubelet's and the CRI runtimes' on-disk state for the Kubernetes containers of a
recorded tree (t0 and t1 alike), as a real node has it:

- /var/log/containers/<pod>_<namespace>_<container>-<id>.log -> ../pods/<ns>_<pod>_<uid>/<container>/0.log
- containerd: /run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json (OCI spec
  with the CRI annotations: container-type sandbox|container, names)
- CRI-O: /var/lib/containers/storage/overlay-containers/<id>/userdata/config.json

The app container of a pod is the one whose process is not `pause`; the pod's names come
from the /var/log/pods/<ns>_<pod>_<uid>/<container>/ folder written by add_runtime_state.py.
usage: add_k8s_state.py FIXTURE_DIR [RUNTIME_FOR_CGROUPFS_PODS]
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from cgstat.naming.paths import classify  # noqa: E402

fixture = sys.argv[1]
default_runtime = sys.argv[2] if len(sys.argv) > 2 else "containerd"


def containers_of(root):
    """(path, PathInfo, pid comms) of Kubernetes containers in the first hierarchy found."""
    top = os.path.join(root, "sys/fs/cgroup")
    for sub in ("", "cpu,cpuacct", "cpu", "pids"):
        base = os.path.join(top, sub)
        if os.path.exists(os.path.join(base, "cgroup.procs")):
            break
    out = []
    for dirpath, dirnames, _ in os.walk(base):
        rel = "/" + os.path.relpath(dirpath, base) if dirpath != base else "/"
        info = classify(rel)
        if info.kind == "container" and info.pod_uid:
            procs = open(os.path.join(dirpath, "cgroup.procs")).read().split()
            comms = [open(os.path.join(root, "proc", p, "comm")).read().strip() for p in procs
                     if os.path.exists(os.path.join(root, "proc", p, "comm"))]
            out.append((rel, info, comms))
    return out


def pod_dirs(root):
    out = {}
    d = os.path.join(root, "var/log/pods")
    for name in os.listdir(d) if os.path.isdir(d) else []:
        m = re.match(r"^([^_]+)_([^_]+)_([0-9a-f-]{36})$", name)
        if m:
            ctrs = sorted(os.listdir(os.path.join(d, name)))
            out[m.group(3)] = (m.group(1), m.group(2), name, ctrs)
    return out


for snap in ("t0", "t1"):
    root = os.path.join(fixture, snap)
    pods = pod_dirs(root)
    for path, info, comms in containers_of(root):
        if info.pod_uid not in pods:
            continue
        ns, pod, pod_dir, ctrs = pods[info.pod_uid]
        sandbox = bool(comms) and all(c == "pause" for c in comms)
        name = None if sandbox else (ctrs[0] if ctrs else None)
        runtime = info.runtime or default_runtime
        if name:
            link_dir = os.path.join(root, "var/log/containers")
            os.makedirs(link_dir, exist_ok=True)
            link = os.path.join(link_dir, f"{pod}_{ns}_{name}-{info.id}.log")
            if not os.path.lexists(link):
                os.symlink(f"../pods/{pod_dir}/{name}/0.log", link)
        if runtime == "containerd":
            ann = {
                "io.kubernetes.cri.container-type": "sandbox" if sandbox else "container",
                "io.kubernetes.cri.sandbox-name": pod,
                "io.kubernetes.cri.sandbox-namespace": ns,
                "io.kubernetes.cri.sandbox-uid": info.pod_uid,
            }
            if not sandbox:
                ann["io.kubernetes.cri.container-name"] = name
                ann["io.kubernetes.cri.image-name"] = "registry.example.com/ml/" + (name or "app") + ":1.0"
            else:
                ann["io.kubernetes.cri.image-name"] = "registry.k8s.io/pause:3.9"
            out = os.path.join(root, "run/containerd/io.containerd.runtime.v2.task/k8s.io", info.id, "config.json")
        else:
            ann = {
                "io.kubernetes.cri-o.ContainerType": "sandbox" if sandbox else "container",
                "io.kubernetes.pod.name": pod,
                "io.kubernetes.pod.namespace": ns,
                "io.kubernetes.pod.uid": info.pod_uid,
                "io.kubernetes.cri-o.ImageName": "registry.k8s.io/pause:3.9" if sandbox
                else "registry.example.com/prod/" + (name or "app") + ":2.1",
            }
            if not sandbox:
                ann["io.kubernetes.container.name"] = name
            out = os.path.join(root, "var/lib/containers/storage/overlay-containers", info.id, "userdata/config.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump({"ociVersion": "1.0.2", "process": {"args": ["/pause"] if sandbox else ["/app"]},
                       "annotations": ann}, f, indent=1)
        os.chmod(out, 0o644)
        print(snap, runtime, "sandbox" if sandbox else name, info.id[:12], path)
