"""NetnsReader against real network namespaces made by this test.

Rules kept (see the machine notes): only namespaces this test makes (`ip netns add
cgstat-test-net-<rand>-*`), a veth pair created with both ends inside them (it never exists
in the machine's own namespace), IPv4 addresses in 10.0.0.0/8 that exist only inside them,
IPv6 off there (no autoconfiguration chatter), bounded traffic that stops by itself, only
processes started here are signalled, everything removed at the end, also on failure.

Needs root and iproute2 (`ip`); skips with the reason otherwise.
"""

import atexit
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import time

import pytest

from cgstat.kernel.hostfs import HostFS
from cgstat.kernel.netns import ERR_HOST, HOST_REASON, NetnsReader
from cgstat.pipeline.network import NO_NETWORK_RATES, network_counters, network_rates, network_record

PREFIX = "cgstat-test-net-"
MIB = 1024 * 1024

# A receiver: accept one connection, count bytes to EOF, print the count, then wait for
# stdin to close (so its PID stays a member of its namespace while the test reads).
# Every wait is bounded.
RECEIVER = r"""
import select, socket, sys
addr, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port)); s.listen(1); s.settimeout(60)
print("ready", flush=True)
c, _ = s.accept(); c.settimeout(60); total = 0
while True:
    d = c.recv(1 << 16)
    if not d:
        break
    total += len(d)
c.close(); s.close()
print("received", total, flush=True)
select.select([sys.stdin], [], [], 120)
"""

# A sender: first 1 MiB over its own loopback (traffic on lo, which must not count), then
# `total` bytes to addr:port, at `rate` bytes/s (0: as fast as it can), paced on the
# monotonic clock; waits for the receiver to close, prints "done", then waits for stdin.
SENDER = r"""
import select, socket, sys, threading, time
addr, port, total, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
lsn = socket.socket(); lsn.bind(("127.0.0.1", 0)); lsn.listen(1); lsn.settimeout(30)
def sink():
    c, _ = lsn.accept()
    while c.recv(1 << 16):
        pass
    c.close()
t = threading.Thread(target=sink); t.start()
lo = socket.create_connection(lsn.getsockname(), timeout=30); lo.sendall(b"l" * (1 << 20)); lo.close(); t.join(30)
deadline = time.monotonic() + 10
while True:
    try:
        s = socket.create_connection((addr, port), timeout=5); break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
s.settimeout(60)
buf = b"x" * (1 << 16); sent = 0; start = time.monotonic()
print("started", flush=True)
while sent < total:
    if rate:
        due = start + sent / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
    n = min(len(buf), total - sent)
    s.sendall(buf[:n]); sent += n
s.shutdown(socket.SHUT_WR)
s.recv(1)
s.close()
print("done", sent, flush=True)
select.select([sys.stdin], [], [], 120)
"""

SLEEPER = "import select, sys; print('ready', flush=True); select.select([sys.stdin], [], [], 120)"


def _run(*argv, check=True):
    return subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=check, timeout=30)


class Namespaces:
    """Network namespaces, a veth between two of them, and processes inside; all ours."""

    def __init__(self):
        self.tag = secrets.token_hex(3)
        self.names = []
        self.procs = []
        atexit.register(self.close)

    def add(self, suffix):
        name = f"{PREFIX}{self.tag}-{suffix}"
        _run("ip", "netns", "add", name)
        self.names.append(name)
        _run("ip", "netns", "exec", name, "sh", "-c",
             "for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6; "
             "do [ -w $f ] && echo 1 > $f; done; true")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def delete(self, name):
        _run("ip", "netns", "del", name, check=False)
        if name in self.names:
            self.names.remove(name)

    def veth(self, a, b, net):
        """vethA in a (10.net.1/30) and vethB in b (10.net.2/30), created inside a with its
        peer straight into b: the pair never exists in the machine's own namespace."""
        ea, eb = f"cgt{self.tag}a", f"cgt{self.tag}b"
        _run("ip", "-n", a, "link", "add", ea, "type", "veth", "peer", "name", eb, "netns", b)
        _run("ip", "-n", a, "addr", "add", f"{net}.1/30", "dev", ea)
        _run("ip", "-n", b, "addr", "add", f"{net}.2/30", "dev", eb)
        _run("ip", "-n", a, "link", "set", ea, "up")
        _run("ip", "-n", b, "link", "set", eb, "up")
        return ea, eb

    def start(self, ns, script, *args):
        """A Python process inside `ns` (`ip netns exec` execs it: the PID is the script's)."""
        p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", script] + [str(a) for a in args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        self.procs.append(p)
        return p

    def stop(self, p):
        if p.poll() is None:
            try:
                p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def close(self):
        for p in self.procs:
            self.stop(p)
        self.procs = []
        for name in list(self.names):
            self.delete(name)


