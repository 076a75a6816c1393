"""The field table: every field of the four records (RECORD, GPU_RECORD, EVENT, EXIT), every
Prometheus family (FAMILIES, DCGM_SERIES) and CSV column (CSV_COLUMNS), each declared once
with its type, unit, meaning and source (the cgroup v2 and v1 file, or the NVML call).
contract/schema.py makes the JSON Schemas, the record TypedDicts, the key paths and the
docs' tables from it; tests/unit/test_fields.py checks the rest against it. Imports only
contract/event_kinds.py. Adding a field: docs/development.md.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Tuple, Union


class Series(NamedTuple):
    """A Prometheus series a field gives: a family of its own (`kind` and `help` set), or one
    series of a family made of several fields (`kind` ""; the family in _SHARED)."""
    family: str
    kind: str = ""  # counter, gauge
    help: str = ""
    labels: str = ""  # its fixed label pairs, as written ('event="low"')
    source: str = ""  # what docs/prometheus.md says it is made from, where the path alone would not say
    counterpart: str = ""  # docs/prometheus.md's "cAdvisor counterpart", where not the default (Family.counterpart)

from cgstat.contract.event_kinds import EVENT_KINDS, RESOLVED


class Field(NamedTuple):
    path: str  # dotted; "[]" an array's items, "{}" a map's values
    type: str  # int, float, str, bool, object, array, map, enum, const
    nullable: bool
    unit: str  # from the name's suffix: bytes, seconds, percent, ... ("" for none)
    doc: str
    v2: str  # where it comes from on cgroup v2 (a file, an NVML call; "" when derived)
    v1: str  # and on v1 ("-": not on v1)
    required: bool  # the key is always present (only event evidence keys are not)
    closed: bool  # an object with no other keys (additionalProperties false)
    same_as: str  # an object with the children of this RECORD path (pod, container)
    schema: Tuple[Tuple[str, Any], ...]  # further JSON Schema keywords (minimum, pattern, enum)
    metrics: Tuple[Series, ...]  # its Prometheus series (a number's value as is; a bool as 0/1)
    csv: bool  # a column of `--format csv`
    as_is: bool  # a kernel counter read as the file writes it, by the keys v2 and v1 name ("FILE KEY")


_UNITS = (("_joules_total", "joules"), ("_bytes_per_second", "bytes/s"), ("_ops_per_second", "ops/s"), ("_seconds_total", "seconds"),
          ("_bytes_total", "bytes"), ("_bytes", "bytes"), ("_seconds", "seconds"), ("_s", "seconds"),
          ("percent", "percent"), ("_cores", "cores"), ("_us", "microseconds"), ("_celsius", "celsius"),
          ("_watts", "watts"), ("_total", "count"))


def unit_of(name: str) -> str:
    """The unit a name says (`working_set_bytes`: bytes); "" for a name without one."""
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def _f(path: str, type: str, doc: str = "", v2: str = "", v1: str = "", required: bool = True,
       closed: bool = True, same_as: str = "", nvml: str = "", metric: Union[Series, Tuple[Series, ...]] = (),
       csv: bool = False, as_is: bool = False, **schema: Any) -> Field:
    """A field; `type` ends in "?" when it may be null; `nvml`: the NVML call, on v1 and v2 alike;
    `metric`: its series (one, or a tuple); `csv`: a CSV column; `as_is`: read as the kernel
    writes it, with no code of its own (the reader takes its key from v2 and v1: a memory.stat
    counter, see kernel/controllers/memory.py)."""
    nullable = type.endswith("?")
    base = type.rstrip("?")
    if base == "enum":
        nullable = None in schema["enum"]
    leaf = path.rsplit(".", 1)[-1]
    return Field(path, base, nullable, unit_of(leaf), doc, nvml or v2, nvml or v1 or v2, required, closed, same_as,
                 tuple(schema.items()), (metric,) if isinstance(metric, Series) else metric, csv, as_is)


TS_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$"
_ERROR = "file (memory.stat) or controller (io) concerned"
_PROBLEMS = ("gone", "unsupported", "permission_denied", "malformed", "read_failed", "missing", "unavailable")
_GPU_PROCESS = "nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3"
_GPU_UTIL = "nvmlDeviceGetProcessesUtilizationInfo (else nvmlDeviceGetProcessUtilization)"
_GPU_TYPES = ["compute", "graphics", "mps", "mps_server"]
_ENERGY = "its share of the GPU's active power (power above idle, split by SM share; docs/gpu.md)"
_FIELDS = "nvmlDeviceGetFieldValues "
# NVML's clock event reasons (nvmlClocksEventReason*): the bit of each, and the name the GPU
# record gives it (gpu/health.py decodes the mask with them; dcgm-exporter's series is the mask)
CLOCK_EVENT_REASONS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                       (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                       (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                       (0x100, "display_clock_setting"))
_REASONS = [name for _, name in CLOCK_EVENT_REASONS]
_NETDEV = "/proc/<pid>/net/dev of a member process's network namespace"

_NET_COUNTERS = ("rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total",
                 "rx_errors_total", "tx_errors_total", "rx_dropped_total", "tx_dropped_total")
# cAdvisor's network series, per interface of the workload's network namespace (all but lo)
_NET_METRICS = {key: Series(name, "counter", help) for name, help, key in (
    ("container_network_receive_bytes_total", "Cumulative count of bytes received", "rx_bytes_total"),
    ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "tx_bytes_total"),
    ("container_network_receive_packets_total", "Cumulative count of packets received", "rx_packets_total"),
    ("container_network_transmit_packets_total", "Cumulative count of packets transmitted", "tx_packets_total"),
    ("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving",
     "rx_errors_total"),
    ("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting",
     "tx_errors_total"),
    ("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving",
     "rx_dropped_total"),
    ("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting",
     "tx_dropped_total"),
)}
_PSI_DOCS = (("some_avg10", "% of wall time some tasks stalled, 10 s average"), ("some_avg60", "60 s average"),
             ("some_avg300", "300 s average"), ("some_seconds_total", "cumulative seconds some tasks stalled"),
             ("full_avg10", "% of wall time all tasks stalled, 10 s average"), ("full_avg60", "60 s average"),
             ("full_avg300", "300 s average"), ("full_seconds_total", "cumulative seconds all tasks stalled"))
PRESSURE_RESOURCES = ("cpu", "memory", "io")
_IO_RATES = (("read_bytes_per_second", "bytes read per second since the previous sample"),
             ("write_bytes_per_second", "bytes written per second since the previous sample"),
             ("read_ops_per_second", "read operations per second"),
             ("write_ops_per_second", "write operations per second"))
_IO_V1 = "blkio.throttle.io_service_bytes_recursive"
_IO_V1_OPS = "blkio.throttle.io_serviced_recursive"


def _psi_metric(resource: str, key: str) -> Tuple[Series, ...]:
    """cAdvisor's PSI totals: some -> waiting, full -> stalled."""
    if key == "some_seconds_total":
        return (Series("container_pressure_%s_waiting_seconds_total" % resource, "counter",
                  "Total time duration tasks in the container have waited due to %s congestion." % resource.upper()),)
    if key == "full_seconds_total":
        return (Series("container_pressure_%s_stalled_seconds_total" % resource, "counter",
                  "Total time duration no tasks in the container could make progress due to %s congestion."
                  % resource.upper()),)
    return ()


def _pressure(resource: str) -> Tuple[Field, ...]:
    file = resource + ".pressure"
    return (_f("pressure." + resource, "object?"),) + tuple(
        _f("pressure.%s.%s" % (resource, key), "float?", doc, v2=file, v1="unified " + file + " (hybrid)",
           minimum=0, metric=_psi_metric(resource, key)) for key, doc in _PSI_DOCS)


_MEMORY_EVENTS = (("low", "reclaimed below memory.low: its protection was breached"),
                  ("high", "held at memory.high: throttled and made to reclaim (a slowdown, no OOM)"),
                  ("max", "usage hit memory.max"), ("oom", "memory.max hit and reclaim failed"),
                  ("oom_kill", "processes OOM-killed"), ("oom_group_kill", "whole-group OOM kills (memory.oom.group)"))


def _memory_events(path: str, file: str, metrics: Dict[str, Series]) -> Tuple[Field, ...]:
    return tuple(_f("%s.%s" % (path, key), "int?", doc, v2="%s %s" % (file, key), v1="-", minimum=0,
                    metric=metrics.get(key, ())) for key, doc in _MEMORY_EVENTS)


def _failures(failure_type: str) -> Tuple[Series, ...]:
    return tuple(Series("container_memory_failures_total", labels='failure_type="%s",scope="%s"' % (failure_type, scope))
                 for scope in ("container", "hierarchy"))


# -- the cgroup and pod record (cgstat/contract/record.schema.json) -------------------------------------
# Each field: its path (`memory.working_set_bytes`; `[]` an array's items, `{}` a map's
# values), type and nullability, unit, meaning, the kernel file (or NVML call) it comes from
# on cgroup v2 and v1, its Prometheus series (`metric=Series(...)`) and whether it is a CSV
# column; in the record's order, which the record keeps.

