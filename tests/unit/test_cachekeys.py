"""The keys of what the descriptor cache keeps as values (kernel/cachekeys.py), as the
controllers declare them: every value made from several files is made from slow files, the
slow files are the limits, weights and notified counters the kernel changes only with an
event, and a misspelt file fails at import instead of keeping a value for ever."""

import pytest

from cgstat.kernel import cgroups  # noqa: F401  (imports every controller: they declare the keys)
from cgstat.kernel.cachekeys import KEYS, SLOW, Derived, Frozen, Registry
from cgstat.kernel.controllers import cpu, io, memory, pids


def test_the_slow_files_are_the_ones_only_a_write_or_a_notification_changes():
    assert KEYS.slow_file_names() == {
        "cpu.max", "cpu.weight", "cpu.max.burst", "cpuset.cpus.effective", "cpuset.mems.effective",
        "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares", "cpu.cfs_burst_us",
        "io.max", "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
        "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device",
        "memory.max", "memory.high", "memory.low", "memory.min", "memory.swap.max", "memory.oom.group",
        "memory.events.local", "memory.swap.events", "memory.limit_in_bytes", "memory.soft_limit_in_bytes",
        "pids.max",
    }
    assert set(KEYS.frozen_keys()) == {memory.FAILCNT_FROZEN, pids.PEAK_FROZEN, pids.EVENTS_FROZEN}
    assert set(KEYS.derived_keys()) == {cpu.CPU_SETTINGS_V1, io.LIMITS_V1, memory.SETTINGS_V2}


def test_each_derived_value_is_dropped_with_each_of_its_files():
    for key in KEYS.derived_keys():
        assert key.files and all(f in SLOW for f in key.files)
        assert all(key in KEYS.derived_from[f] for f in key.files)
    assert "memory.max" not in KEYS.derived_from  # read on its own: a write drops only its value


def test_a_derived_value_of_a_file_that_is_not_slow_is_refused():
    reg = Registry()
    reg.slow_files("cpu.max")
    with pytest.raises(ValueError, match="cpu.stat"):
        reg.derived("cpu", ("cpu.max", "cpu.stat"))  # cpu.stat moves without an event
    key = reg.derived("cpu", ("cpu.max",))
    assert isinstance(key, Derived) and key in reg.slow and reg.derived_from == {"cpu.max": (key,)}


def test_keys_are_told_apart_by_identity_not_by_their_names():
    a, b = Frozen("pids.peak"), Frozen("pids.peak")
    assert a != b and len({a, b, "pids.peak"}) == 3
    assert repr(pids.PEAK_FROZEN) == "Frozen('pids.peak')"
