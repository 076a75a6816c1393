"""Container naming against hostile runtime state, and state folders a user may not enter.

Each test builds a fake host root from the recorded v2-systemd tree (tests/fixtures/
v2-systemd/t1: Docker, containerd, CRI-O, and a rootless Podman store in home/podman for
the container under user@1000.service) and adds what a hostile user or container could
create: FIFOs and device links as stores, huge stores, fake cgroups in their own delegated
subtree carrying other containers' IDs, a Docker socket that never answers.
"""

import io
import os
import shutil
import subprocess
import sys
import time

import orjson
import pytest

from cgstat.kernel.hostfs import HostFS, Malformed, Untrusted, read_untrusted
from cgstat.naming.paths import classify
from cgstat.naming.runtimes import identities, storage
from cgstat.naming.runtimes.entry import ContainerEntry
from cgstat.naming.runtimes.identities import Identities
from cgstat.naming.runtimes.trust import Budget
from cgstat.diagnostics import Warner
from cgstat.pipeline.sampler import Sampler
from tests.helpers.contract import ROOT, roundtrip, run_cgstat, validate
from tests.helpers.fakedocker import SilentDocker as _SilentDocker
from tests.helpers.synth import v2_cgroup, write

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, mknod-free FIFOs owned by others)")

T1 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
A_ID = "51136075708308f501039befdd7fe7a087dbb515f5c2380ae7061768d5ac3f65"  # docker tf-training
D_ID = "cb4a542a9cc3587e5fbea131759232cfac2ca0e1d52e48331daf6589d254378c"  # docker, no config.v2.json
B1_ID = "202a1db9ec0572a5f7c576489d7d1581c5c2d3ac23c04331ef6581d0f038fa9f"  # containerd trainer
B_POD = "4fc3dddc-7cd2-4167-9580-5064060ccde9"
E_ID = "d13f85dbc4a6ad9e0d65fd0b2d46216870ecbc733065e2d71676671abb829dc9"  # rootless podman jupyter
E_CGROUP = f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{E_ID}.scope"
USER_STORE = "home/podman/.local/share/containers/storage"
X_ID = "ab" * 32
Y_ID = "cd" * 32


def _tree(tmp_path):
    root = str(tmp_path / "t1")
    shutil.copytree(T1, root, symlinks=True)
    return root


def _by_cgroup(records):
    for r in records:
        validate(r)
    return {r["cgroup"]: r for r in records}


def _once(root, *extra, timeout=60):
    records, err, code = run_cgstat("once", "--window", "0", "--all", "--host-root", root, *extra,
                                    timeout=timeout)
    return _by_cgroup(records), err


def _name(rec):
    return rec["container"]["name"] if rec and rec["container"] else None


def _podman_store(entries):
    return orjson.dumps([{"id": cid, "names": [name], "metadata": orjson.dumps(
        {"image-name": f"img/{name}:1", "name": name}).decode()} for cid, name in entries])


def _chown_tree(path, uid):
    os.chown(path, uid, uid)
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            os.chown(os.path.join(dirpath, n), uid, uid, follow_symlinks=False)


# --- one way to open files the agent does not own ---------------------------------------

