"""A GPU's own health, read through the NVML gateway: clocks and why they are held down,
time throttled, energy, memory temperature, PCIe and NVLink traffic, ECC and row
remapping, XIDs, modes and identity; GPM metrics on Hopper and later.

`HealthReader.read(gpu, errors)` gives one `DeviceHealth` per GPU per tick. Each value is
None where NVML says NOT_SUPPORTED (with an "unsupported" problem in `errors`) or fails
(the problem says why). Not everything is read every tick (see HealthReader).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from cgstat.contract.fields import CLOCK_EVENT_REASONS
from cgstat.gpu.nvml import Gateway
from cgstat.gpu.nvml_codes import SUCCESS
from cgstat.gpu.nvml_device import Gpu
from cgstat.gpu.nvml_xid import XidEvent
from cgstat.kernel.sample import Problem

# nvmlClocksEventReason* bits (the same as the older nvmlClocksThrottleReason*), in bit order
REASONS = CLOCK_EVENT_REASONS
_KNOWN_REASONS = sum(bit for bit, _ in REASONS)
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

# nvmlDeviceGetFieldValues ids (pynvml NVML_FI_DEV_*) and their scope (0xFFFFFFFF: all NVLinks)
_MEMORY_TEMP = 82
_NVLINK_TX_KIB, _NVLINK_RX_KIB = 138, 139
_PCIE_TX_BYTES, _PCIE_RX_BYTES = 197, 198
_ALL_LINKS = 0xFFFFFFFF
_FIELDS = ((_MEMORY_TEMP, 0), (_NVLINK_TX_KIB, _ALL_LINKS), (_NVLINK_RX_KIB, _ALL_LINKS),
           (_PCIE_TX_BYTES, 0), (_PCIE_RX_BYTES, 0))
_FIELD_NAMES = {_MEMORY_TEMP: "NVML_FI_DEV_MEMORY_TEMP", _NVLINK_TX_KIB: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
                _NVLINK_RX_KIB: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
                _PCIE_TX_BYTES: "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", _PCIE_RX_BYTES: "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"}
_NOT_SUPPORTED = 3

# NVML_GPM_METRIC_* ids -> the record's names and their scale (MiB/s -> bytes/s)
_MIB = 1 << 20
GPM_METRICS = ((1, "graphics_activity_percent", 1.0), (2, "sm_activity_percent", 1.0),
               (3, "sm_occupancy_percent", 1.0), (5, "tensor_activity_percent", 1.0),
               (10, "dram_bandwidth_percent", 1.0), (20, "pcie_tx_bytes_per_second", _MIB),
               (21, "pcie_rx_bytes_per_second", _MIB), (61, "nvlink_tx_bytes_per_second", _MIB),
               (60, "nvlink_rx_bytes_per_second", _MIB))
_GPM_IDS = tuple(m[0] for m in GPM_METRICS)

SLOW_S = 10.0
_bare = object.__new__  # a dataclass instance with no field set yet (see HealthReader.read)


@dataclass(frozen=True)
class DeviceHealth:
    sm_clock_mhz: Optional[int] = None
    memory_clock_mhz: Optional[int] = None
    sm_clock_max_mhz: Optional[int] = None
    memory_clock_max_mhz: Optional[int] = None
    clocks_event_reasons: Optional[Tuple[str, ...]] = None
    violation_power_seconds_total: Optional[float] = None
    violation_thermal_seconds_total: Optional[float] = None
    energy_joules_total: Optional[float] = None
    power_limit_watts: Optional[float] = None
    memory_temperature_celsius: Optional[int] = None
    pcie_tx_bytes_per_second: Optional[float] = None
    pcie_rx_bytes_per_second: Optional[float] = None
    pcie_replays_total: Optional[int] = None
    nvlink_tx_bytes_total: Optional[int] = None
    nvlink_rx_bytes_total: Optional[int] = None
    encoder_utilization_percent: Optional[int] = None
    decoder_utilization_percent: Optional[int] = None
    ecc_corrected_total: Optional[int] = None
    ecc_uncorrected_total: Optional[int] = None
    remapped_rows: Optional[Tuple[int, int, int, int]] = None  # correctable, uncorrectable, pending, failure
    retired_pages: Optional[Tuple[Optional[int], Optional[int], Optional[bool]]] = None  # single, double, pending
    xid_errors_total: Optional[int] = None
    last_xid: Optional[int] = None
    compute_mode: Optional[str] = None
    persistence_mode: Optional[bool] = None
    pci_bus_id: Optional[str] = None
    serial: Optional[str] = None
    minor_number: Optional[int] = None
    gpm: Optional[Dict[str, Optional[float]]] = None
    errors: Tuple[Problem, ...] = ()


# what a MIG device's record says about these fields: the board answers for itself
MIG_HEALTH = DeviceHealth(errors=(Problem("mig", "unsupported",
                                          "device health is the parent GPU's (NVML reports it per board)"),))


class _Kept:
    """What the reader keeps for one GPU between ticks."""

    __slots__ = ("inits", "fixed", "fixed_errors", "slow", "slow_errors", "slow_due", "pcie", "pcie_counters",
                 "xids", "last_xid")

    def __init__(self, inits: int):
        self.inits = inits
        self.fixed: Dict[str, Any] = {}
        self.fixed_errors: List[Problem] = []
        self.slow: Dict[str, Any] = {}
        self.slow_errors: List[Problem] = []
        self.slow_due = float("-inf")
        self.pcie: Optional[Tuple[float, int, int]] = None  # (monotonic s, tx bytes, rx bytes)
        self.pcie_counters: Optional[bool] = None  # the PCIe byte counters exist (None: not known yet)
        self.xids = 0
        self.last_xid: Optional[int] = None


# What is read when:
# - once per NVML initialisation (fixed by the board and the driver): serial, PCI bus ID,
#   minor number, maximum clocks, GPM support;
# - every `slow_s` (10 s; they change only when an administrator or the memory's own repair
#   acts): enforced power limit, compute and persistence modes, remapped rows, retired
#   pages, and `nvmlDeviceGetPcieThroughput` where the PCIe byte counters are missing (that
#   call samples the link for 20 ms: never on every tick);
# - every tick: clocks, clock-event reasons, violation times, energy, ECC totals, PCIe
#   replays, encoder and decoder use, one nvmlDeviceGetFieldValues (memory temperature,
#   NVLink and PCIe byte counters), GPM, and the XIDs the event set received.
# The reader keeps, per GPU, the slow values and when they are due, the previous PCIe byte
# counters (the rate is their difference over the time between reads), and the XIDs seen.
class HealthReader:
    """Reads device health through `gateway`, keeping what is read less often (see above)."""

    def __init__(self, gateway: Gateway, clock: Callable[[], float], slow_s: float = SLOW_S):
        self.gateway = gateway
        self.clock = clock
        self.slow_s = slow_s
        self._kept: Dict[str, _Kept] = {}  # GPU UUID (or index) -> its state
        self._widths: Dict[int, int] = {}  # field id -> its value's width in bits, as last read
        self._persistence_said: set = set()  # GPUs whose persistence mode off was said

    def take_xids(self) -> List[XidEvent]:
        """Drain the event set once a tick (never waits); the counts are kept per GPU."""
        arrived = self.gateway.xids()
        for event in arrived:
            kept = self._state(event.gpu)
            kept.xids += 1
            kept.last_xid = event.code
        return arrived

    def forget(self, present: List[str]) -> None:
        """Drop the state of GPUs no longer listed (a keyed cache that follows the GPUs)."""
        for key in [k for k in self._kept if k not in present]:
            del self._kept[key]

    def key(self, gpu: Gpu) -> str:
        return gpu.uuid or str(gpu.index)

    def _state(self, gpu: Gpu) -> _Kept:
        key = self.key(gpu)
        kept = self._kept.get(key)
        inits = self.gateway.inits
        if kept is None:
            kept = self._kept[key] = _Kept(inits)
        elif kept.inits != inits:  # re-initialised: handles and support are new; counts stay
            fresh = _Kept(inits)
            fresh.xids, fresh.last_xid = kept.xids, kept.last_xid
            kept = self._kept[key] = fresh
        return kept

    def read(self, gpu: Gpu, handle: Any, errors: List[Problem]) -> DeviceHealth:
        gw = self.gateway
        read = gw.read
        dev = gpu.address  # names the device in the gateway's memory of what is unsupported
        kept = self._state(gpu)
        now = self.clock()
        mine: List[Problem] = []
        if not kept.fixed and not kept.fixed_errors:
            kept.fixed = self._fixed(handle, kept.fixed_errors)
        mine.extend(kept.fixed_errors)
        if now >= kept.slow_due:
            kept.slow_errors = []
            kept.slow = self._slow(handle, kept.slow_errors, kept.pcie_counters is False)
            if kept.slow.get("persistence") is False:
                self._say_persistence_off(gpu)
            kept.slow_due = now + self.slow_s
        mine.extend(kept.slow_errors)

        sm = read("nvmlDeviceGetClockInfo", mine, handle, 1, device=dev)
        mem = read("nvmlDeviceGetClockInfo", mine, handle, 2, device=dev)
        reasons = None
        if gw.reasons_symbol is None:
            mine.append(Problem("nvmlDeviceGetCurrentClocksEventReasons", "unsupported",
                                "NVML has neither clock-event nor clock-throttle reasons"))
        else:
            mask = read(gw.reasons_symbol, mine, handle, device=dev)
            reasons = None if mask is None else _reason_names(mask & _KNOWN_REASONS)
        power_v = read("nvmlDeviceGetViolationStatus", mine, handle, 0, device=dev)
        thermal_v = read("nvmlDeviceGetViolationStatus", mine, handle, 1, device=dev)
        energy = read("nvmlDeviceGetTotalEnergyConsumption", mine, handle, device=dev)
        enc = read("nvmlDeviceGetEncoderUtilization", mine, handle, device=dev)
        dec = read("nvmlDeviceGetDecoderUtilization", mine, handle, device=dev)
        ecc_cor = read("nvmlDeviceGetTotalEccErrors", mine, handle, 0, 0, device=dev)  # corrected, volatile
        ecc_unc = read("nvmlDeviceGetTotalEccErrors", mine, handle, 1, 0, device=dev)  # uncorrected, volatile
        replays = read("nvmlDeviceGetPcieReplayCounter", mine, handle, device=dev)
        fields = self._fields(handle, mine, dev)
        tx_rate, rx_rate = self._pcie_rate(kept, fields, now)
        if kept.pcie_counters is False:
            tx_rate, rx_rate = kept.slow.get("pcie_tx"), kept.slow.get("pcie_rx")
        gpm = self._gpm(gpu, handle, kept, mine)
        if gpu.xid_problem:
            mine.append(gpu.xid_problem)
        mine = _once(mine)
        errors.extend(mine)
        fixed, slow = kept.fixed, kept.slow
        made = _bare(DeviceHealth)
        # every field at once: the frozen __init__ would set each through object.__setattr__,
        # 30 calls per GPU per tick (all must be named: asdict, in every health test, fails on one missing)
        made.__dict__.update(
            sm_clock_mhz=sm, memory_clock_mhz=mem,
            sm_clock_max_mhz=fixed.get("sm_max"), memory_clock_max_mhz=fixed.get("mem_max"),
            clocks_event_reasons=reasons,
            violation_power_seconds_total=None if power_v is None else power_v[1] / 1e9,
            violation_thermal_seconds_total=None if thermal_v is None else thermal_v[1] / 1e9,
            energy_joules_total=None if energy is None else energy / 1000.0,
            power_limit_watts=slow.get("power_limit"),
            memory_temperature_celsius=fields.get(_MEMORY_TEMP),
            pcie_tx_bytes_per_second=tx_rate, pcie_rx_bytes_per_second=rx_rate,
            pcie_replays_total=replays,
            nvlink_tx_bytes_total=_kib(fields.get(_NVLINK_TX_KIB)),
            nvlink_rx_bytes_total=_kib(fields.get(_NVLINK_RX_KIB)),
            encoder_utilization_percent=None if enc is None else enc[0],
            decoder_utilization_percent=None if dec is None else dec[0],
            ecc_corrected_total=ecc_cor, ecc_uncorrected_total=ecc_unc,
            remapped_rows=slow.get("remapped"), retired_pages=slow.get("retired"),
            xid_errors_total=None if gpu.xid_problem else kept.xids,
            last_xid=None if gpu.xid_problem else kept.last_xid,
            compute_mode=slow.get("compute_mode"), persistence_mode=slow.get("persistence"),
            pci_bus_id=fixed.get("bus_id"), serial=fixed.get("serial"), minor_number=fixed.get("minor"),
            gpm=gpm, errors=tuple(mine))
        return made

    def _say_persistence_off(self, gpu: Gpu) -> None:
        """Once per GPU: without persistence mode the driver tears the GPU's state down when
        no client holds it, and every NVML initialisation wakes it again, seconds on real
        hosts (nvidia-container-toolkit #1053)."""
        key = self.key(gpu)
        if key in self._persistence_said or self.gateway.warn is None:
            return
        self._persistence_said.add(key)
        self.gateway.warn("nvml-persistence:" + key,
                          f"GPU {gpu.index} ({gpu.uuid or 'no UUID'}): persistence mode is off: each NVML "
                          "initialisation wakes the GPU and can take seconds; turn it on with "
                          "nvidia-persistenced (or nvidia-smi -pm 1)")

    # ---- what is read once per initialisation, and every slow_s ------------------------

    def _fixed(self, handle: Any, errors: List[Problem]) -> Dict[str, Any]:
        read = self.gateway.read
        pci = read("nvmlDeviceGetPciInfo_v3", errors, handle)
        bus_id = None if pci is None else _text(pci.busId)
        return {"sm_max": read("nvmlDeviceGetMaxClockInfo", errors, handle, 1),
                "mem_max": read("nvmlDeviceGetMaxClockInfo", errors, handle, 2),
                "bus_id": bus_id, "serial": read("nvmlDeviceGetSerial", errors, handle),
                "minor": read("nvmlDeviceGetMinorNumber", errors, handle),
                "gpm": self.gateway.gpm_supported(handle, errors)}

    def _slow(self, handle: Any, errors: List[Problem], pcie_fallback: bool) -> Dict[str, Any]:
        read = self.gateway.read
        limit = read("nvmlDeviceGetEnforcedPowerLimit", errors, handle)
        mode = read("nvmlDeviceGetComputeMode", errors, handle)
        persistence = read("nvmlDeviceGetPersistenceMode", errors, handle)
        rows = read("nvmlDeviceGetRemappedRows", errors, handle)
        single = read("nvmlDeviceGetRetiredPages", errors, handle, 0)
        double = read("nvmlDeviceGetRetiredPages", errors, handle, 1)
        pending = read("nvmlDeviceGetRetiredPagesPendingStatus", errors, handle)
        retired = None
        if single is not None or double is not None or pending is not None:
            retired = (None if single is None else len(single), None if double is None else len(double),
                       None if pending is None else bool(pending))
        out: Dict[str, Any] = {
            "power_limit": None if limit is None else limit / 1000.0,
            "compute_mode": None if mode is None else COMPUTE_MODES.get(mode, str(mode)),
            "persistence": None if persistence is None else persistence == 1,
            "remapped": None if rows is None else tuple(int(v) for v in rows), "retired": retired}
        if pcie_fallback:
            # no PCIe byte counters: the driver's own 20 ms sample, in KB/s
            tx = read("nvmlDeviceGetPcieThroughput", errors, handle, 0)
            rx = read("nvmlDeviceGetPcieThroughput", errors, handle, 1)
            out["pcie_tx"] = None if tx is None else tx * 1024.0
            out["pcie_rx"] = None if rx is None else rx * 1024.0
        return out

    # ---- per tick --------------------------------------------------------------------

    def _fields(self, handle: Any, errors: List[Problem], device: Any) -> Dict[int, Any]:
        values = self.gateway.field_values(handle, _FIELDS, errors, device)
        if values is None:
            return {}
        out: Dict[int, Any] = {}
        widths = self._widths
        for (field, _), (code, value, bits) in zip(_FIELDS, values):
            # every field asked for is a whole number (a degree, KiB, bytes), whatever type carries it
            out[field] = int(value) if isinstance(value, float) else value
            widths[field] = bits
            if code == _NOT_SUPPORTED:
                if field not in (_PCIE_TX_BYTES, _PCIE_RX_BYTES):  # those fall back, said there
                    errors.append(Problem("nvmlDeviceGetFieldValues " + _FIELD_NAMES[field], "unsupported",
                                          "NVML: not supported on this GPU or driver"))
            elif code != SUCCESS:
                errors.append(Problem("nvmlDeviceGetFieldValues " + _FIELD_NAMES[field], "read_failed",
                                      f"NVML error {code}"))
        return out

    def _pcie_rate(self, kept: _Kept, fields: Dict[int, Any],
                   now: float) -> Tuple[Optional[float], Optional[float]]:
        tx, rx = fields.get(_PCIE_TX_BYTES), fields.get(_PCIE_RX_BYTES)
        if tx is None or rx is None:
            if fields and kept.pcie_counters is None:
                kept.pcie_counters = False  # no counters on this board: the fallback, from the next tick
                kept.slow_due = float("-inf")
            kept.pcie = None
            return None, None
        kept.pcie_counters = True
        previous = kept.pcie
        kept.pcie = (now, tx, rx)
        if previous is None or now <= previous[0]:
            return None, None  # the first read: no interval yet
        dt = now - previous[0]
        sent = _counted(previous[1], tx, self._widths.get(_PCIE_TX_BYTES, 64))
        received = _counted(previous[2], rx, self._widths.get(_PCIE_RX_BYTES, 64))
        return (None if sent is None else sent / dt), (None if received is None else received / dt)

    def _gpm(self, gpu: Gpu, handle: Any, kept: _Kept, errors: List[Problem],
             gpu_instance: Optional[int] = None) -> Optional[Dict[str, Optional[float]]]:
        if not kept.fixed.get("gpm"):
            return None  # why is in the fixed errors
        key = (self.key(gpu), gpu_instance)
        values = self.gateway.gpm_metrics(key, handle, gpu_instance, _GPM_IDS, errors)
        if values is None:
            if not any(p.source.startswith("nvmlGpm") for p in errors):
                errors.append(Problem("nvmlGpmMetricsGet", "unavailable",
                                      "GPM metrics are measured between two samples: from the next tick"))
            return None
        out: Dict[str, Optional[float]] = {}
        for metric, name, scale in GPM_METRICS:
            value = values.get(metric)
            out[name] = None if value is None else value * scale
        return out

    def mig_gpm(self, gpu: Gpu, handle: Any, gpu_instance: Optional[int],
                errors: List[Problem]) -> Optional[Dict[str, Optional[float]]]:
        """GPM metrics of one MIG instance (`handle`: the parent GPU's)."""
        kept = self._state(gpu)
        if gpu_instance is None:
            return None
        if not kept.fixed and not kept.fixed_errors:
            kept.fixed = self._fixed(handle, kept.fixed_errors)
        if not kept.fixed.get("gpm"):
            errors.append(Problem("nvmlGpmQueryDeviceSupport", "unsupported", "GPM not supported on this GPU"))
            return None
        return self._gpm(gpu, handle, kept, errors, gpu_instance)


@functools.lru_cache(maxsize=None)  # at most 2^9 masks of the known bits; the same one tick after tick
def _reason_names(mask: int) -> Tuple[str, ...]:
    return tuple(name for bit, name in REASONS if mask & bit)


def _once(problems: List[Problem]) -> List[Problem]:
    """Each (source, error) once: one call read twice (two clocks, two causes) says it once."""
    seen = set()
    out = []
    for p in problems:
        if (p.source, p.error) not in seen:
            seen.add((p.source, p.error))
            out.append(p)
    return out


def _counted(before: Any, after: Any, bits: int) -> Optional[int]:
    """The bytes a PCIe counter of `bits` counted between two reads. nvml.h says these
    counters may wrap: a smaller value is one wrap past 2^bits where that makes a step of
    at most half the range; a larger step back is a reset (a driver reload): unknown."""
    if after >= before:
        return int(after - before)
    if not bits:
        return None  # a double that went back: nothing to wrap
    step = int(after) + (1 << bits) - int(before)
    return step if step <= 1 << (bits - 1) else None


def _kib(value: Optional[int]) -> Optional[int]:
    return None if value is None else value * 1024


def _text(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        return value.decode("ascii", "replace") or None
    return value or None
