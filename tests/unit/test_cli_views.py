"""The views through the command line: --format table/csv, `cgstat report`, `cgstat serve`
on loopback by default."""

import csv
import io
import os
import subprocess
import sys
import time
import urllib.request

from tests.helpers.contract import ROOT, run_cgstat

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd")


def test_once_csv_has_a_header_and_rows_of_equal_width():
    proc = subprocess.run([sys.executable, "-m", "cgstat", "once", "--window", "0", "--format", "csv",
                           "--all", "--host-root", os.path.join(V2, "t1")], cwd=ROOT, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.reader(io.StringIO(proc.stdout.decode())))
    assert rows[0][:2] == ["type", "ts"] or "cgroup" in rows[0]
    assert len(rows) == 1 + 34 and len({len(r) for r in rows}) == 1


def test_once_table_names_the_containers():
    proc = subprocess.run([sys.executable, "-m", "cgstat", "once", "--window", "0", "--format", "table",
                           "--host-root", os.path.join(V2, "t1"), "--match", "docker-5113"],
                          cwd=ROOT, capture_output=True)
    lines = proc.stdout.decode().splitlines()
    head = lines[0]
    assert head.startswith("CONTAINER ID") and "NAME" in head and "CPU %" in head and "MEM USAGE / LIMIT" in head
    assert len(lines) == 2 and lines[1].startswith("5113")  # docker's 12-hex short ID first
    assert lines[1][head.index("NAME"):].startswith("tf-training ")


def test_report_of_a_recorded_stream(tmp_path):
    stream = tmp_path / "s.jsonl"
    with open(stream, "wb") as f:
        for t in ("t0", "t1"):
            out = subprocess.run([sys.executable, "-m", "cgstat", "once", "--state", str(tmp_path / "st"), "--all",
                                  "--host-root", os.path.join(V2, t)], cwd=ROOT, capture_output=True, check=True)
            f.write(out.stdout)
    _, err, rc = run_cgstat("report", str(stream), "-o", str(tmp_path / "r.html"), check=False)
    assert rc == 0, err
    html = (tmp_path / "r.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "tf-training" in html and "<svg" in html
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html  # self-contained
    _, err, rc = run_cgstat("report", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "x.html"), check=False)
    assert rc == 1 and len(err.splitlines()) == 1


def test_serve_listens_on_loopback_only_by_default():
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "serve", "--host-root", os.path.join(V2, "t1")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        body = b""
        # before the first tick /metrics has only cgstat's own series: poll until a tick is in
        while time.monotonic() < deadline and b"container_cpu_usage_seconds_total" not in body:
            try:
                body = urllib.request.urlopen("http://127.0.0.1:17923/metrics", timeout=2).read()
            except OSError:
                time.sleep(0.1)
        assert b'container_cpu_usage_seconds_total{id="/system.slice/docker-5113' in body
        listening = [line.split()[1] for line in open("/proc/net/tcp").read().splitlines()[1:]
                     if line.split()[3] == "0A"]  # state LISTEN
        port = "%04X" % 17923
        assert [a for a in listening if a.endswith(":" + port)] == ["0100007F:" + port]  # 127.0.0.1 only
        assert not any(line.split()[1].endswith(":" + port) for line in open("/proc/net/tcp6").read().splitlines()[1:]
                       if line.split()[3] == "0A")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out == b""  # serve writes no stream


def test_stream_serves_metrics_beside_the_stream_from_the_same_ticks():
    import socket as socket_mod

    with socket_mod.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "cgstat", "stream", "--interval", "0.2", "--host-root",
                             os.path.join(V2, "t1"), "--match", "docker-5113", "--listen", f"127.0.0.1:{port}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stdout.readline()  # a batch is out: the same tick was published
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert b'"container":{"runtime":"docker"' in first
    assert b'container_memory_working_set_bytes{id="/system.slice/docker-5113' in body
    assert proc.returncode == 0


def test_report_never_blocks_on_or_replaces_what_is_not_its_own(tmp_path):
    import stat as stat_mod

    stream = os.path.join(V2, "golden.jsonl")
    fifo, device, foreign, link = (str(tmp_path / n) for n in ("fifo", "null", "hosts", "link"))
    os.mkfifo(fifo)
    os.mknod(device, stat_mod.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    with open(foreign, "w") as f:
        f.write("127.0.0.1 localhost\n")
    os.symlink(foreign, link)
    for args in (["report", fifo, "-o", str(tmp_path / "a.html")],       # input: never blocks
                 ["report", device, "-o", str(tmp_path / "a.html")],     # input: never endless
                 ["report", stream, "-o", device], ["report", stream, "-o", fifo],
                 ["report", stream, "-o", foreign], ["report", stream, "-o", link]):
        _, err, rc = run_cgstat(*args, check=False, timeout=30)
        assert rc == 1 and len(err.splitlines()) == 1, (args, err)
    assert stat_mod.S_ISCHR(os.lstat(device).st_mode) and stat_mod.S_ISFIFO(os.lstat(fifo).st_mode)
    assert open(foreign).read() == "127.0.0.1 localhost\n" and os.path.islink(link)
    assert not os.path.exists(tmp_path / "a.html")
    out = str(tmp_path / "r.html")
    for _ in range(2):  # its own report is replaced
        _, err, rc = run_cgstat("report", stream, "-o", out, check=False)
        assert rc == 0, err
    assert stat_mod.S_IMODE(os.stat(out).st_mode) == 0o600