RECORD: Tuple[Field, ...] = (
    _f("schema", "const", const=1),
    _f("type", "enum", enum=["cgroup", "pod"]),
    _f("ts", "str", "RFC 3339 UTC wall time of the sample", pattern=TS_PATTERN),
    _f("host", "str", v2="/etc/hostname"),
    _f("cgroup", "str", "path from the hierarchy root (the CPU hierarchy's on v1)", pattern="^/"),
    _f("paths", "map", "hierarchy -> path actually read there", minProperties=1),
    _f("paths{}", "str", pattern="^/"),
    _f("interval_s", "float?", "seconds since this cgroup's previous sample; null on the first"),
    _f("unit", "str?", "decoded systemd unit name of the last path component"),
    _f("pod", "object?", "the Kubernetes pod of a pod-level cgroup or of a container in a pod "
                         "(same object as container.pod), else null"),
    _f("pod.uid", "str", "pod UID, dashed"),
    _f("pod.name", "str?"),
    _f("pod.namespace", "str?"),
    _f("pod.qos", "enum", enum=["guaranteed", "burstable", "besteffort", None]),
    _f("container", "object?"),
    # free text, not an enum: the runtimes' names are theirs (each runtime module's `name`,
    # gathered by naming/runtimes/registry.py), so a new runtime needs no change here
    _f("container.runtime", "str?", "the runtime that made the container, as its module in "
                                    "naming/runtimes/ names it (registry.py lists them)"),
    _f("container.id", "str?", "full container ID (64 hex), the LXC container name, or the Slurm job ID"),
    _f("container.short_id", "str?", "first 12 hex digits, as docker ps prints"),
    _f("container.name", "str?"),
    _f("container.image", "str?"),
    _f("container.labels", "map?"),
    _f("container.labels{}", "str"),
    _f("container.pod", "object?", same_as="pod"),
    _f("container.sandbox", "bool", "a pod's sandbox (pause) container, not an application container"),
    _f("container.slurm", "object?", "the Slurm job, step and task of a cgroup slurmd made (runtime slurm), "
                                     "else null"),
    _f("container.slurm.job_id", "int", "the job ID (job_<J> in the path)", minimum=0),
    _f("container.slurm.step", "str?", "the step (step_<S>: a number, batch, extern or interactive); "
                                       "null for the job's own cgroup"),
    _f("container.slurm.task", "str?", "the task (task_<T>: a number or special); null above the tasks"),
    _f("container.slurm.uid", "int?", "the job's user: uid_<U> in a v1 path, else the owner of the job's "
                                      "batch script in slurmd's spool; null when neither says", minimum=0),
    _f("container.slurm.user", "str?", "that uid's name in the host's /etc/passwd"),

    _f("cpu", "object"),
    _f("cpu.usage_seconds_total", "float?", "cumulative CPU seconds", v2="cpu.stat usage_usec",
       v1="cpuacct.usage", minimum=0,
       metric=Series("container_cpu_usage_seconds_total", "counter",
                "Cumulative cpu time consumed in seconds.", labels='cpu="total"')),
    _f("cpu.user_seconds_total", "float?", "cumulative user-mode CPU seconds", v2="cpu.stat user_usec",
       v1="cpuacct.stat user", minimum=0,
       metric=Series("container_cpu_user_seconds_total", "counter", "Cumulative user cpu time consumed in seconds.")),
    _f("cpu.system_seconds_total", "float?", "cumulative kernel-mode CPU seconds", v2="cpu.stat system_usec",
       v1="cpuacct.stat system", minimum=0,
       metric=Series("container_cpu_system_seconds_total", "counter", "Cumulative system cpu time consumed in seconds.")),
    _f("cpu.percent", "float?", "100 = one core busy, over the interval", minimum=0),
    _f("cpu.limit_cores", "float?", "CFS quota / period; null when unlimited", v2="cpu.max",
       v1="cpu.cfs_quota_us, cpu.cfs_period_us", minimum=0),
    _f("cpu.quota_us", "int?", "CFS quota per period in microseconds (cpu.max, cpu.cfs_quota_us); "
                               "null without a limit", v2="cpu.max", v1="cpu.cfs_quota_us", minimum=0),
    _f("cpu.period_us", "int?", "CFS period in microseconds (cpu.max, cpu.cfs_period_us)", v2="cpu.max",
       v1="cpu.cfs_period_us", minimum=1),
    _f("cpu.periods_total", "int?", "CFS enforcement periods elapsed", v2="cpu.stat nr_periods", minimum=0,
       metric=Series("container_cpu_cfs_periods_total", "counter", "Number of elapsed enforcement period intervals.")),
    _f("cpu.throttled_periods_total", "int?", "periods in which the cgroup was throttled",
       v2="cpu.stat nr_throttled", minimum=0,
       metric=Series("container_cpu_cfs_throttled_periods_total", "counter", "Number of throttled period intervals.")),
    _f("cpu.throttled_seconds_total", "float?", "cumulative seconds throttled", v2="cpu.stat throttled_usec",
       v1="cpu.stat throttled_time", minimum=0,
       metric=Series("container_cpu_cfs_throttled_seconds_total", "counter",
                "Total time duration the container has been throttled.")),
    _f("cpu.throttled_percent", "float?", "throttled periods / periods over the interval, %", minimum=0),
    _f("cpu.weight", "int?", "the CPU share under contention, 1-10000 (100 = default); v1 cpu.shares "
                             "converted as the kernel does, shares x 100 / 1024 rounded", v2="cpu.weight",
       v1="cpu.shares", minimum=1, maximum=10000,
       metric=Series("cgstat_cpu_weight", "gauge", "CPU weight (1-10000, 100 = default; v1 cpu.shares converted).",
                source="cpu.weight (v1: cpu.shares × 100 / 1024)")),
    _f("cpu.shares", "int?", "v1 cpu.shares as written (1024 = default); null on v2 (see weight)", v2="-",
       v1="cpu.shares", minimum=0,
       metric=Series("container_spec_cpu_shares", "gauge", "CPU share of the container.", source="cpu.shares (v1 only)",
         counterpart="same name; on v2 cAdvisor turns `cpu.weight` back into shares with runc's linear map, which is "
                     "not the kernel's: see `cgstat_cpu_weight`")),
    _f("cpu.max_burst_us", "int?", "CPU time a quota'd cgroup may bank and burst beyond its quota per period",
       v2="cpu.max.burst", v1="cpu.cfs_burst_us", minimum=0,
       metric=Series("cgstat_spec_cpu_max_burst", "gauge", "CPU burst of the container in microseconds per period.",
                source="cpu.max_burst_us (µs per period, as `container_spec_cpu_quota`)")),
    _f("cpu.cpuset_cpus", "str?", "CPUs the cgroup may run on (effective list, as the kernel writes it)",
       v2="cpuset.cpus.effective", v1="-"),
    _f("cpu.cpuset_mems", "str?", "memory nodes the cgroup may allocate from (effective)",
       v2="cpuset.mems.effective", v1="-"),

    _f("memory", "object"),
    _f("memory.usage_bytes", "int?", "memory.current / memory.usage_in_bytes, page cache included",
       v2="memory.current", v1="memory.usage_in_bytes", minimum=0,
       metric=Series("container_memory_usage_bytes", "gauge",
                "Current memory usage in bytes, including all memory regardless of when it was accessed.")),
    _f("memory.working_set_bytes", "int?", "usage - inactive_file, clamped at 0 (docker stats MEM USAGE)",
       v2="memory.current, memory.stat inactive_file", v1="memory.usage_in_bytes, memory.stat total_inactive_file",
       minimum=0, metric=Series("container_memory_working_set_bytes", "gauge", "Current working set in bytes.")),
    _f("memory.limit_bytes", "int?", "null when unlimited", v2="memory.max", v1="memory.limit_in_bytes",
       minimum=0,
       metric=Series("container_spec_memory_limit_bytes", "gauge",
                "Memory limit for the container.", source="memory.limit_bytes (no sample without a limit)")),
    _f("memory.percent", "float?", "working set / limit (host MemTotal when unlimited) * 100", minimum=0),
    _f("memory.anon_bytes", "int?", "anonymous memory (v2 anon, v1 total_rss)", v2="memory.stat anon",
       v1="memory.stat total_rss", minimum=0, metric=Series("container_memory_rss", "gauge", "Size of RSS in bytes.")),
    _f("memory.file_bytes", "int?", "page cache (v2 file, v1 total_cache)", v2="memory.stat file",
       v1="memory.stat total_cache", minimum=0,
       metric=Series("container_memory_cache", "gauge", "Number of bytes of page cache memory.")),
    _f("memory.inactive_file_bytes", "int?", "inactive page cache", v2="memory.stat inactive_file",
       v1="memory.stat total_inactive_file", minimum=0,
       metric=Series("container_memory_total_inactive_file_bytes", "gauge", "Current total inactive file in bytes.")),
    _f("memory.shmem_bytes", "int?", "shared memory and tmpfs", v2="memory.stat shmem",
       v1="memory.stat total_shmem", minimum=0,
       metric=Series("cgstat_memory_shmem_bytes", "gauge", "Shared memory (tmpfs, shm) in bytes.")),
    _f("memory.swap_bytes", "int?", "swap in use; null without swap accounting", v2="memory.swap.current",
       v1="memory.stat total_swap", minimum=0,
       metric=Series("container_memory_swap", "gauge", "Container swap usage in bytes.")),
    _f("memory.oom_kills_total", "int?", "processes killed by the OOM killer in this cgroup (v2: and in its "
       "descendants, memory.events being hierarchical; events_local.oom_kill is its own; v1: its own)",
       v2="memory.events oom_kill", v1="memory.oom_control oom_kill", minimum=0,
       metric=Series("container_oom_events_total", "counter", "Count of out of memory events observed for the container.")),
    _f("memory.oom_events_total", "int?", "v2 memory.events oom: times the limit was hit and reclaim failed",
       v2="memory.events oom", v1="-", minimum=0,
       metric=Series("cgstat_memory_oom_total", "counter",
                "Times the cgroup hit its limit and the OOM killer was invoked (v2 memory.events oom).",
                counterpart="— (cAdvisor's `container_memory_events_max_total` counts `max` events, not OOM "
                            "invocations)")),
    _f("memory.peak_bytes", "int?", "the most memory the cgroup ever used (what a job needs)",
       v2="memory.peak", v1="memory.max_usage_in_bytes", minimum=0,
       metric=Series("container_memory_max_usage_bytes", "gauge", "Maximum memory usage recorded in bytes.",
                source="memory.peak_bytes (v2 `memory.peak`, v1 `memory.max_usage_in_bytes`)")),
    _f("memory.swap_peak_bytes", "int?", "the most swap it ever used (kernel 6.5+)", v2="memory.swap.peak",
       v1="-", minimum=0,
       metric=Series("cgstat_memory_swap_max_usage_bytes", "gauge", "Maximum swap usage recorded in bytes.")),
    _f("memory.high_bytes", "int?", "memory.high, the throttle line; null when max", v2="memory.high", v1="-",
       minimum=0,
       metric=Series("cgstat_memory_high_bytes", "gauge", "memory.high: above it the kernel throttles the cgroup.")),
    _f("memory.low_bytes", "int?", "best-effort protection from reclaim (v1: the soft limit, docker "
                                   "--memory-reservation); null when max", v2="memory.low",
       v1="memory.soft_limit_in_bytes", minimum=0,
       metric=Series("container_spec_memory_reservation_limit_bytes", "gauge",
                "Memory reservation limit for the container.",
                source="memory.low_bytes (v2 `memory.low`, v1 `memory.soft_limit_in_bytes`: what "
                       "`docker run --memory-reservation` writes)",
                counterpart="same name; on v1 the same file, on v2 cAdvisor reads `memory.min`")),
    _f("memory.min_bytes", "int?", "hard protection from reclaim; null when max", v2="memory.min", v1="-",
       minimum=0, metric=Series("cgstat_memory_min_bytes", "gauge", "memory.min: memory protected from reclaim.",
                                   counterpart="— (cAdvisor's v2 reservation)")),
    _f("memory.swap_limit_bytes", "int?", "swap limit; null when max (v1 limits memory+swap together: none)",
       v2="memory.swap.max", v1="-", minimum=0,
       metric=Series("container_spec_memory_swap_limit_bytes", "gauge",
                "Memory swap limit for the container.",
                source="memory.swap_limit_bytes (v2 `memory.swap.max`; none on v1)",
                counterpart="same name on v2; on v1 cAdvisor gives `memory.memsw.limit_in_bytes` (memory + swap), "
                            "not made here")),
    _f("memory.zswap_bytes", "int?", "compressed swap held in RAM by zswap", v2="memory.zswap.current", v1="-",
       minimum=0, metric=Series("cgstat_memory_zswap_bytes", "gauge", "Compressed swap held in RAM (zswap).")),
    _f("memory.events", "object?", "memory.events counts of this cgroup and its descendants"),
) + _memory_events("memory.events", "memory.events", {
    "low": Series("cgstat_memory_events_total", labels='event="low"'),
    "high": Series("container_memory_events_high_total", "counter",
              "Times the container was throttled at memory.high (v2 memory.events high)."),
    "max": Series("container_memory_events_max_total", "counter",
             "Times the container's usage hit memory.max (v2 memory.events max)."),
    "oom": Series("cgstat_memory_events_total", labels='event="oom"'),
    # oom_kill: container_oom_events_total, from memory.oom_kills_total
    "oom_group_kill": Series("cgstat_memory_events_total", labels='event="oom_group_kill"')}) + (
    _f("memory.events_local", "object?", "the same counts for this cgroup alone"),
) + _memory_events("memory.events_local", "memory.events.local", {
    key: Series("cgstat_memory_events_local_total", labels='event="%s"' % key) for key, _ in _MEMORY_EVENTS}) + (
    _f("memory.swap_events", "object?", "memory.swap.events counts"),
) + tuple(_f("memory.swap_events." + key, "int?", doc, v2="memory.swap.events " + key, v1="-", minimum=0,
             metric=Series("cgstat_memory_swap_events_total", labels='event="%s"' % key)) for key, doc in (
    ("high", "swap use went over memory.swap.high"),
    ("max", "swap use would have gone over memory.swap.max"),
    ("fail", "swap allocations that failed (the limit, or swap full)"))) + (
    _f("memory.failcnt", "int?", "charges refused at the memory limit (v1)", v2="-", v1="memory.failcnt",
       minimum=0,
       metric=Series("container_memory_failcnt", "gauge",
                "Number of memory usage hits limits.", source="memory.failcnt (v1 only)",
                counterpart="same name; cAdvisor types it a counter, here a gauge: promtool's lint wants a counter's "
                            "name to end in `_total`")),
    _f("memory.pgscan_total", "int?", "pages scanned by reclaim", v2="memory.stat pgscan", v1="-", as_is=True,
       minimum=0,
       metric=Series("cgstat_memory_pgscan_total", "counter", "Pages scanned by reclaim.")),
    _f("memory.pgsteal_total", "int?", "pages reclaimed", v2="memory.stat pgsteal", v1="-", as_is=True, minimum=0,
       metric=Series("cgstat_memory_pgsteal_total", "counter", "Pages reclaimed.")),
    # cAdvisor's failures: pgfault and pgmajfault, scope container and hierarchy. memory.stat
    # counts the subtree on v2 (and its total_ twins on v1): cAdvisor gives that one count
    # both scopes on v2, and so does cgstat on both layouts.
    _f("memory.pgfault_total", "int?", "page faults, minor and major", v2="memory.stat pgfault",
       v1="memory.stat total_pgfault", as_is=True, minimum=0, metric=_failures("pgfault")),
    _f("memory.pgmajfault_total", "int?", "major page faults (read from disk or swap)",
       v2="memory.stat pgmajfault", v1="memory.stat total_pgmajfault", as_is=True, minimum=0,
       metric=_failures("pgmajfault")),
    _f("memory.workingset_refault_anon_total", "int?", "reclaimed anonymous pages faulted back in (thrashing)",
       v2="memory.stat workingset_refault_anon", v1="memory.stat total_workingset_refault_anon", as_is=True, minimum=0,
       metric=Series("cgstat_memory_workingset_refault_anon_total", "counter",
                "Reclaimed anonymous pages faulted back in.")),
    _f("memory.workingset_refault_file_total", "int?", "reclaimed page-cache pages read back in",
       v2="memory.stat workingset_refault_file", v1="memory.stat total_workingset_refault_file", as_is=True, minimum=0,
       metric=Series("cgstat_memory_workingset_refault_file_total", "counter", "Reclaimed page-cache pages read back in.")),
    _f("memory.dirty_bytes", "int?", "page cache waiting to be written back", v2="memory.stat file_dirty",
       v1="memory.stat total_dirty", as_is=True, minimum=0,
       metric=Series("cgstat_memory_dirty_bytes", "gauge", "Page cache waiting to be written back.")),
    _f("memory.writeback_bytes", "int?", "page cache being written back now", v2="memory.stat file_writeback",
       v1="memory.stat total_writeback", as_is=True, minimum=0,
       metric=Series("cgstat_memory_writeback_bytes", "gauge", "Page cache being written back.")),
    _f("memory.hugetlb_bytes", "int?", "huge pages in use (all sizes; where the hugetlb controller is enabled)",
       v2="hugetlb.<size>.current", v1="-", minimum=0,
       metric=Series("cgstat_memory_hugetlb_bytes", "gauge", "Huge pages in use, all sizes.")),
    _f("memory.oom_group", "bool?", "an OOM kill takes the whole cgroup (memory.oom.group 1)",
       v2="memory.oom.group", v1="-",
       metric=Series("cgstat_memory_oom_group", "gauge", "1 when an OOM kill takes the whole cgroup (memory.oom.group).")),

    _f("io", "object"),
    _f("io.read_bytes_total", "int?", "summed over devices", v2="io.stat rbytes", v1=_IO_V1 + " Read", minimum=0),
    _f("io.write_bytes_total", "int?", "summed over devices", v2="io.stat wbytes", v1=_IO_V1 + " Write",
       minimum=0),
    _f("io.read_ops_total", "int?", "summed over devices", v2="io.stat rios", v1=_IO_V1_OPS + " Read", minimum=0),
    _f("io.write_ops_total", "int?", "summed over devices", v2="io.stat wios", v1=_IO_V1_OPS + " Write",
       minimum=0),
) + tuple(_f("io." + key, "float?", doc, minimum=0) for key, doc in _IO_RATES) + (
    _f("io.devices", "array?"),
    _f("io.devices[]", "object"),
    _f("io.devices[].device", "str", "MAJ:MIN", v2="io.stat MAJ:MIN", v1=_IO_V1 + " MAJ:MIN",
       pattern="^[0-9]+:[0-9]+$"),
    _f("io.devices[].name", "str?", "kernel device name (vda, nvme0n1), from /sys/dev/block or /proc/partitions",
       v2="/sys/dev/block/MAJ:MIN, /proc/partitions"),
    _f("io.devices[].read_bytes_total", "int?", "cumulative bytes read", v2="io.stat rbytes", v1=_IO_V1 + " Read",
       minimum=0, metric=Series("container_fs_reads_bytes_total", "counter", "Cumulative count of bytes read.")),
    _f("io.devices[].write_bytes_total", "int?", "cumulative bytes written", v2="io.stat wbytes",
       v1=_IO_V1 + " Write", minimum=0,
       metric=Series("container_fs_writes_bytes_total", "counter", "Cumulative count of bytes written.")),
    _f("io.devices[].read_ops_total", "int?", "cumulative read operations", v2="io.stat rios",
       v1=_IO_V1_OPS + " Read", minimum=0,
       metric=Series("container_fs_reads_total", "counter", "Cumulative count of reads completed.")),
    _f("io.devices[].write_ops_total", "int?", "cumulative write operations", v2="io.stat wios",
       v1=_IO_V1_OPS + " Write", minimum=0,
       metric=Series("container_fs_writes_total", "counter", "Cumulative count of writes completed.")),
    _f("io.devices[].discard_bytes_total", "int?", "cumulative bytes discarded (v2 dbytes, v1 Discard); "
                                                   "null where the kernel has no such counter",
       v2="io.stat dbytes", v1=_IO_V1 + " Discard", minimum=0),
    _f("io.devices[].discard_ops_total", "int?", "cumulative discard operations", v2="io.stat dios",
       v1=_IO_V1_OPS + " Discard", minimum=0,
       metric=Series("cgstat_fs_discards_total", "counter", "Cumulative count of discards completed.")),
) + tuple(_f("io.devices[]." + key, "float?", doc, minimum=0) for key, doc in _IO_RATES) + (
    _f("io.limits", "array?", "throttle limits per device (only devices with a rule); null without the file"),
    _f("io.limits[]", "object"),
    _f("io.limits[].device", "str", "MAJ:MIN", v2="io.max MAJ:MIN", v1="blkio.throttle.*_device MAJ:MIN",
       pattern="^[0-9]+:[0-9]+$"),
    _f("io.limits[].name", "str?", "kernel device name", v2="/sys/dev/block/MAJ:MIN, /proc/partitions"),
    _f("io.limits[].read_bytes_per_second", "int?", "read bandwidth limit; null when max", v2="io.max rbps",
       v1="blkio.throttle.read_bps_device", minimum=0),
    _f("io.limits[].write_bytes_per_second", "int?", "write bandwidth limit; null when max", v2="io.max wbps",
       v1="blkio.throttle.write_bps_device", minimum=0),
    _f("io.limits[].read_ops_per_second", "int?", "read IOPS limit; null when max", v2="io.max riops",
       v1="blkio.throttle.read_iops_device", minimum=0),
    _f("io.limits[].write_ops_per_second", "int?", "write IOPS limit; null when max", v2="io.max wiops",
       v1="blkio.throttle.write_iops_device", minimum=0),
    _f("network", "object?", "its network namespace's interface counters (all but lo); null in the host's "
                             "namespace, without a member process, or for a recorded tree (errors says why)"),
) + tuple(_f("network." + key, "int", v2=_NETDEV, minimum=0) for key in _NET_COUNTERS) + (
    _f("network.rx_bytes_per_second", "float?", minimum=0),
    _f("network.tx_bytes_per_second", "float?", minimum=0),
    _f("network.interfaces", "array"),
    _f("network.interfaces[]", "object"),
    _f("network.interfaces[].name", "str", v2=_NETDEV),
) + tuple(_f("network.interfaces[]." + key, "int", v2=_NETDEV, minimum=0, metric=_NET_METRICS[key])
        for key in _NET_COUNTERS) + (
    _f("network.netns", "int", v2="/proc/<pid>/ns/net inode", minimum=0),
    _f("network.shared", "bool"),

    _f("pids", "object"),
    _f("pids.current", "int?", "tasks in the cgroup", v2="pids.current", minimum=0,
       metric=Series("container_threads", "gauge", "Number of threads running inside the container.")),
    _f("pids.limit", "int?", "pids.max; null when max", v2="pids.max", minimum=0,
       metric=Series("container_threads_max", "gauge",
                "Maximum number of threads allowed inside the container.",
                source="pids.limit (no sample without a limit)")),
    _f("pids.processes", "int?", "processes in the cgroup itself (the PIDs in its cgroup.procs)",
       v2="cgroup.procs", minimum=0,
       metric=Series("container_processes", "gauge", "Number of processes running inside the container.", 
                source="pids.processes")),
    _f("pids.peak", "int?", "the most tasks it ever had (kernels with pids.peak)", v2="pids.peak", minimum=0,
       metric=Series("cgstat_pids_max_usage", "gauge", "Maximum number of tasks recorded (pids.peak).")),
    _f("pids.events_max_total", "int?", "forks refused because a pids.max was reached", v2="pids.events max",
       minimum=0,
       metric=Series("cgstat_pids_limit_hits_total", "counter", "Forks refused because a pids.max was reached.")),
    _f("pressure", "object"),
) + _pressure("cpu") + _pressure("memory") + _pressure("io") + (
    _f("gpu", "object?", "GPU use of the cgroup's whole subtree (NVML processes joined through their PIDs); "
                         "null when GPU metrics are off"),
    _f("gpu.memory_bytes", "int?", "sum of its GPU processes' memory; 0 with none", minimum=0),
    _f("gpu.sm_percent", "float?", "sum of its processes' SM use, on the scale of cpu.percent (100 = one whole "
                                   "GPU); null when a process can't be measured", minimum=0),
    _f("gpu.power_watts", "float?", "sum of its processes' power_watts; null when a GPU's power is unknown",
       minimum=0),
    _f("gpu.energy_joules_total", "float", "GPU energy its processes drew since cgstat started, kept per cgroup "
                                           "while it exists (a process that exits leaves its share)", minimum=0,
       metric=Series("cgstat_container_gpu_energy_joules_total", "counter",
                "GPU energy the container's processes drew since cgstat started (their share of active power).")),
    _f("gpu.devices", "array", "UUIDs of the GPUs (or MIG devices) its processes use"),
    _f("gpu.devices[]", "str"),
    _f("gpu.processes", "array"),
    _f("gpu.processes[]", "object"),
    _f("gpu.processes[].pid", "int", "host PID, as NVML reports it", minimum=1, nvml=_GPU_PROCESS),
    _f("gpu.processes[].name", "str?", "/proc/<pid>/comm", v2="/proc/<pid>/comm"),
    _f("gpu.processes[].gpu_index", "int", "NVML index of the GPU (a MIG device's parent)", minimum=0),
    _f("gpu.processes[].gpu_uuid", "str?", "the GPU's UUID, or the MIG device's", nvml="nvmlDeviceGetUUID"),
    _f("gpu.processes[].type", "enum", "mps: an MPS client; mps_server: the MPS server (nvidia-cuda-mps-server)",
       enum=_GPU_TYPES),
    _f("gpu.processes[].memory_bytes", "int?", "GPU memory the process uses", minimum=0, nvml=_GPU_PROCESS),
    _f("gpu.processes[].sm_percent", "float?", "streaming-multiprocessor use, percent of the GPU; null where "
                                               "NVML can't measure it (MIG)", minimum=0, nvml=_GPU_UTIL),
    _f("gpu.processes[].memory_percent", "float?", "memory-controller use, percent", minimum=0,
       nvml=_GPU_UTIL),
    _f("gpu.processes[].encoder_percent", "float?", minimum=0, nvml=_GPU_UTIL),
    _f("gpu.processes[].decoder_percent", "float?", minimum=0, nvml=_GPU_UTIL),
    _f("gpu.processes[].power_watts", "float?", _ENERGY, minimum=0),
    _f("gpu.processes[].energy_joules_total", "float?", "its power integrated over the readings since cgstat "
                                                        "first saw it", minimum=0),
    _f("errors", "array"),
    _f("errors[]", "object"),
    _f("errors[].source", "str", _ERROR),
    _f("errors[].error", "enum", enum=list(_PROBLEMS + ("host_namespace", "no_process", "several_namespaces"))),
    _f("errors[].detail", "str"),
    _f("processes", "object", "the workload's largest processes and the trees they are in: only with "
                              "`stream --processes N` (absent without it); docs/processes.md", required=False),
    _f("processes.count", "int", "processes listed: cgroup.procs of its cgroup and of every cgroup below",
       v2="cgroup.procs", minimum=0),
    _f("processes.complete", "bool", "every process listed (false: past 10,000, or a folder unreadable)"),
    _f("processes.by", "enum", "what the N largest are ranked by (--processes-by)", enum=["pss", "cpu", None]),
    _f("processes.processes", "array", "the N largest, largest first"),
    _f("processes.processes[]", "object"),
    _f("processes.processes[].pid", "int", "host PID", v2="cgroup.procs", minimum=1),
    _f("processes.processes[].ns_pid", "int?", "its PID in its own PID namespace (NSpid's last)",
       v2="/proc/<pid>/status NSpid", minimum=1),
    _f("processes.processes[].ppid", "int?", "its parent's host PID", v2="/proc/<pid>/stat", minimum=0),
    _f("processes.processes[].name", "str?", "comm", v2="/proc/<pid>/stat"),
    _f("processes.processes[].cmdline", "str?", "the command line, at most 4,096 bytes, controls escaped",
       v2="/proc/<pid>/cmdline"),
    _f("processes.processes[].state", "str?", "R, S, D, Z, T, I...", v2="/proc/<pid>/stat"),
    _f("processes.processes[].uid", "int?", "real UID", v2="/proc/<pid>/status Uid", minimum=0),
    _f("processes.processes[].threads", "int?", v2="/proc/<pid>/stat", minimum=0),
    _f("processes.processes[].cpu_percent", "float?", "100 = one core, since the previous tick; null the first "
                                                      "time a process (a PID and start time) is seen", minimum=0),
    _f("processes.processes[].cpu_seconds_total", "float?", "utime + stime", v2="/proc/<pid>/stat", minimum=0,
       metric=Series("cgstat_process_cpu_seconds_total", "counter", "CPU seconds of one of the container's largest "
                                                               "processes (stream --processes N).")),
    _f("processes.processes[].rss_bytes", "int?", "resident, shared pages counted in full",
       v2="/proc/<pid>/smaps_rollup Rss (before the first read: stat)", minimum=0,
       metric=Series("cgstat_process_rss_bytes", "gauge", "Resident memory of one of the container's largest processes, "
                                                     "shared pages counted in full.")),
    _f("processes.processes[].pss_bytes", "int?", "its share: each page divided by the processes mapping it",
       v2="/proc/<pid>/smaps_rollup Pss", minimum=0,
       metric=Series("cgstat_process_pss_bytes", "gauge", "Proportional set size of one of the container's largest "
                                                     "processes: shared pages divided among their users.")),
    _f("processes.processes[].uss_bytes", "int?", "its own pages: what exiting would free",
       v2="/proc/<pid>/smaps_rollup Private_Clean + Private_Dirty", minimum=0,
       metric=Series("cgstat_process_uss_bytes", "gauge", "Unique set size of one of the container's largest processes: "
                                                     "what its exit would free.")),
    _f("processes.processes[].swap_bytes", "int?", v2="/proc/<pid>/smaps_rollup Swap", minimum=0,
       metric=Series("cgstat_process_swap_bytes", "gauge", "Swap of one of the container's largest processes.")),
    _f("processes.processes[].memory_age_s", "float?", "how old the smaps figures are (read at most every 10 s)",
       minimum=0),
    _f("processes.processes[].fds", "int?", "open file descriptors", v2="/proc/<pid>/fd", minimum=0),
    _f("processes.processes[].gpu_memory_bytes", "int?", "GPU memory, summed over its GPUs; null when GPU metrics "
                                                         "are off", minimum=0, nvml=_GPU_PROCESS),
    _f("processes.processes[].gpu_sm_percent", "float?", "SM use, summed over its GPUs", minimum=0, nvml=_GPU_UTIL),
    _f("processes.processes[].depth", "int", "its depth in the workload's fork tree (0: a top process)", minimum=0),
    _f("processes.processes[].group", "int", "the PID of its tree's top process", minimum=1),
    _f("processes.processes[].errors", "array"),
    _f("processes.processes[].errors[]", "object"),
    _f("processes.processes[].errors[].source", "str", "the /proc file concerned"),
    _f("processes.processes[].errors[].error", "enum",
       enum=["gone", "unsupported", "permission_denied", "malformed", "read_failed", "missing", "deferred"]),
    _f("processes.processes[].errors[].detail", "str"),
    _f("processes.groups", "array", "each tree (a top process and all below it) of those processes, in full"),
    _f("processes.groups[]", "object"),
    _f("processes.groups[].pid", "int", "its top process", minimum=1),
    _f("processes.groups[].name", "str?"),
    _f("processes.groups[].processes", "int", minimum=1),
) + tuple(_f("processes.groups[]." + key, "float?" if key == "cpu_percent" else "int?",
             "summed over the tree; null when a member's is unknown", minimum=0)
          for key in ("cpu_percent", "rss_bytes", "pss_bytes", "uss_bytes", "swap_bytes", "gpu_memory_bytes")) + (
    _f("processes.error", "object?", "the cgroup's processes could not be listed"),
    _f("processes.error.source", "str"),
    _f("processes.error.error", "str"),
    _f("processes.error.detail", "str"),
)

