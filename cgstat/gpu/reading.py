"""What NVML says about each GPU and each GPU process at one moment: `GpuReader(gateway).read()`
(or `read_gpus(gateway)` for one reading without kept state). Each device carries its
health (gpu/health.py: clocks, reasons, energy, ECC, XIDs, GPM), the snapshot the XIDs that
arrived since the previous reading. PIDs are host PIDs as the driver reports them; nothing
here reads /proc.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from cgstat.gpu.health import MIG_HEALTH, DeviceHealth, HealthReader
from cgstat.gpu.nvml import Gateway
from cgstat.gpu.nvml_device import Gpu
from cgstat.kernel.sample import Problem


# Gauges, not counters (NVML keeps its own sample window), so nothing here needs a previous
# snapshot apart from the lastSeen timestamps the gateway keeps. None means unknown or not
# measurable (NVML says NOT_SUPPORTED, or the call failed: then `errors` says why), never a
# fake 0; the one 0 that is not read is a process with no utilization sample in the period
# (NVML only samples busy processes: idle, 0 %).
@dataclass(frozen=True)
class GpuDevice:
    index: int  # NVML index of the GPU (for a MIG device: of its parent GPU)
    uuid: Optional[str]  # "GPU-..." or, for a MIG device, "MIG-..."
    name: Optional[str]
    utilization_percent: Optional[int]  # null on MIG (NOT_SUPPORTED)
    memory_utilization_percent: Optional[int]
    memory_total_bytes: Optional[int]
    memory_used_bytes: Optional[int]  # nvmlMemory_v2 used (v1 where v2 is missing: includes reserved)
    memory_reserved_bytes: Optional[int]  # null where only v1 exists
    temperature_celsius: Optional[int]
    power_watts: Optional[float]
    mig_mode: Optional[bool]  # MIG enabled; null where the GPU has no MIG; true on MIG devices
    parent_uuid: Optional[str] = None  # MIG devices: the GPU they are part of
    mig_index: Optional[int] = None  # MIG devices: the slot on the parent (nvidia-smi "MIG dev")
    errors: Tuple[Problem, ...] = ()
    health: Optional[DeviceHealth] = None  # None where the GPU could not be read at all
    gpu_instance_id: Optional[int] = None  # MIG devices: NVML's GPU instance ID (dcgm-exporter GPU_I_ID)


class GpuProcess(NamedTuple):
    """One process on one device. A NamedTuple, made with tuple.__new__ in the reading loop:
    hundreds are made each tick (8 GPUs x 50 processes), and a frozen dataclass's __init__
    cost ~8x as much (~1 ms a tick there)."""

    pid: int  # host PID
    gpu_index: int  # the GPU's index (for a process on a MIG device: the parent's)
    gpu_uuid: Optional[str]  # the device it runs on: the GPU's UUID, or the MIG device's
    type: str  # "compute" | "graphics" | "mps" (an MPS client; a process in several lists: mps, else compute)
    memory_bytes: Optional[int]
    sm_percent: Optional[int]  # null where NVML cannot measure it (MIG, unsupported, errors)
    memory_percent: Optional[int]
    encoder_percent: Optional[int]
    decoder_percent: Optional[int]


@dataclass(frozen=True)
class Xid:
    """One XID the event set received: which GPU, and the code."""

    gpu_index: int
    gpu_uuid: Optional[str]
    code: int
    gpu_instance_id: Optional[int] = None  # MIG: the GPU instance the XID concerns (None: the whole GPU)
    compute_instance_id: Optional[int] = None


@dataclass(frozen=True)
class GpuSnapshot:
    available: bool
    reason: Optional[str]  # why not available (one line), else None
    devices: Tuple[GpuDevice, ...] = ()
    processes: Tuple[GpuProcess, ...] = ()
    xids: Tuple[Xid, ...] = ()  # arrived since the previous reading, oldest first
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    late: bool = False  # the GPU read missed the tick's deadline (gpu/beside.py): devices carry no figure


_IDLE = (0, 0, 0, 0)
_UNMEASURED = (None, None, None, None)
_new = tuple.__new__
_bare = object.__new__  # a dataclass instance with no field set yet (see _read_gpu)


class GpuReader:
    """Reads the GPUs tick after tick, keeping what device health needs between readings."""

    def __init__(self, gateway: Gateway, clock: Callable[[], float] = time.monotonic):
        self.gateway = gateway
        self.health = HealthReader(gateway, clock)

    def read(self) -> GpuSnapshot:
        """One entry per GPU (and per MIG device where MIG is on) and one per GPU process."""
        gateway = self.gateway
        if not gateway.available():
            return GpuSnapshot(False, gateway.reason)
        devices: List[GpuDevice] = []
        processes: List[GpuProcess] = []
        gpus = gateway.gpus()
        xids = tuple(Xid(e.gpu.index, e.gpu.uuid, e.code, e.gpu_instance_id, e.compute_instance_id)
                     for e in self.health.take_xids())
        for gpu in gpus:
            if gpu.handle is None:
                gateway.reopen(gpu)  # lost: opened again once its back-off is over
            _read_gpu(gateway, self.health, gpu, devices, processes)
        self.health.forget([self.health.key(g) for g in gpus])
        return GpuSnapshot(True, None, tuple(devices), tuple(processes), xids, gateway.driver_version,
                           gateway.cuda_version)


def read_gpus(gateway: Gateway) -> GpuSnapshot:
    """One reading with nothing kept from a previous one (rates and GPM start null)."""
    return GpuReader(gateway).read()


def _read_gpu(gw: Gateway, health: HealthReader, gpu: Gpu, devices: List[GpuDevice],
              processes: List[GpuProcess]) -> None:
    errors: List[Problem] = []
    reads = gw.devices
    if reads.lost(gpu, errors):
        devices.append(GpuDevice(gpu.index, gpu.uuid, gpu.name, None, None, None, None, None, None,
                                 None, None, errors=tuple(errors)))
        return
    h = gpu.handle
    mig = reads.mig_mode(h, errors)
    util, mem_util = reads.utilization(h, errors)
    total, used, reserved = reads.memory(h, errors)
    temp = reads.temperature(h, errors)
    mw = reads.power_mw(h, errors)
    health_errors: List[Problem] = []
    dev_health = health.read(gpu, h, health_errors)
    mine: List[GpuProcess] = []
    migs: List[GpuDevice] = []
    if mig:
        # Per instance only: nvml.h says the parent's process list needs privileges the
        # agent's unit does not have (NO_PERMISSION every tick), and dcgm-exporter
        # (`nvmlprovider/provider.go`) reads per GPU instance only too.
        for slot, mh in reads.mig_devices(h, errors):
            _read_mig(gw, health, gpu, slot, mh, migs, mine)
    else:
        lists = _lists(gw, h, errors)
        if lists:
            usage = gw.process_utilization(h, gpu.uuid or str(gpu.index), errors,
                                           {pid for rows in lists for pid, _ in rows})
            figures, none = ({}, _UNMEASURED) if usage is None else (usage, _IDLE)
            _made(mine, lists, gpu.index, gpu.uuid, figures, none)
    if errors or health_errors:  # no problem (the usual tick): nothing to scan for a lost GPU
        if any(p.error == "gpu_lost" for p in health_errors):
            errors.extend(p for p in health_errors if p.error == "gpu_lost")
        gw.mark_lost(gpu, errors)
        errors = _one_lost(errors)
        gw.count_errors(gpu.uuid or str(gpu.index), errors)
        if gpu.handle is None:  # lost during this reading: its health figures are not to be trusted
            dev_health = DeviceHealth()
    made = _bare(GpuDevice)
    # every field at once: the frozen __init__ would set each through object.__setattr__
    # (all must be named: asdict, in the reading tests, fails on one missing)
    made.__dict__.update(index=gpu.index, uuid=gpu.uuid, name=gpu.name, utilization_percent=util,
                         memory_utilization_percent=mem_util, memory_total_bytes=total, memory_used_bytes=used,
                         memory_reserved_bytes=reserved, temperature_celsius=temp,
                         power_watts=None if mw is None else mw / 1000.0, mig_mode=mig, parent_uuid=None,
                         mig_index=None, errors=tuple(errors), health=dev_health, gpu_instance_id=None)
    devices.append(made)
    devices.extend(migs)
    processes.extend(mine)


def _read_mig(gw: Gateway, health: HealthReader, gpu: Gpu, slot: int, h, devices: List[GpuDevice],
              mine: List[GpuProcess]) -> None:
    errors: List[Problem] = []
    uuid = gw.devices.uuid(h, errors)
    name = gw.devices.name(h, errors)
    total, used, reserved = gw.devices.memory(h, errors)
    # device and per-process utilization are not supported on MIG devices
    for pid, mem, kind in _listed(gw, h, errors):
        mine.append(_new(GpuProcess, (pid, gpu.index, uuid, kind, mem) + _UNMEASURED))
    health_errors = list(MIG_HEALTH.errors)
    instance = gw.read("nvmlDeviceGetGpuInstanceId", health_errors, h)
    gpm = health.mig_gpm(gpu, gpu.handle, instance, health_errors)
    if errors:
        gw.count_errors(uuid or f"{gpu.uuid or gpu.index}/{slot}", errors)
    devices.append(GpuDevice(gpu.index, uuid, name, None, None, total, used, reserved, None, None, True,
                             parent_uuid=gpu.uuid, mig_index=slot, errors=tuple(errors),
                             health=DeviceHealth(gpm=gpm, errors=tuple(health_errors)),
                             gpu_instance_id=instance))


def _one_lost(errors: List[Problem]) -> List[Problem]:
    """A lost GPU fails every call: say it once."""
    lost = [p for p in errors if p.error == "gpu_lost"]
    return errors if len(lost) < 2 else [lost[0]] + [p for p in errors if p.error != "gpu_lost"]


_Rows = List[Tuple[int, Optional[int]]]
# MPS clients (`nvmlDeviceGetMPSComputeRunningProcesses_v3`) are processes of type "mps"; a
# PID in both the MPS and the compute list is an MPS client.
_KINDS = ("mps", "compute", "graphics")


def _lists(gw: Gateway, h, errors: List[Problem]) -> Tuple[_Rows, ...]:
    """The device's (pid, memory) lists in _KINDS order, () when all three are empty."""
    lists = (gw.mps_processes(h, errors), gw.processes(h, "compute", errors), gw.processes(h, "graphics", errors))
    return lists if lists[0] or lists[1] or lists[2] else ()


