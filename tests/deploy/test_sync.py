"""The kustomize and Helm trees hold byte-identical copies of the monitoring bundle (deploy/sync-monitoring)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .conftest import DEPLOY, ROOT, Doc, find

RULE_SOURCES = sorted((ROOT / "deploy/prometheus/kubernetes").glob("*.yaml"))
DASHBOARD_SOURCES = sorted((ROOT / "grafana/dashboards").glob("*.json"))


def test_sources_exist() -> None:
    assert RULE_SOURCES, "deploy/prometheus/kubernetes/*.yaml (the generated PrometheusRule) is missing"
    assert DASHBOARD_SOURCES, "grafana/dashboards/*.json is missing"


def test_copies_are_fresh() -> None:
    proc = subprocess.run([sys.executable, str(DEPLOY / "sync-monitoring"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, f"stale copies, run deploy/sync-monitoring:\n{proc.stderr}"


def _source_rule() -> Doc:
    rules = [yaml.safe_load(p.read_text()) for p in RULE_SOURCES]
    assert len(rules) == 1 and rules[0]["kind"] == "PrometheusRule"
    rule: Doc = rules[0]
    return rule


def _dashboards() -> dict[str, Any]:
    return {p.name: json.loads(p.read_text()) for p in DASHBOARD_SOURCES}


def test_kustomize_objects_carry_the_bundle(kustomize: Callable[[str], list[Doc]]) -> None:
    docs = kustomize("base")
    rule = find(docs, "PrometheusRule")
    assert rule["spec"] == _source_rule()["spec"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    cm = find(docs, "ConfigMap", "vllm-headroom-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {k: json.loads(v) for k, v in cm["data"].items()} == _dashboards()


def test_helm_objects_carry_the_bundle(helm: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    from .test_helm import objects

    docs = objects(helm({}))
    assert find(docs, "PrometheusRule")["spec"] == _source_rule()["spec"]
    cm = find(docs, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {k: json.loads(v) for k, v in cm["data"].items()} == _dashboards()


def test_sync_detects_a_stale_copy(tmp_path: Path) -> None:
    """--check fails on an edited copy (run on a scratch clone of the files it reads and writes)."""
    for rel in ("deploy/sync-monitoring", "deploy/prometheus/kubernetes", "grafana/dashboards",
                "deploy/kubernetes/components/monitoring", "deploy/helm/vllm-headroom/files"):
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
        else:
            dst.write_bytes(src.read_bytes())
    script = [sys.executable, str(tmp_path / "deploy/sync-monitoring")]
    assert subprocess.run([*script, "--check"], capture_output=True).returncode == 0
    copy = next((tmp_path / "deploy/helm/vllm-headroom/files/dashboards").glob("*.json"))
    copy.write_text(copy.read_text() + "\n")
    proc = subprocess.run([*script, "--check"], capture_output=True, text=True)
    assert proc.returncode == 1 and copy.name in proc.stderr
    assert subprocess.run(script, capture_output=True).returncode == 0
    assert subprocess.run([*script, "--check"], capture_output=True).returncode == 0