# -- the GPU device record (cgstat/contract/gpu-record.schema.json) -------------------------------------

GPU_RECORD: Tuple[Field, ...] = (
    _f("schema", "const", const=1),
    _f("type", "const", const="gpu"),
    _f("ts", "str", "RFC 3339 UTC wall time of the sample", pattern=TS_PATTERN),
    _f("host", "str", v2="/etc/hostname"),
    _f("interval_s", "float?", "seconds since the previous GPU reading", exclusiveMinimum=0),
    _f("gpu", "object"),
    _f("gpu.index", "int", minimum=0, nvml="nvmlDeviceGetHandleByIndex"),
    _f("gpu.uuid", "str?", nvml="nvmlDeviceGetUUID"),
    _f("gpu.name", "str?", nvml="nvmlDeviceGetName"),
    _f("gpu.utilization_percent", "float?", "nvmlDeviceGetUtilizationRates gpu; null on MIG", minimum=0,
       nvml="nvmlDeviceGetUtilizationRates gpu",
       metric=Series("cgstat_gpu_utilization_percent", "gauge", "GPU utilisation (NVML), percent.")),
    _f("gpu.memory_utilization_percent", "float?", minimum=0, nvml="nvmlDeviceGetUtilizationRates memory",
       metric=Series("cgstat_gpu_memory_utilization_percent", "gauge",
                "GPU memory controller utilisation (NVML), percent.")),
    _f("gpu.memory_total_bytes", "int?", minimum=0, nvml="nvmlDeviceGetMemoryInfo_v2 total",
       metric=Series("cgstat_gpu_memory_total_bytes", "gauge", "GPU memory size.")),
    _f("gpu.memory_used_bytes", "int?", "nvmlMemory_v2 used (without reserved memory)", minimum=0,
       nvml="nvmlDeviceGetMemoryInfo_v2 used", metric=Series("cgstat_gpu_memory_used_bytes", "gauge", "GPU memory used.")),
    _f("gpu.memory_reserved_bytes", "int?", minimum=0, nvml="nvmlDeviceGetMemoryInfo_v2 reserved",
       metric=Series("cgstat_gpu_memory_reserved_bytes", "gauge", "GPU memory reserved by the driver.")),
    _f("gpu.temperature_celsius", "int?", nvml="nvmlDeviceGetTemperature",
       metric=Series("cgstat_gpu_temperature_celsius", "gauge", "GPU temperature.")),
    _f("gpu.power_watts", "float?", minimum=0, nvml="nvmlDeviceGetPowerUsage",
       metric=Series("cgstat_gpu_power_watts", "gauge", "GPU power draw.")),
    _f("gpu.mig_mode", "bool?", nvml="nvmlDeviceGetMigMode"),
    _f("gpu.parent_uuid", "str?", "MIG devices: the GPU they are part of", nvml="nvmlDeviceGetUUID"),
    _f("gpu.gpu_instance_id", "int?", "MIG devices: the GPU instance ID (dcgm-exporter's GPU_I_ID)", minimum=0,
       nvml="nvmlDeviceGetGpuInstanceId"),
    _f("gpu.sm_clock_mhz", "int?", minimum=0, nvml="nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"),
    _f("gpu.memory_clock_mhz", "int?", minimum=0, nvml="nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"),
    _f("gpu.sm_clock_max_mhz", "int?", "read once per NVML initialisation", minimum=0,
       nvml="nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)"),
    _f("gpu.memory_clock_max_mhz", "int?", "read once per NVML initialisation", minimum=0,
       nvml="nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)"),
    _f("gpu.clocks_event_reasons", "array?", "why the clocks are held down now, decoded from NVML's bit mask",
       nvml="nvmlDeviceGetCurrentClocksEventReasons (else ...ClocksThrottleReasons)"),
    _f("gpu.clocks_event_reasons[]", "enum", enum=_REASONS),
    _f("gpu.violation_seconds_total", "object", "time the clocks were held below the application clocks"),
    _f("gpu.violation_seconds_total.power", "float?", "by the power cap", minimum=0,
       nvml="nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER) ns"),
    _f("gpu.violation_seconds_total.thermal", "float?", "by heat", minimum=0,
       nvml="nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL) ns"),
    _f("gpu.energy_joules_total", "float?", "since the driver loaded (Volta and later)", minimum=0,
       nvml="nvmlDeviceGetTotalEnergyConsumption mJ"),
    _f("gpu.idle_power_watts", "float?", "the lowest power seen with no process on the GPU (before one: the "
                                         "lowest seen at all); null on MIG devices", minimum=0,
       metric=Series("cgstat_gpu_idle_power_watts", "gauge",
                "The GPU's idle power as the energy split uses it (lowest power seen with no process).")),
    _f("gpu.idle_power_observed", "bool?", "true: idle_power_watts was measured with no process on the GPU"),
    _f("gpu.power_limit_watts", "float?", "enforced; read every 10 s", minimum=0,
       nvml="nvmlDeviceGetEnforcedPowerLimit"),
    _f("gpu.memory_temperature_celsius", "int?", nvml=_FIELDS + "NVML_FI_DEV_MEMORY_TEMP"),
    _f("gpu.pcie_tx_bytes_per_second", "float?", "from the PCIe byte counters between two readings; where the "
                                                 "driver has none, its own 20 ms sample every 10 s", minimum=0,
       nvml=_FIELDS + "NVML_FI_DEV_PCIE_COUNT_TX_BYTES (else nvmlDeviceGetPcieThroughput)"),
    _f("gpu.pcie_rx_bytes_per_second", "float?", "as pcie_tx_bytes_per_second", minimum=0,
       nvml=_FIELDS + "NVML_FI_DEV_PCIE_COUNT_RX_BYTES (else nvmlDeviceGetPcieThroughput)"),
    _f("gpu.pcie_replays_total", "int?", "PCIe link retries", minimum=0, nvml="nvmlDeviceGetPcieReplayCounter"),
    _f("gpu.nvlink_tx_bytes_total", "int?", "NVLink data sent over all links", minimum=0,
       nvml=_FIELDS + "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX KiB"),
    _f("gpu.nvlink_rx_bytes_total", "int?", "NVLink data received over all links", minimum=0,
       nvml=_FIELDS + "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX KiB"),
    _f("gpu.encoder_utilization_percent", "float?", minimum=0, nvml="nvmlDeviceGetEncoderUtilization"),
    _f("gpu.decoder_utilization_percent", "float?", minimum=0, nvml="nvmlDeviceGetDecoderUtilization"),
    _f("gpu.ecc_errors_total", "object", "volatile: since the driver loaded"),
    _f("gpu.ecc_errors_total.corrected", "int?", minimum=0,
       nvml="nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)"),
    _f("gpu.ecc_errors_total.uncorrected", "int?", minimum=0,
       nvml="nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)"),
    _f("gpu.remapped_rows", "object?", "row remapping (Ampere and later); read every 10 s",
       nvml="nvmlDeviceGetRemappedRows"),
    _f("gpu.remapped_rows.correctable", "int", minimum=0),
    _f("gpu.remapped_rows.uncorrectable", "int", minimum=0),
    _f("gpu.remapped_rows.pending", "int", "1: a remap waits for a GPU reset", minimum=0),
    _f("gpu.remapped_rows.failure", "int", "1: a remap failed", minimum=0),
    _f("gpu.retired_pages", "object?", "page retirement (before Ampere); read every 10 s",
       nvml="nvmlDeviceGetRetiredPages, nvmlDeviceGetRetiredPagesPendingStatus"),
    _f("gpu.retired_pages.single_bit", "int?", minimum=0),
    _f("gpu.retired_pages.double_bit", "int?", minimum=0),
    _f("gpu.retired_pages.pending", "bool?"),
    _f("gpu.xid_errors_total", "int?", "XIDs the event set received since cgstat started; null where XIDs can't "
                                       "be watched", minimum=0, nvml="nvmlEventSetWait_v2 (timeout 0)",
       metric=Series("cgstat_gpu_xid_errors_total", "counter", "XIDs NVML reported for the GPU since cgstat started.")),
    _f("gpu.last_xid", "int?", "the code of the last of them", minimum=0),
    _f("gpu.recent_xids", "array", "the XID codes that arrived since the previous reading, oldest first"),
    _f("gpu.recent_xids[]", "int", minimum=0),
    _f("gpu.recent_xid_instances", "array", "the MIG instance each of recent_xids names, where the event names "
                                            "one (not on MIG: none), oldest first",
       nvml="nvmlEventData_t gpuInstanceId, computeInstanceId"),
    _f("gpu.recent_xid_instances[]", "object"),
    _f("gpu.recent_xid_instances[].xid", "int", minimum=0),
    _f("gpu.recent_xid_instances[].gpu_instance_id", "int", minimum=0),
    _f("gpu.recent_xid_instances[].compute_instance_id", "int?", minimum=0),
    _f("gpu.compute_mode", "enum", "read every 10 s", nvml="nvmlDeviceGetComputeMode",
       enum=["default", "exclusive_thread", "prohibited", "exclusive_process", None]),
    _f("gpu.persistence_mode", "bool?", "read every 10 s", nvml="nvmlDeviceGetPersistenceMode"),
    _f("gpu.pci_bus_id", "str?", "read once per NVML initialisation", nvml="nvmlDeviceGetPciInfo_v3 busId"),
    _f("gpu.serial", "str?", "read once per NVML initialisation", nvml="nvmlDeviceGetSerial"),
    _f("gpu.minor_number", "int?", "of /dev/nvidia<N>; read once per NVML initialisation", minimum=0,
       nvml="nvmlDeviceGetMinorNumber"),
    _f("gpu.driver_version", "str?", nvml="nvmlSystemGetDriverVersion"),
    _f("gpu.cuda_version", "str?", "the CUDA version the driver supports", nvml="nvmlSystemGetCudaDriverVersion"),
    _f("gpu.gpm", "object?", "GPM metrics between this reading and the previous one (Hopper and later); null "
                             "elsewhere, with the reason in errors", nvml="nvmlGpmMetricsGet"),
    _f("gpu.gpm.graphics_activity_percent", "float?", minimum=0, nvml="NVML_GPM_METRIC_GRAPHICS_UTIL"),
    _f("gpu.gpm.sm_activity_percent", "float?", minimum=0, nvml="NVML_GPM_METRIC_SM_UTIL"),
    _f("gpu.gpm.sm_occupancy_percent", "float?", minimum=0, nvml="NVML_GPM_METRIC_SM_OCCUPANCY"),
    _f("gpu.gpm.tensor_activity_percent", "float?", minimum=0, nvml="NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    _f("gpu.gpm.dram_bandwidth_percent", "float?", minimum=0, nvml="NVML_GPM_METRIC_DRAM_BW_UTIL"),
    _f("gpu.gpm.pcie_tx_bytes_per_second", "float?", minimum=0, nvml="NVML_GPM_METRIC_PCIE_TX_PER_SEC"),
    _f("gpu.gpm.pcie_rx_bytes_per_second", "float?", minimum=0, nvml="NVML_GPM_METRIC_PCIE_RX_PER_SEC"),
    _f("gpu.gpm.nvlink_tx_bytes_per_second", "float?", minimum=0, nvml="NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC"),
    _f("gpu.gpm.nvlink_rx_bytes_per_second", "float?", minimum=0, nvml="NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC"),
    _f("processes", "array"),
    _f("processes[]", "object"),
    _f("processes[].pid", "int", "host PID, as NVML reports it", minimum=1, nvml=_GPU_PROCESS),
    _f("processes[].name", "str?", "/proc/<pid>/comm", v2="/proc/<pid>/comm"),
    _f("processes[].type", "enum", "mps: an MPS client; mps_server: the MPS server (nvidia-cuda-mps-server)",
       enum=_GPU_TYPES),
    _f("processes[].memory_bytes", "int?", "GPU memory the process uses", minimum=0, nvml=_GPU_PROCESS),
    _f("processes[].sm_percent", "float?", "streaming-multiprocessor use, percent of the GPU; null where NVML "
                                           "can't measure it (MIG)", minimum=0, nvml=_GPU_UTIL),
    _f("processes[].memory_percent", "float?", "memory-controller use, percent", minimum=0, nvml=_GPU_UTIL),
    _f("processes[].encoder_percent", "float?", minimum=0, nvml=_GPU_UTIL),
    _f("processes[].decoder_percent", "float?", minimum=0, nvml=_GPU_UTIL),
    _f("processes[].power_watts", "float?", _ENERGY, minimum=0),
    _f("processes[].energy_joules_total", "float?", "its power integrated over the readings since cgstat first "
                                                    "saw it", minimum=0),
    _f("processes[].cgroup", "str?", "the process's cgroup path; null when it exited or is in another PID "
                                     "namespace", v2="/proc/<pid>/cgroup"),
    _f("processes[].container", "object?", "as in cgroup records, or null", same_as="container"),
    _f("errors", "array"),
    _f("errors[]", "object"),
    _f("errors[].source", "str", _ERROR),
    _f("errors[].error", "enum", enum=list(_PROBLEMS + ("gpu_lost", "gpu_read_late"))),
    _f("errors[].detail", "str"),
)

# -- the event record (cgstat/contract/event.schema.json) -----------------------------------------------


EVENT: Tuple[Field, ...] = (
    _f("schema", "const", const=1),
    _f("type", "const", const="event"),
    _f("ts", "str?", "RFC 3339 UTC time of the sample the event was judged on"),
    _f("host", "str?"),
    _f("kind", "enum", enum=list(EVENT_KINDS + (RESOLVED,))),
    _f("severity", "enum", enum=["info", "warning", "critical"]),
    _f("cgroup", "str?", "the cgroup path (null for a GPU process whose cgroup is unknown)"),
    _f("container", "object?", "the container object of the cgroup record, or null"),
    _f("message", "str", "one plain sentence with the hint"),
    _f("evidence", "object", "the figures behind the event; keys per kind in docs/events.md", closed=False),
    _f("evidence.kills", "int", required=False, minimum=1),
    _f("evidence.oom_kills_total", "float?", required=False),
    _f("evidence.limit_bytes", "float?", required=False),
    _f("evidence.working_set_bytes", "float?", required=False),
    _f("evidence.working_set_bytes_before", "float?", required=False),
    _f("evidence.percent", "float?", required=False),
    _f("evidence.bytes_per_second", "float", required=False),
    _f("evidence.r2", "float", required=False),
    _f("evidence.seconds_to_limit", "float?", required=False),
    _f("evidence.throttled_fraction", "float?", required=False),
    _f("evidence.sm_percent", "float?", required=False),
    _f("evidence.cpu_percent", "float?", required=False),
    _f("evidence.duration_s", "float", required=False, minimum=0),
    _f("evidence.memory_high_events", "int", required=False, minimum=1),
    _f("evidence.memory_high_events_total", "int", required=False, minimum=0),
    _f("evidence.high_bytes", "float?", required=False),
    _f("evidence.failures", "int", required=False, minimum=1),
    _f("evidence.pids_events_max_total", "float?", required=False),
    # oom_kill from the kernel log (cgstat/kernel/kmsg.py, docs/events.md)
    _f("evidence.pid", "int", "the process killed (oom_kill), or the GPU process", required=False, minimum=0),
    _f("evidence.process", "str", "the killed process's name (its comm, at most 15 bytes)", required=False),
    _f("evidence.uid", "int?", "the killed process's user ID", required=False, minimum=0),
    _f("evidence.memory_cgroup", "str?", "memory-hierarchy path of the killed task's cgroup (task_memcg)",
       required=False),
    _f("evidence.oom_cgroup", "str?", "the cgroup whose limit was hit (oom_memcg); null: the global OOM killer",
       required=False),
    _f("evidence.global_oom", "bool", "the machine ran out of memory (no cgroup limit hit)", required=False),
    _f("evidence.constraint", "str?", "the kernel's CONSTRAINT_* of the kill (null before 4.19)", required=False),
    _f("evidence.usage_bytes", "int?", "the OOM cgroup's usage at the kill (memory: usage)", required=False,
       minimum=0),
    _f("evidence.anon_rss_bytes", "int?", "the killed process's anonymous memory", required=False, minimum=0),
    _f("evidence.file_rss_bytes", "int?", "the killed process's file pages mapped", required=False, minimum=0),
    _f("evidence.shmem_rss_bytes", "int?", "the killed process's shared memory", required=False, minimum=0),
    _f("evidence.cgroup_exists", "bool?", "the cgroup still existed when the kill was reported", required=False),
    _f("evidence.pod", "object?", "the Kubernetes pod of the killed process's cgroup", required=False,
       closed=False),
    _f("evidence.named_by", "enum", "how the cgroup was named: as this tick's record (live), as a record before "
       "it went (seen), its runtime's state, its path, the counter that rose with it, none", required=False,
       enum=["live", "seen", "state", "path", "counter", "none"]),
    _f("evidence.source", "enum", "what saw the kill: the kernel log, a cgroup's OOM-kill counter, or both",
       required=False, enum=["kernel_log", "counter", "kernel_log+counter"]),
    _f("evidence.kernel_seq", "int", "the kernel log record of the kill (/dev/kmsg sequence number)",
       required=False, minimum=0),
    _f("evidence.kernel_ts", "str?", "RFC 3339 UTC time of the kernel log record (its monotonic stamp plus the "
       "boot time); ts is the tick's", required=False, pattern=TS_PATTERN),
    _f("resolves", "str?", "on a resolved notice, the kind whose episode it ends; null otherwise",
       enum=[None] + list(EVENT_KINDS)),
    _f("since", "str?", "when the episode was raised (equal to ts on a raising event)"),
)

# -- the exit record (cgstat/contract/exit.schema.json): a workload's life, when its cgroup goes -------

EXIT_ENDINGS = ("oom_kill", "exit")

EXIT: Tuple[Field, ...] = (
    _f("schema", "const", const=1),
    _f("type", "const", const="exit"),
    _f("ts", "str", "RFC 3339 UTC time of the tick that found the cgroup gone", pattern=TS_PATTERN),
    _f("host", "str?"),
    _f("cgroup", "str", "the cgroup path, as its records had it", pattern="^/"),
    _f("unit", "str?", "as its records had it"),
    _f("pod", "object?", "as its records had it", same_as="pod"),
    _f("container", "object?", "as its records had it", same_as="container"),
    _f("started", "str?", "its first record's ts (null: never read, known from the kernel log only)",
       pattern=TS_PATTERN),
    _f("last_seen", "str?", "its last record's ts: the totals are as of then", pattern=TS_PATTERN),
    _f("ended", "str", "when it was found gone (ts), or its OOM kill's time where that is later known"),
    _f("lifetime_seconds", "float?", "from started to last_seen; null when never read", minimum=0),
    _f("samples", "int", "how many of its records cgstat made", minimum=0),
    _f("cpu_seconds_total", "float?", "cpu.usage_seconds_total at its last record", minimum=0),
    _f("cpu_throttled_seconds_total", "float?", "cpu.throttled_seconds_total at its last record: how long its "
       "CPU quota held it back", minimum=0),
    _f("cpu_throttled_periods_total", "int?", "cpu.throttled_periods_total at its last record (of "
       "cpu_periods_total)", minimum=0),
    _f("cpu_periods_total", "int?", "cpu.periods_total at its last record: the quota periods it ran in",
       minimum=0),
    _f("memory_peak_bytes", "int?", "memory.peak (v1 max_usage_in_bytes) at its last record where the kernel "
       "has it, else the highest usage seen, else the OOM report's usage", minimum=0),
    _f("memory_peak_source", "enum", "where memory_peak_bytes comes from",
       enum=["memory.peak", "highest_seen", "kernel_log", None]),
    _f("oom_kills_total", "int?", "OOM kills in it: its counter at the last record, or the kernel log's kills "
       "when more", minimum=0),
    _f("io_read_bytes_total", "int?", "io.read_bytes_total at its last record", minimum=0),
    _f("io_write_bytes_total", "int?", "io.write_bytes_total at its last record", minimum=0),
    _f("network_rx_bytes_total", "int?", "network.rx_bytes_total at its last record (its own network "
       "namespace only)", minimum=0),
    _f("network_tx_bytes_total", "int?", "network.tx_bytes_total at its last record", minimum=0),
    _f("gpu_seconds_total", "float?", "GPU SM busy seconds: gpu.sm_percent / 100 over each interval (null "
       "without GPU metrics)", minimum=0),
    _f("gpu_memory_peak_bytes", "int?", "the most GPU memory its processes held in one record", minimum=0),
    _f("gpu_energy_joules_total", "float?", "gpu.energy_joules_total at its last record", minimum=0),
    _f("ended_by", "enum", "oom_kill: the kernel OOM-killed a process in it in its last interval; exit: its "
       "processes ended and the cgroup was removed; null: not known", enum=list(EXIT_ENDINGS) + [None]),
)

# What stands above the fields in each schema file.
SCHEMA_FILES: Dict[str, Tuple[Tuple[Field, ...], Dict[str, Any]]] = {
    "record.schema.json": (RECORD, {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://github.com/cgstat/cgstat/schema/record-1.json",
        "title": "cgstat record, schema 1",
        "description": "One JSON object per cgroup per tick. Units are in the names; null means unknown or "
                       "unsupported, and errors says why.",
    }),
    "gpu-record.schema.json": (GPU_RECORD, {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://cgstat.dev/schema/gpu-record-1.json",
        "title": "cgstat GPU record",
        "description": "One GPU (or MIG device) per tick, with every process NVML lists on it",
    }),
    "event.schema.json": (EVENT, {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://cgstat.invalid/event.schema.json",
        "title": "cgstat diagnostics event (schema 1)",
        "description": "One line of the stream with type \"event\": a condition raised once per episode, or "
                       "the notice (kind \"resolved\") that ends one. docs/events.md has every rule.",
        "allOf": [{"if": {"properties": {"kind": {"const": "resolved"}}},
                   "then": {"properties": {"resolves": {"type": "string"}, "severity": {"const": "info"}}},
                   "else": {"properties": {"resolves": {"type": "null"}}}}],
    }),
    "exit.schema.json": (EXIT, {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://cgstat.invalid/exit.schema.json",
        "title": "cgstat exit record (schema 1)",
        "description": "One line of the stream with type \"exit\": a workload's totals, once, when its cgroup "
                       "goes. docs/schema.md says where each figure comes from.",
    }),
}


def children(fields: Tuple[Field, ...], path: str) -> Tuple[Field, ...]:
    """The fields directly below `path` ("" for the top): its keys, or its `[]`/`{}` entry."""
    if not path:
        return tuple(f for f in fields if "." not in f.path and not f.path.endswith(("[]", "{}")))
    return tuple(f for f in fields if f.path in (path + "[]", path + "{}") or (
        f.path.startswith(path + ".") and "." not in f.path[len(path) + 1:] and not f.path.endswith(("[]", "{}"))))


def field(fields: Tuple[Field, ...], path: str) -> Field:
    for f in fields:
        if f.path == path:
            return f
    raise KeyError(path)


def keys(path: str, table: Tuple[Field, ...] = RECORD) -> Tuple[str, ...]:
    """The keys to a field, for a reader of records by path (pipeline/record.value_at):
    `keys("memory.limit_bytes")` is ("memory", "limit_bytes"); KeyError, when the module
    that asks is imported, for a path that is not in the table."""
    field(table, path)
    return tuple(path.split("."))


# -- Prometheus families (docs/prometheus.md) --------------------------------------------------
#
# A family made from one field is declared on the field (`metric=Series(name, kind, help)`), and
# one made from several fields, each a series with its own fixed labels, in _SHARED (each
# field then says `Series(name, labels=...)`); FAMILIES lists them in the order the exporter
# writes them (the exporter's own, then each record's families in the order of its fields,
# each one where its first field is, then those made otherwise), with docs/prometheus.md's
# table made from it (contract/schema.py, series_table).

class Family(NamedTuple):
    name: str  # as the samples are named (counters with _total)
    kind: str  # counter, gauge, info
    help: str
    source: str  # what it is made from, as docs/prometheus.md says it
    scope: str  # whose series: "self" (the exporter), "cgroup" (cgroup/pod records), "gpu" (GPU records)
    labels: Tuple[str, ...]  # beyond the scope's own (a cgroup's id, name, ...; a GPU's gpu, uuid)
    field: str  # the record field whose value is the sample, as is ("" when made otherwise)
    note: str = ""  # how it differs from its cAdvisor (or dcgm-exporter) counterpart
    group: str = ""  # its metric group (METRIC_GROUPS), for --metrics / --disable-metrics

    @property
    def cadvisor(self) -> bool:
        return self.name.startswith("container_")

    @property
    def counterpart(self) -> str:
        """docs/prometheus.md's last column: cAdvisor's (or dcgm-exporter's) series of that name."""
        if self.note:
            return self.note
        return "same name" if self.cadvisor else "dcgm-exporter" if self.name.startswith("DCGM_") else "—"


def _family(name: str, kind: str, help: str, source: str = "", scope: str = "cgroup",
            labels: Tuple[str, ...] = (), field: str = "", note: str = "", group: str = "") -> Family:
    return Family(name, kind, help, source or field, scope, labels, field, note, group)


# Metric groups, for `serve --metrics/--disable-metrics` (cAdvisor's names where it has the
# group: its --enable_metrics/--disable_metrics). A family made from fields is in the group
# of its first field's path (_FIELD_GROUPS: the longest prefix wins); the others name theirs.
METRIC_GROUPS = {
    "cgstat": "the exporter's own health: ticks, durations, record counts, folded cgroups",
    "base": "container_last_seen and cgstat_cgroup_info (what a series' cgroup is)",
    "cpu": "CPU time, CFS periods and throttling, weight/shares, quota and period",
    "cpuset": "the effective cpuset (cgstat_cpuset_info)",
    "memory": "usage, working set, limits, memory.stat counters, memory events, page faults",
    "hugetlb": "hugetlb memory",
    "oom_event": "OOM kills (container_oom_events_total)",
    "diskIO": "block IO per device, blkio bytes, IO limits",
    "network": "network counters per interface",
    "process": "processes and threads (pids controller)",
    "pressure": "PSI stall totals",
    "gpu": "GPU use per container and per process, cgstat's GPU device series",
    "dcgm": "dcgm-exporter's device series (DCGM_FI_*)",
    "exited": "what cgroups that are gone used (cgstat_exited_*), kept a while",
    "procs": "each container's largest processes (stream --processes N; at most N series per container and "
             "family): off unless named in --metrics",
}
# Groups off unless --metrics names them: per-process series multiply a node's series by N
OPT_IN_GROUPS = ("procs",)
_FIELD_GROUPS = (("processes.", "procs"), ("cpu.cpuset", "cpuset"), ("cpu.", "cpu"), ("memory.hugetlb", "hugetlb"),
                 ("memory.oom_kills_total", "oom_event"), ("memory.", "memory"), ("io.", "diskIO"),
                 ("network.", "network"), ("pids.", "process"), ("pressure.", "pressure"), ("gpu.", "gpu"))


def field_group(path: str) -> str:
    """The metric group of a field's series (and of its OTLP metric)."""
    for prefix, group in _FIELD_GROUPS:  # longest prefixes first
        if path.startswith(prefix):
            return group
    raise ValueError("no metric group for the series of %s (fields._FIELD_GROUPS)" % path)


# The labels of every cgroup series (container_label_<key>: the container's labels, bounded;
# slurm_job: the Slurm job ID, one value per job whatever its steps and tasks)
CGROUP_LABELS = ("id", "name", "image", "namespace", "pod", "container", "slurm_job", "container_label_*")
GPU_LABELS = ("gpu", "uuid")
_BLKIO_LABELS = ("device", "major", "minor", "operation")
_PROCESS_LABELS = ("gpu", "uuid", "pid", "process", "type")
# dcgm-exporter's labels (MIG devices: GPU_I_ID, GPU_I_PROFILE), so that its dashboards and
# alerts run unchanged; modelName is camelCase there, and kept so. `uuid` repeats UUID: older
# dcgm-exporter releases spelt it so, and NVIDIA's dashboard still groups by it.
DCGM_LABELS = ("gpu", "UUID", "uuid", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
               "GPU_I_ID", "GPU_I_PROFILE")
# The label an array's items give their series (the rest of the item's labels: cgstat/outputs/prometheus/labels.py)
ITEM_LABELS = {"io.devices[]": ("device",), "network.interfaces[]": ("interface",),
               "processes.processes[]": ("pid", "process")}

# The series of a gone cgroup's exit record (family, exit record key, help)
EXIT_SERIES = (
    ("cgstat_exited_cpu_seconds", "cpu_seconds_total", "CPU seconds a cgroup that is gone used in all."),
    ("cgstat_exited_memory_peak_bytes", "memory_peak_bytes", "The most memory a cgroup that is gone used."),
    ("cgstat_exited_oom_kills", "oom_kills_total", "OOM kills in a cgroup that is gone."),
    ("cgstat_exited_gpu_seconds", "gpu_seconds_total", "GPU SM busy seconds of a cgroup that is gone."),
    ("cgstat_exited_lifetime_seconds", "lifetime_seconds", "How long cgstat saw a cgroup that is gone."),
)

# Families of several fields' series (the fields name them in Series(name, labels=...))
_SHARED = {f.name: f for f in (
    _family("container_memory_failures_total", "counter", "Cumulative count of memory allocation failures.",
            labels=("failure_type", "scope"),
            note="same name and labels; on v2 cAdvisor gives both scopes memory.stat's count, as here (on v1 its "
                 "`container` scope is the cgroup's own count, here the subtree's `total_` one)"),
    _family("cgstat_memory_events_total", "counter",
            "Other memory events of the cgroup and its descendants (v2 memory.events), by event.",
            labels=("event",)),
    _family("cgstat_memory_events_local_total", "counter", "Memory events of the cgroup alone (memory.events.local).",
            labels=("event",)),
    _family("cgstat_memory_swap_events_total", "counter", "Swap events (memory.swap.events), by event.",
            labels=("event",)),
)}


def _label_names(pairs: str) -> Tuple[str, ...]:
    return tuple(pair.split("=", 1)[0] for pair in pairs.split(",") if pair)


def _field_families(table: Tuple[Field, ...], scope: str) -> Tuple[Family, ...]:
    """The families of a record's fields, each where its first field is."""
    out: List[Family] = []
    shared: Dict[str, List[str]] = {}
    for f in table:
        item = f.path.rsplit(".", 1)[0] if "[]." in f.path else ""
        for m in f.metrics:
            if m.kind:
                out.append(Family(m.family, m.kind, m.help, m.source or f.path, scope,
                                  ITEM_LABELS.get(item, ()) + _label_names(m.labels), f.path, m.counterpart,
                                  field_group(f.path)))
            else:
                if m.family not in shared:
                    shared[m.family] = []
                    out.append(_SHARED[m.family]._replace(group=field_group(f.path)))
                shared[m.family].append(f.path)
    return tuple(f._replace(source=_collapsed(shared[f.name])) if f.name in shared else f for f in out)


def _collapsed(paths: List[str]) -> str:
    """memory.events.low, memory.events.oom: memory.events.{low,oom}."""
    by_parent: Dict[str, List[str]] = {}
    for path in paths:
        parent, leaf = path.rsplit(".", 1)
        by_parent.setdefault(parent, [])
        if leaf not in by_parent[parent]:
            by_parent[parent].append(leaf)
    return ", ".join("%s.%s" % (parent, leaves[0]) if len(leaves) == 1 else "%s.{%s}" % (parent, ",".join(leaves))
                     for parent, leaves in by_parent.items())


class Dcgm(NamedTuple):
    """One of dcgm-exporter's device series (its name, etc/default-counters.csv, and unit),
    from a GPU record field. All typed gauge: dcgm-exporter's counters lack the _total suffix
    that a counter needs in OpenMetrics (and promtool asks for)."""
    name: str
    help: str
    field: str  # the GPU record field read
    convert: str  # "" as is, "x1000", "x1e6", "/100" scaled, "MiB", "0/1" a bool; else made by the exporter

    @property
    def source(self) -> str:
        text = _DCGM_SOURCES.get(self.convert, "{0} " + self.convert.replace("/", "/ ").replace("x", "x ", 1))
        return text.format(self.field, self.field.rsplit(".", 1)[-1])


_DCGM_SOURCES = {"": "{0}", "MiB": "{0} / 2^20", "0/1": "{0} (1: true)",
                 "last_xid": "{0} (0 when xid_errors_total is 0)",
                 "mask": "{0} as NVML's bit mask",
                 "free": "gpu.memory_total_bytes - used - reserved, in MiB",
                 "nvlink": "gpu.nvlink_tx_bytes_total + nvlink_rx_bytes_total",
                 "else_gpm": "{0}, else gpu.gpm.{1}"}


def _dcgm(name: str, help: str, field: str, convert: str = "") -> Dcgm:
    return Dcgm(name, help, field, convert)


DCGM_SERIES: Tuple[Dcgm, ...] = (
    _dcgm("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "gpu.sm_clock_mhz"),
    _dcgm("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "gpu.memory_clock_mhz"),
    _dcgm("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "gpu.memory_temperature_celsius"),
    _dcgm("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gpu.temperature_celsius"),
    _dcgm("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gpu.power_watts"),
    _dcgm("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", "gpu.power_limit_watts"),
    _dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since the driver loaded (in mJ).",
          "gpu.energy_joules_total", "x1000"),
    _dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "gpu.pcie_replays_total"),
    _dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gpu.utilization_percent"),
    _dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "gpu.memory_utilization_percent"),
    _dcgm("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", "gpu.encoder_utilization_percent"),
    _dcgm("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", "gpu.decoder_utilization_percent"),
    _dcgm("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered (0: none since cgstat started).",
          "gpu.last_xid", "last_xid"),
    _dcgm("DCGM_FI_DEV_POWER_VIOLATION", "Throttling duration due to power constraints (in us).",
          "gpu.violation_seconds_total.power", "x1e6"),
    _dcgm("DCGM_FI_DEV_THERMAL_VIOLATION", "Throttling duration due to thermal constraints (in us).",
          "gpu.violation_seconds_total.thermal", "x1e6"),
    _dcgm("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Current clock event reasons (bit mask of nvmlClocksEventReason*).",
          "gpu.clocks_event_reasons", "mask"),
    _dcgm("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gpu.memory_total_bytes", "free"),
    _dcgm("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gpu.memory_used_bytes", "MiB"),
    _dcgm("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", "gpu.memory_reserved_bytes", "MiB"),
    _dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.",
          "gpu.ecc_errors_total.corrected"),
    _dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
          "gpu.ecc_errors_total.uncorrected"),
    _dcgm("DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.",
          "gpu.retired_pages.single_bit"),
    _dcgm("DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.",
          "gpu.retired_pages.double_bit"),
    _dcgm("DCGM_FI_DEV_RETIRED_PENDING", "Pages pending retirement (1: yes).", "gpu.retired_pages.pending", "0/1"),
    _dcgm("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "NVLink data sent and received over all links since the driver "
          "loaded (in bytes).", "gpu.nvlink_tx_bytes_total", "nvlink"),
    _dcgm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors.",
          "gpu.remapped_rows.uncorrectable"),
    _dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors.",
          "gpu.remapped_rows.correctable"),
    _dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.", "gpu.remapped_rows.failure"),
    _dcgm("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending (a GPU reset applies it).",
          "gpu.remapped_rows.pending"),
    _dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active (GPM).",
          "gpu.gpm.graphics_activity_percent", "/100"),
    _dcgm("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (GPM).",
          "gpu.gpm.sm_activity_percent", "/100"),
    _dcgm("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of resident warps to the maximum on an SM (GPM).",
          "gpu.gpm.sm_occupancy_percent", "/100"),
    _dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles any tensor pipe is active (GPM).",
          "gpu.gpm.tensor_activity_percent", "/100"),
    _dcgm("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active (GPM).",
          "gpu.gpm.dram_bandwidth_percent", "/100"),
    _dcgm("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus (in bytes/s).",
          "gpu.pcie_tx_bytes_per_second", "else_gpm"),
    _dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus (in bytes/s).",
          "gpu.pcie_rx_bytes_per_second", "else_gpm"),
    _dcgm("DCGM_FI_PROF_NVLINK_TX_BYTES", "The rate of data transmitted over NVLink (in bytes/s, GPM).",
          "gpu.gpm.nvlink_tx_bytes_per_second"),
    _dcgm("DCGM_FI_PROF_NVLINK_RX_BYTES", "The rate of data received over NVLink (in bytes/s, GPM).",
          "gpu.gpm.nvlink_rx_bytes_per_second"),
)
DCGM_NAMES = tuple(d.name for d in DCGM_SERIES)

