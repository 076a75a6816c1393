"""The series budget (cgstat/outputs/prometheus/budget.py): at 1,000 synthetic cgroups with
--max-series 10000 the endpoint holds at most 10,000 series, each family's sum is the
unfolded endpoint's (plus, for counters, what _other carries for cgroups that left it),
no counter goes down across 20 scrapes while cgroups come and go, promtool finds nothing;
metric groups turned off leave out exactly their families. prometheus_client's parser
reads the endpoints (the independent reference)."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import urllib.request
from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cgstat.contract import fields
from cgstat.outputs.prometheus import exposition as prom
from cgstat.outputs.prometheus.budget import OTHER, SeriesBudget, groups_off
from cgstat.outputs.prometheus.exporter import Exporter
from cgstat.pipeline.sampler import Sampler
from cgstat.diagnostics import Warner
from tests.helpers import synth

CGROUPS = 1000
MAX_SERIES = 10000
SCRAPES = 20
KIND = {f.name: f.kind for f in fields.FAMILIES}
# what is not a sum: identities (info, value 1), a time, the exporter's own (each its own)
NOT_SUMMED = ({f.name for f in fields.FAMILIES if f.kind == "info" or f.scope == "self"}
              | {"container_last_seen"})
PROMTOOL = shutil.which("promtool")


def _counters(usage_usec):
    cpu = ("usage_usec %d\nuser_usec %d\nsystem_usec %d\nnr_periods 100\nnr_throttled 10\nthrottled_usec 250000\n"
           % (usage_usec, usage_usec // 2, usage_usec // 2))
    io_stat = "254:0 rbytes=%d wbytes=16777216 rios=8 wios=16 dbytes=0 dios=0\n" % (usage_usec * 4)
    return {"cpu.stat": cpu, "io.stat": io_stat}


def _folder(root, i):
    return os.path.join(root, "sys/fs/cgroup/system.slice/docker-%064x.scope" % (i + 1))


def _busier(root, i, usage_usec):
    for name, text in _counters(usage_usec).items():
        synth.write(os.path.join(_folder(root, i), name), text)


def _cgroup(root, i, usage_usec):
    cid = "%064x" % (i + 1)
    synth.v2_cgroup(root, "/system.slice/docker-%s.scope" % cid, _counters(usage_usec))
    folder = os.path.join(root, "var/lib/docker/containers", cid)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.v2.json"), "w") as f:
        json.dump({"ID": cid, "Name": "/job-%d" % i, "Config": {"Image": "pytorch/pytorch:2.3.0", "Labels": {}}}, f)


def _remove(root, i):
    cid = "%064x" % (i + 1)
    shutil.rmtree(_folder(root, i))
    shutil.rmtree(os.path.join(root, "var/lib/docker/containers", cid))


def _get(exporter):
    host, port = exporter.server.address
    with urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=30) as r:
        return r.read().decode()


def _parse(text):
    """{(sample name, labels): value}, through prometheus_client's parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _other_only(text):
    """The exposition's headers and _other's samples."""
    return "".join(line + "\n" for line in text.splitlines()
                   if line.startswith("#") or 'id="%s"' % OTHER in line)


def _counters_split(text):
    """{(name, labels text): value} of the counters, by splitting each line (no escapes in
    these labels' values: synthetic names)."""
    counters = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        series, value = line.rsplit("} ", 1) if "} " in line else line.split(" ", 1)
        name = series.split("{", 1)[0]
        if KIND.get(name) == "counter":
            counters[(name, series)] = float(value.split(" ")[0])
    return counters


