"""Read vLLM's own series out of a parsed exposition, across versions 0.6 (V0) to 0.33 (V1).

The result is one `EngineSample` per (model_name, engine) and one `CacheInfo` per engine, in the engine-neutral
terms of `exporter.engines.base`; the names come from `metrics`, the release rules from `releases`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..base import (
    E2E_LATENCY,
    GENERATION_LENGTHS,
    MAX_TOKENS_LENGTHS,
    PROMPT_LENGTHS,
    CapacityInfo,
    EngineSample,
    Histogram,
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


# What each capacity label of cache_config_info can possibly hold (whole numbers unless said): beyond it the
# value is no measurement of a real engine (2^31 blocks of 16 tokens would be 34 billion tokens of KV cache).
CAPACITY_RANGES: dict[str, tuple[float, float]] = {
    "num_gpu_blocks": (0, 2**31),
    "block_size": (1, 2**20),
    "kv_cache_size_tokens": (0, 2**40),
}
FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "kv_cache_max_concurrency": (0.0, 1e9),
    "gpu_memory_utilization": (0.0, 1.0),
}


@dataclass(frozen=True)
class CacheInfo:
    """The labels of `vllm:cache_config_info` for one engine (no model_name label exists).

    A label that is no possible value (not a number, not finite, not whole, out of `CAPACITY_RANGES` or
    `FLOAT_RANGES`) reads as None and is named by `unreadable` (blocks, block size) or `rejected` (every one).
    `conflict` names a second, different cache_config_info series of the same engine.
    """

    labels: Labels
    conflict: str | None = None

    def _raw(self, key: str) -> str | None:
        raw = self.labels.get(key)
        return None if raw is None or raw in ("None", "") else raw

    def _problem(self, key: str) -> str | None:
        """Why the label `key` is not a possible value (a clause), None when it is one or absent."""
        raw = self._raw(key)
        if raw is None:
            return None
        if "_" in raw or not raw.isascii() or raw != raw.strip():
            # Python's float() reads "4_0_0" as 400, "４０" (full-width digits) and " 40" as 40; vLLM writes
            # str() of its config values, none of those
            return "not a number"
        try:
            value = float(raw)
        except ValueError:
            return "not a number"
        if not math.isfinite(value):
            return "not a finite number"
        if key in CAPACITY_RANGES:
            low, high = CAPACITY_RANGES[key]
            if value != int(value):
                return "not a whole number"
        else:
            low, high = FLOAT_RANGES.get(key, (-math.inf, math.inf))
        if value < low:
            return f"below {low:g}, which no engine has"
        if value > high:
            return f"above {high:,.0f}, more than any engine has" if high >= 1000 else f"above {high:g}, no share"
        return None

    def _int(self, key: str) -> int | None:
        raw = self._raw(key)
        if raw is None or self._problem(key) is not None:
            return None
        if self.conflict is not None and key in ("num_gpu_blocks", "block_size"):
            return None  # two series disagree on the capacity: neither is taken (`unreadable` says so)
        return int(float(raw))

    def _float(self, key: str) -> float | None:
        raw = self._raw(key)
        if raw is None or self._problem(key) is not None:
            return None
        return float(raw)

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
        raw = self.labels.get("gpu_memory_utilization")
        return None if raw is not None and self._problem("gpu_memory_utilization") is not None else raw

    def _sentence(self, key: str, problem: str) -> str:
        return f"vLLM exports {key}={self.labels.get(key)!r} in cache_config_info, which is {problem}"

    def unreadable(self) -> str | None:
        """One sentence naming a capacity label (blocks, block size) that is no possible value, else None."""
        if self.conflict is not None:
            return self.conflict
        for key in ("num_gpu_blocks", "block_size"):
            problem = self._problem(key)
            if problem is not None:
                return self._sentence(key, problem)
        return None

    def rejected(self) -> list[str]:
        """One sentence per label beyond blocks and block size (`unreadable` names those) that is no possible
        value; such a value is not used."""
        keys = [k for k in (*CAPACITY_RANGES, *FLOAT_RANGES) if k not in ("num_gpu_blocks", "block_size")]
        return [self._sentence(k, p) + ": it is not used" for k in keys if (p := self._problem(k)) is not None]


def _key(labels: Labels) -> tuple[str, str]:
    return labels.get("model_name", ""), labels.get("engine", "0")


def _gauge_by_engine(expo: Samples, name: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for labels, value in expo.series(name):
        key = labels.get("model_name", ""), labels.get("engine", "0")  # `_key`, inline: every sample, every scrape
        # Several series per engine only under multiprocess mode (a `pid` label); they are summed. A series that
        # appears twice with the same labels is named by `read` (bad_values), never summed into a verdict.
        out[key] = out.get(key, 0.0) + value
    return out


# The largest value each kind of series can hold on any real engine; NaN, infinities and negatives never.
MAX_REQUESTS = 1e9  # requests running, waiting or swapped in one engine
MAX_COUNTER = 1e18  # a counter of tokens, steps or requests since start (a year at 10^7 tokens/s is 3e14)


class _Bad:
    """The first sentence per engine naming a value it cannot hold."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], str] = {}

    def add(self, key: tuple[str, str], sentence: str) -> None:
        self.found.setdefault(key, sentence)

    def check(self, name: str, values: dict[tuple[str, str], float], high: float,
              whole: bool = False) -> dict[tuple[str, str], float]:
        """`values` without the ones outside 0..high (each named); a ratio's `high` is 1; `whole`: a count of
        requests, which has no fraction."""
        out = {}
        for key, value in values.items():
            if math.isfinite(value) and 0 <= value <= high and (not whole or value == int(value)):
                out[key] = value
                continue
            model, engine = key
            what = ("not a finite number" if not math.isfinite(value) else
                    "negative, which no count or share is" if value < 0 else
                    "above 1, which no share of the KV pool is" if high == 1 else
                    f"above {high:g}, more than any engine holds" if value > high else
                    "not a whole number, which no count of requests is")
            self.add(key, f"{name} of model {model!r} engine {engine} is {value:g}, {what}")
        return out


