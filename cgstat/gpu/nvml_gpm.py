"""GPM (GPU performance monitoring, drivers >= 520, Hopper and later): two samples kept per
device or MIG instance (`nvmlGpmSampleAlloc`, `nvmlGpmSampleGet`, `nvmlGpmMigSampleGet`,
`nvmlGpmSampleFree`), the metrics between them (`nvmlGpmMetricsGet`, called directly with one
reused `nvmlGpmMetricsGet_t`), per-GPU support (`nvmlGpmQueryDeviceSupport`). Every call goes
through the gateway.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from cgstat.gpu.nvml_codes import SUCCESS
from cgstat.kernel.sample import Problem

if TYPE_CHECKING:  # pragma: no cover
    from cgstat.gpu.nvml import Gateway

GPM_SUPPORT = "nvmlGpmQueryDeviceSupport"
_GPM_METRICS_GET_VERSION = 1


class _GpmMetric(ctypes.Structure):
    """nvmlGpmMetric_t (40 bytes): metricId, nvmlReturn, value, metricInfo (three strings)."""
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_double),
                ("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class _GpmMetricsGet(ctypes.Structure):
    """nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2, metrics[NVML_GPM_METRIC_MAX]."""
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p), ("metrics", _GpmMetric * 477)]


class GpmSamples:
    """The GPM samples of one initialisation, by key (a GPU, or a GPU and a MIG instance)."""

    def __init__(self, gateway: Gateway):
        self._gateway = gateway
        self._samples: Dict[Any, List[Any]] = {}  # key -> [previous sample, spare sample]
        self._get: Any = None  # one nvmlGpmMetricsGet_t, reused

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
            samples = [None, None]
            for i in range(2):
                samples[i], _ = call("nvmlGpmSampleAlloc", errors)
                if samples[i] is None:
                    return None
            self._samples[key] = samples
            first = True
        else:
            first = False
        previous, spare = samples
        if gpu_instance is None:
            taken, _ = self._gateway.call_direct("nvmlGpmSampleGet", errors, handle, spare)
        else:
            taken, _ = call("nvmlGpmMigSampleGet", errors, handle, gpu_instance, spare)
        if taken is None:
            self._samples.pop(key, None)  # start again from two new samples next time
            for sample in samples:
                call("nvmlGpmSampleFree", None, sample)
            return None
        samples[0], samples[1] = spare, previous  # the new sample is the next call's previous one
        if first:
            return None
        get = self._get
        if get is None:
            get = self._get = _GpmMetricsGet()
        get.version = _GPM_METRICS_GET_VERSION
        get.numMetrics = len(metric_ids)
        get.sample1 = ctypes.cast(previous, ctypes.c_void_p)
        get.sample2 = ctypes.cast(spare, ctypes.c_void_p)
        metrics = get.metrics
        for i, metric in enumerate(metric_ids):
            metrics[i].metricId = metric
        done, _ = self._gateway.call_c("nvmlGpmMetricsGet", errors, ctypes.byref(get))
        if done is None:
            return None
        out: Dict[int, Optional[float]] = {}
        for i in range(len(metric_ids)):
            m = metrics[i]
            out[m.metricId] = m.value if m.nvmlReturn == SUCCESS else None
        return out

    def free(self) -> None:
        call = self._gateway.call_nvml
        for samples in self._samples.values():
            for sample in samples:
                if sample is not None:
                    call("nvmlGpmSampleFree", None, sample)
        self._samples = {}
