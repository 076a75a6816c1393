"""Where Docker's and containerd's state is (naming/runtimes/daemons.py), containers found
under any cgroup parent only when a runtime knows them, and renames followed; on
synthetic host roots (no root, no daemon needed). tests/live/test_docker_real.py does the same
against a real dockerd."""

import io
import json
import os

import pytest

from cgstat.kernel.hostfs import HostFS
from cgstat.naming.paths import classify
from cgstat.naming.runtimes.daemons import DaemonConfig, Daemons, socket_path
from cgstat.diagnostics import Warner
from cgstat.pipeline.sampler import Sampler
from tests.helpers.synth import v2_cgroup, v2_host, write

CID = "5113" + "ab" * 30
OTHER = "cd" * 32


def _config(name, image="busybox:1", labels=None):
    return json.dumps({"ID": CID, "Name": "/" + name, "Config": {"Image": image, "Labels": labels or {}}})


def _process(root, pid, comm, argv, uids="0\t0\t0\t0", mnt="host"):
    """A fake /proc/<pid>: its mount namespace is a hard link to a shared file per name."""
    base = os.path.join(root, "proc", str(pid))
    write(os.path.join(base, "comm"), comm + "\n")
    write(os.path.join(base, "status"), f"Name:\t{comm}\nUid:\t{uids}\n")
    write(os.path.join(base, "cmdline"), "\0".join(argv) + "\0")
    ns = os.path.join(root, "ns-mnt-" + mnt)
    if not os.path.exists(ns):
        write(ns, "")
    os.makedirs(os.path.join(base, "ns"), exist_ok=True)
    os.link(ns, os.path.join(base, "ns", "mnt"))


def _host(root):
    v2_host(root)
    _process(root, 1, "init", ["/sbin/init"])  # the host's mount namespace, for --host-root


def test_bare_ids_are_containers_only_when_a_runtime_knows_them(tmp_path):
    root = str(tmp_path)
    _host(root)
    v2_cgroup(root, f"/ci-runners/{CID}")
    v2_cgroup(root, f"/ci-runners/{OTHER}")  # a folder anyone could name so: no state knows it
    write(os.path.join(root, f"var/lib/docker/containers/{CID}/config.v2.json"), _config("job-1"))
    assert classify(f"/ci-runners/{CID}").kind == "candidate"
    assert classify(f"/docker/{CID}").kind == "container"  # Docker's own parent: as before
    err = io.StringIO()
    records = list(Sampler(root, warner=Warner(err)).tick())
    by_path = {r["cgroup"]: r for r in records if r.get("type") == "cgroup"}
    assert by_path[f"/ci-runners/{CID}"]["container"]["name"] == "job-1"
    assert by_path[f"/ci-runners/{CID}"]["container"]["runtime"] == "docker"
    assert f"/ci-runners/{OTHER}" not in by_path  # not a workload by default
    assert "no containers or systemd units were found" not in err.getvalue()
    # with --match it shows, as a plain cgroup
    records = list(Sampler(root, match="ci-runners", warner=Warner(io.StringIO())).tick())
    by_path = {r["cgroup"]: r for r in records if r.get("type") == "cgroup"}
    assert by_path[f"/ci-runners/{OTHER}"]["container"] is None
    assert by_path[f"/ci-runners/{CID}"]["container"]["name"] == "job-1"


def test_data_root_from_a_root_dockerd_command_line(tmp_path):
    root = str(tmp_path)
    _host(root)
    v2_cgroup(root, f"/system.slice/docker-{CID}.scope")
    write(os.path.join(root, f"data/docker/containers/{CID}/config.v2.json"), _config("from-cmdline"))
    write(os.path.join(root, f"home/eve/fake/containers/{CID}/config.v2.json"), _config("forged"))
    # any user can start a process called dockerd: only root's, in our mount namespace, count
    _process(root, 50, "dockerd", ["dockerd", "--data-root=/home/eve/fake"], uids="1000\t1000\t1000\t1000")
    _process(root, 51, "dockerd", ["dockerd", "--data-root", "/home/eve/fake"], mnt="dind")
    _process(root, 60, "dockerd", ["/usr/bin/dockerd", "-H", "fd://", "--data-root", "/data/docker"])
    rec = _by_path(root)[f"/system.slice/docker-{CID}.scope"]
    assert rec["container"]["name"] == "from-cmdline"


