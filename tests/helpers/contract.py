"""Checks of records against the contract, shared by tests.

`check_against_files` is an independent oracle: it reads the recorded cgroup files with
plain string handling (none of cgstat's parsers) and compares every counter of a record
with what the files say, converted exactly (usec -> s, ns -> s, ticks -> s).
"""

import json
import math
import os
import subprocess
import sys

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = json.load(open(os.path.join(ROOT, "cgstat", "contract", "record.schema.json")))
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
GPU_SCHEMA = json.load(open(os.path.join(ROOT, "cgstat", "contract", "gpu-record.schema.json")))
EVENT_SCHEMA = json.load(open(os.path.join(ROOT, "cgstat", "contract", "event.schema.json")))
EXIT_SCHEMA = json.load(open(os.path.join(ROOT, "cgstat", "contract", "exit.schema.json")))
_BY_TYPE = {"gpu": jsonschema.Draft7Validator(GPU_SCHEMA), "event": jsonschema.Draft7Validator(EVENT_SCHEMA),
            "exit": jsonschema.Draft7Validator(EXIT_SCHEMA)}


def run_cgstat(*args, env=None, check=True, input=None, timeout=60):
    """Run `python -m cgstat ARGS`; returns (records, stderr, returncode)."""
    full_env = dict(os.environ)
    full_env.pop("CGSTAT_HOST_ROOT", None)
    if env:
        full_env.update(env)
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True,
                          env=full_env, timeout=timeout, input=input, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"cgstat {args} exited {proc.returncode}: {proc.stderr.decode()}")
    out = proc.stdout.decode()
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert out == "" or out.endswith("\n"), "output must end with a whole line"
    return records, proc.stderr.decode(), proc.returncode


def validate(record):
    """Check a record against the JSON Schema of its type (cgroup and pod records share one)."""
    validator = _BY_TYPE.get(record.get("type"), VALIDATOR)
    errors = sorted(validator.iter_errors(record), key=lambda e: list(e.path))
    assert not errors, f"{record.get('cgroup')}: {[(list(e.path), e.message) for e in errors[:3]]}"


def _read(root, hierarchy_dir, path, name):
    full = os.path.join(root, "sys/fs/cgroup", hierarchy_dir, path.lstrip("/"), name)
    try:
        with open(full) as f:
            return f.read()
    except OSError:
        return None


def _kv(text):
    return {parts[0]: parts[1] for parts in (line.split() for line in (text or "").splitlines()) if len(parts) == 2}


def _hier_dir(root, name):
    """Folder of hierarchy `name` under sys/fs/cgroup ('unified' may be the top itself)."""
    top = os.path.join(root, "sys/fs/cgroup")
    if name == "unified":
        if os.path.exists(os.path.join(top, "cgroup.controllers")):
            return ""
        return "unified"
    return name.replace("name=", "")


