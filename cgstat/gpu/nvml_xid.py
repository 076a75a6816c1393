"""The NVML event set XIDs arrive on: made at each initialisation (`nvmlEventSetCreate`, every
GPU registered with `nvmlDeviceRegisterEvents` for `nvmlEventTypeXidCriticalError`), drained
each tick with `nvmlEventSetWait_v2(set, 0)` and freed at shutdown (`nvmlEventSetFree`).
A zero timeout returns at once (NVML_ERROR_TIMEOUT when nothing is pending), so the tick never
waits on the driver. Every call goes through the gateway.

An event names its device by a handle; nvml.h does not promise that it is the very pointer
`nvmlDeviceGetHandleByIndex` gave, so the event is matched to its GPU by the UUID of that
handle, as the k8s-device-plugin does (`internal/rm/health.go`). It also carries the GPU and
compute instance on MIG (0xFFFFFFFF without). An event no GPU matches is said once.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, NamedTuple, Optional

from cgstat.gpu.nvml_calls import Calls
from cgstat.gpu.nvml_codes import NOT_SUPPORTED
from cgstat.gpu.nvml_device import Gpu
from cgstat.kernel.sample import Problem

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_XIDS_PER_TICK = 256  # an XID storm is drained over several ticks, never in one long loop
_NO_INSTANCE = 0xFFFFFFFF


class XidEvent(NamedTuple):
    """One XID as the event set delivered it."""

    gpu: Gpu
    code: int
    gpu_instance_id: Optional[int]  # MIG: the GPU instance it concerns (None: the whole GPU)
    compute_instance_id: Optional[int]


def _instance(value: int) -> Optional[int]:
    return None if value == _NO_INSTANCE else int(value)


class XidEvents:
    """The event set of one initialisation (None before it, or where NVML has no event API)."""

    def __init__(self, gateway: Calls):
        self._gateway = gateway
        self._events: Any = None
        self._unmatched_said = False

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
            self.watch_one(gpu)

    def watch_one(self, gpu: Gpu) -> None:
        """Register one GPU (again, after it was opened again) on the event set."""
        if self._events is None or gpu.handle is None:
            return
        mine: List[Problem] = []
        _, code = self._gateway.call_nvml("nvmlDeviceRegisterEvents", mine, gpu.handle, XID_EVENT, self._events)
        gpu.xid_problem = None
        if code == NOT_SUPPORTED:
            gpu.xid_problem = Problem("nvmlDeviceRegisterEvents", "unsupported",
                                      "NVML: XID events not supported on this GPU")
        elif mine:
            gpu.xid_problem = mine[0]

    def drain(self, gpus: List[Gpu]) -> List[XidEvent]:
        """The XIDs that arrived since the last call, oldest first. Never waits."""
        events = self._events
        if events is None:
            return []
        by_uuid: Dict[Optional[str], Gpu] = {g.uuid: g for g in gpus if g.uuid is not None}
        uuids: Dict[Optional[int], Optional[str]] = {}  # handle address -> its UUID, this drain
        call = self._gateway.call_nvml
        out: List[XidEvent] = []
        for _ in range(_XIDS_PER_TICK):
            data, _ = call("nvmlEventSetWait_v2", None, events, 0)
            if data is None:
                break  # TIMEOUT: nothing pending (or an error: tried again next tick)
            if data.eventType != XID_EVENT:
                continue
            address = ctypes.cast(data.device, ctypes.c_void_p).value
            if address not in uuids:
                uuids[address] = call("nvmlDeviceGetUUID", None, data.device)[0]
            gpu = by_uuid.get(uuids[address])
            if gpu is None:
                self._unmatched(int(data.eventData), uuids[address])
                continue
            out.append(XidEvent(gpu, int(data.eventData), _instance(data.gpuInstanceId),
                                _instance(data.computeInstanceId)))
        return out

    def _unmatched(self, code: int, uuid: Optional[str]) -> None:
        if self._unmatched_said:
            return
        self._unmatched_said = True
        warn = self._gateway.warn
        if warn is not None:
            warn("nvml-xid-unmatched", f"NVML reported XID {code} on a device that is none of the GPUs "
                 f"cgstat opened (UUID {uuid or 'unknown'}): not counted (said once)")

    def free(self) -> None:
        if self._events is not None:
            self._gateway.call_nvml("nvmlEventSetFree", None, self._events)
            self._events = None