def _sums(samples):
    sums = defaultdict(float)
    for (name, _), value in samples.items():
        sums[name] += value
    return sums


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory):
    """20 ticks of a host whose cgroups come and go and whose counters grow, each served
    with the budget and without; per tick: (folded samples, unfolded samples or None,
    carried sums by family, records, folded text)."""
    root = str(tmp_path_factory.mktemp("host"))
    synth.v2_host(root)
    rng = random.Random(30)
    usage = {i: 1000000 + rng.randrange(10 ** 6) for i in range(CGROUPS)}
    for i, u in usage.items():
        _cgroup(root, i, u)
    sampler = Sampler(host_root=root, warner=Warner(io.StringIO()))
    sampler.warm_up()
    said = io.StringIO()
    budget = SeriesBudget(MAX_SERIES)
    folded = Exporter("127.0.0.1:0", Warner(said), budget=budget)
    plain = Exporter("127.0.0.1:0", Warner(io.StringIO()))
    next_id = CGROUPS
    out = []
    try:
        for tick in range(SCRAPES):
            if tick:
                # 10 cgroups gone, 10 new ones (busier than most), 30 busier than they were
                for i in rng.sample(sorted(usage), 10):
                    _remove(root, i)
                    del usage[i]
                for _ in range(10):
                    usage[next_id] = 3000000 + rng.randrange(10 ** 6)
                    _cgroup(root, next_id, usage[next_id])
                    next_id += 1
                for i in rng.sample(sorted(usage), 30):
                    usage[i] += rng.randrange(10 ** 6)
                    _busier(root, i, usage[i])
            records = sampler.tick()
            folded.publish(records, 0.01)
            plain.publish(records, 0.01)
            carried = defaultdict(float)
            for (family, _), value in budget.offsets.items():
                carried[fields.FAMILIES[family].name] += value
            text = _get(folded)
            # both endpoints through the reference parser at three ticks (it takes ~0.1 ms a
            # series), _other's series at every one, every counter by a plain split
            if tick in (0, SCRAPES // 2, SCRAPES - 1):
                samples, full = _parse(text), _parse(_get(plain))
            else:
                samples, full = _parse(_other_only(text)), None
            out.append((samples, full, dict(carried), len(records), text))
    finally:
        folded.close()
        plain.close()
    return out, said.getvalue()


def test_the_endpoint_holds_at_most_max_series_and_folds_into_other(scrapes):
    ticks, said = scrapes
    for samples, full, _, records, text in ticks:
        assert records >= CGROUPS
        if full is not None:
            assert len(full) > 4 * MAX_SERIES  # the unfolded endpoint is 4x over
            assert len(samples) <= MAX_SERIES
        assert sum(1 for line in text.splitlines() if line and not line.startswith("#")) <= MAX_SERIES
        assert any(dict(labels).get("id") == OTHER for _, labels in samples)
        folded = [line for line in text.splitlines() if line.startswith("cgstat_folded_cgroups ")]
        assert len(folded) == 1 and 500 < int(folded[0].split()[1]) < CGROUPS
    assert said.count("--max-series 10000") == 1  # said once on stderr


def test_every_family_sums_to_the_unfolded_endpoints(scrapes):
    ticks, _ = scrapes
    compared = 0
    for tick, (samples, full, carried, _, _) in enumerate(ticks):
        if full is None:
            continue
        if tick == 0:
            assert not carried  # nothing has left _other yet: the sums are equal
        got, want = _sums(samples), _sums(full)
        assert set(got) - NOT_SUMMED == set(want) - NOT_SUMMED
        for name in set(want) - NOT_SUMMED:
            expected = want[name] + carried.get(name, 0.0)
            assert got[name] == pytest.approx(expected, rel=1e-9), name
        compared += 1
    assert compared == 3
    assert ticks[-1][2]  # cgroups did leave _other: counters carried


def test_each_of_others_series_is_the_sum_of_the_folded_cgroups_same_label_set(scrapes):
    """At the first tick (nothing carried yet), label set by label set: _other's series (a
    device's, a memory event's, ...) is the sum of the unfolded endpoint's series of the
    cgroups that have none of their own, whose labels but the workload's are the same."""
    ticks, _ = scrapes
    samples, full, carried, _, _ = ticks[0]
    assert not carried
    own = {dict(labels)["id"] for _, labels in samples if "id" in dict(labels)}
    workload = {"id", "name", "image"}  # the synthetic containers' labels (no container labels)
    want = defaultdict(float)
    for (name, labels), value in full.items():
        mine = dict(labels)
        if name in NOT_SUMMED or "id" not in mine or mine["id"] in own:
            continue
        want[(name, tuple(sorted((k, v) for k, v in mine.items() if k not in workload)))] += value
    got = {(name, tuple(sorted((k, v) for k, v in dict(labels).items() if k not in ("id", "name")))): value
           for (name, labels), value in samples.items()
           if dict(labels).get("id") == OTHER and name not in NOT_SUMMED}
    assert len(want) > 30 and set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


def test_no_counter_goes_down_across_the_scrapes(scrapes):
    ticks, _ = scrapes
    for reader in ("reference", "split"):
        last = {}
        checked = 0
        for samples, _, _, _, text in ticks:
            counters = ({k: v for k, v in samples.items() if KIND.get(k[0]) == "counter"} if reader == "reference"
                        else _counters_split(text))
            for key, value in counters.items():
                if key in last:
                    assert value >= last[key], key
                    checked += 1
                last[key] = value
        assert checked > (100 if reader == "reference" else 50000)
        assert any(OTHER in str(key) for key in last)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_finds_nothing(scrapes):
    ticks, _ = scrapes
    text = ticks[-1][4]
    run = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True, timeout=120)
    assert run.returncode == 0 and not run.stdout.strip() and not run.stderr.strip(), run.stdout + run.stderr


