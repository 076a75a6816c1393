"""The one call wrapper every NVML call goes through (`Calls`), and what an error costs: the
value it was asked for, nothing more (the value is None and the device's problem list says
why), as nvitop's `api/libnvml.py` and dcgm-exporter's `nvmlprovider/provider.go` do.
Nothing here imports pynvml: the gateway (nvml.py) loads it and sets `_nv` and `_errors`.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from cgstat.gpu.nvml_codes import (DRIVER_NOT_LOADED, FUNCTION_NOT_FOUND, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH,
                                    NO_PERMISSION, NOT_FOUND, NOT_SUPPORTED, RESET_REQUIRED, SUCCESS,
                                    UNINITIALIZED)
from cgstat.gpu.nvml_direct import NATIVE, native_call
from cgstat.kernel.sample import Problem

# Scope by return code:
# - NOT_SUPPORTED, NOT_FOUND: no value, no problem (`read` remembers NOT_SUPPORTED per device
#   until the next initialisation: a board that lacks a counter lacks it for good);
# - FUNCTION_NOT_FOUND (an older driver; also `NVMLLibraryMismatchError`, which is not an
#   `NVMLError`): no value, one warning for the life of the process;
# - GPU_IS_LOST, RESET_REQUIRED: that GPU only (a "gpu_lost" problem; the reader stops
#   calling it and opens it again after the back-off, nvml.py);
# - DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH (the driver went or changed under us), and
#   UNINITIALIZED (NVML was shut down under us): the library, re-initialised after the back-off;
# - anything else (UNKNOWN, NO_PERMISSION, INVALID_ARGUMENT...): that value only.
# Every problem is also counted per device and call (`error_counts`).
# errors after which the library is shut down and initialised again (after the back-off)
LIBRARY_CODES = frozenset((UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH))
# errors that put one GPU out until it is opened again
GPU_CODES = frozenset((GPU_IS_LOST, RESET_REQUIRED))


class Calls:
    """The call wrapper and what every reader of the gateway uses (`call_nvml`, `read`,
    `call_direct`, `has`); the gateway (nvml.py) adds the life cycle on top."""

    def __init__(self, warn: Optional[Callable[[str, str], None]] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.warn = warn
        self.clock = clock
        self.memory_v2 = False  # the driver has nvmlDeviceGetMemoryInfo_v2 (set by the probe)
        self.gpm = False  # the driver has the GPM calls (each GPU still says whether it supports them)
        self.library_failed: Optional[int] = None  # a library-level code seen since the last init
        self.library_failed_at = 0.0  # when (monotonic s)
        self.error_counts: Dict[Tuple[str, str], int] = {}  # (device, call) -> problems so far
        self._nv: Any = None  # the pynvml module
        self._errors: Tuple[Type[BaseException], ...] = ()
        self._missing_said: set = set()
        self._unsupported: Dict[Tuple[Any, ...], Problem] = {}  # (handle address, source, args) -> its problem
        self._natives: Dict[str, Callable[..., Any]] = {}  # source -> the call read() makes

    def has(self, symbol: str) -> bool:
        try:
            self._nv._nvmlGetFunctionPointer(symbol)
            return True
        except self._errors:
            return False

    def say_missing(self, symbol: str, consequence: str) -> None:
        """Once for the life of the process: the driver lacks `symbol`."""
        if symbol in self._missing_said:
            return
        self._missing_said.add(symbol)
        if self.warn is not None:
            self.warn("nvml-missing:" + symbol, f"NVML has no {symbol}: {consequence}")

    def count_errors(self, device: str, errors: List[Problem]) -> None:
        """Count a device's problems of one reading, per call (read failures only)."""
        counts = self.error_counts
        for p in errors:
            if p.error in ("read_failed", "permission_denied", "gpu_lost"):
                key = (device, p.source)
                counts[key] = counts.get(key, 0) + 1

    # ---- the one place every call goes through -----------------------------------------

    def _call(self, source: str, errors: Optional[List[Problem]], fn: Callable, *args) -> Tuple[Any, int]:
        """(value, 0) or (None, NVML return code); NOT_SUPPORTED/NOT_FOUND leave no problem."""
        try:
            return fn(*args), SUCCESS
        except self._errors as exc:
            return None, self.failed(source, errors, exc)

    def failed(self, source: str, errors: Optional[List[Problem]], exc: BaseException) -> int:
        """What a failed call says: its NVML return code, and the problem or warning it leaves."""
        code = getattr(exc, "value", FUNCTION_NOT_FOUND)  # LibraryMismatch: a missing symbol
        if code in (NOT_SUPPORTED, NOT_FOUND):
            return code
        if code == FUNCTION_NOT_FOUND:
            self.say_missing(source, "value left null")
            return code
        if code in LIBRARY_CODES and self.library_failed is None:
            self.library_failed = code
            self.library_failed_at = self.clock()
        if errors is not None:
            errors.append(Problem(source, error_name(code), f"NVML error {code}: {exc}"))
        return code

    def read(self, source: str, errors: List[Problem], handle: Any, *args: Any, device: Any = None) -> Any:
        """pynvml's `source`(handle, *args): its value, or None. NOT_SUPPORTED adds an
        "unsupported" problem, remembered per device until the next initialisation (the call
        is not made again); other errors are problems as in every call. `device`: what
        names the device in that memory (default: the handle's address).

        The calls made every tick (NATIVE) skip pynvml's wrappers: their C symbol is called
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
            code = self.failed(source, errors, exc)
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
            return None, self.failed(source, errors, exc)

    def call_nvml(self, source: str, errors: Optional[List[Problem]], *args: Any) -> Tuple[Any, int]:
        """pynvml's wrapper `source`(*args) through the one call wrapper."""
        return self._call(source, errors, getattr(self._nv, source), *args)

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

    def forget_calls(self) -> None:
        """At shutdown: what is remembered per handle is void with the handles."""
        self._unsupported = {}
        self._natives = {}


def _missing(error: Any) -> Callable[..., Any]:
    """The call of a symbol this driver lacks: FunctionNotFound every time."""
    def missing(*args: Any) -> Any:
        raise error(FUNCTION_NOT_FOUND)
    return missing


def error_name(code: int) -> str:
    if code in GPU_CODES:
        return "gpu_lost"
    if code == NO_PERMISSION:
        return "permission_denied"
    return "read_failed"
