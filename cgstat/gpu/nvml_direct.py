"""The NVML calls made every tick, called directly through their C function pointers (pynvml's
wrappers build a Python object per value, several times dearer): process lists
(`nvmlDevice*RunningProcesses*`), per-process utilization (`nvmlDeviceGetProcessesUtilizationInfo`,
`nvmlDeviceGetProcessUtilization`), field values (`nvmlDeviceGetFieldValues`) and the `NATIVE`
integer reads. The driver's structs are read as bytes. The gateway gets the function pointers
and calls what these functions build; nothing here imports pynvml.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from cgstat.gpu.nvml_codes import INSUFFICIENT_SIZE, SUCCESS

UTIL_NEW = "nvmlDeviceGetProcessesUtilizationInfo"
UTIL_OLD = "nvmlDeviceGetProcessUtilization"
_VALUE_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # usedGpuMemory "not available"

# The driver's structs, read as bytes (native order: the driver's own)
_PROCESS_V1 = struct.Struct("=I4xQ")  # nvmlProcessInfo_v1_t: pid, usedGpuMemory (16 bytes)
_PROCESS_V2 = struct.Struct("=I4xQ8x")  # _v2/_v3: and gpuInstanceId, computeInstanceId, unread (24 bytes)
_PROCESS_V3_WIDE = struct.Struct("=I4xQ16x")  # _v3 of drivers 535.43-535.86: and usedGpuCcProtectedMemory (32)
_SAMPLE_V1 = struct.Struct("=I4xQIIII")  # nvmlProcessUtilizationSample_t: pid, timeStamp, sm, mem, enc, dec (32)
_SAMPLE_INFO = struct.Struct("=QIIIIIII4x")  # nvmlProcessUtilizationInfo_v1_t: timeStamp, pid, sm, mem, enc,
#                                               dec, jpg, ofa (40)
_UTIL_INFO_VERSION = 0x01000018  # nvmlProcessesUtilizationInfo_v1
_ROOM = 8  # extra sample slots: the driver keeps sampling between the sizing call and the read

MEMORY_V2 = "nvmlDeviceGetMemoryInfo_v2"


class StructOut(NamedTuple):
    """An output that is one struct behind one pointer: its layout, and the version word a
    versioned struct must carry in when called (None: not versioned)."""

    layout: struct.Struct
    version: Optional[int] = None


# The calls made every tick that the gateway makes directly (read() and call_direct()):
# their outputs after the arguments ("I" unsigned int, "Q" unsigned long long, each its own
# pointer; "" none; "violation" an nvmlViolationTime_t; a StructOut one struct, read as a tuple).
NATIVE: Dict[str, Any] = {
    "nvmlDeviceGetClockInfo": "I", "nvmlDeviceGetCurrentClocksEventReasons": "Q",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "Q", "nvmlDeviceGetViolationStatus": "violation",
    "nvmlDeviceGetTotalEnergyConsumption": "Q", "nvmlDeviceGetEncoderUtilization": "II",
    "nvmlDeviceGetDecoderUtilization": "II", "nvmlDeviceGetTotalEccErrors": "Q",
    "nvmlDeviceGetPcieReplayCounter": "I", "nvmlDeviceGetFieldValues": "fields",
    "nvmlDeviceGetTemperature": "I", "nvmlDeviceGetPowerUsage": "I", "nvmlDeviceGetMigMode": "II",
    "nvmlGpmSampleGet": "", "nvmlGpmMetricsGet": "",
    "nvmlDeviceGetUtilizationRates": StructOut(struct.Struct("=II")),  # nvmlUtilization_t: gpu, memory
    "nvmlDeviceGetMemoryInfo": StructOut(struct.Struct("=QQQ")),  # nvmlMemory_t: total, free, used
    # nvmlMemory_v2_t: version, total, reserved, free, used; version sizeof | 2 << 24
    MEMORY_V2: StructOut(struct.Struct("=I4xQQQQ"), 0x02000028),
}
_FIELD_VALUE = struct.Struct("=IIqqIiQ")  # nvmlFieldValue_t: fieldId, scopeId, timestamp, latencyUsec,
#                                           valueType, nvmlReturn, value (40 bytes)
_FIELD_ROW = struct.Struct("=16x8xIi8s")  # valueType, nvmlReturn, the value union's 8 bytes
# nvmlValue_t read as its valueType says (nvml.h `nvmlValueType_t`): the driver writes only
# the member it names, so the rest of the union is whatever the buffer held; (layout, bits)
_VALUE_TYPES = {0: (struct.Struct("=d"), 0), 1: (struct.Struct("=I4x"), 32), 2: (struct.Struct("=Q"), 64),
                3: (struct.Struct("=Q"), 64), 4: (struct.Struct("=q"), 64), 5: (struct.Struct("=i4x"), 32),
                6: (struct.Struct("=H6x"), 16)}


class _UtilizationInfo(ctypes.Structure):
    """nvmlProcessesUtilizationInfo_v1_t (24 bytes)."""
    _fields_ = [("version", ctypes.c_uint), ("processSamplesCount", ctypes.c_uint),
                ("lastSeenTimeStamp", ctypes.c_ulonglong), ("procUtilArray", ctypes.c_void_p)]


def native_call(source: str, fn: Any, error: Any) -> Callable[..., Any]:
    """The direct call of `source` (a NATIVE entry) through its function pointer `fn`;
    `error` (pynvml's NVMLError) is raised with the return code on failure."""
    outputs = NATIVE[source]
    if isinstance(outputs, StructOut):
        return _struct_call(outputs, fn, error)
    if outputs == "fields":
        return _field_values_call(fn, error)
    if outputs == "violation":
        pair = (ctypes.c_ulonglong * 2)()  # nvmlViolationTime_t {referenceTime, violationTime}

        def violation(handle: Any, *args: Any) -> Tuple[int, int]:
            ret = fn(handle, *args, pair)
            if ret:
                raise error(ret)
            return pair[0], pair[1]
        return violation
    if not outputs:
        def status(handle: Any, *args: Any) -> bool:
            ret = fn(handle, *args)
            if ret:
                raise error(ret)
            return True
        return status
    outs = [ctypes.c_ulonglong() if kind == "Q" else ctypes.c_uint() for kind in outputs]
    refs = [ctypes.byref(o) for o in outs]
    if len(outs) == 1:
        out, ref = outs[0], refs[0]

        def one(handle: Any, *args: Any) -> int:
            ret = fn(handle, *args, ref)
            if ret:
                raise error(ret)
            return out.value
        return one

    def several(handle: Any, *args: Any) -> Tuple[int, ...]:
        ret = fn(handle, *args, *refs)
        if ret:
            raise error(ret)
        return tuple(o.value for o in outs)
    return several


def _struct_call(out: StructOut, fn: Any, error: Any) -> Callable[..., Tuple[int, ...]]:
    """A call that fills one struct: one buffer, reset before each call to what pynvml's
    fresh struct holds (zeros, and the version word), read as a tuple of its fields."""
    layout = out.layout
    fresh = bytes(layout.size) if out.version is None else struct.pack("=I", out.version) + bytes(layout.size - 4)
    buf = ctypes.create_string_buffer(fresh, layout.size)

    def filled(handle: Any, *args: Any) -> Tuple[int, ...]:
        buf.raw = fresh
        ret = fn(handle, *args, buf)
        if ret:
            raise error(ret)
        return layout.unpack_from(buf)
    return filled


def _field_values_call(fn: Any, error: Any) -> Callable[..., List[Tuple[int, Any, int]]]:
    """nvmlDeviceGetFieldValues with the nvmlFieldValue_t array read as bytes: per field
    (nvmlReturn, the value as its valueType says or None, the value's width in bits: 0 for a
    double, a counter of 32 bits wraps at 2^32)."""
    made: Dict[Tuple[Tuple[int, int], ...], Tuple[bytes, Any, Any]] = {}  # fields -> request, buffer, count

    def call(handle: Any, fields: Tuple[Tuple[int, int], ...]) -> List[Tuple[int, Any, int]]:
        kept = made.get(fields)
        if kept is None:
            request = b"".join(_FIELD_VALUE.pack(f, scope, 0, 0, 0, 0, 0) for f, scope in fields)
            kept = made[fields] = (request, ctypes.create_string_buffer(len(request)), ctypes.c_int32(len(fields)))
        request, buf, count = kept
        buf.raw = request  # the ids asked for, every output zero: a fresh array, in a buffer made once
        ret = fn(handle, count, buf)
        if ret:
            raise error(ret)
        out: List[Tuple[int, Any, int]] = []
        for kind, code, raw in _FIELD_ROW.iter_unpack(memoryview(buf)):
            typed = _VALUE_TYPES.get(kind)
            if code != SUCCESS or typed is None:
                out.append((code if typed is not None else code or _UNKNOWN_TYPE, None, 0))
            else:
                out.append((code, typed[0].unpack(raw)[0], typed[1]))
        return out
    return call


_UNKNOWN_TYPE = 999  # a valueType nvml.h does not define: the value is not read


class _Room:
    """An output array kept between calls and grown (never shrunk) to what the driver last
    needed: with room enough one call is the whole of NVML's two-call protocol, and no
    buffer is made per call. Read only by the caller that just filled it."""

    __slots__ = ("size", "slots", "buf")

    def __init__(self, size: int):
        self.size = size  # bytes per element
        self.slots = 0
        self.buf: Any = None  # None until the driver first asks for room: the sizing call

    def grow(self, slots: int) -> None:
        if slots > self.slots:
            self.buf = ctypes.create_string_buffer(self.size * slots)
            self.slots = slots

    def rows(self, layout: struct.Struct, count: int) -> Any:
        """The first `count` elements as `layout` tuples."""
        return layout.iter_unpack(memoryview(self.buf)[:self.size * count])


def utilization_reader(symbol: str, fn: Any, error: Any) -> Callable[[Any, int], List[Tuple[int, ...]]]:
    """The per-process utilization call `symbol` (function pointer `fn`), NVML's two-call
    protocol (one call once the kept buffer has room) with the samples read as bytes:
    [(pid, timeStamp, sm, mem, enc, dec)]; raises `error` (NOT_FOUND: no sample newer than
    lastSeen)."""
    byref = ctypes.byref
    if symbol == UTIL_NEW:
        room = _Room(_SAMPLE_INFO.size)
        info = _UtilizationInfo(_UTIL_INFO_VERSION, 0, 0, None)
        info_ref = byref(info)

        def ask(handle: Any, last: int) -> int:
            info.processSamplesCount = room.slots
            info.lastSeenTimeStamp = last
            info.procUtilArray = None if room.buf is None else ctypes.addressof(room.buf)
            return fn(handle, info_ref)

        def new(handle: Any, last: int) -> List[Tuple[int, ...]]:
            ret = ask(handle, last)
            if ret == INSUFFICIENT_SIZE:
                needed = info.processSamplesCount
                room.grow(needed + _ROOM + needed // 4)  # samples the driver takes in between
                ret = ask(handle, last)
            if ret != SUCCESS or room.buf is None:
                raise error(ret)  # NOT_FOUND: idle; SUCCESS without a buffer: a broken driver
            return [(pid, ts, sm, mem, enc, dec) for ts, pid, sm, mem, enc, dec, _, _
                    in room.rows(_SAMPLE_INFO, info.processSamplesCount)]
        return new
    room_v1 = _Room(_SAMPLE_V1.size)
    count = ctypes.c_uint(0)
    count_ref = byref(count)

    def old(handle: Any, last: int) -> List[Tuple[int, ...]]:
        stamp = ctypes.c_ulonglong(last)
        count.value = room_v1.slots
        ret = fn(handle, room_v1.buf, count_ref, stamp)
        if ret == INSUFFICIENT_SIZE:
            needed = count.value
            room_v1.grow(needed + _ROOM + needed // 4)  # samples the driver takes in between
            count.value = room_v1.slots
            ret = fn(handle, room_v1.buf, count_ref, stamp)
        if ret != SUCCESS or room_v1.buf is None:
            raise error(ret)
        return list(room_v1.rows(_SAMPLE_V1, count.value))
    return old


def process_lister(symbol: str, fn: Any, error: Any,
                   wide: bool = False) -> Callable[[Any], List[Tuple[int, Optional[int]]]]:
    """The process-list call `symbol` (function pointer `fn`): NVML's two-call protocol (one
    call once the kept buffer has room), the structs (24 bytes for _v2/_v3, 16 for the
    unversioned call, which pynvml has no wrapper for) read as bytes, only pid and memory:
    several times cheaper than pynvml's wrappers, which build a Python object per process."""
    # the driver's layouts (nvml.h, nvmlProcessInfo_v2_t): pid @0, usedGpuMemory @8, and for _v2/_v3
    # the MIG instance IDs @16 and @20; read as bytes (pynvml's struct classes convert
    # every field they hand out, which cost ~1 ms a tick at 400 processes)
    # (`wide`: the 32-byte _v3 struct of drivers 535.43-535.86)
    layout = _PROCESS_V3_WIDE if wide else _PROCESS_V2 if symbol.endswith(("_v2", "_v3")) else _PROCESS_V1
    room = _Room(layout.size)
    count = ctypes.c_uint(0)
    count_ref = ctypes.byref(count)

    def lister(handle: Any) -> List[Tuple[int, Optional[int]]]:
        count.value = room.slots
        ret = fn(handle, count_ref, room.buf)
        if ret == INSUFFICIENT_SIZE:
            room.grow(count.value * 2 + 5)  # room for processes started in between
            count.value = room.slots
            ret = fn(handle, count_ref, room.buf)
        if ret != SUCCESS:
            raise error(ret)
        if room.buf is None or not count.value:
            return []  # no process
        # the unpacked (pid, memory) tuple itself unless the memory is "not available"
        return [row if row[1] != _VALUE_NOT_AVAILABLE else (row[0], None) for row in room.rows(layout, count.value)]
    return lister