def wait_line(p, word, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = p.stdout.readline()
        if not line:
            break
        if line.split()[0] == word:
            return line.split()
    err = p.stderr.read() if p.poll() is not None else ""
    raise AssertionError(f"no {word!r} from the test process (exit {p.poll()}): {err}")


def kernel_counters(ns):
    """The namespace's own counters, read independently with `ip -s -j link` inside it:
    {ifname: (rx_bytes, tx_bytes)}."""
    out = json.loads(_run("ip", "-n", ns, "-s", "-j", "link", "show").stdout)
    return {i["ifname"]: (i["stats64"]["rx"]["bytes"], i["stats64"]["tx"]["bytes"]) for i in out}


def ns_inode(ns):
    return os.stat(f"/run/netns/{ns}").st_ino


@pytest.fixture(scope="module")
def env():
    if os.geteuid() != 0:
        pytest.skip("needs root to make network namespaces")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed (Debian: apt-get install iproute2)")
    nss = Namespaces()
    try:
        nss.add("probe")
    except (subprocess.CalledProcessError, OSError) as exc:
        nss.close()
        pytest.skip(f"`ip netns add` does not work here: {getattr(exc, 'stderr', exc)}")
    try:
        jtest = _run("ip", "-n", nss.names[0], "-s", "-j", "link", "show", check=False)
        if jtest.returncode != 0 or not jtest.stdout.startswith("["):
            pytest.skip("this `ip` has no JSON output (-j)")
        nss.delete(nss.names[0])
        a, b = nss.add("a"), nss.add("b")
        net = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
        ea, eb = nss.veth(a, b, net)
        yield {"nss": nss, "a": a, "b": b, "ea": ea, "eb": eb, "addr_b": f"{net}.2"}
    finally:
        nss.close()


@pytest.fixture
def reader():
    return NetnsReader(HostFS("/"))


def test_counters_equal_the_kernels_and_lo_excluded(env, reader):
    nss = env["nss"]
    recv = nss.start(env["b"], RECEIVER, env["addr_b"], 5001)
    wait_line(recv, "ready")
    send = nss.start(env["a"], SENDER, env["addr_b"], 5001, 8 * MIB, 0)
    wait_line(send, "done", 60)
    assert int(wait_line(recv, "received")[1]) == 8 * MIB
    try:
        before_a, before_b = kernel_counters(env["a"]), kernel_counters(env["b"])
        got = reader.read({"/sender": [send.pid], "/receiver": [recv.pid]})
        after_a, after_b = kernel_counters(env["a"]), kernel_counters(env["b"])
        s, r = got["/sender"].network, got["/receiver"].network
        assert s is not None and r is not None, (got, reader.host)
        assert s.netns == ns_inode(env["a"]) and r.netns == ns_inode(env["b"])
        assert not s.shared and not r.shared
        # the veth listed, lo not (and lo did carry the sender's 1 MiB)
        assert [i.name for i in s.interfaces] == [env["ea"]]
        assert [i.name for i in r.interfaces] == [env["eb"]]
        assert before_a["lo"][1] >= MIB
        # equal to the namespace's own counters, within what moved while reading (nothing
        # should: the transfer is over and IPv6 is off; a stray ARP is allowed for)
        slack = 4096
        for got_s, lo_k, hi_k, eth in ((s, before_a, after_a, env["ea"]), (r, before_b, after_b, env["eb"])):
            assert lo_k[eth][0] - slack <= got_s.total("rx_bytes_total") <= hi_k[eth][0] + slack
            assert lo_k[eth][1] - slack <= got_s.total("tx_bytes_total") <= hi_k[eth][1] + slack
        # 8 MiB of payload went A -> B, plus TCP/IP headers
        assert 8 * MIB <= s.total("tx_bytes_total") <= 8 * MIB * 1.1
        assert 8 * MIB <= r.total("rx_bytes_total") <= 8 * MIB * 1.1
        assert abs(s.total("tx_bytes_total") - r.total("rx_bytes_total")) <= slack
        rec = network_record(got["/sender"])
        assert rec["tx_bytes_total"] == s.total("tx_bytes_total") and rec["interfaces"][0]["name"] == env["ea"]
        assert "lo" not in [i["name"] for i in rec["interfaces"]]
        assert reader.last.net_dev_reads == 2
    finally:
        nss.stop(send)
        nss.stop(recv)


def test_rate_at_a_steady_known_rate(env, reader):
    nss = env["nss"]
    rate = 4 * MIB  # bytes/s of payload, for 6 s: the sender stops by itself
    recv = nss.start(env["b"], RECEIVER, env["addr_b"], 5002)
    wait_line(recv, "ready")
    send = nss.start(env["a"], SENDER, env["addr_b"], 5002, 6 * rate, rate)
    try:
        wait_line(send, "started")
        time.sleep(1.0)  # past connection set-up
        keys = {"/sender": [send.pid], "/receiver": [recv.pid]}
        first = reader.read(keys)
        time.sleep(2.0)
        second = reader.read(keys)
        assert send.poll() is None  # still sending: the window is inside the transfer
        for key, field in (("/sender", "tx_bytes_per_second"), ("/receiver", "rx_bytes_per_second")):
            r = network_rates(network_counters(first[key].network), network_counters(second[key].network))
            # the interval is measured from the readings' own clock, not from the sleep
            assert 1.5 < r.interval_s < 10
            got = getattr(r, field)
            assert got is not None
            assert rate * 0.85 <= got <= rate * 1.15, (key, got / rate)
        wait_line(send, "done", 30)
    finally:
        nss.stop(send)
        nss.stop(recv)


def test_two_keys_in_one_namespace_shared(env, reader):
    nss = env["nss"]
    p1 = nss.start(env["a"], SLEEPER)
    p2 = nss.start(env["a"], SLEEPER)
    try:
        wait_line(p1, "ready")
        wait_line(p2, "ready")
        got = reader.read({"/pod/c1": [p1.pid], "/pod/c2": [p2.pid]})
        n1, n2 = got["/pod/c1"].network, got["/pod/c2"].network
        assert n1.shared and n2.shared
        assert n1.netns == n2.netns == ns_inode(env["a"])
        assert reader.last.net_dev_reads == 1  # one namespace, one read
    finally:
        nss.stop(p1)
        nss.stop(p2)


def test_host_namespace_null_with_reason(env, reader):
    got = reader.read({"/system.slice/cgstat-test.service": [os.getpid()]})
    r = got["/system.slice/cgstat-test.service"]
    assert r.network is None
    assert r.problem.error == ERR_HOST and r.problem.detail == HOST_REASON
    assert reader.host.inode is not None, reader.host
    assert network_record(r) is None


def test_namespace_vanishes_between_ticks(env, reader):
    nss = env["nss"]
    c = nss.add("c")
    p = nss.start(c, SLEEPER)
    wait_line(p, "ready")
    first = reader.read({"/job": [p.pid]})["/job"]
    assert first.network is not None and first.network.netns == ns_inode(c)
    # the namespace the workload restarts into, made while c still exists: the kernel hands
    # a freed namespace's inode number to the next one made (proc_alloc_inum, an IDA), and
    # two namespaces under one number could not be told apart here
    d = nss.add("d")
    nss.stop(p)
    nss.delete(c)
    second = reader.read({"/job": [p.pid]})["/job"]  # no exception
    assert second.network is None and second.problem.error == "gone"
    assert network_rates(network_counters(first.network), network_counters(second.network)) == NO_NETWORK_RATES
    # the workload restarted into a new namespace: counters, but no rate across the two
    q = nss.start(d, SLEEPER)
    try:
        wait_line(q, "ready")
        third = reader.read({"/job": [q.pid]})["/job"]
        assert third.network is not None and third.network.netns != first.network.netns
        assert network_rates(network_counters(first.network), network_counters(third.network)) == NO_NETWORK_RATES
    finally:
        nss.stop(q)
        nss.delete(d)
