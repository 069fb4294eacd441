"""Read vLLM's own series out of a parsed exposition, across versions 0.6 (V0) to 0.33 (V1).

The result is one `EngineSample` per (model_name, engine) and one `CacheInfo` per engine, in the engine-neutral
terms of `exporter.engines.base`; the names come from `metrics`, the release rules from `releases`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..base import (
    E2E_LATENCY,
    GENERATION_LENGTHS,
    MAX_TOKENS_LENGTHS,
    PROMPT_LENGTHS,
    CapacityInfo,
    EngineSample,
    Histogram,
    InvalidValue,
    Labels,
    LoraState,
    OffloadTier,
    Samples,
    Snapshot,
)
from . import metrics as m
from .releases import rules, usage_counts_null_block

# The length histograms by the role the pipeline reads them in.
ROLES = ((m.PROMPT_HIST, PROMPT_LENGTHS), (m.MAX_TOKENS_HIST, MAX_TOKENS_LENGTHS),
         (m.GENERATION_HIST, GENERATION_LENGTHS), (m.E2E_LATENCY_HIST, E2E_LATENCY))


@dataclass(frozen=True)
class CacheInfo:
    """The labels of `vllm:cache_config_info` for one engine (no model_name label exists)."""

    labels: Labels

    def _int(self, key: str) -> int | None:
        raw = self.labels.get(key)
        if raw is None or raw in ("None", ""):
            return None
        try:
            return int(float(raw))
        except ValueError:
            return None

    def _float(self, key: str) -> float | None:
        raw = self.labels.get(key)
        if raw is None or raw in ("None", ""):
            return None
        try:
            value = float(raw)
        except ValueError:
            return None
        return value if math.isfinite(value) else None

    @property
    def block_size(self) -> int | None:
        return self._int("block_size")

    @property
    def num_gpu_blocks(self) -> int | None:
        """As exported: from 0.9 the sum over the data-parallel engines of this API server."""
        return self._int("num_gpu_blocks")

    @property
    def kv_cache_size_tokens(self) -> int | None:
        return self._int("kv_cache_size_tokens")

    @property
    def kv_cache_max_concurrency(self) -> float | None:
        return self._float("kv_cache_max_concurrency")

    @property
    def enable_prefix_caching(self) -> bool | None:
        raw = self.labels.get("enable_prefix_caching")
        return None if raw is None or raw == "None" else raw == "True"

    @property
    def cache_dtype(self) -> str | None:
        return self.labels.get("cache_dtype")

    @property
    def gpu_memory_utilization(self) -> str | None:
        return self.labels.get("gpu_memory_utilization")

    def unreadable(self) -> str | None:
        """One sentence naming a capacity label that is no number ("abc"), else None."""
        for key in ("num_gpu_blocks", "block_size"):
            raw = self.labels.get(key)
            if raw not in (None, "", "None") and getattr(self, key) is None:
                return f"vLLM exports {key}={raw!r} in cache_config_info, which is not a number"
        return None


def _key(labels: Labels) -> tuple[str, str]:
    return labels.get("model_name", ""), labels.get("engine", "0")


def _gauge_by_engine(expo: Samples, name: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for labels, value in expo.series(name):
        key = _key(labels)
        # Several series per engine only under multiprocess mode (a `pid` label); they are summed.
        out[key] = out.get(key, 0.0) + value
    return out


def _histograms(expo: Samples, name: str) -> dict[tuple[str, str], Histogram]:
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    for labels, value in expo.series(name + "_bucket"):
        le = labels.get("le")
        if le is None:
            continue
        bound = math.inf if le in ("+Inf", "Inf") else float(le)
        per = buckets.setdefault(_key(labels), {})
        per[bound] = per.get(bound, 0.0) + value
    counts = _gauge_by_engine(expo, name + "_count")
    sums = _gauge_by_engine(expo, name + "_sum")
    out: dict[tuple[str, str], Histogram] = {}
    for key, per in buckets.items():
        ordered = tuple(sorted(per.items()))
        total = counts.get(key, ordered[-1][1] if ordered else 0.0)
        out[key] = Histogram(ordered, total, sums.get(key, 0.0))
    return out


def _checked(name: str, values: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    for (model, engine), value in values.items():
        if not math.isfinite(value):
            raise InvalidValue(f"{name} of model {model!r} engine {engine} is {value}, not a finite number")
        if value < 0:  # a count of requests or a share of blocks is never below 0
            raise InvalidValue(f"{name} of model {model!r} engine {engine} is {value:g}, a negative count or share")
    return values


def lora_state(expo: Samples) -> LoraState | None:
    """`vllm:lora_requests_info`: its value is the time the adapter set last changed (`set_to_current_time`,
    vllm/v1/metrics/loggers.py:1104-1112 @0.33.0), and a new series appears at every change, so the newest series
    is the state; no model_name or engine label. None when LoRA is off (the family is absent)."""
    rows = expo.series(m.LORA_INFO)
    if not rows:
        return None
    labels, _value = max(rows, key=lambda row: row[1])

    def names(key: str) -> tuple[str, ...]:
        return tuple(n for n in labels.get(key, "").split(",") if n)

    raw = labels.get("max_lora", "")
    return LoraState(int(raw) if raw.isdigit() else None, names("waiting_lora_adapters"),
                     names("running_lora_adapters"))


def _offload_tiers(expo: Samples) -> dict[str, tuple[OffloadTier, ...]]:
    """0.33's `vllm:kv_offload_config_info`, per engine (each engine reports its own tier, "not the instance
    total": vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py:29-36 @0.33.0)."""
    def num(labels: Labels, key: str) -> int | None:
        raw = labels.get(key, "")
        return int(raw) if raw.isdigit() else None

    out: dict[str, list[OffloadTier]] = {}
    for labels, _value in expo.series(m.KV_OFFLOAD_CONFIG):
        out.setdefault(labels.get("engine", "0"), []).append(OffloadTier(
            "cpu", num(labels, "cpu_kv_cache_size_bytes"), num(labels, "cpu_kv_cache_size_tokens"),
            num(labels, "cpu_num_chunks"), num(labels, "cpu_blocks_per_chunk")))
    return {k: tuple(v) for k, v in out.items()}


