"""The GPU rules judged on each tick's `type: "gpu"` records: the base every GPU rule
derives from (GpuRule, DeviceRule), a GPU process outside any container, a GPU held idle,
and XIDs; the device's other health rules are gpu_health.py. Each is raised once per
episode per GPU and ends with one `resolved` notice, as the cgroup rules do.

The containers an XID concerns are those whose processes were on that GPU (or on one of
its MIG devices) in the tick the XID arrived: the device records list every process with
its cgroup and container.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Set, Tuple, Type

from cgstat.contract.keys import Cgroup
from cgstat.contract.keys import Gpu as G
from cgstat.gpu.xid import meaning
from cgstat.kernel.xid_report import XidReport, same_pci_device
from cgstat.events.event import Episode, cap, duration, make_event
from cgstat.events.gpuheld import Holding, holdings
from cgstat.pipeline.build import number_at
from cgstat.units import mib
from cgstat.events.thresholds import Thresholds
from cgstat.timestamps import parse_ts

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import EventRecord

# the GPU record's keys read here (cgstat/contract/keys.py); a device's are in its `gpu` object
_GPU, _PROCESSES, _TS = G.GPU[0], G.PROCESSES[0], G.TS[0]
_INDEX, _UUID, _PARENT, _PCI = G.GPU_INDEX[-1], G.GPU_UUID[-1], G.GPU_PARENT_UUID[-1], G.GPU_PCI_BUS_ID[-1]
_XIDS, _REASONS = G.GPU_RECENT_XIDS[-1], G.GPU_CLOCKS_EVENT_REASONS[-1]
_XID_AT, _AT_XID = G.GPU_RECENT_XID_INSTANCES[-1], G.GPU_RECENT_XID_INSTANCES_ITEM_XID[-1]
_AT_GI, _AT_CI = G.GPU_RECENT_XID_INSTANCES_ITEM_GPU_INSTANCE_ID[-1], G.GPU_RECENT_XID_INSTANCES_ITEM_COMPUTE_INSTANCE_ID[-1]
_GI = G.GPU_GPU_INSTANCE_ID[-1]
_P_PID, _P_NAME, _P_CGROUP, _P_CONTAINER = (G.PROCESSES_ITEM_PID[-1], G.PROCESSES_ITEM_NAME[-1],
                                            G.PROCESSES_ITEM_CGROUP[-1], G.PROCESSES_ITEM_CONTAINER[-1])
_P_MEMORY, _P_SM = G.PROCESSES_ITEM_MEMORY_BYTES, G.PROCESSES_ITEM_SM_PERCENT[-1]
# a process's container is the cgroup record's container object
_C_ID, _C_NAME, _C_SHORT_ID, _C_POD = (Cgroup.CONTAINER_ID[-1], Cgroup.CONTAINER_NAME[-1], Cgroup.CONTAINER_SHORT_ID[-1],
                                       Cgroup.CONTAINER_POD[-1])
_POD_NAME, _POD_NAMESPACE = Cgroup.POD_NAME[-1], Cgroup.POD_NAMESPACE[-1]


def device_of(r: Mapping[str, Any]) -> Mapping[str, Any]:
    g = r.get(_GPU)
    return g if isinstance(g, dict) else {}


def device_key(r: Mapping[str, Any]) -> str:
    g = device_of(r)
    return str(g.get(_UUID) or g.get(_INDEX))


def int_or_none(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _since(ts: Any, r: Mapping[str, Any]) -> float:
    """Seconds from an episode's start (its ts) to record r's."""
    start, now = parse_ts(ts), parse_ts(r.get(_TS))
    return 0.0 if start is None or now is None else round(max(now - start, 0.0), 3)


def device_name(g: Mapping[str, Any]) -> str:
    return "GPU %s (%s)" % (g.get(_INDEX), g.get(_UUID) or "no UUID")


GPU_RULES: List[Type["GpuRule"]] = []
"""Every GPU rule, in the order they were defined (the order of a tick's GPU events)."""


class GpuRule:
    """Judges a tick's GPU device records; holds its own episodes (a fresh one is made when
    GPU metrics go away). Defining a subclass with a `kind` registers it (GPU_RULES)."""

    kind = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind"):
            GPU_RULES.append(cls)

    def __init__(self, th: Thresholds):
        self.th = th

    def judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
        raise NotImplementedError

    def judge_runs(self, gpu_records: List[Mapping[str, Any]], xids: List[XidReport], stamp: Mapping[str, Any],
                   events: List[EventRecord]) -> None:
        """Two `once --state` runs: this run's GPU records (none without GPU metrics) and the
        XIDs the kernel log carried since the last run; `stamp` gives the events' ts and
        host. By default nothing (a device's state is judged by the stream, over ticks)."""




class GpuProcessOutsideContainer(GpuRule):
    """A process on a GPU that belongs to no container; resolved when it is gone."""

    kind = "gpu_process_outside_container"

    def __init__(self, th: Thresholds):
        super().__init__(th)
        self.open: Dict[Tuple[str, int], Episode] = {}
        self.listed: Optional[Dict[str, Set[int]]] = None  # the last tick's _outside_pids

    def judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
        # a judged tick leaves open holding exactly the processes listed, so a tick that
        # lists the same ones raises and resolves nothing: compared as sets, no key made
        listed = _outside_pids(gpu_records)
        if listed is not None and listed == self.listed:
            return
        self._judge(gpu_records, events)
        self.listed = listed

    def _judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
        present: Set[Tuple[str, int]] = set()
        # the processes not yet raised (their last listing): most ticks none, so the
        # per-process work of a steady GPU is one key
        fresh: Dict[Tuple[str, int], Tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
        raised = self.open
        for g in gpu_records:
            dev: Mapping[str, Any] = g[_GPU] if isinstance(g.get(_GPU), dict) else {}
            uuid = str(dev.get(_UUID) or dev.get(_INDEX))
            for p in g.get(_PROCESSES) or ():
                if not isinstance(p, dict) or p.get(_P_CONTAINER) is not None:
                    continue
                pid = p.get(_P_PID)
                if isinstance(pid, int):
                    key = (uuid, pid)
                    present.add(key)
                    if key not in raised:
                        fresh[key] = (g, p)
        for key, (g, p) in fresh.items():
            dev = g.get(_GPU) or {}
            where = ("in cgroup %s" % p.get(_P_CGROUP)) if p.get(_P_CGROUP) else "whose cgroup is unknown (another PID namespace, or gone)"
            msg = ("GPU process %s (%s) on GPU %s runs outside any container, %s, using %s of GPU memory: "
                   "it competes with the containers' jobs unseen by their limits." % (
                       p.get(_P_PID), p.get(_P_NAME) or "?", dev.get(_INDEX), where, mib(number_at(p, *_P_MEMORY))))
            ev = make_event(g, self.kind, "warning", cap(msg),
                            {"pid": p.get(_P_PID), "name": p.get(_P_NAME), "gpu_index": dev.get(_INDEX),
                             "gpu_uuid": dev.get(_UUID), "memory_bytes": p.get(_P_MEMORY[-1]),
                             "sm_percent": p.get(_P_SM)},
                            cgroup=p.get(_P_CGROUP), container=None)
            self.open[key] = Episode(g.get(_TS), 0.0, ev["evidence"])
            events.append(ev)
        for key in [k for k in self.open if k not in present]:
            ep = self.open.pop(key)
            events.append(make_event(gpu_records[0], "resolved", "info",
                                     "GPU process %s outside any container is gone from GPU %s." % (
                                         key[1], ep.evidence.get("gpu_index")),
                                     {"pid": key[1], "gpu_uuid": ep.evidence.get("gpu_uuid")},
                                     cgroup=None, container=None, resolves=self.kind, since=ep.ts))


def _outside_pids(gpu_records: List[Mapping[str, Any]]) -> Optional[Dict[str, Set[int]]]:
    """GPU (UUID or index) -> the PIDs of its processes outside any container, as
    GpuProcessOutsideContainer keys them; None when a PID is not a plain int (a float
    equal to one would compare equal in a set, but is no PID to the rule)."""
    listed: Dict[str, Set[int]] = {}
    for g in gpu_records:
        dev: Mapping[str, Any] = g[_GPU] if isinstance(g.get(_GPU), dict) else {}
        pids: Set[Any] = {p.get(_P_PID) for p in g.get(_PROCESSES) or ()
                          if isinstance(p, dict) and p.get(_P_CONTAINER) is None}
        if not set(map(type, pids)) <= _PLAIN_INT:
            return None
        listed.setdefault(str(dev.get(_UUID) or dev.get(_INDEX)), set()).update(pids)
    return listed


_PLAIN_INT = {int}


class GpuHeldIdle(GpuRule):
    """A cgroup holding at least gpu_idle_memory_bytes of a GPU's memory at no more than
    gpu_idle_sm_percent SM for gpu_idle_window_s (cgstat/events/gpuheld.py): one episode per
    cgroup and GPU, resolved when it works (gpu_busy_sm_percent) or lets go (its memory
    there falls under the line, or its processes leave the GPU). SM between the two lines
    neither raises nor resolves; before the event it starts the window again."""

    kind = "gpu_held_idle"

    def __init__(self, th: Thresholds):
        super().__init__(th)
        self.since: Dict[Tuple[str, str], float] = {}  # held idle since (record time), not yet raised
        self.open: Dict[Tuple[str, str], Episode] = {}

    def judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
        th = self.th
        now = holdings(gpu_records)
        for key, h in now.items():
            t = parse_ts(h.record.get(_TS))
            if t is None:
                continue
            if key in self.open:
                if h.sm_percent is not None and h.sm_percent >= th.gpu_busy_sm_percent:
                    self._resolve(key, h, "is busy again (%s %% SM)" % _pct(h.sm_percent), events)
                elif h.memory_bytes < th.gpu_idle_memory_bytes:
                    self._resolve(key, h, "let go of its memory (%s held)" % mib(h.memory_bytes), events)
                continue
            if not h.idle(th.gpu_idle_memory_bytes, th.gpu_idle_sm_percent):
                self.since.pop(key, None)
                continue
            since = self.since.setdefault(key, t)
            if t - since >= th.gpu_idle_window_s:
                del self.since[key]
                self._raise(key, h, t - since, events)
        for key in [k for k in self.open if k not in now]:
            ep = self.open.pop(key)
            r = gpu_records[0]
            events.append(make_event(r, "resolved", "info", cap(
                "%s let go of GPU %s: its processes left it." % (ep.extra["who"], ep.evidence.get("gpu_index"))),
                {"gpu_index": ep.evidence.get("gpu_index"), "gpu_uuid": ep.evidence.get("gpu_uuid"),
                 "duration_s": _since(ep.ts, r)},
                cgroup=ep.extra["cgroup"], container=ep.extra["container"], resolves=self.kind, since=ep.ts))
        for key in [k for k in self.since if k not in now]:
            del self.since[key]

    def _raise(self, key: Tuple[str, str], h: Holding, held_s: float, events: List[EventRecord]) -> None:
        whose = _holder(h)
        msg = ("%s holds %s of GPU %s (%s) at %s %% SM for %s: the GPU is reserved and unused; free it "
               "(end the idle notebook or hung job, or release its CUDA context) so other jobs can use it." % (
                   whose, mib(h.memory_bytes), h.gpu_index, h.gpu_uuid or "no UUID", _pct(h.sm_percent),
                   duration(held_s)))
        evidence = {"gpu_index": h.gpu_index, "gpu_uuid": h.gpu_uuid, "memory_bytes": h.memory_bytes,
                    "sm_percent": h.sm_percent, "duration_s": round(held_s, 3),
                    "window_s": self.th.gpu_idle_window_s}
        ev = make_event(h.record, self.kind, "warning", cap(msg), evidence, cgroup=h.cgroup, container=h.container)
        ep = self.open[key] = Episode(h.record.get(_TS), 0.0, evidence)
        ep.extra.update(who=whose, cgroup=h.cgroup, container=h.container)
        events.append(ev)

    def _resolve(self, key: Tuple[str, str], h: Holding, what: str, events: List[EventRecord]) -> None:
        ep = self.open.pop(key)
        r = h.record
        events.append(make_event(r, "resolved", "info", cap("%s %s on GPU %s." % (ep.extra["who"], what, h.gpu_index)),
                                 {"gpu_index": h.gpu_index, "gpu_uuid": h.gpu_uuid, "memory_bytes": h.memory_bytes,
                                  "sm_percent": h.sm_percent, "duration_s": _since(ep.ts, r)},
                                 cgroup=h.cgroup, container=h.container, resolves=self.kind, since=ep.ts))


def _pct(v: Optional[float]) -> str:
    return "?" if v is None else "%.0f" % v


def _holder(h: Holding) -> str:
    c = h.container or {}
    name = c.get(_C_NAME) or c.get(_C_SHORT_ID) or c.get(_C_ID)
    return ("container %s" % name) if name else ("cgroup %s" % h.cgroup)


class DeviceRule(GpuRule):
    """A GPU rule whose episodes are per GPU (the record's UUID)."""

    def __init__(self, th: Thresholds):
        super().__init__(th)
        self.open: Dict[str, Dict[str, Any]] = {}  # GPU -> the raising event's ts and evidence

    def _raise(self, r: Mapping[str, Any], severity: str, message: str, evidence: Dict[str, Any],
               events: List[EventRecord], cgroup: Any = None, container: Any = None) -> None:
        ev = make_event(r, self.kind, severity, cap(message), evidence, cgroup=cgroup, container=container)
        self.open[device_key(r)] = {"ts": r.get(_TS), "evidence": evidence}
        events.append(ev)

    def _resolve(self, r: Mapping[str, Any], message: str, evidence: Dict[str, Any],
                 events: List[EventRecord]) -> None:
        ep = self.open.pop(device_key(r))
        evidence["duration_s"] = _since(ep["ts"], r)
        events.append(make_event(r, "resolved", "info", cap(message), evidence, cgroup=None, container=None,
                                 resolves=self.kind, since=ep["ts"]))

    def _forget_gone(self, gpu_records: List[Mapping[str, Any]]) -> None:
        present = {device_key(r) for r in gpu_records}
        for key in [k for k in self.open if k not in present]:
            del self.open[key]  # the GPU left the list (lost, driver unloaded): silently


def _processes_by_gpu(gpu_records: List[Mapping[str, Any]]) -> Dict[str, List[Mapping[str, Any]]]:
    """The processes on each GPU (its UUID or index), its MIG devices' included."""
    on_gpu: Dict[str, List[Mapping[str, Any]]] = {}
    for r in gpu_records:
        g = device_of(r)
        parent = g.get(_PARENT) or g.get(_UUID)
        on_gpu.setdefault(str(parent or g.get(_INDEX)), []).extend(
            p for p in r.get(_PROCESSES) or () if isinstance(p, dict))
    return on_gpu


def _instance_of(g: Mapping[str, Any], code: int) -> Optional[Tuple[int, Optional[int]]]:
    """(GPU instance, compute instance) the first XID `code` of this reading names (NVML's
    event data on MIG), or None."""
    for e in g.get(_XID_AT) or ():
        if isinstance(e, dict) and e.get(_AT_XID) == code and int_or_none(e.get(_AT_GI)) is not None:
            return e[_AT_GI], int_or_none(e.get(_AT_CI))
    return None


def _on_instance(gpu_records: List[Mapping[str, Any]], g: Mapping[str, Any], gi: int) -> List[Mapping[str, Any]]:
    """The processes of the MIG devices of GPU `g` in GPU instance `gi`."""
    parent = g.get(_UUID)
    out: List[Mapping[str, Any]] = []
    for r in gpu_records:
        d = device_of(r)
        if d.get(_PARENT) is not None and d.get(_PARENT) == parent and d.get(_GI) == gi:
            out.extend(p for p in r.get(_PROCESSES) or () if isinstance(p, dict))
    return out


def _devices(gpu_records: List[Mapping[str, Any]]) -> Dict[str, Mapping[str, Any]]:
    """Each GPU's record by its UUID or index (the first of several), its MIG devices' left
    out: one pass, not a search of the list per episode."""
    devices: Dict[str, Mapping[str, Any]] = {}
    for r in gpu_records:
        if device_of(r).get(_PARENT) is None:
            devices.setdefault(device_key(r), r)
    return devices


class GpuXid(DeviceRule):
    """XIDs from the driver's event API (gpu.recent_xids). One episode per GPU and code:
    the same code again within window_s belongs to it (counted, not said again); it ends
    window_s after the last one with the total."""

    kind = "gpu_xid"

    def judge(self, gpu_records: List[Mapping[str, Any]], events: List[EventRecord]) -> None:
        on_gpu: Optional[Dict[str, List[Mapping[str, Any]]]] = None  # made when an XID is new
        seen_now = set()
        for r in gpu_records:
            g = device_of(r)
            if g.get(_PARENT) is not None:
                continue  # XIDs arrive on the GPU, never on one of its MIG devices
            codes = [c for c in g.get(_XIDS) or () if int_or_none(c) is not None]
            if not codes:
                continue  # most ticks: no XID, and no time stamp to parse
            t = parse_ts(r.get(_TS))
            for code in dict.fromkeys(codes):  # each code once, in the order they came
                key = "%s/%d" % (device_key(r), code)
                seen_now.add(key)
                count = codes.count(code)
                ep = self.open.get(key)
                if ep is not None:
                    ep["count"] += count
                    ep["last"] = t
                    continue
                if on_gpu is None:
                    on_gpu = _processes_by_gpu(gpu_records)
                at = _instance_of(g, code)
                processes = on_gpu.get(device_key(r), []) if at is None else _on_instance(gpu_records, g, at[0])
                self._raise_xid(r, g, code, count, processes, t, key, events, at)
        devices: Optional[Dict[str, Mapping[str, Any]]] = None  # made for the first quiet episode
        for key in list(self.open):
            ep = self.open[key]
            if key in seen_now:
                continue
            if devices is None:
                devices = _devices(gpu_records)
            rec = devices.get(ep["gpu"])
            if rec is None:
                del self.open[key]  # the GPU left the list: silently
                continue
            t = parse_ts(rec.get(_TS))
            if t is not None and ep["last"] is not None and t - ep["last"] >= self.th.window_s:
                ep = self.open.pop(key)
                r = rec
                events.append(make_event(
                    r, "resolved", "info", "XID %d on %s: none for %s (%d in all)." % (
                        ep["code"], device_name(device_of(r)), duration(self.th.window_s), ep["count"]),
                    {"gpu_index": device_of(r).get(_INDEX), "gpu_uuid": device_of(r).get(_UUID), "xid": ep["code"],
                     "count": ep["count"], "duration_s": _since(ep["ts"], r)}, cgroup=None, container=None, resolves=self.kind, since=ep["ts"]))

    def judge_runs(self, gpu_records: List[Mapping[str, Any]], xids: List[XidReport], stamp: Mapping[str, Any],
                   events: List[EventRecord]) -> None:
        """The XIDs the NVIDIA driver logged since the last run (the kernel log: no NVML
        event API outlives a run): one event per GPU and code, with how many times; the
        GPU's index and UUID where this run's GPU records have its PCI address."""
        by: Dict[Tuple[str, int], List[XidReport]] = {}
        for x in xids:
            by.setdefault((x.pci_bus_id, x.xid), []).append(x)
        for (pci, code), seen in by.items():
            rec = next((r for r in gpu_records if device_of(r).get(_PARENT) is None
                        and same_pci_device(pci, device_of(r).get(_PCI))), None)
            g = device_of(rec) if rec is not None else {"index": None, "uuid": None}
            m = meaning(code)
            pids = sorted({x.pid for x in seen if x.pid is not None})
            names = sorted({x.process for x in seen if x.process})
            where = device_name(g) if rec is not None else "the GPU at PCI %s" % pci
            blamed = ""
            if pids:
                blamed = " The driver named process%s %s." % ("es" if len(pids) > 1 else "", ", ".join(
                    "%d" % p for p in pids) + (" (%s)" % ", ".join(names) if names else ""))
            msg = "XID %d on %s, %d time%s since the last run: %s.%s %s." % (
                code, where, len(seen), "" if len(seen) == 1 else "s", m.meaning, blamed,
                m.action[0].upper() + m.action[1:])
            evidence = {"gpu_index": g.get(_INDEX), "gpu_uuid": g.get(_UUID), "pci_bus_id": pci, "xid": code,
                        "meaning": m.meaning, "count": len(seen), "pids": pids, "processes": names,
                        "detail": seen[-1].detail, "source": "kernel_log", "kernel_seq": seen[0].seq}
            events.append(make_event(rec if rec is not None else stamp, self.kind, m.severity, cap(msg), evidence,
                                     cgroup=None, container=None))

    def _raise_xid(self, r: Mapping[str, Any], g: Mapping[str, Any], code: int, count: int,
                   processes: List[Mapping[str, Any]], t: Optional[float], key: str,
                   events: List[EventRecord], at: Optional[Tuple[int, Optional[int]]] = None) -> None:
        m = meaning(code)
        cgroups: List[str] = []
        containers: List[Dict[str, Any]] = []
        pids: List[int] = []
        for p in processes:
            pid = int_or_none(p.get(_P_PID))
            if pid is not None:
                pids.append(pid)
            cg = p.get(_P_CGROUP)
            if isinstance(cg, str) and cg not in cgroups:
                cgroups.append(cg)
                c = p.get(_P_CONTAINER)
                if isinstance(c, dict):
                    containers.append(c)
        names = [c.get(_C_NAME) or c.get(_C_SHORT_ID) or c.get(_C_ID) for c in containers]
        pods = sorted({"%s/%s" % (c[_C_POD].get(_POD_NAMESPACE), c[_C_POD].get(_POD_NAME)) for c in containers
                       if isinstance(c.get(_C_POD), dict) and c[_C_POD].get(_POD_NAME)})
        if names:
            whose = "container%s %s" % ("s" if len(names) > 1 else "", ", ".join(str(n) for n in names))
        elif cgroups:
            whose = "cgroup%s %s" % ("s" if len(cgroups) > 1 else "", ", ".join(cgroups))
        else:
            whose = "no process"
        msg = "XID %d on %s: %s. On the GPU: %s%s. %s." % (
            code, device_name(g), m.meaning, whose, (" (pods %s)" % ", ".join(pods)) if pods else "",
            m.action[0].upper() + m.action[1:])
        evidence = {"gpu_index": g.get(_INDEX), "gpu_uuid": g.get(_UUID), "xid": code, "meaning": m.meaning,
                    "count": count, "pids": sorted(set(pids)), "cgroups": cgroups,
                    "containers": [{"id": c.get(_C_ID), "name": c.get(_C_NAME)} for c in containers],
                    "pods": pods}
        if at is not None:  # a MIG instance's: who was on that instance only
            evidence["gpu_instance_id"], evidence["compute_instance_id"] = at
            msg = msg.replace(" On the GPU: ", " On GPU instance %d: " % at[0], 1)
        one = len(cgroups) == 1
        ev = make_event(r, self.kind, m.severity, cap(msg), evidence, cgroup=cgroups[0] if one else None,
                        container=containers[0] if one and containers else None)
        self.open[key] = {"ts": r.get(_TS), "gpu": device_key(r), "code": code, "count": count, "last": t}
        events.append(ev)
