"""GPM (GPU performance monitoring, drivers >= 520, Hopper and later): two samples kept per
device or MIG instance (`nvmlGpmSampleAlloc`, `nvmlGpmSampleGet`, `nvmlGpmMigSampleGet`,
`nvmlGpmSampleFree`), the metrics between them (`nvmlGpmMetricsGet`, called directly with one
reused `nvmlGpmMetricsGet_t`, read as bytes), per-GPU support (`nvmlGpmQueryDeviceSupport`). Every call goes
through the gateway.

nvml.h: two samples must be at least 100 ms apart. A reading sooner than that after the
previous sample takes none (the metrics are null, the problem says why) and keeps the
previous one: at --interval 0.1 GPM is measured every other tick.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any, Dict, List, Optional, Tuple

from cgstat.gpu.nvml_calls import Calls
from cgstat.gpu.nvml_codes import SUCCESS
from cgstat.kernel.sample import Problem

GPM_SUPPORT = "nvmlGpmQueryDeviceSupport"
_GPM_METRICS_GET_VERSION = 1
MIN_APART_S = 0.1  # nvml.h: GPM samples closer than 100 ms give no metrics


class _GpmMetric(ctypes.Structure):
    """nvmlGpmMetric_t (40 bytes): metricId, nvmlReturn, value, metricInfo (three strings)."""
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_double),
                ("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class _GpmMetricsGet(ctypes.Structure):
    """nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2, metrics[NVML_GPM_METRIC_MAX]."""
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p), ("metrics", _GpmMetric * 477)]


# nvmlGpmMetricsGet_t written and read as bytes (a ctypes field access per value, and a
# ctypes.cast per sample pointer, cost more than the call): the header (version, numMetrics,
# sample1, sample2: 24 bytes, 64-bit pointers as every GPM driver has), then each
# nvmlGpmMetric_t as metricId, nvmlReturn, value (its three metricInfo strings skipped)
_GPM_METRICS_AT = 24
_GPM_METRIC = struct.Struct("=Iid24x")


def _request(count: int) -> struct.Struct:
    """The header and `count` metric ids, the rest of each metric zero (as a fresh struct)."""
    return struct.Struct("=IIQQ" + "I36x" * count)


def _address(sample: Any) -> int:
    """A sample's address (pynvml's opaque pointer), what nvmlGpmMetricsGet_t holds."""
    return ctypes.cast(sample, ctypes.c_void_p).value or 0


class GpmSamples:
    """The GPM samples of one initialisation, by key (a GPU, or a GPU and a MIG instance)."""

    def __init__(self, gateway: Calls):
        self._gateway = gateway
        self._taken: Dict[Any, float] = {}  # key -> when its previous sample was taken (monotonic s)
        # key -> [(previous sample, its address), (spare sample, its address)]: the address
        # is what nvmlGpmMetricsGet_t holds, taken once (ctypes.cast is a foreign call)
        self._samples: Dict[Any, List[Tuple[Any, int]]] = {}
        self._get: Any = None  # one nvmlGpmMetricsGet_t, reused
        self._requests: Dict[int, struct.Struct] = {}  # metric count -> its _request

    def supported(self, handle: Any, errors: List[Problem]) -> bool:
        gw = self._gateway
        if not gw.gpm:
            errors.append(Problem(GPM_SUPPORT, "unsupported", "NVML has no GPM calls (a driver older than 520)"))
            return False
        support = gw.read(GPM_SUPPORT, errors, handle)
        if support is not None and not support.isSupportedDevice:
            errors.append(Problem(GPM_SUPPORT, "unsupported", "GPM not supported on this GPU (Hopper and later)"))
            return False
        return support is not None

    def metrics(self, key: Any, handle: Any, gpu_instance: Optional[int], metric_ids: Tuple[int, ...],
                errors: List[Problem]) -> Optional[Dict[int, Optional[float]]]:
        """metric id -> value between this call's GPM sample and the previous one of `key`
        (a GPU, or with `gpu_instance` one MIG instance of it); None on the first call."""
        call = self._gateway.call_nvml
        samples = self._samples.get(key)
        if samples is None:
            samples = []
            for _ in range(2):
                sample, _ = call("nvmlGpmSampleAlloc", errors)
                if sample is None:
                    return None
                samples.append((sample, _address(sample)))
            self._samples[key] = samples
            first = True
        else:
            first = False
            taken_s = self._taken.get(key)
            if taken_s is not None and self._gateway.clock() - taken_s < MIN_APART_S:
                errors.append(Problem("nvmlGpmSampleGet", "unavailable",
                                      "GPM samples must be at least 100 ms apart (nvml.h): measured every other tick"))
                return None
        (previous, previous_at), (spare, spare_at) = samples
        if gpu_instance is None:
            taken, _ = self._gateway.call_direct("nvmlGpmSampleGet", errors, handle, spare)
        else:
            taken, _ = call("nvmlGpmMigSampleGet", errors, handle, gpu_instance, spare)
        if taken is None:
            self._samples.pop(key, None)  # start again from two new samples next time
            for sample, _ in samples:
                call("nvmlGpmSampleFree", None, sample)
            return None
        self._taken[key] = self._gateway.clock()
        samples.reverse()  # the new sample is the next call's previous one
        if first:
            return None
        get = self._get
        if get is None:
            get = self._get = _GpmMetricsGet()
        count = len(metric_ids)
        request = self._requests.get(count)
        if request is None:
            request = self._requests[count] = _request(count)
        request.pack_into(get, 0, _GPM_METRICS_GET_VERSION, count, previous_at, spare_at, *metric_ids)
        done, _ = self._gateway.call_direct("nvmlGpmMetricsGet", errors, ctypes.byref(get))
        if done is None:
            return None
        got = memoryview(get).cast("B")[_GPM_METRICS_AT:_GPM_METRICS_AT + _GPM_METRIC.size * count]
        return {metric: value if code == SUCCESS else None for metric, code, value in _GPM_METRIC.iter_unpack(got)}

    def free(self) -> None:
        call = self._gateway.call_nvml
        for samples in self._samples.values():
            for sample, _ in samples:
                call("nvmlGpmSampleFree", None, sample)
        self._samples = {}
        self._taken = {}
