"""The Python API on this host's own cgroups."""

import io
import os

import pytest

import cgstat


@pytest.mark.skipif(not os.path.isdir("/sys/fs/cgroup/cpu") and not os.path.isfile("/sys/fs/cgroup/cgroup.controllers"),
                    reason="no live cgroup filesystem")
def test_follow_false_watches_nothing_and_once_and_pid_ask_for_it(monkeypatch):
    from cgstat import cli
    from cgstat.app import once as once_mod
    from cgstat.app import pid as pid_mod
    from cgstat.app import stream as stream_mod
    from cgstat.pipeline import sampler as sampler_mod
    from cgstat.pipeline.diagnostics import Warner

    followed = cgstat.Sampler(match="^/$", warner=Warner(io.StringIO()))
    one_shot = cgstat.Sampler(match="^/$", warner=Warner(io.StringIO()), follow=False)
    try:
        followed.tick()
        one_shot.tick()
        assert followed.discoverer.following != []
        assert one_shot.discoverer.following == []
    finally:
        followed.close()
        one_shot.close()

    asked = []
    real = sampler_mod.Sampler

    def spy(*args, **kwargs):
        asked.append(kwargs.get("follow", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(sampler_mod, "Sampler", spy)
    monkeypatch.setattr(once_mod, "run_once", lambda *a, **k: 0)
    monkeypatch.setattr(pid_mod, "run_pid", lambda *a, **k: 0)
    monkeypatch.setattr(stream_mod, "run_stream", lambda *a, **k: 0)
    for argv in (["once", "--window", "0"], ["pid", "1"], ["stream", "--count", "1"]):
        with pytest.raises(SystemExit):
            cli.main(["--match", "^/$"] + argv)
    assert asked == [False, False, True]

