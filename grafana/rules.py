"""Prometheus recording and alerting rules of the bundle, computed from vLLM's own metrics inside Prometheus.

The recording rules mirror exporter/derive.py where raw vLLM data allows it (vLLM >= 0.11 usage semantics):

  N  = num_gpu_blocks of one engine  = label of vllm:cache_config_info / engines of the API server
  B  = usable blocks                 = N - 1 (block 0 is vLLM's null block)
  used = round(u * (N - 1)), free = B - used
  P, M = profile prompt / max_tokens = upper bound of the histogram bucket holding the q-quantile over the window
  W  = worst-case blocks per request = ceil((P + M) / bs)

Prometheus cannot see max_model_len (it is in no vLLM metric), so W is not bounded by it here, and a quantile in
the +Inf bucket reads as the highest finite bucket (vLLM's buckets end at or below max_model_len). The sidecar
bounds both by max_model_len; see docs/runbook.md.

Label values become numbers with histogram_quantile: a pair of buckets {le="<value>"} = 1 and {le="+Inf"} = 1
has its 1.0-quantile exactly at <value>. The same trick turns "first bucket whose cumulative share reaches q"
into that bucket's upper bound: feed histogram_quantile(1, ...) the 0/1 indicator `share >= bool q`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .config import Config

# ---------------------------------------------------------------------------------------------------------------
# Recording rules


def _label_value(cfg: Config, label: str) -> str:
    """A numeric label of vllm:cache_config_info as a sample value, per API server and engine."""
    info = f"vllm:cache_config_info{cfg.sel()}"
    return (
        f"histogram_quantile(1, max by ({cfg.by('engine', 'le')}) (\n"
        f'  label_replace({info}, "le", "$1", "{label}", "([0-9]+)")\n'
        f'  or label_replace({info}, "le", "+Inf", "engine", ".*")\n'
        f"))"
    )


def _bucket_quantile(cfg: Config, histogram: str) -> str:
    """Upper bound of the bucket holding the profile quantile over the window; lifetime when nothing finished."""
    by = cfg.by("model_name", "engine")

    inf = cfg.sel('le="+Inf"')

    def over(rng: str) -> str:
        if rng:
            buckets = f"sum by ({by}, le) (increase({histogram}_bucket{cfg.sel()}[{rng}]))"
            total = f"sum by ({by}) (increase({histogram}_bucket{inf}[{rng}]))"
        else:
            buckets = f"sum by ({by}, le) ({histogram}_bucket{cfg.sel()})"
            total = f"sum by ({by}) ({histogram}_bucket{inf})"
        return (
            f"histogram_quantile(1, (\n"
            f"  {buckets}\n"
            f"  / ignoring (le) group_left ()\n"
            f"  {total}\n"
            f") >= bool {cfg.profile_quantile})"
        )

    return f"(\n{over(cfg.profile_window)} > 0\n)\nor\n(\n{over('')} > 0\n)"


def recording_rules(cfg: Config) -> list[dict[str, str]]:
    """`level:metric:operation` rules; every name starts with instance_engine: (per API server and engine)."""
    s = cfg.sel()
    by = cfg.by("model_name", "engine")
    demand = "instance_engine:vllm_num_requests_running:max * instance_engine:vllm_worst_case_blocks_per_request:ceil"
    r: list[tuple[str, str]] = [
        ("instance:vllm_engines:count", f"count by ({cfg.by()}) (vllm:cache_config_info{s})"),
        # From 0.9 num_gpu_blocks is the sum over the data-parallel engines of one API server.
        ("instance_engine:vllm_num_gpu_blocks:per_engine",
         _label_value(cfg, "num_gpu_blocks") + "\n/ on (instance) group_left ()\ninstance:vllm_engines:count"),
        ("instance_engine:vllm_block_size_tokens:max", _label_value(cfg, "block_size")),
        ("instance_engine:vllm_kv_capacity_blocks:usable", "instance_engine:vllm_num_gpu_blocks:per_engine - 1"),
        ("instance_engine:vllm_kv_capacity_tokens:usable",
         "instance_engine:vllm_kv_capacity_blocks:usable\n* on (instance, engine) group_left ()\n"
         "instance_engine:vllm_block_size_tokens:max"),
        ("instance_engine:vllm_kv_usage_ratio:max", f"max by ({by}) (vllm:kv_cache_usage_perc{s})"),
        ("instance_engine:vllm_num_requests_running:max", f"max by ({by}) (vllm:num_requests_running{s})"),
        ("instance_engine:vllm_num_requests_waiting:max", f"max by ({by}) (vllm:num_requests_waiting{s})"),
        # vLLM >= 0.11: usage = 1 - free / (N - 1), so used = u * (N - 1).
        ("instance_engine:vllm_kv_used_blocks:round",
         "clamp_min(round(\n  instance_engine:vllm_kv_usage_ratio:max\n  * on (instance, engine) group_left ()\n"
         "  instance_engine:vllm_kv_capacity_blocks:usable\n), 0)"),
        ("instance_engine:vllm_kv_free_blocks:sub",
         "clamp_min(\n  instance_engine:vllm_kv_capacity_blocks:usable\n  - on (instance, engine) group_right ()\n"
         "  instance_engine:vllm_kv_used_blocks:round\n, 0)"),
        ("instance_engine:vllm_request_prompt_tokens:bucket_quantile",
         _bucket_quantile(cfg, "vllm:request_prompt_tokens")),
        ("instance_engine:vllm_request_max_tokens:bucket_quantile",
         _bucket_quantile(cfg, "vllm:request_params_max_tokens")),
        ("instance_engine:vllm_prompt_blocks:ceil",
         "clamp_min(ceil(\n  instance_engine:vllm_request_prompt_tokens:bucket_quantile\n"
         "  / on (instance, engine) group_left ()\n  instance_engine:vllm_block_size_tokens:max\n), 1)"),
        # Not bounded by max_model_len, which Prometheus cannot see.
        ("instance_engine:vllm_worst_case_blocks_per_request:ceil",
         "clamp_min(ceil(\n  (instance_engine:vllm_request_prompt_tokens:bucket_quantile\n"
         "   + instance_engine:vllm_request_max_tokens:bucket_quantile)\n"
         "  / on (instance, engine) group_left ()\n  instance_engine:vllm_block_size_tokens:max\n), 1)"),
        ("instance_engine:vllm_max_concurrency_requests:floor",
         "floor(\n  (instance_engine:vllm_kv_used_blocks:round + instance_engine:vllm_kv_free_blocks:sub)\n"
         "  / instance_engine:vllm_worst_case_blocks_per_request:ceil\n)"),
        ("instance_engine:vllm_kv_admission_headroom_requests:floor",
         "floor(instance_engine:vllm_kv_free_blocks:sub / instance_engine:vllm_prompt_blocks:ceil)"),
        # floor((B - max(used, running * W)) / W); negative = oversubscribed, preemption ahead.
        ("instance_engine:vllm_safe_headroom_requests:floor",
         "floor(\n  (\n    instance_engine:vllm_kv_used_blocks:round + instance_engine:vllm_kv_free_blocks:sub\n"
         "    - (\n      (instance_engine:vllm_kv_used_blocks:round\n"
         f"        > {demand})\n"
         f"      or {demand}\n"
         "    )\n  )\n  / instance_engine:vllm_worst_case_blocks_per_request:ceil\n)"),
        ("instance_engine:vllm_num_preemptions:rate1m", f"sum by ({by}) (rate(vllm:num_preemptions_total{s}[1m]))"),
        ("instance_engine:vllm_num_preemptions:rate5m", f"sum by ({by}) (rate(vllm:num_preemptions_total{s}[5m]))"),
        ("instance_engine:vllm_engine_steps:rate2m",
         f"sum by ({by}) (rate(vllm:iteration_tokens_total_count{s}[2m]))"),
        # The sidecar's false-full condition from raw data: requests wait, usage < full_usage, the next profile
        # prompt fits in free blocks, and no preemption in the last minute. The alert's `for:` is the hold time.
        ("instance_engine:vllm_kv_false_full:bool",
         "(instance_engine:vllm_num_requests_waiting:max > bool 0)\n"
         f"* (instance_engine:vllm_kv_usage_ratio:max < bool {cfg.full_usage})\n"
         "* (instance_engine:vllm_kv_free_blocks:sub >= bool instance_engine:vllm_prompt_blocks:ceil)\n"
         "* (instance_engine:vllm_num_preemptions:rate1m == bool 0)"),
        # Truly full: requests wait and the pool is what holds them (high usage or the next prompt does not fit).
        ("instance_engine:vllm_kv_full:bool",
         "(instance_engine:vllm_num_requests_waiting:max > bool 0)\n"
         "* (\n  (\n"
         f"    (instance_engine:vllm_kv_usage_ratio:max >= bool {cfg.full_usage})\n"
         "    + (instance_engine:vllm_kv_free_blocks:sub < bool instance_engine:vllm_prompt_blocks:ceil)\n"
         "  ) > bool 0\n)"),
    ]
    fleet_by = ", ".join(lbl for lbl in cfg.pod_labels if lbl in ("cluster", "namespace")) + ", model_name"
    r += [
        ("model_name:vllm_kv_capacity_blocks:sum",
         f"sum by ({fleet_by}) (instance_engine:vllm_kv_used_blocks:round + instance_engine:vllm_kv_free_blocks:sub)"),
        ("model_name:vllm_kv_free_blocks:sum", f"sum by ({fleet_by}) (instance_engine:vllm_kv_free_blocks:sub)"),
        ("model_name:vllm_num_requests_waiting:sum",
         f"sum by ({fleet_by}) (instance_engine:vllm_num_requests_waiting:max)"),
        ("model_name:vllm_kv_false_full_engines:sum", f"sum by ({fleet_by}) (instance_engine:vllm_kv_false_full:bool)"),
        ("model_name:vllm_kv_full_engines:sum", f"sum by ({fleet_by}) (instance_engine:vllm_kv_full:bool)"),
        ("model_name:vllm_num_preemptions:rate5m",
         f"sum by ({fleet_by}) (instance_engine:vllm_num_preemptions:rate5m)"),
    ]
    return [{"record": name, "expr": expr} for name, expr in r]


# ---------------------------------------------------------------------------------------------------------------
# Alerts


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str  # may use {{ $labels.<name> }} only, so tests can render it


ENGINE = "{{ $labels.instance }} engine {{ $labels.engine }} ({{ $labels.model_name }})"


def alerts(cfg: Config) -> list[Alert]:
    s = cfg.sel()
    pct = round(cfg.full_usage * 100)
    a = [
        Alert("VLLMKVFalseFull", "instance_engine:vllm_kv_false_full:bool == 1", "5m", "warning",
              "vLLM requests wait although the KV cache has room (false-full).",
              f"{ENGINE}: requests have waited for 5 minutes while KV usage stayed under {pct} % and the next "
              "request's prompt fits in free blocks. Memory is not what holds them back: look at max_num_seqs slots, "
              "max_num_batched_tokens, deferred (LoRA/grammar) requests or a stuck scheduler; "
              "the sidecar's vllm_headroom_verdict names the cause."),
        Alert("VLLMKVCacheFull", "instance_engine:vllm_kv_full:bool == 1", "10m", "warning",
              "vLLM's KV cache is truly full: requests wait for blocks.",
              f"{ENGINE}: requests have waited for 10 minutes while KV usage is at or above {pct} % or the next "
              "prompt does not fit in free blocks. Add KV memory or replicas, or lower max_model_len / max_num_seqs."),
        Alert("VLLMPreemptionStorm", f"instance_engine:vllm_num_preemptions:rate5m > {cfg.preemption_storm_per_second}",
              "5m", "critical", "vLLM is preempting requests continuously (KV thrash).",
              f"{ENGINE}: more than {cfg.preemption_storm_per_second} preemptions per second over 5 minutes. "
              "Running requests outgrow the KV pool and are recomputed; latency and throughput collapse."),
        Alert("VLLMKVOversubscribed", "instance_engine:vllm_safe_headroom_requests:floor < 0", "15m", "warning",
              "Running vLLM requests cannot all reach max_tokens: preemption ahead.",
              f"{ENGINE}: running requests times worst-case blocks per request (p99 prompt + max_tokens) exceed "
              "the usable KV blocks. If they run to max_tokens vLLM will preempt. Lower max_num_seqs or max_tokens, "
              "or add KV memory."),
        Alert("VLLMSchedulerStuck",
              "instance_engine:vllm_num_requests_waiting:max > 0\nand\ninstance_engine:vllm_engine_steps:rate2m == 0",
              "5m", "critical", "vLLM has queued requests but makes no engine steps.",
              f"{ENGINE}: requests wait and the engine made no step for minutes (vllm:iteration_tokens_total_count "
              "flat). The engine is stuck or asleep; requests will time out."),
        Alert("VLLMKVBlockLeak",
              "instance_engine:vllm_kv_used_blocks:round > 0\n"
              "and instance_engine:vllm_num_requests_running:max == 0\n"
              "and instance_engine:vllm_num_requests_waiting:max == 0",
              "15m", "warning", "vLLM keeps KV blocks in use with no request running.",
              f"{ENGINE}: KV blocks have stayed in use for 15 minutes with nothing running or waiting. "
              "Blocks are leaking (they are not free for new requests); restart the engine and report it."),
        Alert("VLLMHeadroomSidecarDown", f"up{{{cfg.sidecar_up_selector}}} == 0", "5m", "warning",
              "The vllm-headroom sidecar is not scraped.",
              "Prometheus cannot scrape the vllm-headroom sidecar {{ $labels.instance }} (job {{ $labels.job }}): "
              "verdict, admission headroom and max_num_seqs panels are empty. Rules from vLLM's metrics still work."),
        Alert("VLLMHeadroomTargetDown", "vllm_headroom_up == 0", "3m", "critical",
              "The vllm-headroom sidecar cannot scrape its vLLM.",
              "The sidecar {{ $labels.instance }} (job {{ $labels.job }}) cannot scrape vLLM: vLLM is down, "
              "unreachable or returns a broken exposition. /readyz of the sidecar says why."),
        Alert("VLLMMetricsAbsent",
              f"(\n  up{{{cfg.vllm_up_selector}}} == 1\n  unless on (job, instance)\n"
              f"  vllm:num_requests_running{s}\n)\n"
              "or\n"
              '(\n  increase(vllm_headroom_scrape_errors_total{reason="no_vllm_metrics"}[5m]) > 0\n)',
              "10m", "warning", "vLLM answers but exports no engine metrics (--disable-log-stats?).",
              "{{ $labels.instance }} (job {{ $labels.job }}) is up but exports no vllm:* engine metrics. "
              "vLLM started with --disable-log-stats exports none: KV, queue and headroom are blind."),
    ]
    return [Alert(x.name, x.expr, cfg.for_.get(x.name, x.for_), x.severity, x.summary, x.description) for x in a]


def anchor(name: str) -> str:
    """GitHub's anchor of a `## <name>` heading."""
    return re.sub(r"[^a-z0-9_-]", "", name.lower())


def alert_rule(cfg: Config, a: Alert) -> dict[str, Any]:
    return {
        "alert": a.name,
        "expr": a.expr,
        "for": a.for_,
        "labels": {"severity": a.severity},
        "annotations": {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": f"{cfg.runbook_url}#{anchor(a.name)}",
        },
    }


def rule_groups(cfg: Config) -> dict[str, Any]:
    """The plain rules file: recording rules first, then the alerts that use them."""
    return {
        "groups": [
            {"name": "vllm-headroom.rules", "rules": recording_rules(cfg)},
            {"name": "vllm-headroom.alerts", "rules": [alert_rule(cfg, a) for a in alerts(cfg)]},
        ]
    }


def prometheus_rule(cfg: Config) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "vllm-headroom",
            "labels": {"app.kubernetes.io/name": "vllm-headroom", "app.kubernetes.io/component": "monitoring",
                       "prometheus": "k8s", "role": "alert-rules"},
        },
        "spec": rule_groups(cfg),
    }


def render(template: str, labels: dict[str, str]) -> str:
    """Prometheus' rendering of `{{ $labels.x }}` (missing labels render empty), for promtool expectations."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