def test_daemon_json_config_file_and_option(tmp_path):
    root = str(tmp_path)
    _host(root)
    write(os.path.join(root, "etc/docker/daemon.json"), json.dumps({"data-root": "/srv/docker/",
                                                                    "hosts": ["unix:///run/d.sock", "tcp://0:2375"]}))
    fs = HostFS(root)
    d = Daemons(fs)
    assert d.docker_roots() == ["/srv/docker"]
    assert d.docker_sockets() == ["/var/run/docker.sock", "/run/d.sock"]
    write(os.path.join(root, "etc/alt.json"), json.dumps({"data-root": "/alt"}))
    _process(root, 70, "dockerd", ["dockerd", "--config-file", "/etc/alt.json", "-H", "unix:///run/alt.sock"])
    _process(root, 71, "containerd", ["containerd", "--config", "/etc/ctrd.toml"])
    _process(root, 72, "containerd", ["containerd", "--state=/run/other"])
    write(os.path.join(root, "etc/ctrd.toml"), 'version = 2\nroot = "/r"\nstate = "/run/ctrd"  # x\n[grpc]\n'
                                              'state = "/not/this"\n')
    assert d.find() and not d.find()  # once; again only after a while
    assert d.docker_roots() == ["/srv/docker", "/alt"]
    assert d.docker_sockets()[-1] == "/run/alt.sock"
    assert d.containerd_states() == ["/run/containerd", "/run/ctrd", "/run/other"]
    # the options replace what is found
    given = Daemons(fs, DaemonConfig("/given", "unix:///tmp/x.sock"))
    given.find()
    assert given.docker_roots() == ["/given"] and given.docker_sockets() == ["/tmp/x.sock"]
    assert Daemons(fs, DaemonConfig(docker_host="tcp://10.0.0.1:2375")).docker_sockets() == []
    assert Daemons(fs, DaemonConfig(docker_host="")).docker_sockets()[0] == "/var/run/docker.sock"  # set, empty
    assert socket_path("/run/docker.sock") == "/run/docker.sock" and socket_path("ssh://h") is None


def test_unreadable_docker_state_is_said_once(tmp_path):
    root = str(tmp_path)
    _host(root)
    for cid in (CID, OTHER):
        v2_cgroup(root, f"/system.slice/docker-{cid}.scope")

    def warnings(config):
        err = io.StringIO()
        agent = Sampler(root, warner=Warner(err), daemons=config)
        for _ in range(3):
            records = list(agent.tick())
        assert all(r["container"]["name"] is None for r in records if r.get("container"))
        return [line for line in err.getvalue().splitlines() if "Docker containers" in line]

    # no Docker on this host (no data root, no socket): nothing to set, nothing said
    assert warnings(DaemonConfig()) == []
    os.makedirs(os.path.join(root, "srv/docker"))  # a data root, but not theirs
    lines = warnings(DaemonConfig("/srv/docker", "unix:///nowhere.sock"))
    assert len(lines) == 1 and lines[0].startswith("cgstat: 2 Docker containers"), lines
    assert "/srv/docker" in lines[0] and "--docker-data-root" in lines[0] and "DOCKER_HOST" in lines[0]


@pytest.mark.parametrize("inotify", [True, False])
def test_a_rename_is_seen_on_the_next_tick_without_reading_every_file(tmp_path, monkeypatch, inotify):
    from cgstat.naming.runtimes import docker, watch

    if not inotify:  # no watch to be had (fs.inotify.max_user_watches reached): a stat per tick
        def no_inotify():
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(watch, "Inotify", no_inotify)
    root = str(tmp_path)
    _host(root)
    v2_cgroup(root, f"/system.slice/docker-{CID}.scope")
    path = os.path.join(root, f"var/lib/docker/containers/{CID}/config.v2.json")
    write(path, _config("late"))
    agent = Sampler(root, warner=Warner(io.StringIO()))
    name = lambda: list(agent.tick())[0]["container"]["name"]  # noqa: E731
    assert name() == "late"
    reads = []
    real = docker.system_entry
    monkeypatch.setattr(docker, "system_entry", lambda *a: reads.append(a) or real(*a))
    for _ in range(4):
        assert name() == "late"
    assert reads == []  # a steady host reads no state file
    # dockerd writes a new file and renames it over the old one
    for i in range(3):
        write(path + ".tmp", _config(f"late-{i}"))
        write(os.path.join(os.path.dirname(path), "hostconfig.json"), "{}")  # not the one followed
        os.rename(path + ".tmp", path)
        assert name() == f"late-{i}"
        assert len(reads) == i + 1
    agent.close()