def _made(mine: List[GpuProcess], lists: Tuple[_Rows, ...], index: int, uuid: Optional[str],
          figures: Dict[int, Tuple[Any, Any, Any, Any]], none: Tuple[Any, ...]) -> None:
    """The GpuProcess of each listed process: (sm, mem, enc, dec) from `figures`, else `none`."""
    mps, compute, graphics = lists
    # one dict made in C says whether any PID repeats
    if len(dict(mps + compute + graphics)) < len(mps) + len(compute) + len(graphics):
        # a PID in several lists (or twice in one): merged as _merged says
        for pid, mem, kind in _merged(lists):
            mine.append(_new(GpuProcess, (pid, index, uuid, kind, mem) + figures.get(pid, none)))
        return
    # each PID once (the usual case): straight from the lister's rows, no merging dict;
    # the figures unpacked into one tuple display (a concatenation builds a tuple more)
    get = figures.get
    append = mine.append
    for kind, rows in zip(_KINDS, lists):
        for pid, mem in rows:
            sm, m, enc, dec = get(pid, none)
            append(_new(GpuProcess, (pid, index, uuid, kind, mem, sm, m, enc, dec)))


def _listed(gw: Gateway, h, errors: List[Problem]) -> List[Tuple[int, Optional[int], str]]:
    """(pid, memory, type) of every process on the device; a PID in several lists once: as an
    MPS client where the MPS list has it, else as compute."""
    return _merged(_lists(gw, h, errors) or ([], [], []))


