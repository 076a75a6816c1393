"""The NVML test double (tests/nvml/nvml_double.c): build it, write scenarios, run against it.

pynvml loads `libnvidia-ml.so.1` by soname, so the double is put on LD_LIBRARY_PATH of a
*new* process: `env()` gives that environment, `run_python()` and `run_reads()` start one.

    lib = build("full")                      # or "v2" (no _v3/ProcessesUtilizationInfo), "old"
    path = write_scenario(tmp_path / "s.txt", Scenario().gpu(0, util_gpu=40).proc(0, 4242, 1 << 30))
    subprocess.run([...], env=env(path, "full"))

Variants are built with gcc into a cache folder keyed by the source's hash and the flags,
so a changed double is rebuilt and parallel runs never see half-written files.

Run as a script (`python tests/helpers/nvmldouble.py PLAN.json`, inside the environment above), it
is the reader `run_reads()` drives: it writes each step's scenario, advances a fake
monotonic clock, calls `read_gpus` and prints every snapshot as one JSON document.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
SOURCE = os.path.join(TESTS, "nvml", "nvml_double.c")
SONAME = "libnvidia-ml.so.1"

VARIANTS = {
    "full": [],
    # a driver between 450 and 510: _v2 process lists, ProcessUtilization, memory v1 and v2
    # (and, as those drivers, no ClocksEventReasons, no MPS _v3 list, no GPM)
    "v2": ["-DNO_V3", "-DNO_PUI", "-DNO_CER", "-DNO_MPS3", "-DNO_GPM"],
    # drivers 430/440: only the unversioned (16-byte) process lists and memory v1
    "old": ["-DNO_V3", "-DNO_V2", "-DNO_PUI", "-DNO_MEMV2", "-DNO_CER", "-DNO_MPS3", "-DNO_GPM"],
    # every symbol, the scenario read once (benches: the per-call stat() of the file is the
    # double's own cost, neither cgstat's nor a driver's)
    "full-once": ["-DSCENARIO_ONCE"],
    # drivers 535.43-535.86: the _v3 lists fill a 32-byte struct (nvitop tells them by
    # nvmlDeviceGetConfComputeMemSizeInfo), and no ProcessesUtilizationInfo yet
    "535-early": ["-DPROC_V3_32", "-DNO_PUI"],
}


def cache_dir() -> str:
    base = os.environ.get("NVML_DOUBLE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "cgstat-nvml-double")
    return base


def driver_version_file() -> str:
    """A stand-in for /proc/driver/nvidia/version (present only while the driver is loaded),
    for the environment of a process that loads the double."""
    os.makedirs(cache_dir(), exist_ok=True)
    path = os.path.join(cache_dir(), "driver-version")
    if not os.path.exists(path):
        write_scenario(path, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  (the NVML double)\n")
    return path


def build(variant: str = "full") -> str:
    """The folder holding libnvidia-ml.so.1 of that variant (built when missing or stale)."""
    flags = VARIANTS[variant]
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read() + " ".join(flags).encode()).hexdigest()[:16]
    folder = os.path.join(cache_dir(), f"{variant}-{digest}")
    lib = os.path.join(folder, SONAME)
    if os.path.exists(lib):
        return folder
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise RuntimeError("no C compiler (gcc) to build the NVML double")
    os.makedirs(cache_dir(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{variant}-", dir=cache_dir())
    try:
        subprocess.run([cc, "-O2", "-Wall", "-shared", "-fPIC", f"-Wl,-soname,{SONAME}", *flags,
                        "-o", os.path.join(tmp, SONAME), SOURCE], check=True)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process built it first
            if not os.path.exists(lib):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _fmt(value: Any) -> str:
    if isinstance(value, str) and (" " in value or not value):
        return '"' + value + '"'
    return str(value)


class Scenario:
    """A scenario file's lines (format: tests/nvml/README.md), built by method calls."""

    def __init__(self, init: str = "ok", driver: str = "550.54.15"):
        self.lines: List[str] = [f"init {init}", f"driver {driver}"]

    def line(self, text: str) -> "Scenario":
        self.lines.append(text)
        return self

    def _add(self, word: str, fields: Dict[str, Any]) -> "Scenario":
        parts = [word] + [f"{k}={_fmt(v)}" for k, v in fields.items() if v is not None]
        self.lines.append(" ".join(parts))
        return self

    def gpu(self, index: int, **fields) -> "Scenario":
        """gpu(0, uuid=..., name=..., mem_total=, mem_used=, mem_reserved=, util_gpu=, util_mem=,
        temp=, power_mw=, mig=0|1|"unsupported", procutil=, compute=, graphics=, lost=1, handle=)"""
        return self._add("gpu", dict(index=index, **fields))

    def mig(self, gpu: int, index: int, **fields) -> "Scenario":
        """mig(0, slot, uuid=, name=, mem_total=, mem_used=, mem_reserved=, gi=, ci=)"""
        return self._add("mig", dict(gpu=gpu, index=index, **fields))

    def proc(self, gpu: int, pid: int, mem: Any, type: str = "compute", mig: Optional[int] = None) -> "Scenario":
        return self._add("proc", dict(gpu=gpu, pid=pid, mem=mem, type=type, mig=mig))

    def sample(self, gpu: int, pid: int, sm: int = 0, mem: int = 0, enc: int = 0, dec: int = 0,
               ts: Any = "busy", jpg: int = 0, ofa: int = 0) -> "Scenario":
        """ts: "busy" (new on every call), "busy-N" (now - N µs), "once", or µs since the epoch."""
        return self._add("sample", dict(gpu=gpu, pid=pid, sm=sm, mem=mem, enc=enc, dec=dec, jpg=jpg,
                                        ofa=ofa, ts=ts))

    def periodic(self, gpu: int, pid: int, sm: int = 100, mem: int = 0, period: int = 166667,
                 cycle: Optional[int] = None, busy: Optional[int] = None, depth: int = 4096) -> "Scenario":
        """The driver's ring buffer of one process: a sample every `period` µs (at multiples
        of it), busy (sm, mem %) the first `busy` µs of every `cycle` µs, idle (no sample)
        the rest; the newest `depth` periods kept."""
        fields: Dict[str, Any] = dict(gpu=gpu, pid=pid, sm=sm, mem=mem, ts="periodic", period=period, depth=depth)
        if cycle is not None:
            fields["cycle"] = cycle
        if busy is not None:
            fields["busy"] = busy
        return self._add("sample", fields)

    def clock(self, now_us: int) -> "Scenario":
        """The time (µs of the Unix epoch) every call of the double sees, instead of the real clock."""
        return self._add("clock", dict(now=now_us))

    def xid(self, gpu: int, code: int, id: Optional[int] = None) -> "Scenario":
        """An XID the event set delivers once (ids default to the order of xid lines)."""
        return self._add("xid", dict(gpu=gpu, code=code, id=id))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def write_scenario(path, scenario) -> str:
    """Replace the scenario file atomically (a new inode: the double notices it at once)."""
    path = str(path)
    text = scenario.text() if isinstance(scenario, Scenario) else str(scenario)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def env(scenario_path: Optional[str], variant: Optional[str] = "full",
        base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Environment for a subprocess that loads the double (variant None: no library at all)."""
    e = dict(os.environ if base is None else base)
    e["LD_LIBRARY_PATH"] = build(variant) if variant else ""
    # the kernel's word that a driver is loaded: cgstat loads no NVML library without it
    e.setdefault("CGSTAT_NVIDIA_VERSION_FILE", driver_version_file())
    if scenario_path is not None:
        e["NVML_DOUBLE_SCENARIO"] = str(scenario_path)
    else:
        e.pop("NVML_DOUBLE_SCENARIO", None)
    e["PYTHONPATH"] = REPO + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def run_python(code: str, scenario_path: Optional[str], variant: Optional[str] = "full",
               timeout: float = 60.0, args: Optional[List[str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *(args or [])], env=env(scenario_path, variant),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout, cwd=REPO)


def run_reads(folder, steps: List[Dict[str, Any]], variant: Optional[str] = "full",
              timeout: float = 60.0, distribution_version: Optional[str] = None,
              extra_env: Optional[Dict[str, str]] = None, **gateway) -> Dict[str, Any]:
    """Read the GPUs once per step in one process, against the double.

    steps: [{"scenario": Scenario or text (optional: written before this read),
             "advance": seconds added to the fake monotonic clock before this read}]
    gateway: Gateway keyword arguments (reinit_backoff_s, retry_s).
    extra_env: more environment for the reading process (e.g. NVML_DOUBLE_INIT_MARK).
    distribution_version: what the installed nvidia-ml-py claims to be (default: the real one).
    Each step also runs the energy model (gpu/energy.py) on the fake clock.
    Returns {"snapshots": [asdict(GpuSnapshot)...], "energy": [{"processes": {"UUID/pid":
             [watts, joules]}, "idle": {UUID: [watts, observed]}}...], "warnings": [...], "inits": n,
             "symbols": {...}, "pynvml_on_import": bool}.
    """
    folder = str(folder)
    scenario_path = os.path.join(folder, "scenario.txt")
    plan = {"scenario_path": scenario_path, "gateway": gateway,
            "distribution_version": distribution_version, "steps": [
        {"scenario": (s["scenario"].text() if isinstance(s.get("scenario"), Scenario) else s.get("scenario")),
         "advance": s.get("advance", 0)} for s in steps]}
    if plan["steps"] and plan["steps"][0]["scenario"] is not None:
        write_scenario(scenario_path, plan["steps"][0]["scenario"])
    plan_path = os.path.join(folder, "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    environment = env(scenario_path, variant, base=dict(os.environ, **(extra_env or {})))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), plan_path],
                          env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, cwd=REPO)
    if proc.returncode != 0:
        raise AssertionError(f"reader failed ({proc.returncode}):\n{proc.stderr}")
    result = json.loads(proc.stdout)
    result["stderr"] = proc.stderr
    return result


def _main(plan_path: str) -> None:
    import dataclasses

    import cgstat.gpu.reading  # noqa: F401
    on_import = "pynvml" in sys.modules
    from cgstat.gpu import nvml
    from cgstat.gpu.energy import EnergyModel
    from cgstat.gpu.nvml import Gateway
    from cgstat.gpu.reading import GpuReader

    with open(plan_path) as f:
        plan = json.load(f)
    if plan.get("distribution_version"):
        nvml._distribution_version = lambda: plan["distribution_version"]
    now = [1000.0]
    warnings: List[str] = []
    gw = Gateway(warn=lambda key, message: warnings.append(message), clock=lambda: now[0],
                 **plan["gateway"])
    reader = GpuReader(gw, clock=lambda: now[0])
    model = EnergyModel()
    snapshots = []
    energy = []
    for step in plan["steps"]:
        if step["scenario"] is not None:
            write_scenario(plan["scenario_path"], step["scenario"])
        now[0] += step["advance"]
        snapshot = reader.read()
        as_dict = dataclasses.asdict(snapshot)
        if as_dict.get("late") is False:
            del as_dict["late"]  # only the deadline's tests (gpu/beside.py) make a late one
        as_dict["processes"] = [p._asdict() for p in snapshot.processes]  # NamedTuples
        snapshots.append(as_dict)
        shares = zip(*model.update(snapshot, now[0])) if snapshot.available else []  # (power, energy) pairs
        energy.append({"processes": {"%s/%d" % (p.gpu_uuid, p.pid): list(share)
                                     for p, share in zip(snapshot.processes, shares)},
                       "idle": {d.uuid: list(model.idle(d.uuid)) for d in snapshot.devices
                                if d.parent_uuid is None}})
    json.dump({"snapshots": snapshots, "energy": energy, "warnings": warnings, "inits": gw.inits,
               "reopened": getattr(gw, "reopened", None),
               "error_counts": {f"{d} {c}": n for (d, c), n in getattr(gw, "error_counts", {}).items()},
               "symbols": {"processes": gw.process_symbols, "utilization": gw.utilization_symbol,
                           "memory_v2": gw.memory_v2, "driver": gw.driver_version},
               "newer": {"reasons": gw.reasons_symbol, "mps": gw.mps_symbol, "gpm": gw.gpm,
                         "cuda": gw.cuda_version},
               "pynvml_on_import": on_import, "pynvml_loaded": "pynvml" in sys.modules}, sys.stdout)


if __name__ == "__main__":
    _main(sys.argv[1])
