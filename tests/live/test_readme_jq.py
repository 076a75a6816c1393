"""The README's jq examples as a newcomer runs them: every command of its ```sh blocks that
pipes into jq, run by bash with Debian's /usr/bin/jq (1.6) and `cgstat` on PATH, prints at
least one line on this host. A host like CI has no containers of its own, so the test
starts the one workload the quota example looks for: two CPU burners in a group of its
own under a half-core quota (the examples take --all, so a plain cgroup counts)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys

import pytest

from tests.helpers import realcg as R

pytestmark = [pytest.mark.realcg]
JQ = "/usr/bin/jq"
BURN = [sys.executable, "-c", "while True: pass"]


def jq_commands(text: str) -> list:
    """The commands of the ```sh blocks that pipe into jq (a command goes on over the
    indented lines after it)."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        current = None
        for line in block.splitlines():
            if current is not None and line[:1] in (" ", "\t"):
                current += "\n" + line
                continue
            if current is not None:
                out.append(current)
            current = None if not line.strip() or line.lstrip().startswith("#") else line
        if current is not None:
            out.append(current)
    return [c for c in out if re.search(r"\|\s*jq\b", c)]


def test_the_readme_has_jq_examples_that_finish():
    with open(os.path.join(R.REPO, "README.md")) as f:
        commands = jq_commands(f.read())
    assert len(commands) >= 2
    for c in commands:  # each ends by itself: a one-shot, or a stream with a count
        assert "cgstat once" in c or re.search(r"cgstat stream .*--count \d+", c), c


@pytest.mark.skipif(not os.access(JQ, os.X_OK), reason="Debian's jq is not installed (apt-get install jq)")
def test_every_readme_jq_example_prints_something(realcg_env, tmp_path):
    with open(os.path.join(R.REPO, "README.md")) as f:
        commands = jq_commands(f.read())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "cgstat"
    wrapper.write_text('#!/bin/sh\nexec %s -m cgstat "$@"\n' % sys.executable)
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": "%s:/usr/bin:/bin" % bindir, "PYTHONPATH": R.REPO, "HOME": str(tmp_path)}
    g = R.TestGroup(realcg_env, name=R.PREFIX + "readme-jq")
    try:
        g.set_cpu_quota(50000)
        burners = [g.start(BURN, stdout=subprocess.DEVNULL) for _ in range(2)]
        for command in commands:
            proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], env=env, capture_output=True,
                                  timeout=120, cwd=str(tmp_path))
            lines = proc.stdout.decode().splitlines()
            assert proc.returncode == 0 and lines, (command, proc.stderr.decode()[-2000:])
            assert all(line.startswith("{") for line in lines), lines[:3]
        for b in burners:
            b.kill()
    finally:
        g.destroy()
