"""Slurm jobs (cgstat/naming/runtimes/slurm.py): the v1 and v2 paths slurmd makes, the user
from the spool's batch script (read as hostile: a FIFO, a link, a folder someone else owns
name nobody), the record's container.slurm and the `slurm_job` label.

The v2 tree here is synthetic, laid out as slurmd's cgroup/v2 plugin makes it (a job, its
steps each with `slurm` and `user/task_<T>`); tests/live/test_slurm_real.py has the v1
layout on real cgroups."""

from __future__ import annotations

import os

import pytest

from cgstat.naming.paths import classify
from cgstat.naming.runtimes.slurm import SlurmPath, parse_path, script_owner
from cgstat.outputs.prometheus import exposition as prom
from tests.helpers.contract import run_cgstat, validate
from tests.helpers.synth import v2_cgroup, v2_host, write

parser = pytest.importorskip("prometheus_client.parser")

SCOPE = "/system.slice/slurmstepd.scope"
# the job's user: as root, a uid of its own (slurmstepd chowns the script to it); else ours
USER = 4321 if os.geteuid() == 0 else os.geteuid()


@pytest.mark.parametrize("path, job, step, task, uid, inside", [
    ("/slurm/uid_1000/job_42", 42, None, None, 1000, False),
    ("/slurm/uid_1000/job_42/step_0", 42, "0", None, 1000, True),
    ("/slurm/uid_1000/job_42/step_batch/task_0", 42, "batch", "0", 1000, True),
    ("/slurm_node7/uid_0/job_4294967295/step_extern/task_0", 4294967295, "extern", "0", 0, True),
    (SCOPE + "/job_7", 7, None, None, None, False),
    (SCOPE + "/job_7/step_interactive/user/task_special", 7, "interactive", "special", None, True),
    (SCOPE + "/job_7/step_3/slurm", 7, "3", None, None, True),  # the step's slurmstepd
    ("/system.slice/node1_slurmstepd.scope/job_7/step_0+1/user/task_12", 7, "0+1", "12", None, True),
    ("/cgstat-test-x/slurm/uid_5/job_9/step_0/task_1/nested", 9, "0", "1", 5, True),
])
def test_paths_slurmd_makes(path, job, step, task, uid, inside):
    info = classify(path)
    assert (info.kind, info.runtime, info.id) == ("container", "slurm", str(job))
    assert info.detail == SlurmPath(job, step, task, uid)
    assert info.inside_container is inside


@pytest.mark.parametrize("path", [
    "/slurm", "/slurm/uid_1000", "/slurm/system", SCOPE, SCOPE + "/system",
    "/slurm/job_42",  # v1 always has the uid level
    "/slurm/uid_x/job_42", "/slurm/uid_1000/job_42x", "/slurm/uid_1000/job_",
    "/slurm/uid_1000/job_4294967296",  # past a uint32: not a Slurm job ID
    "/slurm/uid_1000/job_42/step_foo", SCOPE + "/job_7/steps",
    "/system.slice/job_7", "/user.slice/job_7/step_0",
])
def test_other_paths_are_not_jobs(path):
    assert parse_path([p for p in path.split("/") if p]) is None
    assert classify(path).runtime != "slurm"


def _spool(root, job, script="file"):
    folder = os.path.join(root, "var/spool/slurmd", "job%05d" % job)
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, "slurm_script")
    if script == "file":
        write(target, "#!/bin/sh\nsleep 60\n")
        if USER != os.geteuid():
            os.chown(target, USER, USER)
    elif script == "fifo":
        os.mkfifo(target)
    elif script == "link":
        os.symlink("/etc/passwd", target)
    return folder


def test_script_owner_is_lstat_only(tmp_path):
    spool = str(tmp_path / "spool")
    os.makedirs(spool)
    assert script_owner(spool, 1) is None  # no job folder
    for job, kind in ((2, "file"), (3, "fifo"), (4, "link"), (5, None)):
        folder = os.path.join(spool, "job%05d" % job)
        os.makedirs(folder)
        target = os.path.join(folder, "slurm_script")
        if kind == "file":
            write(target, "x")
        elif kind == "fifo":
            os.mkfifo(target)  # opening it would block: it is never opened
        elif kind == "link":
            os.symlink("/etc/passwd", target)
    assert script_owner(spool, 2) == os.geteuid()
    assert script_owner(spool, 3) is None
    assert script_owner(spool, 4) is None
    assert script_owner(spool, 5) is None  # interactive job: no script
    os.makedirs(os.path.join(spool, "elsewhere"))
    write(os.path.join(spool, "elsewhere", "slurm_script"), "x")
    os.symlink(os.path.join(spool, "elsewhere"), os.path.join(spool, "job00006"))
    assert script_owner(spool, 6) is None  # a linked job folder is not followed
    assert script_owner(spool, 123456) is None
    os.makedirs(os.path.join(spool, "job123456"))
    write(os.path.join(spool, "job123456", "slurm_script"), "x")
    assert script_owner(spool, 123456) == os.geteuid()  # %05u: more digits for larger IDs