def _record(path, cpu):
    return {"schema": 1, "type": "cgroup", "ts": "2026-11-29T20:10:12.807Z", "cgroup": path,
            "cpu": {"usage_seconds_total": cpu, "percent": cpu}, "memory": {"working_set_bytes": 10},
            "pids": {"current": 3}, "errors": []}


def test_a_cgroup_leaving_other_takes_its_counter_and_other_stays_monotone():
    budget = SeriesBudget(15)  # 5 series of its own, room for one cgroup's 5 and _other's

    def other(*records):
        text = prom.render(list(records), fold=budget.tick()).decode()
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        mine = {s.labels["id"] for s in samples if s.name == "container_cpu_usage_seconds_total"}
        return {s.name: s.value for s in samples if s.labels.get("id") == OTHER}, mine

    first, own = other(_record("/a", 5.0), _record("/b", 1.0), _record("/c", 2.0))
    assert own == {"/a", OTHER} and first["container_cpu_usage_seconds_total"] == 3.0  # the least used
    second, own = other(_record("/a", 6.0), _record("/c", 2.5))  # /b gone: its 1.0 carried
    assert own == {"/a", OTHER} and second["container_cpu_usage_seconds_total"] == 3.5
    third, own = other(_record("/c", 3.0))  # /a gone: /c has its own series again, its 2.5 carried
    assert own == {"/c", OTHER} and third["container_cpu_usage_seconds_total"] == 3.5
    assert "container_memory_working_set_bytes" not in third  # a gauge is not carried
    fourth, own = other(_record("/c", 3.0), _record("/d", 0.5), _record("/e", 0.25))
    assert fourth["container_cpu_usage_seconds_total"] == 4.25
    assert fourth["container_memory_working_set_bytes"] == 20


