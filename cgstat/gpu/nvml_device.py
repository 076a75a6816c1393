"""One GPU's identity and its readings (`Devices`): UUID and name (`nvmlDeviceGetUUID`,
`nvmlDeviceGetName`), memory (`nvmlDeviceGetMemoryInfo`, v2 where the gateway found it),
utilization, temperature, power, MIG mode and MIG devices (`nvmlDeviceGetMaxMigDeviceCount`,
`nvmlDeviceGetMigDeviceHandleByIndex`), and a lost GPU. Every call goes through the gateway:
the ones made every tick directly (nvml_direct), the others through pynvml's wrappers;
`errors` is the device's problem list, appended to.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Tuple

from cgstat.gpu.nvml_calls import Calls
from cgstat.gpu.nvml_codes import INVALID_ARGUMENT, NOT_SUPPORTED
from cgstat.gpu.nvml_direct import MEMORY_V2
from cgstat.kernel.sample import Problem

# nvml.h
_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE


class Gpu:
    """One full GPU as enumerated at initialisation (handles stay valid until shutdown)."""

    __slots__ = ("index", "handle", "uuid", "name", "problem", "address", "xid_problem", "retry_at")

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
        self.retry_at: Optional[float] = None  # lost: when to open it again (monotonic s)

    def reopened(self, fresh: "Gpu") -> None:
        """Back after it was lost: the new handle of the same board."""
        self.handle, self.address, self.problem, self.retry_at = fresh.handle, fresh.address, None, None
        if self.uuid is None:
            self.uuid, self.name = fresh.uuid, fresh.name


class Devices:
    """The reads of one device handle (a GPU or a MIG device) through the gateway."""

    def __init__(self, gateway: Calls):
        self._gateway = gateway
        self._call = gateway.call_nvml
        self._direct = gateway.call_direct  # the reads made every tick (nvml_direct's NATIVE)

    def lost(self, gpu: Gpu, errors: List[Problem]) -> bool:
        """True when the GPU was lost earlier (it is not called until the re-initialisation)."""
        if gpu.handle is None:
            errors.append(gpu.problem or Problem("nvml", "unavailable", f"GPU {gpu.index} not opened"))
            return True
        return False

    def uuid(self, handle: Any, errors: List[Problem]) -> Optional[str]:
        return self._call("nvmlDeviceGetUUID", errors, handle)[0]

    def name(self, handle: Any, errors: List[Problem]) -> Optional[str]:
        return self._call("nvmlDeviceGetName", errors, handle)[0]

    def memory(self, handle: Any, errors: List[Problem]) -> Tuple[Optional[int], Optional[int], Optional[int]]:
        """(total, used, reserved) bytes; reserved None where only v1 exists."""
        if self._gateway.memory_v2:
            m, code = self._direct(MEMORY_V2, errors, handle)
            if m is not None:
                _, total, reserved, _, used = m
                return total, used, reserved
            if code != NOT_SUPPORTED:
                return None, None, None
        m, _ = self._direct("nvmlDeviceGetMemoryInfo", errors, handle)
        if m is None:
            return None, None, None
        total, _, used = m
        return total, used, None

    def utilization(self, handle: Any, errors: List[Problem]) -> Tuple[Optional[int], Optional[int]]:
        """(gpu %, memory %) over the driver's last sample period."""
        u, _ = self._direct("nvmlDeviceGetUtilizationRates", errors, handle)
        return (None, None) if u is None else u

    def temperature(self, handle: Any, errors: List[Problem]) -> Optional[int]:
        return self._direct("nvmlDeviceGetTemperature", errors, handle, _TEMPERATURE_GPU)[0]

    def power_mw(self, handle: Any, errors: List[Problem]) -> Optional[int]:
        return self._direct("nvmlDeviceGetPowerUsage", errors, handle)[0]

    def mig_mode(self, handle: Any, errors: List[Problem]) -> Optional[bool]:
        modes, _ = self._direct("nvmlDeviceGetMigMode", errors, handle)
        return None if modes is None else modes[0] == _MIG_ENABLE

    def mig_devices(self, handle: Any, errors: List[Problem]) -> List[Tuple[int, Any]]:
        """(slot, handle) of each MIG device of a MIG-enabled GPU."""
        most, _ = self._call("nvmlDeviceGetMaxMigDeviceCount", errors, handle)
        found = []
        for slot in range(most or 0):
            # An empty slot answers NOT_FOUND or INVALID_ARGUMENT, depending on the driver:
            # dcgm-exporter (`nvmlprovider/provider.go`) takes both as "no instance here"
            empty: List[Problem] = []
            h, code = self._call("nvmlDeviceGetMigDeviceHandleByIndex", empty, handle, slot)
            if h is not None:
                found.append((slot, h))
            elif code != INVALID_ARGUMENT:
                errors.extend(empty)
        return found
