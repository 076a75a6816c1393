"""NetnsReader on a fake host root (no root, no namespaces needed), and network rates.

In the fake /proc, /proc/<pid>/ns/net is a regular file whose inode stands for the namespace
(processes that share a namespace get hard links to one file), and /proc/<pid>/net/dev is
the text that namespace's net/dev would show.
"""

import os

import pytest

from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.netns import TOTAL_FIELDS, ERR_HOST, ERR_NO_PROCESS, HOST_REASON, HostNetns, NetnsReader, detect_host_netns
from cgstat.pipeline.network import NO_NETWORK_RATES, NetworkCounters, network_counters, network_rates, network_record

HEADER = ("Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
          "drop fifo colls carrier compressed\n")


def dev(**ifaces):
    out = HEADER
    for name, (rxb, rxp, txb, txp) in ifaces.items():
        out += "%6s: %7d %7d 1 2 0 0 0 0 %8d %7d 3 4 0 0 0 0\n" % (name, rxb, rxp, txb, txp)
    return out


class FakeProc:
    def __init__(self, root):
        self.root = str(root)
        self.ns_files = {}
        os.makedirs(os.path.join(self.root, "proc"))

    def netns(self, name, net_dev):
        path = os.path.join(self.root, "ns-" + name)
        with open(path, "w") as f:
            f.write("")
        self.ns_files[name] = path
        self.set_dev(name, net_dev)
        return os.stat(path).st_ino

    def set_dev(self, name, net_dev):
        with open(self.ns_files[name] + ".dev", "w") as f:
            f.write(net_dev)

    def process(self, pid, ns):
        base = os.path.join(self.root, "proc", str(pid))
        os.makedirs(os.path.join(base, "ns"))
        os.makedirs(os.path.join(base, "net"))
        os.link(self.ns_files[ns], os.path.join(base, "ns", "net"))
        os.symlink(self.ns_files[ns] + ".dev", os.path.join(base, "net", "dev"))

    def exit(self, pid):
        base = os.path.join(self.root, "proc", str(pid))
        for p in ("ns/net", "net/dev"):
            os.unlink(os.path.join(base, p))
        os.rmdir(os.path.join(base, "ns"))
        os.rmdir(os.path.join(base, "net"))
        os.rmdir(base)


@pytest.fixture
def fake(tmp_path):
    p = FakeProc(tmp_path)
    p.host = p.netns("host", dev(lo=(5, 5, 5, 5), eth0=(10**9, 10**6, 10**9, 10**6)))
    p.process(1, "host")
    return p


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_host_from_pid1(fake):
    host = detect_host_netns(HostFS(fake.root))
    assert host == HostNetns(fake.host, "/proc/1/ns/net")


def _fake_self(monkeypatch, pid_ns, net_ns):
    import cgstat.kernel.netns as netns_mod
    real = netns_mod._stat_ino

    def stat_ino(path, dir_fd=None):
        if path == "/proc/self/ns/pid":
            return pid_ns
        if path == "/proc/self/ns/net":
            return net_ns
        return real(path, dir_fd)
    monkeypatch.setattr(netns_mod, "_stat_ino", stat_ino)


def test_host_falls_back_to_own_namespace_in_host_pid_ns(tmp_path, monkeypatch):
    from cgstat.kernel.netns import PID_NS_INIT_INO
    p = FakeProc(tmp_path)  # no /proc/1, no kthreadd
    _fake_self(monkeypatch, PID_NS_INIT_INO, 4026532000)
    host = detect_host_netns(HostFS(p.root))
    assert host.inode == 4026532000 and host.source.startswith("/proc/self/ns/net")
    assert "own network namespace" in host.note


def test_host_fixed_inode(tmp_path, monkeypatch):
    from cgstat.kernel.netns import NET_NS_INIT_INO, PID_NS_INIT_INO
    p = FakeProc(tmp_path)
    _fake_self(monkeypatch, PID_NS_INIT_INO, NET_NS_INIT_INO)
    host = detect_host_netns(HostFS(p.root))
    assert host.inode == NET_NS_INIT_INO and "fixed" in host.source
    # and any namespace with that inode is the host's, whatever was detected
    assert HostNetns(None, "unknown").is_host(NET_NS_INIT_INO)


def test_host_unknown_in_own_pid_namespace(monkeypatch):
    # plain /proc, cgstat in a container's PID namespace: /proc/1 is the container's init
    _fake_self(monkeypatch, 4026532001, 4026532002)
    host = detect_host_netns(HostFS("/"))
    assert host.inode is None and host.source == "unknown"
    assert "own PID namespace" in host.note


