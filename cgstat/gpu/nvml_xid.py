"""The NVML event set XIDs arrive on: made at each initialisation (`nvmlEventSetCreate`, every
GPU registered with `nvmlDeviceRegisterEvents` for `nvmlEventTypeXidCriticalError`), drained
each tick with `nvmlEventSetWait_v2(set, 0)` and freed at shutdown (`nvmlEventSetFree`).
A zero timeout returns at once (NVML_ERROR_TIMEOUT when nothing is pending), so the tick never
waits on the driver. Every call goes through the gateway.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from cgstat.gpu.nvml_codes import NOT_SUPPORTED
from cgstat.kernel.sample import Problem

if TYPE_CHECKING:  # pragma: no cover
    from cgstat.gpu.nvml import Gateway
    from cgstat.gpu.nvml_device import Gpu

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_XIDS_PER_TICK = 256  # an XID storm is drained over several ticks, never in one long loop


class XidEvents:
    """The event set of one initialisation (None before it, or where NVML has no event API)."""

    def __init__(self, gateway: Gateway):
        self._gateway = gateway
        self._events: Any = None

    def watch(self, gpus: List[Gpu]) -> None:
        """Make the event set and register every opened GPU; `xid_problem` says where not."""
        gw = self._gateway
        if not gw.has("nvmlEventSetCreate"):
            problem = Problem("nvmlEventSetCreate", "unsupported", "NVML has no event API: XIDs not watched")
            for gpu in gpus:
                gpu.xid_problem = problem
            return
        errors: List[Problem] = []
        self._events, _ = gw.call_nvml("nvmlEventSetCreate", errors)
        for gpu in gpus:
            if gpu.handle is None:
                continue
            if self._events is None:
                gpu.xid_problem = errors[0] if errors else Problem("nvmlEventSetCreate", "read_failed", "no event set")
                continue
            mine: List[Problem] = []
            _, code = gw.call_nvml("nvmlDeviceRegisterEvents", mine, gpu.handle, XID_EVENT, self._events)
            if code == NOT_SUPPORTED:
                gpu.xid_problem = Problem("nvmlDeviceRegisterEvents", "unsupported",
                                          "NVML: XID events not supported on this GPU")
            elif mine:
                gpu.xid_problem = mine[0]

    def drain(self, gpus: List[Gpu]) -> List[Tuple[Gpu, int]]:
        """The XIDs that arrived since the last call: (GPU, XID code), oldest first. Never waits."""
        events = self._events
        if events is None:
            return []
        by_address: Dict[Optional[int], Gpu] = {g.address: g for g in gpus if g.address is not None}
        call = self._gateway.call_nvml
        out: List[Tuple[Gpu, int]] = []
        for _ in range(_XIDS_PER_TICK):
            data, _ = call("nvmlEventSetWait_v2", None, events, 0)
            if data is None:
                break  # TIMEOUT: nothing pending (or an error: tried again next tick)
            if data.eventType != XID_EVENT:
                continue
            gpu = by_address.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if gpu is not None:
                out.append((gpu, int(data.eventData)))
        return out

    def free(self) -> None:
        if self._events is not None:
            self._gateway.call_nvml("nvmlEventSetFree", None, self._events)
            self._events = None
