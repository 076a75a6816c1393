"""A made-up recording of one job's life for the views of the past (dump, replay, events,
story, report): `job.service` starts, grows 1 MiB a tick under a 64 MiB limit beside a
steady `/init.scope`, is throttled, OOM-killed at tick KILL (an event with the kernel log's
time), and its exit record follows a tick later. Records are the golden file's, with the
figures changed."""

from __future__ import annotations

import copy
import os

import orjson

from cgstat.store.writer import Recorder
from cgstat.timestamps import rfc3339
from tests.helpers.contract import ROOT

GOLDEN = os.path.join(ROOT, "tests", "fixtures", "v2-fields", "golden.jsonl")
T0 = 1796181120.0  # 2026-12-02T03:12:00Z
MiB = 1 << 20
JOB = "/system.slice/job.service"
TICKS = 30
KILL = 27  # the tick whose event is the kill; the job's last record is at KILL - 1
LIMIT = 64 * MiB
KERNEL_PEAK = 64 * MiB - 4096  # memory.peak at its last record (the kernel's: more than any sample)
KERNEL_KILL_S = T0 + KILL - 0.4  # the kernel log's time of the kill


def _golden(cgroup: str) -> dict:
    with open(GOLDEN, "rb") as f:
        for line in f:
            record = orjson.loads(line)
            if record.get("cgroup") == cgroup:
                return record
    raise LookupError(cgroup)


BASE = _golden("/init.scope")


def job_record(i: int) -> dict:
    r = copy.deepcopy(BASE)
    r.update(ts=rfc3339(T0 + i), cgroup=JOB, unit="job.service", interval_s=1.0)
    r["cpu"].update(usage_seconds_total=round(0.5 * i, 3), percent=50.0, limit_cores=0.5, periods_total=10 * i,
                    throttled_periods_total=8 * i, throttled_seconds_total=round(0.4 * i, 3), throttled_percent=80.0)
    ws = (30 + i) * MiB
    r["memory"].update(working_set_bytes=ws, usage_bytes=ws + MiB, limit_bytes=LIMIT, percent=100.0 * ws / LIMIT,
                       peak_bytes=KERNEL_PEAK if i == KILL - 1 else ws + 2 * MiB, oom_kills_total=0)
    return r


def tick(i: int) -> list:
    """The records of tick i, as stream writes them."""
    clock = copy.deepcopy(BASE)
    clock["ts"] = rfc3339(T0 + i)
    out = [clock]
    if i < KILL:
        out.append(job_record(i))
    if i == KILL:
        out.append(kill_event())
    if i == KILL + 1:
        out.append(exit_record())
    return out


def kill_event() -> dict:
    return {"schema": 1, "type": "event", "ts": rfc3339(T0 + KILL), "host": "vm", "kind": "oom_kill",
            "severity": "critical", "cgroup": JOB, "container": None, "resolves": None, "since": None,
            "message": "The kernel OOM-killed process python3 (PID 4242) in job.service at its memory limit",
            "evidence": {"kills": 1, "pid": 4242, "process": "python3", "limit_bytes": LIMIT,
                         "usage_bytes": LIMIT, "source": "kernel_log", "kernel_seq": 77,
                         "kernel_ts": rfc3339(KERNEL_KILL_S)}}


def exit_record() -> dict:
    return {"schema": 1, "type": "exit", "ts": rfc3339(T0 + KILL + 1), "host": "vm", "cgroup": JOB,
            "unit": "job.service", "pod": None, "container": None, "started": rfc3339(T0),
            "last_seen": rfc3339(T0 + KILL - 1), "ended": rfc3339(T0 + KILL + 1), "lifetime_seconds": KILL - 1.0,
            "samples": KILL, "cpu_seconds_total": 0.5 * (KILL - 1), "cpu_throttled_seconds_total": 0.4 * (KILL - 1),
            "cpu_throttled_periods_total": 8 * (KILL - 1), "cpu_periods_total": 10 * (KILL - 1),
            "memory_peak_bytes": KERNEL_PEAK,
            "memory_peak_source": "memory.peak", "oom_kills_total": 1, "io_read_bytes_total": 4096,
            "io_write_bytes_total": 0, "network_rx_bytes_total": None, "network_tx_bytes_total": None,
            "gpu_seconds_total": None, "gpu_memory_peak_bytes": None, "gpu_energy_joules_total": None,
            "ended_by": "oom_kill"}


def record_store(path: str) -> list:
    """The recording written into a store at `path`; its records, tick by tick."""
    rec = Recorder(path, None, None)
    rec.open()
    ticks = []
    for i in range(TICKS):
        records = tick(i)
        rec.write(T0 + i, [((r.get("type"), r.get("cgroup")), orjson.dumps(r)) for r in records])
        ticks.append(records)
    rec.close()
    return ticks


def write_jsonl(path: str) -> None:
    with open(path, "wb") as f:
        for i in range(TICKS):
            for r in tick(i):
                f.write(orjson.dumps(r) + b"\n")
