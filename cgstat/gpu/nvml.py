"""The one NVML gateway: every call cgstat makes to the NVIDIA driver library goes through here.

`pynvml` (the module of the nvidia-ml-py distribution) is imported, and NVML initialised, on
first use only: importing cgstat never loads it. Every call goes through `Gateway._call`,
which turns NOT_SUPPORTED and NOT_FOUND into None, a missing symbol (an older driver) into
None plus one warning for the life of the process, and any other NVML error into a
`Problem` on the device it concerns. `NVMLLibraryMismatchError` (raised by pynvml's
unversioned wrappers when a versioned symbol is missing) is not an `NVMLError` and is caught
too.

Versioned symbols are probed once per initialisation, never per call:
- process lists: `_v3` -> `_v2` -> unversioned (16-byte struct; drivers 430/440), the
  way nvitop and gpustat fall back;
- per-process utilization: `nvmlDeviceGetProcessesUtilizationInfo` (drivers >= 550; on
  some recent GPUs the older call returns 0 for everything, Project-HAMi #2015), else
  `nvmlDeviceGetProcessUtilization`;
- memory: `nvmlDeviceGetMemoryInfo_v2` (its `used` excludes the reserved memory that v1
  `used` includes on drivers >= 510, gpustat #141), else v1;
- clock-event reasons: `nvmlDeviceGetCurrentClocksEventReasons` (drivers >= 535), else the
  older name `nvmlDeviceGetCurrentClocksThrottleReasons` (the same bit mask);
- MPS clients: `nvmlDeviceGetMPSComputeRunningProcesses_v3`, else `_v2`;
- GPM (`nvmlGpm*`, drivers >= 520): present or not; per GPU, `nvmlGpmQueryDeviceSupport`.

Device-health reads (`read`) turn NOT_SUPPORTED into None plus an "unsupported" problem,
and remember it per device until the next initialisation: a board that lacks a counter
lacks it for good, and the call is not made again each tick.

XIDs come from one NVML event set made at initialisation (`nvmlEventSetCreate`, every GPU
registered for `nvmlEventTypeXidCriticalError`); `xids()` drains it with
`nvmlEventSetWait_v2(set, 0)`: a zero timeout returns at once (NVML_ERROR_TIMEOUT when
nothing is pending), so the tick never waits on the driver.

A GPU that falls off the bus (GPU_IS_LOST) or a driver reload (stale handles) puts an error
on that device and schedules a re-initialisation after `reinit_backoff_s`; the other devices
are read as usual. No library, no driver, no GPU, no permission: the gateway is unavailable,
`reason` says why in one line, and initialisation is tried again every `retry_s`.

Times: `clock` (monotonic) for back-offs, `wallclock` (Unix seconds) for NVML's lastSeen
timestamps; both can be replaced in tests.
"""

from __future__ import annotations

import ctypes
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from cgstat.kernel.sample import Problem

LIBRARY = "libnvidia-ml.so.1"

# nvml.h return codes
SUCCESS = 0
UNINITIALIZED = 1
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999

# errors after which the library is shut down and initialised again (after the back-off)
_REINIT_CODES = frozenset((UNINITIALIZED, DRIVER_NOT_LOADED, GPU_IS_LOST, RESET_REQUIRED,
                           LIB_RM_VERSION_MISMATCH, UNKNOWN))

# nvidia-ml-py releases that read the process lists with the wrong struct size: PIDs and
# memory come out shuffled (nvitop #75, gpustat #161; gpustat requires >= 12.535.108)
BAD_RELEASES = frozenset(("12.535.77",))
_PROCESS_STRUCT_BYTES = 24  # nvmlProcessInfo_v2_t / _v3_t on every driver outside 535.43-535.86

_VALUE_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # usedGpuMemory "not available"
TIMEOUT = 10  # NVML_ERROR_TIMEOUT: nvmlEventSetWait found no event
XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_XIDS_PER_TICK = 256  # an XID storm is drained over several ticks, never in one long loop

_PROCESS_SYMBOLS = {
    "compute": ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses"),
    "graphics": ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                 "nvmlDeviceGetGraphicsRunningProcesses"),
}
_UTIL_NEW = "nvmlDeviceGetProcessesUtilizationInfo"
_UTIL_OLD = "nvmlDeviceGetProcessUtilization"
_MEMORY_V2 = "nvmlDeviceGetMemoryInfo_v2"
_REASONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
_MPS = ("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2")
_GPM = "nvmlGpmQueryDeviceSupport"


# The driver's structs, read as bytes (native order: the driver's own)
_PROCESS_V1 = struct.Struct("=I4xQ")  # nvmlProcessInfo_v1_t: pid, usedGpuMemory (16 bytes)
_PROCESS_V2 = struct.Struct("=I4xQII")  # _v2/_v3: and gpuInstanceId, computeInstanceId (24 bytes)
_SAMPLE_V1 = struct.Struct("=I4xQIIII")  # nvmlProcessUtilizationSample_t: pid, timeStamp, sm, mem, enc, dec (32)
_SAMPLE_INFO = struct.Struct("=QIIIIIII4x")  # nvmlProcessUtilizationInfo_v1_t: timeStamp, pid, sm, mem, enc,
#                                               dec, jpg, ofa (40)
_UTIL_INFO_VERSION = 0x01000018  # nvmlProcessesUtilizationInfo_v1


