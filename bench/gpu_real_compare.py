"""cgstat's GPU records beside nvidia-smi's answers, field by field (bench/gpu_real_check.sh).

    python3 bench/gpu_real_compare.py --query-gpu          # the --query-gpu fields it compares
    python3 bench/gpu_real_compare.py CGSTAT.jsonl GPU.csv APPS.csv [--pmon PMON.txt] [--workload-pid PID]

CGSTAT.jsonl: cgstat's JSON lines (the last `type: "gpu"` record of each device is used);
GPU.csv: `nvidia-smi --query-gpu=<the fields> --format=csv,noheader,nounits`;
APPS.csv: `nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits`;
PMON.txt: `nvidia-smi pmon -c 1` (SM % per process, over the driver's last sample period).
Prints one row per field and GPU (cgstat | nvidia-smi | verdict) and exits 1 on a mismatch.
Fixed values must be equal; values that move (memory used, temperature, power, clocks,
utilization) within a tolerance, since the two read at slightly different moments. A field
nvidia-smi calls [N/A] or [Not Supported] is shown and not judged. Every PID nvidia-smi
lists must be in cgstat's record of that GPU with the same memory (within 5 % or 16 MiB),
and the workload's PID, when given, must be attributed to a cgroup. Its SM % is compared
with pmon's within 30 points (the two average over different windows) where pmon has it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

MiB = 1 << 20

# (nvidia-smi field, what cgstat's GPU record gives for it, how they are compared)
EXACT, NEAR = "exact", "near"
FIELDS: Tuple[Tuple[str, str, str], ...] = (
    ("index", "gpu.index", EXACT),
    ("uuid", "gpu.uuid", EXACT),
    ("name", "gpu.name", EXACT),
    ("pci.bus_id", "gpu.pci_bus_id", EXACT),
    ("serial", "gpu.serial", EXACT),
    ("driver_version", "gpu.driver_version", EXACT),
    ("persistence_mode", "gpu.persistence_mode", EXACT),
    ("compute_mode", "gpu.compute_mode", EXACT),
    ("memory.total", "gpu.memory_total_bytes", EXACT),
    ("clocks.max.sm", "gpu.sm_clock_max_mhz", EXACT),
    ("clocks.max.mem", "gpu.memory_clock_max_mhz", EXACT),
    ("enforced.power.limit", "gpu.power_limit_watts", NEAR),
    ("memory.used", "gpu.memory_used_bytes", NEAR),
    ("temperature.gpu", "gpu.temperature_celsius", NEAR),
    ("power.draw", "gpu.power_watts", NEAR),
    ("clocks.sm", "gpu.sm_clock_mhz", NEAR),
    ("clocks.mem", "gpu.memory_clock_mhz", NEAR),
    ("utilization.gpu", "gpu.utilization_percent", NEAR),
)
QUERY_GPU = ",".join(f for f, _, _ in FIELDS)
QUERY_APPS = "pid,gpu_uuid,used_memory"
_MISSING = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "")
_COMPUTE_MODES = {"default": "Default", "exclusive_thread": "Exclusive_Thread", "prohibited": "Prohibited",
                  "exclusive_process": "Exclusive_Process"}


def _at(record: Dict[str, Any], path: str) -> Any:
    obj: Any = record
    for key in path.split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _smi_value(field: str, cgstat: Any) -> Any:
    """cgstat's value in nvidia-smi's terms (MiB, Enabled/Disabled, its mode names)."""
    if cgstat is None:
        return None
    if field in ("memory.total", "memory.used"):
        return cgstat / MiB
    if field == "persistence_mode":
        return "Enabled" if cgstat else "Disabled"
    if field == "compute_mode":
        return _COMPUTE_MODES.get(cgstat, cgstat)
    return cgstat


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def _near(field: str, ours: float, theirs: float) -> bool:
    if field == "memory.used":
        return abs(ours - theirs) <= max(64.0, 0.05 * theirs)  # MiB
    if field == "temperature.gpu":
        return abs(ours - theirs) <= 3
    if field == "power.draw":
        return abs(ours - theirs) <= max(20.0, 0.15 * theirs)
    if field == "enforced.power.limit":
        return abs(ours - theirs) <= 1
    if field == "utilization.gpu":
        return abs(ours - theirs) <= 30
    return abs(ours - theirs) <= max(50.0, 0.15 * theirs)  # clocks (MHz): a boost step moves them


def _same(field: str, how: str, ours: Any, theirs: str) -> Optional[bool]:
    """True/False, or None when nvidia-smi has no value to judge against."""
    if theirs in _MISSING:
        return None
    if ours is None:
        return False
    if isinstance(ours, (int, float)) and not isinstance(ours, bool):
        number = _number(theirs)
        if number is None:
            return False
        if how == EXACT:
            return abs(ours - number) < (1.0 if field == "memory.total" else 1e-6) or int(ours) == int(number)
        return _near(field, float(ours), number)
    if field == "pci.bus_id":
        return str(ours).upper() == theirs.upper()
    return str(ours) == theirs


def parse_csv(text: str) -> List[List[str]]:
    rows = []
    for line in text.splitlines():
        if line.strip():
            rows.append([c.strip() for c in line.split(",")])  # nvidia-smi quotes nothing
    return rows


def parse_pmon(text: str) -> Dict[Tuple[int, int], Optional[float]]:
    """(GPU index, pid) -> SM % from `nvidia-smi pmon -c 1` (None where it prints "-"); its
    columns are named by its first header line ("# gpu pid type sm mem enc dec ...")."""
    columns: List[str] = []
    out: Dict[Tuple[int, int], Optional[float]] = {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "#":
            if not columns:
                columns = words[1:]
            continue
        if not columns or "sm" not in columns or "pid" not in columns or len(words) < len(columns) - 1:
            continue
        row = dict(zip(columns, words))
        try:
            key = (int(row.get("gpu", "")), int(row.get("pid", "")))
        except ValueError:
            continue  # "-": no process on that GPU
        out[key] = _number(row.get("sm", "-"))
    return out


def last_gpu_records(lines: List[str]) -> Dict[str, Dict[str, Any]]:
    """UUID -> the last GPU record of each GPU (MIG devices left out: nvidia-smi lists GPUs)."""
    out: Dict[str, Dict[str, Any]] = {}
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and r.get("type") == "gpu" and isinstance(r.get("gpu"), dict) \
                and r["gpu"].get("parent_uuid") is None and r["gpu"].get("uuid"):
            out[r["gpu"]["uuid"]] = r
    return out


def compare(records: Dict[str, Dict[str, Any]], gpu_csv: str, apps_csv: str,
            workload_pid: Optional[int] = None, out: Callable[[str], None] = print,
            pmon: str = "") -> List[str]:
    """Print the comparison; return the mismatches (empty: all agree)."""
    bad: List[str] = []
    rows = parse_csv(gpu_csv)
    if not rows:
        bad.append("nvidia-smi listed no GPU")
    out("%-22s %-44s %-44s %s" % ("field", "cgstat", "nvidia-smi", ""))
    for row in rows:
        smi = dict(zip((f for f, _, _ in FIELDS), row))
        uuid = smi.get("uuid", "")
        record = records.get(uuid)
        out("-- GPU %s %s" % (smi.get("index"), uuid))
        if record is None:
            bad.append("GPU %s: no cgstat record" % uuid)
            out("   (no cgstat GPU record for it)")
            continue
        for field, path, how in FIELDS:
            ours = _smi_value(field, _at(record, path))
            verdict = _same(field, how, ours, smi.get(field, ""))
            mark = {True: "ok", False: "MISMATCH", None: "n/a (nvidia-smi has none)"}[verdict]
            shown = ("%.1f" % ours) if isinstance(ours, float) else str(ours)
            out("%-22s %-44s %-44s %s" % (field, shown, smi.get(field, ""), mark))
            if verdict is False:
                bad.append("GPU %s %s: cgstat %s, nvidia-smi %s" % (uuid, field, shown, smi.get(field)))
    out("-- compute processes (pid, GPU, MiB: cgstat | nvidia-smi, SM %: cgstat | pmon)")
    listed = {}
    index_of = {}
    for r in records.values():
        index_of[r["gpu"]["uuid"]] = r["gpu"].get("index")
        for p in r.get("processes") or ():
            listed[(p.get("pid"), r["gpu"]["uuid"])] = p
    sm_by = parse_pmon(pmon)
    for pid_text, uuid, mem_text in parse_csv(apps_csv):
        pid, mem = int(pid_text), _number(mem_text)
        p = listed.get((pid, uuid))
        ours = None if p is None or p.get("memory_bytes") is None else p["memory_bytes"] / MiB
        if p is None:
            verdict = False
        elif mem is None or ours is None:
            verdict = mem is None  # both unknown is agreement (WDDM/MIG); one unknown is not
        else:
            verdict = abs(ours - mem) <= max(16.0, 0.05 * mem)
        where = p.get("cgroup") if p else None
        our_sm = None if p is None else p.get("sm_percent")
        their_sm = sm_by.get((index_of.get(uuid, -1), pid))
        sm_ok = their_sm is None or (our_sm is not None and abs(our_sm - their_sm) <= 30)
        out("pid %-8d %-40s MiB %-7s | %-7s SM %% %-5s | %-5s cgroup %s %s" % (
            pid, uuid, "-" if ours is None else "%.0f" % ours, mem_text, "-" if our_sm is None else our_sm,
            "-" if their_sm is None else "%.0f" % their_sm, where,
            "ok" if verdict and sm_ok else "MISMATCH"))
        if not verdict:
            bad.append("process %d on %s: cgstat %s MiB, nvidia-smi %s" % (pid, uuid, ours, mem_text))
        if not sm_ok:
            bad.append("process %d on %s: cgstat SM %s %%, pmon %s %%" % (pid, uuid, our_sm, their_sm))
    if workload_pid is not None:
        mine = [p for (pid, _), p in listed.items() if pid == workload_pid]
        if not mine:
            bad.append("the workload (PID %d) is not in cgstat's GPU records" % workload_pid)
        elif not any(p.get("cgroup") for p in mine):
            bad.append("the workload (PID %d) is attributed to no cgroup" % workload_pid)
        else:
            out("workload PID %d: cgroup %s, container %s" % (
                workload_pid, mine[0].get("cgroup"), (mine[0].get("container") or {}).get("name")))
    return bad


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--query-gpu", action="store_true", help="print the --query-gpu fields and exit")
    ap.add_argument("cgstat", nargs="?")
    ap.add_argument("gpu_csv", nargs="?")
    ap.add_argument("apps_csv", nargs="?")
    ap.add_argument("--workload-pid", type=int)
    ap.add_argument("--pmon", help="nvidia-smi pmon -c 1's output")
    a = ap.parse_args(argv)
    if a.query_gpu:
        print(QUERY_GPU)
        return 0
    if not (a.cgstat and a.gpu_csv and a.apps_csv):
        ap.error("CGSTAT.jsonl GPU.csv APPS.csv are needed")
    with open(a.cgstat) as f:
        records = last_gpu_records(f.read().splitlines())
    with open(a.gpu_csv) as f:
        gpu_csv = f.read()
    with open(a.apps_csv) as f:
        apps_csv = f.read()
    pmon = ""
    if a.pmon:
        with open(a.pmon) as f:
            pmon = f.read()
    bad = compare(records, gpu_csv, apps_csv, a.workload_pid, pmon=pmon)
    if bad:
        print("\n%d mismatch(es):" % len(bad))
        for b in bad:
            print("  " + b)
        return 1
    print("\nall agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
