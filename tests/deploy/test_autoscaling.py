"""deploy/autoscaling (issue 24 item 4): scalers on the replica signal, validated against the real schemas.

KEDA's ScaledObjects against KEDA 2.16.1's CRD models (cloudcoil, unknown fields refused); their trigger metadata,
which the CRD leaves a free string map, against the parameters KEDA's scalers declare (`keda:"name=..."` tags of
pkg/scalers/prometheus_scaler.go @v2.16.1 and metrics_api_scaler.go @v2.19.0, the first release with
aggregateFromKubeServiceEndpoints); the HPA with kubernetes-validate --strict; prometheus-adapter's config against its
config types (pkg/config/config.go); every query parsed as PromQL, and every series it names one that the sidecar
exports (the golden copies of our /metrics) or that the rules record.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import promql_parser
import pytest
import yaml

from .conftest import DEPLOY, Doc, Tools, load_all

AUTOSCALING = DEPLOY / "autoscaling"
KEDA = [AUTOSCALING / "keda-scaledobject.yaml", AUTOSCALING / "keda-scaledobject-metrics-api.yaml"]
RULES = DEPLOY / "prometheus" / "vllm-headroom-rules.yaml"
SIGNAL = "vllm_headroom_replicas_needed"
RULE = "model_name:vllm_headroom_replicas_needed:sum"

# (required, optional) trigger metadata of each scaler, from its metadata struct's `keda:"name=..."` tags.
TRIGGER_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "prometheus": ({"serverAddress", "query", "threshold"},
                   {"queryParameters", "activationThreshold", "namespace", "customHeaders", "ignoreNullValues",
                    "unsafeSsl", "awsRegion"}),
    "metrics-api": ({"url", "valueLocation"},
                    {"targetValue", "activationTargetValue", "format", "unsafeSsl",
                     "aggregateFromKubeServiceEndpoints", "aggregationType"}),
}
ENUMS = {"format": {"prometheus", "json", "xml", "yaml"}, "aggregationType": {"average", "sum", "max", "min"}}
NUMBERS = {"threshold", "activationThreshold", "targetValue", "activationTargetValue"}
BOOLEANS = {"ignoreNullValues", "unsafeSsl", "aggregateFromKubeServiceEndpoints"}
# prometheus-adapter's DiscoveryRule and its parts (yaml tags).
ADAPTER_RULE = {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery", "labelValueReplacements"}
ADAPTER_RESOURCES = {"template", "overrides"}
ADAPTER_NAME = {"matches", "as"}


def keda_check(tools: Tools, docs: list[Doc], tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "keda.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    proc = subprocess.run([tools.bin("python"), str(Path(__file__).with_name("recipes_checks.py")), "keda", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    return results


def trigger_problems(trigger: Doc) -> list[str]:
    """What KEDA's scaler would refuse in one trigger's metadata (unknown or missing keys, bad values)."""
    required, optional = TRIGGER_KEYS[trigger["type"]]
    meta: dict[str, str] = trigger["metadata"]
    out = [f"unknown key {k}" for k in sorted(set(meta) - required - optional)]
    out += [f"missing key {k}" for k in sorted(required - set(meta))]
    for k, v in meta.items():
        if not isinstance(v, str):
            out.append(f"{k} is not a string")
        elif k in ENUMS and v not in ENUMS[k]:
            out.append(f"{k}={v} not in {sorted(ENUMS[k])}")
        elif k in NUMBERS:
            try:
                float(v)
            except ValueError:
                out.append(f"{k}={v} is not a number")
        elif k in BOOLEANS and v not in ("true", "false"):
            out.append(f"{k}={v} is not a boolean")
    if trigger["type"] == "metrics-api" and "targetValue" not in meta and trigger.get("metricType") != "Value":
        out.append("targetValue is required for an AverageValue metric")
    return out


def exported() -> set[str]:
    golden = "".join(p.read_text() for p in (DEPLOY.parent / "tests" / "fixtures").glob("vllm-*/*/golden-metrics.prom"))
    return set(re.findall(r"^# TYPE (\S+) gauge$", golden, re.M))


def recorded() -> set[str]:
    return {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r}


@pytest.mark.parametrize("path", KEDA, ids=lambda p: p.name)
def test_scaledobjects_match_kedas_crd_and_scalers(tools: Tools, path: Path, tmp_path: Path) -> None:
    docs = load_all(path.read_text())
    results = keda_check(tools, docs, tmp_path)
    assert [r["kind"] for r in results] == ["ScaledObject"] and not [r for r in results if r["error"]], results
    for trigger in docs[0]["spec"]["triggers"]:
        assert trigger_problems(trigger) == [], trigger


def test_the_checks_are_not_vacuous(tools: Tools, tmp_path: Path) -> None:
    (obj,) = load_all(KEDA[1].read_text())
    bad = copy.deepcopy(obj)
    bad["spec"]["minReplicaCount"] = "one"
    bad["spec"]["trigger"] = bad["spec"].pop("triggers")
    (result,) = keda_check(tools, [bad], tmp_path)
    assert result["error"] and "minReplicaCount" in result["error"] and "trigger" in result["error"]
    (trigger,) = obj["spec"]["triggers"]
    broken = {**trigger, "metadata": {**trigger["metadata"], "aggregation": "sum", "format": "openmetrics",
                                      "targetValue": "one"}}
    assert trigger_problems(broken) == ["unknown key aggregation", "format=openmetrics not in ['json', 'prometheus', "
                                        "'xml', 'yaml']", "targetValue=one is not a number"]


ROUTER_REQUESTS = 'vllm:num_incoming_requests_total{'


def test_prometheus_scaler_reads_the_recording_rule_with_average_value_1() -> None:
    (obj,) = load_all(KEDA[0].read_text())
    signal, arriving = obj["spec"]["triggers"]
    assert signal["metricType"] == "AverageValue" and signal["metadata"]["threshold"] == "1"
    query = signal["metadata"]["query"]
    promql_parser.parse(query)
    assert RULE in query and RULE in recorded()
    assert signal["metadata"]["ignoreNullValues"] == "false"  # an absent signal must not read as 0 and scale in
    assert "vllm:num_requests_waiting" not in query and "threshold" not in query
    # Activation from in front of the engines: a 0/1 quantity, so it never asks for more than one replica.
    promql_parser.parse(arriving["metadata"]["query"])
    # The counter production-stack's router exports (vllm:num_incoming_requests, a prometheus_client Counter:
    # src/vllm_router/services/metrics_service/__init__.py @a6c01db0); vllm_router_requests_total exists nowhere.
    assert ROUTER_REQUESTS in arriving["metadata"]["query"] and "> bool 0" in arriving["metadata"]["query"]
    assert float(arriving["metadata"]["activationThreshold"]) < float(arriving["metadata"]["threshold"]) == 1


def test_metrics_api_scaler_sums_the_sidecars_behind_the_service() -> None:
    (obj,) = load_all(KEDA[1].read_text())
    (trigger,) = obj["spec"]["triggers"]
    meta = trigger["metadata"]
    assert meta["format"] == "prometheus" and meta["aggregateFromKubeServiceEndpoints"] == "true"
    assert meta["aggregationType"] == "sum" and meta["targetValue"] == "1" and trigger["metricType"] == "AverageValue"
    selector = promql_parser.parse(meta["valueLocation"])
    assert isinstance(selector, promql_parser.VectorSelector) and selector.name == SIGNAL and SIGNAL in exported()
    url = urlsplit(meta["url"])
    # KEDA takes the Service name and namespace from the host's first two labels, and matches the port number.
    service, namespace = url.hostname.split(".")[:2]  # type: ignore[union-attr]
    assert namespace == obj["metadata"]["namespace"] and url.path == "/metrics"
    base = load_all((DEPLOY / "kubernetes" / "base" / "vllm-service.yaml").read_text())[0]
    assert service == base["metadata"]["name"]
    assert url.port in [p["port"] for p in base["spec"]["ports"] if p["name"] == "headroom"]


def test_the_signal_has_one_series_per_replica() -> None:
    """KEDA's prometheus format takes the first sample matching the selector: the signal must carry no engine label
    (a data-parallel pod would otherwise count one engine)."""
    golden = "".join(p.read_text() for p in (DEPLOY.parent / "tests" / "fixtures").glob("vllm-*/*/golden-metrics.prom"))
    lines = re.findall(rf"^{SIGNAL}\{{([^}}]*)\}}", golden, re.M)
    assert lines and all("engine=" not in labels and "model_name=" in labels for labels in lines)


def test_hpa_is_a_valid_autoscaling_v2_object(validate: Any) -> None:
    docs = load_all((AUTOSCALING / "hpa.yaml").read_text())
    results = validate(docs)
    assert not [r for r in results if r["error"]], results
    (metric,) = docs[0]["spec"]["metrics"]
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    bad = copy.deepcopy(docs[0])
    bad["spec"]["metrics"][0]["external"]["target"]["averageValu"] = "1"
    assert [r for r in validate([bad]) if r["error"]]


def test_prometheus_adapter_config_uses_its_fields_and_serves_the_rule() -> None:
    config = yaml.safe_load((AUTOSCALING / "prometheus-adapter.yaml").read_text())
    assert set(config) == {"externalRules"}
    (rule,) = config["externalRules"]
    assert set(rule) <= ADAPTER_RULE and set(rule["resources"]) <= ADAPTER_RESOURCES
    assert set(rule["name"]) <= ADAPTER_NAME
    series = promql_parser.parse(rule["seriesQuery"])
    assert isinstance(series, promql_parser.VectorSelector) and series.name == RULE and RULE in recorded()
    assert re.fullmatch(rule["name"]["matches"], RULE)
    hpa = load_all((AUTOSCALING / "hpa.yaml").read_text())[0]
    assert rule["name"]["as"] == hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
    query = rule["metricsQuery"].replace("<<.Series>>", RULE).replace("<<.LabelMatchers>>", 'namespace="inference"')
    promql_parser.parse(query)
