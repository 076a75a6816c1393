"""The one NVML gateway: loading pynvml and the driver library, initialisation and the
symbols this driver has, and the one call wrapper every NVML call goes through.

`pynvml` (nvidia-ml-py) is imported, and NVML initialised (`nvmlInit`), on first use only:
importing cgstat never loads it. `Gateway._call` turns NOT_SUPPORTED and NOT_FOUND into None,
a missing symbol (an older driver; also `NVMLLibraryMismatchError`, which is not an
`NVMLError`) into None plus one warning for the life of the process, and any other NVML error
into a `Problem` on the device it concerns. `read` also remembers NOT_SUPPORTED per device
until the next initialisation: a board that lacks a counter lacks it for good.

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
- GPM (`nvmlGpm*`, drivers >= 520): present or not.

A lost GPU (GPU_IS_LOST) or a driver reload schedules a re-initialisation after
`reinit_backoff_s`; no library, driver, GPU or permission: unavailable, `reason` says why,
tried again every `retry_s`. `clock` (monotonic, back-offs) and `wallclock` (NVML's lastSeen)
can be replaced in tests. Device reads: nvml_device; direct per-tick calls: nvml_direct;
XIDs: nvml_xid; GPM: nvml_gpm.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from cgstat.gpu.nvml_codes import (DRIVER_NOT_LOADED, FUNCTION_NOT_FOUND, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH,
                                    LIBRARY_NOT_FOUND, NO_PERMISSION, NOT_FOUND, NOT_SUPPORTED, RESET_REQUIRED,
                                    SUCCESS, UNINITIALIZED, UNKNOWN)
from cgstat.gpu.nvml_device import Devices, Gpu
from cgstat.gpu.nvml_direct import MEMORY_V2, NATIVE, UTIL_NEW, UTIL_OLD, native_call, process_lister, utilization_reader
from cgstat.gpu.nvml_gpm import GPM_SUPPORT, GpmSamples
from cgstat.gpu.utilization import UtilizationMark, average
from cgstat.gpu.nvml_xid import XidEvents
from cgstat.kernel.sample import Problem

LIBRARY = "libnvidia-ml.so.1"

# errors after which the library is shut down and initialised again (after the back-off)
_REINIT_CODES = frozenset((UNINITIALIZED, DRIVER_NOT_LOADED, GPU_IS_LOST, RESET_REQUIRED,
                           LIB_RM_VERSION_MISMATCH, UNKNOWN))

# nvidia-ml-py releases that read the process lists with the wrong struct size: PIDs and
# memory come out shuffled (nvitop #75, gpustat #161; gpustat requires >= 12.535.108)
BAD_RELEASES = frozenset(("12.535.77",))
_PROCESS_STRUCT_BYTES = 24  # nvmlProcessInfo_v2_t / _v3_t on every driver outside 535.43-535.86

_PROCESS_SYMBOLS = {
    "compute": ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses"),
    "graphics": ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                 "nvmlDeviceGetGraphicsRunningProcesses"),
}
_REASONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
_MPS = ("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2")


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
        self._marks: Dict[str, UtilizationMark] = {}  # device uuid -> lastSeen and the last call (µs)
        self._process_fns: Dict[str, Optional[Callable[[Any], List[Tuple[int, Optional[int]]]]]] = {}
        self._sampler: Callable[[Any, int], List[Tuple[int, ...]]] = _no_sampler
        self._unsupported: Dict[Tuple[Any, ...], Problem] = {}  # (handle address, source, args) -> its problem
        self.devices = Devices(self)  # identity and the reads through pynvml's wrappers
        self._xids = XidEvents(self)
        self._gpm_samples = GpmSamples(self)
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
        self._xids.watch(self._gpus)
        self.reason = None

    def _open(self, index: int) -> Gpu:
        nv = self._nv
        errors: List[Problem] = []
        handle, _ = self._call("nvmlDeviceGetHandleByIndex", errors, nv.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            return Gpu(index, None, None, None, errors[0] if errors else
                       Problem("nvmlDeviceGetHandleByIndex", "unavailable", f"GPU {index} cannot be opened"))
        uuid = self.devices.uuid(handle, errors)
        name = self.devices.name(handle, errors)
        lost = [p for p in errors if p.error == "gpu_lost"]
        return Gpu(index, None if lost else handle, uuid, name, lost[0] if lost else None)

    def _shutdown(self) -> None:
        self._ready = False
        self._gpus = []
        self._unsupported = {}
        self._natives = {}
        self._gpm_samples.free()
        self._xids.free()
        try:
            self._nv.nvmlShutdown()
        except self._errors:
            pass  # a lost GPU or a reloaded driver can refuse; the next init starts afresh

    def _probe_symbols(self) -> None:
        """Pick, once per initialisation, the versioned symbols this driver has."""
        self._process_fns = {}
        for kind, names in _PROCESS_SYMBOLS.items():
            chosen = next((n for n in names if self.has(n)), None)
            self.process_symbols[kind] = chosen
            if chosen is None:
                self._say_missing(names[-1], f"no {kind} processes can be listed")
            elif chosen != names[0]:
                self._say_missing(names[0], f"using {chosen} (an older driver)")
            self._process_fns[kind] = self._process_lister(chosen)
        if self.has(UTIL_NEW) and hasattr(self._nv, UTIL_NEW):  # pynvml >= 12.560.30
            self.utilization_symbol = UTIL_NEW
        else:
            self._say_missing(UTIL_NEW, f"using {UTIL_OLD} (an older driver)")
            self.utilization_symbol = UTIL_OLD if self.has(UTIL_OLD) else None
            if self.utilization_symbol is None:
                self._say_missing(UTIL_OLD, "no per-process utilization")
        self._sampler = self._utilization_reader(self.utilization_symbol)
        self.memory_v2 = self.has(MEMORY_V2)
        if not self.memory_v2:
            self._say_missing(MEMORY_V2, "memory used includes reserved memory and reserved is unknown")
        self.reasons_symbol = self._first(_REASONS, "no clock-event reasons")
        self.mps_symbol = self._first(_MPS, "no MPS clients listed")
        self._process_fns["mps"] = self._process_lister(self.mps_symbol)
        self.gpm = self.has(GPM_SUPPORT)
        if not self.gpm:
            self._say_missing(GPM_SUPPORT, "no GPM metrics (an older driver)")

    def _first(self, names: Tuple[str, ...], none: str) -> Optional[str]:
        """The first of `names` the driver has (the newest first); said once when not the first."""
        chosen = next((n for n in names if self.has(n)), None)
        if chosen is None:
            self._say_missing(names[-1], none)
        elif chosen != names[0]:
            self._say_missing(names[0], f"using {chosen} (an older driver)")
        return chosen

    def has(self, symbol: str) -> bool:
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
            return None, self._failed(source, errors, exc)

    def _failed(self, source: str, errors: Optional[List[Problem]], exc: BaseException) -> int:
        """What a failed call says: its NVML return code, and the problem or warning it leaves."""
        code = getattr(exc, "value", FUNCTION_NOT_FOUND)  # LibraryMismatch: a missing symbol
        if code in (NOT_SUPPORTED, NOT_FOUND):
            return code
        if code == FUNCTION_NOT_FOUND:
            self._say_missing(source, "value left null")
            return code
        if code in _REINIT_CODES and self._reinit_at is None:
            self._reinit_at = self.clock() + self.reinit_backoff_s
        if errors is not None:
            errors.append(Problem(source, _error_name(code), f"NVML error {code}: {exc}"))
        return code

    def read(self, source: str, errors: List[Problem], handle: Any, *args: Any, device: Any = None) -> Any:
        """pynvml's `source`(handle, *args): its value, or None. NOT_SUPPORTED adds an
        "unsupported" problem, remembered per device until the next initialisation (the call
        is not made again); other errors are problems as in every call. `device`: what
        names the device in that memory (default: the handle's address).

        The calls made every tick (_NATIVE) skip pynvml's wrappers: their C symbol is called
        with output variables made once, which is several times cheaper per call."""
        if device is None:
            device = ctypes.cast(handle, ctypes.c_void_p).value
        if self._unsupported:  # nothing remembered (a board with all it is asked): no key to build
            known = self._unsupported.get((device, source, args))
            if known is not None:
                errors.append(known)
                return None
        fn = self._natives.get(source)
        if fn is None:
            fn = self._natives[source] = self._native(source)
        try:  # the call itself, not through _call: a dozen of these per GPU per tick
            return fn(handle, *args)
        except self._errors as exc:
            code = self._failed(source, errors, exc)
        if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
            problem = Problem(source, "unsupported", "NVML: not supported on this GPU or driver")
            self._unsupported[(device, source, args)] = problem
            errors.append(problem)
        return None

    def call_direct(self, source: str, errors: List[Problem], handle: Any, *args: Any) -> Tuple[Any, int]:
        """`source`(handle, *args) as `_call` makes it (nothing remembered), called directly where
        nvml_direct's NATIVE describes it: the device reads made every tick."""
        fn = self._natives.get(source)
        if fn is None:
            fn = self._natives[source] = self._native(source)
        try:  # _call's work inlined: several of these per GPU per tick
            return fn(handle, *args), SUCCESS
        except self._errors as exc:
            return None, self._failed(source, errors, exc)

    def field_values(self, handle: Any, fields: Tuple[Tuple[int, int], ...], errors: List[Problem],
                     device: Any = None) -> Optional[List[Tuple[int, Optional[int]]]]:
        """One nvmlDeviceGetFieldValues call for (field id, scope id) pairs: (its NVML return
        code, the unsigned value or None) per field, in order; None when the call failed."""
        return self.read("nvmlDeviceGetFieldValues", errors, handle, fields, device=device)

    def _native(self, source: str) -> Callable[..., Any]:
        """A direct call of `source` where NATIVE describes its outputs, else pynvml's wrapper."""
        nv = self._nv
        if source not in NATIVE:
            return getattr(nv, source)
        try:
            fn = nv._nvmlGetFunctionPointer(source)
        except self._errors:
            return _missing(nv.NVMLError)  # said as unsupported, as pynvml's wrapper would raise
        return native_call(source, fn, nv.NVMLError)

    def mps_processes(self, handle: Any, errors: List[Problem]) -> List[Tuple[int, Optional[int]]]:
        """(pid, used memory) of the MPS clients on the device ([] without MPS or the call)."""
        return self.processes(handle, "mps", errors) if self.mps_symbol else []

    # ---- XIDs and GPM (nvml_xid, nvml_gpm) -------------------------------------------

    def xids(self) -> List[Tuple[Gpu, int]]:
        """The XIDs that arrived since the last call: (GPU, XID code), oldest first. Never waits."""
        return self._xids.drain(self._gpus) if self._ready else []

    def gpm_supported(self, handle: Any, errors: List[Problem]) -> bool:
        return self._gpm_samples.supported(handle, errors)

    def gpm_metrics(self, key: Any, handle: Any, gpu_instance: Optional[int], metric_ids: Tuple[int, ...],
                    errors: List[Problem]) -> Optional[Dict[int, Optional[float]]]:
        """metric id -> value between this call's GPM sample and the previous one of `key`
        (a GPU, or with `gpu_instance` one MIG instance of it); None on the first call."""
        return self._gpm_samples.metrics(key, handle, gpu_instance, metric_ids, errors)

    # ---- per-tick reads made directly (nvml_direct); errors: the device's problem list --

    def processes(self, handle: Any, kind: str, errors: List[Problem]) -> List[Tuple[int, Optional[int]]]:
        """(pid, used memory bytes or None) of the `kind` ("compute"/"graphics") processes."""
        fn = self._process_fns.get(kind)
        if fn is None:
            return []
        try:  # _call's work inlined: three of these per GPU per tick
            return fn(handle)
        except self._errors as exc:
            symbol = self.mps_symbol if kind == "mps" else self.process_symbols[kind]
            self._failed(symbol or kind, errors, exc)
            return []

    def process_utilization(self, handle: Any, key: str,
                            errors: List[Problem]) -> Optional[Dict[int, Tuple[Any, Any, Any, Any]]]:
        """pid -> (sm, mem, enc, dec) %, averaged over the time since the previous call.

        {} when no process was busy (NOT_FOUND: idle, 0 %); None where NVML cannot measure it
        (MIG, unsupported, or an error, which is in `errors`). `key` (the device's UUID) keeps
        the newest timestamp seen, passed as lastSeen next time (first call: now - 1 s), and
        when the call was made: the interval the samples are averaged over (utilization.py).
        """
        symbol = self.utilization_symbol
        if symbol is None:
            return None
        now = int(self.wallclock() * 1e6)
        mark = self._marks.get(key)
        if mark is None:
            mark = UtilizationMark(now - 1_000_000, now - 1_000_000, None)
        samples, code = self._call(symbol, errors, self._sampler, handle, mark.last_seen_us)
        if samples is None:
            if code == NOT_FOUND:
                self._marks[key] = mark._replace(called_us=now)
                return {}
            return None
        usage, self._marks[key] = average(samples, mark, now)
        return usage

    def utilization_marks(self) -> Dict[str, List[Any]]:
        """Per device, what the next call averages from (`once --state` keeps it between runs)."""
        return {k: list(m) for k, m in self._marks.items()}

    def restore_utilization_marks(self, marks: Any) -> None:
        """The marks a previous run kept (utilization_marks); anything malformed is skipped."""
        if isinstance(marks, dict):
            for k, v in marks.items():
                m = UtilizationMark.from_json(v)
                if isinstance(k, str) and m is not None:
                    self._marks[k] = m

    def _utilization_reader(self, symbol: Optional[str]) -> Callable[[Any, int], List[Tuple[int, ...]]]:
        """The per-process utilization call for `symbol` (nvml_direct)."""
        if symbol is None:
            return _no_sampler
        return utilization_reader(symbol, self._nv._nvmlGetFunctionPointer(symbol), self._nv.NVMLError)

    def _process_lister(self, symbol: Optional[str]) -> Optional[Callable[[Any], List[Tuple[int, Optional[int]]]]]:
        """The process-list call for `symbol` (nvml_direct)."""
        if symbol is None:
            return None
        return process_lister(symbol, self._nv._nvmlGetFunctionPointer(symbol), self._nv.NVMLError)

    # ---- for nvml_device, nvml_xid and nvml_gpm: pynvml's wrappers, through _call() ---------------

    def call_nvml(self, source: str, errors: Optional[List[Problem]], *args: Any) -> Tuple[Any, int]:
        """pynvml's wrapper `source`(*args) through the one call wrapper."""
        return self._call(source, errors, getattr(self._nv, source), *args)


def _missing(error: Any) -> Callable[..., Any]:
    """The call of a symbol this driver lacks: FunctionNotFound every time."""
    def missing(*args: Any) -> Any:
        raise error(FUNCTION_NOT_FOUND)
    return missing


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
