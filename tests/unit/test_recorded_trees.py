"""End to end over recorded trees: `cgstat once --host-root T0 --state F --all`, then T1.

Every counter of every record equals what the recorded files say (independent oracle in
contract.py), rates are null or the counter deltas over interval_s, a cgroup gone by T1
is not reported, a recreated one has null rates, and the whole output equals the golden
file (a missing one fails; CGSTAT_REGEN_GOLDEN=1 writes them on purpose).
"""

import json
import os

import pytest

from tests.helpers.contract import ROOT, check_against_files, check_rates, run_cgstat, validate

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TREES = sorted(d for d in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, d, "t1")))


def _pair(tmp_path, name):
    state = str(tmp_path / "state")
    t0 = os.path.join(FIXTURES, name, "t0")
    t1 = os.path.join(FIXTURES, name, "t1")
    first, _, _ = run_cgstat("once", "--host-root", t0, "--state", state, "--all")
    second, _, _ = run_cgstat("once", "--host-root", t1, "--state", state, "--all")
    # the records (the events two runs judge are tests/unit/test_events_runs.py's)
    return t0, t1, first, [r for r in second if r.get("type") != "event"]


@pytest.mark.parametrize("name", TREES)
def test_counters_match_files_and_rates_match_deltas(tmp_path, name):
    t0, t1, first, second = _pair(tmp_path, name)
    assert first and second
    for root, records in ((t0, first), (t1, second)):
        checked = 0
        for rec in records:
            validate(rec)
            checked += check_against_files(root, rec)
        assert checked >= len(records)  # the oracle looked at files, not at nothing
    assert all(r["interval_s"] is None for r in first)
    by_path0 = {r["cgroup"]: r for r in first}
    with_rates = 0
    for rec in second:
        prev = by_path0.get(rec["cgroup"])
        if prev is None:
            assert rec["interval_s"] is None  # new at t1: no rate
            continue
        with_rates += check_rates(prev, rec)
    assert with_rates >= len(second) // 2
    # a cgroup removed before t1 is not reported
    gone = set(by_path0) - {r["cgroup"] for r in second}
    for path in gone:
        assert not os.path.isdir(os.path.join(t1, "sys/fs/cgroup", path.lstrip("/")))


@pytest.mark.parametrize("name", TREES)
def test_golden_output(tmp_path, name):
    _, _, first, second = _pair(tmp_path, name)
    got = "".join(json.dumps(r, sort_keys=True) + "\n" for r in first + second)
    golden = os.path.join(FIXTURES, name, "golden.jsonl")
    if os.environ.get("CGSTAT_REGEN_GOLDEN"):
        with open(golden, "w") as f:
            f.write(got)
    elif not os.path.exists(golden):
        # a missing golden is a failure everywhere: writing it here would compare the
        # output with itself
        pytest.fail(f"{golden} missing (CGSTAT_REGEN_GOLDEN=1 writes it on purpose)")
    with open(golden) as f:
        want = f.read()
    assert got == want, "output differs from golden.jsonl (CGSTAT_REGEN_GOLDEN=1 to accept)"
