"""The GPU side of a tick: NVML's reading with who each GPU process is (cgstat/gpu/attribution.py), the
energy model's shares, and the `type: "gpu"` records made of them.

Only on the live kernel (a recorded tree's processes aren't NVML's); nothing of cgstat/gpu
beyond the gateway is imported until a driver answers, and pynvml on the first read.
Reads no file itself (the NVML gateway and the naming stage do).
"""

from __future__ import annotations

import itertools
import operator
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from cgstat.gpu.beside import GpuReads
from cgstat.naming.paths import PathInfo
from cgstat.naming.workload import Namer
from cgstat.pipeline.build import build_gpu

if TYPE_CHECKING:
    from cgstat.gpu.energy import EnergyModel
    from cgstat.gpu.attribution import Attributed
    from cgstat.gpu.nvml import Gateway
    from cgstat.gpu.reading import GpuDevice, GpuSnapshot
    from cgstat.kernel.host import HostInfo
    from cgstat.contract.types import GpuRecord


class GpuStage:
    """Reads the GPUs once a tick through `gateway` and makes their records."""

    def __init__(self, gateway: Gateway, say_once: Callable[[str, str], None], namer: Namer,
                 warn: Optional[Callable[[str, str], None]] = None):
        self.gateway = gateway
        # on the tick's thread, or beside it with a deadline (gpu/beside.py; the stream sets it)
        self.reads = GpuReads(gateway, warn)
        self._say_once = say_once
        self._namer = namer
        self._read_s: Optional[float] = None  # when the last records' reading was made
        # made on the first reading with a driver (it imports the GPU record modules)
        self.energy: Optional[EnergyModel] = None
        self._unsaid_xids: Tuple[Any, ...] = ()  # XIDs read by a tick that made no records (a warm-up)

    def read(self, classified: Dict[str, PathInfo]) -> Tuple[Optional[GpuSnapshot], Tuple[Attributed, ...], float]:
        """NVML's view and who each GPU process is; (None, (), now) when GPU metrics are off."""
        now = time.monotonic()
        gateway = self.gateway
        snapshot = self.reads.read()  # a host without the NVIDIA library never imports the GPU records
        if snapshot is None:
            self._say_once(f"gpu-off:{gateway.reason}", f"GPU metrics off: {gateway.reason}")
            return None, (), now
        from cgstat.gpu.attribution import attribute

        if self.energy is None:
            from cgstat.gpu.energy import EnergyModel

            self.energy = EnergyModel()
        if self._unsaid_xids:
            from dataclasses import replace

            snapshot = replace(snapshot, xids=self._unsaid_xids + snapshot.xids)
            self._unsaid_xids = ()
        if not snapshot.available:
            self._say_once(f"gpu-off:{snapshot.reason}", f"GPU metrics off: {snapshot.reason}")
            return None, (), now
        if snapshot.late:  # the devices with null figures; no process, no cgroup `gpu` object
            return snapshot, (), now
        shares = self.energy.update(snapshot, now)
        # each PID once, in NVML's order (a process on 8 GPUs is listed 8 times), in C
        owners = self._namer.gpu_owners(dict.fromkeys(map(_PID, snapshot.processes)))
        attributed = attribute(snapshot.processes, owners.__getitem__, shares)
        self.energy.charge([a.owner.cgroup for a in attributed], classified)
        return snapshot, attributed, now

    def advance(self, snapshot: GpuSnapshot, time_s: float) -> None:
        """A warm-up's reading: what the next records' interval starts from."""
        self._read_s = time_s
        self._unsaid_xids = snapshot.xids  # no record said them: the next tick's will

    def records(self, snapshot: GpuSnapshot, attributed: Tuple[Attributed, ...], time_s: float,
                host: HostInfo) -> Iterator[GpuRecord]:
        """One record per GPU (or MIG device) of this reading, with the processes on it."""
        interval = None if self._read_s is None else time_s - self._read_s
        self._read_s = time_s
        wall = time.time()
        by_uuid: Dict[Optional[str], List[Attributed]] = {}  # each GPU's processes, in NVML's order
        # a run of one device's processes (GpuReader reads a GPU at a time) extends its list at once
        for uuid, run in itertools.groupby(attributed, _device_uuid):
            by_uuid.setdefault(uuid, []).extend(run)
        energy = self.energy
        for device in snapshot.devices:
            on_it = (by_uuid.get(device.uuid, []) if device.uuid is not None
                     else [a for a in attributed if _on(a, device)])
            idle = energy.idle(device.uuid) if energy is not None and device.parent_uuid is None else None
            yield build_gpu(device, on_it, host, wall, interval, snapshot, idle)


_PID = operator.itemgetter(0)  # GpuProcess.pid


def _device_uuid(a: Attributed) -> Optional[str]:
    return a.process.gpu_uuid


def _on(a: Attributed, device: GpuDevice) -> bool:
    if device.uuid is not None:
        return a.process.gpu_uuid == device.uuid
    return a.process.gpu_index == device.index and device.parent_uuid is None
