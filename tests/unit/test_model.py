"""Rates from two samples: same cgroup only, no negative or impossible values."""

import pytest

from cgstat.pipeline.rates import NO_RATES, Counters, derive

ID = (("unified", 42),)


def c(t, cpu=None, periods=None, throttled=None, io=None, inodes=ID):
    return Counters(inodes, t, cpu, periods, throttled, io)


def test_first_sample_and_recreated_cgroup_have_no_rates():
    assert derive(None, c(1.0, 5.0), 4) is NO_RATES
    assert derive(c(0.0, 1.0), c(1.0, 2.0, inodes=(("unified", 43),)), 4) is NO_RATES


def test_cpu_percent_is_delta_over_time():
    r = derive(c(10.0, 1.0, 100, 10), c(12.0, 2.0, 120, 15), 4)
    assert r.interval_s == 2.0 and r.cpu_percent == pytest.approx(50.0)
    assert r.cpu_throttled_percent == pytest.approx(25.0)


@pytest.mark.parametrize("used,expected", [(8.0, 400.0), (8.2, 400.0), (8.5, None), (-1.0, None)])
def test_cpu_percent_bounds(used, expected):
    r = derive(c(0.0, 10.0), c(2.0, 10.0 + used), 4)
    assert r.cpu_percent == (pytest.approx(expected) if expected is not None else None)


def test_counter_backwards_and_zero_interval():
    assert derive(c(0.0, 5.0), c(1.0, 4.0), 2).cpu_percent is None
    assert derive(c(1.0, 5.0), c(1.0, 6.0), 2) is NO_RATES


def test_io_rates_totals_and_devices():
    prev = c(0.0, io={"8:0": (100, 200, 1, 2)})
    cur = c(2.0, io={"8:0": (300, 200, 3, 2), "8:16": (50, 0, 1, 0)})
    r = derive(prev, cur, 2)
    assert r.read_bytes_per_second == pytest.approx((350 - 100) / 2)  # totals, new device included
    assert r.devices["8:0"] == (100.0, 0.0, 1.0, 0.0)
    assert r.devices["8:16"] == (None, None, None, None)  # no earlier reading of it
    gone = derive(cur, c(4.0, io={"8:0": (400, 200, 4, 2)}), 2)  # a device vanished
    assert gone.read_bytes_per_second is None and gone.devices["8:0"][0] == pytest.approx(50.0)


def test_state_roundtrip_rejects_foreign_shapes():
    cur = c(3.5, 1.25, 7, 1, {"8:0": (1, 2, 3, 4)})
    assert Counters.from_json(cur.to_json()) == cur
    for bad in ({**cur.to_json(), "cpu_periods": -1}, {**cur.to_json(), "cpu_usage_seconds": "x"},
                {**cur.to_json(), "io": {"8:0": [1, 2]}}, {**cur.to_json(), "cpu_periods": True}):
        with pytest.raises((ValueError, TypeError, KeyError)):
            Counters.from_json(bad)
