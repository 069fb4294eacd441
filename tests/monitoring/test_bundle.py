"""The generated bundle: up to date, promtool-clean, well-formed alerts and dashboards, real metric names only."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.core.units import parse_duration
from exporter.expose.server import Sidecar
from exporter.pipeline.catalogue import ALERT_BY_VERDICT
from exporter.pipeline.target import Settings, one_shot
from exporter.pipeline.verdict import Verdict
from grafana import generate
from grafana.config import DEFAULT
from grafana.dashboards import WHO_REGEX, dashboards
from grafana.promtool_tests import RULES_FILE, Engine, cases, promtool_tests, twins
from grafana.rules import VERDICT_ALERTS, alerts, anchor, render, rule_groups
from tests import fixtures
from tests.monitoring.promql import dashboard_queries, metric_names, promtool_env, require, rules, substitute

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-0.32.0"
REQUIRED_ALERTS = {"VLLMKVFalseFull", "VLLMKVCacheFull", "VLLMPreemptionStorm", "VLLMKVOversubscribed",
                   "VLLMSchedulerStuck", "VLLMEngineAsleepWithQueue", "VLLMKVBlockLeak", "VLLMHeadroomSidecarDown",
                   "VLLMHeadroomTargetDown", "VLLMStartupSlow", "VLLMMetricsAbsent", "VLLMHeadroomNeverFits",
                   "VLLMHeadroomBudgetFull", "VLLMHeadroomCapacityConfigError", "VLLMKVHistogramsMissing",
                   "VLLMKVCapacityUnknown", "VLLMHeadroomVllmNotScraped", "VLLMHeadroomRulesSkew",
                   "VLLMHeadroomDuplicateSeries"}
# Names the rules read that the recorded vLLM 0.32.0 does not export: older versions' (see
# ../shared/reference/vllm-metrics-and-admission.md) and Prometheus' own.
OLDER_VERSIONS = {"vllm:gpu_cache_usage_perc"}  # V0 and V1 <= 0.10 (hidden in 0.11, gone from 0.12)


def test_generated_files_match_the_generator() -> None:
    stale = generate.stale()
    assert not stale, f"regeneration changes {stale}: run `python -m grafana.generate` and commit the result"


def test_promtool_check_rules() -> None:
    done = subprocess.run([require("promtool"), "check", "rules", "--lint=all", "--lint-fatal",
                           str(ROOT / generate.RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@functools.cache
def _promtool_suite() -> dict[str, Any]:
    """The promtool suite, generated here (it is not committed) once per process; read-only."""
    return promtool_tests(DEFAULT, RULES_FILE)


def test_the_promtool_suite_is_not_committed() -> None:
    assert not (ROOT / "deploy" / "prometheus" / "tests").exists()


# Every case runs at each of these scrape intervals (grafana/promtool_tests.py); one test per interval, so
# `make test-fast` can run the 60 s third (Prometheus' default interval, the hardest for the windows) and `make test`
# runs all three.
INTERVALS = ("15s", "30s", "60s")


def test_every_promtool_case_runs_at_one_of_the_tested_intervals() -> None:
    assert {case["interval"] for case in _promtool_suite()["tests"]} == set(INTERVALS)


@pytest.mark.parametrize("interval", INTERVALS)
def test_promtool_test_rules(tmp_path: Path, interval: str) -> None:
    """The promtool suite at one scrape interval against the generated rules file, split across the machine's cores
    (promtool runs one file at a time)."""
    suite = _promtool_suite()
    rules = [str(ROOT / generate.RULES)]
    cases = [case for case in suite["tests"] if case["interval"] == interval]
    parts = max(1, min(os.cpu_count() or 1, len(cases)))
    procs = []
    for i in range(parts):
        chunk = tmp_path / f"part{i}.yaml"
        chunk.write_text(yaml.dump({**suite, "rule_files": rules, "tests": cases[i::parts]}, sort_keys=False,
                                   Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
        procs.append(subprocess.Popen([require("promtool"), "test", "rules", str(chunk)], env=promtool_env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [(p.wait(), p.communicate()[0]) for p in procs]
    assert cases and sum(len(cases[i::parts]) for i in range(parts)) == len(cases)
    failed = [out for code, out in outputs if code != 0]
    assert failed == [], "\n".join(failed)


def test_prometheusrule_carries_the_plain_rules() -> None:
    docs = list(yaml.safe_load_all((ROOT / generate.PROMETHEUS_RULE).read_text()))
    assert len(docs) == 1 and docs[0]["kind"] == "PrometheusRule"
    assert docs[0]["apiVersion"] == "monitoring.coreos.com/v1"
    assert docs[0]["spec"] == yaml.safe_load((ROOT / generate.RULES).read_text())


def test_alerts_are_complete_and_link_the_runbook() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    headings = {anchor(h) for h in re.findall(r"^#{2,3} (\S+)\s*$", runbook, re.M)}
    found = [r for g in rule_groups(DEFAULT)["groups"] for r in g["rules"] if "alert" in r]
    assert {r["alert"] for r in found} == REQUIRED_ALERTS
    for r in found:
        name = r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), name
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert r["annotations"]["summary"], name
        assert "$labels.pod" in r["annotations"]["description"] or "$labels.instance" in r["annotations"]["description"]
        url = r["annotations"]["runbook_url"]
        assert url.startswith(DEFAULT.runbook_url + "#"), name
        assert url.split("#")[1] in headings, f"{name}: no heading for {url} in docs/runbook.md"
        body = runbook.split(f"## {name}", 1)[1].split("\n## ", 1)[0]
        for section in ("Urgency", "Meaning", "Caveats", "Confirm", "Fix"):
            assert f"**{section}**" in body, f"runbook section {name} lacks {section}"
    engine_alerts = [r for r in found if "model_name" in r["annotations"]["description"]]
    assert all("$value" in r["annotations"]["description"] for r in engine_alerts)


UNREADABLE = re.compile(r"engine \)|engine ,|\(\)|\( |  |\+Inf|-Inf|NaN|<no value>")


def test_annotations_read_cleanly_on_v0_and_in_every_case() -> None:
    """V0 (vLLM 0.8 with VLLM_USE_V1=0) labels no engine: no annotation may say "engine )"; no ratio renders +Inf.
    Every expected annotation of the promtool suite is checked too (promtool proves Prometheus renders the same)."""
    v0 = {**Engine(engine=None, version="0.8").alert_labels, "instance": "host-a:9478"}  # engine and sidecar alerts
    assert "engine" not in v0
    for a in alerts(DEFAULT):
        for text in (a.summary, a.description):
            rendered = render(text, v0, 1.0)
            assert not UNREADABLE.search(rendered), (a.name, rendered)
            assert "{{" not in rendered, (a.name, rendered)
    suite = _promtool_suite()
    for t in suite["tests"]:
        for check in t.get("alert_rule_test", []):
            for exp in check["exp_alerts"]:
                for text in exp["exp_annotations"].values():
                    assert not UNREADABLE.search(text), (t["name"], text)


def test_every_verdict_of_the_sidecar_has_a_decided_alert() -> None:
    """A verdict the sidecar gains fails here until the bundle says which alert (or none) speaks for it."""
    assert VERDICT_ALERTS == ALERT_BY_VERDICT  # the rules' table is the verdict catalogue's
    assert set(VERDICT_ALERTS) == {str(v) for v in Verdict}
    names = {a.name for a in alerts(DEFAULT)}
    assert {a for a in VERDICT_ALERTS.values() if a} <= names
    fired = {e.alert for c in cases() for e in c.fires}
    titles = " ".join(c.name for c in cases())
    for v in ("never_fits", "budget_full", "sleeping", "config_error"):
        assert v in titles, v  # each new sidecar state has its promtool twins
    assert {"VLLMHeadroomNeverFits", "VLLMHeadroomBudgetFull", "VLLMHeadroomCapacityConfigError"} <= fired


def test_every_alert_fires_in_one_case_and_each_case_has_a_quiet_twin() -> None:
    names = {a.name for a in alerts(DEFAULT)}
    fired = {e.alert for c in cases() for e in c.fires}
    assert names == fired, f"alerts without a firing case: {names - fired}"
    for firing, quiet in twins():
        assert firing.fires, firing.name
        assert {(e.alert, e.severity) for e in firing.fires} != {(e.alert, e.severity) for e in quiet.fires}, \
            (firing.name, quiet.name)
    titles = " ".join(c.name for c in cases())
    for must in ("double scrape", "two clusters", "two models", "data-parallel", "counter reset", "6-minute reload",
                 "--disable-log-stats under an operator job name", "oscillating 0.79/0.81", "idle 0.10-style",
                 "healthy over-commit", "preemption storm", "0.8-style", "nothing finished"):
        assert must in titles, must
    suite = _promtool_suite()
    assert {t["interval"] for t in suite["tests"]} == {"15s", "30s", "60s"}
    assert len(suite["tests"]) == 3 * (len(cases()) + 1)  # + the replica signal's ramp (no alert)


def test_every_range_window_holds_four_samples_at_60s() -> None:
    for r in rules():
        for rng in re.findall(r"\[(\w+)\]", r["expr"]):
            assert parse_duration(rng) >= 4 * 60, (r.get("record") or r.get("alert"), rng)


def test_amtool_accepts_the_inhibit_rules() -> None:
    for path in (generate.ALERTMANAGER_EXAMPLE,):
        done = subprocess.run([require("amtool"), "check-config", str(ROOT / path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    snippet = yaml.safe_load((ROOT / generate.INHIBIT).read_text())
    example = yaml.safe_load((ROOT / generate.ALERTMANAGER_EXAMPLE).read_text())
    assert snippet["inhibit_rules"] == example["inhibit_rules"]
    sources = {m for r in snippet["inhibit_rules"] for m in r["source_matchers"]}
    assert 'alertname="VLLMHeadroomTargetDown"' in sources and 'alertname="VLLMPreemptionStorm"' in sources


def test_sidecar_exports_whether_its_target_was_ever_up() -> None:
    """The start-up rule needs it: 0 while vLLM loads, 1 from the first good scrape on, even after it goes down."""
    from prometheus_client import CollectorRegistry

    from exporter.expose.collector import HeadroomCollector

    scenario = "false-full"
    t = one_shot(Settings(f"http://{scenario}:8000", vllm_args=fixtures.vllm_argv(scenario), discover_cmdline=False))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadroomCollector([t]))
    target = {"target": f"http://{scenario}:8000"}  # the alerts read vLLM's host:port from it, also with one target
    assert reg.get_sample_value("vllm_headroom_target_seen_up", target) == 0
    t.last = t.observe(1.0, fixtures.snapshot(scenario))
    assert reg.get_sample_value("vllm_headroom_target_seen_up", target) == 1
    t.last = replace(t.last, up=False)
    assert reg.get_sample_value("vllm_headroom_up", target) == 0
    assert reg.get_sample_value("vllm_headroom_target_seen_up", target) == 1


def test_recording_rule_names_are_level_metric_operation() -> None:
    for r in rules():
        if "record" in r:
            assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", r["record"]), r["record"]


def test_what_keeps_the_bundle_cheap() -> None:
    """Issue 20 item 4 (bench/b8_rules_cost measures it): no regex on __name__ but a list of names (another is
    matched against every metric name at each evaluation); static configuration and the bundle's deployment alerts
    evaluated every config_interval, the request profile every minute; no record that no rule and no dashboard reads
    (the per-model records are the fleet's API)."""
    groups = rule_groups(DEFAULT)["groups"]
    for r in rules():  # a plain alternation of names is looked up as a set; anything else scans every name
        for regex in re.findall(r"__name__\s*=~\s*[\"']([^\"']*)[\"']", r["expr"]):
            assert re.fullmatch(r"[a-z_:]+(\|[a-z_:]+)*", regex), (r.get("record") or r.get("alert"), regex)
    slow = {g["name"] for g in groups if g.get("interval") == DEFAULT.config_interval}
    assert slow == {"vllm-headroom.config.rules", "vllm-headroom.bundle.alerts"}
    assert next(g for g in groups if g["name"] == "vllm-headroom.profile.rules")["interval"] == "1m"
    readers = [r["expr"] for r in rules()] + [substitute(e) for _u, _t, e in dashboard_queries()]
    # The risk-basis prompt blocks mirror the sidecar's vllm_headroom_prompt_blocks (test_real_prometheus compares
    # them; the promtool cases show the prompt that nothing finished is not held against the pool).
    mirrors = {"instance_engine:vllm_prompt_blocks:ceil"}
    unread = [r["record"] for r in rules() if "record" in r and not r["record"].startswith("model_name:")
              and r["record"] not in mirrors
              and not any(re.search(re.escape(r["record"]) + r"(?![\w:])", x) for x in readers)]
    assert unread == []


def test_the_rules_file_stays_within_40_kb() -> None:
    """Issue 20 item 4: a reviewer reads the whole bundle; a new rule pays for its bytes elsewhere (the operator
    copies carry the same rules in other wrappers and are not counted)."""
    size = (ROOT / generate.RULES).stat().st_size
    assert size <= 40_000, f"{generate.RULES} is {size:,} bytes, over issue 20's 40 KB"


def test_the_skew_warning_names_a_schema_only_when_the_schema_differs() -> None:
    """A sidecar of the rules' schema that lacks vllm_headroom_up still carries build_info's schema label on the
    alert: the description must not say it exports another schema (a fresh reviewer found "it exports schema 1")."""
    rule = next(r for r in rules() if r.get("alert") == "VLLMHeadroomRulesSkew")
    desc = rule["annotations"]["description"]
    missing = render(desc, {"instance": "10.0.0.9:9478", "schema": "1", "cause": "series_missing"}, 0)
    assert "exports schema" not in missing and "it exports 0 of the" in missing
    other = render(desc, {"instance": "10.0.0.9:9478", "schema": "2", "cause": "schema"}, 1)
    assert "it exports schema 2" in other


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
    variables = {v["name"]: v for v in adm["templating"]["list"]}
    assert list(variables) == ["datasource", "cluster", "namespace", "job", "pod", "model_name", "engine"]
    for d in ds.values():  # chained: each variable lists only what the ones before it select
        chain = [v["name"] for v in d["templating"]["list"] if v["type"] == "query"]
        for i, v in enumerate(v for v in d["templating"]["list"] if v["type"] == "query"):
            assert all(f'{before}=~"${before}"' in v["query"] for before in chain[:i]), (d["uid"], v["name"])
            assert v["includeAll"] and v["allValue"] == ".*", (d["uid"], v["name"])
    types = {p["type"] for p in adm["panels"]}
    assert {"stat", "timeseries", "state-timeline", "table", "text"} <= types
    assert any("runbook.md" in p.get("options", {}).get("content", "") for p in adm["panels"] if p["type"] == "text")
    for uid, d in ds.items():
        assert d["schemaVersion"] == 39, uid  # Grafana 11.0, the oldest the README promises
        assert d["graphTooltip"] == 1, uid  # shared crosshair
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
            if p["type"] == "timeseries":
                assert p["options"]["tooltip"]["mode"] == "multi", (uid, p["title"])
            for t in p["targets"]:
                used = set(re.findall(r"\$\{?([a-z_]+)", t["expr"])) - {"__rate_interval", "__range", "__interval"}
                assert used <= defined, (uid, p["title"], used - defined)
                if "vllm_headroom_" in t["expr"]:
                    assert "Needs the vllm-headroom sidecar" in p["description"], (uid, p["title"])
                    assert 'pod=~"$pod"' in t["expr"], (uid, p["title"])  # the one pod picker reaches the sidecar
                if "model_name:" in t["expr"].split("{")[0]:
                    assert "job=~" not in t["expr"], (uid, p["title"])  # per-model rules carry no job
                legend = t.get("legendFormat", "")
                if "{{engine}}" in legend:  # per engine: named by pod, or host:port outside Kubernetes
                    assert "{{who}}" in legend and not re.search(r"\{\{(pod|instance)\}\}", legend), (uid, legend)
    fleet_exprs = " ".join(t["expr"] for p in ds["vllm-kv-fleet"]["panels"] for t in p.get("targets", []))
    assert "vllm_headroom_" not in fleet_exprs  # the fleet view works from the recording rules alone
    by_title = {p["title"]: p for p in adm["panels"]}
    verdict = by_title["Verdict"]["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert verdict["stuck"]["color"] != "green" and verdict["ok"]["color"] == "green"
    every = {str(v) for v in Verdict}  # a verdict the sidecar gains must get a colour here
    assert set(verdict) == every
    assert verdict["never_fits"]["color"] == verdict["stuck"]["color"] and verdict["budget_full"]["color"] != "green"
    timeline = by_title["Verdict over time"]
    for panel in (by_title["Verdict"], timeline):  # value 1 per verdict series: colours by series name too
        named = {o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"]
                 for o in panel["fieldConfig"]["overrides"] if o["matcher"]["id"] == "byName"}
        assert every <= set(named) and named["ok"] == "green", panel["title"]
    assert "binding_limit" in " ".join(t["expr"] for t in timeline["targets"])
    ratio = " ".join(t["expr"] for p in adm["panels"] for t in p.get("targets", []))
    assert "unreachable_pool_ratio" in ratio and "effective_usage_ratio" not in ratio  # the deprecated alias goes
    main = next(p for t, p in by_title.items() if t.startswith("Waiting vs admission headroom"))
    exprs = " ".join(t["expr"] for t in main["targets"])
    assert "kv_free_blocks" not in exprs  # free blocks (tens of thousands) get their own panel
    assert "admission_headroom" in exprs and "worst_case_blocks" in exprs and "waiting" in exprs
    assert any("kv_free_blocks" in t["expr"] for p in adm["panels"] for t in p.get("targets", []))
    steps = [s["value"] for o in main["fieldConfig"]["overrides"] for prop in o["properties"]
             if prop["id"] == "thresholds" for s in prop["value"]["steps"]]
    assert DEFAULT.full_usage in steps
    symptom = " ".join(t["expr"] for p in adm["panels"] for t in p.get("targets", []))
    assert "vllm:request_queue_time_seconds_bucket" in symptom and "vllm:time_to_first_token_seconds_bucket" in symptom


def _selectors_counted_once(node: Any, inner: Any = None) -> Iterator[tuple[str, Any]]:
    """(series name, innermost aggregation above it) for every vector selector of a parsed PromQL expression."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node.name or "", inner
    elif kind == "AggregateExpr":
        yield from _selectors_counted_once(node.expr, node)
    elif kind == "Call":
        for arg in node.args:
            yield from _selectors_counted_once(arg, inner)
    elif kind == "BinaryExpr":
        yield from _selectors_counted_once(node.lhs, inner)
        yield from _selectors_counted_once(node.rhs, inner)
    elif kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        yield from _selectors_counted_once(node.expr, inner)
    elif kind == "MatrixSelector":
        yield from _selectors_counted_once(node.vector_selector, inner)


def test_dashboards_count_a_pod_scraped_by_two_jobs_once() -> None:
    """Every series a panel reads first goes through a max/min that drops `job` (one series per engine however
    many jobs scrape the pod) before anything sums, counts, ranks or plots it; the per-model rules are already
    deduplicated. test_double_scrape shows the values on a real Prometheus; this also covers ratios, which a pod
    doubled everywhere would leave unchanged."""
    for uid, title, expr in dashboard_queries():
        for name, agg in _selectors_counted_once(promql_parser.parse(substitute(expr))):
            if name.startswith("model_name:"):
                continue
            assert agg is not None and str(agg.op) in ("max", "min"), (uid, title, name, expr)
            mod = agg.modifier
            labels = list(mod.labels) if mod is not None else []
            kept = mod is None or str(mod.type).endswith("By")
            assert ("job" not in labels) if kept else ("job" in labels), (uid, title, name, expr)


def test_who_names_the_pod_or_else_the_instance() -> None:
    """The `who` regex on label_join(namespace, pod, instance) (Python's re agrees with RE2 on it; the real
    Prometheus checks the Kubernetes and bare cases in test_double_scrape)."""
    for joined, want in (("ns/vllm-0/10.0.0.7:8000", "ns/vllm-0"), ("//gpu-host:8000", "gpu-host:8000"),
                         ("/vllm-0/10.0.0.7:8000", "vllm-0"), ("ns//gpu-host:8000", "gpu-host:8000"),
                         ("//[::1]:8000", "[::1]:8000"), ("ns/vllm-0/", "ns/vllm-0")):
        m = re.fullmatch(WHO_REGEX, joined)
        assert m and (m.group(1) or "") + (m.group(2) or "") == want, (joined, m)


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
    # vllm_headroom_capacity_undetermined{reason="config_error"} is exported only for a nonsensical config: the
    # idle recording with num_gpu_blocks 1 (a pool of nothing but the null block).
    bad = one_shot(Settings("http://config-error:8000", vllm_args=fixtures.vllm_argv("idle"), discover_cmdline=False))
    bad.last = bad.observe(1.0, re.sub(r'num_gpu_blocks="\d+"', 'num_gpu_blocks="1"', fixtures.snapshot("idle")))
    assert bad.last.gaps and bad.last.gaps[0].config_error
    targets.append(bad)
    # vllm_headroom_target_down_since_timestamp_seconds is exported only while a target is down (not scraped yet).
    down = one_shot(Settings("http://down:8000", discover_cmdline=False))
    down.down_since = 1.0
    targets.append(down)
    ours = generate_latest(Sidecar(targets, 5.0).registry).decode()
    for fam in text_string_to_metric_families(ours):
        names |= {s.name for s in fam.samples}
    return names


def test_every_metric_name_exists_in_a_recorded_exposition() -> None:
    recorded = _recorded_names() | {"up"} | OLDER_VERSIONS  # `up` is Prometheus' own
    assert "vllm:num_preemptions_total" in recorded and "vllm_headroom_scrape_errors_total" in recorded
    produced = {r["record"] for r in rules() if "record" in r}
    exprs = [r["expr"] for r in rules()] + [substitute(e) for _u, _t, e in dashboard_queries()]
    exprs += [v["query"] for d in dashboards().values() for v in d["templating"]["list"] if v["type"] == "query"]
    missing: set[str] = set()
    for expr in exprs:
        expr = re.sub(r"^label_values\((.*), \w+\)$", r"\1", substitute(expr))
        missing |= metric_names(expr) - recorded - produced
    assert not missing, f"not in any recorded exposition (vLLM 0.32.0 or ours): {sorted(missing)}"


def test_the_replica_ramp_replays_the_sidecars_own_output() -> None:
    """The promtool ramp's input is the sidecar's served value per recorded frame: at each recording's snapshot it
    equals the golden copy of our /metrics (tests/golden.py renders the same frames), and the ramp both scales out
    (a sum above 2 replicas) and ends idle at 0."""
    import json

    from exporter.replay import recording
    from tests.monitoring.replica_replay import FIXTURES, RAMP, ramp_pods
    from tests.monitoring.replica_replay import replay as replay_recording

    for _name, _ip, _start, source, _jobs, _service_jobs in RAMP:
        r = replay_recording(source)
        folder = FIXTURES / source
        meta = json.loads((folder / "meta.json").read_text())
        frames = [t for t, _ in recording.load(folder).frames]
        k = max(i for i, t in enumerate(frames) if t - frames[0] <= float(meta.get("snapshot_t", 1e9)) + 1e-9)
        golden = re.search(r"^vllm_headroom_replicas_needed\{[^}]*\} (\S+)$",
                           (folder / "golden-metrics.prom").read_text(), re.M)
        assert golden and r.values[k] == float(golden.group(1)), (source, k, r.values[k], golden)
    pods = ramp_pods()
    peak = max(sum(v for p in pods if (v := p.at(t)) is not None) for t in range(0, 1800, 30))
    assert peak > 2 and all(p.values[-1] == 0.0 for p in pods), peak