@functools.lru_cache(maxsize=4096)  # the same few bucket bounds, every scrape
def _bound(le: str) -> float | None:
    if le in ("+Inf", "Inf"):
        return math.inf
    try:
        bound = float(le)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


# How one family's bucket series group into histograms, for a sequence of label sets (between two scrapes of a
# target they repeat while only the values change; the parser hands out the same dict for each, so comparing two
# sequences is mostly identity checks): per engine, its bucket bounds in ascending order and where each one's count
# is in the series. Only for series whose label sets group plainly (every bound a number, none twice for one
# engine). Found by the first and last label sets' identities and the length, then compared whole.
_Plan = tuple[tuple[Labels, ...], list[tuple[tuple[str, str], tuple[float, ...], tuple[int, ...]]]]
_plans: dict[tuple[int, int, int], _Plan] = {}


def _plan(rows: Sequence[tuple[Labels, float]]) -> _Plan | None:
    """The grouping of `rows` (a family's bucket series) as `_histograms` makes it; None when it is not plain."""
    groups: dict[tuple[str, str], dict[float, int]] = {}
    for i, (labels, _value) in enumerate(rows):
        le = labels.get("le")
        if le is None:
            continue
        bound = _bound(le)
        if bound is None:
            return None
        per = groups.setdefault((labels.get("model_name", ""), labels.get("engine", "0")), {})
        if bound in per:
            return None  # summed over several series (multiprocess mode): the plain loop adds them up
        per[bound] = i
    return tuple(labels for labels, _value in rows), [
        (key, tuple(b for b, _i in ordered), tuple(i for _b, i in ordered))
        for key, per in groups.items() for ordered in [sorted(per.items())]]


def _histograms(expo: Samples, name: str, bad: _Bad) -> dict[tuple[str, str], Histogram]:
    """The histograms of family `name` by engine; one whose buckets are not a histogram (a bound that is no
    number, counts not finite, negative or falling with the bound, no +Inf bucket) is named in `bad`."""
    rows = expo.series(name + "_bucket")
    if not rows:
        return _grouped(expo, name, bad, {})
    label_sets, values = zip(*rows, strict=True)
    found = id(label_sets[0]), id(label_sets[-1]), len(label_sets)
    plan = _plans.get(found)
    if plan is None or plan[0] != label_sets:
        plan = _plan(rows)
        if plan is None:
            return _grouped(expo, name, bad, _bucket_counts(rows, name, bad))
        if len(_plans) >= 1024:
            _plans.clear()  # label sets that change every scrape must not grow us without bound
        _plans[found] = plan
    # `_bucket_counts` adds each count to 0.0 (which makes -0.0 a 0.0): so does this.
    return _grouped(expo, name, bad, {key: (bounds, [0.0 + values[i] for i in where])
                                      for key, bounds, where in plan[1]})


