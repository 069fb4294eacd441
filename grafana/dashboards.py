"""The two Grafana dashboards, built with grafana-foundation-sdk (==0.0.21).

Queries use the recording rules of deploy/prometheus (computed from vLLM's own metrics) wherever raw vLLM data
allows, so those panels work without the sidecar; panels that need the sidecar say so in their description.
One pod picker (`pod`) filters vLLM's series and the sidecar's alike (they share the pod's labels in Kubernetes);
the variables are chained cluster → namespace → job → pod → model_name → engine, each listing only what the ones
before it leave. A pod scraped by two jobs (its own PodMonitor and a cluster-wide scrape) counts once: every sum,
count, topk and histogram first takes one series per engine over the identity without `job` (`per_engine`), as
the per-model recording rules do. Legends name `namespace/pod`, or `host:port` outside Kubernetes (`who`).
JSON is written as schemaVersion 39, Grafana 11.0's.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import stat, statetimeline, table, text, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions, VizTooltipOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    AxisPlacement,
    BigValueColorMode,
    BigValueTextMode,
    DataSourceRef,
    LegendDisplayMode,
    LegendPlacement,
    TooltipDisplayMode,
    VisibilityMode,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataTransformerConfig,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.text import TextMode

from exporter.engines.vllm import VLLM
from exporter.pipeline import replicas
from exporter.pipeline.catalogue import COLOUR_BY_VERDICT

from .config import DEFAULT, Config

# vLLM's metric names, from the one table of the vLLM wing (exporter/engines/vllm/metrics.py), by role.
N = VLLM.names

SCHEMA_VERSION = 39  # Grafana 11.0, the oldest the README promises
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
NEEDS_SIDECAR = "Needs the vllm-headroom sidecar (vllm_headroom_* metrics)"
RULES = "From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed)"

# Selectors. vLLM's series and the rules carry the pod's identity; the sidecar's series the same pod labels.
POD = 'cluster=~"$cluster",namespace=~"$namespace",pod=~"$pod"'
V = POD + ',job=~"$job",model_name=~"$model_name",engine=~"$engine"'
H = POD + ',model_name=~"$model_name",engine=~"$engine"'
F = 'cluster=~"$cluster",namespace=~"$namespace",job=~"$job",model_name=~"$model_name"'  # fleet, instance_engine:
FM = 'cluster=~"$cluster",namespace=~"$namespace",model_name=~"$model_name"'  # model_name: rules carry no job
# `who` label of a series: "namespace/pod" in Kubernetes, the instance (host:port) where there is no pod label.
# label_join gives "namespace/pod/instance" (none of the three holds a "/"); the regex keeps "namespace/pod" (or
# "pod") when there is a pod and the instance when there is none (Prometheus anchors it; the unmatched group is "").
WHO_REGEX = "[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*"
LEGEND = "{{who}} {{model_name}} engine {{engine}}"


def who(expr: str) -> str:
    """`expr` with the `who` label legends and tables name a series by (WHO_REGEX)."""
    return (f'label_replace(label_join({expr}, "who", "/", "namespace", "pod", "instance"), "who", "$1$2", "who", '
            f'"{WHO_REGEX}")')


def per_engine(cfg: Config, series: str, *extra: str) -> str:
    """One series per engine however many jobs scrape its pod: the max over the identity without `job` (and
    `extra` labels, e.g. `le`). The sidecar's `target` label (one sidecar watching several servers) is kept too."""
    return f"max by ({cfg.dedup('target', 'model_name', 'engine', *extra)}) ({series})"


def quantile(cfg: Config, phi: float, histogram: str, sel: str) -> str:
    """histogram_quantile over the selected engines, each counted once."""
    rate = f"rate({histogram}_bucket{{{sel}}}[$__rate_interval])"
    return f"histogram_quantile({phi:g}, sum by (le) ({per_engine(cfg, rate, 'le')}))"


