"""The generated bundle: up to date, promtool-clean, well-formed alerts and dashboards, real metric names only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import promql_parser
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.expose.server import Sidecar
from exporter.pipeline.target import Settings, one_shot
from grafana import generate
from grafana.config import DEFAULT
from grafana.dashboards import dashboards
from grafana.promtool_tests import cases
from grafana.rules import alerts, anchor, rule_groups
from tests import fixtures
from tests.monitoring.promql import dashboard_queries, metric_names, require, rules, substitute

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-0.32.0"
REQUIRED_ALERTS = {"VLLMKVFalseFull", "VLLMKVCacheFull", "VLLMPreemptionStorm", "VLLMKVOversubscribed",
                   "VLLMSchedulerStuck", "VLLMKVBlockLeak", "VLLMHeadroomSidecarDown", "VLLMHeadroomTargetDown",
                   "VLLMMetricsAbsent"}


def test_generated_files_match_the_generator() -> None:
    stale = generate.stale()
    assert not stale, f"regeneration changes {stale}: run `python -m grafana.generate` and commit the result"


def test_promtool_check_rules() -> None:
    done = subprocess.run([require("promtool"), "check", "rules", "--lint=all", "--lint-fatal",
                           str(ROOT / generate.RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules() -> None:
    done = subprocess.run([require("promtool"), "test", "rules", str(ROOT / generate.RULE_TESTS)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheusrule_carries_the_plain_rules() -> None:
    docs = list(yaml.safe_load_all((ROOT / generate.PROMETHEUS_RULE).read_text()))
    assert len(docs) == 1 and docs[0]["kind"] == "PrometheusRule"
    assert docs[0]["apiVersion"] == "monitoring.coreos.com/v1"
    assert docs[0]["spec"] == yaml.safe_load((ROOT / generate.RULES).read_text())


def test_alerts_are_complete_and_link_the_runbook() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    headings = {anchor(h) for h in re.findall(r"^#{2,3} (\S+)\s*$", runbook, re.M)}
    groups = rule_groups(DEFAULT)["groups"]
    found = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    assert set(found) >= REQUIRED_ALERTS
    for name, r in found.items():
        assert re.fullmatch(r"\d+[smh]", r["for"]), name
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert r["annotations"]["summary"] and "{{ $labels." in r["annotations"]["description"], name
        url = r["annotations"]["runbook_url"]
        assert url.startswith(DEFAULT.runbook_url + "#"), name
        assert url.split("#")[1] in headings, f"{name}: no heading for {url} in docs/runbook.md"
        for section in ("Meaning", "Confirm", "Fix"):
            body = runbook.split(f"## {name}", 1)[1].split("\n## ", 1)[0]
            assert f"**{section}**" in body, f"runbook section {name} lacks {section}"


def test_every_alert_fires_in_one_case_and_stays_silent_in_another() -> None:
    fired = {a for c in cases() for a in c.fires}
    silent = {a for c in cases() for a in c.silent}
    names = {a.name for a in alerts(DEFAULT)}
    assert names == fired, f"alerts without a firing case: {names - fired}"
    assert names == silent, f"alerts without a silent case: {names - silent}"
    titles = " ".join(c.name for c in cases())
    for must in ("26 %", "healthy busy", "truly full"):
        assert must in titles


def test_recording_rule_names_are_level_metric_operation() -> None:
    for r in rules():
        if "record" in r:
            assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", r["record"]), r["record"]


def test_every_expression_parses() -> None:
    for r in rules():
        promql_parser.parse(r["expr"])
    for uid, title, expr in dashboard_queries():
        try:
            promql_parser.parse(substitute(expr))
        except Exception as e:
            raise AssertionError(f"{uid} / {title}: {expr}: {e}") from e


def test_dashboards_are_well_formed() -> None:
    ds = dashboards()
    assert set(ds) == {"vllm-kv-admission", "vllm-kv-fleet"}
    assert len({d["title"] for d in ds.values()}) == 2
    adm = ds["vllm-kv-admission"]
    variables = {v["name"] for v in adm["templating"]["list"]}
    assert {"datasource", "namespace", "job", "instance", "model_name", "engine"} <= variables
    types = {p["type"] for p in adm["panels"]}
    assert {"stat", "timeseries", "state-timeline", "table", "text"} <= types
    assert any("runbook.md" in p.get("options", {}).get("content", "") for p in adm["panels"] if p["type"] == "text")
    for uid, d in ds.items():
        assert d["schemaVersion"] >= 39, uid  # Grafana 11+
        defined = {v["name"] for v in d["templating"]["list"]}
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), uid
        for p in d["panels"]:
            if p["type"] in ("row", "text"):
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (uid, p["title"])
            assert p["targets"] and p.get("description"), (uid, p["title"])
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), (uid, p["title"])
            for t in p["targets"]:
                used = set(re.findall(r"\$\{?([a-z_]+)", t["expr"])) - {"__rate_interval", "__range", "__interval"}
                assert used <= defined, (uid, p["title"], used - defined)
                if "vllm_headroom_" in t["expr"]:
                    assert "Needs the vllm-headroom sidecar" in p["description"], (uid, p["title"])
    fleet_exprs = " ".join(t["expr"] for p in ds["vllm-kv-fleet"]["panels"] for t in p.get("targets", []))
    assert "vllm_headroom_" not in fleet_exprs  # the fleet view works from the recording rules alone


def _recorded_names() -> set[str]:
    """Every series name in the recorded real vLLM 0.32.0 expositions and in our sidecar's exposition of them."""
    names: set[str] = set()
    targets = []
    for snap in sorted(FIXTURES.glob("*/snapshot.prom")):
        for fam in text_string_to_metric_families(snap.read_text()):
            names |= {s.name for s in fam.samples}
        scenario = snap.parent.name
        t = one_shot(Settings(f"http://{scenario}:8000", vllm_args=fixtures.vllm_argv(scenario),
                              discover_cmdline=False))
        t.last = t.observe(1.0, fixtures.snapshot(scenario))
        t.known_engines = {(e.model_name, e.engine) for e in t.last.engines}
        targets.append(t)
    ours = generate_latest(Sidecar(targets, 5.0).registry).decode()
    for fam in text_string_to_metric_families(ours):
        names |= {s.name for s in fam.samples}
    return names


def test_every_metric_name_exists_in_a_recorded_exposition() -> None:
    recorded = _recorded_names() | {"up"}  # `up` is Prometheus' own
    assert "vllm:num_preemptions_total" in recorded and "vllm_headroom_scrape_errors_total" in recorded
    produced = {r["record"] for r in rules() if "record" in r}
    exprs = [r["expr"] for r in rules()] + [substitute(e) for _u, _t, e in dashboard_queries()]
    exprs += [v["query"] for d in dashboards().values() for v in d["templating"]["list"] if v["type"] == "query"]
    missing: set[str] = set()
    for expr in exprs:
        expr = re.sub(r"^label_values\((.*), \w+\)$", r"\1", substitute(expr))
        missing |= metric_names(expr) - recorded - produced
    assert not missing, f"not in any recorded exposition (vLLM 0.32.0 or ours): {sorted(missing)}"
