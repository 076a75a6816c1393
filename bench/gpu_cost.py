"""CPU time a tick's GPU reading costs, against the NVML test double: everything on.

    python3 bench/gpu_cost.py                 # 8 GPUs x 50 busy processes, 200 readings
    python3 bench/gpu_cost.py --gpus 8 --procs 50 --reads 500 --variant old --json

One reading is what the sampler does each tick: `GpuReader.read()` (devices, processes and
their utilization samples, every device-health call due that tick, the XID event set
drained, MPS clients, GPM on every GPU) and the energy split (`EnergyModel.update`). The
double (tests/nvml/nvml_double.c, built with gcc into a cache) stands in for the driver, so
this measures cgstat + pynvml + ctypes, plus the double's own small work (a stat() of the
scenario file per call): a real driver's ioctls cost more, and are not ours to reduce. The
gateway's clock steps a second a reading (nvml.h wants GPM samples >= 100 ms apart; the
readings themselves follow each other at once).
Budget (bench/README.md): <= 3 ms of CPU per tick at 8 GPUs x 50 processes. Needs no GPU and no root.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.helpers.nvmldouble import Scenario, env, write_scenario  # noqa: E402

BUDGET_MS = 3.0

_CHILD = r"""
import json, sys, time
from cgstat.gpu.energy import EnergyModel
from cgstat.gpu.nvml import Gateway
from cgstat.gpu.reading import GpuReader
reads, warm = int(sys.argv[1]), int(sys.argv[2])
tick = [0.0]
gw = Gateway(clock=lambda: tick[0])  # a second a reading, as a 1 s stream's (GPM wants >= 100 ms)
reader = GpuReader(gw)
model = EnergyModel()

def read():
    tick[0] += 1.0
    snap = reader.read()
    model.update(snap, time.monotonic())
    return snap

for _ in range(warm):
    snap = read()
assert snap.available, snap.reason
costs = []
for _ in range(reads):
    t0 = time.process_time()
    snap = read()
    costs.append(time.process_time() - t0)
costs.sort()
t0 = time.process_time(); w0 = time.perf_counter()
for _ in range(reads):
    read()
total = time.process_time() - t0
print(json.dumps({"devices": len(snap.devices), "processes": len(snap.processes),
                  "busy": sum(1 for p in snap.processes if p.sm_percent),
                  "gpm": sum(1 for d in snap.devices if d.health and d.health.gpm),
                  "health_errors": sum(len(d.health.errors) for d in snap.devices if d.health),
                  "mean_cpu_ms": total / reads * 1e3,
                  "wall_ms": (time.perf_counter() - w0) / reads * 1e3,
                  "median_cpu_ms": costs[len(costs) // 2] * 1e3,
                  "p95_cpu_ms": costs[int(len(costs) * 0.95)] * 1e3}))
"""


def scenario(gpus: int, procs: int) -> Scenario:
    s = Scenario()
    for g in range(gpus):
        s.gpu(g, uuid=f"GPU-bench000-0000-0000-0000-{g:012d}", name="NVIDIA H100 80GB HBM3",
              mem_total=80 << 30, mem_used=40 << 30, mem_reserved=1 << 29, util_gpu=90, util_mem=40,
              temp=60, power_mw=500000, sm_clock=1755, mem_clock=2619, sm_clock_max=1980, mem_clock_max=2619,
              reasons=0x4, viol_power=10 ** 9, viol_thermal=0, energy_mj=10 ** 9, power_limit_mw=700000,
              mem_temp=70, pcie_tx_bytes=10 ** 9, pcie_rx_bytes=10 ** 9, replay=1, nvlink_tx_kib=10 ** 6,
              nvlink_rx_kib=10 ** 6, enc=1, dec=1, ecc_cor=1, ecc_unc=0, remap_cor=0, remap_unc=0,
              remap_pending=0, remap_failure=0, compute_mode=0, persistence=1, gpm=1, gpm_1=90, gpm_2=80,
              gpm_3=40, gpm_5=30, gpm_10=50, gpm_20=100, gpm_21=100, gpm_60=10, gpm_61=10)
        for p in range(procs):
            pid = 100000 + g * 1000 + p
            s.proc(g, pid, (p + 1) << 24, type="mps" if p % 10 == 0 else "compute")
            s.sample(g, pid, sm=1 + p % 99, mem=p % 50, ts="busy")
        s.xid(g, 13)
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=50, help="busy processes per GPU")
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--variant", default="full", choices=("full", "v2", "old"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_scenario(os.path.join(tmp, "scenario.txt"), scenario(a.gpus, a.procs))
        out = subprocess.run([sys.executable, "-c", _CHILD, str(a.reads), "3"], env=env(path, a.variant),
                             stdout=subprocess.PIPE, universal_newlines=True, check=True, cwd=REPO)
    result = json.loads(out.stdout)
    result.update(gpus=a.gpus, procs_per_gpu=a.procs, variant=a.variant, reads=a.reads, budget_ms=BUDGET_MS)
    if a.json:
        print(json.dumps(result))
    else:
        print(f"GPU reading, everything on, {a.gpus} GPUs x {a.procs} busy processes ({a.variant} symbols, "
              f"{a.reads} readings): {result['mean_cpu_ms']:.2f} ms CPU per tick (median "
              f"{result['median_cpu_ms']:.2f}, p95 {result['p95_cpu_ms']:.2f}; wall {result['wall_ms']:.2f} ms); "
              f"budget {BUDGET_MS:g} ms")
    return 0 if result["mean_cpu_ms"] <= BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
