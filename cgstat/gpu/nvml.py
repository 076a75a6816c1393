"""The one NVML gateway: whether a driver is loaded (/proc/driver/nvidia/version under the
host root), loading pynvml and libnvidia-ml, initialisation and the symbols this driver has,
opening the GPUs (again, after one was lost), and the per-tick process lists and utilization
samples. Every call goes through the call wrapper it inherits (nvml_calls.py says what each
error costs). Device reads: nvml_device; direct per-tick calls: nvml_direct; XIDs: nvml_xid;
GPM: nvml_gpm.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any, Callable, Container, Dict, List, Optional, Tuple

from cgstat.gpu.nvml_calls import Calls
from cgstat.gpu.nvml_codes import DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND, NO_PERMISSION, NOT_FOUND
from cgstat.gpu.nvml_device import Devices, Gpu
from cgstat.gpu.nvml_direct import MEMORY_V2, UTIL_NEW, UTIL_OLD, process_lister, utilization_reader
from cgstat.gpu.nvml_gpm import GPM_SUPPORT, GpmSamples
from cgstat.gpu.utilization import UtilizationMark, average
from cgstat.gpu.nvml_xid import XidEvent, XidEvents
from cgstat.kernel.sample import Problem

# `pynvml` (nvidia-ml-py) is imported, and NVML initialised (`nvmlInit`), on first use only:
# importing cgstat never loads it. Nothing is loaded at all where the kernel says no NVIDIA
# driver runs (`/proc/driver/nvidia/version` under the host root is absent): Debian's
# libnvidia-ml 535 run as root without the kernel module creates `/dev/nvidiactl`
# (`mknodat`) and looks for `nvidia-modprobe` in `nvmlInit`; a monitoring agent must not.
LIBRARY = "libnvidia-ml.so.1"
# Where the kernel says the NVIDIA driver runs (present only while the module is loaded);
# CGSTAT_NVIDIA_VERSION_FILE names another file (the NVML test double's tests)
DRIVER_FILE = "proc/driver/nvidia/version"

# nvidia-ml-py releases that read the process lists with the wrong struct size: PIDs and
# memory come out shuffled (nvitop #75, gpustat #161; gpustat requires >= 12.535.108)
BAD_RELEASES = frozenset(("12.535.77",))
_PROCESS_STRUCT_BYTES = 24  # nvmlProcessInfo_v2_t / _v3_t on every driver outside 535.43-535.86

# Versioned symbols are probed once per initialisation, never per call:
# - process lists: `_v3` -> `_v2` -> unversioned (16-byte struct; drivers 430/440), the
#   way nvitop and gpustat fall back;
# - per-process utilization: `nvmlDeviceGetProcessesUtilizationInfo` (drivers >= 550; on
#   some recent GPUs the older call returns 0 for everything, Project-HAMi #2015), else
#   `nvmlDeviceGetProcessUtilization`;
# - memory: `nvmlDeviceGetMemoryInfo_v2` (its `used` excludes the reserved memory that v1
#   `used` includes on drivers >= 510, gpustat #141), else v1;
# - clock-event reasons: `nvmlDeviceGetCurrentClocksEventReasons` (drivers >= 535), else the
#   older name `nvmlDeviceGetCurrentClocksThrottleReasons` (the same bit mask);
# - MPS clients: `nvmlDeviceGetMPSComputeRunningProcesses_v3`, else `_v2`;
# - GPM (`nvmlGpm*`, drivers >= 520): present or not.
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


# A lost GPU (GPU_IS_LOST, RESET_REQUIRED) is opened again by index after `reinit_backoff_s`,
# the others untouched; a driver gone or changed (DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH)
# re-initialises the library after the same back-off; no library, driver, GPU or permission:
# unavailable, `reason` says why, tried again every `retry_s`. `clock` (monotonic, back-offs)
# and `wallclock` (NVML's lastSeen) can be replaced in tests.
class Gateway(Calls):
    def __init__(self, warn: Optional[Callable[[str, str], None]] = None,
                 reinit_backoff_s: float = 30.0, retry_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 wallclock: Callable[[], float] = time.time, driver_file: Optional[str] = None):
        super().__init__(warn, clock)
        self.reinit_backoff_s = reinit_backoff_s
        self.retry_s = retry_s
        self.wallclock = wallclock
        self.driver_file = driver_file or driver_version_file("/")
        self.reason: Optional[str] = "NVML not initialised yet"
        self.driver_version: Optional[str] = None
        self.process_symbols: Dict[str, Optional[str]] = {}  # kind -> the C symbol chosen
        self.process_struct_bytes = 24  # of the _v3 lists: 32 on drivers 535.43-535.86 (see _probe_symbols)
        self.utilization_symbol: Optional[str] = None
        self.reasons_symbol: Optional[str] = None
        self.mps_symbol: Optional[str] = None
        self.cuda_version: Optional[str] = None  # "12.4": the CUDA version the driver supports
        self.inits = 0  # successful initialisations (re-inits after the driver changed included)
        self.reopened = 0  # GPUs opened again after they were lost
        self._ready = False
        self._next_try = float("-inf")
        self._reinit_at: Optional[float] = None
        self._gpus: List[Gpu] = []
        self._marks: Dict[str, UtilizationMark] = {}  # device uuid -> lastSeen and the last call (µs)
        self._process_fns: Dict[str, Optional[Callable[[Any], List[Tuple[int, Optional[int]]]]]] = {}
        self._sampler: Callable[[Any, int], List[Tuple[int, ...]]] = _no_sampler
        self.devices = Devices(self)  # identity and the reads through pynvml's wrappers
        self._xids = XidEvents(self)
        self._gpm_samples = GpmSamples(self)

    # ---- life cycle -----------------------------------------------------------------

    def available(self) -> bool:
        """Initialise (or re-initialise after the driver went or changed) when due; True when
        NVML can be read."""
        now = self.clock()
        if self._ready and self.library_failed is not None and self._reinit_at is None:
            self._reinit_at = self.library_failed_at + self.reinit_backoff_s
        if self._ready and self._reinit_at is not None and now >= self._reinit_at:
            self._shutdown()
            self._next_try = now
        if not self._ready and now >= self._next_try:
            self._init(now)
        return self._ready

    def driver_loaded(self) -> bool:
        """Whether the kernel says an NVIDIA driver runs (no library is asked)."""
        return os.path.exists(self.driver_file)

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
            if not os.path.exists(self.driver_file):
                # Not even loaded: an nvmlInit as root would create /dev/nvidiactl (above).
                self._unavailable(f"NVIDIA driver not loaded ({self.driver_file} absent): "
                                  f"{LIBRARY} not loaded, so that it creates no /dev/nvidia* node", now)
                return
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
        elif not os.path.exists(self.driver_file):  # unloaded since: no init until it is back
            self._unavailable(f"NVIDIA driver not loaded ({self.driver_file} absent)", now)
            return
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
        self.library_failed = None
        self.inits += 1
        self.driver_version, _ = self.call_nvml("nvmlSystemGetDriverVersion", None)
        self._probe_symbols()
        count, code = self.call_nvml("nvmlDeviceGetCount", None)
        if count is None:
            self._shutdown()
            self._unavailable(_init_reason(code, "cannot count the GPUs"), now)
            return
        if count == 0:
            self._shutdown()
            self._unavailable("no NVIDIA GPU found (NVML lists none)", now)
            return
        self._gpus = [self._open(i) for i in range(count)]
        self.cuda_version = _cuda_version(self.call_nvml("nvmlSystemGetCudaDriverVersion", None)[0])
        self._xids.watch(self._gpus)
        self.reason = None

    def _open(self, index: int) -> Gpu:
        errors: List[Problem] = []
        handle, _ = self.call_nvml("nvmlDeviceGetHandleByIndex", errors, index)
        if handle is None:
            gpu = Gpu(index, None, None, None, errors[0] if errors else
                      Problem("nvmlDeviceGetHandleByIndex", "unavailable", f"GPU {index} cannot be opened"))
            gpu.retry_at = self.clock() + self.reinit_backoff_s
            return gpu
        uuid = self.devices.uuid(handle, errors)
        name = self.devices.name(handle, errors)
        lost = [p for p in errors if p.error == "gpu_lost"]
        gpu = Gpu(index, None if lost else handle, uuid, name, lost[0] if lost else None)
        if lost:
            gpu.retry_at = self.clock() + self.reinit_backoff_s
        return gpu

    def mark_lost(self, gpu: Gpu, errors: List[Problem]) -> None:
        """After GPU_IS_LOST or RESET_REQUIRED on this GPU: stop calling it, and open it again
        after the back-off; the other GPUs and the library are untouched."""
        for p in errors:
            if p.error == "gpu_lost":
                gpu.handle = None
                gpu.problem = p
                gpu.retry_at = self.clock() + self.reinit_backoff_s
                return

    def reopen(self, gpu: Gpu) -> bool:
        """Open a lost GPU again when its back-off is over; True when it is back (the same
        board: its UUID, where one was known, unchanged)."""
        if gpu.handle is not None:
            return True
        if gpu.retry_at is None or self.clock() < gpu.retry_at:
            return False
        fresh = self._open(gpu.index)
        if fresh.handle is None or (gpu.uuid is not None and fresh.uuid != gpu.uuid):
            gpu.retry_at = self.clock() + self.reinit_backoff_s
            if fresh.handle is not None:
                gpu.problem = Problem("nvmlDeviceGetUUID", "gpu_lost",
                                      f"GPU {gpu.index} came back as another board ({fresh.uuid})")
            return False
        gpu.reopened(fresh)
        self._xids.watch_one(gpu)
        self.reopened += 1
        return True

    def _shutdown(self) -> None:
        self._ready = False
        self._gpus = []
        self.forget_calls()
        self._gpm_samples.free()
        self._xids.free()
        try:
            self._nv.nvmlShutdown()
        except self._errors:
            pass  # a lost GPU or a reloaded driver can refuse; the next init starts afresh

    def _probe_symbols(self) -> None:
        """Pick, once per initialisation, the versioned symbols this driver has."""
        self._process_fns = {}
        # Drivers 535.43-535.86 fill the _v3 lists with a 32-byte struct (a confidential-
        # computing memory figure after the instance IDs); nvitop (`api/libnvml.py`) tells
        # them by their symbols: nvmlDeviceGetConfComputeMemSizeInfo present and
        # nvmlDeviceGetRunningProcessDetailList (550) absent. Read with a 24-byte stride,
        # every PID after the first comes out shuffled.
        self.process_struct_bytes = 24
        if (self.has(_PROCESS_SYMBOLS["compute"][0]) and self.has("nvmlDeviceGetConfComputeMemSizeInfo")
                and not self.has("nvmlDeviceGetRunningProcessDetailList")):
            self.process_struct_bytes = 32
        for kind, names in _PROCESS_SYMBOLS.items():
            chosen = next((n for n in names if self.has(n)), None)
            self.process_symbols[kind] = chosen
            if chosen is None:
                self.say_missing(names[-1], f"no {kind} processes can be listed")
            elif chosen != names[0]:
                self.say_missing(names[0], f"using {chosen} (an older driver)")
            self._process_fns[kind] = self._process_lister(chosen)
        if self.has(UTIL_NEW) and hasattr(self._nv, UTIL_NEW):  # pynvml >= 12.560.30
            self.utilization_symbol = UTIL_NEW
        else:
            self.say_missing(UTIL_NEW, f"using {UTIL_OLD} (an older driver)")
            self.utilization_symbol = UTIL_OLD if self.has(UTIL_OLD) else None
            if self.utilization_symbol is None:
                self.say_missing(UTIL_OLD, "no per-process utilization")
        self._sampler = self._utilization_reader(self.utilization_symbol)
        self.memory_v2 = self.has(MEMORY_V2)
        if not self.memory_v2:
            self.say_missing(MEMORY_V2, "memory used includes reserved memory and reserved is unknown")
        self.reasons_symbol = self._first(_REASONS, "no clock-event reasons")
        self.mps_symbol = self._first(_MPS, "no MPS clients listed")
        self._process_fns["mps"] = self._process_lister(self.mps_symbol)
        self.gpm = self.has(GPM_SUPPORT)
        if not self.gpm:
            self.say_missing(GPM_SUPPORT, "no GPM metrics (an older driver)")

    def _first(self, names: Tuple[str, ...], none: str) -> Optional[str]:
        """The first of `names` the driver has (the newest first); said once when not the first."""
        chosen = next((n for n in names if self.has(n)), None)
        if chosen is None:
            self.say_missing(names[-1], none)
        elif chosen != names[0]:
            self.say_missing(names[0], f"using {chosen} (an older driver)")
        return chosen

    def field_values(self, handle: Any, fields: Tuple[Tuple[int, int], ...], errors: List[Problem],
                     device: Any = None) -> Optional[List[Tuple[int, Any, int]]]:
        """One nvmlDeviceGetFieldValues call for (field id, scope id) pairs: (its NVML return
        code, the value as its valueType says or None, its width in bits) per field, in
        order; None when the call failed."""
        return self.read("nvmlDeviceGetFieldValues", errors, handle, fields, device=device)


    def mps_processes(self, handle: Any, errors: List[Problem]) -> List[Tuple[int, Optional[int]]]:
        """(pid, used memory) of the MPS clients on the device ([] without MPS or the call)."""
        return self.processes(handle, "mps", errors) if self.mps_symbol else []

    # ---- XIDs and GPM (nvml_xid, nvml_gpm) -------------------------------------------

    def xids(self) -> List[XidEvent]:
        """The XIDs that arrived since the last call, oldest first. Never waits."""
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
            self.failed(symbol or kind, errors, exc)
            return []

    def process_utilization(self, handle: Any, key: str, errors: List[Problem],
                            pids: Container[int]) -> Optional[Dict[int, Tuple[Any, Any, Any, Any]]]:
        """pid -> (sm, mem, enc, dec) %, averaged over the time since the previous call, from
        the samples of the processes in `pids` (the device's process lists) that can be
        trusted (utilization.trusted).

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
        usage, self._marks[key] = average(samples, mark, now, pids)
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
        wide = self.process_struct_bytes == 32 and symbol.endswith("_v3")
        return process_lister(symbol, self._nv._nvmlGetFunctionPointer(symbol), self._nv.NVMLError, wide)


def _no_sampler(handle: Any, last: int) -> Any:  # pragma: no cover - never called (no symbol)
    raise NotImplementedError


def _cuda_version(value: Optional[int]) -> Optional[str]:
    """nvmlSystemGetCudaDriverVersion's 12040 as "12.4" (as nvidia-smi prints it)."""
    if not value:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def driver_version_file(host_root: str) -> str:
    """The file whose presence says the NVIDIA kernel module is loaded, under `host_root`."""
    return os.environ.get("CGSTAT_NVIDIA_VERSION_FILE") or os.path.join(host_root, DRIVER_FILE)


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
