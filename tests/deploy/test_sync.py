"""The kustomize and Helm trees carry the monitoring bundle written by the one generator (`make generate`)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from grafana import generate
from grafana.config import Config

from .conftest import DEPLOY, MONITORING, ROOT, Doc, find

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
    copy = tmp_path / generate.HELM_FILES / "dashboards" / "vllm-kv-admission.json.tpl"
    copy.write_text(copy.read_text() + "\n")
    leftover = tmp_path / generate.KUSTOMIZE / "dashboards" / "old.json"
    leftover.write_text("{}")
    assert generate.stale(tmp_path) == sorted([str(copy.relative_to(tmp_path)), str(leftover.relative_to(tmp_path))])
    assert generate.main(["--check", "--root", str(tmp_path)]) == 1
    generate.write(tmp_path)
    assert generate.stale(tmp_path) == [] and not leftover.exists()


def test_kustomize_objects_carry_the_bundle(kustomize: Callable[[str], list[Doc]]) -> None:
    docs = kustomize(MONITORING)
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


# A non-default value for every Config field the chart sets (grafana.generate.HELM_KNOBS): (chart value, Config
# value). Nasty on purpose: quotes, a backslash and HTML characters in strings, durations under a minute, compound
# and fractional-minute ones.
SITE = {
    "full_usage": (0.9, 0.9),
    "profile_quantile": (0.95, 0.95),
    "profile_window": ("10m", "10m"),
    "runbook_url": ('https://wiki.example/run"book\\<x>&y', 'https://wiki.example/run"book\\<x>&y'),
    "vllm_selector": ('namespace=~"llm-.*"', 'namespace=~"llm-.*"'),
    "sidecar_selector": ('job="sidecars",team!~"a|b"', 'job="sidecars",team!~"a|b"'),
    "preemption_ratio": (0.25, 0.25),
    "storm_min_preemptions": (12, 12),
    "config_interval": ("90s", "90s"),
    "scrape_gap": ("3m", "3m"),
    "startup_limit": ("45s", "45s"),
    "target_down_after": ("90s", "90s"),
    "vllm_not_scraped_after": ("25m", "25m"),
}
# Config fields that are no chart value: the label set every join keeps (structural; labels absent on a series
# are simply empty) and per-alert `for:` overrides used by the tests against a live Prometheus.
NOT_VALUES = {"identity", "for_"}


def _values(site: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    values: dict[str, Any] = {"monitoring": {"install": True}}
    for knob in generate.HELM_KNOBS:
        if knob.field in site:
            *path, leaf = knob.value.split(".")
            node = values
            for key in path:
                node = node.setdefault(key, {})
            node[leaf] = site[knob.field][0]
    return values


def test_every_site_setting_is_a_chart_value() -> None:
    """A Config field the rules or dashboards depend on is a chart value (HELM_KNOBS), or deliberately not."""
    fields = {f.name for f in dataclasses.fields(Config)}
    assert {k.field for k in generate.HELM_KNOBS} == fields - NOT_VALUES == set(SITE)


@pytest.mark.parametrize("changed", ["all", *SITE])
def test_helm_values_reach_the_prometheusrule(helm: Helm, changed: str) -> None:
    """Every site setting is templated into the chart's rules exactly as the generator writes it for that Config,
    one at a time and all together (an empty vllmSelector and a set one take different copies)."""
    from grafana.rules import prometheus_rule

    from .test_helm import objects

    site = SITE if changed == "all" else {changed: SITE[changed]}
    out = helm(_values(site))
    assert out["schema_error"] is None and out["render_error"] is None, out
    cfg = dataclasses.replace(Config(), **{field: v for field, (_, v) in site.items()})
    got = find(objects(out), "PrometheusRule")["spec"]
    assert got == prometheus_rule(cfg)["spec"]
    assert got != _source_rule()["spec"]


@pytest.mark.parametrize("changed", ["all", "full_usage", "preemption_ratio", "runbook_url"])
def test_helm_values_reach_the_dashboards(helm: Helm, changed: str) -> None:
    """The dashboards ConfigMap carries the chart's thresholds and runbook URL: valid JSON for any value, equal to
    the generator's dashboards for that Config; with default values byte for byte the plain grafana/dashboards."""
    from grafana.dashboards import dashboards

    from .test_helm import objects

    site = SITE if changed == "all" else {changed: SITE[changed]}
    cm = find(objects(helm(_values(site))), "ConfigMap")
    got = {k: json.loads(v) for k, v in cm["data"].items()}
    cfg = dataclasses.replace(Config(), **{field: v for field, (_, v) in site.items()})
    assert got == {f"{uid}.json": d for uid, d in dashboards(cfg).items()}
    assert got != _dashboards()
    if "full_usage" in site:
        steps = [s["value"] for p in got["vllm-kv-admission.json"]["panels"]
                 for s in p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])]
        assert 0.9 in steps and 0.8 not in steps
    default = find(objects(helm({"monitoring": {"install": True}})), "ConfigMap")["data"]
    assert default == {p.name: p.read_text() for p in sorted((ROOT / "grafana/dashboards").glob("*.json"))}


def test_kustomize_runbook_base_url_is_one_patch(tools: Any, tmp_path: Path) -> None:
    """An overlay patches the PrometheusRule's runbook annotation and adds the shipped replacement: every alert's
    runbook_url moves to the new base, its #anchor kept; recording rules stay without annotations."""
    url = "https://wiki.example/vllm/runbook"
    shutil.copy(ROOT / generate.RUNBOOK_REPLACEMENT, tmp_path / "runbook-url.yaml")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(ROOT / "deploy/kubernetes" / MONITORING, tmp_path)],
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
    assert urls != [r["annotations"]["runbook_url"] for g in _source_rule()["spec"]["groups"] for r in g["rules"]
                    if "alert" in r]
