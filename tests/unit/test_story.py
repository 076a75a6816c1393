"""`cgstat story`: one workload's life told from the store or a stream file, its verdict
first; found by name, ID prefix, unit, pod or path; several lives listed, never guessed."""

import re
import subprocess
import sys

import orjson
import pytest

from cgstat.app.story import StoryError, choose, gather, matches, summary
from cgstat.outputs.clock import Clock
from cgstat.timestamps import rfc3339
from tests.helpers import history as H
from tests.helpers.contract import ROOT


def _cgstat(*args, tz="UTC", code=0):
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "TZ": tz, "PYTHONPATH": ROOT})
    assert proc.returncode == code, proc.stderr.decode()
    return proc.stdout.decode(), proc.stderr.decode()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("story") / "s")
    H.record_store(path)
    return path


def test_the_story_of_a_job_killed_at_its_limit(store):
    out, _ = _cgstat("story", "job", "--store", store, tz="Europe/Paris")
    head, *rest = out.splitlines()
    # the kill at the kernel log's time, its limit, the growth of 1 MiB a tick over 26 s
    assert head == ("job.service: OOM-killed at 04:12:26 at its 64 MiB limit after growing 1 MiB a second for "
                    "26 s; throttled in 80 % of its CPU periods (times in CET)")
    told = {line.split()[0]: line for line in rest if line.startswith("  ") and line[2] != " "}
    assert "2026-12-02 04:12:00 to 2026-12-02 04:12:26 (26 s, 27 records)" in told["seen"]
    assert "memory 64 MiB, CPU 0.5 cores" in told["limits"]
    assert "peak 64 MiB = %d B (the kernel's memory.peak" % H.KERNEL_PEAK in told["memory"]
    assert "highest usage sampled 57 MiB at 04:12:26" in told["memory"]
    assert "13.00 s in all (the kernel's count)" in told["CPU"] and "208 of 260 periods (80 %)" in told["CPU"]
    assert "2026-12-02 04:12:27 (the kernel log's 04:12:26) critical oom_kill" in told["event"]
    assert told["ended"].startswith("  ended      2026-12-02 04:12:28 by oom_kill")
    assert "CPU 13.00 s" in told["ended"] and "OOM kills 1" in told["ended"]


def test_utc_and_json(store):
    out, _ = _cgstat("story", "/system.slice/job.service", "--store", store, "--utc", tz="Europe/Paris")
    assert out.startswith("job.service: OOM-killed at 03:12:26 ") and "(times in UTC)" in out.splitlines()[0]
    out, _ = _cgstat("story", "job.service", "--store", store, "--format", "json")
    doc = orjson.loads(out)
    assert doc["ending"] == {"how": "oom_kill", "at": rfc3339(H.KERNEL_KILL_S), "clock": "kernel log",
                             "limit_bytes": H.LIMIT, "global_oom": False}
    assert doc["memory"]["peak_bytes"] == H.KERNEL_PEAK and doc["memory"]["peak_source"] == "memory.peak"
    assert doc["memory"]["growth_bytes_per_second"] == pytest.approx(H.MiB)
    assert doc["cpu"]["seconds_total"] == 13.0 and doc["exit"] == H.exit_record()
    assert doc["verdict"].startswith("OOM-killed at 03:12:26")


def test_a_stream_file_and_two_lives_listed_not_guessed(tmp_path):
    path = tmp_path / "two.jsonl"
    with open(path, "wb") as f:
        for shift in (0, 100):  # the unit ran again after its exit record: a second life
            for i in range(H.TICKS):
                for r in H.tick(i):
                    r["ts"] = rfc3339(H.T0 + shift + i)
                    f.write(orjson.dumps(r) + b"\n")
    out, err = _cgstat("story", "job.service", "--file", str(path), code=1)
    assert out == "" and err.startswith("cgstat: 2 workloads match 'job.service'")
    assert err.count("cgstat:   /system.slice/job.service  unit job.service") == 2  # a line each
    assert len(err.splitlines()) == 3 and "\\x0a" not in err
    assert "2026-12-02 03:12:00 to 2026-12-02 03:12:26 (oom_kill)" in err
    assert "2026-12-02 03:13:40 to" in err
    # --since narrows a stream file as it does the store: the second life alone
    out, _ = _cgstat("story", "job.service", "--file", str(path), "--since", "%d" % (H.T0 + 100), "--utc")
    assert out.startswith("job.service: ") and "2026-12-02 03:13:40 to" in out, out
    _, err = _cgstat("story", "job.service", "--file", str(path), "--until", "%d" % (H.T0 - 1), code=1)
    assert err.startswith("cgstat: no workload called 'job.service'")
    one = tmp_path / "one.jsonl"
    H.write_jsonl(str(one))
    out, _ = _cgstat("story", "job", "--file", str(one))
    assert out.startswith("job.service: OOM-killed at 03:12:26")


