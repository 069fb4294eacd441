"""Read vLLM's own series out of a parsed exposition, across versions 0.6 (V0) to 0.33 (V1).

Everything version-specific about vLLM's metric *names and labels* lives here; the result is one
`EngineSample` per (model_name, engine) and one `CacheInfo` per engine, in vLLM-neutral terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .exposition import Exposition, Labels

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
SWAPPED = "vllm:num_requests_swapped"  # V0 only
KV_USAGE = "vllm:kv_cache_usage_perc"  # V1 >= 0.9
GPU_USAGE = "vllm:gpu_cache_usage_perc"  # V0, V1 <= 0.10 (hidden in 0.11, gone from 0.12)
PREEMPTIONS = "vllm:num_preemptions_total"  # the `_total` sample name in every version
CACHE_CONFIG = "vllm:cache_config_info"
STEPS = "vllm:iteration_tokens_total_count"  # one observation per engine step
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
SLEEP_STATE = "vllm:engine_sleep_state"
PROMPT_HIST = "vllm:request_prompt_tokens"
MAX_TOKENS_HIST = "vllm:request_params_max_tokens"
GENERATION_HIST = "vllm:request_generation_tokens"
HISTOGRAMS = (PROMPT_HIST, MAX_TOKENS_HIST, GENERATION_HIST)

WANTED: frozenset[str] = frozenset(
    {
        RUNNING,
        WAITING,
        WAITING_BY_REASON,
        SWAPPED,
        KV_USAGE,
        GPU_USAGE,
        PREEMPTIONS,
        CACHE_CONFIG,
        STEPS,
        GENERATION_TOKENS,
        PROMPT_TOKENS,
        SLEEP_STATE,
    }
    | {h + suffix for h in HISTOGRAMS for suffix in ("_bucket", "_count", "_sum")}
)

# Labels that identify the server or scrape rather than an engine; everything else splits series.
_ENGINE_KEY = ("model_name", "engine")


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts `(upper_bound, count)` in ascending order, the last one +Inf."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float


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


@dataclass(frozen=True)
class EngineSample:
    """One engine's scheduler state as exported at one scrape."""

    model_name: str
    engine: str
    running: float | None = None
    waiting: float | None = None
    waiting_by_reason: dict[str, float] = field(default_factory=dict)
    swapped: float | None = None
    usage: float | None = None
    usage_metric: str | None = None
    preemptions_total: float | None = None
    steps_total: float | None = None
    generation_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    awake: bool | None = None
    histograms: dict[str, Histogram] = field(default_factory=dict)


@dataclass(frozen=True)
class VllmSnapshot:
    """All engines of one server at one scrape, and what the exposition tells about vLLM's version."""

    engines: list[EngineSample]
    cache_info: dict[str, CacheInfo]
    data_parallel_engines: int
    usage_counts_null_block: bool | None  # None: the exposition alone cannot tell
    has_engine_label: bool


class InvalidValue(ValueError):
    """A gauge the verdict depends on is NaN or infinite."""


def _key(labels: Labels) -> tuple[str, str]:
    return labels.get("model_name", ""), labels.get("engine", "0")


def _gauge_by_engine(expo: Exposition, name: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for labels, value in expo.series(name):
        key = _key(labels)
        # Several series per engine only under multiprocess mode (a `pid` label); they are summed.
        out[key] = out.get(key, 0.0) + value
    return out


def _histograms(expo: Exposition, name: str) -> dict[tuple[str, str], Histogram]:
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
    return values


def usage_counts_null_block(version: str | None, expo: Exposition) -> bool | None:
    """True where vLLM's usage gauge divides by num_gpu_blocks (null block counted as used): V1 <= 0.10."""
    if version:
        parts = version.split(".")
        try:
            major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()))
        except (IndexError, ValueError):
            major, minor = -1, -1
        if major >= 0:
            return (major, minor) < (0, 11)
    if expo.series(KV_USAGE):
        # 0.9-0.10 export both names; 0.11 hides the old one by default, 0.12+ dropped it.
        return bool(expo.series(GPU_USAGE))
    if expo.series(GPU_USAGE):
        return True
    return None


def read(expo: Exposition, version: str | None = None) -> VllmSnapshot:
    """Group the wanted vLLM series of `expo` by engine."""
    running = _checked(RUNNING, _gauge_by_engine(expo, RUNNING))
    waiting = _checked(WAITING, _gauge_by_engine(expo, WAITING))
    usage_name = KV_USAGE if expo.series(KV_USAGE) else GPU_USAGE
    usage = _checked(usage_name, _gauge_by_engine(expo, usage_name))
    swapped = _gauge_by_engine(expo, SWAPPED)
    preemptions = _gauge_by_engine(expo, PREEMPTIONS)
    steps = _gauge_by_engine(expo, STEPS)
    gen_tokens = _gauge_by_engine(expo, GENERATION_TOKENS)
    prompt_tokens = _gauge_by_engine(expo, PROMPT_TOKENS)
    by_reason: dict[tuple[str, str], dict[str, float]] = {}
    for labels, value in expo.series(WAITING_BY_REASON):
        per = by_reason.setdefault(_key(labels), {})
        reason = labels.get("reason", "")
        per[reason] = per.get(reason, 0.0) + value
    awake: dict[tuple[str, str], bool] = {}
    for labels, value in expo.series(SLEEP_STATE):
        if labels.get("sleep_state") == "awake":
            awake[_key(labels)] = value >= 1
    hists = {name: _histograms(expo, name) for name in HISTOGRAMS}

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
            awake=awake.get((model, engine)),
            histograms={n: h[(model, engine)] for n, h in hists.items() if (model, engine) in h},
        )
        for model, engine in keys
    ]
    cache_info: dict[str, CacheInfo] = {}
    for labels, _value in expo.series(CACHE_CONFIG):
        cache_info[labels.get("engine", "0")] = CacheInfo(labels)
    has_engine_label = any("engine" in labels for labels, _ in expo.series(CACHE_CONFIG)) or any(
        "engine" in labels for labels, _ in expo.series(RUNNING)
    )
    dp = len(cache_info) if has_engine_label else 1
    return VllmSnapshot(
        engines=engines,
        cache_info=cache_info,
        data_parallel_engines=max(dp, 1),
        usage_counts_null_block=usage_counts_null_block(version, expo),
        has_engine_label=has_engine_label,
    )
