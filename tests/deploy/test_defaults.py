"""Helm values, its schema, the kustomize manifests and the rules take their defaults from exporter/core/defaults."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml

from exporter.core import defaults as D
from exporter.core.units import parse_duration
from grafana import generate
from grafana.config import DEFAULT

from .conftest import CHART, ROOT, Doc, find, sidecar_of

THRESHOLDS = {"fullUsage": D.FULL_USAGE, "falseFullHold": D.FALSE_FULL_HOLD, "stuckAfter": D.STUCK_AFTER,
              "leakAfter": D.LEAK_AFTER, "preemptWindow": D.PREEMPT_WINDOW}


def _num(v: object) -> float:
    return float(v) if isinstance(v, (int, float)) else parse_duration(str(v))


def test_helm_values_and_schema_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    props = schema["properties"]["thresholds"]["properties"]
    assert set(values["thresholds"]) == set(THRESHOLDS) == set(props)
    for key, want in THRESHOLDS.items():
        assert _num(values["thresholds"][key]) == want, f"values.yaml thresholds.{key} drifted from defaults"
        assert _num(props[key]["default"]) == want, f"values.schema.json thresholds.{key} drifted from defaults"
    assert _num(values["sidecar"]["scrapeInterval"]) == D.SCRAPE_INTERVAL
    assert _num(schema["properties"]["sidecar"]["properties"]["scrapeInterval"]["default"]) == D.SCRAPE_INTERVAL
    assert values["sidecar"]["port"] == D.PORT and values["service"]["port"] == D.PORT
    assert values["prometheusRule"]["runbookBaseUrl"] == DEFAULT.runbook_url


def _at(doc: dict[str, Any], path: str, schema: bool = False) -> Any:
    for key in path.split("."):
        doc = doc["properties"][key] if schema else doc[key]
    return doc["default"] if schema else doc


def test_chart_values_of_the_rules_and_dashboards_default_to_the_generator() -> None:
    """Every chart value the PrometheusRule and dashboards take (grafana.generate.HELM_KNOBS) defaults, in
    values.yaml and in the schema, to the generator's Config default (itself from exporter/core/defaults.py)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    for knob in generate.HELM_KNOBS:
        want = getattr(DEFAULT, knob.field)
        for where, got in (("values.yaml", _at(values, knob.value)), ("values.schema.json", _at(schema, knob.value,
                                                                                                   True))):
            if knob.kind == "duration":
                assert parse_duration(got) == parse_duration(want), f"{where} {knob.value} drifted from {want}"
            else:
                assert got == want, f"{where} {knob.value} drifted from the generator's {knob.field}={want!r}"
    assert values["profile"]["quantile"] == D.PROFILE_QUANTILE
    assert parse_duration(values["profile"]["window"]) == D.PROFILE_WINDOW


def test_kustomize_sidecar_defaults(kustomize: Callable[[str], list[Doc]]) -> None:
    sidecar, _ = sidecar_of(find(kustomize("base"), "Deployment"))
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert _num(env["VLLM_HEADROOM_SCRAPE_INTERVAL"]) == D.SCRAPE_INTERVAL
    assert env["VLLM_HEADROOM_WEB_LISTEN_ADDRESS"] == D.LISTEN_ADDRESS
    assert env["VLLM_HEADROOM_TARGET"] == D.TARGET
    assert sidecar["ports"][0]["containerPort"] == D.PORT
    for name, value in env.items():  # a threshold set in the manifests must equal the default
        key = name.removeprefix("VLLM_HEADROOM_VERDICT_").lower()
        if key in D.DURATIONS:
            assert _num(value) == D.DURATIONS[key], name


def test_rules_use_the_defaults() -> None:
    assert DEFAULT.full_usage == D.FULL_USAGE and DEFAULT.profile_quantile == D.PROFILE_QUANTILE
    assert parse_duration(DEFAULT.profile_window) == D.PROFILE_WINDOW
    text = (ROOT / generate.RULES).read_text()
    # Full usage is tested once, in the pressure record (>= full_usage within the window); false-full and KV-full
    # read that record (1 - pressure: below full usage), so the threshold appears once.
    assert text.count(f">= bool {D.FULL_USAGE}") == 1 and f"< bool {D.FULL_USAGE}" not in text
    assert "(1 - instance_engine:vllm_kv_pressure:bool)" in text
    assert f">= bool {D.PROFILE_QUANTILE}" in text
    assert f"[{DEFAULT.profile_window}]" in text