def test_once_per_namespace_shared_and_totals(fake):
    a = fake.netns("a", dev(lo=(7, 7, 7, 7), veth0=(1000, 10, 2000, 20), eth1=(1, 1, 2, 2)))
    b = fake.netns("b", dev(lo=(0, 0, 0, 0), vethb=(5, 1, 6, 1)))
    for pid in (100, 101, 102):
        fake.process(pid, "a")
    fake.process(200, "b")
    reader = NetnsReader(HostFS(fake.root), clock=Clock())
    got = reader.read({"/pod": [100, 101, 102], "/pod/c1": [101], "/pod/c2": [102], "/other": [200]})
    assert reader.last.net_dev_reads == 2 and reader.last.namespaces == 2
    pod = got["/pod"].network
    assert pod.netns == a and pod.shared
    assert got["/pod/c1"].network.netns == a and got["/pod/c1"].network.shared
    assert dict(zip(TOTAL_FIELDS, pod.totals)) == {
        "rx_bytes_total": 1001, "tx_bytes_total": 2002, "rx_packets_total": 11, "tx_packets_total": 22,
        "rx_errors_total": 2, "tx_errors_total": 6, "rx_dropped_total": 4, "tx_dropped_total": 8}
    assert [i.name for i in pod.interfaces] == ["veth0", "eth1"]  # lo left out
    other = got["/other"].network
    assert other.netns == b and not other.shared and other.total("rx_bytes_total") == 5
    assert got["/other"].problem is None


def test_iterable_of_pairs(fake):
    fake.netns("a", dev(veth0=(1, 1, 1, 1)))
    fake.process(100, "a")
    fake.process(101, "a")
    reader = NetnsReader(HostFS(fake.root))
    got = reader.read([("k1", 100), ("k2", 101)])
    assert got["k1"].network.shared and got["k2"].network.netns == got["k1"].network.netns


def test_host_namespace_is_null_with_reason(fake):
    fake.process(300, "host")
    reader = NetnsReader(HostFS(fake.root))
    got = reader.read({"/system.slice/ssh.service": [300]})
    r = got["/system.slice/ssh.service"]
    assert r.network is None and r.netns == fake.host
    assert r.problem.error == ERR_HOST and r.problem.detail == HOST_REASON
    assert reader.last.net_dev_reads == 0


def test_no_process_and_gone(fake):
    reader = NetnsReader(HostFS(fake.root))
    got = reader.read({"/empty": [], "/gone": [4242]})
    assert got["/empty"].network is None and got["/empty"].problem.error == ERR_NO_PROCESS
    assert got["/gone"].network is None and got["/gone"].problem.error == "gone"


def test_first_live_pid_decides(fake):
    a = fake.netns("a", dev(veth0=(11, 2, 33, 4)))
    fake.process(100, "a")
    got = NetnsReader(HostFS(fake.root)).read({"k": [4242, 100]})["k"]  # 4242 has exited
    assert got.problem is None and got.netns == a
    net = got.network
    assert (net.netns, net.total("rx_bytes_total"), net.total("rx_packets_total"), net.total("tx_bytes_total"), net.total("tx_packets_total")) == \
        (a, 11, 2, 33, 4)


def test_reads_through_another_member_when_one_exits(fake):
    a = fake.netns("a", dev(veth0=(11, 2, 33, 4)))
    fake.process(100, "a")
    fake.process(101, "a")
    fs = HostFS(fake.root)
    reader = NetnsReader(fs)
    # 100's net/dev vanishes between the namespace lookup and the read
    os.unlink(os.path.join(fake.root, "proc", "100", "net", "dev"))
    got = reader.read({"k1": [100], "k2": [101]})
    for key in ("k1", "k2"):  # k1's namespace read through 101, the other member
        net = got[key].network
        assert (net.netns, net.total("rx_bytes_total"), net.total("tx_bytes_total"), [i.name for i in net.interfaces]) == \
            (a, 11, 33, ["veth0"]), key
    assert reader.last.net_dev_reads == 2


def test_namespace_gone_between_ticks(fake):
    fake.netns("a", dev(veth0=(1, 1, 1, 1)))
    fake.process(100, "a")
    reader = NetnsReader(HostFS(fake.root))
    first = reader.read({"k": [100]})["k"]
    fake.exit(100)
    second = reader.read({"k": [100]})["k"]
    assert second.network is None and second.problem.error == "gone"
    assert network_rates(network_counters(first.network), network_counters(second.network)) == NO_NETWORK_RATES


def test_malformed_net_dev(fake):
    fake.netns("a", "garbage\n")
    fake.process(100, "a")
    fake.process(101, "a")
    got = NetnsReader(HostFS(fake.root)).read({"k1": [100], "k2": [101]})
    for k in ("k1", "k2"):
        assert got[k].network is None and got[k].problem.error == "malformed"
        assert "missing header" in got[k].problem.detail


# -- rates ---------------------------------------------------------------------------------

def counters(netns, t, **rows):
    return NetworkCounters(netns, t, dict(rows))


def test_rates_same_namespace():
    r = network_rates(counters(7, 10.0, eth0=(0, 0, 0, 0)), counters(7, 12.0, eth0=(2000, 4000, 20, 40)))
    assert r.interval_s == 2.0
    assert (r.rx_bytes_per_second, r.tx_bytes_per_second) == (1000.0, 2000.0)
    assert (r.rx_packets_per_second, r.tx_packets_per_second) == (10.0, 20.0)