def _merged(lists: Tuple[_Rows, ...]) -> List[Tuple[int, Optional[int], str]]:
    """(pid, memory, type) with each PID once, in the order first listed: the type of the
    first list that has it (_KINDS order); the memory of its last MPS row, raised by any
    larger (or first known) figure the compute and graphics lists give it."""
    mps, compute, graphics = lists
    out: Dict[int, Tuple[int, Optional[int], str]] = {}
    for pid, mem in mps:
        out[pid] = (pid, mem, "mps")
    for kind, rows in (("compute", compute), ("graphics", graphics)):
        for pid, mem in rows:
            old = out.get(pid)
            if old is None:
                out[pid] = (pid, mem, kind)
            elif old[1] is None or (mem is not None and mem > old[1]):
                out[pid] = (pid, mem, old[2])
    return list(out.values())


def late_snapshot(last: Optional[GpuSnapshot], running_s: float) -> GpuSnapshot:
    """What a tick whose GPU read missed its deadline says (gpu/beside.py): the devices last
    read, each with its identity and every figure null, a `gpu_read_late` problem; no process."""
    problem = Problem("nvml", "gpu_read_late",
                      f"the GPU read has been running {running_s:.1f} s, past this tick's deadline")
    devices = () if last is None else tuple(
        GpuDevice(d.index, d.uuid, d.name, None, None, None, None, None, None, None, None,
                  parent_uuid=d.parent_uuid, mig_index=d.mig_index, errors=(problem,),
                  gpu_instance_id=d.gpu_instance_id) for d in last.devices)
    return GpuSnapshot(True, None, devices, (), (), None if last is None else last.driver_version,
                       None if last is None else last.cuda_version, late=True)


def carry_xids(late: GpuSnapshot, after: GpuSnapshot) -> GpuSnapshot:
    """`after` with the XIDs of a reading that finished too late to be given (its figures are
    of an older moment; its XIDs were drained from the event set and are said nowhere else)."""
    if not late.xids:
        return after
    return GpuSnapshot(after.available, after.reason, after.devices, after.processes, late.xids + after.xids,
                       after.driver_version, after.cuda_version, after.late)
