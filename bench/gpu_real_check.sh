#!/usr/bin/env bash
# cgstat beside nvidia-smi on a machine with an NVIDIA GPU: the checkout and a driver are all
# it needs (and cgstat's Python dependencies: orjson, typer, nvidia-ml-py). About a minute
# (SECONDS_BUSY plus start-up; under 3 minutes).
#
#   bash bench/gpu_real_check.sh            # exit 0: all agree; 1: a mismatch; 2: cannot run here
#
# 1. Starts a small CUDA workload where it can, and says which: Python ctypes into the
#    driver's own libcuda.so.1 (bench/gpu_cuda_workload.py: 512 MiB and a PTX kernel, no
#    toolkit needed), else a kernel built with nvcc, else PyTorch, else CuPy; none: devices only.
# 2. Runs `cgstat stream` for a few ticks beside `nvidia-smi --query-gpu=...`,
#    `--query-compute-apps=pid,gpu_uuid,used_memory` and `nvidia-smi pmon -c 1` (SM % per process).
# 3. Prints one table of both (bench/gpu_real_compare.py) and exits non-zero on a mismatch.
#
# Environment: PYTHON (default: the checkout's .venv/bin/python, else python3), WORKLOAD
# (auto, ctypes, nvcc, torch, cupy or none; default auto: the first that works), SECONDS_BUSY (the
# workload's length, default 40), OUT (where the outputs are kept, default a temp folder).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'gpu_real_check: %s\n' "$*" >&2; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
    say "no nvidia-smi here: this check needs an NVIDIA driver (not run)"
    exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    say "nvidia-smi cannot talk to the driver: $(nvidia-smi -L 2>&1 | head -1) (not run)"
    exit 2
fi
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c 'import orjson, typer, pynvml' 2>/dev/null; then
    say "$PYTHON lacks cgstat's dependencies (orjson, typer, nvidia-ml-py): pip install -e . first (not run)"
    exit 2
fi
OUT=${OUT:-$(mktemp -d /tmp/gpu-real-check.XXXXXX)}
mkdir -p "$OUT"
SECONDS_BUSY=${SECONDS_BUSY:-40}
say "outputs in $OUT"
nvidia-smi -L | sed 's/^/  /' >&2

workload_pid=""
workload="none"
cleanup() { if [ -n "$workload_pid" ]; then kill "$workload_pid" 2>/dev/null || true; wait "$workload_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

start_ctypes() {
    "$PYTHON" bench/gpu_cuda_workload.py "$SECONDS_BUSY" 512 >"$OUT/workload.log" 2>&1 &
    workload_pid=$!
    # ready once the memory is held (or gone at once: no libcuda, no GPU for it)
    for _ in $(seq 1 30); do
        if grep -q '^ready' "$OUT/workload.log"; then break; fi
        if ! kill -0 "$workload_pid" 2>/dev/null; then
            say "ctypes workload: $(tail -1 "$OUT/workload.log")"
            workload_pid=""
            return 1
        fi
        sleep 1
    done
    workload="ctypes into libcuda.so.1 ($(head -1 "$OUT/workload.log"))"
}

start_nvcc() {
    cat > "$OUT/busy.cu" <<'CU'
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <unistd.h>
__global__ void spin(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) for (int k = 0; k < 2000; k++) x[i] = x[i] * 0.999f + 0.001f;
}
int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 40;
    int n = 64 << 20;  /* 256 MiB of floats */
    float *x;
    if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    cudaMemset(x, 0, n * sizeof(float));
    printf("ready\n"); fflush(stdout);
    time_t end = time(NULL) + seconds;
    while (time(NULL) < end) { spin<<<(n + 255) / 256, 256>>>(x, n); cudaDeviceSynchronize(); }
    cudaFree(x);
    return 0;
}
CU
    nvcc -O2 -o "$OUT/busy" "$OUT/busy.cu" >"$OUT/nvcc.log" 2>&1 || return 1
    "$OUT/busy" "$SECONDS_BUSY" >"$OUT/workload.log" 2>&1 &
    workload_pid=$!
    workload="nvcc kernel ($OUT/busy.cu)"
}

