"""Every kept interesting input (tests/corpus/<file>/<case>) through the whole sampler."""

import io
import os

import orjson
import pytest

from cgstat.diagnostics import Warner
from cgstat.pipeline.sampler import Sampler
from tests.helpers.contract import ROOT, roundtrip, validate
from tests.helpers.synth import v2_cgroup, v2_host

CORPUS = os.path.join(ROOT, "tests", "corpus")
CASES = sorted((f, c) for f in os.listdir(CORPUS) if os.path.isdir(os.path.join(CORPUS, f))
               for c in os.listdir(os.path.join(CORPUS, f)))


@pytest.mark.parametrize("fname,case", CASES, ids=["/".join(c) for c in CASES])
def test_corpus_case(tmp_path, fname, case):
    with open(os.path.join(CORPUS, fname, case), "rb") as f:
        content = f.read()
    root = str(tmp_path)
    v2_host(root)
    v2_cgroup(root, "/x", {fname: content})
    agent = Sampler(root, all=True, warner=Warner(io.StringIO()))
    (rec,) = [r for r in map(orjson.loads, roundtrip(agent.tick())) if r["cgroup"] == "/x"]
    validate(rec)
    assert rec["pids"]["limit"] == 50 or fname == "pids.max"  # other files untouched
    if fname != "cpu.stat":
        assert rec["cpu"]["usage_seconds_total"] == 2.0
