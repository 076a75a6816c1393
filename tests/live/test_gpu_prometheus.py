"""Dashboard-shaped queries in a real Prometheus against cgstat serve on the NVML double."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.parse

import pytest

from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT
from tests.helpers.waiting import wait_for
from tests.live.test_serve_prometheus import free_port, http_get, query
from tests.unit.test_gpu_prometheus import U0, U1, scenario

PROMETHEUS = shutil.which("prometheus")


def _query(api: str, expr: str) -> list:
    r = query(api, expr)
    assert r["status"] == "success", (expr, r)
    return r["data"]["result"]


def _labels(api: str, label: str, match: str) -> list:
    return json.loads(http_get("%s/api/v1/label/%s/values?%s" % (
        api, label, urllib.parse.urlencode({"match[]": match}))))["data"]


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian package prometheus not installed")
def test_dashboard_shaped_queries_in_a_real_prometheus(tmp_path):
    path = D.write_scenario(tmp_path / "s.txt", scenario())
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "cgstat", "serve", "--match", "^/$", "--listen",
                              "127.0.0.1:%d" % port, "--interval", "1"], env=D.env(path), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    prom_proc = None
    try:
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: cgstat\n"
            "    static_configs: [{targets: ['127.0.0.1:%d']}]\n" % port)
        prom_port = free_port()
        prom_proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=%s" % (tmp_path / "prometheus.yml"),
             "--storage.tsdb.path=%s" % (tmp_path / "data"), "--web.listen-address=127.0.0.1:%d" % prom_port,
             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        api = "http://127.0.0.1:%d" % prom_port
        def scraped():
            try:
                return query(api, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")["data"]["result"]
            except (OSError, ValueError, KeyError):  # Prometheus still starting
                return None

        assert wait_for(scraped, 60), "no DCGM series scraped"
        # the dashboard's variables: label_values(DCGM_FI_DEV_FB_FREE, Hostname), then gpu
        (host,) = _labels(api, "Hostname", "DCGM_FI_DEV_FB_FREE")
        assert sorted(_labels(api, "gpu", 'DCGM_FI_DEV_FB_FREE{Hostname=~"%s"}' % host)) == ["0", "1"]
        sel = '{Hostname=~"%s", gpu=~"0|1"}' % host

        def values(expr, *keys):
            return sorted(((tuple(r["metric"].get(k) for k in keys), float(r["value"][1])) for r in _query(api, expr)),
                          key=lambda kv: [k or "" for k in kv[0]])

        assert values("max(DCGM_FI_DEV_GPU_TEMP%s) by (Hostname, gpu, uuid)" % sel, "gpu", "uuid") == [
            (("0", U0), 51.0), (("1", U1), 44.0)]
        assert values("avg(DCGM_FI_DEV_GPU_TEMP%s)" % sel) == [((), 47.5)]
        assert values("max(DCGM_FI_DEV_POWER_USAGE%s) by (Hostname, gpu, uuid)" % sel, "gpu") == [
            (("0",), 412.0), (("1",), 180.0)]
        assert values("sum(max(DCGM_FI_DEV_POWER_USAGE%s) by (gpu))" % sel) == [((), 592.0)]
        assert values("max(DCGM_FI_DEV_SM_CLOCK%s * 1000000) by (Hostname, UUID, gpu)" % sel, "UUID") == [
            ((U0,), 1755e6), ((U1,), 1980e6)]
        shape = "max(%s%s) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)"
        assert values(shape % ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", sel), "gpu", "GPU_I_ID", "GPU_I_PROFILE") == [
            (("0", None, None), pytest.approx(0.91)), (("1", None, None), pytest.approx(0.5)),
            (("1", "2", "3g.71gb"), pytest.approx(0.4))]
        assert values(shape % ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", sel), "gpu", "GPU_I_ID") == [
            (("0", None), pytest.approx(0.33)), (("1", None), pytest.approx(0.10)), (("1", "2"), pytest.approx(0.2))]
        assert values(shape % ("DCGM_FI_DEV_FB_USED", sel), "gpu", "GPU_I_ID") == [
            (("0", None), 9216.0), (("1", None), 3072.0), (("1", "2"), 2048.0)]
        # an alert's shape: a GPU whose last XID is not 0
        assert values("DCGM_FI_DEV_XID_ERRORS%s > 0" % sel, "gpu") == [(("0",), 13.0)]
    finally:
        for proc in (p for p in (prom_proc, serve) if p is not None):
            _stop(proc)

