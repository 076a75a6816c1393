"""deploy/: promtool check config / check rules / test rules, the Kubernetes manifest
against the Kubernetes API schemas (kubernetes-validate, offline) and structurally, and
the Grafana dashboard checked structurally (PyYAML, json)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

yaml = pytest.importorskip("yaml")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROM_DIR = os.path.join(REPO, "deploy", "prometheus")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
PORT = 17923


def promtool(*args, cwd=PROM_DIR):
    proc = subprocess.run([PROMTOOL] + list(args), cwd=cwd, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@needs_promtool
def test_check_config(tmp_path):
    rc, out = promtool("check", "config", "prometheus.yml")
    if rc != 0 and "field kubernetes_sd_configs not found" in out:
        # Debian builds Prometheus without Kubernetes discovery: check the rest with it,
        # the Kubernetes job structurally below.
        config = yaml.safe_load(open(os.path.join(PROM_DIR, "prometheus.yml")))
        config["scrape_configs"] = [j for j in config["scrape_configs"] if "kubernetes_sd_configs" not in j]
        shutil.copy(os.path.join(PROM_DIR, "rules.yml"), tmp_path / "rules.yml")
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        rc, out = promtool("check", "config", "prometheus.yml", cwd=str(tmp_path))
    assert rc == 0, out


def test_kubernetes_scrape_job_matches_the_daemonset():
    config = yaml.safe_load(open(os.path.join(PROM_DIR, "prometheus.yml")))
    (job,) = [j for j in config["scrape_configs"] if "kubernetes_sd_configs" in j]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    keeps = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    assert keeps[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)] == "cgstat"
    assert keeps[("__meta_kubernetes_pod_annotation_prometheus_io_scrape",)] == "true"
    assert any(r.get("target_label") == "node" for r in job["relabel_configs"])
    (static,) = [j for j in config["scrape_configs"] if "static_configs" in j]
    assert static["static_configs"][0]["targets"] == ["localhost:%d" % PORT]
    assert "rules.yml" in config["rule_files"]


@needs_promtool
def test_check_rules_and_unit_tests():
    rc, out = promtool("check", "rules", "rules.yml")
    assert rc == 0, out
    rc, out = promtool("test", "rules", "rules.test.yml")
    assert rc == 0, out
    rules = yaml.safe_load(open(os.path.join(PROM_DIR, "rules.yml")))
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == {"ContainerMemoryNearLimit", "ContainerOOMKilled", "ContainerCPUThrottled",
                      "ContainerGPUMemoryGrowing", "ContainerGPUIdleWhileAllocated", "ContainerGPUInputBound"}
    tested = yaml.safe_load(open(os.path.join(PROM_DIR, "rules.test.yml")))
    fired = {t["alertname"] for test in tested["tests"] for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert fired == alerts  # every alert has a test in which it fires


def test_daemonset_manifest():
    docs = [d for d in yaml.safe_load_all(open(os.path.join(REPO, "deploy", "kubernetes", "cgstat.yaml"))) if d]
    kinds = {d["kind"]: d for d in docs}
    assert {"DaemonSet", "Service", "ServiceAccount", "Namespace", "NetworkPolicy"} <= set(kinds)
    ds = kinds["DaemonSet"]
    assert ds["apiVersion"] == "apps/v1"
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert spec["hostPID"] is True and not spec.get("hostNetwork")
    assert spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    args = c["args"]
    assert args[:2] == ["--host-root", "/host"] and "serve" in args
    assert args[args.index("--listen") + 1] == "0.0.0.0:%d" % PORT
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["DAC_READ_SEARCH", "SYSLOG"]}
    assert not sc.get("privileged")
    assert {"requests", "limits"} <= set(c["resources"])
    assert c["ports"][0]["containerPort"] == PORT
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    for path in ("/host/sys", "/host/proc", "/host/run/containerd", "/host/var/log/pods"):
        assert mounts[path]["readOnly"] is True, path
    assert all(m.get("readOnly") for p, m in mounts.items() if p.startswith("/host"))
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert all(m["name"] in volumes for m in c["volumeMounts"])
    assert volumes["sys"]["hostPath"]["path"] == "/sys" and volumes["proc"]["hostPath"]["path"] == "/proc"
    # the kernel log (OOM reports), read-only, as cAdvisor mounts it
    assert mounts["/dev/kmsg"]["readOnly"] is True
    assert volumes[mounts["/dev/kmsg"]["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    ann = ds["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == str(PORT)
    svc = kinds["Service"]
    assert svc["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["port"] == PORT
    np = kinds["NetworkPolicy"]["spec"]
    assert np["ingress"][0]["ports"] == [{"port": PORT, "protocol": "TCP"}]


# The oldest Kubernetes release still in use on the clusters cgstat targets; the manifest
# must be valid there (and so in every later one: these API groups are stable).
K8S_VERSION = "1.27"


def test_manifest_passes_the_kubernetes_api_schemas(monkeypatch):
    """deploy/kubernetes/cgstat.yaml against the Kubernetes API's own OpenAPI schemas, which
    kubernetes-validate ships (strict: an unknown or misspelt field is an error). Offline:
    any connection attempt fails the test."""
    kv = pytest.importorskip("kubernetes_validate")
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("kubernetes-validate tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    docs = [d for d in yaml.safe_load_all(open(os.path.join(REPO, "deploy", "kubernetes", "cgstat.yaml"))) if d]
    assert len(docs) >= 5
    for doc in docs:
        try:
            kv.validate(doc, K8S_VERSION, strict=True)
        except kv.ValidationError as exc:
            raise AssertionError(f"{doc['kind']} {doc['metadata'].get('name')}: {exc.message} at "
                                 f"{'.'.join(str(p) for p in exc.path)}") from None
    # the check is real: a misspelt field and a wrong type are refused
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    bad = json.loads(json.dumps(ds))
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, K8S_VERSION, strict=True)
    bad = json.loads(json.dumps(ds))
    bad["spec"]["template"]["spec"]["hostPID"] = "yes"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, K8S_VERSION, strict=True)


def test_grafana_dashboard():
    dash = json.load(open(os.path.join(REPO, "deploy", "grafana", "cgstat.json")))
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"node", "namespace", "name", "datasource"} <= names
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for needed in ("container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
                   "container_spec_memory_limit_bytes", "container_fs_reads_bytes_total",
                   "cgstat_container_gpu_memory_bytes", "cgstat_container_gpu_sm_percent",
                   "container_oom_events_total", "container_cpu_cfs_throttled_periods_total"):
        assert needed in exprs, needed
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
