"""A GPU's health rules beside the XIDs (gpu.py): hardware throttling held over the window,
uncorrected ECC errors, rows waiting for a remap and remaps that failed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Set, Tuple

from cgstat.contract.keys import Gpu as G
from cgstat.events.event import duration
from cgstat.events.gpu import DeviceRule, device_key, device_name, device_of, int_or_none
from cgstat.events.thresholds import Thresholds
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import EventRecord

# the clock-event reasons that are the hardware (or its thermal protection) slowing the GPU,
# not a setting or idleness
HARDWARE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")

# the GPU record's keys read here (cgstat/contract/keys.py); a device's are in its `gpu` object
_TS, _INDEX, _UUID, _PARENT = G.TS[0], G.GPU_INDEX[-1], G.GPU_UUID[-1], G.GPU_PARENT_UUID[-1]
_REASONS = G.GPU_CLOCKS_EVENT_REASONS[-1]
_SM_MHZ, _SM_MAX_MHZ, _TEMPERATURE = G.GPU_SM_CLOCK_MHZ[-1], G.GPU_SM_CLOCK_MAX_MHZ[-1], G.GPU_TEMPERATURE_CELSIUS[-1]
_POWER, _POWER_LIMIT = G.GPU_POWER_WATTS[-1], G.GPU_POWER_LIMIT_WATTS[-1]


class GpuThrottled(DeviceRule):
    """A hardware or thermal slowdown, or the power brake, among the clock-event reasons in
    every reading for window_s; resolved at the first reading without one."""

    kind = "gpu_throttled"

    def __init__(self, th: Thresholds):
        super().__init__(th)
        self.since: Dict[str, Tuple[float, Set[str]]] = {}  # GPU -> since when, and the reasons seen

    def judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
        for r in gpu_records:
            g = device_of(r)
            if g.get(_PARENT) is not None:
                continue
            key = device_key(r)
            t = parse_ts(r.get(_TS))
            reasons = g.get(_REASONS)
            if t is None or not isinstance(reasons, list):
                continue  # unknown: neither raises nor ends anything
            hard = [x for x in reasons if x in HARDWARE_REASONS]
            if not hard:
                self.since.pop(key, None)
                if key in self.open:
                    self._resolve(r, "%s: the hardware slowdown is over (SM clock %s MHz)." % (
                        device_name(g), g.get(_SM_MHZ)), {"gpu_index": g.get(_INDEX), "gpu_uuid": g.get(_UUID),
                                                           "reasons": reasons}, events)
                continue
            since, seen = self.since.setdefault(key, (t, set()))
            seen.update(hard)
            if key in self.open or t - since < self.th.coverage * self.th.window_s:
                continue
            held = t - since
            msg = ("%s has been slowed by %s for %s (SM clock %s of %s MHz, %s °C, %s W of %s W): the hardware "
                   "protects itself from heat or a power excursion; check cooling, airflow and the power "
                   "supply, and whether jobs on it run slower." % (
                       device_name(g), " and ".join(sorted(seen)), duration(held), g.get(_SM_MHZ),
                       g.get(_SM_MAX_MHZ), g.get(_TEMPERATURE), g.get(_POWER),
                       g.get(_POWER_LIMIT)))
            self._raise(r, "warning", msg, {
                "gpu_index": g.get(_INDEX), "gpu_uuid": g.get(_UUID), "reasons": sorted(seen),
                "duration_s": round(held, 3), "sm_clock_mhz": g.get(_SM_MHZ),
                "temperature_celsius": g.get(_TEMPERATURE), "power_watts": g.get(_POWER)}, events)
        present = {device_key(r) for r in gpu_records}
        for key in [k for k in self.since if k not in present]:
            del self.since[key]
        self._forget_gone(gpu_records)


class _CounterRule(DeviceRule):
    """An error figure of the GPU record (`path`) above 0: raised when it first is, resolved
    when it is back at 0 (a reset, a driver reload). `text` is the message (GPU, count)."""

    severity = "critical"
    path: Tuple[str, str] = ("", "")
    text = ""

    def judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
        for r in gpu_records:
            g = device_of(r)
            obj = g.get(self.path[0])
            value = int_or_none(obj.get(self.path[1])) if isinstance(obj, dict) else None
            if value is None:
                continue
            opened = device_key(r) in self.open
            if value > 0 and not opened:
                self._raise(r, self.severity, self.text % {"gpu": device_name(g), "count": value},
                            _count_evidence(g, value), events)
            elif value == 0 and opened:
                self._resolve(r, "%s: %s.%s is back at 0." % (device_name(g), self.path[0], self.path[1]),
                              _count_evidence(g, value), events)
        self._forget_gone(gpu_records)


def _count_evidence(g: Mapping[str, Any], value: int) -> Dict[str, Any]:
    """A counter rule's evidence (made only for an event: most ticks raise none)."""
    return {"gpu_index": g.get(_INDEX), "gpu_uuid": g.get(_UUID), "count": value}


class GpuEccUncorrected(_CounterRule):
    kind = "gpu_ecc_uncorrected"
    path = ("ecc_errors_total", "uncorrected")
    text = ("%(gpu)s has had %(count)d uncorrected ECC error(s) since the driver loaded: a process using that "
            "memory gets wrong data or is killed (XID 48/94/95); drain the GPU if the count grows.")


class GpuRowRemapPending(_CounterRule):
    kind = "gpu_row_remap_pending"
    severity = "warning"
    path = ("remapped_rows", "pending")
    text = ("%(gpu)s has memory rows waiting to be remapped: the repair takes effect at the next GPU reset "
            "(nvidia-smi -r, or a reboot) once its jobs are drained.")


class GpuRowRemapFailure(_CounterRule):
    kind = "gpu_row_remap_failure"
    path = ("remapped_rows", "failure")
    text = ("%(gpu)s failed to remap a memory row (XID 64): its memory can no longer be repaired; drain it and "
            "have it replaced (RMA).")

