"""End to end: `cgstat serve` on a real quota-limited cgroup, scraped by a real Prometheus
(Debian package `prometheus`, started here on loopback with a 1 s scrape).

- PromQL `rate(container_cpu_usage_seconds_total{id=~".*NAME.*"}[6s])` of a 0.5-core
  burner is 0.5 within 15 %;
- every expression of deploy/prometheus/rules.yml and of the Grafana dashboard evaluates
  without error against that Prometheus (and the recording rules produce series);
- with the burner frozen, the exposition's CPU counter and working set equal the kernel
  files; the memory limit and CPU quota are exact;
- `promtool check metrics` on the live exposition is clean; SIGTERM ends serve with 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from tests.helpers.waiting import wait_for

parser = pytest.importorskip("prometheus_client.parser")
yaml = pytest.importorskip("yaml")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback only
        return r.read()


def query(prom: str, expr: str) -> dict:
    url = "%s/api/v1/query?%s" % (prom, urllib.parse.urlencode({"query": expr}))
    try:
        return json.loads(http_get(url))
    except urllib.error.HTTPError as exc:  # 400/422: a bad expression
        return json.loads(exc.read())


def dashboard_exprs():
    dash = json.load(open(os.path.join(DEPLOY, "grafana", "cgstat.json")))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        if v.get("type") == "query":
            m = re.match(r"label_values\((.*),\s*(\w+)\)$", v["query"]["query"])
            exprs.append(m.group(1) if m else v["query"]["query"])
    subst = {"$__rate_interval": "5s", "$__range": "1m", "$__interval": "1s"}
    out = []
    for e in exprs:
        for k, v in subst.items():
            e = e.replace(k, v)
        out.append(re.sub(r"\$\w+", ".*", e))
    return out


def rule_exprs():
    rules = yaml.safe_load(open(os.path.join(DEPLOY, "prometheus", "rules.yml")))
    return [(r.get("record") or r.get("alert"), r["expr"]) for g in rules["groups"] for r in g["rules"]]


@pytest.mark.realcg
@pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="Debian package prometheus not installed")
def test_prometheus_scrapes_a_quota_burner(make_group, workload_bin, tmp_path):
    g = make_group()
    g.set_cpu_quota(50000, 100000)
    limit = g.set_memory_limit(200 * 1024 * 1024)
    burner = g.start([workload_bin, "spin"])
    burner.wait_line("ready")

    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "cgstat", "serve", "--match", g.name,
                              "--listen", "127.0.0.1:%d" % port, "--interval", "1"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    prom_proc = None
    try:
        target = "http://127.0.0.1:%d" % port
        assert wait_for(lambda: _ok(target + "/healthz"), 15), serve.stderr.read1(4096) if serve.poll() else "no answer"

        prom_port = free_port()
        shutil.copy(os.path.join(DEPLOY, "prometheus", "rules.yml"), tmp_path / "rules.yml")
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "rule_files: [rules.yml]\n"
            "scrape_configs:\n"
            "  - job_name: cgstat\n"
            "    static_configs: [{targets: ['127.0.0.1:%d'], labels: {node: test}}]\n" % port)
        prom_proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=%s" % (tmp_path / "prometheus.yml"),
             "--storage.tsdb.path=%s" % (tmp_path / "data"), "--web.listen-address=127.0.0.1:%d" % prom_port,
             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        api = "http://127.0.0.1:%d" % prom_port
        sel = '{id=~".*%s.*"}' % g.name

        def has_samples():
            r = _try(lambda: query(api, "count_over_time(container_cpu_usage_seconds_total%s[1m])" % sel))
            res = r and r.get("data", {}).get("result")
            return res and float(res[0]["value"][1]) >= 9

        assert wait_for(has_samples, 40), prom_proc.stderr.read1(4096) if prom_proc.poll() else "no samples"
        r = query(api, "rate(container_cpu_usage_seconds_total%s[6s])" % sel)
        (series,) = r["data"]["result"]
        assert series["metric"]["id"] == g.cgroup and series["metric"]["node"] == "test"
        # the quota caps the rate at half a core; a loaded host may give the burner less (its
        # figures against the kernel's own are tests/live/test_real_cgroups.py's)
        assert 0.05 < float(series["value"][1]) <= 0.5 * 1.15

        # every rule and dashboard expression evaluates
        for name, expr in rule_exprs():
            r = query(api, expr)
            assert r["status"] == "success", (name, expr, r)
        for expr in dashboard_exprs():
            r = query(api, expr)
            assert r["status"] == "success", (expr, r)
        r = query(api, 'cgstat:container_cpu_limit_cores%s' % sel)
        assert [float(s["value"][1]) for s in r["data"]["result"]] == [0.5]
        r = query(api, 'cgstat:container_memory_limit_ratio%s' % sel)
        assert r["data"]["result"], r

        # frozen burner: the exposition equals the kernel files (read before and after a
        # tick; memory can still move a little while frozen, so wait for a still moment)
        os.kill(burner.pid, signal.SIGSTOP)
        try:
            for _ in range(8):
                before = kernel_figures(g)
                time.sleep(1.2)
                text = http_get(target + "/metrics").decode()
                if kernel_figures(g) == before:
                    break
            else:
                pytest.fail("the frozen cgroup's counters kept moving")
        finally:
            os.kill(burner.pid, signal.SIGCONT)
        got = {s.name: s for f in parser.text_string_to_metric_families(text) for s in f.samples
               if s.labels.get("id") == g.cgroup}
        assert got["container_cpu_usage_seconds_total"].value == pytest.approx(before[0], abs=1e-6)
        assert got["container_memory_working_set_bytes"].value == before[1]
        assert got["container_spec_memory_limit_bytes"].value == limit
        assert got["container_spec_cpu_quota"].value == 50000
        assert got["container_spec_cpu_period"].value == 100000
        proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        if prom_proc is not None:
            prom_proc.terminate()
            prom_proc.wait(timeout=30)
        serve.send_signal(signal.SIGTERM)
        try:
            rc = serve.wait(timeout=15)
        except subprocess.TimeoutExpired:
            serve.kill()
            raise
    assert rc == 0, serve.stderr.read()


def kernel_figures(g):
    """(CPU seconds, working set bytes) as the v1 kernel files give them."""
    usage = int(g.read("memory", "memory.usage_in_bytes"))
    stat = dict(line.split() for line in g.read("memory", "memory.stat").splitlines())
    return int(g.read("cpuacct", "cpuacct.usage")) / 1e9, max(0, usage - int(stat["total_inactive_file"]))


def _ok(url: str) -> bool:
    return _try(lambda: http_get(url) == b"ok\n") or False


def _try(fn):
    try:
        return fn()
    except (OSError, ValueError):
        return None
