"""Table tests for the /proc/<pid>/net/dev parser (cgstat.kernel.netdev)."""


import pytest

from cgstat.kernel.netdev import COUNTER_FIELDS, InterfaceCounters, parse_net_dev

H1 = "Inter-|   Receive                                                |  Transmit\n"
H2 = (" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
      "drop fifo colls carrier compressed\n")
HEADER = H1 + H2

FMT = ("%6s: %7d %7d %4d %4d %4d %5d %10d %9d "
       "%8d %7d %4d %4d %4d %5d %7d %10d\n")  # dev_seq_printf_stats


def row(name, *values):
    values = values or tuple(range(1, 17))
    return FMT % ((name,) + tuple(values))


# Captured on the dev machine (Linux 6.18, iproute2 6.1) in a namespace made by
# tests/live/test_netns_real.py, after 1 MiB over lo and 8 MiB over the veth.
REAL = HEADER + (
    "    lo: 1065611      41    0    0    0     0          0         0  1065611      41    0    0    0     0       0          0\n"  # noqa: E501
    "cgtf001a5a:   15362     233    0    0    0     0          0         0  8405224     252    0    0    0     0       0          0\n"  # noqa: E501
)


def test_real_capture():
    got = parse_net_dev(REAL)
    assert [i.name for i in got] == ["lo", "cgtf001a5a"]
    veth = got[1]
    assert (veth.rx_bytes_total, veth.rx_packets_total, veth.tx_bytes_total, veth.tx_packets_total) == (
        15362, 233, 8405224, 252)
    assert veth.rx_errors_total == veth.tx_dropped_total == 0
    assert got[0].rx_bytes_total == got[0].tx_bytes_total == 1065611


def test_column_order():
    (i,) = parse_net_dev(HEADER + row("eth0"))
    assert [getattr(i, f) for f in COUNTER_FIELDS] == list(range(1, 17))
    assert i.rx_bytes_total == 1 and i.rx_multicast_total == 8
    assert i.tx_bytes_total == 9 and i.tx_compressed_total == 16
    assert i.rx_dropped_total == 4 and i.tx_dropped_total == 12
    assert i.rx_errors_total == 3 and i.tx_errors_total == 11


def test_bytes_and_str_agree():
    text = HEADER + row("eth0") + row("veth1")
    assert parse_net_dev(text) == parse_net_dev(text.encode())


def test_no_interfaces():
    assert parse_net_dev(HEADER) == ()


U64 = 2**64 - 1


@pytest.mark.parametrize("name,line,expect", [
    ("short name padded", "    lo: " + " ".join(["0"] * 16) + "\n", "lo"),
    ("15-byte name, no padding", row("abcdefghijklmno"), "abcdefghijklmno"),
    ("name longer than the pad, big counters run together with it",
     "enp0s31f6: " + " ".join([str(U64)] * 16) + "\n", "enp0s31f6"),
    ("vlan dot name", row("eth0.100"), "eth0.100"),
    ("at and dash", row("br-1f2e@x"), "br-1f2e@x"),
    # Old kernels let ':' through dev_valid_name: the name is what precedes the LAST colon.
    ("colon in name (old kernels)", row("eth0:1"), "eth0:1"),
    ("two colons", row("a:b:c"), "a:b:c"),
    # Linux 2.4 printed "%6s:%8lu": no space after the colon.
    ("2.4 format, no space after colon", "  eth0:" + "12345678 " + " ".join(["0"] * 15) + "\n", "eth0"),
    ("non-UTF-8 name", None, "eth\\xff"),
    ("UTF-8 name", row("wlän0"), "wlän0"),
])
def test_names(name, line, expect):
    if line is None:
        data = HEADER.encode() + b"  eth\xff: " + b" ".join([b"0"] * 16) + b"\n"
    else:
        data = (HEADER + line).encode()
    (i,) = parse_net_dev(data)
    assert i.name == expect


def test_max_u64_kept():
    (i,) = parse_net_dev(HEADER + row("eth0", *([U64] * 16)))
    assert i.rx_bytes_total == U64 and i.tx_compressed_total == U64


@pytest.mark.parametrize("name,data,match", [
    ("empty", "", "empty"),
    ("header only first line", H1, "missing header"),
    ("no header", row("eth0"), "missing header"),
    ("second header line missing", H1 + row("eth0"), "missing header"),
    ("header lines swapped", H2 + H1, "missing header"),
    ("unknown columns", H1 + H2.replace("colls", "coll5"), "unknown columns"),
    ("extra column", H1 + H2.replace("compressed\n", "compressed extra\n"), "unknown columns"),
    ("cut short: no final newline", HEADER + row("eth0")[:-1], "cut short"),
    ("cut mid-row", HEADER + row("eth0")[:30] + "\n", "counters, not 16"),
    ("short row", HEADER + "  eth0: 1 2 3\n", "counters, not 16"),
    ("long row", HEADER + "  eth0: " + " ".join(["1"] * 17) + "\n", "counters, not 16"),
    ("no colon", HEADER + "  eth0 " + " ".join(["1"] * 16) + "\n", "no ':'"),
    ("empty name", HEADER + "      : " + " ".join(["1"] * 16) + "\n", "empty interface name"),
    ("name with space", HEADER + " a b: " + " ".join(["1"] * 16) + "\n", "not an interface name"),
    ("name with slash", HEADER + row("a/b"), "not an interface name"),
    ("dot name", HEADER + row(".."), "not an interface name"),
    ("16-byte name", HEADER + row("abcdefghijklmnop"), "longer than 15"),
    ("negative", HEADER + row("eth0", -1, *range(15)), "not an unsigned integer"),
    ("hex", HEADER + "  eth0: 0x10 " + " ".join(["1"] * 15) + "\n", "not an unsigned integer"),
    ("float", HEADER + "  eth0: 1.5 " + " ".join(["1"] * 15) + "\n", "not an unsigned integer"),
    ("plus sign", HEADER + "  eth0: +1 " + " ".join(["1"] * 15) + "\n", "not an unsigned integer"),
    ("unicode digit", HEADER + "  eth0: \u0661 " + " ".join(["1"] * 15) + "\n", "not an unsigned integer"),
    ("past 2^64-1", HEADER + row("eth0", U64 + 1, *range(15)), "larger than 2\\^64-1"),
    ("huge", HEADER + row("eth0", 10**40, *range(15)), "larger than 2\\^64-1"),
    ("duplicate interface", HEADER + row("eth0") + row("eth0"), "listed twice"),
    ("blank line", HEADER + "\n" + row("eth0"), "blank"),
    ("junk line", HEADER + row("eth0") + "garbage\n", "no ':'"),
])
def test_malformed(name, data, match):
    with pytest.raises(ValueError, match=match):
        parse_net_dev(data)


def test_counters_are_immutable():
    (i,) = parse_net_dev(HEADER + row("eth0"))
    assert isinstance(i, InterfaceCounters)
    with pytest.raises(AttributeError):
        i.rx_bytes_total = 0
