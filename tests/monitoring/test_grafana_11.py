"""The dashboards import into Grafana 11.0, checked against Grafana 11.0.0's own schema (no Grafana server here).

tests/fixtures/grafana-11.0.0/schema-keys.json holds the key names of Grafana 11.0.0's generated schema types (npm
@grafana/schema@11.0.0, built from the CUE kinds of grafana/grafana v11.0.0; extract.py beside it says how): every
panel plugin's Options and FieldConfig (fieldConfig.custom) and the dashboard kind's structures. A key Grafana 11.0
does not know is dropped or misread on import; a panel type it does not ship imports as "Panel plugin not found".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grafana.dashboards import SCHEMA_VERSION, dashboards

KEYS = json.loads((Path(__file__).parents[1] / "fixtures/grafana-11.0.0/schema-keys.json").read_text())
DASH = KEYS["dashboard"]


def problems(d: dict[str, Any]) -> list[str]:
    """Every place where dashboard `d` uses a key or panel type Grafana 11.0.0's schema does not have."""
    out: list[str] = []

    def unknown(where: str, got: Any, allowed: list[str]) -> None:
        out.extend(f"{where}: {k}" for k in sorted(set(got) - set(allowed)))

    unknown("dashboard", d, DASH["Dashboard"])
    for link in d.get("links", []):
        unknown("link", link, DASH["DashboardLink"])
    for v in d["templating"]["list"]:
        unknown(f"variable {v['name']}", v, DASH["VariableModel"])
        if isinstance(v.get("datasource"), dict):
            unknown(f"variable {v['name']} datasource", v["datasource"], DASH["DataSourceRef"])
    for p in d["panels"]:
        name = f"panel {p.get('title')!r}"
        if p["type"] == "row":
            unknown(name, p, DASH["RowPanel"])
            continue
        if p["type"] not in KEYS["panels"]:
            out.append(f"{name}: type {p['type']} is no panel plugin of Grafana 11.0 we checked")
            continue
        plugin = KEYS["panels"][p["type"]]
        unknown(name, p, DASH["Panel"])
        unknown(f"{name} gridPos", p["gridPos"], DASH["GridPos"])
        unknown(f"{name} datasource", p.get("datasource", {}), DASH["DataSourceRef"])
        unknown(f"{name} options", p.get("options", {}), plugin["options"])
        for t in p.get("transformations", []):
            unknown(f"{name} transformation", t, DASH["DataTransformerConfig"])
        fc = p.get("fieldConfig", {})
        unknown(f"{name} fieldConfig", fc, DASH["FieldConfigSource"])
        configs = [("defaults", fc.get("defaults", {}))]
        for o in fc.get("overrides", []):
            unknown(f"{name} override matcher", o["matcher"], DASH["MatcherConfig"])
            configs.append(("override", {}))
            for prop in o["properties"]:
                key, _, sub = prop["id"].partition(".")
                if key == "custom":
                    unknown(f"{name} override", [sub], plugin["fieldConfigCustom"])
                else:
                    unknown(f"{name} override", [key], DASH["FieldConfig"])
                configs.append((f"override {prop['id']}", {key: prop["value"]} if not sub else {}))
        for where, cfg in configs:
            unknown(f"{name} {where}", cfg, DASH["FieldConfig"])
            unknown(f"{name} {where} custom", cfg.get("custom", {}), plugin["fieldConfigCustom"])
            if isinstance(cfg.get("thresholds"), dict):
                unknown(f"{name} thresholds", cfg["thresholds"], DASH["ThresholdsConfig"])
                for step in cfg["thresholds"]["steps"]:
                    unknown(f"{name} threshold step", step, DASH["Threshold"])
            if isinstance(cfg.get("color"), dict):
                unknown(f"{name} color", cfg["color"], DASH["FieldColor"])
            for m in cfg.get("mappings", []):
                unknown(f"{name} mapping", m, DASH["ValueMap"])
                if m.get("type") != "value":
                    out.append(f"{name}: mapping type {m.get('type')} not checked")
                for result in m.get("options", {}).values():
                    unknown(f"{name} mapping result", result, DASH["ValueMappingResult"])
    return out


def test_fixture_is_grafana_11_0_0() -> None:
    assert KEYS["version"] == "11.0.0"
    assert {p["pluginVersion"] for p in KEYS["panels"].values()} == {"11.0.0"}


@pytest.mark.parametrize("uid", ["vllm-kv-admission", "vllm-kv-fleet"])
def test_dashboards_use_only_what_grafana_11_0_knows(uid: str) -> None:
    d = dashboards()[uid]
    assert d["schemaVersion"] == SCHEMA_VERSION == 39
    assert problems(d) == []


def test_the_check_is_not_vacuous() -> None:
    """A key introduced after 11.0 (timeseries' tooltip `hideZeros`, 11.5), a custom key of another plugin, an
    unknown panel type and an unknown variable key are each named."""
    d = json.loads(json.dumps(dashboards()["vllm-kv-admission"]))
    ts = next(p for p in d["panels"] if p["type"] == "timeseries")
    ts["options"]["timeCompare"] = {}
    ts["fieldConfig"]["defaults"]["custom"]["cellOptions"] = {}
    d["panels"].append({**ts, "type": "xychart2", "title": "new"})
    d["templating"]["list"][1]["allowCustomValue"] = True
    with_steps = next(p for p in d["panels"] if "thresholds" in p.get("fieldConfig", {}).get("defaults", {}))
    with_steps["fieldConfig"]["defaults"]["thresholds"]["steps"][0]["state"] = "x"
    found = problems(d)
    assert any("options: timeCompare" in p for p in found), found
    assert any("custom: cellOptions" in p for p in found), found
    assert any("type xychart2" in p for p in found), found
    assert any(": allowCustomValue" in p for p in found), found
    assert any("threshold step: state" in p for p in found), found