def test_rates_new_namespace_none():
    assert network_rates(counters(7, 10.0, eth0=(0, 0, 0, 0)), counters(8, 12.0, eth0=(9, 9, 9, 9))) == NO_NETWORK_RATES
    assert network_rates(None, counters(8, 12.0)) == NO_NETWORK_RATES
    assert network_rates(counters(8, 12.0), counters(8, 12.0)) == NO_NETWORK_RATES


def test_rates_interface_recreated_or_added():
    prev = counters(7, 10.0, eth0=(100, 100, 1, 1))
    # eth0 made again (counters reset): no rate rather than a negative one
    assert network_rates(prev, counters(7, 11.0, eth0=(5, 200, 1, 2))).rx_bytes_per_second is None
    # an interface moved in with history: not counted in the rate
    r = network_rates(prev, counters(7, 11.0, eth0=(200, 100, 1, 1), eth9=(10**12, 10**12, 1, 1)))
    assert r.rx_bytes_per_second == 100.0 and r.tx_bytes_per_second == 0.0


def test_counters_json_round_trip():
    c = counters(7, 10.5, eth0=(1, 2, 3, 4))
    assert NetworkCounters.from_json(c.to_json()) == c
    with pytest.raises(ValueError):
        NetworkCounters.from_json({"netns": 7, "time_s": 1, "interfaces": {"eth0": [1, 2, -3, 4]}})


def test_record_shape(fake):
    fake.netns("a", dev(lo=(9, 9, 9, 9), veth0=(1000, 10, 2000, 20)))
    fake.process(100, "a")
    clock = Clock()
    reader = NetnsReader(HostFS(fake.root), clock=clock)
    first = reader.read({"k": [100]})["k"]
    fake.set_dev("a", dev(lo=(9, 9, 9, 9), veth0=(3000, 30, 2500, 25)))
    clock.t += 2.0
    second = reader.read({"k": [100]})["k"]
    rec = network_record(second, network_rates(network_counters(first.network), network_counters(second.network)))
    assert list(rec) == ["rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total",
                         "rx_errors_total", "tx_errors_total", "rx_dropped_total", "tx_dropped_total",
                         "rx_bytes_per_second", "tx_bytes_per_second", "interfaces", "netns", "shared"]
    assert rec["rx_bytes_per_second"] == 1000.0 and rec["tx_bytes_per_second"] == 250.0
    assert [i["name"] for i in rec["interfaces"]] == ["veth0"]
    assert rec["interfaces"][0]["rx_bytes_total"] == 3000 and rec["shared"] is False
    assert network_record(reader.read({"h": [1]})["h"]) is None


def test_a_parent_over_several_namespaces_has_none_of_them(fake):
    """A --cgroup-parent over containers in their own namespaces showed one
    child's traffic (a different one each run). Its PIDs come one per cgroup below it."""
    fake.netns("a", dev(eth0=(1000, 10, 2000, 20)))
    fake.netns("b", dev(eth0=(5, 1, 6, 1)))
    fake.netns("pod", dev(eth0=(70, 7, 80, 8)))
    fake.process(100, "a")
    fake.process(200, "b")
    fake.process(300, "pod")
    fake.process(301, "pod")
    reader = NetnsReader(HostFS(fake.root))
    got = reader.read({"/ci": [100, 200], "/ci/a": [100], "/pod": [300, 301], "/big": [300, 301]},
                      subtrees={"/ci": True, "/pod": True, "/big": False})
    assert got["/ci"].network is None and got["/ci"].problem.error == "several_namespaces"
    assert "2 network namespaces" in got["/ci"].problem.detail
    assert got["/ci/a"].network.total("rx_bytes_total") == 1000  # the child itself is read as ever
    # a pod: every process below it in the sandbox's namespace: that namespace is the pod's
    assert got["/pod"].network.total("rx_bytes_total") == 70
    # too many cgroups below to have looked at them all: not vouched for
    assert got["/big"].network is None and got["/big"].problem.error == "several_namespaces"
    # a child that exited since it was chosen does not count as another namespace
    fake.exit(200)
    again = reader.read({"/ci": [100, 200]}, subtrees={"/ci": True})
    assert again["/ci"].network.total("rx_bytes_total") == 1000


def test_a_still_key_keeps_its_namespace_without_a_stat(fake):
    """A key none of whose processes ran or changed (kernel/changes.py says so) keeps the
    namespace found last time, unchecked: no stat of /proc/PID/ns/net; its counters are
    still read, once per namespace."""
    a = fake.netns("a", dev(veth0=(11, 2, 33, 4)))
    fake.process(100, "a")
    fake.process(101, "a")
    reader = NetnsReader(HostFS(fake.root))
    first = reader.read({"/k": [100], "/m": [101]})
    stats = reader.last.ns_stats  # each key's PID, and the namespace checked around its read
    again = reader.read({"/k": [100], "/m": [101]}, still={"/k"})
    assert again["/k"].netns == a and again["/k"].network.total("rx_bytes_total") == 11
    assert reader.last.ns_stats == stats - 1 and reader.last.net_dev_reads == 1  # /k's PID not looked up
    assert reader.read({"/new": [100]}, still={"/new"})["/new"].netns == a  # never read before: looked up