def test_the_same_cgroups_folded_again_carry_nothing_until_a_counter_goes_down():
    budget = SeriesBudget(15)

    def other(*records):
        text = prom.render(list(records), fold=budget.tick()).decode()
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        return {s.name: s.value for s in samples if s.labels.get("id") == OTHER}

    three = (_record("/a", 5.0), _record("/b", 1.0), _record("/c", 2.0))
    assert other(*three)["container_cpu_usage_seconds_total"] == 3.0
    assert other(*three)["container_cpu_usage_seconds_total"] == 3.0  # nothing left, nothing carried
    assert not budget.offsets
    # /c made again (its counter from 0.5): the 2.0 it had counted stays counted
    again = other(_record("/a", 5.0), _record("/b", 1.0), _record("/c", 0.5))
    assert again["container_cpu_usage_seconds_total"] == 3.5
    assert other(_record("/a", 5.0), _record("/b", 1.5), _record("/c", 0.5))["container_cpu_usage_seconds_total"] == 4.0


def test_a_gpu_record_between_cgroups_keeps_its_series_and_the_fold_its_sums():
    gpu = {"schema": 1, "type": "gpu", "ts": "2026-11-29T20:10:12.807Z", "host": "node1",
           "gpu": {"index": 0, "uuid": "GPU-1", "name": "NVIDIA H100", "utilization_percent": 50,
                   "memory_used_bytes": 1 << 30, "memory_total_bytes": 80 << 30}}
    records = [_record("/a", 5.0), gpu, _record("/b", 1.0), gpu, _record("/c", 2.0), _record("/d", 0.5)]
    plain = prom.render(records).decode()
    lines = [line for line in plain.splitlines() if line and not line.startswith("#")]
    text = prom.render(records, fold=SeriesBudget(len(lines) - 4).tick()).decode()
    gpu_lines = [line for line in plain.splitlines() if 'uuid="GPU-1"' in line]
    assert gpu_lines and gpu_lines == [line for line in text.splitlines() if 'uuid="GPU-1"' in line]
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    cpu = {s.labels["id"]: s.value for s in samples if s.name == "container_cpu_usage_seconds_total"}
    assert set(cpu) == {"/a", "/c", OTHER} and cpu[OTHER] == 1.5  # /b and /d, the least used


def test_groups_turned_off_leave_out_exactly_their_families():
    records = [_record("/a", 5.0)]
    off = groups_off(None, ["cpu", "process"])
    text = prom.render(records, fold=SeriesBudget(0, off).tick()).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "container_memory_working_set_bytes" in names
    assert "container_cpu_usage_seconds" not in names and "container_threads" not in names
    only = groups_off(["memory"], None)
    assert only == frozenset(fields.METRIC_GROUPS) - {"memory"}
    with pytest.raises(ValueError, match="unknown metric group 'disk_io'"):
        groups_off(["disk_io"], None)


def test_every_family_has_a_known_group():
    assert {f.group for f in fields.FAMILIES} == set(fields.METRIC_GROUPS)


def test_far_below_the_budget_a_render_notes_no_spans_and_past_it_is_made_again():
    budget = SeriesBudget(15)
    one = [_record("/a", 5.0)]
    first = budget.tick()
    assert first.spans  # the first tick: nothing known yet
    text = prom.render(one, fold=first)
    second = budget.tick()
    assert not second.spans  # 11 series of 15
    assert prom.render(one, fold=second) == text
    third = budget.tick()
    three = [_record("/a", 5.0), _record("/b", 1.0), _record("/c", 2.0)]
    samples = [s for f in text_string_to_metric_families(prom.render(three, fold=third).decode()) for s in f.samples]
    assert third.spans and third.count == 2
    assert {s.labels["id"]: s.value for s in samples if s.name == "container_cpu_usage_seconds_total"} == {
        "/a": 5.0, OTHER: 3.0}


@pytest.mark.parametrize("args, said", [
    (["--metrics", "cpu,nope"], "unknown metric group 'nope'"),
    (["--disable-metrics", "disk_io"], "unknown metric group 'disk_io'"),
    (["--max-series", "-1"], "--max-series"),
])
def test_a_bad_group_or_budget_is_a_usage_error(args, said):
    import sys

    run = subprocess.run([sys.executable, "-m", "cgstat", "serve", "--count", "1", *args],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and said in run.stderr, run.stderr
