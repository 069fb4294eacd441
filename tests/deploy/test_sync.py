"""The kustomize and Helm trees carry the monitoring bundle written by the one generator (`make generate`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from grafana import generate
from grafana.config import Config

from .conftest import DEPLOY, ROOT, Doc, find

Helm = Callable[..., dict[str, Any]]


def _source_rule() -> Doc:
    rule: Doc = yaml.safe_load((ROOT / generate.PROMETHEUS_RULE).read_text())
    assert rule["kind"] == "PrometheusRule"
    return rule


def _dashboards() -> dict[str, Any]:
    return {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "grafana/dashboards").glob("*.json"))}


def test_every_generated_copy_is_fresh() -> None:
    proc = subprocess.run([sys.executable, "-m", "grafana.generate", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"stale generated files, run `make generate`:\n{proc.stderr}"


def test_the_old_sync_command_runs_the_generator() -> None:
    proc = subprocess.run([str(DEPLOY / "sync-monitoring"), "--check"], capture_output=True, text=True, timeout=300,
                          env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


def test_check_detects_a_stale_and_a_leftover_copy(tmp_path: Path) -> None:
    """--check fails on an edited Helm copy and on a file the generator no longer writes; a write fixes both."""
    for rel in generate.outputs():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert generate.stale(tmp_path) == []
    copy = tmp_path / generate.HELM_FILES / "dashboards" / "vllm-kv-admission.json"
    copy.write_text(copy.read_text() + "\n")
    leftover = tmp_path / generate.KUSTOMIZE / "dashboards" / "old.json"
    leftover.write_text("{}")
    assert generate.stale(tmp_path) == sorted([str(copy.relative_to(tmp_path)), str(leftover.relative_to(tmp_path))])
    assert generate.main(["--check", "--root", str(tmp_path)]) == 1
    generate.write(tmp_path)
    assert generate.stale(tmp_path) == [] and not leftover.exists()


def test_kustomize_objects_carry_the_bundle(kustomize: Callable[[str], list[Doc]]) -> None:
    docs = kustomize("base")
    rule = find(docs, "PrometheusRule")
    assert rule["spec"] == _source_rule()["spec"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    cm = find(docs, "ConfigMap", "vllm-headroom-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {k: json.loads(v) for k, v in cm["data"].items()} == _dashboards()


def test_helm_objects_carry_the_bundle(helm: Helm) -> None:
    from .test_helm import objects

    docs = objects(helm({"monitoring": {"install": True}}))
    assert find(docs, "PrometheusRule")["spec"] == _source_rule()["spec"]
    cm = find(docs, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {k: json.loads(v) for k, v in cm["data"].items()} == _dashboards()


def test_helm_values_reach_the_prometheusrule(helm: Helm) -> None:
    """Thresholds and the runbook base URL are templated into the chart's rules, not a frozen copy."""
    from grafana.rules import prometheus_rule

    from .test_helm import objects

    url = "https://wiki.example/vllm/runbook"
    docs = objects(helm({"monitoring": {"install": True}, "thresholds": {"fullUsage": 0.9},
                         "prometheusRule": {"runbookBaseUrl": url}}))
    want = prometheus_rule(Config(full_usage=0.9, runbook_url=url))["spec"]
    got = find(docs, "PrometheusRule")["spec"]
    assert got == want
    assert got != _source_rule()["spec"]


def test_kustomize_runbook_base_url_is_one_patch(tools: Any, tmp_path: Path) -> None:
    """An overlay patches the PrometheusRule's runbook annotation and adds the shipped replacement: every alert's
    runbook_url moves to the new base, its #anchor kept; recording rules stay without annotations."""
    url = "https://wiki.example/vllm/runbook"
    shutil.copy(ROOT / generate.RUNBOOK_REPLACEMENT, tmp_path / "runbook-url.yaml")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(ROOT / "deploy/kubernetes/overlays/podmonitor", tmp_path)],
        "patches": [{"target": {"kind": "PrometheusRule", "name": "vllm-headroom"}, "patch": yaml.safe_dump([
            {"op": "replace", "path": "/metadata/annotations/vllm-headroom~1runbook-base-url", "value": url}])}],
        "replacements": [{"path": "runbook-url.yaml"}],
    }))
    proc = subprocess.run([tools.bin("kubectl"), "kustomize", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    rule = find([d for d in yaml.safe_load_all(proc.stdout) if d], "PrometheusRule")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    urls = [r["annotations"]["runbook_url"] for r in rules if "alert" in r]
    assert urls and all(u.startswith(url + "#vllm") for u in urls), urls
    assert not [r for r in rules if "record" in r and "annotations" in r]
    assert urls != [r["annotations"]["runbook_url"] for r in _source_rule()["spec"]["groups"][1]["rules"]]
