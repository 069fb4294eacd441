"""Capacity (num_gpu_blocks per engine) when vLLM exports no `cache_config_info`: pure functions of what the
start-up log printed, the model's shape and the KV pool, each returning the value with its source and range.

The Rust frontend (`VLLM_USE_RUST_FRONTEND=1`, 0.32.0 and 0.33.0) exports no `cache_config_info`; a scrape's
relabelling can drop it too. The sources, in the order `pipeline.config.resolve` takes them after our own
`--num-gpu-blocks` and vLLM's `--num-gpu-blocks-override`:

1. the start-up log's "Overriding num_gpu_blocks=N with num_gpu_blocks_override=M" (`kv_cache_planning.py:1526`
   @0.33.0): M, exact;
2. its "<device> KV cache size: T tokens, Maximum concurrency for L tokens per request: C x"
   (`update_kv_cache_capacity`, vllm/v1/core/kv_cache_utils.py:1136-1156 @0.33.0; the 0.30-0.32 text is the
   same): C = N / R printed with 2 decimals and T = int(N / R × L), R the blocks one request of L tokens takes
   over the KV-cache groups (`get_max_concurrency_for_kv_cache_config`, kv_cache_utils.py:1061-1093). vLLM
   <= 0.19 prints T = N // groups × block size (kv_cache_utils.py:1254-1296 @0.12.0). Every N both figures allow
   is kept: one value when they pin it, else a range. R comes from the model's layout with --model-config; without
   it, one KV-cache group (R = ceil(L / block size)) is assumed and said;
3. an estimate: the KV pool per device ÷ bytes per block of the model's layout (`model.kv_layout`), the minimum
   over pipeline stages (`get_kv_cache_configs`), as vLLM sizes it (`num_blocks = available // bytes per block`,
   vllm/v1/core/kv_cache_planning.py:574 @0.33.0). The pool: vLLM's `--kv-cache-memory-bytes` (exact: vLLM skips
   profiling and reserves that much, vllm/v1/worker/gpu_worker.py:656-681 @0.33.0), the log's "Available KV cache
   memory: X GiB" or "reserved X GiB ... as specified by kv_cache_memory_bytes" (X rounded to 2 decimals: ±0.005
   GiB), or ours (`KvPool`, from --kv-cache-memory or --gpu-memory in the CLI).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..core import defaults
from ..engines.base import Engine, LogFacts
from ..engines.vllm import VLLM
from ..model.kv_layout import Plan, drafter_of, plan, resolve_kv_dtype
from ..model.shape import ModelShape
from .config import Known, ServingConfig, Source, value

GiB = 1024**3
LOG_GIB_STEP = 0.005  # vLLM prints pools with `format_gib`: round(bytes / GiB, 2) (vllm/utils/mem_utils.py:30)


@dataclass(frozen=True)
class KvPool:
    """The KV pool per device in bytes, `low`..`high` (equal when exact), and where it came from."""

    low: int
    high: int
    basis: str
    source: Source = Source.FLAG


def in_flight_candidates(cfg: ServingConfig, facts: LogFacts | None) -> tuple[int, ...]:
    """The tokens a step may have in flight (max_num_batched_tokens × concurrent batches: 2 with async
    scheduling, vLLM's default where supported, `VllmConfig.max_concurrent_batches`), which sizes a
    sliding-window group's blocks per request: the stated budget, else every device class's default."""
    budget = value(cfg.max_num_batched_tokens)
    flag = facts.flag("max_num_batched_tokens") if facts is not None else None
    budgets = (budget,) if budget else ((int(flag),) if flag and flag.isdigit()
                                        else defaults.VLLM_MAX_NUM_BATCHED_TOKENS_DEFAULTS)
    asyncs = facts.flag("async_scheduling") if facts is not None else None
    batches = (2,) if asyncs == "True" else (1,) if asyncs == "False" else (1, 2)
    return tuple(sorted({b * k for b in budgets for k in batches}))


def blocks_per_request(lay: Plan | None, max_model_len: int, block_size: int,
                       in_flights: tuple[int, ...]) -> tuple[tuple[int, ...], str | None]:
    """Every R (blocks one request of max_model_len takes over the layout's groups) the in-flight tokens allow,
    and the assumption made when the layout is unknown (one KV-cache group)."""
    if lay is not None:
        return tuple(sorted({lay.blocks_per_request(max_model_len, t) for t in in_flights})), None
    return (-(-max_model_len // block_size),), ("one KV-cache group assumed (give --model-config for a hybrid "
                                                "or sliding-window model)")


def blocks_from_log(facts: LogFacts, block_size: int, lay: Plan | None, in_flights: tuple[int, ...] = (0,),
                    engine: Engine = VLLM) -> Known[int] | None:
    """num_gpu_blocks from the log's override line, else from its KV-size and concurrency figures (the engine's
    `blocks_from_log_figures`, over every R the unknown in-flight tokens allow); None when the log states
    neither, or figures no block count satisfies."""
    if facts.override is not None:
        return Known(facts.override, Source.STARTUP_LOG,
                     basis=f"start-up log: Overriding num_gpu_blocks={facts.num_gpu_blocks} with "
                           f"num_gpu_blocks_override={facts.override}")
    if facts.max_model_len is None or facts.kv_tokens is None or facts.max_concurrency is None:
        return None
    rs, assumed = blocks_per_request(lay, facts.max_model_len, block_size, in_flights)
    found = [f for r in rs if (f := engine.blocks_from_log_figures(facts, block_size, r)) is not None]
    if not found:
        return None
    low, high = min(f[0] for f in found), max(f[1] for f in found)
    per = f"{rs[0]}" if len(rs) == 1 else f"{rs[0]}-{rs[-1]}"
    basis = (f"start-up log: KV cache size {facts.kv_tokens:,} tokens, maximum concurrency "
             f"{facts.max_concurrency:.2f}x for {facts.max_model_len:,} tokens per request, {per} blocks per such "
             "request")
    if assumed:
        basis += f"; {assumed}"
    if low == high:
        return Known(low, Source.STARTUP_LOG, basis=basis)
    return Known((low + high) // 2, Source.STARTUP_LOG, low=low, high=high, basis=basis)


def pools_from_log(facts: LogFacts) -> KvPool | None:
    """The KV pool the log printed (the first stage's; GiB with 2 decimals), None when it printed none."""
    if not facts.kv_memory_gib:
        return None
    gib = min(facts.kv_memory_gib)
    exact = facts.flag("kv_cache_memory_bytes")
    if exact and exact.isdigit():
        return KvPool(int(exact), int(exact), f"start-up log: kv_cache_memory_bytes {int(exact):,}",
                      Source.STARTUP_LOG)
    return KvPool(max(0, math.ceil((gib - LOG_GIB_STEP) * GiB)), math.floor((gib + LOG_GIB_STEP) * GiB),
                  f"start-up log: {gib:g} GiB of KV cache memory (printed to 0.01 GiB)", Source.STARTUP_LOG)


def layout(shape: ModelShape, cfg: ServingConfig, draft: ModelShape | None = None) -> tuple[Plan, str]:
    """The model's KV layout under the server's flags, and which flags came from vLLM's defaults (vLLM takes
    TP 1, PP 1, KV dtype auto and prefix caching on when its command line says nothing:
    vllm/engine/arg_utils.py @0.33.0). Raises ValueError (Unsupported) for a layout we cannot size."""
    defaults = [name for name, known in (("TP 1", cfg.tensor_parallel_size), ("PP 1", cfg.pipeline_parallel_size))
                if known is None]
    tp = value(cfg.tensor_parallel_size) or 1
    pp = value(cfg.pipeline_parallel_size) or 1
    kv = value(cfg.kv_cache_dtype) or value(cfg.cache_dtype)
    if kv is None:
        defaults.append("KV dtype auto")
    caching = value(cfg.enable_prefix_caching)
    bs = value(cfg.block_size)
    assert bs is not None
    kv_dtype = resolve_kv_dtype(shape, kv)
    drafter = drafter_of(value(cfg.speculative_method), shape, kv_dtype, tp, draft)
    lay = plan(shape, kv_dtype, tp, bs, pp, True if caching is None else caching, drafter=drafter)
    return lay, ", ".join(defaults)


def estimate_blocks(lay: Plan, pool: KvPool, assumed: str = "") -> Known[int] | None:
    """num_gpu_blocks = min over stages of pool // bytes per block, over the pool's range; None below 2 blocks."""
    per_block = max(lay.stage_bytes_per_block)  # the stage that sets the pool (every stage gets the same pool)
    low, high = pool.low // per_block, pool.high // per_block
    if high < 2:
        return None
    basis = f"{pool.basis} ÷ {per_block:,} bytes per block"  # the source (estimated) is shown beside it
    if assumed:
        basis += f" ({assumed}: vLLM's defaults, no flag says otherwise)"
    return Known(low if low == high else (low + high) // 2, Source.ESTIMATED,
                 low=low if low != high else None, high=high if low != high else None, basis=basis)


def with_capacity(cfg: ServingConfig, facts: LogFacts | None, shape: ModelShape | None,
                  pool: KvPool | None, engine: Engine = VLLM,
                  draft: ModelShape | None = None) -> tuple[ServingConfig, str | None]:
    """`cfg` with num_gpu_blocks from the log or an estimate when nothing better gave it, and one sentence when
    an estimate was possible in principle but failed (an unsupported layout), or when vLLM's command line and
    its start-up log disagree on the count (`_log_versus_args`: the log wins)."""
    if cfg.block_size is None:
        return cfg, None
    if cfg.num_gpu_blocks is not None:
        return _log_versus_args(cfg, facts, engine)
    lay: Plan | None = None
    assumed = ""
    problem = None
    if shape is not None:
        try:
            lay, assumed = layout(shape, cfg, draft)
        except ValueError as exc:
            problem = f"--model-config cannot size the KV cache: {exc}"
    bs = value(cfg.block_size)
    assert bs is not None
    if facts is not None:
        found = blocks_from_log(facts, lay.block_size if lay is not None else bs, lay,
                                in_flight_candidates(cfg, facts), engine)
        if found is not None:
            return _replace(cfg, found), problem
    if lay is None:
        return cfg, problem
    # Our own flag first (the operator's word), then vLLM's exact --kv-cache-memory-bytes, then the printed pool.
    exact = cfg.kv_cache_memory_bytes
    if pool is None and exact is not None:
        where = "the start-up log" if exact.source == Source.STARTUP_LOG else "vLLM's command line"
        pool = KvPool(exact.value, exact.value, f"kv_cache_memory_bytes {exact.value:,} on {where}", exact.source)
    if pool is None and facts is not None:
        pool = pools_from_log(facts)
    if pool is None:
        return cfg, problem
    found = estimate_blocks(lay, pool, assumed)
    return (_replace(cfg, found) if found is not None else cfg), problem


def _log_versus_args(cfg: ServingConfig, facts: LogFacts | None, engine: Engine) -> tuple[ServingConfig, str | None]:
    """The count vLLM's command line gave (`--num-gpu-blocks-override`) against the count of the start-up log's
    last start-up. The log wins where they disagree: it is what vLLM printed when it last started and is re-read
    every interval, while --vllm-args is fixed when the sidecar starts and a /proc command line may predate an
    in-place restart. A count vLLM exports (cache_config_info) is never questioned here."""
    given = cfg.num_gpu_blocks
    assert given is not None
    if facts is None or given.source not in (Source.VLLM_ARGS, Source.CMDLINE):
        return cfg, None
    bs = value(cfg.block_size)
    assert bs is not None
    logged = blocks_from_log(facts, bs, None, in_flight_candidates(cfg, facts), engine)
    if logged is None:
        return cfg, None
    low, high = (logged.low, logged.high) if logged.uncertain else (logged.value, logged.value)
    assert low is not None and high is not None
    if low <= given.value <= high:
        return cfg, None
    where = "--vllm-args" if given.source == Source.VLLM_ARGS else "vLLM's command line"
    shown = f"{logged.value:,}" if low == high else f"{low:,}-{high:,}"
    note = (f"{where} gives {given.basis or f'{given.value:,} blocks'}, vLLM's start-up log {shown} blocks "
            f"({logged.basis}): the start-up log wins (what vLLM printed when it last started)")
    return _replace(cfg, logged), note


def _replace(cfg: ServingConfig, found: Known[int]) -> ServingConfig:
    return replace(cfg, num_gpu_blocks=found)
