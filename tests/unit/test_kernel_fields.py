"""The memory, CPU, pids and IO fields beyond the basics (peaks, memory events, reclaim, swap,
weights, cpusets, IO limits): the parsers table by table, and every field of every record
of every recorded tree against its file, read here independently (v2: the new v2-fields
recording has them all; v1 and hybrid: the older recordings). A file the kernel doesn't
have gives null and no problem in `errors`.
"""

import os

import pytest

from cgstat.kernel import parse
from tests.helpers.contract import ROOT, run_cgstat

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TREES = sorted(d for d in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, d, "t1")))

# Every file this issue added a reader for: none of them may show in a record's errors
# when it is absent (an absent file is not an error).
NEW_FILES = ("memory.peak", "memory.swap.peak", "memory.high", "memory.low", "memory.min",
             "memory.swap.max", "memory.zswap.current", "memory.events.local", "memory.swap.events",
             "memory.oom.group", "memory.max_usage_in_bytes", "memory.failcnt",
             "memory.soft_limit_in_bytes", "cpu.weight", "cpu.max.burst", "cpu.shares",
             "cpu.cfs_burst_us", "cpuset.cpus.effective", "cpuset.mems.effective", "io.max",
             "pids.peak", "pids.events", "blkio.throttle.read_bps_device",
             "blkio.throttle.write_bps_device", "blkio.throttle.read_iops_device",
             "blkio.throttle.write_iops_device")


# -- parsers ------------------------------------------------------------------------------

@pytest.mark.parametrize("shares,weight", [
    (1024, 100),  # the defaults meet
    (2, 1),  # v1 minimum -> v2 minimum (0.195 rounds to 0, clamped to 1)
    (512, 50),
    (100, 10),  # 9.77 rounds to 10
    (1000, 98),  # 97.66
    (10240, 1000),
    (262144, 10000),  # v1 maximum -> v2 maximum (25600 clamped)
    (102400, 10000),
])
def test_shares_to_weight_as_the_kernel_maps_them(shares, weight):
    assert parse.shares_to_weight(shares) == weight


@pytest.mark.parametrize("text,want", [
    ("254:0 rbps=104857600 wbps=52428800 riops=max wiops=max\n",
     {"254:0": {"rbps": 104857600, "wbps": 52428800, "riops": None, "wiops": None}}),
    ("", {}),
    ("8:0 rbps=max wbps=max riops=100 wiops=max\n8:16 rbps=1 wbps=2 riops=3 wiops=4\n",
     {"8:0": {"rbps": None, "wbps": None, "riops": 100, "wiops": None},
      "8:16": {"rbps": 1, "wbps": 2, "riops": 3, "wiops": 4}}),
])
def test_parse_io_max(text, want):
    assert parse.parse_io_max(text) == want


@pytest.mark.parametrize("text", ["sda rbps=1\n", "8:0 rbps\n", "8:0 rbps=x\n", "8:0 rbps=1 rbps=2\n",
                                  "8:0 rbps=1\n8:0 rbps=2\n"])
def test_parse_io_max_rejects(text):
    with pytest.raises(ValueError):
        parse.parse_io_max(text)


@pytest.mark.parametrize("text,want", [
    ("", {}),
    ("8:0 1048576\n", {"8:0": 1048576}),
    ("8:0 1\n259:0 20\n", {"8:0": 1, "259:0": 20}),
])
def test_parse_blkio_device_values(text, want):
    assert parse.parse_blkio_device_values(text) == want


@pytest.mark.parametrize("text", ["8:0\n", "8:0 1 2\n", "x 1\n", "8:0 -1\n", "8:0 1\n8:0 2\n"])
def test_parse_blkio_device_values_rejects(text):
    with pytest.raises(ValueError):
        parse.parse_blkio_device_values(text)


@pytest.mark.parametrize("text,want", [("0-3\n", "0-3"), ("1\n", "1"), ("0-1,4,6-7\n", "0-1,4,6-7"), ("\n", "")])
def test_parse_cpuset_list(text, want):
    assert parse.parse_cpuset_list(text) == want


@pytest.mark.parametrize("text", ["0-\n", "a\n", "0,,1\n", "0 1\n"])
def test_parse_cpuset_list_rejects(text):
    with pytest.raises(ValueError):
        parse.parse_cpuset_list(text)


@pytest.mark.parametrize("text,want", [("0\n", False), ("1\n", True)])
def test_parse_bool01(text, want):
    assert parse.parse_bool01(text) is want


@pytest.mark.parametrize("text", ["2\n", "\n", "yes\n"])
def test_parse_bool01_rejects(text):
    with pytest.raises(ValueError):
        parse.parse_bool01(text)


# -- every recorded tree: each field equals its file ---------------------------------------


def _files(root, hdir, path):
    """name -> the text of that file of the cgroup's folder, None when there is none."""
    folder = os.path.join(root, "sys/fs/cgroup", hdir, path.lstrip("/"))

    def read(name):
        if not os.path.isfile(os.path.join(folder, name)):
            return None
        with open(os.path.join(folder, name)) as f:
            return f.read()
    return read