def test_lives_listed_keep_a_row_each_whatever_their_names():
    evil = "ev\nil\x1b[2J"
    lines = [orjson.dumps({"type": "cgroup", "ts": rfc3339(H.T0), "cgroup": "/docker/" + c, "container": {
        "runtime": "docker", "id": "abc" + c, "name": evil}}) for c in ("1\n", "2\x07")]
    with pytest.raises(StoryError) as err:
        choose(gather(lines, "abc"), "abc", Clock(utc=True))
    rows = str(err.value).split("\n")
    assert len(rows) == 3 and all("\x1b" not in row and "\x07" not in row for row in rows)
    assert rows[1].startswith("  /docker/1\\x0a  container ev\\x0ail\\x1b[2J")


def test_nothing_matching_is_one_line(store):
    out, err = _cgstat("story", "nothing-of-the-sort", "--store", store, code=1)
    assert out == "" and len(err.splitlines()) == 1 and "no workload called 'nothing-of-the-sort'" in err


@pytest.mark.parametrize("query,found", [
    ("web", True), ("4f3a9c", True), ("4F3A9C", True), ("4f", False), ("docker-4f3a9c01.scope", True),
    ("/system.slice/docker-4f3a9c01.scope", True), ("shop/web-0", False), ("system.slice", False)])
def test_a_container_is_found_by_name_id_prefix_or_path(query, found):
    r = {"type": "cgroup", "cgroup": "/system.slice/docker-4f3a9c01.scope",
         "container": {"id": "4f3a9c01" + "0" * 56, "name": "web"}, "pod": None, "unit": "docker-4f3a9c01.scope"}
    assert matches(r, query) is found


def test_a_pod_is_found_by_name_and_its_containers_are_not_it():
    pod = {"namespace": "shop", "name": "web-0"}
    assert matches({"type": "pod", "cgroup": "/kubepods/podx", "pod": pod}, "shop/web-0")
    assert matches({"type": "pod", "cgroup": "/kubepods/podx", "pod": pod}, "web-0")
    assert not matches({"type": "cgroup", "cgroup": "/kubepods/podx/c1", "pod": pod,
                        "container": {"id": "c1", "name": "app"}}, "web-0")


def test_a_life_that_grew_for_hours_says_so_per_hour():
    lines = []
    for i in range(7):  # 6 h, 1.2 GiB an hour
        r = H.job_record(i)
        r["ts"] = rfc3339(H.T0 + i * 3600)
        r["memory"]["working_set_bytes"] = int((4 + 1.2 * i) * (1 << 30))
        r["memory"]["limit_bytes"] = 16 << 30
        lines.append(orjson.dumps(r))
    told = summary(gather(lines, "job.service")[0])
    from cgstat.outputs.clock import Clock
    from cgstat.outputs.story_text import verdict

    told["ending"] = dict(told["ending"], how="oom_kill", at=rfc3339(H.T0 + 6 * 3600 + 7), limit_bytes=16 << 30)
    assert verdict(told, Clock(utc=True)).startswith(
        "OOM-killed at 09:12:07 at its 16 GiB limit after growing 1.2 GiB an hour for 6 h")


def test_the_report_has_the_kernels_peak_and_the_workloads_that_ended(store, tmp_path):
    page = tmp_path / "r.html"
    _cgstat("report", "--store", store, "--since", "0", "-o", str(page))
    html = page.read_text()
    row = html.split('<tr data-name="job.service /system.slice/job.service">')[1].split("</tr>")[0]
    assert ">64.0 MiB (kernel)<" in row and ">100.0 %<" in row  # not the 57 MiB sampled
    assert '<td data-v="1.0">1</td>' in row  # its OOM kill, from its event and exit record
    init = html.split('<tr data-name="init.scope /init.scope">')[1].split("</tr>")[0]
    assert "(sampled)" in init or "(kernel)" in init
    ended = html.split('<table id="exits">')[1].split("</table>")[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", ended)
    assert cells == ["job.service", "2026-12-02 03:12:00", "2026-12-02 03:12:28", "26.0 s", "13.00", "10.40",
                     "64.0 MiB (kernel)", "1", "4.0 KiB", "0 B", "–", "oom_kill"]
    assert "[the kernel log&#x27;s 03:12:26 UTC]" in html


def test_gpu_held_and_busy():
    lines = []
    for i, sm in enumerate((0.0, 50.0, 100.0, 0.0)):
        r = H.job_record(i)
        r["gpu"] = {"memory_bytes": 3 << 30, "sm_percent": sm, "devices": ["GPU-a", "GPU-b"], "processes": []}
        lines.append(orjson.dumps(r))
    told = summary(gather(lines, "job.service")[0])
    assert told["gpu"] == {"held_bytes": 3 << 30, "held_at": rfc3339(H.T0), "held_seconds": 8.0,
                           "busy_seconds": 1.5, "devices": ["GPU-a", "GPU-b"]}
    from cgstat.outputs.clock import Clock
    from cgstat.outputs.story_text import lines as told_lines

    (gpu,) = [text for subject, text in told_lines(told, Clock(utc=True)) if subject == "GPU"]
    assert gpu == ("held 3 GiB at most (at 03:12:00), memory on a GPU for 8 GPU-seconds, busy 1.5 GPU-seconds "
                   "(SM %, sampled) on GPU-a GPU-b")