# The colour of each verdict by severity, from the verdict catalogue (exporter/pipeline/catalogue.py), in its order.
VERDICT_COLORS = COLOUR_BY_VERDICT
# vllm_headroom_binding_limit{limit}: what binds a new worst-case request now.
LIMIT_COLORS = {"slots": "yellow", "blocks": "orange"}


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
    """Chained in this order: each lists the values of vLLM's series that the variables before it select."""
    chain = [
        ("cluster", "Cluster", "cluster label of a global view (Thanos, Mimir); none on one Prometheus: All matches."),
        ("namespace", "Namespace", "Kubernetes namespace of the vLLM pods (empty outside Kubernetes: All matches)."),
        ("job", "Job", "Prometheus job scraping vLLM; with All, a pod scraped by two jobs counts once."),
        ("pod", "Pod", "The vLLM pod; filters vLLM's series and its sidecar's alike (outside Kubernetes: All)."),
        ("model_name", "Model", "model_name label of vLLM's series (served model name)."),
        ("engine", "Engine", "Data-parallel engine index."),
    ]
    if fleet:
        chain = [c for c in chain if c[0] not in ("pod", "engine")]
    out: list[Any] = [dash.DatasourceVariable("datasource").label("Data source").type("prometheus")]
    for i, (name, label, description) in enumerate(chain):
        sel = ",".join(f'{before}=~"${before}"' for before, _l, _d in chain[:i])
        out.append(_var(name, label, f"label_values({N.running}{{{sel}}}, {name})"
                        if sel else f"label_values({N.running}, {name})", description))
    return out


def _stat(title: str, description: str, unit: str = "short") -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(DS).unit(unit).height(5).span(4)
            .reduce_options(_last()))


def _last() -> ReduceDataOptions:
    return ReduceDataOptions().calcs(["lastNotNull"]).values(False)


def _legend() -> VizLegendOptions:
    return VizLegendOptions().display_mode(LegendDisplayMode.TABLE).placement(LegendPlacement.BOTTOM).show_legend(True)


def _ts(title: str, description: str, unit: str = "short", span: int = 12, height: int = 8) -> timeseries.Panel:
    return (timeseries.Panel().title(title).description(description).datasource(DS).unit(unit).height(height)
            .span(span).legend(_legend()).tooltip(VizTooltipOptions().mode(TooltipDisplayMode.MULTI)))


def _thresholds(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
    return dash.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(value=v, color=c) for v, c in steps])


def _verdicts(colors: dict[str, str] = VERDICT_COLORS) -> list[Any]:
    results = {v: ValueMappingResult(text=v, color=c, index=i) for i, (v, c) in enumerate(colors.items())}
    return [ValueMap(results)]


def _by_name(panel: Any, colors: dict[str, str] = VERDICT_COLORS) -> Any:
    """The verdict series carry value 1 and the verdict as their name (legend): colour each by name as well, since
    a value map only sees the 1."""
    for name, c in colors.items():
        panel = panel.override_by_name(name, [DynamicConfigValue("color", {"mode": "fixed", "fixedColor": c})])
    return panel


def _yes_no() -> list[Any]:
    return [ValueMap({"0": ValueMappingResult(text="no", color="green"),
                      "1": ValueMappingResult(text="YES", color="red")})]


