"""cgstat's OTLP push into a real receiver: VictoriaMetrics 1.112 (Debian 13's package, see
tests/helpers/victoria.py), queried back through its Prometheus API.

One receiver and one `cgstat stream --otlp-endpoint` for the module (a tick every 0.5 s, one
cgroup of ours matched: little CPU). The first test reads a cgroup's CPU and memory back and
finds the stream's record of that tick and `cgstat once`'s CPU time; the second stops the
receiver for two minutes, starts it again, and finds every tick the stream wrote during and
around that time in the receiver; the third reads back the series of a synthetic host of 60
containers pushed with `--max-series 300`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import realcg, synth, victoria
from tests.helpers.waiting import wait_for

pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")

REPO = realcg.REPO
INTERVAL_S = 0.5
OUTAGE_S = 120.0
# a process that worked a little and sleeps: its CPU time and memory stay as they are
IDLER = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n"
         "print('ready', flush=True)\ntime.sleep(3600)\n")


class Setup:
    def __init__(self, vm, group, stream, output):
        self.vm, self.group, self.stream, self.output = vm, group, stream, output

    def records(self):
        """The stream's records of our cgroup so far (whole lines)."""
        with open(self.output, "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        return [r for r in map(json.loads, lines) if r.get("type") == "cgroup" and r["cgroup"] == self.group.cgroup]


@pytest.fixture(scope="module")
def setup(_realcg_hier, tmp_path_factory):
    try:
        binary = victoria.fetch()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        pytest.skip("VictoriaMetrics 1.112 unavailable: %s" % exc)
    folder = str(tmp_path_factory.mktemp("victoria"))
    vm = victoria.VictoriaMetrics(binary, folder)
    group = realcg.TestGroup(_realcg_hier)
    stream = None
    try:
        vm.start()
        group.start([sys.executable, "-c", IDLER]).wait_line("ready")
        output = os.path.join(folder, "stream.jsonl")
        stream = subprocess.Popen(
            [sys.executable, "-m", "cgstat", "stream", "--match", group.name, "--interval", str(INTERVAL_S),
             "--no-events", "--output", output, "--otlp-endpoint", vm.otlp, "--otlp-buffer", "5m"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(os.path.join(folder, "stream.err"), "wb"))
        yield Setup(vm, group, stream, output)
    finally:
        if stream is not None:
            stream.terminate()
            stream.wait(30)
        vm.close()
        group.destroy()


def _selector(name: str, group) -> str:
    return '{__name__="%s",cgstat.cgroup="%s"}' % (name, group.cgroup)


@pytest.mark.realcg
def test_the_receiver_has_cgstat_once_values(setup):
    """The receiver's latest values are those of the stream's own record of that tick (its
    JSON line with the same `ts`: the record `cgstat once` makes, by the same code), and the
    CPU time is `cgstat once`'s, read after it. Memory is compared with the pushed tick's
    record, not with a later `once`: cgroup v1's memory.usage_in_bytes moves by a few pages
    between two readings of a cgroup at rest (the kernel's per-CPU charge caches,
    MEMCG_CHARGE_BATCH), so a later reading may differ by a few per cent."""
    vm, group = setup.vm, setup.group
    once = subprocess.run([sys.executable, "-m", "cgstat", "once", "--window", "0", "--match", group.name],
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, timeout=60)
    (record,) = [r for r in map(json.loads, once.stdout.splitlines()) if r.get("cgroup") == group.cgroup]
    assert record["cpu"]["usage_seconds_total"] > 0.1 and record["memory"]["usage_bytes"] > 1e6
    after = _millis(record["ts"])
    fields = {"container.cpu.time": ("cpu", "usage_seconds_total"),
              "container.memory.usage": ("memory", "usage_bytes"),
              "container.memory.working_set": ("memory", "working_set_bytes")}

    def latest():
        got = {}
        for name in fields:
            series = vm.export(_selector(name, group))
            if len(series) != 1 or series[0]["timestamps"][-1] <= after:  # a sample read after once's
                return None
            got[name] = (series[0]["metric"], series[0]["timestamps"][-1], float(series[0]["values"][-1]))
        # and the instant query (the Prometheus API) says the same
        for name, (_, _, value) in got.items():
            (result,) = vm.query(_selector(name, group))
            if float(result["value"][1]) != value:
                return None
        return got

    got = wait_for(latest, 30)
    assert got, "no sample in the receiver: %s" % vm.tail()
    stamps = {stamp for _, stamp, _ in got.values()}
    # the stream wrote that tick (its line may come a moment after the push)
    ticks = wait_for(lambda: stamps <= set(_records_by_ms(setup)) and _records_by_ms(setup), 10)
    assert ticks, (stamps, sorted(_records_by_ms(setup))[-3:])
    for name, (keys, key) in fields.items():
        _, stamp, value = got[name]
        assert value == float(ticks[stamp][keys][key]), (name, ticks[stamp][keys])
    labels, _, cpu = got["container.cpu.time"]
    assert labels["host.name"] == record["host"] and labels["cgstat.cgroup"] == group.cgroup
    # a process asleep gets no CPU time: once's reading, earlier, is the receiver's
    assert cpu == pytest.approx(record["cpu"]["usage_seconds_total"], rel=0.01)
    assert got["container.memory.usage"][2] == pytest.approx(record["memory"]["usage_bytes"], rel=0.25)


@pytest.mark.realcg
def test_two_minutes_down_loses_no_sample(setup):
    vm, group = setup.vm, setup.group
    before = wait_for(lambda: len(setup.records()) >= 2 and setup.records(), 30)
    assert before, "the stream wrote nothing"
    vm.stop()
    stopped = time.monotonic()
    time.sleep(OUTAGE_S)  # the outage itself, not a timing assertion
    during = [r["ts"] for r in setup.records() if r["ts"] > before[-1]["ts"]]
    assert len(during) >= OUTAGE_S / INTERVAL_S * 0.8, "the stream did not go on while the receiver was down"
    written = {_millis(r["ts"]) for r in setup.records()}  # every tick up to the restart
    vm.start()
    outage = time.monotonic() - stopped

    def caught_up():
        held = {stamp for series in vm.export(_selector("container.cpu.time", group)) for stamp in series["timestamps"]}
        return written <= held and held

    held = wait_for(caught_up, 60, every_s=1.0)
    if not held:
        held = {stamp for series in vm.export(_selector("container.cpu.time", group)) for stamp in series["timestamps"]}
        missing = sorted(written - held)
        pytest.fail("%d of %d ticks lost (outage %.0f s), the first at %s: %s"
                    % (len(missing), len(written), outage, missing[:1], vm.tail()))
    assert setup.stream.poll() is None
    err = os.path.join(vm.folder, "stream.err")
    said = wait_for(lambda: "answers again" in open(err).read() and open(err).read(), 10)
    assert said and "retrying, ticks kept for up to 300 s" in said, open(err).read()
    assert "dropped" not in said


def _records_by_ms(setup):
    return {_millis(r["ts"]): r for r in setup.records()}


def _millis(ts: str) -> int:
    from cgstat.timestamps import ts_millis

    return ts_millis(ts)


SYNTH_CGROUPS = 60
SYNTH_MAX_SERIES = 300


@pytest.mark.realcg
def test_the_push_within_max_series_holds_that_many_series_and_the_same_sums(setup, tmp_path):
    """A synthetic host of 60 Docker containers (about 1,400 data points a tick) pushed with
    --max-series 300: the receiver holds at most 300 series of that host, among them
    cgstat.cgroup="_other", and each tick's CPU time and memory summed over the host's series
    are those of the stream's own records of that tick."""
    vm = setup.vm
    root = str(tmp_path / "host")
    synth.v2_host(root)
    hostname = "cgstat-budget-%d" % os.getpid()
    synth.write(os.path.join(root, "etc/hostname"), hostname + "\n")
    # the records' time is the tree's boot time plus its uptime: now, for the receiver's retention
    synth.write(os.path.join(root, "proc/stat"), "cpu  1 2 3 4\nbtime %d\n" % (time.time() - 1000))
    for i in range(SYNTH_CGROUPS):
        cid = "%064x" % (i + 1)
        usage = "usage_usec %d\nuser_usec 1\nsystem_usec 1\n" % (1000000 * (i + 1))
        memory = "%d\n" % ((1 << 20) * (i + 1))
        synth.v2_cgroup(root, "/system.slice/docker-%s.scope" % cid, {"cpu.stat": usage, "memory.current": memory})
        synth.write(os.path.join(root, "var/lib/docker/containers", cid, "config.v2.json"),
                    json.dumps({"ID": cid, "Name": "/job-%d" % i, "Config": {"Image": "busybox:1", "Labels": {}}}))
    output = str(tmp_path / "stream.jsonl")
    subprocess.run([sys.executable, "-m", "cgstat", "--host-root", root, "stream", "--interval", "0.5", "--count", "3",
                    "--no-events", "--output", output, "--otlp-endpoint", vm.otlp, "--max-series",
                    str(SYNTH_MAX_SERIES)], cwd=REPO, check=True, timeout=120, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(output) as f:
        records = [r for r in map(json.loads, f) if r.get("type") == "cgroup"]
    assert len({r["cgroup"] for r in records}) == SYNTH_CGROUPS and len(records) == 3 * SYNTH_CGROUPS
    host = '{host.name="%s"}' % hostname
    series = wait_for(lambda: (lambda got: len({s["timestamps"][-1] for s in got
                                                if s["metric"]["__name__"] == "container.cpu.time"}) and got)(
        vm.export(host)), 30)
    assert series, "nothing of %s in the receiver: %s" % (hostname, vm.tail())
    assert 100 < len(series) <= SYNTH_MAX_SERIES
    other = [s for s in series if s["metric"].get("cgstat.cgroup") == "_other"]
    assert other and all(s["metric"].get("container.name") == "_other" for s in other)
    (folded,) = [s for s in other if s["metric"]["__name__"] == "cgstat.folded_cgroups"]
    own = {s["metric"].get("cgstat.cgroup") for s in series} - {"_other"}
    assert folded["values"][-1] == SYNTH_CGROUPS - len(own) and len(own) > 5
    # the synthetic files never move (nor the tree's clock: the ticks are one sample): the
    # host's series sum to a tick's records
    last = records[-SYNTH_CGROUPS:]
    for name, keys in (("container.cpu.time", ("cpu", "usage_seconds_total")),
                       ("container.memory.usage", ("memory", "usage_bytes"))):
        pushed = [s for s in series if s["metric"]["__name__"] == name]
        want = sum(r[keys[0]][keys[1]] for r in last)
        assert want > 0 and sum(s["values"][-1] for s in pushed) == pytest.approx(want, rel=1e-9), name
        assert len(pushed) == len(own) + 1