# The Prometheus families in exposition order: those of the fields' declarations and those
# made of several fields; the exporter renders them by kind (outputs/prometheus/exposition.py).
FAMILIES: Tuple[Family, ...] = (
    # the exporter's own health (no timestamps: they describe now)
    _family("cgstat_build_info", "info", "cgstat version (always 1).", "cgstat.__version__", "self", ("version",)),
    _family("cgstat_ticks_total", "counter", "Ticks sampled since start.", "the sampling loop", "self"),
    _family("cgstat_tick_duration_seconds", "gauge", "Wall time the last tick took to read every cgroup.",
            "the sampling loop", "self"),
    _family("cgstat_render_duration_seconds", "gauge", "Wall time the previous exposition took to render.",
            "the exporter", "self"),
    _family("cgstat_last_tick_timestamp_seconds", "gauge", "Unix time the last tick finished.",
            "the sampling loop", "self"),
    _family("cgstat_gpu_reads_late_total", "counter", "Ticks that went on without their GPU read: NVML had "
            "not answered within half the interval.", "the GPU read beside the tick", "self"),
    _family("cgstat_gpu_call_errors_total", "counter", "NVML calls that failed since start, by GPU (its UUID) "
            "and call; each cost that one value.", "the NVML call wrapper", "self", ("gpu", "call")),
    _family("cgstat_cgroups", "gauge", "Cgroup and pod records in the last tick, by type.", "count of records",
            "self", ("type",)),
    _family("cgstat_gpus", "gauge", "GPU device records in the last tick.", "count of type gpu records", "self"),
    _family("cgstat_record_errors", "gauge", "Read problems in the last tick's records, by error kind.",
            "records' errors[].error", "self", ("error",)),
    _family("cgstat_folded_cgroups", "gauge", "Cgroups whose series are summed into id=\"_other\" (serve "
            "--max-series); only with a budget.", "the series budget", "self"),
    # cgroups: the cAdvisor meanings
    _family("container_last_seen", "gauge", "Last time a container was seen by the exporter.", "record ts"),
) + _field_families(RECORD, "cgroup") + (
    # cgroups: made of more than one field
    _family("container_spec_cpu_quota", "gauge", "CPU quota of the container.",
            "cpu.quota_us, else cpu.limit_cores x 100000"),
    _family("container_spec_cpu_period", "gauge", "CPU period of the container.", "cpu.period_us, else 100000"),
    _family("cgstat_cpuset_info", "info", "The CPUs and memory nodes the cgroup may use (effective cpuset).",
            "cpu.cpuset_cpus, cpu.cpuset_mems", labels=("cpus", "mems")),
    _family("cgstat_io_limit_bytes_per_second", "gauge", "Block IO bandwidth limit, by device and operation.",
            "io.limits[].read/write_bytes_per_second", labels=("device", "operation")),
    _family("cgstat_io_limit_ops_per_second", "gauge", "Block IO operations limit, by device and operation.",
            "io.limits[].read/write_ops_per_second", labels=("device", "operation")),
    _family("container_blkio_device_usage_total", "counter", "Blkio Device bytes usage.",
            "io.devices[].read/write/discard_bytes_total", labels=_BLKIO_LABELS),
    _family("cgstat_cgroup_info", "info",
            "What cgstat knows of a cgroup: record type, runtime, container ID, unit, pod QoS.",
            "record type, container, unit, pod", labels=("type", "runtime", "container_id", "unit", "qos", "sandbox")),
    # GPU per container (the `gpu` object of cgroup and pod records)
    _family("cgstat_container_gpu_memory_bytes", "gauge", "GPU memory used by the container's processes on one GPU.",
            "gpu.processes[] memory_bytes summed per GPU", labels=GPU_LABELS),
    _family("cgstat_container_gpu_sm_percent", "gauge",
            "SM utilisation of the container's processes on one GPU (100 = the whole GPU).",
            "gpu.processes[] sm_percent summed per GPU", labels=GPU_LABELS),
    _family("cgstat_container_gpu_process_memory_bytes", "gauge", "GPU memory used by one process of the container.",
            "gpu.processes[].memory_bytes", labels=_PROCESS_LABELS),
    _family("cgstat_container_gpu_process_sm_percent", "gauge",
            "SM utilisation of one process of the container (100 = the whole GPU).",
            "gpu.processes[].sm_percent", labels=_PROCESS_LABELS),
    _family("cgstat_container_gpu_power_watts", "gauge",
            "The container's share of one GPU's active power (power above idle, split by SM share).",
            "gpu.processes[] power_watts summed per GPU", labels=GPU_LABELS),
    _family("cgstat_container_gpu_process_power_watts", "gauge", "One process's share of its GPU's active power.",
            "gpu.processes[].power_watts", labels=_PROCESS_LABELS),
    _family("cgstat_gpu_held_idle_seconds_total", "counter",
            "GPU-seconds the container held at least --gpu-idle-memory of a GPU's memory at no more than 5 % SM.",
            "GPU records' processes by cgroup, counted tick by tick (docs/events.md gpu_held_idle)",
            labels=CGROUP_LABELS),
    # gone cgroups: their exit records, kept a while (cgstat/outputs/prometheus/retention.py)
) + tuple(_family(name, "gauge", help, "exit records' " + key + ", kept 15 min", labels=CGROUP_LABELS + ("ended_by",))
          for name, key, help in EXIT_SERIES) + (
    # GPU devices (type "gpu" records)
    _family("cgstat_gpu_info", "info", "A GPU (or MIG device): model, MIG mode, parent.",
            "gpu.name, mig_mode, parent_uuid", "gpu", ("model", "mig_mode", "parent_uuid")),
) + _field_families(GPU_RECORD, "gpu") + (
    _family("cgstat_gpu_processes", "gauge", "Processes NVML lists on the GPU.", "len(processes)", "gpu"),
    _family("cgstat_gpu_unattributed_memory_bytes", "gauge",
            "GPU memory of processes no cgroup could be found for (exited, other PID namespace).",
            "processes[] with cgroup null, memory_bytes summed", "gpu"),
    _family("cgstat_gpu_clocks_event_reason", "gauge",
            "1 for each reason NVML gives for the GPU's clocks being held down now.",
            "gpu.clocks_event_reasons[]", "gpu", ("reason",)),
) + tuple(_family(d.name, "gauge", d.help, d.source, "gpu", DCGM_LABELS) for d in DCGM_SERIES)

