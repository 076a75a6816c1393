"""`cgstat report` (cgstat/outputs/report/): a self-contained HTML report from a recorded
stream, checked for content, bounds and hostile names, and rendered in real headless
Chromium (Debian's `chromium`): it renders, every workload has its SVG charts, events are
marked, and a screenshot is taken."""

import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import orjson
import pytest

from cgstat.contract import fields
from cgstat.errors import CgstatError
from cgstat.outputs.report import build_report, read_stream
from cgstat.events import EventDetector
from tests.helpers.fieldtable import complete, record

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
MiB = 1024 * 1024
END = 1795982620.0
HOSTILE = "<script>alert(1)</script>\x1b[2J\u202e\"'&"


def _ts(t):
    whole = int(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + ".%03dZ" % int((t - whole) * 1000)


_TEMPLATES = {}


def workload_record(t, i, name, cpu_pct, ws, limit, cores=None, oom=0, gpu=None, cpu_total=0.0,
                    periods=0, throttled=0):
    """One container's record at time t: the first of each container made (and validated)
    by fieldtable.record, the others copies of it with the figures of their tick."""
    key = (i, name, limit is None, cores is None, gpu is None)
    if key not in _TEMPLATES:
        _TEMPLATES[key] = record(
            host="node-1", cgroup="/docker/%064x" % i, interval_s=1.0, pids={"current": 3},
            container={"runtime": "docker", "id": "%064x" % i, "short_id": "%012x" % i, "name": name},
            cpu={"percent": 0.0, "limit_cores": cores, "usage_seconds_total": 0.0, "periods_total": 0,
                 "throttled_periods_total": 0},
            memory={"working_set_bytes": 0, "limit_bytes": limit, "percent": 0.0, "oom_kills_total": 0},
            io={"read_bytes_total": 0, "write_bytes_total": 0, "read_bytes_per_second": 0.0,
                "write_bytes_per_second": 0.0}, gpu=gpu)
    r = orjson.loads(orjson.dumps(_TEMPLATES[key]))
    r["ts"] = _ts(t)
    r["cpu"].update(usage_seconds_total=cpu_total, percent=cpu_pct, periods_total=periods,
                    throttled_periods_total=throttled)
    r["memory"].update(working_set_bytes=ws, percent=ws / (limit or 64 * 1024 * MiB) * 100, oom_kills_total=oom)
    r["io"].update(read_bytes_total=int(t) * 1000, write_bytes_total=int(t) * 5000,
                   read_bytes_per_second=1000.0 + (t % 7) * 100)
    if gpu is not None:
        r["gpu"] = complete(fields.RECORD, "gpu", gpu)
    return r


def write_stream(path, seconds=600, interval=1.0, extra=0, detect=True):
    """A recorded stream: a leaking trainer, an input-bound trainer (CPU at quota, idle GPU),
    a job OOM-killed once, a calm one with a hostile name, and `extra` calm containers."""
    det = EventDetector(window_s=30)
    t0 = END - seconds  # ends just before the recorded v2 tree's snapshots (2026-11-29T20:03:48Z)
    n = int(seconds / interval)
    with open(path, "wb") as f:
        for k in range(n):
            t = t0 + k * interval
            recs = [
                workload_record(t, 1, "leaky-trainer", 80.0 + (k % 5), 200 * MiB + k * interval * 2 * MiB,
                                4096 * MiB, cores=2.0, cpu_total=k * 0.8),
                workload_record(t, 2, "input-bound", 49.5 + (k % 3) * 0.3, 1024 * MiB, 8192 * MiB, cores=0.5,
                                cpu_total=k * interval * 0.5, periods=k * 10, throttled=k * 10,
                                gpu={"memory_bytes": 3 * 1024 * MiB, "sm_percent": 0.0 if k < n // 2 else 70.0,
                                     "devices": ["GPU-1"],
                                     "processes": [{"pid": 42, "name": "python", "sm_percent": 0.0}]}),
                workload_record(t, 3, "batch-job", 20.0, (950 if k < n // 3 else 50) * MiB, 1024 * MiB, cores=1.0,
                                oom=0 if k < n // 3 else 1, cpu_total=k * 0.2),
                workload_record(t, 4, HOSTILE, 1.0, 30 * MiB, None, cpu_total=k * 0.01),
            ]
            for j in range(extra):
                recs.append(workload_record(t, 100 + j, "calm-%d" % j, 0.5 + (j % 10), (50 + j % 100) * MiB,
                                            2048 * MiB, cpu_total=k * 0.005))
            events = det.observe(recs) if detect else []
            f.write(b"".join(orjson.dumps(r) + b"\n" for r in recs + events))
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    src = write_stream(str(d / "stream.jsonl"))
    # real records of a recorded v2 tree too (once, two snapshots)
    for snap in ("t0", "t1"):
        out = subprocess.run([sys.executable, "-m", "cgstat", "once", "--host-root",
                              os.path.join(TESTS, "fixtures", "v2-systemd", snap), "--window", "0"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True).stdout
        with open(src, "ab") as f:
            f.write(out)
    out = str(d / "report.html")
    build_report(src, out)
    with open(out, encoding="utf-8") as f:
        return src, out, f.read()


def test_report_content(report):
    src, out, text = report
    assert text.startswith("<!DOCTYPE html>")
    # self-contained: no external resource of any kind
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    assert "http://" not in text and "https://" not in text and "@import" not in text
    # hostile names are data, not markup
    assert "<script>alert" not in text and "\x1b" not in text and "\u202e" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J\\u202e&quot;&#x27;&amp;" in text
    assert text.count("<script>") == 1
    for name in ("leaky-trainer", "input-bound", "batch-job", "tf-training"):
        assert name in text
    # events of the stream are in the report
    for kind in ("memory_growth", "gpu_idle_cpu_bound", "oom_kill", "cpu_throttled", "memory_near_limit"):
        assert kind in text, kind
    assert 'class="ev critical"' in text and 'class="episode"' in text


def test_report_bad_input(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b"hello\nworld\n")
    with pytest.raises(CgstatError) as e:
        build_report(str(p), str(tmp_path / "r.html"))
    assert "not a cgstat" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(CgstatError):
        build_report(str(tmp_path / "missing.jsonl"), str(tmp_path / "r.html"))
    good = write_stream(str(tmp_path / "s.jsonl"), seconds=20)
    with pytest.raises(CgstatError):
        build_report(good, str(tmp_path / "no" / "such" / "dir" / "r.html"))
    # junk lines among good ones are counted, not fatal; .gz input works
    with open(good, "ab") as f:
        f.write(b"{not json\n\xff\xfe\n[1,2]\n")
    with open(good, "rb") as f, gzip.open(str(tmp_path / "s.jsonl.gz"), "wb") as g:
        g.write(f.read())
    build_report(str(tmp_path / "s.jsonl.gz"), str(tmp_path / "r.html"))
    assert "3 lines were not cgstat records" in (tmp_path / "r.html").read_text()


def test_report_bounded_for_a_long_stream_of_many_containers(tmp_path):
    """2 h at 5 s of 60 containers (86k records, 1440 ticks: the grid merges): bounded buckets,
    points per chart, size."""
    src = write_stream(str(tmp_path / "big.jsonl"), seconds=2 * 3600, interval=5.0, extra=56, detect=False)
    t = time.process_time()
    d = read_stream(src)
    read_s = time.process_time() - t
    for w in d.workloads.values():
        assert w.buckets is not None and 0 < len(w.buckets) <= 2 * 500
    out = str(tmp_path / "big.html")
    build_report(src, out)
    size = os.path.getsize(out)
    text = open(out, encoding="utf-8").read()
    assert text.count("<svg") >= 60 * 3
    longest = max(len(m) for m in re.findall(r' d="M[^"]*"', text))
    assert longest < 500 * 16  # at most ~500 points per path
    assert size < 12 * MiB, size
    print("big stream: %d records, %.1f MiB in, report %.2f MiB, %.1f s CPU to read" % (
        sum(1 for _ in open(src, "rb")), os.path.getsize(src) / MiB, size / MiB, read_s))


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium (Debian: apt-get install chromium)")


def run_chromium(args, timeout=120):
    """Headless Chromium with a profile of its own, removed when it ends (2.6 MB a run).

    Its temporary files too: Chromium makes a .org.chromium.Chromium.XXXXXX folder in TMPDIR
    that a helper process of its own may remove only after the browser has exited, or never.
    """
    with tempfile.TemporaryDirectory(prefix="cgstat-chromium-") as profile:
        env = dict(os.environ, TMPDIR=profile)
        return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--disable-extensions", "--disable-dev-shm-usage", "--disable-background-networking",
                               "--disable-component-update", "--user-data-dir=" + profile] + args,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=env)


def test_report_renders_in_headless_chromium(report, tmp_path):
    src, out, text = report
    r = run_chromium(["--dump-dom", "file://" + out])
    dom = r.stdout.decode("utf-8", "replace")
    assert r.returncode == 0 and "</html>" in dom, r.stderr[-2000:]
    # every charted workload has its SVG charts (CPU, memory, IO; GPU where it has GPU figures)
    sections = re.findall(r'<section class="w" id="(w\d+)".*?</section>', dom, re.S)
    assert len(sections) >= 4 + 10
    for sec in re.findall(r'<section class="w".*?</section>', dom, re.S):
        assert sec.count("<svg") >= 2
    gpu_sec = [s for s in re.findall(r'<section class="w".*?</section>', dom, re.S) if "input-bound" in s][0]
    assert gpu_sec.count("<svg") == 5 and "GPU SM %" in gpu_sec
    # events marked on the charts of the workloads they concern
    oom_sec = [s for s in re.findall(r'<section class="w".*?</section>', dom, re.S) if "batch-job" in s][0]
    assert 'class="ev critical" data-kind="oom_kill"' in oom_sec
    leak = [s for s in re.findall(r'<section class="w".*?</section>', dom, re.S) if "leaky-trainer" in s][0]
    assert 'data-kind="memory_growth"' in leak
    # the inline script ran without replacing anything, and no hostile markup became elements
    assert "<script>alert" not in dom
    shot = str(tmp_path / "report.png")
    r = run_chromium(["--screenshot=" + shot, "--window-size=1400,2400", "--hide-scrollbars",
                      "file://" + out])
    assert r.returncode == 0 and os.path.getsize(shot) > 20000, r.stderr[-2000:]
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("CGSTAT_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


# -- the y axis and the summary at every scale ------------------------------------------------

GiB = 1024 * MiB
# read rates from 0.5 B/s to 500 GiB/s (peaks; the write rates a quarter of them), CPU % peaks
_SCALES = [("half-a-byte", 0.5, 0.5), ("three-bytes", 3.0, 0.05), ("under-a-kib", 700.0, 3.0),
           ("mid-479-mib", 479.3 * MiB, 49.0), ("just-under-a-gib", 1023.9 * MiB, 99.9),
           ("huge-500-gib", 500 * GiB, 1500.0)]
_UNITS = {"B": 1, "KiB": 1024, "MiB": MiB, "GiB": GiB, "TiB": 1024 * GiB, "%": 1}


def write_scales(path, seconds=120):
    """Workloads whose figures span 0.5 B/s to 500 GiB/s, one whose CPU and memory are all
    null, and one with a long name and events (for the summary's width)."""
    det = EventDetector(window_s=30)
    with open(path, "wb") as f:
        for k in range(seconds):
            t = END - seconds + k
            wave = 0.5 + 0.5 * (k % 10) / 9  # peaks at exactly the figure
            recs = []
            for i, (name, rd, cpu) in enumerate(_SCALES):
                r = workload_record(t, 200 + i, name, cpu * wave, 100 * MiB + k * MiB, 4096 * MiB)
                r["io"].update(read_bytes_per_second=rd * wave, write_bytes_per_second=rd / 4)
                recs.append(r)
            r = workload_record(t, 300, "nothing-known", 0.0, 0, None)
            r["cpu"]["percent"] = None
            r["memory"].update(working_set_bytes=None, percent=None)
            recs.append(r)
            recs.append(workload_record(t, 301, "a-rather-long-workload-name-" * 3, 99.5, 4000 * MiB, 4096 * MiB,
                                        cores=1.0, oom=k // 30, cpu_total=k * 0.99, periods=k * 10,
                                        throttled=k * 9))
            f.write(b"".join(orjson.dumps(r) + b"\n" for r in recs + det.observe(recs)))
    return path


@pytest.fixture(scope="module")
def scales(tmp_path_factory):
    d = tmp_path_factory.mktemp("scales")
    src = write_scales(str(d / "scales.jsonl"))
    out = str(d / "scales.html")
    build_report(src, out)
    with open(out, encoding="utf-8") as f:
        return out, f.read()


def _advance_widths(path):
    """A TrueType font's advance widths, in ems, by character (the cmap format 4 subtable)."""
    import struct
    with open(path, "rb") as f:
        d = f.read()
    tables = {d[12 + 16 * i:16 + 16 * i]: struct.unpack(">I", d[20 + 16 * i:24 + 16 * i])[0]
              for i in range(struct.unpack(">H", d[4:6])[0])}
    upem = struct.unpack(">H", d[tables[b"head"] + 18:tables[b"head"] + 20])[0]
    n_metrics = struct.unpack(">H", d[tables[b"hhea"] + 34:tables[b"hhea"] + 36])[0]
    hmtx = tables[b"hmtx"]
    cmap = tables[b"cmap"]
    for i in range(struct.unpack(">H", d[cmap + 2:cmap + 4])[0]):
        sub = cmap + struct.unpack(">I", d[cmap + 8 + 8 * i:cmap + 12 + 8 * i])[0]
        if struct.unpack(">H", d[sub:sub + 2])[0] == 4:
            break
    else:
        pytest.skip("%s has no cmap format 4" % path)
    segs = struct.unpack(">H", d[sub + 6:sub + 8])[0] // 2
    at = sub + 14

    def arr(k, fmt="H"):
        return struct.unpack(">%d%s" % (segs, fmt), d[at + (k * 2 * segs) + (2 if k else 0):
                                                     at + (k + 1) * 2 * segs + (2 if k else 0)])
    ends, starts, deltas, offsets = arr(0), arr(1), arr(2, "h"), arr(3)
    ro_at = at + 3 * 2 * segs + 2

    def width(ch):
        c, g = ord(ch), 0
        for k in range(segs):
            if starts[k] <= c <= ends[k]:
                if offsets[k] == 0:
                    g = (c + deltas[k]) & 0xFFFF
                else:
                    a = ro_at + 2 * k + offsets[k] + 2 * (c - starts[k])
                    g = struct.unpack(">H", d[a:a + 2])[0]
                    g = (g + deltas[k]) & 0xFFFF if g else 0
                break
        g = min(g, n_metrics - 1)
        return struct.unpack(">H", d[hmtx + 4 * g:hmtx + 4 * g + 2])[0] / upem
    return width


@pytest.fixture(scope="module")
def label_width():
    """The width of a 10-unit label in the font the page falls to here (fontconfig's sans-serif,
    DejaVu Sans on Debian), from the font file's own metrics."""
    fc = shutil.which("fc-match")
    path = ""
    if fc:
        path = subprocess.run([fc, "-f", "%{file}", "sans-serif"], stdout=subprocess.PIPE).stdout.decode()
    if not path.lower().endswith(".ttf"):
        path = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    if not os.path.exists(path):
        pytest.skip("no TrueType sans-serif font to measure with (Debian: fonts-dejavu-core)")
    width = _advance_widths(path)
    return lambda text: 10.0 * sum(width(c) for c in text)


_TEXT = re.compile(r'<text class="ax(?: y)?" x="([\d.]+)" y="([\d.]+)">([^<:]*)</text>')  # not the times
_LABEL = re.compile(r"^(\d+(?:\.\d+)?)( ?)(%|B|KiB|MiB|GiB|TiB)(/s)?$")


def _charts(text):
    """(workload section's name, chart title, the chart's SVG) of each chart of the report."""
    for name, sec in re.findall(r'<section class="w" id="w\d+" data-name="(\S+)[^"]*">(.*?)</section>', text, re.S):
        for title, svg in re.findall(r"<figcaption>(.*?) <span.*?(<svg.*?</svg>)", sec, re.S):
            yield name, title, svg


def test_report_axis_labels_fit_and_tell_the_value(scales, label_width):
    """Every y label of every chart, 0.5 B/s to 500 GiB/s, starts inside the chart (its width
    from the font's metrics) and its figure is where it is drawn: no label cut to "79.3 MiB/s",
    none rounded to "0", the top at or above the largest figure."""
    out, text = scales
    seen = set()
    for name, title, svg in _charts(text):
        if name == "nothing-known" and title != "Block IO":
            continue
        labels = [(float(x), float(y), label) for x, y, label in _TEXT.findall(svg)]
        assert len(labels) >= 3, (name, title, svg[:300])
        values = []
        for x, y, label in labels:
            assert x - label_width(label) >= 0.0, (name, title, label, x, label_width(label))
            m = _LABEL.match(label)
            assert m, (name, title, label)
            values.append((float(m.group(1)) * _UNITS[m.group(3)], y))
            seen.add(label)
        assert len({label for _, _, label in labels}) == len(labels), (name, title, labels)
        (v0, y0), top = values[0], values[-1]
        assert v0 == 0 and all(v > 0 for v, _ in values[1:]), (name, title, labels)
        for v, y in values:  # labels and lines on one linear scale: y at 0 minus v/top of the height
            assert abs((y0 - y) - (y0 - top[1]) * v / top[0]) < 0.11, (name, title, labels)
    # the figures' own peaks are labelled as such, or below a round top
    for want in ("0.5 B/s", "3 B/s", "800 B/s", "500 MiB/s", "1250 MiB/s", "500 GiB/s",
                 "0.5%", "0.05%", "100%", "1500%"):
        assert want in seen, (want, sorted(seen))


def test_report_null_series_says_no_data(scales):
    out, text = scales
    charts = {title: svg for name, title, svg in _charts(text) if name == "nothing-known"}
    for title in ("CPU % (100 = one core)", "Memory working set"):
        svg = charts[title]
        assert ">no data</text>" in svg and not _TEXT.search(svg), svg
        assert "<path" not in svg and "<polygon" not in svg
    assert ">no data<" not in charts["Block IO"]
    # tiny figures in the summary are not written as 0
    row = re.search(r'<tr data-name="half-a-byte.*?</tr>', text).group(0)
    assert ">0.5 %<" in row and ">0.38 B/s<" in row, row
    row = re.search(r'<tr data-name="three-bytes.*?</tr>', text).group(0)
    assert ">0.05 %<" in row, row


# Run in the page after it is laid out: each chart text's extent in its SVG's units and the
# summary's scrolling width, written into the page for --dump-dom to carry out.
_MEASURE = """<script>(function(){var texts=[];[].forEach.call(document.querySelectorAll('svg.chart text'),
function(t){var b=t.getBBox();texts.push([b.x,b.x+b.width,t.textContent]);});var s=document.querySelector('.scroll');
var p=document.createElement('pre');p.id='measured';p.textContent=JSON.stringify({texts:texts,
scroll:s.scrollWidth,client:s.clientWidth,window:window.innerWidth});document.body.appendChild(p);})();</script>"""


def test_report_fits_in_chromium_at_1400_pixels(scales, tmp_path):
    """Laid out by real Chromium 1,400 pixels wide, with figures from 0.5 B/s to 500 GiB/s and
    a long name: every label of every chart lies inside its chart, and the summary needs no
    sideways scrolling. CGSTAT_REPORT_SCALES_SCREENSHOT=FILE.png keeps a screenshot to look at."""
    out, text = scales
    measured = str(tmp_path / "measured.html")
    with open(measured, "w", encoding="utf-8") as f:
        f.write(text.replace("</body>", _MEASURE + "</body>"))
    r = run_chromium(["--window-size=1400,3000", "--dump-dom", "file://" + measured])
    m = re.search(r'<pre id="measured">(.*?)</pre>', r.stdout.decode("utf-8", "replace"))
    assert r.returncode == 0 and m, r.stderr[-2000:]
    got = orjson.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<"))
    assert got["window"] == 1400
    assert len(got["texts"]) >= 7 * 3 * 4
    for x0, x1, label in got["texts"]:
        assert 0.0 <= x0 and x1 <= 640.0, (label, x0, x1)
    assert got["scroll"] <= got["client"], got
    shot = str(tmp_path / "scales.png")
    r = run_chromium(["--screenshot=" + shot, "--window-size=1400,2400", "--hide-scrollbars", "file://" + out])
    assert r.returncode == 0 and os.path.getsize(shot) > 20000, r.stderr[-2000:]
    keep = os.environ.get("CGSTAT_REPORT_SCALES_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
