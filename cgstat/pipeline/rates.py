"""Rates from two samples of the same cgroup (same folder inodes), never across a counter
that went backwards (the rules at `derive`). Pure functions, no I/O.
`Counters` is the part of a sample rates need; it is what `once --state` saves between
cron runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, NamedTuple, Optional, Tuple

from cgstat.kernel.sample import Sample
from cgstat.pipeline.network import NO_NETWORK_RATES, NetworkCounters, NetworkRates, network_counters, network_rates

if TYPE_CHECKING:
    from cgstat.kernel.netns import NetworkSample


class IoRow(NamedTuple):
    """One device's IO counters, as rates need them."""

    read_bytes: Optional[int]
    write_bytes: Optional[int]
    read_ops: Optional[int]
    write_ops: Optional[int]


class Counters(NamedTuple):
    """What rates need of one sample (a tuple: one per cgroup is kept from tick to tick)."""

    inodes: Tuple[Tuple[str, int], ...]  # (hierarchy, folder inode): one life of the cgroup
    time_s: float
    cpu_usage_seconds: Optional[float]
    cpu_periods: Optional[int]
    cpu_throttled_periods: Optional[int]
    io: Optional[Dict[str, IoRow]]  # device -> counters; None when IO is unknown
    network: Optional[NetworkCounters] = None  # its network namespace's, when read

    def to_json(self) -> dict:
        return {
            "inodes": [list(i) for i in self.inodes],
            "time_s": self.time_s,
            "cpu_usage_seconds": self.cpu_usage_seconds,
            "cpu_periods": self.cpu_periods,
            "cpu_throttled_periods": self.cpu_throttled_periods,
            "io": None if self.io is None else {k: list(v) for k, v in self.io.items()},
            "network": None if self.network is None else self.network.to_json(),
        }

    @staticmethod
    def from_json(obj: dict) -> "Counters":
        """Inverse of to_json; raises ValueError/TypeError/KeyError on a foreign shape."""
        # "identity": what cgstat 0.1 called the inodes
        pairs = obj["inodes"] if "inodes" in obj else obj["identity"]
        inodes = tuple((str(name), int(ino)) for name, ino in pairs)
        io = obj["io"]
        rows = None
        if io is not None:
            rows = {}
            for dev, row in io.items():
                if len(row) != 4:
                    raise ValueError("io row of wrong length")
                rows[str(dev)] = IoRow(*(_opt_int(v) for v in row))
        net = obj.get("network")  # absent in states of cgstat 0.1
        return Counters(inodes, float(obj["time_s"]), _opt_float(obj["cpu_usage_seconds"]),
                        _opt_int(obj["cpu_periods"]), _opt_int(obj["cpu_throttled_periods"]), rows,
                        None if net is None else NetworkCounters.from_json(net))


def _opt_int(v) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"not a counter: {v!r}")
    return v


def _opt_float(v) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError(f"not a counter: {v!r}")
    return float(v)


def counters(sample: Sample, network: Optional[NetworkSample] = None) -> Counters:
    cpu = sample.cpu
    devices = sample.io.devices
    io: Optional[Dict[str, IoRow]] = None
    if devices is not None:
        io = {d.device: IoRow(d.read_bytes_total, d.write_bytes_total, d.read_ops_total, d.write_ops_total)
              for d in devices}
    return Counters(sample.inodes, sample.time_s, cpu.usage_seconds_total, cpu.periods_total,
                    cpu.throttled_periods_total, io, None if network is None else network_counters(network))


class IoRates(NamedTuple):
    """One device's IO rates (per second), None where no rate can be given."""

    read_bytes_per_second: Optional[float] = None
    write_bytes_per_second: Optional[float] = None
    read_ops_per_second: Optional[float] = None
    write_ops_per_second: Optional[float] = None


NO_IO_RATES = IoRates()
_IDLE_IO_RATES = IoRates(0.0, 0.0, 0.0, 0.0)  # no devices then and now: nothing moved