# the groups of the families not made from one field's path (the exporter's own: "cgstat")
_OTHER_GROUPS = {"container_last_seen": "base", "cgstat_cgroup_info": "base", "container_spec_cpu_quota": "cpu",
                 "container_spec_cpu_period": "cpu", "cgstat_cpuset_info": "cpuset",
                 "cgstat_io_limit_bytes_per_second": "diskIO", "cgstat_io_limit_ops_per_second": "diskIO",
                 "container_blkio_device_usage_total": "diskIO"}


def _grouped(family: Family) -> Family:
    if family.group:
        return family
    if family.scope == "self":
        return family._replace(group="cgstat")
    if family.name in DCGM_NAMES:
        return family._replace(group="dcgm")
    if family.name in _OTHER_GROUPS:
        return family._replace(group=_OTHER_GROUPS[family.name])
    if family.name.startswith("cgstat_exited_"):
        return family._replace(group="exited")
    if family.name.startswith(("cgstat_container_gpu_", "cgstat_gpu_")):
        return family._replace(group="gpu")
    raise ValueError("no metric group for %s (fields._OTHER_GROUPS)" % family.name)


FAMILIES = tuple(_grouped(family) for family in FAMILIES)

# -- CSV columns (`--format csv`) ----------------------------------------------------------------
#
# Dotted names are record paths (the cell is that field; an event row leaves the record
# sections empty). Made by outputs/table.py: `name` (the display name), `event.*` (the
# event's own keys), `gpu.devices` (UUIDs joined by spaces), `gpu.processes` (a count),
# `errors` (source:error pairs). _CSV_RELEASED keeps the columns of earlier releases in
# their order (scripts cut by position); a field declared with `csv=True` is a column
# after its section's (its first key's) last one there.

