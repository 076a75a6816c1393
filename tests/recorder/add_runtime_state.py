#!/usr/bin/env python3
"""Add container-runtime state files (names) to a recorded fixture.

usage: add_runtime_state.py FIXTURE_DIR HOSTNAME

FIXTURE_DIR holds t0/, t1/ and meta/ as written by record.sh (v2) or record-v1.sh.
The cgroup files themselves are never touched: this only ADDS, into both t0/ and t1/
(identical content), the files a real host keeps next to its cgroups:

- etc/hostname
- var/lib/docker/containers/<id>/config.v2.json for every docker container except D
  (D is left without a config on purpose: the "unnamed container" case)
- home/podman/.local/share/containers/storage/overlay-containers/containers.json for the
  rootless podman container E (only when the recording has one)
- var/log/pods/<namespace>_<pod name>_<pod uid>/<container>/0.log for the app containers of
  pods B (burstable), BE (besteffort) and F (guaranteed); pause containers get none

IDs come from meta/record.log ("ids A=... B1=..."), pids from meta/pids.txt.
Deterministic: the same recording always gives the same files.
"""
import hashlib
import json
import os
import sys

DOCKER = {
    # label: (name, image, labels, pid label(s) in pids.txt, restart count)
    "A": ("/tf-training", "pytorch/pytorch:2.3.0-cuda12.1",
          {"com.docker.compose.project": "ml", "com.docker.compose.service": "trainer",
           "org.opencontainers.image.source": "https://github.com/pytorch/pytorch"},
          ["A_main"], 0),
    "C": ("/redis-cache", "redis:7.2-alpine",
          {"com.docker.compose.project": "ml", "com.docker.compose.service": "cache"},
          ["C_sleep"], 0),
    # "D": deliberately no config.v2.json
    "G": ("/nginx-proxy", "nginx:1.25",
          {"com.docker.compose.project": "web", "com.docker.compose.service": "proxy"},
          ["G_restarted", "G_main"], 1),
    "H": ("/batch-old", "busybox:1.36", {"team": "data"}, ["H_main"], 0),
    "I": ("/batch-new", "busybox:1.36", {"team": "data"}, ["I_main"], 0),
    "J": ("/postgres-db", "postgres:16", {"com.docker.compose.project": "web",
                                         "com.docker.compose.service": "db"},
          ["J_main"], 0),
}
PODS = {
    # label: (pod uid key, namespace, pod name, [(container id label, container name)])
    "B": ("PODB", "ml", "trainer-7d9f8b6c5d-x2k4q", [("B1", "trainer")]),
    "BE": ("PODBE", "default", "log-shipper-5f6d7c8b94-qw8zt", [("B3", "shipper")]),
    "F": ("PODF", "prod", "api-server-0", [("F", "api")]),
}


def sha(s):
    return hashlib.sha256(s.encode()).hexdigest()


def ts(n):
    """deterministic RFC 3339 time stamps, n minutes after a fixed base"""
    h, m = divmod(n, 60)
    return "2024-05-14T%02d:%02d:07.%09dZ" % (9 + h % 10, m, (n * 7919) % 1000000000)


def write(root, rel, data):
    for t in ("t0", "t1"):
        p = os.path.join(root, t, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(data)
        os.chmod(p, 0o644)


def main():
    root, hostname = sys.argv[1], sys.argv[2]
    ids = {}
    with open(os.path.join(root, "meta", "record.log")) as f:
        for line in f:
            if line.startswith("ids "):
                for kv in line.split()[1:]:
                    k, v = kv.split("=", 1)
                    ids[k] = v
    pids = {}
    with open(os.path.join(root, "meta", "pids.txt")) as f:
        for line in f:
            lab, pid = line.split()[:2]
            pids[lab] = int(pid)

    write(root, "etc/hostname", hostname + "\n")

    for n, (lab, (name, image, labels, pidlabs, restarts)) in enumerate(sorted(DOCKER.items())):
        if lab not in ids:
            continue
        cid = ids[lab]
        pid = next(pids[p] for p in pidlabs if p in pids)
        cfg = {
            "StreamConfig": {},
            "State": {"Running": True, "Paused": False, "Restarting": False,
                      "OOMKilled": False, "RemovalInProgress": False, "Dead": False,
                      "Pid": pid, "ExitCode": 0, "Error": "",
                      "StartedAt": ts(30 + n), "FinishedAt": "0001-01-01T00:00:00Z",
                      "Health": None},
            "ID": cid,
            "Created": ts(n),
            "Managed": False,
            "Path": "/bin/sh",
            "Args": ["-c", "exec app"],
            "Config": {"Hostname": cid[:12], "Domainname": "", "User": "",
                       "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                       "Cmd": ["/bin/sh", "-c", "exec app"],
                       "Image": image, "Volumes": None, "WorkingDir": "",
                       "Entrypoint": None, "OnBuild": None, "Labels": labels},
            "Image": "sha256:" + sha("image:" + image),
            "ImageManifest": None,
            "NetworkSettings": {"Bridge": "", "SandboxID": sha("sandbox:" + cid)},
            "LogPath": "/var/lib/docker/containers/%s/%s-json.log" % (cid, cid),
            "Name": name,
            "Driver": "overlay2",
            "OS": "linux",
            "RestartCount": restarts,
            "HasBeenStartedBefore": restarts > 0,
            "HasBeenManuallyStopped": False,
            "MountPoints": {},
            "AppArmorProfile": "docker-default",
            "HostnamePath": "/var/lib/docker/containers/%s/hostname" % cid,
            "HostsPath": "/var/lib/docker/containers/%s/hosts" % cid,
            "ResolvConfPath": "/var/lib/docker/containers/%s/resolv.conf" % cid,
        }
        # dockerd writes config.v2.json as one compact line
        write(root, "var/lib/docker/containers/%s/config.v2.json" % cid,
              json.dumps(cfg, separators=(",", ":")))

    if "E" in ids:
        eid = ids["E"]
        img = sha("image:quay.io/jupyter/base-notebook:2024-05-13")
        meta = {"image-name": "quay.io/jupyter/base-notebook:2024-05-13", "image-id": img,
                "name": "jupyter", "created-at": 1715677927, "mountlabel": ""}
        ctrs = [{"id": eid, "names": ["jupyter"], "image": img,
                 "layer": sha("layer:" + eid), "metadata": json.dumps(meta, separators=(",", ":")),
                 "created": "2024-05-14T09:12:07.418262917Z",
                 "flags": {"MountLabel": "", "ProcessLabel": ""}}]
        write(root, "home/podman/.local/share/containers/storage/overlay-containers/containers.json",
              json.dumps(ctrs, separators=(",", ":")))

    for lab, (uidkey, ns, pod, ctrs) in sorted(PODS.items()):
        if uidkey not in ids:
            continue
        uid = ids[uidkey].replace("_", "-")
        for clab, cname in ctrs:
            write(root, "var/log/pods/%s_%s_%s/%s/0.log" % (ns, pod, uid, cname),
                  "%s stdout F %s: started (container %s)\n" % (ts(40), cname, ids[clab][:12]))


if __name__ == "__main__":
    main()
