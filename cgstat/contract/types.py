"""The records as types: TypedDicts of the cgroup/pod, GPU and event records.

Made from the field table (cgstat/contract/fields.py) by cgstat/contract/schema.py: do not edit, run
`python -m cgstat.contract.schema --write`. The records stay plain dicts at run time (orjson writes
them, sinks pass them on); these types are for mypy, so that a producer that leaves out a
key and a consumer that reads a key the record has not fail `mypy cgstat`. Python 3.7 has
no typing.TypedDict: there the classes are dict subclasses of the same names, never made.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Union

if sys.version_info >= (3, 8):
    from typing import TypedDict
else:  # pragma: no cover - Python 3.7
    class TypedDict(dict):
        def __init_subclass__(cls, total: bool = True, **kwargs: object) -> None:
            super().__init_subclass__(**kwargs)

# An event's figures: keys per kind (docs/events.md), open to new kinds' keys; the
# schema types the common ones (fields.EVENT, evidence.*).
Evidence = Dict[str, Any]


class Pod(TypedDict):
    uid: str
    name: Optional[str]
    namespace: Optional[str]
    qos: Optional[str]


class ContainerSlurm(TypedDict):
    job_id: int
    step: Optional[str]
    task: Optional[str]
    uid: Optional[int]
    user: Optional[str]


class Container(TypedDict):
    runtime: Optional[str]
    id: Optional[str]
    short_id: Optional[str]
    name: Optional[str]
    image: Optional[str]
    labels: Optional[Dict[str, str]]
    pod: Optional[Pod]
    sandbox: bool
    slurm: Optional[ContainerSlurm]


class Cpu(TypedDict):
    usage_seconds_total: Optional[float]
    user_seconds_total: Optional[float]
    system_seconds_total: Optional[float]
    percent: Optional[float]
    limit_cores: Optional[float]
    quota_us: Optional[int]
    period_us: Optional[int]
    periods_total: Optional[int]
    throttled_periods_total: Optional[int]
    throttled_seconds_total: Optional[float]
    throttled_percent: Optional[float]
    weight: Optional[int]
    shares: Optional[int]
    max_burst_us: Optional[int]
    cpuset_cpus: Optional[str]
    cpuset_mems: Optional[str]


class MemoryEvents(TypedDict):
    low: Optional[int]
    high: Optional[int]
    max: Optional[int]
    oom: Optional[int]
    oom_kill: Optional[int]
    oom_group_kill: Optional[int]


class MemorySwapEvents(TypedDict):
    high: Optional[int]
    max: Optional[int]
    fail: Optional[int]


class Memory(TypedDict):
    usage_bytes: Optional[int]
    working_set_bytes: Optional[int]
    limit_bytes: Optional[int]
    percent: Optional[float]
    anon_bytes: Optional[int]
    file_bytes: Optional[int]
    inactive_file_bytes: Optional[int]
    shmem_bytes: Optional[int]
    swap_bytes: Optional[int]
    oom_kills_total: Optional[int]
    oom_events_total: Optional[int]
    peak_bytes: Optional[int]
    swap_peak_bytes: Optional[int]
    high_bytes: Optional[int]
    low_bytes: Optional[int]
    min_bytes: Optional[int]
    swap_limit_bytes: Optional[int]
    zswap_bytes: Optional[int]
    events: Optional[MemoryEvents]
    events_local: Optional[MemoryEvents]
    swap_events: Optional[MemorySwapEvents]
    failcnt: Optional[int]
    pgscan_total: Optional[int]
    pgsteal_total: Optional[int]
    pgfault_total: Optional[int]
    pgmajfault_total: Optional[int]
    workingset_refault_anon_total: Optional[int]
    workingset_refault_file_total: Optional[int]
    dirty_bytes: Optional[int]
    writeback_bytes: Optional[int]
    hugetlb_bytes: Optional[int]
    oom_group: Optional[bool]


class IoDevice(TypedDict):
    device: str
    name: Optional[str]
    read_bytes_total: Optional[int]
    write_bytes_total: Optional[int]
    read_ops_total: Optional[int]
    write_ops_total: Optional[int]
    discard_bytes_total: Optional[int]
    discard_ops_total: Optional[int]
    read_bytes_per_second: Optional[float]
    write_bytes_per_second: Optional[float]
    read_ops_per_second: Optional[float]
    write_ops_per_second: Optional[float]


class IoLimit(TypedDict):
    device: str
    name: Optional[str]
    read_bytes_per_second: Optional[int]
    write_bytes_per_second: Optional[int]
    read_ops_per_second: Optional[int]
    write_ops_per_second: Optional[int]


class Io(TypedDict):
    read_bytes_total: Optional[int]
    write_bytes_total: Optional[int]
    read_ops_total: Optional[int]
    write_ops_total: Optional[int]
    read_bytes_per_second: Optional[float]
    write_bytes_per_second: Optional[float]
    read_ops_per_second: Optional[float]
    write_ops_per_second: Optional[float]
    devices: Optional[List[IoDevice]]
    limits: Optional[List[IoLimit]]


class NetworkInterface(TypedDict):
    name: str
    rx_bytes_total: int
    tx_bytes_total: int
    rx_packets_total: int
    tx_packets_total: int
    rx_errors_total: int
    tx_errors_total: int
    rx_dropped_total: int
    tx_dropped_total: int


class Network(TypedDict):
    rx_bytes_total: int
    tx_bytes_total: int
    rx_packets_total: int
    tx_packets_total: int
    rx_errors_total: int
    tx_errors_total: int
    rx_dropped_total: int
    tx_dropped_total: int
    rx_bytes_per_second: Optional[float]
    tx_bytes_per_second: Optional[float]
    interfaces: List[NetworkInterface]
    netns: int
    shared: bool


class Pids(TypedDict):
    current: Optional[int]
    limit: Optional[int]
    processes: Optional[int]
    peak: Optional[int]
    events_max_total: Optional[int]


class Psi(TypedDict):
    some_avg10: Optional[float]
    some_avg60: Optional[float]
    some_avg300: Optional[float]
    some_seconds_total: Optional[float]
    full_avg10: Optional[float]
    full_avg60: Optional[float]
    full_avg300: Optional[float]
    full_seconds_total: Optional[float]


class Pressure(TypedDict):
    cpu: Optional[Psi]
    memory: Optional[Psi]
    io: Optional[Psi]


class GpuProcessUse(TypedDict):
    pid: int
    name: Optional[str]
    gpu_index: int
    gpu_uuid: Optional[str]
    type: str
    memory_bytes: Optional[int]
    sm_percent: Optional[float]
    memory_percent: Optional[float]
    encoder_percent: Optional[float]
    decoder_percent: Optional[float]
    power_watts: Optional[float]
    energy_joules_total: Optional[float]


class GpuUse(TypedDict):
    memory_bytes: Optional[int]
    sm_percent: Optional[float]
    power_watts: Optional[float]
    energy_joules_total: float
    devices: List[str]
    processes: List[GpuProcessUse]


class RecordError(TypedDict):
    source: str
    error: str
    detail: str


class ProcessesProcesses(TypedDict):
    pid: int
    ns_pid: Optional[int]
    ppid: Optional[int]
    name: Optional[str]
    cmdline: Optional[str]
    state: Optional[str]
    uid: Optional[int]
    threads: Optional[int]
    cpu_percent: Optional[float]
    cpu_seconds_total: Optional[float]
    rss_bytes: Optional[int]
    pss_bytes: Optional[int]
    uss_bytes: Optional[int]
    swap_bytes: Optional[int]
    memory_age_s: Optional[float]
    fds: Optional[int]
    gpu_memory_bytes: Optional[int]
    gpu_sm_percent: Optional[float]
    depth: int
    group: int
    errors: List[RecordError]


class ProcessesGroups(TypedDict):
    pid: int
    name: Optional[str]
    processes: int
    cpu_percent: Optional[float]
    rss_bytes: Optional[int]
    pss_bytes: Optional[int]
    uss_bytes: Optional[int]
    swap_bytes: Optional[int]
    gpu_memory_bytes: Optional[int]


class Processes(TypedDict):
    count: int
    complete: bool
    by: Optional[str]
    processes: List[ProcessesProcesses]
    groups: List[ProcessesGroups]
    error: Optional[RecordError]


class _CgroupRecord(TypedDict):
    schema: int
    type: str
    ts: str
    host: str
    cgroup: str
    paths: Dict[str, str]
    interval_s: Optional[float]
    unit: Optional[str]
    pod: Optional[Pod]
    container: Optional[Container]
    cpu: Cpu
    memory: Memory
    io: Io
    network: Optional[Network]
    pids: Pids
    pressure: Pressure
    gpu: Optional[GpuUse]
    errors: List[RecordError]


class CgroupRecord(_CgroupRecord, total=False):  # keys only some runs write
    processes: Processes


class GpuViolationSecondsTotal(TypedDict):
    power: Optional[float]
    thermal: Optional[float]


class GpuEccErrorsTotal(TypedDict):
    corrected: Optional[int]
    uncorrected: Optional[int]


class GpuRemappedRows(TypedDict):
    correctable: int
    uncorrectable: int
    pending: int
    failure: int


class GpuRetiredPages(TypedDict):
    single_bit: Optional[int]
    double_bit: Optional[int]
    pending: Optional[bool]


class GpuRecentXidInstances(TypedDict):
    xid: int
    gpu_instance_id: int
    compute_instance_id: Optional[int]


class GpuGpm(TypedDict):
    graphics_activity_percent: Optional[float]
    sm_activity_percent: Optional[float]
    sm_occupancy_percent: Optional[float]
    tensor_activity_percent: Optional[float]
    dram_bandwidth_percent: Optional[float]
    pcie_tx_bytes_per_second: Optional[float]
    pcie_rx_bytes_per_second: Optional[float]
    nvlink_tx_bytes_per_second: Optional[float]
    nvlink_rx_bytes_per_second: Optional[float]


class GpuFigures(TypedDict):
    index: int
    uuid: Optional[str]
    name: Optional[str]
    utilization_percent: Optional[float]
    memory_utilization_percent: Optional[float]
    memory_total_bytes: Optional[int]
    memory_used_bytes: Optional[int]
    memory_reserved_bytes: Optional[int]
    temperature_celsius: Optional[int]
    power_watts: Optional[float]
    mig_mode: Optional[bool]
    parent_uuid: Optional[str]
    gpu_instance_id: Optional[int]
    sm_clock_mhz: Optional[int]
    memory_clock_mhz: Optional[int]
    sm_clock_max_mhz: Optional[int]
    memory_clock_max_mhz: Optional[int]
    clocks_event_reasons: Optional[List[str]]
    violation_seconds_total: GpuViolationSecondsTotal
    energy_joules_total: Optional[float]
    idle_power_watts: Optional[float]
    idle_power_observed: Optional[bool]
    power_limit_watts: Optional[float]
    memory_temperature_celsius: Optional[int]
    pcie_tx_bytes_per_second: Optional[float]
    pcie_rx_bytes_per_second: Optional[float]
    pcie_replays_total: Optional[int]
    nvlink_tx_bytes_total: Optional[int]
    nvlink_rx_bytes_total: Optional[int]
    encoder_utilization_percent: Optional[float]
    decoder_utilization_percent: Optional[float]
    ecc_errors_total: GpuEccErrorsTotal
    remapped_rows: Optional[GpuRemappedRows]
    retired_pages: Optional[GpuRetiredPages]
    xid_errors_total: Optional[int]
    last_xid: Optional[int]
    recent_xids: List[int]
    recent_xid_instances: List[GpuRecentXidInstances]
    compute_mode: Optional[str]
    persistence_mode: Optional[bool]
    pci_bus_id: Optional[str]
    serial: Optional[str]
    minor_number: Optional[int]
    driver_version: Optional[str]
    cuda_version: Optional[str]
    gpm: Optional[GpuGpm]


class GpuProcess(TypedDict):
    pid: int
    name: Optional[str]
    type: str
    memory_bytes: Optional[int]
    sm_percent: Optional[float]
    memory_percent: Optional[float]
    encoder_percent: Optional[float]
    decoder_percent: Optional[float]
    power_watts: Optional[float]
    energy_joules_total: Optional[float]
    cgroup: Optional[str]
    container: Optional[Container]


class GpuRecord(TypedDict):
    schema: int
    type: str
    ts: str
    host: str
    interval_s: Optional[float]
    gpu: GpuFigures
    processes: List[GpuProcess]
    errors: List[RecordError]


class EventRecord(TypedDict):
    schema: int
    type: str
    ts: Optional[str]
    host: Optional[str]
    kind: str
    severity: str
    cgroup: Optional[str]
    container: Optional[Container]
    message: str
    evidence: Evidence
    resolves: Optional[str]
    since: Optional[str]


class ExitRecord(TypedDict):
    schema: int
    type: str
    ts: str
    host: Optional[str]
    cgroup: str
    unit: Optional[str]
    pod: Optional[Pod]
    container: Optional[Container]
    started: Optional[str]
    last_seen: Optional[str]
    ended: str
    lifetime_seconds: Optional[float]
    samples: int
    cpu_seconds_total: Optional[float]
    cpu_throttled_seconds_total: Optional[float]
    cpu_throttled_periods_total: Optional[int]
    cpu_periods_total: Optional[int]
    memory_peak_bytes: Optional[int]
    memory_peak_source: Optional[str]
    oom_kills_total: Optional[int]
    io_read_bytes_total: Optional[int]
    io_write_bytes_total: Optional[int]
    network_rx_bytes_total: Optional[int]
    network_tx_bytes_total: Optional[int]
    gpu_seconds_total: Optional[float]
    gpu_memory_peak_bytes: Optional[int]
    gpu_energy_joules_total: Optional[float]
    ended_by: Optional[str]


class MemoryStatCounters(TypedDict):
    """The memory.stat counters of memory read as is (fields.Field.as_is)."""
    pgscan_total: Optional[int]
    pgsteal_total: Optional[int]
    pgfault_total: Optional[int]
    pgmajfault_total: Optional[int]
    workingset_refault_anon_total: Optional[int]
    workingset_refault_file_total: Optional[int]
    dirty_bytes: Optional[int]
    writeback_bytes: Optional[int]


Record = Union[CgroupRecord, GpuRecord, EventRecord, ExitRecord]
Sampled = Union[CgroupRecord, GpuRecord, ExitRecord]  # what a Sampler's tick makes
JsonObject = Mapping[str, object]  # any one line of JSON output: a record, `cgstat pid`'s objects
