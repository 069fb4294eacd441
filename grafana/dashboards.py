"""The two Grafana dashboards, built with grafana-foundation-sdk (==0.0.21).

Queries use the recording rules of deploy/prometheus (computed from vLLM's own metrics) wherever raw vLLM data
allows, so those panels work without the sidecar; panels that need the sidecar say so in their description.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import stat, statetimeline, table, text, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    AxisPlacement,
    BigValueTextMode,
    DataSourceRef,
    LegendDisplayMode,
    LegendPlacement,
)
from grafana_foundation_sdk.models.dashboard import (
    DataTransformerConfig,
    DynamicConfigValue,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from .config import RUNBOOK_URL

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
NEEDS_SIDECAR = "Needs the vllm-headroom sidecar (vllm_headroom_* metrics)"
RULES = "From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed)"

# Selectors. vLLM's series and the rules carry vLLM's job/instance; the sidecar has its own instance.
V = 'namespace=~"$namespace",job=~"$job",instance=~"$instance",model_name=~"$model_name",engine=~"$engine"'
C = 'namespace=~"$namespace",job=~"$job",instance=~"$instance",engine=~"$engine"'  # cache_config_info: no model_name
H = 'namespace=~"$namespace",instance=~"$sidecar",model_name=~"$model_name",engine=~"$engine"'
F = 'namespace=~"$namespace",job=~"$job",model_name=~"$model_name"'  # fleet


def q(expr: str, legend: str = "__auto", ref: str = "A", instant: bool = False) -> prom.Dataquery:
    d = prom.Dataquery().expr(expr).legend_format(legend).ref_id(ref)
    if instant:
        d = d.instant().format(PromQueryFormat.TABLE)
    return d


def _var(name: str, label: str, query: str, description: str, all_value: str = ".*") -> dash.QueryVariable:
    return (dash.QueryVariable(name).label(label).description(description).datasource(DS).query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(all_value))


def _variables(fleet: bool) -> list[Any]:
    out: list[Any] = [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        _var("namespace", "Namespace", "label_values(vllm:num_requests_running, namespace)",
             "Kubernetes namespace of the vLLM pods (empty outside Kubernetes: All matches)."),
        _var("job", "Job", 'label_values(vllm:num_requests_running{namespace=~"$namespace"}, job)',
             "Prometheus job scraping vLLM."),
    ]
    if not fleet:
        out += [
            _var("instance", "Instance (pod)",
                 'label_values(vllm:num_requests_running{namespace=~"$namespace",job=~"$job"}, instance)',
                 "The vLLM API server (pod) scraped by Prometheus."),
        ]
    out.append(_var("model_name", "Model",
                    'label_values(vllm:num_requests_running{namespace=~"$namespace",job=~"$job"}, model_name)',
                    "model_name label of vLLM's series (served model name)."))
    if not fleet:
        out += [
            _var("engine", "Engine", 'label_values(vllm:num_requests_running{namespace=~"$namespace",'
                 'job=~"$job",instance=~"$instance"}, engine)', "Data-parallel engine index."),
            _var("sidecar", "Sidecar instance", 'label_values(vllm_headroom_up{namespace=~"$namespace"}, instance)',
                 "The vllm-headroom sidecar next to the selected pod (its own scrape address)."),
        ]
    return out


def _stat(title: str, description: str, unit: str = "short") -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(DS).unit(unit).height(5).span(4)
            .reduce_options(_last()))


def _last() -> Any:
    from grafana_foundation_sdk.builders.common import ReduceDataOptions

    return ReduceDataOptions().calcs(["lastNotNull"]).values(False)


def _legend() -> VizLegendOptions:
    return VizLegendOptions().display_mode(LegendDisplayMode.TABLE).placement(LegendPlacement.BOTTOM).show_legend(True)


def _ts(title: str, description: str, unit: str = "short", span: int = 12, height: int = 8) -> timeseries.Panel:
    return (timeseries.Panel().title(title).description(description).datasource(DS).unit(unit).height(height)
            .span(span).legend(_legend()))


def _yes_no() -> list[Any]:
    return [ValueMap({"0": ValueMappingResult(text="no", color="green"),
                      "1": ValueMappingResult(text="YES", color="red")})]


def _merge_table(title: str, description: str, span: int = 24, height: int = 8) -> table.Panel:
    return (table.Panel().title(title).description(description).datasource(DS).height(height).span(span)
            .with_transformation(DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(DataTransformerConfig(id_val="organize", options={
                "excludeByName": {"Time": True}, "renameByName": {}})))


def admission() -> dash.Dashboard:
    d = (dash.Dashboard("vLLM / KV admission").uid("vllm-kv-admission")
         .description("Why vLLM requests wait: KV usage as the panel shows it next to real admission headroom.")
         .tags(["vllm", "vllm-headroom", "kv-cache"]).refresh("30s").time("now-1h", "now").timezone("browser")
         .link(dash.DashboardLink("Runbook").type("link").url(RUNBOOK_URL).target_blank(True))
         .link(dash.DashboardLink("vLLM / KV fleet").type("dashboards").tags(["vllm-headroom"]).as_dropdown(False)
               .include_vars(True).keep_time(True)))
    for v in _variables(fleet=False):
        d = d.with_variable(v)

    d = d.with_row(dash.Row("Now"))
    d = d.with_panel(
        _stat("Verdict", f"Why requests wait now, by the sidecar's verdict. {NEEDS_SIDECAR}.")
        .with_target(q(f"max by (verdict) (vllm_headroom_verdict{{{H}}}) > 0", "{{verdict}}"))
        .text_mode(BigValueTextMode.NAME).color_mode("background"))
    d = d.with_panel(
        _stat("False-full", f"Requests wait while the KV cache has room. {RULES}; the sidecar's held flag is "
              "vllm_headroom_false_full.")
        .with_target(q(f"max(instance_engine:vllm_kv_false_full:bool{{{V}}})", "false-full"))
        .mappings(_yes_no()).color_mode("background"))
    d = d.with_panel(
        _stat("Admission headroom", "Requests vLLM would admit now: min(max_num_seqs − running, floor(free / prompt "
              f"blocks)). {NEEDS_SIDECAR} (max_num_seqs is in no vLLM metric).", "short")
        .with_target(q(f"min(vllm_headroom_admission_headroom_requests{{{H}}})", "admission headroom")))
    d = d.with_panel(
        _stat("Panel usage vs effective usage", "KV usage as vLLM reports it (panel) and the share of the pool a "
              f"new worst-case request cannot have (effective). Panel: vLLM's metric; effective: {NEEDS_SIDECAR}.",
              "percentunit").min(0).max(1)
        .with_target(q(f"max(vllm:kv_cache_usage_perc{{{V}}})", "panel", "A"))
        .with_target(q(f"max(vllm_headroom_effective_usage_ratio{{{H}}})", "effective", "B")))
    d = d.with_panel(
        _stat("max_num_seqs slots used", f"Running requests / max_num_seqs. {NEEDS_SIDECAR} (max_num_seqs comes from "
              "vLLM's command line).", "percentunit").min(0).max(1)
        .with_target(q(f"sum(vllm_headroom_requests_running{{{H}}}) / sum(vllm_headroom_max_num_seqs{{{H}}})",
                       "slots used")))
    d = d.with_panel(
        _stat("Waiting requests", "vllm:num_requests_waiting (vLLM's own metric).")
        .with_target(q(f"sum(vllm:num_requests_waiting{{{V}}})", "waiting")))

    d = d.with_row(dash.Row("What the panel says vs what admission sees"))
    main = (_ts("KV usage, waiting requests, worst-case blocks vs free blocks",
                "One time axis: KV usage as the usual panel shows it (right axis, %), requests waiting, free blocks "
                "and the worst-case blocks one request holds (left axis), and headroom in worst-case requests "
                f"(right axis). {RULES}.", "short", 24, 10)
            .axis_label("requests · blocks")
            .with_target(q(f"max by (instance, engine) (vllm:kv_cache_usage_perc{{{V}}})",
                           "KV usage (panel) {{instance}}/{{engine}}", "A"))
            .with_target(q(f"max by (instance, engine) (vllm:num_requests_waiting{{{V}}})",
                           "waiting {{instance}}/{{engine}}", "B"))
            .with_target(q(f"max by (instance, engine) (instance_engine:vllm_kv_free_blocks:sub{{{V}}})",
                           "free blocks {{instance}}/{{engine}}", "C"))
            .with_target(q("max by (instance, engine) "
                           f"(instance_engine:vllm_worst_case_blocks_per_request:ceil{{{V}}})",
                           "worst-case blocks/request {{instance}}/{{engine}}", "D"))
            .with_target(q(f"min by (instance, engine) (instance_engine:vllm_safe_headroom_requests:floor{{{V}}})",
                           "headroom (requests) {{instance}}/{{engine}}", "E"))
            .override_by_query("A", [DynamicConfigValue("unit", "percentunit"), DynamicConfigValue("min", 0),
                                     DynamicConfigValue("max", 1),
                                     DynamicConfigValue("custom.axisPlacement", AxisPlacement.RIGHT),
                                     DynamicConfigValue("custom.axisLabel", "KV usage (panel)")])
            .override_by_query("E", [DynamicConfigValue("custom.axisPlacement", AxisPlacement.RIGHT),
                                     DynamicConfigValue("unit", "none"),
                                     DynamicConfigValue("custom.axisLabel", "headroom (requests)"),
                                     DynamicConfigValue("custom.lineStyle", {"fill": "dash", "dash": [10, 10]})]))
    d = d.with_panel(main)

    d = d.with_row(dash.Row("Over time"))
    d = d.with_panel(
        statetimeline.Panel().title("Verdict over time").datasource(DS).height(6).span(24)
        .description(f"The sidecar's verdict per scrape (ok, kv_full, slots_full, preempting, head_of_line, deferred, "
                     f"stuck, leak, target_down). {NEEDS_SIDECAR}.")
        .with_target(q(f"max by (verdict) (vllm_headroom_verdict{{{H}}}) > 0", "{{verdict}}"))
        .show_value("never"))
    d = d.with_panel(
        _ts("Preemptions / s", "rate(vllm:num_preemptions_total) per engine (vLLM's own metric). Sustained "
            "preemption = running requests outgrow the KV pool.", "short", 12)
        .with_target(q(f"sum by (instance, engine) (rate(vllm:num_preemptions_total{{{V}}}[$__rate_interval]))",
                       "{{instance}}/{{engine}}")))
    d = d.with_panel(
        _ts("Request profile (tokens)", "Quantiles of finished requests' prompt and max_tokens (vLLM's histograms, "
            "observed at finish), and the bucket-bound p99 the worst-case math uses. " + RULES + ".", "short", 12)
        .with_target(q("histogram_quantile(0.5, sum by (le) (rate(vllm:request_prompt_tokens_bucket{"
                       f"{V}}}[$__rate_interval])))", "prompt p50", "A"))
        .with_target(q("histogram_quantile(0.99, sum by (le) (rate(vllm:request_prompt_tokens_bucket{"
                       f"{V}}}[$__rate_interval])))", "prompt p99", "B"))
        .with_target(q("histogram_quantile(0.5, sum by (le) (rate(vllm:request_params_max_tokens_bucket{"
                       f"{V}}}[$__rate_interval])))", "max_tokens p50", "C"))
        .with_target(q("histogram_quantile(0.99, sum by (le) (rate(vllm:request_params_max_tokens_bucket{"
                       f"{V}}}[$__rate_interval])))", "max_tokens p99", "D"))
        .with_target(q(f"max(instance_engine:vllm_request_prompt_tokens:bucket_quantile{{{V}}})",
                       "prompt (worst-case profile)", "E"))
        .with_target(q(f"max(instance_engine:vllm_request_max_tokens:bucket_quantile{{{V}}})",
                       "max_tokens (worst-case profile)", "F")))

    d = d.with_row(dash.Row("Capacity ledger"))
    key = "model_name, engine"
    ledger = _merge_table(
        "Capacity ledger",
        "Per engine: usable blocks, block size, tokens, max_model_len, max_num_seqs, max concurrency "
        "at the worst case W and at max_model_len, and where each config value came from (flag, vllm_args, cmdline, "
        f"cache_config_info, v1_models). {NEEDS_SIDECAR}: max_model_len, max_num_seqs and provenance are in no vLLM "
        "metric. Capacity alone from vLLM's metrics: instance_engine:vllm_kv_capacity_blocks:usable.")
    for ref, (metric, extra) in zip("ABCDEFG", [
        ("vllm_headroom_kv_capacity_blocks", ""), ("vllm_headroom_block_size_tokens", ""),
        ("vllm_headroom_kv_capacity_tokens", ""), ("vllm_headroom_max_num_seqs", ""),
        ("vllm_headroom_worst_case_blocks_per_request", ',basis="profile"'),
        ("vllm_headroom_max_concurrency_requests", ',basis="profile"'),
        ("vllm_headroom_max_concurrency_requests", ',basis="max_model_len"'),
    ], strict=True):
        ledger = ledger.with_target(q(f"max by ({key}) ({metric}{{{H}{extra}}})", ref, ref, instant=True))
    ledger = ledger.with_target(q(
        f"max by ({key}, max_model_len, max_model_len_source, max_num_seqs_source, num_gpu_blocks_source, "
        f"block_size_source) (vllm_headroom_config_info{{{H}}})", "H", "H", instant=True))
    ledger = ledger.with_transformation(DataTransformerConfig(id_val="organize", options={
        "excludeByName": {"Value #H": True},
        "renameByName": {"Value #A": "usable blocks", "Value #B": "block size", "Value #C": "tokens",
                         "Value #D": "max_num_seqs", "Value #E": "W (blocks/request)",
                         "Value #F": "max concurrency at W", "Value #G": "max concurrency at max_model_len"}}))
    d = d.with_panel(ledger)
    d = d.with_panel(
        text.Panel().title("Runbook").height(5).span(24)
        .content(f"Alerts and what to do: [runbook]({RUNBOOK_URL}). False-full: [{RUNBOOK_URL}#vllmkvfalsefull]"
                 f"({RUNBOOK_URL}#vllmkvfalsefull). Panels marked *needs the sidecar* stay empty without "
                 "vllm-headroom next to the pod; everything else comes from vLLM's own metrics through the "
                 "recording rules in `deploy/prometheus/`.")
        .mode("markdown"))
    return d


def fleet() -> dash.Dashboard:
    d = (dash.Dashboard("vLLM / KV fleet").uid("vllm-kv-fleet")
         .description("KV admission signals across every vLLM pod, from the recording rules; worst pods first.")
         .tags(["vllm", "vllm-headroom", "kv-cache"]).refresh("1m").time("now-6h", "now").timezone("browser")
         .link(dash.DashboardLink("vLLM / KV admission").type("dashboards").tags(["vllm-headroom"])
               .include_vars(True).keep_time(True))
         .link(dash.DashboardLink("Runbook").type("link").url(RUNBOOK_URL).target_blank(True)))
    for v in _variables(fleet=True):
        d = d.with_variable(v)
    d = d.with_row(dash.Row("Fleet now"))
    d = d.with_panel(_stat("Engines false-full", f"Engines whose requests wait while the KV cache has room. {RULES}.")
                     .with_target(q(f"sum(instance_engine:vllm_kv_false_full:bool{{{F}}})", "false-full")))
    d = d.with_panel(_stat("Engines KV-full", f"Engines whose requests wait for KV blocks. {RULES}.")
                     .with_target(q(f"sum(instance_engine:vllm_kv_full:bool{{{F}}})", "kv-full")))
    d = d.with_panel(_stat("Free KV blocks", f"Free over usable blocks, all engines. {RULES}.", "percentunit")
                     .with_target(q(f"sum(instance_engine:vllm_kv_free_blocks:sub{{{F}}}) / "
                                    f"(sum(instance_engine:vllm_kv_free_blocks:sub{{{F}}}) + "
                                    f"sum(instance_engine:vllm_kv_used_blocks:round{{{F}}}))", "free")))
    d = d.with_panel(_stat("Waiting requests", "Sum of vllm:num_requests_waiting.")
                     .with_target(q(f"sum(instance_engine:vllm_num_requests_waiting:max{{{F}}})", "waiting")))
    d = d.with_panel(_stat("Preemptions / s", f"All engines. {RULES}.")
                     .with_target(q(f"sum(instance_engine:vllm_num_preemptions:rate5m{{{F}}})", "preemptions/s")))
    d = d.with_panel(_stat("Engines", "Engines reporting vllm:num_requests_running.")
                     .with_target(q(f"count(instance_engine:vllm_num_requests_running:max{{{F}}})", "engines")))

    d = d.with_row(dash.Row("Worst pods first"))
    key = "namespace, instance, model_name, engine"
    worst = _merge_table("Engines by safe headroom (worst first)",
                         "One row per engine, sorted by safe headroom (requests that still fit if all run to "
                         f"max_tokens; negative = preemption ahead). {RULES}.", height=10)
    cols = [("instance_engine:vllm_safe_headroom_requests:floor", "safe headroom"),
            ("instance_engine:vllm_kv_false_full:bool", "false-full"),
            ("instance_engine:vllm_kv_usage_ratio:max", "KV usage (panel)"),
            ("instance_engine:vllm_num_requests_waiting:max", "waiting"),
            ("instance_engine:vllm_kv_free_blocks:sub", "free blocks"),
            ("instance_engine:vllm_worst_case_blocks_per_request:ceil", "W (blocks/request)"),
            ("instance_engine:vllm_num_preemptions:rate5m", "preemptions/s")]
    for ref, (metric, _name) in zip("ABCDEFG", cols, strict=True):
        worst = worst.with_target(q(f"max by ({key}) ({metric}{{{F}}})", ref, ref, instant=True))
    worst = (worst.with_transformation(DataTransformerConfig(id_val="organize", options={
        "renameByName": {f"Value #{ref}": name for ref, (_m, name) in zip("ABCDEFG", cols, strict=True)}}))
        .with_transformation(DataTransformerConfig(id_val="sortBy", options={
            "sort": [{"field": "safe headroom", "desc": False}]})))
    d = d.with_panel(worst)

    d = d.with_row(dash.Row("Over time"))
    d = d.with_panel(_ts("False-full engines by model", f"{RULES}.", "short", 12)
                     .with_target(q(f"sum by (model_name) (instance_engine:vllm_kv_false_full:bool{{{F}}})",
                                    "{{model_name}}")))
    d = d.with_panel(_ts("Lowest safe headroom (10 engines)", f"Worst engines first. {RULES}.", "short", 12)
                     .with_target(q(f"bottomk(10, instance_engine:vllm_safe_headroom_requests:floor{{{F}}})",
                                    "{{instance}}/{{engine}}")))
    d = d.with_panel(_ts("Most waiting requests (10 engines)", "vllm:num_requests_waiting.", "short", 12)
                     .with_target(q(f"topk(10, instance_engine:vllm_num_requests_waiting:max{{{F}}})",
                                    "{{instance}}/{{engine}}")))
    d = d.with_panel(_ts("Free KV blocks by model", f"{RULES}.", "short", 12)
                     .with_target(q(f"sum by (model_name) (model_name:vllm_kv_free_blocks:sum{{{F}}})",
                                    "free {{model_name}}", "A"))
                     .with_target(q(f"sum by (model_name) (model_name:vllm_kv_capacity_blocks:sum{{{F}}})",
                                    "usable {{model_name}}", "B")))
    d = d.with_panel(_ts("Preemptions / s (10 engines)", f"{RULES}.", "short", 12)
                     .with_target(q(f"topk(10, instance_engine:vllm_num_preemptions:rate5m{{{F}}})",
                                    "{{instance}}/{{engine}}")))
    d = d.with_panel(_ts("Engines false-full or KV-full", f"{RULES}.", "short", 12)
                     .with_target(q(f"sum(model_name:vllm_kv_false_full_engines:sum{{{F}}})", "false-full", "A"))
                     .with_target(q(f"sum(model_name:vllm_kv_full_engines:sum{{{F}}})", "kv-full", "B")))
    return d


def encode(d: dash.Dashboard) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    for i, panel in enumerate(out["panels"], start=1):  # the SDK leaves ids unset (rows get 0): make them unique
        panel["id"] = i
    return out


def dashboards() -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON model."""
    return {uid: encode(b) for uid, b in (("vllm-kv-admission", admission()), ("vllm-kv-fleet", fleet()))}
