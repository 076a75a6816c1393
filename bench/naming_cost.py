#!/usr/bin/env python3
"""What naming containers adds to a tick: N containers with runtime state, names on vs off.

    python3 bench/naming_cost.py [--containers 100] [--ticks 200] [--reps 5] [--json]

Builds a synthetic v2 host root with N containers (half Docker with config.v2.json, a
quarter containerd Kubernetes containers with their CRI config.json and kubelet log
folders, a quarter rootless Podman in one containers.json) and measures the CPU time of
`--ticks` ticks of the agent in-process, once with runtime state read (names, images,
labels, pods) and once with IDs from paths only. The first tick (which reads every
state file) is included in both, so the figure is the steady cost plus the amortised
first read; the state is re-read only when an unknown container appears.
"""

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from tests.helpers.synth import v2_cgroup, v2_host, write  # noqa: E402

from cgstat.diagnostics import Warner  # noqa: E402
from cgstat.pipeline.sampler import Sampler  # noqa: E402


def build(root: str, n: int) -> None:
    v2_host(root)
    podman = []
    for i in range(n):
        cid = f"{i:064x}"
        kind = i % 4
        if kind in (0, 1):
            v2_cgroup(root, f"/system.slice/docker-{cid}.scope")
            write(os.path.join(root, f"var/lib/docker/containers/{cid}/config.v2.json"), json.dumps({
                "ID": cid, "Name": f"/job-{i}", "Config": {"Image": "pytorch/pytorch:2.3.0",
                                                         "Labels": {"team": "ml", "run": str(i)}}}))
        elif kind == 2:
            uid = str(uuid.UUID(int=i))
            slice_ = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice"
            v2_cgroup(root, slice_)
            v2_cgroup(root, f"{slice_}/cri-containerd-{cid}.scope")
            os.makedirs(os.path.join(root, f"var/log/pods/ml_worker-{i}_{uid}/trainer"), exist_ok=True)
            write(os.path.join(root, f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json"),
                  json.dumps({"annotations": {"io.kubernetes.cri.container-type": "container",
                                              "io.kubernetes.cri.container-name": "trainer",
                                              "io.kubernetes.cri.sandbox-name": f"worker-{i}",
                                              "io.kubernetes.cri.sandbox-namespace": "ml"}}))
        else:
            v2_cgroup(root, f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{cid}.scope")
            podman.append({"id": cid, "names": [f"nb-{i}"], "metadata": json.dumps({"image-name": "jupyter:1"})})
    write(os.path.join(root, "home/podman/.local/share/containers/storage/overlay-containers/containers.json"),
          json.dumps(podman))


def measure(root: str, ticks: int, read_state: bool) -> float:
    agent = Sampler(root, warner=Warner(io.StringIO()), read_state=read_state)
    t0 = time.process_time()
    for _ in range(ticks):
        agent.tick()
    return (time.process_time() - t0) / ticks * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containers", type=int, default=100)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="cgstat-naming-")
    try:
        build(root, args.containers)
        off, on = [], []
        for _ in range(args.reps):  # interleaved, so drift hits both alike
            off.append(measure(root, args.ticks, False))
            on.append(measure(root, args.ticks, True))
        # check the names really were read
        agent = Sampler(root, warner=Warner(io.StringIO()))
        named = sum(1 for record in agent.tick() if (record.get("container") or {}).get("name"))
        agent.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"containers": args.containers, "named_records": named,
              "ms_per_tick_ids_only": round(statistics.median(off), 3),
              "ms_per_tick_with_names": round(statistics.median(on), 3)}
    result["naming_overhead_percent"] = round(
        (result["ms_per_tick_with_names"] / result["ms_per_tick_ids_only"] - 1) * 100, 1)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>26}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
