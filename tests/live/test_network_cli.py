"""Network per workload through `cgstat` itself: a process in a test cgroup and
its own network namespace sends 8 MiB over a veth to a receiver in another; the cgroup's
record carries that namespace's counters. Namespaces, veth and traffic as in
test_netns_real.py: only ours, both veth ends inside them, bounded, cleaned up."""

import json
import subprocess
import sys

import pytest

from tests.helpers.contract import ROOT, validate
from tests.live.test_netns_real import RECEIVER, SENDER, SLEEPER, env, kernel_counters, ns_inode, wait_line  # noqa: F401

MIB = 1 << 20
RATE = 4 * MIB  # bytes/s while sending: 8 MiB in 2 s


def _join(group, pid):
    """Move a process this test started into every hierarchy of a group this test made."""
    for key in group.keys:
        with open(group.path(key, "cgroup.procs"), "w") as f:
            f.write(str(pid))


def _records(*args):
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    records = [json.loads(x) for x in proc.stdout.splitlines()]
    for r in records:
        validate(r)
    return records


def _by_cgroup(records, cgroup):
    return [r for r in records if r["type"] == "cgroup" and r["cgroup"] == cgroup]


@pytest.mark.realcg
def test_cgroup_in_its_own_namespace_sends_8_mib(env, make_group):
    nss, a, b = env["nss"], env["a"], env["b"]
    sender_g, peer_g, receiver_g, host_g = make_group(), make_group(), make_group(), make_group()
    receiver = nss.start(b, RECEIVER, env["addr_b"], 7411)
    wait_line(receiver, "ready")
    _join(receiver_g, receiver.pid)
    peer = nss.start(a, SLEEPER)  # a second workload in the sender's namespace
    wait_line(peer, "ready")
    _join(peer_g, peer.pid)
    host = host_g.start(["sleep", "1000"], stdout=subprocess.DEVNULL)  # the host's namespace
    sender = nss.start(a, SENDER, env["addr_b"], 7411, 8 * MIB, RATE)
    _join(sender_g, sender.pid)
    wait_line(sender, "started")
    pattern = "|".join(g.name for g in (sender_g, peer_g, receiver_g, host_g))
    during = _records("stream", "--interval", "0.5", "--count", "3", "--all", "--match", pattern)
    wait_line(sender, "done")
    wait_line(receiver, "received")
    after = _records("once", "--window", "0", "--all", "--match", pattern)

    # while it sends at a steady 4 MiB/s, the rate is within 15 %
    rates = [r["network"]["tx_bytes_per_second"] for r in _by_cgroup(during, sender_g.cgroup)]
    assert len(rates) == 3 and all(r is not None for r in rates)
    assert sorted(rates)[1] == pytest.approx(RATE, rel=0.15), rates  # the median tick
    # once it is done, the totals are the namespace's own counters (no lo)
    (snd,) = _by_cgroup(after, sender_g.cgroup)
    (rcv,) = _by_cgroup(after, receiver_g.cgroup)
    (peer_rec,) = _by_cgroup(after, peer_g.cgroup)
    (host_rec,) = _by_cgroup(after, host_g.cgroup)
    own = {k: v for k, v in kernel_counters(a).items() if k != "lo"}
    assert snd["network"]["tx_bytes_total"] == sum(tx for _, tx in own.values()) >= 8 * MIB
    assert snd["network"]["rx_bytes_total"] == sum(rx for rx, _ in own.values())
    names = [i["name"] for i in snd["network"]["interfaces"]]
    assert names == [env["ea"]] and "lo" not in names
    assert rcv["network"]["rx_bytes_total"] >= 8 * MIB and rcv["network"]["netns"] == ns_inode(b)
    # two workloads in one namespace: both shared, the same netns
    assert snd["network"]["netns"] == peer_rec["network"]["netns"] == ns_inode(a)
    assert snd["network"]["shared"] is True and peer_rec["network"]["shared"] is True
    assert rcv["network"]["shared"] is False
    # the host's namespace: null, with the reason
    assert host_rec["network"] is None
    assert [e["error"] for e in host_rec["errors"] if e["source"] == "network"] == ["host_namespace"]
    host.kill()