_CSV_RELEASED: Tuple[str, ...] = (
    "type", "ts", "host", "cgroup", "name", "unit", "interval_s",
    "container.runtime", "container.id", "container.name", "container.image",
    "pod.namespace", "pod.name", "pod.uid", "pod.qos",
    "cpu.percent", "cpu.limit_cores", "cpu.usage_seconds_total", "cpu.user_seconds_total",
    "cpu.system_seconds_total", "cpu.periods_total", "cpu.throttled_periods_total",
    "cpu.throttled_seconds_total", "cpu.throttled_percent",
    "memory.working_set_bytes", "memory.limit_bytes", "memory.percent", "memory.usage_bytes",
    "memory.anon_bytes", "memory.file_bytes", "memory.inactive_file_bytes", "memory.shmem_bytes",
    "memory.swap_bytes", "memory.oom_kills_total", "memory.oom_events_total",
    "io.read_bytes_total", "io.write_bytes_total", "io.read_ops_total", "io.write_ops_total",
    "io.read_bytes_per_second", "io.write_bytes_per_second", "io.read_ops_per_second",
    "io.write_ops_per_second",
    "network.rx_bytes_total", "network.tx_bytes_total", "network.rx_bytes_per_second",
    "network.tx_bytes_per_second",
    "pids.current", "pids.limit",
    "pressure.cpu.some_avg10", "pressure.memory.some_avg10", "pressure.memory.full_avg10",
    "pressure.io.some_avg10", "pressure.io.full_avg10",
    "gpu.memory_bytes", "gpu.sm_percent", "gpu.devices", "gpu.processes",
    "event.kind", "event.severity", "event.resolves", "event.message",
    "errors",
    # an event's kernel-log time and an exit record's figures (rows of type "exit": the
    # identity columns above, the record sections empty)
    "event.kernel_ts",
    "exit.started", "exit.last_seen", "exit.ended", "exit.lifetime_seconds", "exit.cpu_seconds_total",
    "exit.cpu_throttled_seconds_total", "exit.cpu_throttled_periods_total", "exit.cpu_periods_total",
    "exit.memory_peak_bytes",
    "exit.memory_peak_source", "exit.oom_kills_total", "exit.io_read_bytes_total", "exit.io_write_bytes_total",
    "exit.gpu_seconds_total", "exit.ended_by",
)


def _csv_columns() -> Tuple[str, ...]:
    columns = list(_CSV_RELEASED)
    for f in RECORD:
        if f.csv and f.path not in columns:
            section = f.path.split(".")[0]
            at = max((i for i, c in enumerate(columns) if c.split(".")[0] == section), default=None)
            columns.insert(columns.index("event.kind") if at is None else at + 1, f.path)
    return tuple(columns)


CSV_COLUMNS = _csv_columns()  # `--format csv`'s columns, in order; dotted names are record paths
CSV_MADE = ("name", "event.kind", "event.severity", "event.resolves", "event.message", "gpu.devices",
            "gpu.processes", "errors", "event.kernel_ts") + tuple(c for c in _CSV_RELEASED if c.startswith("exit."))  # the columns that are not a record field as is