class Rates(NamedTuple):
    """The rates of one cgroup between two samples (a tuple: one per record per tick)."""

    interval_s: Optional[float] = None
    cpu_percent: Optional[float] = None
    cpu_throttled_percent: Optional[float] = None
    read_bytes_per_second: Optional[float] = None
    write_bytes_per_second: Optional[float] = None
    read_ops_per_second: Optional[float] = None
    write_ops_per_second: Optional[float] = None
    devices: Optional[Dict[str, IoRates]] = None  # MAJ:MIN -> that device's rates
    network: NetworkRates = NO_NETWORK_RATES


NO_RATES = Rates()


def _delta(prev, cur):
    if prev is None or cur is None or cur < prev:
        return None
    return cur - prev


def _per_second(prev, cur, dt: float) -> Optional[float]:
    d = _delta(prev, cur)
    return None if d is None else d / dt


def _sum(rows, i):
    values = [row[i] for row in rows]
    return None if any(v is None for v in values) else sum(values)


# The rules (below's model, cAdvisor and netdata agree):
# - Rates come only from two samples of the same cgroup: the same folder inodes. A cgroup
#   removed and recreated under the same name is a new cgroup: no rate across it.
# - A counter that went backwards (reset, recreated, or a bad read) gives no rate, never a
#   negative one or a spike. So does a rate no counter could reach: CPU more than 5 % beyond
#   every online CPU busy. Within those 5 % (timestamp jitter) it is all CPUs busy.
# - The first sample of a cgroup has no rates.
def derive(prev: Optional[Counters], cur: Counters, cpus: Optional[int]) -> Rates:
    """Rates between two samples of one cgroup, or NO_RATES when they can't be compared.

    Called for every record of every tick: the common cases (no previous sample, a cgroup
    without IO devices or network) take no generic loop."""
    if prev is None or prev.inodes != cur.inodes:
        return NO_RATES
    dt = cur.time_s - prev.time_s
    if not dt > 0:
        return NO_RATES
    cpu_percent = None
    d = _delta(prev.cpu_usage_seconds, cur.cpu_usage_seconds)
    if d is not None:
        cpu_percent = d / dt * 100.0
        if cpus and cpu_percent > cpus * 100.0:
            if cpu_percent > cpus * 100.0 * 1.05:
                cpu_percent = None  # impossible: a counter jumped (bad read), not real work
            else:
                # Every CPU busy, and the kernel's accounting and our clock reads are a
                # few microseconds apart: the physical bound, not the jittered quotient.
                cpu_percent = cpus * 100.0
    throttled = None
    dp = _delta(prev.cpu_periods, cur.cpu_periods)
    dtp = _delta(prev.cpu_throttled_periods, cur.cpu_throttled_periods)
    if dp and dtp is not None and dtp <= dp:
        throttled = dtp / dp * 100.0
    elif dp == 0 and dtp == 0:
        throttled = 0.0
    totals = NO_IO_RATES
    devices: Optional[Dict[str, IoRates]] = None
    old_io, new_io = prev.io, cur.io
    if old_io is not None and new_io is not None:
        devices = {}
        if not new_io:
            if not old_io:
                totals = _IDLE_IO_RATES  # what the sums of no rows give: 0 moved over dt
        else:
            for dev, row in new_io.items():
                old = old_io.get(dev)
                # a device without an earlier reading has no rate yet
                devices[dev] = NO_IO_RATES if old is None else _io_rates(old, row, dt)
            if old_io.keys() <= new_io.keys():
                totals = _io_rates(_sums(old_io.values()), _sums(new_io.values()), dt)
    network = NO_NETWORK_RATES
    if prev.network is not None and cur.network is not None:
        network = network_rates(prev.network, cur.network)
    return Rates(dt, cpu_percent, throttled, totals[0], totals[1], totals[2], totals[3], devices, network)


def _io_rates(old: IoRow, new: IoRow, dt: float) -> IoRates:
    return IoRates(*(_per_second(a, b, dt) for a, b in zip(old, new)))


_ZERO_ROW = IoRow(0, 0, 0, 0)


def _sums(rows) -> IoRow:
    rows = list(rows)
    if len(rows) <= 1:  # the common cases, without the generic loop
        return rows[0] if rows else _ZERO_ROW
    return IoRow(*(_sum(rows, i) for i in range(4)))