# The calls made every tick that read() makes directly: their outputs after the arguments
# ("I" unsigned int, "Q" unsigned long long, "violation" an nvmlViolationTime_t).
_NATIVE: Dict[str, Any] = {
    "nvmlDeviceGetClockInfo": "I", "nvmlDeviceGetCurrentClocksEventReasons": "Q",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "Q", "nvmlDeviceGetViolationStatus": "violation",
    "nvmlDeviceGetTotalEnergyConsumption": "Q", "nvmlDeviceGetEncoderUtilization": "II",
    "nvmlDeviceGetDecoderUtilization": "II", "nvmlDeviceGetTotalEccErrors": "Q",
    "nvmlDeviceGetPcieReplayCounter": "I", "nvmlDeviceGetFieldValues": "fields",
}
_FIELD_VALUE = struct.Struct("=IIqqIiQ")  # nvmlFieldValue_t: fieldId, scopeId, timestamp, latencyUsec,
#                                           valueType, nvmlReturn, value (40 bytes)
_GPM_METRICS_GET_VERSION = 1


def _field_values_call(fn: Any, error: Any) -> Callable[..., List[Tuple[int, Optional[int]]]]:
    """nvmlDeviceGetFieldValues with the nvmlFieldValue_t array read as bytes (unsigned values)."""
    size = _FIELD_VALUE.size
    made: Dict[Tuple[Tuple[int, int], ...], Any] = {}

    def call(handle: Any, fields: Tuple[Tuple[int, int], ...]) -> List[Tuple[int, Optional[int]]]:
        template = made.get(fields)
        if template is None:
            template = made[fields] = b"".join(_FIELD_VALUE.pack(f, scope, 0, 0, 0, 0, 0) for f, scope in fields)
        buf = ctypes.create_string_buffer(template, len(template))
        ret = fn(handle, ctypes.c_int32(len(fields)), buf)
        if ret:
            raise error(ret)
        return [(row[5], row[6] if row[5] == SUCCESS else None) for row in _FIELD_VALUE.iter_unpack(buf.raw)]
    return call


class _GpmMetric(ctypes.Structure):
    """nvmlGpmMetric_t (40 bytes): metricId, nvmlReturn, value, metricInfo (three strings)."""
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_double),
                ("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class _GpmMetricsGet(ctypes.Structure):
    """nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2, metrics[NVML_GPM_METRIC_MAX]."""
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p), ("metrics", _GpmMetric * 477)]


class _UtilizationInfo(ctypes.Structure):
    """nvmlProcessesUtilizationInfo_v1_t (24 bytes)."""
    _fields_ = [("version", ctypes.c_uint), ("processSamplesCount", ctypes.c_uint),
                ("lastSeenTimeStamp", ctypes.c_ulonglong), ("procUtilArray", ctypes.c_void_p)]


def release_problem(version: Optional[str], process_struct_bytes: Optional[int] = None) -> Optional[str]:
    """Why this pynvml cannot be used (None when it can): a release known to shuffle PIDs."""
    if version in BAD_RELEASES:
        return (f"nvidia-ml-py {version} reads GPU process lists with the wrong struct size "
                "(PIDs and memory come out shuffled); install nvidia-ml-py >= 12.535.108")
    if process_struct_bytes is not None and process_struct_bytes != _PROCESS_STRUCT_BYTES:
        return (f"this pynvml uses a {process_struct_bytes}-byte process struct where the driver "
                f"uses {_PROCESS_STRUCT_BYTES} (PIDs and memory would come out shuffled); "
                "install nvidia-ml-py >= 12.535.108")
    return None


def _distribution_version() -> Optional[str]:
    try:
        from importlib import metadata  # Python >= 3.8
    except ImportError:  # pragma: no cover - Python 3.7
        try:
            import importlib_metadata as metadata  # type: ignore
        except ImportError:
            return None
    try:
        return metadata.version("nvidia-ml-py")
    except Exception:
        return None  # a vendored or renamed copy: the struct-size check still applies


class Gpu:
    """One full GPU as enumerated at initialisation (handles stay valid until shutdown)."""

    __slots__ = ("index", "handle", "uuid", "name", "problem", "address", "xid_problem")

    def __init__(self, index: int, handle: Any, uuid: Optional[str], name: Optional[str],
                 problem: Optional[Problem]):
        self.index = index
        self.handle = handle  # None when the GPU could not be opened (problem says why)
        self.uuid = uuid
        self.name = name
        self.problem = problem  # set while the GPU is lost
        # the handle's address: how an event names its GPU
        self.address = None if handle is None else ctypes.cast(handle, ctypes.c_void_p).value
        self.xid_problem: Optional[Problem] = None  # why XIDs are not watched on this GPU