def test_read_untrusted_refuses_fifo_link_device_and_oversize(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    link = str(tmp_path / "link")
    os.symlink("/dev/zero", link)
    big = str(tmp_path / "big")
    write(big, "x" * 2048)
    good = str(tmp_path / "good")
    write(good, "{}")
    os.chown(good, 1234, 1234)
    started = time.monotonic()
    with pytest.raises(Untrusted, match="not a regular file"):
        read_untrusted(fifo, 1024)  # without O_NONBLOCK this open would wait for a writer
    assert time.monotonic() - started < 5
    with pytest.raises(Untrusted, match="symbolic link"):
        read_untrusted(link, 1024)
    with pytest.raises(Untrusted, match="not a regular file"):
        read_untrusted("/dev/null", 1024)
    with pytest.raises(Malformed, match="2048 bytes"):
        read_untrusted(big, 1024)
    with pytest.raises(Untrusted, match="owned by uid 1234"):
        read_untrusted(good, 1024, owners={0, 1000})
    assert read_untrusted(good, 1024, owners={1234}) == b"{}"


@pytest.mark.parametrize("kind", ["fifo", "device-link", "store-folder-link"])
def test_hostile_user_store_finishes_promptly(tmp_path, kind):
    """A FIFO or a link to a device as a user's containers.json (and a FIFO as Docker's and
    rootful Podman's state): the run finishes, exit 0, everything else still named."""
    root = _tree(tmp_path)
    store = os.path.join(root, USER_STORE, "overlay-containers")
    target = os.path.join(store, "containers.json")
    os.unlink(target)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "device-link":
        os.symlink("/dev/zero", target)
    else:  # the folder itself a link to a good store elsewhere
        elsewhere = str(tmp_path / "elsewhere")
        write(os.path.join(elsewhere, "containers.json"), _podman_store([(E_ID, "jupyter")]).decode())
        os.rmdir(store)
        os.symlink(elsewhere, store)
    os.mkfifo(os.path.join(root, f"var/lib/docker/containers/{D_ID}.json"))
    os.makedirs(os.path.join(root, f"var/lib/docker/containers/{D_ID}"))
    os.mkfifo(os.path.join(root, f"var/lib/docker/containers/{D_ID}/config.v2.json"))
    os.mkfifo(os.path.join(root, "var/lib/containers/storage/overlay-containers/containers.json"))
    recs, _ = _once(root, timeout=30)
    assert _name(recs[E_CGROUP]) is None
    assert _name(recs[f"/system.slice/docker-{D_ID}.scope"]) is None
    assert _name(recs[f"/system.slice/docker-{A_ID}.scope"]) == "tf-training"


def test_symlinked_docker_container_folder_is_not_followed(tmp_path):
    root = _tree(tmp_path)
    elsewhere = str(tmp_path / "elsewhere")
    write(os.path.join(elsewhere, "config.v2.json"), '{"Name": "/planted", "Config": {"Image": "x"}}')
    os.symlink(elsewhere, os.path.join(root, f"var/lib/docker/containers/{D_ID}"))
    recs, _ = _once(root)
    assert _name(recs[f"/system.slice/docker-{D_ID}.scope"]) is None
    assert _name(recs[f"/system.slice/docker-{A_ID}.scope"]) == "tf-training"


@pytest.mark.parametrize("folder,named", [("vfs-containers", True), ("overlay2-containers", True),
                                          ("a-containers", False), ("overlay-containers.bak", False)])
def test_only_known_storage_driver_folders_are_read(tmp_path, folder, named):
    root = _tree(tmp_path)
    store = os.path.join(root, USER_STORE)
    os.rename(os.path.join(store, "overlay-containers"), os.path.join(store, folder))
    recs, _ = _once(root)
    assert _name(recs[E_CGROUP]) == ("jupyter" if named else None)


# --- memory ------------------------------------------------------------------------------

def _peak_rss_kib(root):
    """Peak RSS of a `cgstat once` child, measured by a fresh parent (RUSAGE_CHILDREN is
    the largest of all the waited-for children)."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run([sys.executable, '-m', 'cgstat', 'once', '--window', '0', '--all',"
            " '--host-root', sys.argv[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
            "assert p.returncode == 0, p.stderr\n"
            "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n')\n"
            "sys.stdout.buffer.write(p.stdout)\n")
    out = subprocess.run([sys.executable, "-c", code, root], capture_output=True, cwd=ROOT, timeout=120,
                         check=True).stdout.decode()
    first, _, rest = out.partition("\n")
    return int(first), _by_cgroup([orjson.loads(x) for x in rest.splitlines() if x.strip()])


def test_huge_user_stores_keep_memory_flat(tmp_path):
    """Four 16 MiB containers.json of 1.1 M tiny entries in a user's store: peak RSS within
    20 MiB of the same run without them (parsing one whole took the agent to 580 MiB)."""
    plain = _tree(tmp_path / "plain")
    hostile = _tree(tmp_path / "hostile")
    entries = b",".join(b'{"id":"%06x"}' % i for i in range(1_100_000))
    payload = b"[" + entries + b"]"
    assert 16 * 1024 * 1024 <= len(payload) < 17 * 1024 * 1024
    first = None
    # aufs, btrfs sort before overlay (where jupyter is): they are scanned in full first.
    for driver in ("aufs", "btrfs", "vfs", "zfs"):
        path = os.path.join(hostile, USER_STORE, f"{driver}-containers", "containers.json")
        os.makedirs(os.path.dirname(path))
        if first is None:
            with open(path, "wb") as f:
                f.write(payload)
            first = path
        else:
            os.link(first, path)
    del entries, payload
    base_kib, base_recs = _peak_rss_kib(plain)
    hostile_kib, hostile_recs = _peak_rss_kib(hostile)
    assert _name(base_recs[E_CGROUP]) == _name(hostile_recs[E_CGROUP]) == "jupyter"
    assert hostile_kib - base_kib <= 20 * 1024, (base_kib, hostile_kib)


def test_store_entry_found_across_chunk_boundary_and_after_decoys(tmp_path):
    """The chunked search finds an entry that straddles a 1 MiB chunk edge, skips hits of
    the ID in other fields, and decodes only the object whose own "id" matches."""
    path = str(tmp_path / "containers.json")
    filler = [{"id": "%064x" % i, "names": ["filler"]} for i in range(5000)]
    decoy = {"id": "ee" * 32, "names": ["decoy"], "layer": X_ID, "metadata": '{"name": "%s"}' % X_ID}
    good = {"id": X_ID, "names": ["wanted"], "metadata": orjson.dumps({"image-name": "img:1"}).decode()}
    needle = b'"' + X_ID.encode() + b'"'

    def build(pad):
        return orjson.dumps(filler + [decoy, {"id": "f" * 64, "names": ["x" * pad]}, good])

    edge = storage.SCAN_CHUNK
    data = build(edge - 30 - build(0).rfind(needle))
    hit = data.rfind(needle)
    assert hit < edge < hit + len(needle)  # the good entry's ID straddles the first chunk's end
    write(path, data)
    fd = os.open(path, os.O_RDONLY)
    try:
        found = storage.scan_store(fd, {X_ID, Y_ID}, Budget(10))
    finally:
        os.close(fd)
    assert found == {X_ID: ContainerEntry(runtime="podman", name="wanted", image="img:1")}


# --- spoofing ----------------------------------------------------------------------------

def test_user_subtree_cgroups_never_get_system_names(tmp_path):
    """A delegated user makes cgroups named like system containers and pods, with their
    IDs: those records carry no name, image, labels or pod name; the real ones still do."""
    root = _tree(tmp_path)
    user = "/user.slice/user-1000.slice/user@1000.service"
    fake_docker = f"{user}/app.slice/docker-{A_ID}.scope"
    fake_pod = f"{user}/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{B_POD.replace('-', '_')}.slice"
    fake_cri = f"{fake_pod}/cri-containerd-{B1_ID}.scope"
    for path in (fake_docker, fake_pod, fake_cri):
        v2_cgroup(root, path)
    assert classify(fake_docker).user_uid == 1000 and classify(fake_docker).runtime == "docker"
    recs, _ = _once(root)
    for path in (fake_docker, fake_cri):
        c = recs[path]["container"]
        assert (c["name"], c["image"], c["labels"]) == (None, None, None), path
    assert recs[fake_cri]["container"]["pod"]["name"] is None
    assert recs[fake_pod]["pod"]["name"] is None and recs[fake_pod]["pod"]["uid"] == B_POD
    real = recs[f"/system.slice/docker-{A_ID}.scope"]["container"]
    assert (real["name"], real["image"]) == ("tf-training", "pytorch/pytorch:2.3.0-cuda12.1")
    (real_cri,) = [r for p, r in recs.items() if p.endswith(f"cri-containerd-{B1_ID}.scope") and "user@" not in p]
    assert real_cri["container"]["name"] == "trainer"
    assert real_cri["container"]["pod"]["name"] == "trainer-7d9f8b6c5d-x2k4q"


def _two_users(tmp_path, bob_has_it):
    """alice (1000, sorts first) and bob (1001); bob runs X; alice's store claims X."""
    root = _tree(tmp_path)
    write(os.path.join(root, "etc/passwd"),
          "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n"
          "bob:x:1001:1001::/home/bob:/bin/sh\n")
    store = ".local/share/containers/storage/overlay-containers/containers.json"
    write(os.path.join(root, "home/alice", store), _podman_store([(X_ID, "alice-spoof"), (Y_ID, "alice-own")]).decode())
    write(os.path.join(root, "home/bob", store), _podman_store([(X_ID, "bob-own")] if bob_has_it else []).decode())
    _chown_tree(os.path.join(root, "home/alice"), 1000)
    _chown_tree(os.path.join(root, "home/bob"), 1001)
    bob_x = f"/user.slice/user-1001.slice/user@1001.service/user.slice/libpod-{X_ID}.scope"
    alice_y = f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{Y_ID}.scope"
    v2_cgroup(root, bob_x)
    v2_cgroup(root, alice_y)
    return root, bob_x, alice_y


@pytest.mark.parametrize("bob_has_it", [True, False])
def test_a_users_store_never_names_another_users_container(tmp_path, bob_has_it):
    root, bob_x, alice_y = _two_users(tmp_path, bob_has_it)
    recs, _ = _once(root)
    assert _name(recs[bob_x]) == ("bob-own" if bob_has_it else None)
    assert _name(recs[alice_y]) == "alice-own"
    assert recs[alice_y]["container"]["image"] == "img/alice-own:1"


@pytest.mark.parametrize("what", ["file", "store-folder", "home"])
def test_store_owned_by_another_uid_is_ignored(tmp_path, what):
    root, bob_x, alice_y = _two_users(tmp_path, True)
    storage = os.path.join(root, "home/alice/.local/share/containers/storage")
    target = {"file": os.path.join(storage, "overlay-containers/containers.json"),
              "store-folder": os.path.join(storage, "overlay-containers"),
              "home": os.path.join(root, "home/alice")}[what]
    os.chown(target, 1001, 1001)
    recs, _ = _once(root)
    assert _name(recs[alice_y]) is None
    assert _name(recs[bob_x]) == "bob-own"


def test_link_into_a_root_owned_store_is_refused(tmp_path):
    """A user links their storage folder to the rootful store (root-owned files): refused,
    every component below the home is opened without following links."""
    root, bob_x, alice_y = _two_users(tmp_path, False)
    write(os.path.join(root, "var/lib/containers/storage/overlay-containers/containers.json"),
          _podman_store([(Y_ID, "root-store")]).decode())
    storage = os.path.join(root, "home/alice/.local/share/containers/storage")
    shutil.rmtree(storage)
    os.symlink(os.path.join(root, "var/lib/containers/storage"), storage)
    recs, _ = _once(root)
    assert _name(recs[alice_y]) is None


# --- Docker API --------------------------------------------------------------------------

def test_docker_socket_that_never_answers_costs_one_timeout(tmp_path):
    root = _tree(tmp_path)
    ids = ["%064x" % (0xd0c0 + i) for i in range(20)]
    for cid in ids:
        v2_cgroup(root, f"/system.slice/docker-{cid}.scope")
    os.makedirs(os.path.join(root, "var/run"), exist_ok=True)
    server = _SilentDocker(os.path.join(root, "var/run/docker.sock"))
    server.start()
    try:
        started = time.monotonic()
        recs, _ = _once(root, timeout=30)
        wall = time.monotonic() - started
    finally:
        server.sock.close()
        for c in server.conns:
            c.close()
    assert wall <= 5.0, wall
    assert len(server.conns) == 1  # then the socket is left alone (backoff)
    for cid in ids:
        assert recs[f"/system.slice/docker-{cid}.scope"]["container"]["name"] is None
    assert _name(recs[f"/system.slice/docker-{A_ID}.scope"]) == "tf-training"


def test_docker_api_only_for_system_docker_cgroups(tmp_path):
    """A docker-<id>.scope in a user's subtree, and a podman container, never reach the API."""
    root = _tree(tmp_path)
    v2_cgroup(root, f"/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{X_ID}.scope")
    v2_cgroup(root, f"/machine.slice/libpod-{Y_ID}.scope")
    os.makedirs(os.path.join(root, "var/run"), exist_ok=True)
    server = _SilentDocker(os.path.join(root, "var/run/docker.sock"))
    server.start()
    try:
        ids = Identities(HostFS(root))
        infos = [classify(f"/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{X_ID}.scope"),
                 classify(f"/machine.slice/libpod-{Y_ID}.scope")]
        ids.refresh_if_new(infos)
        time.sleep(0.2)  # let the accept thread see a connection, were there one
    finally:
        server.sock.close()
    assert server.conns == []


# --- when names are looked up ------------------------------------------------------------

def _agent(root):
    return Sampler(root, all=True, warner=Warner(io.StringIO()))


def _tick(agent):
    return {r["cgroup"]: r for r in (orjson.loads(x) for x in roundtrip(agent.tick()))}


def test_new_container_named_at_once_and_unknown_retried_later(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    agent = _agent(root)
    _tick(agent)
    path = f"/system.slice/docker-{X_ID}.scope"
    v2_cgroup(root, path)
    write(os.path.join(root, f"var/lib/docker/containers/{X_ID}/config.v2.json"),
          '{"Name": "/short-lived", "Config": {"Image": "busybox"}}')
    assert _name(_tick(agent)[path]) == "short-lived"  # the very next tick, no 5 s wait
    # An ID with no state stays unknown; its state appearing later is seen after the retry time.
    late = f"/system.slice/docker-{Y_ID}.scope"
    v2_cgroup(root, late)
    assert _name(_tick(agent)[late]) is None
    write(os.path.join(root, f"var/lib/docker/containers/{Y_ID}/config.v2.json"), '{"Name": "/late"}')
    assert _name(_tick(agent)[late]) is None  # throttled
    monkeypatch.setattr(identities, "_RETRY_UNKNOWN_S", 0.0)
    assert _name(_tick(agent)[late]) == "late"


def test_gone_containers_are_forgotten(tmp_path):
    root = _tree(tmp_path)
    ids = Identities(HostFS(root))
    info = classify(f"/system.slice/docker-{A_ID}.scope")
    ids.refresh_if_new([info])
    assert ids.container(info)["name"] == "tf-training"
    ids.retain([B1_ID])
    assert ids._names == {} and ids.container(info)["name"] is None


def test_time_budget_stops_reading_and_says_so_once(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    monkeypatch.setattr(identities, "_BUDGET_S", 0.0)
    stream = io.StringIO()
    agent = Sampler(root, all=True, warner=Warner(stream))
    recs = _tick(agent)
    agent.tick()
    assert _name(recs[f"/system.slice/docker-{A_ID}.scope"]) is None
    assert stream.getvalue().count("reading container runtime state took over 0 s") == 1


def _dependency_tops():
    """The top-level packages and modules from site-packages that `import cgstat.cli` loads."""
    probe = ("import sys, cgstat.cli\n"
             "for m in list(sys.modules.values()):\n"
             "    f = getattr(m, '__file__', None) or ''\n"
             "    if 'site-packages' in f: print(f)")
    files = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    tops = set()
    for f in files:
        head, rest = f.split("site-packages" + os.sep, 1)
        first = rest.split(os.sep, 1)[0]
        if first.startswith("__editable__"):
            continue
        tops.add(os.path.join(head + "site-packages", first))
    return sorted(tops)


def test_permission_denied_on_state_folders_is_said_once(tmp_path):
    """As a user who can't enter /var/lib/containers (0700), the missing
    Podman/CRI-O names are said, once."""
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv")
    import tempfile
    base = tempfile.mkdtemp(prefix="cgstat-test-")
    try:
        os.chmod(base, 0o755)
        site = os.path.join(base, "site")
        shutil.copytree(os.path.join(ROOT, "cgstat"), os.path.join(site, "cgstat"))
        tree = os.path.join(base, "t1")
        shutil.copytree(T1, tree, symlinks=True)
        for dirpath, dirnames, filenames in os.walk(base):
            for n in dirnames:
                os.chmod(os.path.join(dirpath, n), 0o755)
        os.chmod(os.path.join(tree, "var/lib/containers"), 0o700)
        # cgstat's dependencies too, copied where the other user can read them: the
        # checkout's own venv may sit in a folder only root may enter (mktemp -d is 0700).
        for top in _dependency_tops():
            copy = shutil.copytree if os.path.isdir(top) else shutil.copy2
            copy(top, os.path.join(site, os.path.basename(top)))
        for dirpath, dirnames, filenames in os.walk(site):
            for n in dirnames:
                os.chmod(os.path.join(dirpath, n), 0o755)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": site}
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        python = os.path.realpath(sys.executable)
        if subprocess.run(drop + [python, "-c", "import cgstat.cli"], env=env, cwd=base,
                          capture_output=True).returncode != 0:
            pytest.skip("no Python that another user may run")
        proc = subprocess.run(drop + [python, "-m", "cgstat", "once", "--window", "0", "--host-root", tree],
                              capture_output=True, cwd=base, timeout=60, env=env)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert err.count("permission denied") == 1, err
    assert "var/lib/containers/storage" in err and "Podman and CRI-O container names" in err
