"""What a run shows is said at the start and again when it changes: on a synthetic v2 tree
whose workloads come and go between ticks, as a machine's first container starts and its
last one goes."""

import io
import shutil

from cgstat.diagnostics import Warner
from cgstat.pipeline.sampler import Sampler
from tests.helpers.synth import v2_cgroup, v2_host

FALLBACK = "the root cgroup and its direct children, since no containers or systemd units were found"


def _sampler(root, **kw):
    said = io.StringIO()
    return Sampler(str(root), warner=Warner(said), follow=False, gpu=False, **kw), said


def _lines(said):
    lines = said.getvalue().splitlines()
    said.seek(0)
    said.truncate()
    return [line for line in lines if "showing" in line]


def test_a_change_of_what_is_shown_is_said_once_when_it_happens(tmp_path):
    v2_host(str(tmp_path))
    v2_cgroup(str(tmp_path), "/system.slice")
    v2_cgroup(str(tmp_path), "/user.slice")
    sampler, said = _sampler(tmp_path)
    paths = [r["cgroup"] for r in sampler.tick()]
    assert paths == ["/", "/system.slice", "/user.slice"]
    assert _lines(said) == [f"cgstat: v2 cgroup layout; showing {FALLBACK} (--all for every cgroup)"]
    sampler.tick()
    assert _lines(said) == []  # nothing changed, nothing said

    unit = v2_cgroup(str(tmp_path), "/system.slice/job.service")
    assert [r["cgroup"] for r in sampler.tick()] == ["/system.slice/job.service"]
    assert _lines(said) == ["cgstat: now showing 1 systemd service/scope "
                            "(--all for every cgroup)"]
    v2_cgroup(str(tmp_path), "/system.slice/other.service")
    assert len(sampler.tick()) == 2
    assert _lines(said) == []  # more of the same kind: not a change of what is shown

    shutil.rmtree(unit)
    shutil.rmtree(str(tmp_path / "sys/fs/cgroup/system.slice/other.service"))
    assert [r["cgroup"] for r in sampler.tick()] == paths
    assert _lines(said) == [f"cgstat: now showing {FALLBACK} (--all for every cgroup)"]
    sampler.close()


def test_a_match_that_starts_or_stops_matching_is_said(tmp_path):
    v2_host(str(tmp_path))
    v2_cgroup(str(tmp_path), "/system.slice")
    sampler, said = _sampler(tmp_path, match="train")
    assert sampler.tick() == []
    (line,) = _lines(said)
    assert line == ("cgstat: v2 cgroup layout; showing nothing: no cgroup path matches 'train'; "
                    "there are 2, such as '/', '/system.slice' (--all shows every one)")
    job = v2_cgroup(str(tmp_path), "/system.slice/train.scope")
    assert [r["cgroup"] for r in sampler.tick()] == ["/system.slice/train.scope"]
    assert _lines(said) == ["cgstat: now showing cgroups whose path matches 'train'"]
    shutil.rmtree(job)
    assert sampler.tick() == []
    assert _lines(said) == ["cgstat: now showing nothing: no cgroup path matches 'train'; "
                            "there are 2, such as '/', '/system.slice' (--all shows every one)"]
    sampler.close()