def _v2_tree(root):
    v2_host(root)
    write(os.path.join(root, "etc/passwd"), f"root:x:0:0::/root:/bin/sh\nalice:x:{USER}:{USER}::/home/alice:/bin/sh\n"
          if USER else "alice:x:0:0::/root:/bin/sh\n")
    v2_cgroup(root, "/system.slice")
    v2_cgroup(root, SCOPE)
    v2_cgroup(root, SCOPE + "/system")
    for job in (42, 43, 44):
        v2_cgroup(root, f"{SCOPE}/job_{job}")
        for step in ("batch", "0"):
            v2_cgroup(root, f"{SCOPE}/job_{job}/step_{step}")
            v2_cgroup(root, f"{SCOPE}/job_{job}/step_{step}/slurm")
            v2_cgroup(root, f"{SCOPE}/job_{job}/step_{step}/user")
            for task in ("0", "1"):
                v2_cgroup(root, f"{SCOPE}/job_{job}/step_{step}/user/task_{task}")
    _spool(root, 42)
    _spool(root, 43, "fifo")
    # job 44: no spool entry (an interactive job: srun/salloc write no batch script)


def _once(root, *extra):
    records, err, _ = run_cgstat("once", "--window", "0", "--host-root", root, *extra, timeout=30)
    return {r["cgroup"]: r for r in records}, err


def test_v2_jobs_named_from_paths_and_spool(tmp_path):
    root = str(tmp_path / "host")
    _v2_tree(root)
    recs, err = _once(root, "--all")
    for rec in recs.values():
        validate(rec)
    job = recs[f"{SCOPE}/job_42"]["container"]
    assert job["runtime"] == "slurm" and job["id"] == "42"
    assert job["slurm"] == {"job_id": 42, "step": None, "task": None, "uid": USER, "user": "alice"}
    task = recs[f"{SCOPE}/job_42/step_0/user/task_1"]["container"]["slurm"]
    assert task == {"job_id": 42, "step": "0", "task": "1", "uid": USER, "user": "alice"}
    stepd = recs[f"{SCOPE}/job_42/step_batch/slurm"]["container"]["slurm"]
    assert (stepd["step"], stepd["task"]) == ("batch", None)
    # a FIFO for a script, or no script: no user, and the run did not block on it
    assert recs[f"{SCOPE}/job_43"]["container"]["slurm"]["uid"] is None
    assert recs[f"{SCOPE}/job_44/step_0/user/task_0"]["container"]["slurm"]["uid"] is None
    assert recs[f"{SCOPE}/system"]["container"] is None
    assert recs[SCOPE]["container"] is None


def test_default_selection_is_the_jobs(tmp_path):
    """A job's steps and tasks are inside it: the default shows the three jobs (and the
    systemd scope they are in), not their 30 sub-cgroups."""
    root = str(tmp_path / "host")
    _v2_tree(root)
    recs, err = _once(root)
    jobs = sorted(p for p, r in recs.items() if r["container"])
    assert jobs == [f"{SCOPE}/job_{j}" for j in (42, 43, 44)]
    assert "3 containers" in err, err


def test_slurm_job_label_per_job(tmp_path):
    root = str(tmp_path / "host")
    _v2_tree(root)
    recs, _ = _once(root, "--all")
    text = prom.render(list(recs.values())).decode()
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    usage = families["container_cpu_usage_seconds"].samples
    by_id = {s.labels["id"]: s.labels for s in usage}
    assert by_id[f"{SCOPE}/job_42"]["slurm_job"] == "42"
    assert by_id[f"{SCOPE}/job_42/step_0/user/task_1"]["slurm_job"] == "42"
    assert by_id[f"{SCOPE}/job_44/step_batch/slurm"]["slurm_job"] == "44"
    assert "slurm_job" not in by_id[f"{SCOPE}/system"]
    # one value per job, whatever its steps and tasks
    assert {l["slurm_job"] for l in by_id.values() if "slurm_job" in l} == {"42", "43", "44"}


def test_a_user_subtree_is_named_from_its_path_alone(tmp_path):
    """A user may make any cgroup in their delegated subtree, a fake job among them: the
    spool (system state) never names it."""
    root = str(tmp_path / "host")
    _v2_tree(root)
    fake = "/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope/job_42"
    v2_cgroup(root, "/user.slice")
    v2_cgroup(root, "/user.slice/user-1000.slice")
    v2_cgroup(root, "/user.slice/user-1000.slice/user@1000.service")
    v2_cgroup(root, "/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope")
    v2_cgroup(root, fake)
    recs, _ = _once(root, "--all")
    assert recs[fake]["container"]["slurm"]["uid"] is None
    assert recs[f"{SCOPE}/job_42"]["container"]["slurm"]["uid"] == USER


def test_spool_folder_from_slurm_conf(tmp_path):
    root = str(tmp_path / "host")
    _v2_tree(root)
    os.rename(os.path.join(root, "var/spool/slurmd"), os.path.join(root, "srv-spool"))
    write(os.path.join(root, "etc/slurm/slurm.conf"),
          "# site\nClusterName=c1\nSlurmdSpoolDir=/srv-spool   # moved\n")
    recs, _ = _once(root, "--all")
    assert recs[f"{SCOPE}/job_42"]["container"]["slurm"]["uid"] == USER