def test_ctr_containers_in_any_namespace(tmp_path):
    root = str(tmp_path)
    _host(root)
    tasks = os.path.join(root, "run/containerd/io.containerd.runtime.v2.task")
    v2_cgroup(root, f"/default/{CID}")
    v2_cgroup(root, f"/k8s.io/{OTHER}")
    write(os.path.join(tasks, "default", CID, "config.json"),
          json.dumps({"ociVersion": "1.0.2", "annotations": {"nerdctl/name": "web"}}))
    write(os.path.join(tasks, "k8s.io", OTHER, "config.json"),
          json.dumps({"annotations": {"io.kubernetes.cri.container-type": "container",
                                      "io.kubernetes.cri.container-name": "app",
                                      "io.kubernetes.cri.image-name": "registry/app:1"}}))
    # Docker's own containers are tasks in "moby" too: named from Docker's state, not as plain containerd
    write(os.path.join(tasks, "moby", "ef" * 32, "config.json"), json.dumps({"annotations": {}}))
    v2_cgroup(root, "/docker/" + "ef" * 32)
    write(os.path.join(root, "var/lib/docker/containers", "ef" * 32, "config.v2.json"), _config("dockerd-one"))
    recs = _by_path(root)
    assert (recs[f"/default/{CID}"]["container"]["runtime"], recs[f"/default/{CID}"]["container"]["name"]) == \
        ("containerd", "web")
    k8s = recs[f"/k8s.io/{OTHER}"]["container"]
    assert (k8s["runtime"], k8s["name"], k8s["image"]) == ("containerd", "app", "registry/app:1")
    ours = recs["/docker/" + "ef" * 32]["container"]
    assert (ours["runtime"], ours["name"]) == ("docker", "dockerd-one")


def test_ctr_containers_under_runcs_systemd_driver(tmp_path):
    """`ctr run --runc-systemd-cgroup --cgroup system.slice:<prefix>:<id>`: runc's systemd
    driver makes <prefix>-<id>.scope, the prefix the caller's. A container once containerd's
    state knows the ID; a scope of that form nobody knows stays the unit it is."""
    root = str(tmp_path)
    _host(root)
    tasks = os.path.join(root, "run/containerd/io.containerd.runtime.v2.task")
    v2_cgroup(root, f"/system.slice/cgstat-ctr-{CID}.scope")
    v2_cgroup(root, f"/system.slice/made-up-{OTHER}.scope")
    write(os.path.join(tasks, "default", CID, "config.json"),
          json.dumps({"ociVersion": "1.0.2", "annotations": {"nerdctl/name": "web"}}))
    assert classify(f"/system.slice/cgstat-ctr-{CID}.scope").kind == "candidate"
    assert classify(f"/system.slice/docker-{CID}.scope").kind == "container"  # Docker's own: as before
    recs = _by_path(root)
    ours = recs[f"/system.slice/cgstat-ctr-{CID}.scope"]["container"]
    assert (ours["runtime"], ours["id"], ours["name"]) == ("containerd", CID, "web")
    unknown = recs[f"/system.slice/made-up-{OTHER}.scope"]
    assert unknown["container"] is None and unknown["unit"] == f"made-up-{OTHER}.scope"


def _by_path(root):
    records = list(Sampler(root, warner=Warner(io.StringIO())).tick())
    return {r["cgroup"]: r for r in records if r.get("type") == "cgroup"}


def test_a_docker_host_that_is_no_unix_socket_is_said_once(tmp_path):
    """DOCKER_HOST=tcp://... (CI runners, remote daemons): cgstat asks only a local unix
    socket, and says so at start rather than leaving the option silently unused."""
    import subprocess
    import sys

    root = str(tmp_path)
    _host(root)
    env = dict(os.environ, DOCKER_HOST="tcp://10.0.0.1:2375")
    env.pop("CGSTAT_HOST_ROOT", None)
    proc = subprocess.run([sys.executable, "-m", "cgstat", "--host-root", root, "once", "--window", "0"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "not a unix socket" in line]
    assert said == ["cgstat: --docker-host/DOCKER_HOST 'tcp://10.0.0.1:2375' is not a unix socket "
                    "(unix:///path or /path): the Docker API is not asked for names"]
    for quiet in ("unix:///nowhere.sock", ""):  # an empty DOCKER_HOST is the default socket
        env["DOCKER_HOST"] = quiet
        proc = subprocess.run([sys.executable, "-m", "cgstat", "--host-root", root, "once", "--window", "0"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "not a unix socket" not in proc.stderr


def test_one_unreadable_container_is_said_in_the_singular(tmp_path):
    root = str(tmp_path)
    _host(root)
    v2_cgroup(root, f"/system.slice/docker-{CID}.scope")
    os.makedirs(os.path.join(root, "srv/docker"))
    err = io.StringIO()
    agent = Sampler(root, warner=Warner(err), daemons=DaemonConfig("/srv/docker", "unix:///nowhere.sock"))
    agent.tick()
    agent.close()
    (line,) = [x for x in err.getvalue().splitlines() if "Docker container" in x]
    assert line.startswith(f"cgstat: 1 Docker container (e.g. {CID[:12]}) has no readable state"), line