class Gateway:
    def __init__(self, warn: Optional[Callable[[str, str], None]] = None,
                 reinit_backoff_s: float = 30.0, retry_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 wallclock: Callable[[], float] = time.time):
        self.warn = warn
        self.reinit_backoff_s = reinit_backoff_s
        self.retry_s = retry_s
        self.clock = clock
        self.wallclock = wallclock
        self.reason: Optional[str] = "NVML not initialised yet"
        self.driver_version: Optional[str] = None
        self.process_symbols: Dict[str, Optional[str]] = {}  # kind -> the C symbol chosen
        self.utilization_symbol: Optional[str] = None
        self.memory_v2 = False
        self.reasons_symbol: Optional[str] = None
        self.mps_symbol: Optional[str] = None
        self.gpm = False  # the driver has the GPM calls (each GPU still says whether it supports them)
        self.cuda_version: Optional[str] = None  # "12.4": the CUDA version the driver supports
        self.inits = 0  # successful initialisations (re-inits after a lost GPU included)
        self._nv: Any = None  # the pynvml module
        self._errors: Tuple[Type[BaseException], ...] = ()
        self._ready = False
        self._next_try = float("-inf")
        self._reinit_at: Optional[float] = None
        self._gpus: List[Gpu] = []
        self._missing_said: set = set()
        self._last_seen: Dict[str, int] = {}  # device uuid -> newest sample timestamp (µs)
        self._process_fns: Dict[str, Optional[Callable[[Any], List[Tuple[int, Optional[int]]]]]] = {}
        self._sampler: Callable[[Any, int], List[Tuple[int, ...]]] = _no_sampler
        self._unsupported: Dict[Tuple[Any, ...], Problem] = {}  # (handle address, source, args) -> its problem
        self._events: Any = None  # the NVML event set XIDs arrive on
        self._gpm_samples: Dict[Any, List[Any]] = {}  # key -> [previous sample, spare sample]
        self._gpm_get: Any = None  # one nvmlGpmMetricsGet_t, reused
        self._natives: Dict[str, Callable[..., Any]] = {}  # source -> the call read() makes

    # ---- life cycle -----------------------------------------------------------------

    def available(self) -> bool:
        """Initialise (or re-initialise after a lost GPU) when due; True when NVML can be read."""
        now = self.clock()
        if self._ready and self._reinit_at is not None and now >= self._reinit_at:
            self._shutdown()
            self._next_try = now
        if not self._ready and now >= self._next_try:
            self._init(now)
        return self._ready

    def gpus(self) -> List[Gpu]:
        """The GPUs found at initialisation (empty while unavailable)."""
        return self._gpus if self._ready else []

    def close(self) -> None:
        if self._ready:
            self._shutdown()

    def _unavailable(self, reason: str, now: float) -> None:
        self._ready = False
        self.reason = reason
        self._next_try = now + self.retry_s
        self._gpus = []

    def _init(self, now: float) -> None:
        if self._nv is None:
            if not _library_loadable():
                # Most hosts have no NVIDIA driver: say so without importing pynvml (~8 ms of
                # ctypes declarations per start); its nvmlInit would dlopen the same name.
                self._unavailable(_init_reason(LIBRARY_NOT_FOUND, None), now)
                return
            try:
                import pynvml  # noqa: WPS433 - lazily, so that importing cgstat never loads it
            except ImportError:
                self._unavailable("pynvml is not installed (pip install nvidia-ml-py)", now)
                return
            self._nv = pynvml
            self._errors = (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError)
        nv = self._nv
        try:
            nv.nvmlInit()
        except self._errors as exc:
            self._unavailable(_init_reason(getattr(exc, "value", None), exc), now)
            return
        except OSError as exc:  # pragma: no cover - pynvml turns these into LibraryNotFound
            self._unavailable(f"cannot load {LIBRARY}: {exc}", now)
            return
        # The release check reads the installed distribution's metadata (importlib.metadata,
        # ~12 ms): only once a driver answered, so a GPU-less host never pays for it. Nothing
        # has been read through pynvml yet; a bad release shuts NVML down again.
        problem = release_problem(_distribution_version(),
                                  ctypes.sizeof(getattr(nv, "c_nvmlProcessInfo_v3_t",
                                                        nv.c_nvmlProcessInfo_t)))
        if problem:
            self._shutdown()
            self._unavailable(problem, now)
            return
        self._ready = True
        self._reinit_at = None
        self.inits += 1
        self.driver_version, _ = self._call("nvmlSystemGetDriverVersion", None, nv.nvmlSystemGetDriverVersion)
        self._probe_symbols()
        count, code = self._call("nvmlDeviceGetCount", None, nv.nvmlDeviceGetCount)
        if count is None:
            self._shutdown()
            self._unavailable(_init_reason(code, "cannot count the GPUs"), now)
            return
        if count == 0:
            self._shutdown()
            self._unavailable("no NVIDIA GPU found (NVML lists none)", now)
            return
        self._gpus = [self._open(i) for i in range(count)]
        self.cuda_version = _cuda_version(self._call("nvmlSystemGetCudaDriverVersion", None,
                                                     nv.nvmlSystemGetCudaDriverVersion)[0])
        self._watch_xids()
        self.reason = None

    def _open(self, index: int) -> Gpu:
        nv = self._nv
        errors: List[Problem] = []
        handle, _ = self._call("nvmlDeviceGetHandleByIndex", errors, nv.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            return Gpu(index, None, None, None, errors[0] if errors else
                       Problem("nvmlDeviceGetHandleByIndex", "unavailable", f"GPU {index} cannot be opened"))
        uuid, _ = self._call("nvmlDeviceGetUUID", errors, nv.nvmlDeviceGetUUID, handle)
        name, _ = self._call("nvmlDeviceGetName", errors, nv.nvmlDeviceGetName, handle)
        lost = [p for p in errors if p.error == "gpu_lost"]
        return Gpu(index, None if lost else handle, uuid, name, lost[0] if lost else None)

    def _shutdown(self) -> None:
        self._ready = False
        self._gpus = []
        self._unsupported = {}
        self._natives = {}
        nv = self._nv
        for samples in self._gpm_samples.values():
            for sample in samples:
                if sample is not None:
                    self._call("nvmlGpmSampleFree", None, nv.nvmlGpmSampleFree, sample)
        self._gpm_samples = {}
        if self._events is not None:
            self._call("nvmlEventSetFree", None, nv.nvmlEventSetFree, self._events)
            self._events = None
        try:
            self._nv.nvmlShutdown()
        except self._errors:
            pass  # a lost GPU or a reloaded driver can refuse; the next init starts afresh

    def _probe_symbols(self) -> None:
        """Pick, once per initialisation, the versioned symbols this driver has."""
        self._process_fns = {}
        for kind, names in _PROCESS_SYMBOLS.items():
            chosen = next((n for n in names if self._has(n)), None)
            self.process_symbols[kind] = chosen
            if chosen is None:
                self._say_missing(names[-1], f"no {kind} processes can be listed")
            elif chosen != names[0]:
                self._say_missing(names[0], f"using {chosen} (an older driver)")
            self._process_fns[kind] = self._process_lister(chosen)
        if self._has(_UTIL_NEW) and hasattr(self._nv, _UTIL_NEW):  # pynvml >= 12.560.30
            self.utilization_symbol = _UTIL_NEW
        else:
            self._say_missing(_UTIL_NEW, f"using {_UTIL_OLD} (an older driver)")
            self.utilization_symbol = _UTIL_OLD if self._has(_UTIL_OLD) else None
            if self.utilization_symbol is None:
                self._say_missing(_UTIL_OLD, "no per-process utilization")
        self._sampler = self._utilization_reader(self.utilization_symbol)
        self.memory_v2 = self._has(_MEMORY_V2)
        if not self.memory_v2:
            self._say_missing(_MEMORY_V2, "memory used includes reserved memory and reserved is unknown")
        self.reasons_symbol = self._first(_REASONS, "no clock-event reasons")
        self.mps_symbol = self._first(_MPS, "no MPS clients listed")
        self._process_fns["mps"] = self._process_lister(self.mps_symbol)
        self.gpm = self._has(_GPM)
        if not self.gpm:
            self._say_missing(_GPM, "no GPM metrics (an older driver)")

    def _first(self, names: Tuple[str, ...], none: str) -> Optional[str]:
        """The first of `names` the driver has (the newest first); said once when not the first."""
        chosen = next((n for n in names if self._has(n)), None)
        if chosen is None:
            self._say_missing(names[-1], none)
        elif chosen != names[0]:
            self._say_missing(names[0], f"using {chosen} (an older driver)")
        return chosen

    def _has(self, symbol: str) -> bool:
        try:
            self._nv._nvmlGetFunctionPointer(symbol)
            return True
        except self._errors:
            return False

    def _say_missing(self, symbol: str, consequence: str) -> None:
        if symbol in self._missing_said:
            return
        self._missing_said.add(symbol)
        if self.warn is not None:
            self.warn("nvml-missing:" + symbol, f"NVML has no {symbol}: {consequence}")

    # ---- the one place every call goes through -----------------------------------------

    def _call(self, source: str, errors: Optional[List[Problem]], fn: Callable, *args) -> Tuple[Any, int]:
        """(value, 0) or (None, NVML return code); NOT_SUPPORTED/NOT_FOUND leave no problem."""
        try:
            return fn(*args), SUCCESS
        except self._errors as exc:
            code = getattr(exc, "value", FUNCTION_NOT_FOUND)  # LibraryMismatch: a missing symbol
            text = str(exc)
        if code in (NOT_SUPPORTED, NOT_FOUND):
            return None, code
        if code == FUNCTION_NOT_FOUND:
            self._say_missing(source, "value left null")
            return None, code
        if code in _REINIT_CODES and self._reinit_at is None:
            self._reinit_at = self.clock() + self.reinit_backoff_s
        if errors is not None:
            errors.append(Problem(source, _error_name(code), f"NVML error {code}: {text}"))
        return None, code

    def read(self, source: str, errors: List[Problem], handle: Any, *args: Any, device: Any = None) -> Any:
        """pynvml's `source`(handle, *args): its value, or None. NOT_SUPPORTED adds an
        "unsupported" problem, remembered per device until the next initialisation (the call
        is not made again); other errors are problems as in every call. `device`: what
        names the device in that memory (default: the handle's address).

        The calls made every tick (_NATIVE) skip pynvml's wrappers: their C symbol is called
        with output variables made once, which is several times cheaper per call."""
        if device is None:
            device = ctypes.cast(handle, ctypes.c_void_p).value
        key = (device, source, args)
        known = self._unsupported.get(key)
        if known is not None:
            errors.append(known)
            return None
        fn = self._natives.get(source)
        if fn is None:
            fn = self._natives[source] = self._native(source)
        value, code = self._call(source, errors, fn, handle, *args)
        if value is None and code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
            problem = Problem(source, "unsupported", "NVML: not supported on this GPU or driver")
            self._unsupported[key] = problem
            errors.append(problem)
        return value

    def field_values(self, handle: Any, fields: Tuple[Tuple[int, int], ...], errors: List[Problem],
                     device: Any = None) -> Optional[List[Tuple[int, Optional[int]]]]:
        """One nvmlDeviceGetFieldValues call for (field id, scope id) pairs: (its NVML return
        code, the unsigned value or None) per field, in order; None when the call failed."""
        return self.read("nvmlDeviceGetFieldValues", errors, handle, fields, device=device)

    def _native(self, source: str) -> Callable[..., Any]:
        """A direct call of `source` where _NATIVE describes its outputs, else pynvml's wrapper."""
        nv = self._nv
        outputs = _NATIVE.get(source)
        if outputs is None:
            return getattr(nv, source)
        try:
            fn = nv._nvmlGetFunctionPointer(source)
        except self._errors:
            return getattr(nv, source)  # missing: its wrapper raises FunctionNotFound, said as unsupported
        error = nv.NVMLError
        if source == "nvmlDeviceGetFieldValues":
            return _field_values_call(fn, error)
        if outputs == "violation":
            pair = (ctypes.c_ulonglong * 2)()  # nvmlViolationTime_t {referenceTime, violationTime}

            def violation(handle: Any, *args: Any) -> Tuple[int, int]:
                ret = fn(handle, *args, pair)
                if ret:
                    raise error(ret)
                return pair[0], pair[1]
            return violation
        outs = [ctypes.c_ulonglong() if kind == "Q" else ctypes.c_uint() for kind in outputs]
        refs = [ctypes.byref(o) for o in outs]
        if len(outs) == 1:
            out, ref = outs[0], refs[0]

            def one(handle: Any, *args: Any) -> int:
                ret = fn(handle, *args, ref)
                if ret:
                    raise error(ret)
                return out.value
            return one

        def several(handle: Any, *args: Any) -> Tuple[int, ...]:
            ret = fn(handle, *args, *refs)
            if ret:
                raise error(ret)
            return tuple(o.value for o in outs)
        return several

    def mps_processes(self, handle: Any, errors: List[Problem]) -> List[Tuple[int, Optional[int]]]:
        """(pid, used memory) of the MPS clients on the device ([] without MPS or the call)."""
        return self.processes(handle, "mps", errors) if self.mps_symbol else []

    # ---- XIDs: the event set made at initialisation ----------------------------------

    def _watch_xids(self) -> None:
        nv = self._nv
        if not self._has("nvmlEventSetCreate"):
            problem = Problem("nvmlEventSetCreate", "unsupported", "NVML has no event API: XIDs not watched")
            for gpu in self._gpus:
                gpu.xid_problem = problem
            return
        errors: List[Problem] = []
        self._events, _ = self._call("nvmlEventSetCreate", errors, nv.nvmlEventSetCreate)
        for gpu in self._gpus:
            if gpu.handle is None:
                continue
            if self._events is None:
                gpu.xid_problem = errors[0] if errors else Problem("nvmlEventSetCreate", "read_failed", "no event set")
                continue
            mine: List[Problem] = []
            _, code = self._call("nvmlDeviceRegisterEvents", mine, nv.nvmlDeviceRegisterEvents, gpu.handle,
                                 XID_EVENT, self._events)
            if code == NOT_SUPPORTED:
                gpu.xid_problem = Problem("nvmlDeviceRegisterEvents", "unsupported",
                                          "NVML: XID events not supported on this GPU")
            elif mine:
                gpu.xid_problem = mine[0]

    def xids(self) -> List[Tuple[Gpu, int]]:
        """The XIDs that arrived since the last call: (GPU, XID code), oldest first. Never waits."""
        events = self._events
        if events is None or not self._ready:
            return []
        by_address: Dict[Optional[int], Gpu] = {g.address: g for g in self._gpus if g.address is not None}
        wait = self._nv.nvmlEventSetWait_v2
        out: List[Tuple[Gpu, int]] = []
        for _ in range(_XIDS_PER_TICK):
            data, _ = self._call("nvmlEventSetWait_v2", None, wait, events, 0)
            if data is None:
                break  # TIMEOUT: nothing pending (or an error: tried again next tick)
            if data.eventType != XID_EVENT:
                continue
            gpu = by_address.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if gpu is not None:
                out.append((gpu, int(data.eventData)))
        return out

    # ---- GPM: two samples per device, the metrics between them ------------------------

    def gpm_supported(self, handle: Any, errors: List[Problem]) -> bool:
        if not self.gpm:
            errors.append(Problem(_GPM, "unsupported", "NVML has no GPM calls (a driver older than 520)"))
            return False
        support = self.read(_GPM, errors, handle)
        if support is not None and not support.isSupportedDevice:
            errors.append(Problem(_GPM, "unsupported", "GPM not supported on this GPU (Hopper and later)"))
            return False
        return support is not None

    def gpm_metrics(self, key: Any, handle: Any, gpu_instance: Optional[int], metric_ids: Tuple[int, ...],
                    errors: List[Problem]) -> Optional[Dict[int, Optional[float]]]:
        """metric id -> value between this call's GPM sample and the previous one of `key`
        (a GPU, or with `gpu_instance` one MIG instance of it); None on the first call."""
        nv = self._nv
        samples = self._gpm_samples.get(key)
        if samples is None:
            samples = [None, None]
            for i in range(2):
                samples[i], _ = self._call("nvmlGpmSampleAlloc", errors, nv.nvmlGpmSampleAlloc)
                if samples[i] is None:
                    return None
            self._gpm_samples[key] = samples
            first = True
        else:
            first = False
        previous, spare = samples
        if gpu_instance is None:
            taken, _ = self._call("nvmlGpmSampleGet", errors, nv.nvmlGpmSampleGet, handle, spare)
        else:
            taken, _ = self._call("nvmlGpmMigSampleGet", errors, nv.nvmlGpmMigSampleGet, handle,
                                  gpu_instance, spare)
        if taken is None:
            self._gpm_samples.pop(key, None)  # start again from two new samples next time
            for sample in samples:
                self._call("nvmlGpmSampleFree", None, nv.nvmlGpmSampleFree, sample)
            return None
        samples[0], samples[1] = spare, previous  # the new sample is the next call's previous one
        if first:
            return None
        get = self._gpm_get
        if get is None:
            get = self._gpm_get = _GpmMetricsGet()
        get.version = _GPM_METRICS_GET_VERSION
        get.numMetrics = len(metric_ids)
        get.sample1 = ctypes.cast(previous, ctypes.c_void_p)
        get.sample2 = ctypes.cast(spare, ctypes.c_void_p)
        metrics = get.metrics
        for i, metric in enumerate(metric_ids):
            metrics[i].metricId = metric
        done, _ = self._call("nvmlGpmMetricsGet", errors, self._gpm_metrics_get, get)
        if done is None:
            return None
        out: Dict[int, Optional[float]] = {}
        for i in range(len(metric_ids)):
            m = metrics[i]
            out[m.metricId] = m.value if m.nvmlReturn == SUCCESS else None
        return out

    def _gpm_metrics_get(self, get: Any) -> Any:
        fn = self._nv._nvmlGetFunctionPointer("nvmlGpmMetricsGet")
        ret = fn(ctypes.byref(get))
        if ret:
            raise self._nv.NVMLError(ret)
        return get

    # ---- per-device reads (errors: the device's problem list, appended to) ----------

    def lost(self, gpu: Gpu, errors: List[Problem]) -> bool:
        """True when the GPU was lost earlier (it is not called until the re-initialisation)."""
        if gpu.handle is None:
            errors.append(gpu.problem or Problem("nvml", "unavailable", f"GPU {gpu.index} not opened"))
            return True
        return False

    def mark_lost(self, gpu: Gpu, errors: List[Problem]) -> None:
        """After a GPU_IS_LOST on this GPU: stop calling it until the re-initialisation."""
        for p in errors:
            if p.error == "gpu_lost":
                gpu.handle = None
                gpu.problem = p
                return

    def uuid(self, handle: Any, errors: List[Problem]) -> Optional[str]:
        return self._call("nvmlDeviceGetUUID", errors, self._nv.nvmlDeviceGetUUID, handle)[0]

    def name(self, handle: Any, errors: List[Problem]) -> Optional[str]:
        return self._call("nvmlDeviceGetName", errors, self._nv.nvmlDeviceGetName, handle)[0]

    def memory(self, handle: Any, errors: List[Problem]) -> Tuple[Optional[int], Optional[int], Optional[int]]:
        """(total, used, reserved) bytes; reserved None where only v1 exists."""
        nv = self._nv
        if self.memory_v2:
            m, code = self._call(_MEMORY_V2, errors, nv.nvmlDeviceGetMemoryInfo, handle, nv.nvmlMemory_v2)
            if m is not None:
                return m.total, m.used, m.reserved
            if code != NOT_SUPPORTED:
                return None, None, None
        m, _ = self._call("nvmlDeviceGetMemoryInfo", errors, nv.nvmlDeviceGetMemoryInfo, handle)
        if m is None:
            return None, None, None
        return m.total, m.used, None

    def utilization(self, handle: Any, errors: List[Problem]) -> Tuple[Optional[int], Optional[int]]:
        """(gpu %, memory %) over the driver's last sample period."""
        u, _ = self._call("nvmlDeviceGetUtilizationRates", errors, self._nv.nvmlDeviceGetUtilizationRates, handle)
        return (None, None) if u is None else (u.gpu, u.memory)

    def temperature(self, handle: Any, errors: List[Problem]) -> Optional[int]:
        nv = self._nv
        return self._call("nvmlDeviceGetTemperature", errors, nv.nvmlDeviceGetTemperature, handle,
                          nv.NVML_TEMPERATURE_GPU)[0]

    def power_mw(self, handle: Any, errors: List[Problem]) -> Optional[int]:
        return self._call("nvmlDeviceGetPowerUsage", errors, self._nv.nvmlDeviceGetPowerUsage, handle)[0]

    def mig_mode(self, handle: Any, errors: List[Problem]) -> Optional[bool]:
        modes, _ = self._call("nvmlDeviceGetMigMode", errors, self._nv.nvmlDeviceGetMigMode, handle)
        return None if modes is None else modes[0] == self._nv.NVML_DEVICE_MIG_ENABLE

    def mig_devices(self, handle: Any, errors: List[Problem]) -> List[Tuple[int, Any]]:
        """(slot, handle) of each MIG device of a MIG-enabled GPU."""
        nv = self._nv
        most, _ = self._call("nvmlDeviceGetMaxMigDeviceCount", errors, nv.nvmlDeviceGetMaxMigDeviceCount, handle)
        found = []
        for slot in range(most or 0):
            h, _ = self._call("nvmlDeviceGetMigDeviceHandleByIndex", errors,
                              nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            if h is not None:  # NOT_FOUND: an empty slot
                found.append((slot, h))
        return found

    def processes(self, handle: Any, kind: str, errors: List[Problem]) -> List[Tuple[int, Optional[int]]]:
        """(pid, used memory bytes or None) of the `kind` ("compute"/"graphics") processes."""
        fn = self._process_fns.get(kind)
        if fn is None:
            return []
        symbol = self.mps_symbol if kind == "mps" else self.process_symbols[kind]
        procs, _ = self._call(symbol or kind, errors, fn, handle)
        return procs or []

    def process_utilization(self, handle: Any, key: str,
                            errors: List[Problem]) -> Optional[Dict[int, Tuple[int, int, int, int]]]:
        """pid -> (sm, mem, enc, dec) % of the newest sample since the previous call.

        {} when no process was busy (NOT_FOUND: idle, 0 %); None where NVML cannot measure it
        (MIG, unsupported, or an error, which is in `errors`). `key` (the device's UUID) keeps
        the newest timestamp seen, passed as lastSeen next time (first call: now - 1 s).
        """
        symbol = self.utilization_symbol
        if symbol is None:
            return None
        last = self._last_seen.get(key)
        if last is None:
            last = int((self.wallclock() - 1.0) * 1e6)
        samples, code = self._call(symbol, errors, self._sampler, handle, last)
        if samples is None:
            if code == NOT_FOUND:
                self._last_seen[key] = last
                return {}
            return None
        newest: Dict[int, Tuple[int, int, int, int, int]] = {}  # pid -> (ts, sm, mem, enc, dec)
        top = last
        for pid, ts, sm, mem, enc, dec in samples:
            if ts > top:
                top = ts
            old = newest.get(pid)
            if old is None or ts > old[0]:
                newest[pid] = (ts, sm, mem, enc, dec)
        self._last_seen[key] = top
        return {pid: s[1:] for pid, s in newest.items()}

    def _utilization_reader(self, symbol: Optional[str]) -> Callable[[Any, int], List[Tuple[int, ...]]]:
        """The per-process utilization call for `symbol`, NVML's two-call protocol with the
        samples read as bytes: [(pid, timeStamp, sm, mem, enc, dec)]; raises NVMLError
        (NOT_FOUND: no sample newer than lastSeen)."""
        if symbol is None:
            return _no_sampler
        nv = self._nv
        fn = nv._nvmlGetFunctionPointer(symbol)
        byref = ctypes.byref
        if symbol == _UTIL_NEW:
            size = _SAMPLE_INFO.size

            def new(handle: Any, last: int) -> List[Tuple[int, ...]]:
                info = _UtilizationInfo(_UTIL_INFO_VERSION, 0, last, None)
                ret = fn(handle, byref(info))
                if ret != INSUFFICIENT_SIZE:
                    raise nv.NVMLError(ret)  # NOT_FOUND: idle; SUCCESS without a buffer: a broken driver
                buf = ctypes.create_string_buffer(size * info.processSamplesCount)
                info.procUtilArray = ctypes.addressof(buf)
                ret = fn(handle, byref(info))
                if ret != SUCCESS:
                    raise nv.NVMLError(ret)
                return [(pid, ts, sm, mem, enc, dec) for ts, pid, sm, mem, enc, dec, _, _
                        in _SAMPLE_INFO.iter_unpack(buf.raw[:size * info.processSamplesCount])]
            return new
        size = _SAMPLE_V1.size

        def old(handle: Any, last: int) -> List[Tuple[int, ...]]:
            count = ctypes.c_uint(0)
            stamp = ctypes.c_ulonglong(last)
            ret = fn(handle, None, byref(count), stamp)
            if ret != INSUFFICIENT_SIZE:
                raise nv.NVMLError(ret)
            buf = ctypes.create_string_buffer(size * count.value)
            ret = fn(handle, buf, byref(count), stamp)
            if ret != SUCCESS:
                raise nv.NVMLError(ret)
            return list(_SAMPLE_V1.iter_unpack(buf.raw[:size * count.value]))
        return old

    # ---- process lists: the symbol chosen at initialisation ---------------------------

    def _process_lister(self, symbol: Optional[str]) -> Optional[Callable[[Any], List[Tuple[int, Optional[int]]]]]:
        """The process-list call for `symbol`: NVML's two-call protocol through pynvml's
        function-pointer getter, the structs (24 bytes for _v2/_v3, 16 for the unversioned
        call, which pynvml has no wrapper for) read as bytes, only pid and memory: several
        times cheaper than pynvml's wrappers, which build a Python object per process."""
        if symbol is None:
            return None
        nv = self._nv
        # the driver's layouts (notes/nvml.md): pid @0, usedGpuMemory @8, and for _v2/_v3
        # the MIG instance IDs @16 and @20; read as bytes (pynvml's struct classes convert
        # every field they hand out, which cost ~1 ms a tick at 400 processes)
        layout = _PROCESS_V2 if symbol.endswith(("_v2", "_v3")) else _PROCESS_V1
        size = layout.size
        fn = nv._nvmlGetFunctionPointer(symbol)
        byref = ctypes.byref

        def lister(handle):
            count = ctypes.c_uint(0)
            ret = fn(handle, byref(count), None)
            if ret == SUCCESS:
                return []  # no process
            if ret != INSUFFICIENT_SIZE:
                raise nv.NVMLError(ret)
            count.value = count.value * 2 + 5  # room for processes started in between
            buf = ctypes.create_string_buffer(size * count.value)
            ret = fn(handle, byref(count), buf)
            if ret != SUCCESS:
                raise nv.NVMLError(ret)
            return [(row[0], None if row[1] == _VALUE_NOT_AVAILABLE else row[1])
                    for row in layout.iter_unpack(buf.raw[:size * count.value])]
        return lister


def _no_sampler(handle: Any, last: int) -> Any:  # pragma: no cover - never called (no symbol)
    raise NotImplementedError


def _error_name(code: int) -> str:
    if code == GPU_IS_LOST:
        return "gpu_lost"
    if code == NO_PERMISSION:
        return "permission_denied"
    return "read_failed"


def _cuda_version(value: Optional[int]) -> Optional[str]:
    """nvmlSystemGetCudaDriverVersion's 12040 as "12.4" (as nvidia-smi prints it)."""
    if not value:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _library_loadable() -> bool:
    """Whether the dynamic loader finds the NVML library (dlopen, as pynvml's own load)."""
    try:
        ctypes.CDLL(LIBRARY)
    except OSError:
        return False
    return True


def _init_reason(code: Optional[int], exc: Any) -> str:
    if code == LIBRARY_NOT_FOUND:
        return f"NVIDIA driver library {LIBRARY} not found (no NVIDIA driver installed here)"
    if code == DRIVER_NOT_LOADED:
        return f"NVIDIA driver not loaded ({LIBRARY} is there, the nvidia kernel module is not running)"
    if code == NO_PERMISSION:
        return "no permission to use the NVIDIA devices (/dev/nvidia*)"
    if code == LIB_RM_VERSION_MISMATCH:
        return f"{LIBRARY} and the loaded NVIDIA kernel module are different versions (reboot or reload the driver)"
    return f"NVML initialisation failed: {exc}"