def _merge_table(title: str, description: str, span: int = 24, height: int = 8) -> table.Panel:
    return (table.Panel().title(title).description(description).datasource(DS).height(height).span(span)
            .with_transformation(DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(DataTransformerConfig(id_val="organize", options={
                "excludeByName": {"Time": True}, "renameByName": {}})))


def admission(cfg: Config = DEFAULT) -> dash.Dashboard:
    url = cfg.runbook_url
    full = cfg.full_usage

    def one(series: str) -> str:
        return per_engine(cfg, series)

    def line(series: str) -> str:
        return who(one(series))
    d = (dash.Dashboard("vLLM / KV admission").uid("vllm-kv-admission")
         .description("Why vLLM requests wait: KV usage as the panel shows it next to real admission headroom.")
         .tags(["vllm", "vllm-headroom", "kv-cache"]).refresh("30s").time("now-1h", "now").timezone("browser")
         .tooltip(DashboardCursorSync.CROSSHAIR)
         .link(dash.DashboardLink("Runbook").type(DashboardLinkType.LINK).url(url).target_blank(True))
         .link(dash.DashboardLink("vLLM / KV fleet").type(DashboardLinkType.DASHBOARDS).tags(["vllm-headroom"])
               .as_dropdown(False)
               .include_vars(True).keep_time(True)))
    for v in _variables(fleet=False):
        d = d.with_variable(v)

    d = d.with_row(dash.Row("Now"))
    d = d.with_panel(
        _by_name(_stat("Verdict", "Why requests wait now, by the sidecar's verdict (colour by severity). "
                       f"{NEEDS_SIDECAR}.")
        .with_target(q(f"max by (verdict) (vllm_headroom_verdict{{{H}}}) > 0", "{{verdict}}"))
        .text_mode(BigValueTextMode.NAME).color_mode(BigValueColorMode.BACKGROUND).mappings(_verdicts())))
    d = d.with_panel(
        _stat("False-full", f"Requests wait while the KV cache has room. {RULES}; the sidecar's held flag is "
              "vllm_headroom_false_full.")
        .with_target(q(f"max(instance_engine:vllm_kv_false_full:bool{{{V}}})", "false-full"))
        .mappings(_yes_no()).color_mode(BigValueColorMode.BACKGROUND))
    d = d.with_panel(
        _stat("Admission headroom", "Requests vLLM would admit now: min(max_num_seqs − running, floor(free / prompt "
              f"blocks)). {NEEDS_SIDECAR} (max_num_seqs is in no vLLM metric).", "short")
        .with_target(q(f"min(vllm_headroom_admission_headroom_requests{{{H}}})", "admission headroom"))
        .thresholds(_thresholds((None, "red"), (1, "yellow"), (4, "green"))).color_mode(BigValueColorMode.BACKGROUND))
    d = d.with_panel(
        _stat("KV usage (panel) vs unreachable pool", "KV usage as vLLM reports it and the share of the pool a "
              "new worst-case request cannot get now (vllm_headroom_unreachable_pool_ratio, which replaces the "
              "deprecated effective_usage_ratio), with the limit that binds (slots: max_num_seqs; blocks: KV). "
              "1 with slots binding is not a full KV cache. Threshold at the full-usage setting. "
              f"Panel: vLLM's metric; unreachable and binding limit: {NEEDS_SIDECAR}.", "percentunit").min(0).max(1)
        .with_target(q(f"max(instance_engine:vllm_kv_usage_ratio:max{{{V}}})", "panel", "A"))
        .with_target(q(f"max(vllm_headroom_unreachable_pool_ratio{{{H}}})", "unreachable", "B"))
        .with_target(q(f"max by (limit) (vllm_headroom_binding_limit{{{H}}}) > 0", "binding limit: {{limit}}", "C"))
        .override_by_query("C", [DynamicConfigValue("unit", "none"), DynamicConfigValue("mappings", [ValueMap({
            "1": ValueMappingResult(text="binds", color="blue")})])])
        .thresholds(_thresholds((None, "green"), (full, "red"))))
    d = d.with_panel(
        _stat("max_num_seqs slots used", f"Running requests / max_num_seqs. {NEEDS_SIDECAR} (max_num_seqs comes from "
              "vLLM's command line).", "percentunit").min(0).max(1)
        .with_target(q(f"sum({one(f'vllm_headroom_requests_running{{{H}}}')}) / "
                       f"sum({one(f'vllm_headroom_max_num_seqs{{{H}}}')})", "slots used"))
        .thresholds(_thresholds((None, "green"), (0.9, "orange"), (1, "red"))))
    d = d.with_panel(
        _stat("Waiting requests", f"{N.waiting} (vLLM's own metric).")
        .with_target(q(f"sum({one(f'instance_engine:vllm_num_requests_waiting:max{{{V}}}')})", "waiting"))
        .thresholds(_thresholds((None, "green"), (1, "orange"))))

    d = d.with_row(dash.Row("What the panel says vs what admission sees"))
    main = (_ts("Waiting vs admission headroom vs worst-case blocks per request, KV usage %",
                "Left axis, counts that stay readable on any pool size: requests waiting, admission headroom "
                f"(requests vLLM would admit now; {NEEDS_SIDECAR}), worst-case blocks one request holds and safe "
                "headroom in requests. Right axis: KV usage as the usual panel shows it, with the full-usage "
                f"threshold. Free blocks are in their own panel below. {RULES}.", "short", 24, 10)
            .axis_label("requests · blocks per request")
            .with_target(q(line(f"instance_engine:vllm_kv_usage_ratio:max{{{V}}}"), "KV usage (panel) " + LEGEND, "A"))
            .with_target(q(line(f"instance_engine:vllm_num_requests_waiting:max{{{V}}}"), "waiting " + LEGEND, "B"))
            .with_target(q(line(f"vllm_headroom_admission_headroom_requests{{{H}}}"),
                           "admission headroom " + LEGEND, "C"))
            .with_target(q(line(f"instance_engine:vllm_worst_case_blocks_per_request:ceil{{{V}}}"),
                           "worst-case blocks/request " + LEGEND, "D"))
            .with_target(q(line(f"instance_engine:vllm_safe_headroom_requests:floor{{{V}}}"),
                           "safe headroom (requests) " + LEGEND, "E"))
            .override_by_query("A", [DynamicConfigValue("unit", "percentunit"), DynamicConfigValue("min", 0),
                                     DynamicConfigValue("max", 1),
                                     DynamicConfigValue("custom.axisPlacement", AxisPlacement.RIGHT),
                                     DynamicConfigValue("custom.axisLabel", "KV usage (panel)"),
                                     DynamicConfigValue("custom.thresholdsStyle", {"mode": "dashed"}),
                                     DynamicConfigValue("thresholds", {"mode": "absolute", "steps": [
                                         {"value": None, "color": "green"}, {"value": full, "color": "red"}]})])
            .override_by_query("E", [DynamicConfigValue("custom.lineStyle", {"fill": "dash", "dash": [10, 10]})]))
    d = d.with_panel(main)
    # The capacity rule carries no model_name (vLLM's cache_config_info has none): not filtered by model.
    usable = f'instance_engine:vllm_kv_capacity_blocks:usable{{{POD},job=~"$job",engine=~"$engine"}}'
    d = d.with_panel(
        _ts("Free and usable KV blocks", f"Free blocks next to the usable pool, per engine. {RULES}.", "short", 12)
        .with_target(q(line(f"instance_engine:vllm_kv_free_blocks:sub{{{V}}}"), "free " + LEGEND, "A"))
        .with_target(q(line(usable), "usable {{who}} engine {{engine}}", "B")))
    d = d.with_panel(
        _ts("Queue time and time to first token (p50, p99)", "The symptom beside the cause: how long finished "
            f"requests waited in vLLM's queue ({N.queue_time_hist}) and their time to first token "
            f"({N.ttft_hist}). Both are observed when a request finishes or starts streaming.",
            "s", 12)
        .with_target(q(quantile(cfg, 0.5, N.queue_time_hist, V), "queue time p50", "A"))
        .with_target(q(quantile(cfg, 0.99, N.queue_time_hist, V), "queue time p99", "B"))
        .with_target(q(quantile(cfg, 0.5, N.ttft_hist, V), "TTFT p50", "C"))
        .with_target(q(quantile(cfg, 0.99, N.ttft_hist, V), "TTFT p99", "D")))

    d = d.with_row(dash.Row("Over time"))
    d = d.with_panel(
        _by_name(statetimeline.Panel().title("Verdict over time").datasource(DS).height(6).span(24)
        .description(f"The sidecar's verdict per scrape ({', '.join(VERDICT_COLORS)}), coloured by severity; "
                     f"below it, the limit that binds a new request (slots or blocks). {NEEDS_SIDECAR}.")
        .with_target(q(f"max by (verdict) (vllm_headroom_verdict{{{H}}}) > 0", "{{verdict}}"))
        .with_target(q(f"max by (limit) (vllm_headroom_binding_limit{{{H}}}) > 0", "{{limit}}", "B"))
        .mappings(_verdicts()).show_value(VisibilityMode.NEVER), {**VERDICT_COLORS, **LIMIT_COLORS}))
    d = d.with_panel(
        _ts("Preemptions per finished request", "vLLM's preemptions over finished requests (5 m; over running "
            f"requests while none finishes): a ratio, so it means the same at 0.2 and at 50 requests/s. {RULES}.",
            "percentunit", 12)
        .with_target(q(line(f"instance_engine:vllm_preemptions_per_request:ratio5m{{{V}}}"), LEGEND))
        .thresholds(_thresholds((None, "green"), (cfg.preemption_ratio, "red"))))
    d = d.with_panel(
        _ts("Request profile (tokens)", "Quantiles of finished requests' prompt and max_tokens (vLLM's histograms, "
            "observed at finish), and the bucket-bound p99 the worst-case math uses. " + RULES + ".", "short", 12)
        .with_target(q(quantile(cfg, 0.5, N.prompt_hist, V), "prompt p50", "A"))
        .with_target(q(quantile(cfg, 0.99, N.prompt_hist, V), "prompt p99", "B"))
        .with_target(q(quantile(cfg, 0.5, N.max_tokens_hist, V), "max_tokens p50", "C"))
        .with_target(q(quantile(cfg, 0.99, N.max_tokens_hist, V), "max_tokens p99", "D"))
        .with_target(q(f"max(instance_engine:vllm_request_prompt_tokens:bucket_quantile{{{V}}})",
                       "prompt (worst-case profile)", "E"))
        .with_target(q(f"max(instance_engine:vllm_request_max_tokens:bucket_quantile{{{V}}})",
                       "max_tokens (worst-case profile)", "F")))

    # The replica signal: one series per replica (sidecar target) and model, no engine label.
    rs = POD + ',model_name=~"$model_name"'
    basis = per_engine(cfg, f"vllm_headroom_replicas_needed_basis{{{rs}}}")
    held = per_engine(cfg, f'vllm_headroom_replicas_needed_basis{{conservative="true",{rs}}}')
    d = d.with_panel(
        _ts("Replicas needed (replica signal)",
            "What KEDA or an HPA at AverageValue 1 scales to (deploy/autoscaling, on the recording rule "
            f"model_name:vllm_headroom_replicas_needed:sum): ceil of the sum over the selected replicas of "
            f"{replicas.FORMULA}; beside it the replicas reporting it and those held at one because max_num_seqs is "
            f"unknown (state it to let them scale down). {NEEDS_SIDECAR}.", "short", 24)
        .with_target(q(f"ceil(sum by (model_name) ({per_engine(cfg, f'vllm_headroom_replicas_needed{{{rs}}}')}))",
                       "needed {{model_name}}", "A"))
        .with_target(q(f"count by (model_name) ({basis})", "replicas {{model_name}}", "B"))
        .with_target(q(f"sum by (model_name) ({held} or {basis} * 0)", "held {{model_name}}", "C")))

    d = d.with_row(dash.Row("Capacity ledger"))
    key = "who, model_name, engine"
    ledger = _merge_table(
        "Capacity ledger",
        "Per engine: usable blocks, block size, tokens, max_model_len, max_num_seqs, max concurrency "
        "at the worst case W and at max_model_len, the share of used blocks' token slots that hold no token (with its "
        "high bound; empty while nothing runs) and the prefix cache's hit share, and where each config value came "
        "from (flag, vllm_args, cmdline, "
        f"cache_config_info, v1_models). {NEEDS_SIDECAR}: max_model_len, max_num_seqs and provenance are in no vLLM "
        "metric. Capacity alone from vLLM's metrics: instance_engine:vllm_kv_capacity_blocks:usable.")
    for ref, (metric, extra) in zip("ABCDEFG", [
        ("vllm_headroom_kv_capacity_blocks", ""), ("vllm_headroom_block_size_tokens", ""),
        ("vllm_headroom_kv_capacity_tokens", ""), ("vllm_headroom_max_num_seqs", ""),
        ("vllm_headroom_worst_case_blocks_per_request", ',basis="profile"'),
        ("vllm_headroom_max_concurrency_requests", ',basis="profile"'),
        ("vllm_headroom_max_concurrency_requests", ',basis="max_model_len"'),
    ], strict=True):
        ledger = ledger.with_target(q(f"max by ({key}) ({who(f'{metric}{{{H}{extra}}}')})", ref, ref, instant=True))
    # Block waste beside the capacity it eats: the empty-slot share of used blocks (estimate and its high bound; absent
    # while nothing runs) and the prefix cache's hit share.
    for ref, metric in (("I", 'vllm_headroom_kv_block_waste_ratio{' + H + ',bound="estimate"}'),
                        ("J", 'vllm_headroom_kv_block_waste_ratio{' + H + ',bound="high"}'),
                        ("K", f"vllm_headroom_prefix_cache_hit_ratio{{{H}}}")):
        ledger = (ledger.with_target(q(f"max by ({key}) ({who(metric)})", ref, ref, instant=True))
                  .override_by_query(ref, [DynamicConfigValue("unit", "percentunit"),
                                           DynamicConfigValue("decimals", 1)]))
    ledger = ledger.with_target(q(
        f"max by ({key}, max_model_len, max_model_len_source, max_num_seqs_source, num_gpu_blocks_source, "
        f"block_size_source) ({who(f'vllm_headroom_config_info{{{H}}}')})", "H", "H", instant=True))
    ledger = ledger.with_transformation(DataTransformerConfig(id_val="organize", options={
        "excludeByName": {"Value #H": True},
        "renameByName": {"who": "pod (or instance)", "Value #A": "usable blocks", "Value #B": "block size",
                         "Value #C": "tokens", "Value #D": "max_num_seqs", "Value #E": "W (blocks/request)",
                         "Value #F": "max concurrency at W", "Value #G": "max concurrency at max_model_len",
                         "Value #I": "empty slots of used blocks", "Value #J": "empty slots, at most",
                         "Value #K": "prefix cache hits"}}))
    d = d.with_panel(ledger)
    waste = 'vllm_headroom_kv_block_waste_ratio{' + H + ',bound="%s"}'
    d = d.with_panel(
        _ts("Block waste and the prefix cache",
            "Share of the token slots in used KV blocks that hold no token, with its range: vLLM's usage gauge counts "
            "whole blocks, so a request one token into a block holds all of it (17-token prompts at block 16 fill "
            "2 blocks, 53 % of their slots). The share of prompt tokens the prefix cache served, and at most how much "
            "of a prompt a shared prefix loses at its last partial block (only full blocks are cached). "
            f"{NEEDS_SIDECAR}.", "percentunit", 24)
        .with_target(q(f"max({waste % 'estimate'})", "empty slots of used blocks", "A"))
        .with_target(q(f"max({waste % 'low'})", "empty slots, low", "B"))
        .with_target(q(f"max({waste % 'high'})", "empty slots, high", "C"))
        .with_target(q(f"max(vllm_headroom_prefix_cache_hit_ratio{{{H}}})", "prefix cache hits", "D"))
        .with_target(q(f'max(vllm_headroom_prefix_cache_boundary_loss_ratio{{{H},bound="high"}})',
                       "prefix lost at a partial block, at most", "E")))
    d = d.with_panel(
        text.Panel().title("Runbook").height(5).span(24)
        .content(f"Alerts and what to do: [runbook]({url}). False-full: [{url}#vllmkvfalsefull]"
                 f"({url}#vllmkvfalsefull). Panels marked *needs the sidecar* stay empty without "
                 "vllm-headroom next to the pod; everything else comes from vLLM's own metrics through the "
                 "recording rules in `deploy/prometheus/`.")
        .mode(TextMode.MARKDOWN))
    return d


def fleet(cfg: Config = DEFAULT) -> dash.Dashboard:
    d = (dash.Dashboard("vLLM / KV fleet").uid("vllm-kv-fleet")
         .description("KV admission signals across every vLLM pod, from the recording rules; worst pods first.")
         .tags(["vllm", "vllm-headroom", "kv-cache"]).refresh("1m").time("now-6h", "now").timezone("browser")
         .link(dash.DashboardLink("vLLM / KV admission").type(DashboardLinkType.DASHBOARDS).tags(["vllm-headroom"])
               .include_vars(True).keep_time(True))
         .link(dash.DashboardLink("Runbook").type(DashboardLinkType.LINK).url(cfg.runbook_url).target_blank(True))
         .tooltip(DashboardCursorSync.CROSSHAIR))
    for v in _variables(fleet=True):
        d = d.with_variable(v)

    def one(metric: str) -> str:  # one series per engine, whichever jobs scrape its pod
        return per_engine(cfg, f"{metric}{{{F}}}")
    d = d.with_row(dash.Row("Fleet now"))
    d = d.with_panel(_stat("Engines false-full", f"Engines whose requests wait while the KV cache has room. {RULES}.")
                     .with_target(q(f"sum({one('instance_engine:vllm_kv_false_full:bool')})", "false-full")))
    d = d.with_panel(_stat("Engines KV-full", f"Engines whose requests wait for KV blocks. {RULES}.")
                     .with_target(q(f"sum({one('instance_engine:vllm_kv_full:bool')})", "kv-full")))
    d = d.with_panel(_stat("Free KV blocks", f"Free over usable blocks, all engines. {RULES}.", "percentunit")
                     .with_target(q(f"sum({one('instance_engine:vllm_kv_free_blocks:sub')}) / "
                                    f"(sum({one('instance_engine:vllm_kv_free_blocks:sub')}) + "
                                    f"sum({one('instance_engine:vllm_kv_used_blocks:round')}))", "free")))
    d = d.with_panel(_stat("Waiting requests", f"Sum of {N.waiting}.")
                     .with_target(q(f"sum({one('instance_engine:vllm_num_requests_waiting:max')})", "waiting")))
    d = d.with_panel(_stat("Preemptions / s", f"All engines (a pod scraped by two jobs counts once). {RULES}.")
                     .with_target(q(f"sum(model_name:vllm_num_preemptions:rate5m{{{FM}}})", "preemptions/s")))
    d = d.with_panel(_stat("Engines", f"Engines reporting {N.running}.")
                     .with_target(q(f"count({one('instance_engine:vllm_num_requests_running:max')})", "engines")))

    d = d.with_row(dash.Row("Worst pods first"))
    key = "cluster, who, model_name, engine"
    worst = _merge_table("Engines by safe headroom (worst first)",
                         "One row per engine, sorted by safe headroom (requests that still fit if all run to "
                         f"max_tokens; negative = preemption ahead). {RULES}.", height=10)
    cols = [("instance_engine:vllm_safe_headroom_requests:floor", "safe headroom"),
            ("instance_engine:vllm_kv_false_full:bool", "false-full"),
            ("instance_engine:vllm_kv_usage_ratio:max", "KV usage (panel)"),
            ("instance_engine:vllm_num_requests_waiting:max", "waiting"),
            ("instance_engine:vllm_kv_free_blocks:sub", "free blocks"),
            ("instance_engine:vllm_worst_case_blocks_per_request:ceil", "W (blocks/request)"),
            ("instance_engine:vllm_preemptions_per_request:ratio5m", "preemptions/request")]
    for ref, (metric, _name) in zip("ABCDEFG", cols, strict=True):
        worst = worst.with_target(q(f"max by ({key}) ({who(f'{metric}{{{F}}}')})", ref, ref, instant=True))
    worst = (worst.with_transformation(DataTransformerConfig(id_val="organize", options={
        "renameByName": {"who": "pod (or instance)",
                         **{f"Value #{ref}": name for ref, (_m, name) in zip("ABCDEFG", cols, strict=True)}}}))
        .with_transformation(DataTransformerConfig(id_val="sortBy", options={
            "sort": [{"field": "safe headroom", "desc": False}]})))
    d = d.with_panel(worst)

    d = d.with_row(dash.Row("Over time"))
    d = d.with_panel(_ts("False-full engines by model", f"{RULES}.", "short", 12)
                     .with_target(q(f"sum by (model_name) ({one('instance_engine:vllm_kv_false_full:bool')})",
                                    "{{model_name}}")))
    d = d.with_panel(_ts("Lowest safe headroom (10 engines)", f"Worst engines first. {RULES}.", "short", 12)
                     .with_target(q(f"bottomk(10, {who(one('instance_engine:vllm_safe_headroom_requests:floor'))})",
                                    LEGEND)))
    d = d.with_panel(_ts("Most waiting requests (10 engines)", f"{N.waiting}.", "short", 12)
                     .with_target(q(f"topk(10, {who(one('instance_engine:vllm_num_requests_waiting:max'))})",
                                    LEGEND)))
    d = d.with_panel(_ts("Free KV blocks by model", f"{RULES}.", "short", 12)
                     .with_target(q(f"sum by (model_name) (model_name:vllm_kv_free_blocks:sum{{{FM}}})",
                                    "free {{model_name}}", "A"))
                     .with_target(q(f"sum by (model_name) (model_name:vllm_kv_capacity_blocks:sum{{{FM}}})",
                                    "usable {{model_name}}", "B")))
    d = d.with_panel(_ts("Preemptions / s (10 engines)", f"{RULES}.", "short", 12)
                     .with_target(q(f"topk(10, {who(one('instance_engine:vllm_num_preemptions:rate5m'))})",
                                    LEGEND)))
    d = d.with_panel(_ts("Engines false-full or KV-full", f"{RULES}.", "short", 12)
                     .with_target(q(f"sum(model_name:vllm_kv_false_full_engines:sum{{{FM}}})", "false-full", "A"))
                     .with_target(q(f"sum(model_name:vllm_kv_full_engines:sum{{{FM}}})", "kv-full", "B")))
    return d


# Keys the SDK (written for newer Grafana) emits with their default values that Grafana 11.0's schema does not have
# (tests/monitoring/test_grafana_11.py checks every key against 11.0.0's): dropped, 11.0 behaves as their defaults.
NEWER_THAN_11_0 = {"variable": ("allowCustomValue", "auto", "auto_count", "auto_min"), "link": ("placement",),
                   "options": ("percentChangeColorMode", "perPage")}


def encode(d: dash.Dashboard) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    out["schemaVersion"] = SCHEMA_VERSION
    for where, items in (("variable", out["templating"]["list"]), ("link", out.get("links", [])),
                         ("options", [p.get("options", {}) for p in out["panels"]])):
        for item in items:
            for key in NEWER_THAN_11_0[where]:
                item.pop(key, None)
    for i, panel in enumerate(out["panels"], start=1):  # the SDK leaves ids unset (rows get 0): make them unique
        panel["id"] = i
    return out


def dashboards(cfg: Config = DEFAULT) -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON model."""
    return {uid: encode(b) for uid, b in (("vllm-kv-admission", admission(cfg)), ("vllm-kv-fleet", fleet(cfg)))}