def _bucket_counts(rows: Sequence[tuple[Labels, float]], name: str,
                   bad: _Bad) -> dict[tuple[str, str], tuple[tuple[float, ...], list[float]]]:
    """Per engine, the bucket bounds in ascending order and their counts (series of one bound summed)."""
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    key: tuple[str, str] | None = None
    per: dict[float, float] = {}
    for labels, value in rows:
        le = labels.get("le")
        if le is None:
            continue
        here = labels.get("model_name", ""), labels.get("engine", "0")  # `_key`, inline
        bound = _bound(le)
        if bound is None:
            bad.add(here, f"{name}_bucket of model {here[0]!r} engine {here[1]} has the bound le={le!r}, not a "
                          "number")
            continue
        if here != key:  # an engine's buckets come one after another: look its dict up once per run of them
            key, per = here, buckets.setdefault(here, {})
        per[bound] = per.get(bound, 0.0) + value
    out: dict[tuple[str, str], tuple[tuple[float, ...], list[float]]] = {}
    for key, per in buckets.items():
        ordered = sorted(per.items())
        out[key] = tuple(b for b, _c in ordered), [c for _b, c in ordered]
    return out


def _grouped(expo: Samples, name: str, bad: _Bad,
             buckets: dict[tuple[str, str], tuple[tuple[float, ...], list[float]]]) -> dict[tuple[str, str], Histogram]:
    """The histograms of family `name` from its bucket counts per engine (`_bucket_counts`), each checked."""
    counts = bad.check(name + "_count", _gauge_by_engine(expo, name + "_count"), MAX_COUNTER)
    sums = _gauge_by_engine(expo, name + "_sum")
    out: dict[tuple[str, str], Histogram] = {}
    for key, (bounds, cumulative) in buckets.items():
        # Every count in 0..MAX_COUNTER (a NaN or an infinity makes the sum no finite number), then never falling:
        # the list sorted is itself (the same tests as one comparison per bucket, in C).
        if not (math.isfinite(sum(cumulative)) and min(cumulative) >= 0 and max(cumulative) <= MAX_COUNTER):
            bad.add(key, f"{_where(name, key)} has a bucket count that is not a finite count")
            continue
        if cumulative != sorted(cumulative):
            bad.add(key, f"{_where(name, key)} has bucket counts that fall as the bound rises, which no histogram "
                         "can")
            continue
        if bounds[-1] != math.inf:
            bad.add(key, f"{_where(name, key)} has no +Inf bucket")
            continue
        total = sums.get(key, 0.0)
        if not math.isfinite(total):
            bad.add(key, f"{_where(name, key)} has the sum {total:g}, not a finite number")
            continue
        out[key] = Histogram(tuple(zip(bounds, cumulative, strict=True)), counts.get(key, cumulative[-1]), total)
    return out


def _where(name: str, key: tuple[str, str]) -> str:
    return f"{name} of model {key[0]!r} engine {key[1]}"


def _duplicates(expo: Samples, bad: _Bad) -> None:
    """Name each engine with a series that appears twice (same name and labels): which one is true is unknown."""
    for name, labels in getattr(expo, "duplicates", ()):
        if name == m.CACHE_CONFIG:
            continue  # its labels are its values: an exact copy says nothing new (a different one: `read`)
        key = _key(labels)
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        bad.add(key, f"the series {name}{{{shown}}} appears more than once in the exposition: a duplicate is "
                     "not summed, so the engine is not judged")


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
    return LoraState(int(raw) if raw.isascii() and raw.isdigit() else None, names("waiting_lora_adapters"),
                     names("running_lora_adapters"))


