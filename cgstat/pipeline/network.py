"""Network rates and the record's `network` object. Pure functions, no I/O.
Rates come only from two samples of the same network namespace, per interface, as for
cgroups (rates.py; the rules at network_rates). `NetworkCounters` is the part of a sample
rates need; to_json/from_json let `once --state` keep it between cron runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, NamedTuple, Optional, Tuple, cast

from cgstat.kernel.netns import TOTAL_FIELDS, NetworkResult, NetworkSample

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import Network

# name -> (rx_bytes, tx_bytes, rx_packets, tx_packets)
IfRow = Tuple[int, int, int, int]


class NetworkCounters(NamedTuple):
    """What rates need of one namespace's reading (kept per cgroup from tick to tick)."""

    netns: int
    time_s: float
    interfaces: Dict[str, IfRow]

    def to_json(self) -> dict:
        return {"netns": self.netns, "time_s": self.time_s,
                "interfaces": {k: list(v) for k, v in self.interfaces.items()}}

    @staticmethod
    def from_json(obj: dict) -> "NetworkCounters":
        """Inverse of to_json; raises ValueError/TypeError/KeyError on a foreign shape."""
        rows = {}
        for name, row in obj["interfaces"].items():
            if len(row) != 4 or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in row):
                raise ValueError(f"bad interface row {row!r}")
            rows[str(name)] = tuple(row)
        netns = obj["netns"]
        if isinstance(netns, bool) or not isinstance(netns, int):
            raise ValueError("bad netns")
        return NetworkCounters(netns, float(obj["time_s"]), rows)


def network_counters(sample: Optional[NetworkSample]) -> Optional[NetworkCounters]:
    if sample is None:
        return None
    return NetworkCounters(sample.netns, sample.time_s, {
        i.name: (i.rx_bytes_total, i.tx_bytes_total, i.rx_packets_total, i.tx_packets_total)
        for i in sample.interfaces})


class NetworkRates(NamedTuple):
    interval_s: Optional[float] = None
    rx_bytes_per_second: Optional[float] = None
    tx_bytes_per_second: Optional[float] = None
    rx_packets_per_second: Optional[float] = None
    tx_packets_per_second: Optional[float] = None


NO_NETWORK_RATES = NetworkRates()


# Rules, as for cgroups (rates.py):
# - Rates come only from two samples of the SAME network namespace (same nsfs inode). A
#   container restarted into a new namespace gets null rates once.
# - Per interface, a counter that went backwards (the interface was deleted and made again
#   under the same name) gives no rate. The namespace's rate is the sum over the interfaces
#   present in both samples: an interface added (or moved in, with its own history) or
#   removed between them changes the totals but not the rate.
# - The first sample has no rates.
def network_rates(prev: Optional[NetworkCounters], cur: Optional[NetworkCounters]) -> NetworkRates:
    """Rates between two readings of one namespace, or NO_NETWORK_RATES when they can't be
    compared (first reading, another namespace, time not moving forward)."""
    if prev is None or cur is None or prev.netns != cur.netns:
        return NO_NETWORK_RATES
    dt = cur.time_s - prev.time_s
    if not dt > 0:
        return NO_NETWORK_RATES
    sums = [0, 0, 0, 0]
    valid = [True, True, True, True]
    for name, row in cur.interfaces.items():
        old = prev.interfaces.get(name)
        if old is None:
            continue
        for i in range(4):
            if row[i] < old[i]:
                valid[i] = False
            else:
                sums[i] += row[i] - old[i]
    r = [sums[i] / dt if valid[i] else None for i in range(4)]
    return NetworkRates(dt, r[0], r[1], r[2], r[3])


def network_record(result: Optional[NetworkResult], rates: NetworkRates = NO_NETWORK_RATES) -> Optional[Network]:
    """The record's `network` object (docs/network.md), or None. When None, the caller
    adds result.problem to the record's `errors`."""
    if result is None or result.network is None:
        return None
    s = result.network
    record: Dict[str, Any] = dict(zip(TOTAL_FIELDS, s.totals))
    record["rx_bytes_per_second"] = _round(rates.rx_bytes_per_second)
    record["tx_bytes_per_second"] = _round(rates.tx_bytes_per_second)
    record["interfaces"] = [{"name": i.name, **{f: getattr(i, f) for f in TOTAL_FIELDS}} for i in s.interfaces]
    record["netns"] = s.netns
    record["shared"] = s.shared
    return cast("Network", record)


def _round(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v, 1)