def _int(text):
    return None if text is None else int(text)


def _limit(text):
    if text is None or text.strip() == "max":
        return None
    value = int(text)
    return None if value >= 2**62 else value


def _kv(text):
    if text is None:
        return None
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def _v2_expected(root, p):
    r = _files(root, "", p)
    stat = _kv(r("memory.stat"))
    events, local, swap_events = _kv(r("memory.events")), _kv(r("memory.events.local")), _kv(r("memory.swap.events"))
    keys = ("low", "high", "max", "oom", "oom_kill", "oom_group_kill")
    folder = os.path.join(root, "sys/fs/cgroup", p.lstrip("/"))
    huge = sorted(n for n in os.listdir(folder) if n.startswith("hugetlb.") and n.endswith(".current")
                  and n.count(".") == 2)
    burst = r("cpu.max.burst")
    memory = None
    if r("memory.current") is not None:
        memory = {
            "peak_bytes": _int(r("memory.peak")),
            "swap_peak_bytes": _int(r("memory.swap.peak")),
            "high_bytes": _limit(r("memory.high")),
            "low_bytes": _limit(r("memory.low")),
            "min_bytes": _limit(r("memory.min")),
            "swap_limit_bytes": _limit(r("memory.swap.max")),
            "zswap_bytes": _int(r("memory.zswap.current")),
            "events": None if events is None else {k: events.get(k) for k in keys},
            "events_local": None if local is None else {k: local.get(k) for k in keys},
            "swap_events": None if swap_events is None else {k: swap_events.get(k) for k in ("high", "max", "fail")},
            "failcnt": None,  # v1 only
            "pgscan_total": stat.get("pgscan"),
            "pgsteal_total": stat.get("pgsteal"),
            "pgfault_total": stat.get("pgfault"),
            "pgmajfault_total": stat.get("pgmajfault"),
            "workingset_refault_anon_total": stat.get("workingset_refault_anon"),
            "workingset_refault_file_total": stat.get("workingset_refault_file"),
            "dirty_bytes": stat.get("file_dirty"),
            "writeback_bytes": stat.get("file_writeback"),
            "hugetlb_bytes": sum(int(r(n)) for n in huge) if huge else None,
            "oom_group": None if r("memory.oom.group") is None else r("memory.oom.group").strip() == "1",
        }
    cpu = {
        "weight": _int(r("cpu.weight")),
        "max_burst_us": _int(burst),
        "cpuset_cpus": None if r("cpuset.cpus.effective") is None else r("cpuset.cpus.effective").strip(),
        "cpuset_mems": None if r("cpuset.mems.effective") is None else r("cpuset.mems.effective").strip(),
    }
    pids = None
    if r("pids.current") is not None:
        ev = _kv(r("pids.events"))
        pids = {"peak": _int(r("pids.peak")), "events_max_total": None if ev is None else ev["max"]}
    limits = None
    if r("io.max") is not None:
        limits = []
        for line in sorted(r("io.max").splitlines(), key=lambda s: tuple(map(int, s.split()[0].split(":")))):
            dev, *items = line.split()
            kv = dict(item.split("=") for item in items)
            limits.append({"device": dev, **{
                name: None if kv[key] == "max" else int(kv[key]) for key, name in (
                    ("rbps", "read_bytes_per_second"), ("wbps", "write_bytes_per_second"),
                    ("riops", "read_ops_per_second"), ("wiops", "write_ops_per_second"))}})
    return memory, cpu, pids, limits


def _v1_expected(root, paths):
    memory = cpu = pids = limits = None
    for name, p in paths.items():
        controllers = name.split(",")
        d = name.replace("name=", "")
        r = _files(root, d, p)
        if "memory" in controllers:
            stat = _kv(r("memory.stat"))
            memory = {
                "peak_bytes": _int(r("memory.max_usage_in_bytes")), "swap_peak_bytes": None,
                "high_bytes": None, "low_bytes": _limit(r("memory.soft_limit_in_bytes")), "min_bytes": None,
                "swap_limit_bytes": None, "zswap_bytes": None, "events": None, "events_local": None,
                "swap_events": None, "failcnt": _int(r("memory.failcnt")), "pgscan_total": None,
                "pgsteal_total": None, "pgfault_total": stat.get("total_pgfault"),
                "pgmajfault_total": stat.get("total_pgmajfault"),
                "workingset_refault_anon_total": stat.get("total_workingset_refault_anon"),
                "workingset_refault_file_total": stat.get("total_workingset_refault_file"),
                "dirty_bytes": stat.get("total_dirty"), "writeback_bytes": stat.get("total_writeback"),
                "hugetlb_bytes": None, "oom_group": None,
            }
        if "cpu" in controllers:
            shares = _int(r("cpu.shares"))
            cpu = {"weight": None if shares is None else max(1, min(10000, round(shares * 100 / 1024))),
                   "max_burst_us": _int(r("cpu.cfs_burst_us")), "cpuset_cpus": None, "cpuset_mems": None}
        if "pids" in controllers and p != "/":
            ev = _kv(r("pids.events"))
            pids = {"peak": _int(r("pids.peak")), "events_max_total": None if ev is None else ev["max"]}
        if "blkio" in controllers:
            files = [r("blkio.throttle.%s_device" % k) for k in ("read_bps", "write_bps", "read_iops", "write_iops")]
            if all(f is not None for f in files):
                tables = [dict((line.split()[0], int(line.split()[1])) for line in f.splitlines() if line.strip())
                              for f in files]
                devs = sorted(set().union(*tables), key=lambda s: tuple(map(int, s.split(":"))))
                limits = [{"device": dev, "read_bytes_per_second": tables[0].get(dev),
                           "write_bytes_per_second": tables[1].get(dev), "read_ops_per_second": tables[2].get(dev),
                           "write_ops_per_second": tables[3].get(dev)} for dev in devs]
    if cpu is None:
        cpu = {"weight": None, "max_burst_us": None, "cpuset_cpus": None, "cpuset_mems": None}
    return memory, cpu, pids, limits