def _offload_tiers(expo: Samples) -> dict[str, tuple[OffloadTier, ...]]:
    """0.33's `vllm:kv_offload_config_info`, per engine (each engine reports its own tier, "not the instance
    total": vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py:29-36 @0.33.0)."""
    def num(labels: Labels, key: str) -> int | None:
        raw = labels.get(key, "")
        return int(raw) if raw.isascii() and raw.isdigit() else None

    out: dict[str, list[OffloadTier]] = {}
    for labels, _value in expo.series(m.KV_OFFLOAD_CONFIG):
        out.setdefault(labels.get("engine", "0"), []).append(OffloadTier(
            "cpu", num(labels, "cpu_kv_cache_size_bytes"), num(labels, "cpu_kv_cache_size_tokens"),
            num(labels, "cpu_num_chunks"), num(labels, "cpu_blocks_per_chunk")))
    return {k: tuple(v) for k, v in out.items()}


def read(expo: Samples, version: str | None = None) -> Snapshot:
    """Group the wanted vLLM series of `expo` by engine."""
    bad = _Bad()
    _duplicates(expo, bad)
    usage_name = m.KV_USAGE if expo.series(m.KV_USAGE) else m.GPU_USAGE
    raw = {name: _gauge_by_engine(expo, name) for name in (m.RUNNING, m.WAITING, usage_name)}
    running = bad.check(m.RUNNING, raw[m.RUNNING], MAX_REQUESTS, whole=True)
    waiting = bad.check(m.WAITING, raw[m.WAITING], MAX_REQUESTS, whole=True)
    usage = bad.check(usage_name, raw[usage_name], 1.0)
    swapped = bad.check(m.SWAPPED, _gauge_by_engine(expo, m.SWAPPED), MAX_REQUESTS, whole=True)
    preemptions = bad.check(m.PREEMPTIONS, _gauge_by_engine(expo, m.PREEMPTIONS), MAX_COUNTER)
    steps = bad.check(m.STEPS, _gauge_by_engine(expo, m.STEPS), MAX_COUNTER)
    gen_tokens = bad.check(m.GENERATION_TOKENS, _gauge_by_engine(expo, m.GENERATION_TOKENS), MAX_COUNTER)
    prompt_tokens = bad.check(m.PROMPT_TOKENS, _gauge_by_engine(expo, m.PROMPT_TOKENS), MAX_COUNTER)
    prefix_queries = bad.check(m.PREFIX_QUERIES, _gauge_by_engine(expo, m.PREFIX_QUERIES), MAX_COUNTER)
    prefix_hits = bad.check(m.PREFIX_HITS, _gauge_by_engine(expo, m.PREFIX_HITS), MAX_COUNTER)
    by_reason: dict[tuple[str, str], dict[str, float]] = {}
    for labels, value in expo.series(m.WAITING_BY_REASON):
        key = _key(labels)
        reason = labels.get("reason", "")
        if not (math.isfinite(value) and 0 <= value <= MAX_REQUESTS):
            bad.add(key, f"{m.WAITING_BY_REASON}{{reason={reason!r}}} of model {key[0]!r} engine {key[1]} is "
                         f"{value:g}, not a possible count of requests")
            continue
        per = by_reason.setdefault(key, {})
        per[reason] = per.get(reason, 0.0) + value
    awake: dict[tuple[str, str], bool] = {}
    for labels, value in expo.series(m.SLEEP_STATE):
        if labels.get("sleep_state") == "awake":
            if not math.isfinite(value):
                bad.add(_key(labels), f"{m.SLEEP_STATE} of model {_key(labels)[0]!r} engine {_key(labels)[1]} is "
                                      f"{value:g}, not a finite number")
                continue
            awake[_key(labels)] = value >= 1
    hists = {role: _histograms(expo, name, bad) for name, role in ROLES}
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

    keys = sorted(set().union(*raw.values()))  # an engine whose gauges are all bad is still one
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
        engine = labels.get("engine", "0")
        seen = cache_info.get(engine)
        if isinstance(seen, CacheInfo):
            if seen.conflict is None and any(seen.labels.get(k) != labels.get(k) for k in ("num_gpu_blocks",
                                                                                           "block_size")):
                cache_info[engine] = CacheInfo(seen.labels, conflict=(
                    f"vLLM exports two different {m.CACHE_CONFIG} series for engine {engine} (num_gpu_blocks "
                    f"{seen.labels.get('num_gpu_blocks')!r} and {labels.get('num_gpu_blocks')!r}, block_size "
                    f"{seen.labels.get('block_size')!r} and {labels.get('block_size')!r}): which holds is unknown"))
            continue  # the first series stays (a second differing elsewhere changes no capacity)
        cache_info[engine] = CacheInfo(labels)
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
        bad_values=bad.found,
    )
