"""Prometheus exposition of the latest reports: a custom Collector yielding fresh families each scrape.

Derived series of a target that is down are not exported (no stale numbers); `up` says 0 instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import __version__
from ..core import defaults
from ..engines.vllm import VLLM
from ..pipeline import derive, replicas
from ..pipeline.report import EngineReport, TargetStatus
from ..pipeline.target import Target
from ..pipeline.verdict import Verdict
from . import headline

P = defaults.METRIC_PREFIX
RISKS = ("oversubscription", "beyond_profile", "max_model_len_over_pool")  # pipeline/report.py Risk.kind
DECIDING_INPUTS = ("max_num_seqs", "max_num_batched_tokens")  # the inputs an undecided answer can turn on
# Version of the contract between these series and the shipped rules (names, labels, meaning of what the rules read):
# exported in vllm_headroom_build_info, compared by the rules' VLLMHeadroomRulesSkew. Bump it with any such change.
SCHEMA_VERSION = "1"
SCRAPE_ERROR_REASONS = ("connect", "timeout", "http_status", "truncated", "malformed", "too_large",
                        "no_vllm_metrics", "invalid_value", "models", "internal_error")

_NAMES = VLLM.names  # the engine whose series the help texts name
# (name, help, value of an engine report or None when unknown)
_ENGINE_GAUGES: list[tuple[str, str, Callable[[EngineReport], float | None]]] = [
    ("kv_capacity_blocks", "Usable KV-cache blocks of the engine (null block excluded).",
     lambda e: e.headroom.kv_capacity_blocks),
    ("kv_capacity_tokens", "Tokens the usable KV-cache blocks hold.", lambda e: e.headroom.kv_capacity_tokens),
    ("kv_used_blocks", "KV-cache blocks in use, from vLLM's usage gauge.", lambda e: e.headroom.kv_used_blocks),
    ("kv_free_blocks", "KV-cache blocks free (evictable prefix-cache blocks count as free).",
     lambda e: e.headroom.kv_free_blocks),
    ("block_size_tokens", "Tokens per KV-cache block.", lambda e: e.headroom.block_size_tokens),
    ("admission_headroom_requests",
     "Requests vLLM would admit now: min(max_num_seqs - running, floor(free / prompt blocks)), no more than its "
     "LoRA cap or a deferral lets through (the fewest when the exposition shows only a range).",
     lambda e: e.headroom.admission_headroom_requests),
    ("safe_headroom_requests",
     "More requests that fit if every request reaches max_tokens; negative means oversubscribed.",
     lambda e: e.headroom.safe_headroom_requests),
    ("worst_case_headroom_requests",
     "Requests the engine can take now and still hold if every request reaches max_tokens: "
     "max(0, min(max_num_seqs - running, safe headroom)); the safe headroom alone when max_num_seqs is unknown.",
     lambda e: derive.worst_case_headroom(e.headroom.slot_headroom_requests, e.headroom.safe_headroom_requests)),
    ("slot_headroom_requests", "Free slots under max_num_seqs (absent when max_num_seqs is unknown).",
     lambda e: e.headroom.slot_headroom_requests),
    ("panel_usage_ratio", "vLLM's own KV-cache usage fraction (what the usual panel shows).",
     lambda e: e.headroom.panel_usage_ratio),
    ("unreachable_pool_ratio", "Share of the KV pool a new worst-case request cannot get now, because slots "
     "(max_num_seqs) or blocks run out first; see binding_limit. 1 with slots binding is not a full KV cache.",
     lambda e: headline.unreachable_pool_ratio(e.headroom)),
    ("effective_usage_ratio", "DEPRECATED, removed in 0.2.0: use vllm_headroom_unreachable_pool_ratio "
     "(same value).", lambda e: headline.unreachable_pool_ratio(e.headroom)),
    ("false_full", "1 while requests wait although usage is low and something other than KV memory binds now "
     "(slots, the token budget, a head-of-line prompt, deferral), held for the false-full hold time; a risk never "
     "vetoes it.", lambda e: 1.0 if e.false_full else 0.0),
    ("gauges_reliable", "0 when this scrape's gauges contradict the engine's counters (nothing in flight while "
     "steps and tokens rose): the judgement repeats the last consistent scrape's.",
     lambda e: 1.0 if e.gauges_reliable else 0.0),
    ("admits_next_step_requests", "Requests the next engine step can admit: min(free slots, free blocks // the "
     "head's blocks), under a deferral those vLLM does not skip; absent when max_num_seqs is unknown.",
     lambda e: e.admits if e.max_num_seqs is not None else None),
    ("producer_holding", "1 while a P/D producer (kv_role kv_producer or kv_both) keeps finished prefills' blocks "
     "for its decode side, with nothing running or waiting: held on purpose, never a leak.",
     lambda e: 1.0 if e.producer_holding else 0.0),
    ("preemptions_per_second", "Preemptions per second between the last two scrapes.",
     lambda e: e.preemptions_per_second),
    ("seconds_without_progress", "Seconds since vLLM's step/generation counters last moved while it had work.",
     lambda e: e.seconds_without_progress),
    ("requests_running", f"Requests running in the engine ({_NAMES.running}).", lambda e: e.running),
    ("requests_waiting", f"Requests waiting in the engine ({_NAMES.waiting}).", lambda e: e.waiting),
    ("max_num_seqs", "Configured max_num_seqs (absent when unknown).", lambda e: e.max_num_seqs),
    ("prompt_blocks", "Blocks the profile prompt needs at admission.", lambda e: e.headroom.prompt_blocks),
    ("prefix_cache_hit_ratio", "Share of prompt tokens found in vLLM's prefix cache lately (absent without its "
     "prefix-cache counters).", lambda e: e.prefix_cache_hit_ratio),
    ("kv_bytes_per_token", "KV-cache bytes one token takes per device, all layers (with --model-config).",
     lambda e: None if e.kv_bytes is None else e.kv_bytes.kv_bytes_per_token),
    ("kv_bytes_per_block", "Bytes of one KV-cache pool block per device, as vLLM groups layers "
     "(with --model-config).", lambda e: None if e.kv_bytes is None else e.kv_bytes.kv_bytes_per_block),
    ("kv_free_bytes", "Bytes of free KV-cache blocks per device (with --model-config).",
     lambda e: None if e.kv_bytes is None else e.kv_bytes.kv_free_bytes),
    ("worst_case_request_bytes", "Bytes one request holds at its worst case (with --model-config).",
     lambda e: None if e.kv_bytes is None else e.kv_bytes.worst_case_request_bytes),
    ("admission_lookahead_tokens", "Tokens a speculative drafter adds to the admission's per-step gate per "
     "request (vLLM's num_lookahead_tokens; absent without --speculative-config).",
     lambda e: None if e.config.num_lookahead_tokens is None else e.config.num_lookahead_tokens.value),
    ("admission_watermark_blocks", "Blocks vLLM's --watermark keeps free when admitting beside running requests "
     "(absent without the flag).", lambda e: (e.headroom.admission.watermark_blocks
                                             if e.headroom.admission and e.config.watermark else None)),
    ("kv_offload_capacity_tokens", "Tokens the engine's KV offload tiers (host memory) hold at max_model_len; "
     "never free GPU blocks (absent without an offload tier).",
     lambda e: None if e.kv_transfer is None else e.kv_transfer.offload_tokens),
    ("kv_transfer_lease_seconds", "How long a P/D producer holds a finished prefill's blocks for its decode side "
     "(NIXL's kv_lease_duration; absent without a connector).",
     lambda e: None if e.kv_transfer is None else e.kv_transfer.lease_seconds),
]


class HeadroomCollector(Collector):
    """Yields the sidecar's families from the targets' latest reports; reads each target's `status()` only."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self.targets = targets

    def describe(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        """Every family collect() may yield, without samples (prometheus_client's describe): those it yields only
        while they have samples included. Registration checks names with it; docs/reference/metrics.md is
        generated from it (`python -m exporter.cli.docs`)."""
        return list(HeadroomCollector([])._families(describing=True))

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        return self._families(describing=False)

    def _families(self, describing: bool) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        # Every per-target series names the vLLM URL it is about, one target or several: the alert rules take vLLM's
        # host:port from it (the sidecar's own `instance` does not say which port, and two vLLMs on one machine
        # differ by nothing else).
        tl = ["target"]
        el = [*tl, "model_name", "engine"]

        def tv(t: TargetStatus) -> list[str]:
            return [t.url]

        up = GaugeMetricFamily(P + "up", "1 if the last scrape of the vLLM target succeeded.", labels=tl)
        duration = GaugeMetricFamily(P + "scrape_duration_seconds", "Duration of the last scrape of the target.",
                                     labels=tl)
        errors = CounterMetricFamily(P + "scrape_errors", "Failed scrapes of the target by reason.",
                                     labels=[*tl, "reason"])
        gauges = {name: GaugeMetricFamily(P + name, help_, labels=el) for name, help_, _ in _ENGINE_GAUGES}
        worst = GaugeMetricFamily(P + "worst_case_blocks_per_request",
                                  "Blocks one request holds at its worst case, by basis (profile or max_model_len).",
                                  labels=[*el, "basis"])
        concurrency = GaugeMetricFamily(P + "max_concurrency_requests",
                                        "Requests that fit at once at the worst case of the basis.",
                                        labels=[*el, "basis"])
        profile = GaugeMetricFamily(P + "request_profile_tokens",
                                    "Profile quantile of request lengths used for worst-case math.",
                                    labels=[*el, "kind"])
        waste = GaugeMetricFamily(P + "kv_block_waste_ratio",
                                  "Share of the token slots in used KV blocks that hold no token (vLLM's usage counts "
                                  "whole blocks): bound estimate, low and high; absent while nothing runs.",
                                  labels=[*el, "bound"])
        boundary = GaugeMetricFamily(P + "prefix_cache_boundary_loss_ratio",
                                     "Share of prompt tokens a shared prefix holds but the prefix cache cannot serve "
                                     "(vLLM caches full blocks only): bound estimate, low and high; absent before a "
                                     "prompt length is known or with prefix caching off.", labels=[*el, "bound"])
        verdict = GaugeMetricFamily(P + "verdict", "Why requests wait: 1 for the current verdict.",
                                    labels=[*el, "verdict"])
        binding = GaugeMetricFamily(P + "binding_limit",
                                    "1 for what binds now (the judgement's binding limit): slots, token_budget, "
                                    "head_prompt, blocks, deferral, pool_size, engine, sleep, none or undecided.",
                                    labels=[*el, "limit"])
        risk = GaugeMetricFamily(P + "risk", "1 for a risk (what may bind later, never what binds now) with its "
                                 "basis (profile, max_model_len, in_flight; none while inactive).",
                                 labels=[*el, "risk", "basis"])
        undecided = GaugeMetricFamily(P + "decided_by", "1 for an input nobody stated whose value decides what binds "
                                      "(verdict undecided or transient): state it.", labels=[*el, "input"])
        provenance = GaugeMetricFamily(P + "input_provenance", "1 for the provenance of each input of the judgement: "
                                       "stated, vllm_cmdline, read_from_vllm, inferred, assumed_default, unknown.",
                                       labels=[*el, "input", "provenance"])
        ranges = GaugeMetricFamily(P + "input_range", "The range an inferred, assumed or unknown input may have "
                                   "(bound low or high); the judgement holds over it or says what decides.",
                                   labels=[*el, "input", "bound"])
        undetermined = GaugeMetricFamily(
            P + "capacity_undetermined",
            "1 for an engine whose capacity cannot be derived: reason missing (values unknown), config_error "
            "(a config that makes no sense, e.g. num_gpu_blocks < 2) or bad_value (a series holds a value it cannot, "
            "e.g. NaN or a duplicate series); see /api/v1/diagnosis.",
            labels=[*el, "reason"])
        info_rows: list[tuple[dict[str, str], float]] = []
        attention = GaugeMetricFamily(
            P + "attention_info", "1, labelled with what vLLM's start-up log (--vllm-startup-log) says: the "
            "attention backend it selected, the block size in effect and asked, the KV cache dtype in effect; empty "
            "where it says nothing.", labels=[*tl, "backend", "block_size", "block_size_asked", "kv_cache_dtype"])
        ml = [*tl, "model_name"]  # the replica signal: one series per replica (target) and model, engines summed
        needed = GaugeMetricFamily(
            P + "replicas_needed", f"Replicas of this server its offered load needs at the target utilization: "
            f"{replicas.FORMULA}, summed over its engines; grows with load. Sum over a model's replicas and scale on "
            "AverageValue 1. Held at 1 per busy replica when max_num_seqs or the KV capacity is unknown (see "
            "_basis).", labels=ml)
        demand = GaugeMetricFamily(P + "replica_demand_requests",
                                   "Requests the server holds now (running + waiting), summed over its engines.",
                                   labels=ml)
        load = GaugeMetricFamily(
            P + "replica_load_requests", "The server's offered load in requests over the load window "
            "(--autoscaling.load-window): the running count's time-average x max(1, arrived / admitted), at least "
            "the window's arrivals still waiting; running + waiting without a window.", labels=ml)
        capacity = GaugeMetricFamily(
            P + "replica_capacity_requests", "Requests the server runs at once without queueing or preemption: "
            "min(max_num_seqs, floor(blocks / worst-case blocks per request)) summed over its engines; absent "
            "when max_num_seqs or the KV capacity is unknown.", labels=ml)
        basis = GaugeMetricFamily(
            P + "replicas_needed_basis", "1 for what vllm_headroom_replicas_needed rests on: limit (max_num_seqs, "
            "kv_cache, unknown), max_num_seqs_source (flag, vllm_args, cmdline, inferred, unknown), worst_case "
            "(profile, in_flight, in_flight_thin, max_model_len, unknown) and conservative (true: held, capacity "
            "unknown).",
            labels=[*ml, "limit", "max_num_seqs_source", "worst_case", "conservative"])

        seen_up = GaugeMetricFamily(P + "target_seen_up", "1 once a scrape of the target has succeeded since the "
                                    "sidecar started, 0 before (vLLM still loading).", labels=tl)
        down_since = GaugeMetricFamily(P + "target_down_since_timestamp_seconds",
                                       "Unix time of the first failed scrape of the target's current outage (vLLM "
                                       "down or still loading); absent while the target is up.", labels=tl)
        for t in (target.status() for target in self.targets):
            r = t.last
            up.add_metric(tv(t), 1.0 if r.up else 0.0)
            if not r.up and t.down_since is not None:
                down_since.add_metric(tv(t), t.down_since)
            # Seen up since the sidecar started: lets the alerts tell a vLLM still loading its weights from one that
            # went down after serving.
            seen_up.add_metric(tv(t), 1.0 if t.seen_up else 0.0)
            if r.scrape_duration_seconds is not None:
                duration.add_metric(tv(t), r.scrape_duration_seconds)
            if r.attention is not None:
                a = r.attention
                attention.add_metric([*tv(t), a.backend or "", str(a.block_size or ""), str(a.block_size_asked or ""),
                                      a.kv_cache_dtype or ""], 1.0)
            for reason in SCRAPE_ERROR_REASONS:
                errors.add_metric([*tv(t), reason], float(t.errors.get(reason, 0)))
            if not r.up:
                # Only the verdict survives an outage, so a state timeline shows it; numbers would be stale.
                for model, engine in sorted(t.known_engines):
                    for v in Verdict:
                        verdict.add_metric([*tv(t), model, engine, str(v)], 1.0 if v is Verdict.TARGET_DOWN else 0.0)
                continue
            for g in r.gaps:
                undetermined.add_metric([*tv(t), g.model_name, g.engine, g.reason], 1.0)
            for e in r.engines:
                labels = [*tv(t), e.model_name, e.engine]
                for name, _help, get in _ENGINE_GAUGES:
                    value = get(e)
                    if value is not None:
                        gauges[name].add_metric(labels, float(value))
                h = e.headroom
                worst.add_metric([*labels, "profile"], h.worst_case_blocks_profile)
                concurrency.add_metric([*labels, "profile"], h.max_concurrency_profile)
                if h.worst_case_blocks_max_model_len is not None:
                    worst.add_metric([*labels, "max_model_len"], h.worst_case_blocks_max_model_len)
                if h.max_concurrency_max_model_len is not None:
                    concurrency.add_metric([*labels, "max_model_len"], h.max_concurrency_max_model_len)
                for kind, q in (("prompt", e.prompt), ("max_tokens", e.max_tokens)):
                    if q is not None:
                        profile.add_metric([*labels, kind], q.tokens)
                for family, w in ((waste, e.block_waste), (boundary, e.prefix_boundary_loss)):
                    if w is not None:
                        for name, x in (("estimate", w.ratio), ("low", w.low), ("high", w.high)):
                            family.add_metric([*labels, name], round(x, 6))
                for v in Verdict:
                    verdict.add_metric([*labels, str(v)], 1.0 if v is e.verdict else 0.0)
                bound = headline.binding_limit(e)
                for limit in headline.LIMITS:
                    binding.add_metric([*labels, str(limit)], 1.0 if limit == bound else 0.0)
                active = {r.kind: r.basis for r in e.risks}
                for kind in RISKS:
                    risk.add_metric([*labels, kind, active.get(kind, "none")], 1.0 if kind in active else 0.0)
                deciding = {c.input for c in e.decided_by}
                for name in DECIDING_INPUTS:
                    undecided.add_metric([*labels, name], 1.0 if name in deciding else 0.0)
                for name, inp in sorted(e.inputs.items()):
                    provenance.add_metric([*labels, name, str(inp.provenance)], 1.0)
                    if not inp.exact:
                        for bound_name, edge in (("low", inp.low), ("high", inp.high)):
                            if edge is not None:
                                ranges.add_metric([*labels, name, bound_name], float(edge))
                row = dict(zip(el, labels, strict=True))
                for key, val in e.config.as_json().items():
                    row[key] = str(val["value"])
                    row[key + "_source"] = str(val["source"])
                info_rows.append((row, 1.0))
            for sig in r.replicas:
                labels = [*tv(t), sig.model_name]
                needed.add_metric(labels, sig.replicas_needed)
                demand.add_metric(labels, sig.demand_requests)
                load.add_metric(labels, sig.load_requests)
                if sig.capacity_requests is not None:
                    capacity.add_metric(labels, sig.capacity_requests)
                basis.add_metric([*labels, sig.limit, sig.max_num_seqs_source, sig.worst_case,
                                  str(sig.conservative).lower()], 1.0)
        build = GaugeMetricFamily(P + "build_info", "Always 1: the sidecar's version and the schema version of its "
                                  "series (the rules alert when it is not theirs).", labels=["version", "schema"])
        build.add_metric([__version__, SCHEMA_VERSION], 1.0)
        yield build
        yield up
        yield seen_up
        if describing or down_since.samples:  # only while down: a family without samples would only advertise a name
            yield down_since
        yield duration
        yield errors
        # A family with no samples (e.g. byte figures without --model-config) would only advertise a name.
        yield from (g for g in gauges.values() if describing or g.samples)
        yield worst
        yield concurrency
        yield profile
        yield from (f for f in (waste, boundary) if describing or f.samples)
        yield verdict
        yield binding
        yield risk
        yield undecided
        yield provenance
        if describing or ranges.samples:
            yield ranges
        if describing or needed.samples:
            yield needed
            yield demand
            yield load
            if describing or capacity.samples:
                yield capacity
            yield basis
        if describing or undetermined.samples:
            yield undetermined
        if describing or attention.samples:
            yield attention
        if describing or info_rows:
            names = sorted({k for row, _ in info_rows for k in row}) or el
            info = GaugeMetricFamily(P + "config_info",
                                     "Serving config of the engine; each <key>_source label names where it came from.",
                                     labels=names)
            for row, value in info_rows:
                info.add_metric([row.get(n, "") for n in names], value)
            yield info
