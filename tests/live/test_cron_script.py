"""bin/cgstat-cron refuses a state folder owned by another user (root: chown)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.test_cron_script import STUB_OK, env_for, make_stub, one_line, run, state_file, stub_ran


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_folder_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    env = env_for(tmp_path, make_stub(tmp_path, STUB_OK))
    folder = state_file(tmp_path).parent
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    proc = run(env)
    assert proc.returncode == 1
    assert "owned by uid 65534" in one_line(proc.stderr)
    assert not stub_ran(tmp_path)

