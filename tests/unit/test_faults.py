"""Bad input everywhere it is read: every file kind corrupted in several ways.

The affected fields are null, `errors` names the file and the reason, every other value is
untouched, the record stays valid against the schema, and nothing escapes the sampler.
"""

import io

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgstat.kernel import parse
from cgstat.diagnostics import Warner
from cgstat.pipeline.sampler import Sampler
from tests.helpers.contract import roundtrip, validate
from tests.helpers.synth import V2_FILES, v2_cgroup, v2_host

CORRUPTIONS = {
    "empty": "",
    "truncated": None,  # first half of the good content, cut mid-line
    "non_numeric": "abc\n",
    "negative": "-5\n",
    "u64_max": f"{2**64 - 1}\n",
    "huge": f"{2**80}\n",
    "binary": b"\x00\x01\x02\xff\xfe\n",
    "non_utf8": b"\xc3\x28 12\n",
    "duplicate_keys": None,  # the good content twice
    "unknown_keys": None,  # good content plus an unknown key with a bad value
    "missing_keys": "nothing_we_need 1\n",
}

def _bad(name, kind):
    good = V2_FILES[name]
    if kind == "truncated":
        return good[: max(1, len(good) // 2 - 1)] if "\n" in good[:-1] else good[:1] + "x"
    if kind == "duplicate_keys":
        return good + good
    if kind == "unknown_keys":
        return good + "brand_new_key 12 34\n"
    return CORRUPTIONS[kind]


def _record(root, path="/x"):
    agent = Sampler(root, match=None, all=True, warner=Warner(io.StringIO()))
    lines = roundtrip(agent.tick())
    records = [orjson.loads(line) for line in lines]
    return {r["cgroup"]: r for r in records}[path]


@pytest.fixture(scope="module")
def good_record(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("good"))
    v2_host(root)
    v2_cgroup(root, "/x")
    return _record(root)


# flat keyed files: record field -> the key it comes from
KEYED = {
    "cpu.stat": {("cpu", "usage_seconds_total"): "usage_usec", ("cpu", "user_seconds_total"): "user_usec",
                 ("cpu", "system_seconds_total"): "system_usec", ("cpu", "periods_total"): "nr_periods",
                 ("cpu", "throttled_periods_total"): "nr_throttled",
                 ("cpu", "throttled_seconds_total"): "throttled_usec"},
    "memory.stat": {("memory", "anon_bytes"): "anon", ("memory", "file_bytes"): "file",
                    ("memory", "inactive_file_bytes"): "inactive_file",
                    ("memory", "working_set_bytes"): "inactive_file", ("memory", "shmem_bytes"): "shmem"},
    "memory.events": {("memory", "oom_kills_total"): "oom_kill"},
}
# Fields a file also feeds where a missing key is no error (keys some kernels lack) or that
# are an object of its counts: a bad file may null them, silently.
ALSO_FEEDS = {"memory.events": [("memory", "events")],
              "memory.stat": [("memory", k) for k in ("pgscan_total", "pgsteal_total", "pgfault_total", "pgmajfault_total",
                                                      "workingset_refault_anon_total",
                                                      "workingset_refault_file_total", "dirty_bytes",
                                                      "writeback_bytes")]}
WHOLE = {  # files read as one value: any bad content nulls these fields
    "cpu.max": [("cpu", "limit_cores"), ("cpu", "quota_us"), ("cpu", "period_us")],
    "memory.current": [("memory", "usage_bytes"), ("memory", "working_set_bytes")],
    "memory.max": [("memory", "limit_bytes")],
    "io.stat": [("io", "read_bytes_total"), ("io", "write_bytes_total"), ("io", "devices")],
    "pids.current": [("pids", "current")],
    "pids.max": [("pids", "limit")],
    "cpu.pressure": [("pressure", "cpu")],
}


def _oracle_keyed(content):
    """Independent reading of a flat keyed file: key -> int, or None when unusable."""
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError:
            return None
    out = {}
    for line in content.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] in out:
            return None  # duplicate key: the whole file is suspect
        ok = len(parts) == 2 and parts[1].isascii() and parts[1].isdigit() and int(parts[1]) < 2**64
        out[parts[0]] = int(parts[1]) if ok else None
    return out


def _whole_ok(name, content):
    """Does the (possibly corrupted) content of a single-value file still parse?"""
    try:
        text = content.decode("utf-8") if isinstance(content, bytes) else content
        {"cpu.max": parse.parse_cpu_max, "memory.current": parse.parse_uint,
         "memory.max": parse.parse_max_or_uint, "io.stat": parse.parse_io_stat,
         "pids.current": parse.parse_uint, "pids.max": parse.parse_max_or_uint,
         "cpu.pressure": parse.parse_pressure}[name](text)
        return True
    except (ValueError, UnicodeDecodeError):
        return False


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
@pytest.mark.parametrize("name", sorted(set(KEYED) | set(WHOLE)))
def test_corrupt_file(tmp_path, good_record, name, kind):
    root = str(tmp_path)
    v2_host(root)
    content = _bad(name, kind)
    v2_cgroup(root, "/x", {name: content})
    rec = _record(root)
    validate(rec)
    named = {e["source"] for e in rec["errors"] if e["error"] in ("malformed", "missing")}
    touched = set()
    if name in KEYED:
        table = _oracle_keyed(content)
        for (section, key), source_key in KEYED[name].items():
            touched.add((section, key))
            good = table is not None and table.get(source_key) is not None
            if good and table[source_key] == _oracle_keyed(V2_FILES[name])[source_key]:
                assert rec[section][key] == good_record[section][key], (section, key)
            elif not good:
                assert rec[section][key] is None, (section, key)
                assert name in named, rec["errors"]
    else:
        ok = _whole_ok(name, content)
        for section, key in WHOLE[name]:
            touched.add((section, key))
            if not ok:
                assert rec[section][key] is None, (section, key)
        if not ok:
            assert name in named, rec["errors"]
    touched.update(ALSO_FEEDS.get(name, ()))
    # every field the bad file does not feed is untouched
    for section in ("cpu", "memory", "pids"):
        for key, value in good_record[section].items():
            if (section, key) in touched or key in ("percent", "throttled_percent", "oom_events_total"):
                continue
            assert rec[section][key] == value, (section, key)


def test_missing_controller_files_are_null_with_reason(tmp_path):
    root = str(tmp_path)
    v2_host(root)
    v2_cgroup(root, "/x", {"memory.current": None, "memory.max": None, "memory.stat": None,
                           "memory.events": None, "memory.swap.current": None, "io.stat": None})
    rec = _record(root)
    validate(rec)
    assert rec["memory"]["usage_bytes"] is None and rec["io"]["devices"] is None
    assert {("memory", "unavailable"), ("io", "unavailable")} <= {(e["source"], e["error"]) for e in rec["errors"]}
    assert rec["cpu"]["usage_seconds_total"] == 2.0 and rec["pids"]["current"] == 7


def test_good_synthetic_record_values(good_record):
    r = good_record
    assert r["cpu"]["usage_seconds_total"] == 2.0 and r["cpu"]["limit_cores"] == 0.5
    assert r["memory"]["working_set_bytes"] == 104857600 - 20971520
    assert r["memory"]["percent"] == pytest.approx((104857600 - 20971520) / 209715200 * 100)
    assert r["io"]["devices"][0]["name"] == "vda"
    assert r["errors"] == []


TEXT = st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
PARSERS = [parse.parse_uint, parse.parse_int, parse.parse_max_or_uint, parse.parse_cpu_max,
           parse.parse_flat_keyed, parse.parse_nested_keyed, parse.parse_io_stat, parse.parse_pressure,
           parse.parse_blkio_v1, parse.parse_pid_list, parse.parse_proc_cgroup, parse.parse_meminfo,
           parse.parse_cpu_list, parse.parse_mountinfo]


@pytest.mark.parametrize("fn", PARSERS, ids=lambda f: f.__name__)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT)
def test_parsers_only_raise_value_error(fn, text):
    try:
        fn(text)
    except ValueError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.dictionaries(st.sampled_from(sorted(V2_FILES)),
                               st.one_of(st.binary(max_size=80), st.text(max_size=80)), max_size=4))
def test_random_file_contents_never_escape_the_sampler(tmp_path_factory, content):
    root = str(tmp_path_factory.mktemp("fuzz"))
    v2_host(root)
    v2_cgroup(root, "/x", content)
    rec = _record(root)
    validate(rec)  # whatever the bytes, the record keeps the contract
    assert rec["pids"]["current"] == (7 if "pids.current" not in content else rec["pids"]["current"])
