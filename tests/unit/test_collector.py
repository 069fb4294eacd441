"""Our /metrics: names, labels, promtool's linter, several targets, and a target that goes down."""

from __future__ import annotations

import subprocess

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__
from exporter.expose import diagnosis
from exporter.expose.collector import SCHEMA_VERSION
from exporter.expose.server import Sidecar
from exporter.pipeline.scrape import ScrapeError
from exporter.pipeline.target import Settings, Target, TargetReport, one_shot
from tests import fixtures


def _target(url: str, scenario: str) -> Target:
    # One observation, judged like `diagnose` judges a file (no hold time).
    t = one_shot(Settings(url, vllm_args=fixtures.vllm_argv(scenario), discover_cmdline=False))
    t.last = t.observe(1.0, fixtures.snapshot(scenario))
    t.known_engines = {(e.model_name, e.engine) for e in t.last.engines}
    return t


def _exposition(targets: list[Target]) -> str:
    return generate_latest(Sidecar(targets, 5.0).registry).decode()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_promtool_check_metrics_accepts_our_exposition() -> None:
    text = _exposition([_target("http://a:8000", "false-full")])
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_false_full_snapshot_as_metrics() -> None:
    s = _samples(_exposition([_target("http://a:8000", "false-full")]))
    target = frozenset({("target", "http://a:8000")})
    eng = target | {("model_name", "tiny-llama"), ("engine", "0")}
    assert s[("vllm_headroom_up", target)] == 1.0
    assert s[("vllm_headroom_false_full", eng)] == 1.0
    assert s[("vllm_headroom_kv_capacity_blocks", eng)] == 39
    assert s[("vllm_headroom_slot_headroom_requests", eng)] == 0
    assert s[("vllm_headroom_worst_case_blocks_per_request", eng | {("basis", "max_model_len")})] == 16
    assert s[("vllm_headroom_verdict", eng | {("verdict", "slots_full")})] == 1.0
    assert sum(v for (name, _l), v in s.items() if name == "vllm_headroom_verdict") == 1.0
    info = next(dict(labels) for (name, labels), _v in s.items() if name == "vllm_headroom_config_info")
    assert (info["max_num_seqs"], info["max_num_seqs_source"]) == ("8", "vllm_args")
    assert (info["num_gpu_blocks"], info["num_gpu_blocks_source"]) == ("40", "cache_config_info")


def test_one_or_several_targets_carry_a_target_label() -> None:
    one = _samples(_exposition([_target("http://a:8000", "false-full")]))
    # The alerts take vLLM's host:port from it: a sidecar's own `instance` does not say which vLLM it watches.
    assert {dict(labels).get("target") for (name, labels), _v in one.items()
            if name.startswith("vllm_headroom_") and name != "vllm_headroom_build_info"} == {"http://a:8000"}
    # The sidecar itself: its version and the schema of its series, for the rules' skew alert.
    assert one[("vllm_headroom_build_info", frozenset({("version", __version__), ("schema", SCHEMA_VERSION)}))] == 1

    s = _samples(_exposition([_target("http://a:8000", "false-full"), _target("http://b:8000", "kv-full")]))
    ups = {dict(labels)["target"] for (name, labels), _v in s.items() if name == "vllm_headroom_up"}
    assert ups == {"http://a:8000", "http://b:8000"}
    verdicts = {(dict(labels)["target"], dict(labels)["verdict"])
                for (name, labels), v in s.items() if name == "vllm_headroom_verdict" and v == 1.0}
    assert verdicts == {("http://a:8000", "slots_full"), ("http://b:8000", "kv_full")}


def test_down_target_exports_no_stale_numbers_only_target_down() -> None:
    t = _target("http://a:8000", "false-full")
    t.errors["timeout"] = 1
    t.last = TargetReport(t.settings.url, up=False, error_reason="timeout", error=str(ScrapeError("timeout", "x")))
    text = _exposition([t])
    s = _samples(text)
    target = frozenset({("target", "http://a:8000")})
    assert s[("vllm_headroom_up", target)] == 0.0
    assert "vllm_headroom_kv_free_blocks{" not in text and "vllm_headroom_config_info{" not in text
    on = [dict(labels)["verdict"] for (name, labels), v in s.items() if name == "vllm_headroom_verdict" and v == 1]
    assert on == ["target_down"]
    assert s[("vllm_headroom_scrape_errors_total", target | {("reason", "timeout")})] == 1.0


def test_diagnosis_fields_are_named_like_the_metrics() -> None:
    t = _target("http://a:8000", "false-full")
    target = diagnosis.document([t.last])["targets"][0]
    engine = target["engines"][0]
    (replicas,) = target["replicas"]  # the replica signal: per target and model, as in /metrics
    names = {f.name.removeprefix("vllm_headroom_")
             for f in text_string_to_metric_families(_exposition([t]))
             if f.name.startswith("vllm_headroom_") and f.name not in (
                 "vllm_headroom_up", "vllm_headroom_target_seen_up", "vllm_headroom_scrape_duration_seconds",
                 "vllm_headroom_build_info",
                 "vllm_headroom_target_down_since_timestamp_seconds",
                 "vllm_headroom_scrape_errors",
                 "vllm_headroom_config_info", "vllm_headroom_verdict", "vllm_headroom_request_profile_tokens")}
    assert names - set(engine) - set(replicas) == set()
    assert engine["worst_case_blocks_per_request"] == {"profile": 3, "max_model_len": 16}  # 16 + 64 tokens
    assert engine["verdict"] == "slots_full" and engine["false_full"] is True
