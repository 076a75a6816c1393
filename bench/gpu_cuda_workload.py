"""A CUDA workload made on the spot with nothing but the driver: Python ctypes into
libcuda.so.1 (installed with every NVIDIA driver; no toolkit, PyTorch or CuPy needed), for
bench/gpu_real_check.sh.

    python3 bench/gpu_cuda_workload.py SECONDS [MIB] [GPU]

cuInit, cuDeviceGet, cuCtxCreate, cuMemAlloc of MIB MiB (default 512), then a trivial kernel
loaded from PTX text (cuModuleLoadData: the driver compiles it for whatever GPU this is) run
over that memory again and again (cuLaunchKernel, cuCtxSynchronize) until SECONDS are over,
so that the process holds memory and its SM use is not zero. Prints "ready <pid> <MiB> MiB,
kernel" (or "... no kernel: <why>", then it only holds the memory) once the memory is held.
Exits 1 with one line when the driver refuses (no GPU, no libcuda.so.1).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

# A kernel that reads each float, runs 2000 fused multiply-adds on it and writes it back:
# long enough per launch to keep the SMs busy, hand-written PTX (ISA 6.0, target sm_50:
# the driver's JIT takes it to any later GPU)
PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 p, .param .u32 n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.s32 %p1, %r1, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.s32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.u32 %r6, 0;
LOOP:
    fma.rn.f32 %f1, %f1, 0f3F7FBE77, 0f3A83126F;
    add.s32 %r6, %r6, 1;
    setp.lt.s32 %p2, %r6, 2000;
    @%p2 bra LOOP;
    st.global.f32 [%rd4], %f1;
DONE:
    ret;
}
"""


class CudaError(Exception):
    pass


def _check(cuda, what: str, ret: int) -> None:
    if ret:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(ret, ctypes.byref(name))
        raise CudaError("%s: %s (%d)" % (what, (name.value or b"?").decode(), ret))


def main(argv) -> int:
    seconds = float(argv[1]) if len(argv) > 1 else 40.0
    mib = int(argv[2]) if len(argv) > 2 else 512
    ordinal = int(argv[3]) if len(argv) > 3 else 0
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        print("gpu_cuda_workload: no libcuda.so.1: %s" % exc, file=sys.stderr)
        return 1
    try:
        _check(cuda, "cuInit", cuda.cuInit(0))
        dev = ctypes.c_int()
        _check(cuda, "cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), ordinal))
        ctx = ctypes.c_void_p()
        _check(cuda, "cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
        ptr = ctypes.c_uint64()
        _check(cuda, "cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20)))
        _check(cuda, "cuMemsetD32", cuda.cuMemsetD32_v2(ptr, 0, ctypes.c_size_t((mib << 20) // 4)))
    except CudaError as exc:
        print("gpu_cuda_workload: %s" % exc, file=sys.stderr)
        return 1
    fn = ctypes.c_void_p()
    why = ""
    try:
        module = ctypes.c_void_p()
        _check(cuda, "cuModuleLoadData", cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)))
        _check(cuda, "cuModuleGetFunction", cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"spin"))
    except CudaError as exc:
        why = str(exc)
    print("ready %d %d MiB, %s" % (os.getpid(), mib, "no kernel: " + why if why else "kernel"), flush=True)
    end = time.monotonic() + seconds
    n = ctypes.c_uint32((mib << 20) // 4)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(ptr), ctypes.c_void_p),
                                   ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
    block = 256
    grid = (n.value + block - 1) // block
    while time.monotonic() < end:
        if why:
            time.sleep(0.5)
            continue
        try:
            _check(cuda, "cuLaunchKernel", cuda.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, None, params, None))
            _check(cuda, "cuCtxSynchronize", cuda.cuCtxSynchronize())
        except CudaError as exc:
            print("gpu_cuda_workload: %s" % exc, file=sys.stderr)
            return 1
    cuda.cuMemFree_v2(ptr)
    cuda.cuCtxDestroy_v2(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
