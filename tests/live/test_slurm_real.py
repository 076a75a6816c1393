"""Slurm jobs on REAL cgroups, laid out as slurmd lays them, below our own cgroup.

On a v1 or hybrid host the cgroup/v1 plugin's layout, in every hierarchy:
``<ours>/<prefix>/slurm/uid_<U>/job_<J>/step_<S>/task_<T>``; on pure v2 the cgroup/v2
plugin's: ``<ours>/<prefix>/slurmstepd.scope/job_<J>/step_<S>/{slurm,user/task_<T>}``.
A process of ours sits in each task (and, on v2, in the step's `slurm` folder, as
slurmstepd does). `cgstat once` must name each as the job, step and task it is, with
figures from the kernel's own files, and show only the job by default.
tests/unit/test_slurm.py has the spool, the hostile cases and the label.
"""

import os
import pwd
import subprocess

import pytest

from tests.helpers import realcg as R

pytestmark = pytest.mark.realcg
REALCG_V2 = True  # both layouts: the one slurmd makes on this host's kind of hierarchy

JOB, UID = 4242, 1234
STEPS = (("0", ("0", "1")), ("batch", ("0",)))


def _layout(g, hier):
    """The folders slurmd makes, in each hierarchy of group g; returns {relative path: task?}."""
    if hier.v2:
        top = "slurmstepd.scope"
        leaves = {f"{top}/job_{JOB}/step_{s}/user/task_{t}": (s, t) for s, tasks in STEPS for t in tasks}
        leaves.update({f"{top}/job_{JOB}/step_{s}/slurm": (s, None) for s, _ in STEPS})
    else:
        top = f"slurm/uid_{UID}"
        leaves = {f"{top}/job_{JOB}/step_{s}/task_{t}": (s, t) for s, tasks in STEPS for t in tasks}
    for d in g.dirs.values():
        for leaf in leaves:
            os.makedirs(os.path.join(d, leaf), exist_ok=True)
    if hier.v2:
        # as slurmd does (cgroup/v2 enables them at each level it makes): the controllers
        # down to the leaves, top first, in the folders this test made
        top_dir = g.dirs[hier.key("cpu")]
        inner = {os.path.join(top_dir, *leaf.split("/")[:i]) for leaf in leaves
                 for i in range(len(leaf.split("/")))}  # the group's folder and all above a leaf
        for folder in sorted(inner, key=lambda p: p.count("/")):
            have = R.read(os.path.join(folder, "cgroup.controllers")).split()
            R._write(os.path.join(folder, "cgroup.subtree_control"), " ".join("+" + c for c in have))
    return leaves


def _start_in(g, leaf):
    files = [os.path.join(d, leaf, "cgroup.procs") for d in g.dirs.values()]

    def join():  # in the child, before exec: the leaf in every hierarchy
        pid = str(os.getpid()).encode()
        for pf in files:
            fd = os.open(pf, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    p = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         preexec_fn=join)  # noqa: PLW1509 (single-threaded tests)
    g.procs.append(R.Proc(p, ["sleep", "300"]))  # killed and reaped by g.destroy()
    return p.pid


def _user(uid):
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def test_jobs_steps_and_tasks_named(make_group, run_cgstat):
    g = make_group()
    hier = g.hier
    leaves = _layout(g, hier)
    pids = {leaf: _start_in(g, leaf) for leaf in leaves}
    base = g.cgroup
    recs = {r["cgroup"]: r for r in run_cgstat("once", "--all", "--match", g.name, "--window", "0")
            if r.get("type") == "cgroup"}
    job_path = f"{base}/{next(iter(leaves)).split('/job_')[0]}/job_{JOB}"
    job = recs[job_path]["container"]
    assert (job["runtime"], job["id"]) == ("slurm", str(JOB))
    want_uid = None if hier.v2 else UID  # v2 has no uid level; no spool here for it
    assert job["slurm"] == {"job_id": JOB, "step": None, "task": None, "uid": want_uid,
                            "user": _user(want_uid)}
    pdir = g.dirs[hier.key("pids")]
    for leaf, (step, task) in leaves.items():
        rec = recs[f"{base}/{leaf}"]
        slurm = rec["container"]["slurm"]
        assert (slurm["job_id"], slurm["step"], slurm["task"], slurm["uid"]) == (JOB, step, task, want_uid)
        assert rec["container"]["id"] == str(JOB)
        # figures from the kernel's files of that very folder
        assert rec["pids"]["processes"] == 1
        leaf_dir = os.path.join(pdir, leaf)
        assert [int(x) for x in R.read(os.path.join(leaf_dir, "cgroup.procs")).split()] == [pids[leaf]]
        if os.path.exists(os.path.join(leaf_dir, "pids.current")):
            assert rec["pids"]["current"] == int(R.read(os.path.join(leaf_dir, "pids.current"))) == 1
    # the job's figures are its whole subtree's: every task's process
    job_dir = os.path.join(pdir, os.path.relpath(job_path, base))
    if os.path.exists(os.path.join(job_dir, "pids.current")):
        assert recs[job_path]["pids"]["current"] == int(R.read(os.path.join(job_dir, "pids.current"))) == len(leaves)

    # by default: the job, not its steps and tasks
    shown = run_cgstat("once", "--window", "0")
    slurm = [r["cgroup"] for r in shown if r.get("type") == "cgroup" and g.name in r["cgroup"]
             and (r.get("container") or {}).get("runtime") == "slurm"]
    assert slurm == [job_path]