def read(expo: Samples, version: str | None = None) -> Snapshot:
    """Group the wanted vLLM series of `expo` by engine."""
    running = _checked(m.RUNNING, _gauge_by_engine(expo, m.RUNNING))
    waiting = _checked(m.WAITING, _gauge_by_engine(expo, m.WAITING))
    usage_name = m.KV_USAGE if expo.series(m.KV_USAGE) else m.GPU_USAGE
    usage = _checked(usage_name, _gauge_by_engine(expo, usage_name))
    swapped = _gauge_by_engine(expo, m.SWAPPED)
    preemptions = _gauge_by_engine(expo, m.PREEMPTIONS)
    steps = _gauge_by_engine(expo, m.STEPS)
    gen_tokens = _gauge_by_engine(expo, m.GENERATION_TOKENS)
    prompt_tokens = _gauge_by_engine(expo, m.PROMPT_TOKENS)
    prefix_queries = _gauge_by_engine(expo, m.PREFIX_QUERIES)
    prefix_hits = _gauge_by_engine(expo, m.PREFIX_HITS)
    by_reason: dict[tuple[str, str], dict[str, float]] = {}
    for labels, value in expo.series(m.WAITING_BY_REASON):
        per = by_reason.setdefault(_key(labels), {})
        reason = labels.get("reason", "")
        per[reason] = per.get(reason, 0.0) + value
    awake: dict[tuple[str, str], bool] = {}
    for labels, value in expo.series(m.SLEEP_STATE):
        if labels.get("sleep_state") == "awake":
            awake[_key(labels)] = value >= 1
    hists = {role: _histograms(expo, name) for name, role in ROLES}
    fetch: dict[tuple[str, str], dict[str, float]] = {}
    for labels, value in expo.series(m.KV_FETCH_BY_STAGE):
        per = fetch.setdefault(_key(labels), {})
        per[labels.get("stage", "")] = per.get(labels.get("stage", ""), 0.0) + value
    counters: dict[tuple[str, str], dict[tuple[str, str], float]] = {}
    for name, connector, role in m.CONNECTOR_COUNTERS:
        for key, value in _gauge_by_engine(expo, name).items():
            counters.setdefault(key, {})[(connector, role)] = value
    transfers: dict[tuple[str, str], dict[str, float]] = {}
    for name, connector in m.CONNECTOR_TRANSFERS:
        for key, value in _gauge_by_engine(expo, name).items():
            transfers.setdefault(key, {})[connector] = value
    tiers = _offload_tiers(expo)
    offload_usage = _gauge_by_engine(expo, m.KV_OFFLOAD_CPU_USAGE)
    lora = lora_state(expo)

    keys = sorted(set(running) | set(waiting) | set(usage))
    engines = [
        EngineSample(
            model_name=model,
            engine=engine,
            running=running.get((model, engine)),
            waiting=waiting.get((model, engine)),
            waiting_by_reason=by_reason.get((model, engine), {}),
            swapped=swapped.get((model, engine)),
            usage=usage.get((model, engine)),
            usage_metric=usage_name if (model, engine) in usage else None,
            preemptions_total=preemptions.get((model, engine)),
            steps_total=steps.get((model, engine)),
            generation_tokens_total=gen_tokens.get((model, engine)),
            prompt_tokens_total=prompt_tokens.get((model, engine)),
            prefix_queries_total=prefix_queries.get((model, engine)),
            prefix_hits_total=prefix_hits.get((model, engine)),
            awake=awake.get((model, engine)),
            histograms={n: h[(model, engine)] for n, h in hists.items() if (model, engine) in h},
            lora=lora,
            kv_fetch_by_stage=fetch.get((model, engine), {}),
            connector_counters=counters.get((model, engine), {}),
            connector_transfers=transfers.get((model, engine), {}),
            offload_tiers=tiers.get(engine, ()),
            offload_usage=offload_usage.get((model, engine)),
        )
        for model, engine in keys
    ]
    cache_info: dict[str, CapacityInfo] = {}
    for labels, _value in expo.series(m.CACHE_CONFIG):
        cache_info[labels.get("engine", "0")] = CacheInfo(labels)
    has_engine_label = any("engine" in labels for labels, _ in expo.series(m.CACHE_CONFIG)) or any(
        "engine" in labels for labels, _ in expo.series(m.RUNNING)
    )
    # Count the engines from the gauges too: some setups export cache_config_info for engine 0 only, while its
    # num_gpu_blocks is still the sum over every data-parallel engine.
    gauge_engines = {engine for _model, engine in keys}
    dp = max(len(cache_info), len(gauge_engines)) if has_engine_label else 1
    release_rules = rules(version, expo)
    return Snapshot(
        engines=engines,
        cache_info=cache_info,
        data_parallel_engines=max(dp, 1),
        usage_counts_null_block=usage_counts_null_block(release_rules),
        has_engine_label=has_engine_label,
        rules=release_rules,
    )