def _records(name):
    out = []
    for snap in ("t0", "t1"):
        root = os.path.join(FIXTURES, name, snap)
        records, _, _ = run_cgstat("once", "--host-root", root, "--all", "--window", "0")
        out.extend((root, r) for r in records if r.get("type") in ("cgroup", "pod"))
    return out


@pytest.mark.parametrize("name", TREES)
def test_every_new_field_equals_its_file(name):
    records = _records(name)
    assert records
    for root, rec in records:
        paths = rec["paths"]
        v2 = "unified" in paths and os.path.exists(os.path.join(root, "sys/fs/cgroup/cgroup.controllers"))
        memory, cpu, pids, limits = _v2_expected(root, paths["unified"]) if v2 else _v1_expected(root, paths)
        where = (name, rec["cgroup"])
        if memory is not None:
            assert {k: rec["memory"][k] for k in memory} == memory, where
        for k, v in cpu.items():
            assert rec["cpu"][k] == v, (where, k)
        if pids is not None:
            assert {k: rec["pids"][k] for k in pids} == pids, where
        got_limits = rec["io"]["limits"]
        if got_limits is not None:
            got_limits = [{k: v for k, v in d.items() if k != "name"} for d in got_limits]
        assert got_limits == limits, where
        noise = [e for e in rec["errors"] if e["source"] in NEW_FILES]
        assert not noise, (where, noise)


def test_v2_fields_recording_has_the_interesting_values():
    """The recording shows what each layout was made for (meta/init.patch), so the equality
    test above compares real, non-zero values and not only zeros and nulls."""
    by_id = {}
    for root, rec in _records("v2-fields"):
        if root.endswith("t1"):
            by_id[rec["cgroup"].rsplit("/", 1)[-1][:15]] = rec
    j = by_id["docker-f56dd1ff"]["memory"]  # held at memory.high 8M, swap.max 8M
    assert j["high_bytes"] == 8 << 20 and j["low_bytes"] == 4 << 20 and j["min_bytes"] == 2 << 20
    assert j["swap_limit_bytes"] == 8 << 20 and j["swap_bytes"] == 8 << 20
    assert j["events"]["high"] == 238 and j["events_local"]["high"] == 238
    assert j["swap_events"] == {"high": 324, "max": 3033, "fail": 3041}
    assert j["pgscan_total"] == 16377 and j["pgsteal_total"] == 3737 and j["pgmajfault_total"] == 72
    assert j["workingset_refault_anon_total"] == 502 and j["peak_bytes"] == 13094912
    assert j["zswap_bytes"] is None and j["swap_peak_bytes"] is None  # not in this 6.1 kernel
    assert by_id["docker-f56dd1ff"]["cpu"]["weight"] == 200
    k = by_id["docker-179a3868"]["pids"]  # forks at pids.max 4
    assert k == {"current": 3, "limit": 4, "processes": 3, "peak": 4, "events_max_total": 2}
    l_mem = by_id["docker-502bc951"]["memory"]  # OOM group kill
    assert l_mem["oom_group"] is True and l_mem["events"]["oom_group_kill"] == 1
    assert by_id["docker-26372ff4"]["cpu"]["max_burst_us"] == 20000
    recs = {r["cgroup"]: r for root, r in _records("v2-fields") if root.endswith("t1")}
    b1 = next(r for c, r in recs.items() if "7b9c0eb477b5" in c)
    assert (b1["cpu"]["cpuset_cpus"], b1["cpu"]["cpuset_mems"]) == ("1", "0")
    b3 = next(r for c, r in recs.items() if "54c2b827b337" in c)
    assert b3["memory"]["hugetlb_bytes"] == 4 << 20
    d = next(r for c, r in recs.items() if "a00407037581" in c)
    assert d["io"]["limits"] == [{"device": "254:0", "name": "vda", "read_bytes_per_second": 104857600,
                                  "write_bytes_per_second": 52428800, "read_ops_per_second": None,
                                  "write_ops_per_second": None}]