start_python() {  # $1: torch | cupy
    local code
    if [ "$1" = torch ]; then
        code='import sys, time, torch
x = torch.randn(4096, 4096, device="cuda"); print("ready", flush=True); end = time.time() + float(sys.argv[1])
while time.time() < end:
    x = (x @ x).clamp_(-1, 1)
    torch.cuda.synchronize()'
    else
        code='import sys, time, cupy
x = cupy.random.rand(4096, 4096, dtype=cupy.float32); print("ready", flush=True); end = time.time() + float(sys.argv[1])
while time.time() < end:
    x = cupy.clip(x @ x, -1, 1)
    cupy.cuda.Device().synchronize()'
    fi
    "$PYTHON" -c "import $1" 2>/dev/null || python3 -c "import $1" 2>/dev/null || return 1
    local py="$PYTHON"
    "$PYTHON" -c "import $1" 2>/dev/null || py=python3
    "$py" -c "$code" "$SECONDS_BUSY" >"$OUT/workload.log" 2>&1 &
    workload_pid=$!
    workload="$1 ($py)"
}

WORKLOAD=${WORKLOAD:-auto}
want() { [ "$WORKLOAD" = auto ] || [ "$WORKLOAD" = "$1" ]; }
if [ "$WORKLOAD" = none ]; then
    say "WORKLOAD=none: comparing devices and whatever already runs on them"
elif want ctypes && start_ctypes; then :
elif want nvcc && command -v nvcc >/dev/null 2>&1 && start_nvcc; then :
elif want torch && start_python torch; then :
elif want cupy && start_python cupy; then :
else
    say "no CUDA workload possible here ($WORKLOAD: no libcuda, nvcc, PyTorch or CuPy that works): comparing devices only"
fi
say "workload: $workload${workload_pid:+ (PID $workload_pid)}"

if [ -n "$workload_pid" ]; then
    # wait until the driver lists it (a CUDA context takes a few seconds to start)
    for _ in $(seq 1 60); do
        if nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -qx "$workload_pid"; then break; fi
        if ! kill -0 "$workload_pid" 2>/dev/null; then say "the workload exited: $(tail -3 "$OUT/workload.log")"; exit 1; fi
        sleep 1
    done
fi

QUERY=$("$PYTHON" bench/gpu_real_compare.py --query-gpu)
# cgstat and nvidia-smi side by side: the last tick of cgstat's stream is compared with
# nvidia-smi's answer taken during that tick
timeout 120 "$PYTHON" -m cgstat stream --interval 1 --count 4 --all --no-events >"$OUT/cgstat.jsonl" 2>"$OUT/cgstat.err" &
cgstat_pid=$!
sleep 3.5
nvidia-smi --query-gpu="$QUERY" --format=csv,noheader,nounits >"$OUT/gpu.csv"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits >"$OUT/apps.csv"
nvidia-smi pmon -c 1 >"$OUT/pmon.txt" 2>&1 || true  # SM % per process (pmon's own ~1 s sample)
if ! wait "$cgstat_pid"; then
    say "cgstat failed: $(tail -5 "$OUT/cgstat.err")"
    exit 1
fi
grep -q '"type":"gpu"' "$OUT/cgstat.jsonl" || { say "cgstat wrote no GPU record: $(grep -i gpu "$OUT/cgstat.err" | head -3)"; exit 1; }

echo "workload: $workload"
rc=0
"$PYTHON" bench/gpu_real_compare.py "$OUT/cgstat.jsonl" "$OUT/gpu.csv" "$OUT/apps.csv" --pmon "$OUT/pmon.txt" \
    ${workload_pid:+--workload-pid "$workload_pid"} || rc=$?
exit $rc