def close(a, b, rel=1e-9):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def check_against_files(root, record):
    """Every counter of the record equals what the recorded files of its paths say."""
    paths = record["paths"]
    cpu, mem, io, pids = record["cpu"], record["memory"], record["io"], record["pids"]
    v2 = "unified" in paths and _hier_dir(root, "unified") == ""
    checked = 0
    if v2:
        p = paths["unified"]
        stat = _kv(_read(root, "", p, "cpu.stat"))
        if stat:
            assert close(cpu["usage_seconds_total"], int(stat["usage_usec"]) / 1e6)
            assert close(cpu["user_seconds_total"], int(stat["user_usec"]) / 1e6)
            assert close(cpu["system_seconds_total"], int(stat["system_usec"]) / 1e6)
            if "nr_periods" in stat:
                assert cpu["periods_total"] == int(stat["nr_periods"])
                assert cpu["throttled_periods_total"] == int(stat["nr_throttled"])
                assert close(cpu["throttled_seconds_total"], int(stat["throttled_usec"]) / 1e6)
            checked += 1
        cur = _read(root, "", p, "memory.current")
        if cur is not None:
            assert mem["usage_bytes"] == int(cur)
            mstat = _kv(_read(root, "", p, "memory.stat"))
            assert mem["working_set_bytes"] == max(0, int(cur) - int(mstat["inactive_file"]))
            assert mem["anon_bytes"] == int(mstat["anon"])
            assert mem["file_bytes"] == int(mstat["file"])
            mx = _read(root, "", p, "memory.max").strip()
            assert mem["limit_bytes"] == (None if mx == "max" else int(mx))
            assert mem["oom_kills_total"] == int(_kv(_read(root, "", p, "memory.events"))["oom_kill"])
            checked += 1
        iostat = _read(root, "", p, "io.stat")
        if iostat is not None:
            sums = {"rbytes": 0, "wbytes": 0, "rios": 0, "wios": 0}
            for line in iostat.splitlines():
                for item in line.split()[1:]:
                    k, _, v = item.partition("=")
                    if k in sums:
                        sums[k] += int(v)
            assert io["read_bytes_total"] == sums["rbytes"]
            assert io["write_bytes_total"] == sums["wbytes"]
            assert io["read_ops_total"] == sums["rios"]
            assert io["write_ops_total"] == sums["wios"]
            checked += 1
        pc = _read(root, "", p, "pids.current")
        if pc is not None:
            assert pids["current"] == int(pc)
            pm = _read(root, "", p, "pids.max").strip()
            assert pids["limit"] == (None if pm == "max" else int(pm))
            checked += 1
        return checked
    for name, p in paths.items():
        d = _hier_dir(root, name)
        controllers = name.split(",")
        if "cpuacct" in controllers:
            assert close(cpu["usage_seconds_total"], int(_read(root, d, p, "cpuacct.usage")) / 1e9)
            ticks = _kv(_read(root, d, p, "cpuacct.stat"))
            assert close(cpu["user_seconds_total"], int(ticks["user"]) / 100)
            assert close(cpu["system_seconds_total"], int(ticks["system"]) / 100)
            checked += 1
        if "cpu" in controllers:
            stat = _kv(_read(root, d, p, "cpu.stat"))
            assert cpu["periods_total"] == int(stat["nr_periods"])
            assert cpu["throttled_periods_total"] == int(stat["nr_throttled"])
            assert close(cpu["throttled_seconds_total"], int(stat["throttled_time"]) / 1e9)
            quota = int(_read(root, d, p, "cpu.cfs_quota_us"))
            period = int(_read(root, d, p, "cpu.cfs_period_us"))
            assert cpu["limit_cores"] == (None if quota < 0 else quota / period)
            checked += 1
        if "memory" in controllers:
            usage = int(_read(root, d, p, "memory.usage_in_bytes"))
            mstat = _kv(_read(root, d, p, "memory.stat"))
            assert mem["usage_bytes"] == usage
            assert mem["working_set_bytes"] == max(0, usage - int(mstat["total_inactive_file"]))
            assert mem["anon_bytes"] == int(mstat["total_rss"])
            assert mem["file_bytes"] == int(mstat["total_cache"])
            limit = int(_read(root, d, p, "memory.limit_in_bytes"))
            assert mem["limit_bytes"] == (None if limit >= 2**62 else limit)
            oom = _kv(_read(root, d, p, "memory.oom_control"))
            assert mem["oom_kills_total"] == int(oom["oom_kill"])
            checked += 1
        if "blkio" in controllers:
            rows = {"Read": 0, "Write": 0}
            ops = {"Read": 0, "Write": 0}
            for fname, acc in (("blkio.throttle.io_service_bytes_recursive", rows),
                               ("blkio.throttle.io_serviced_recursive", ops)):
                for line in (_read(root, d, p, fname) or "").splitlines():
                    parts = line.split()
                    if len(parts) == 3 and parts[1] in acc:
                        acc[parts[1]] += int(parts[2])
            assert io["read_bytes_total"] == rows["Read"]
            assert io["write_bytes_total"] == rows["Write"]
            assert io["read_ops_total"] == ops["Read"]
            assert io["write_ops_total"] == ops["Write"]
            checked += 1
        if "pids" in controllers and p != "/":
            assert pids["current"] == int(_read(root, d, p, "pids.current"))
            pm = _read(root, d, p, "pids.max").strip()
            assert pids["limit"] == (None if pm == "max" else int(pm))
            checked += 1
    return checked


def check_rates(prev, cur):
    """Rates are null, or the counter deltas over interval_s."""
    dt = cur["interval_s"]
    if dt is None:
        assert cur["cpu"]["percent"] is None and cur["io"]["read_bytes_per_second"] is None
        return False
    assert dt > 0
    pairs = [
        (cur["cpu"]["percent"], prev["cpu"]["usage_seconds_total"], cur["cpu"]["usage_seconds_total"], 100.0),
        (cur["io"]["read_bytes_per_second"], prev["io"]["read_bytes_total"], cur["io"]["read_bytes_total"], 1.0),
        (cur["io"]["write_bytes_per_second"], prev["io"]["write_bytes_total"], cur["io"]["write_bytes_total"], 1.0),
        (cur["io"]["read_ops_per_second"], prev["io"]["read_ops_total"], cur["io"]["read_ops_total"], 1.0),
        (cur["io"]["write_ops_per_second"], prev["io"]["write_ops_total"], cur["io"]["write_ops_total"], 1.0),
    ]
    for rate, a, b, scale in pairs:
        if rate is None:
            continue
        assert a is not None and b is not None and b >= a
        assert math.isclose(rate, (b - a) / dt * scale, rel_tol=1e-9, abs_tol=1e-9), (cur["cgroup"], rate)
    return True


def roundtrip(records):
    """Records as the JSON-lines sink writes them, one bytes line each (the contract is the
    serialised form: what orjson and the control escaping make of a record)."""
    from cgstat.outputs.jsonl import StdoutSink

    return StdoutSink().serialise(records).splitlines()
