"""The plan inputs a pasted start-up log fills in (what the log states: the engine's `parse_startup_log`)."""

from __future__ import annotations

from dataclasses import replace

from ..engines.base import AttentionFacts as AttentionFacts
from ..engines.base import LogFacts as LogFacts
from ..engines.vllm import VLLM
from .estimate import GiB, Inputs


def parse(text: str) -> LogFacts:
    """The capacity facts of a vLLM start-up log; ValueError when it has none of them."""
    return VLLM.parse_startup_log(text)


def apply(facts: LogFacts, x: Inputs) -> Inputs:
    """`x` with what the log states: memory per stage, override, max_model_len, TP, PP, DP, KV dtype, seqs.

    A pool printed as "X.XX GiB" is known to ±0.005 GiB; it is taken as printed.
    """
    f = facts.flag
    changes: dict[str, object] = {}
    if facts.kv_memory_gib:
        changes["stage_kv_memory"] = tuple(round(g * GiB) for g in facts.kv_memory_gib)
        changes["kv_cache_memory"] = None
        changes["gpu_memory"] = None
    exact = f("kv_cache_memory_bytes")
    if exact and exact.isdigit() and len(facts.kv_memory_gib) <= 1:
        # vLLM's own --kv-cache-memory-bytes, exact, beside the pool it printed rounded to 2 decimals.
        changes["kv_cache_memory"] = int(exact)
        changes["stage_kv_memory"] = None
        changes["gpu_memory"] = None
    if facts.override is not None:
        changes["num_gpu_blocks_override"] = facts.override
    length = facts.max_model_len or (int(f("max_model_len") or 0) or None)
    if length:
        changes["max_model_len"] = length
    for name, key in (("tensor_parallel_size", "tensor_parallel_size"),
                      ("pipeline_parallel_size", "pipeline_parallel_size"),
                      ("data_parallel_size", "data_parallel_size"), ("max_num_seqs", "max_num_seqs"),
                      ("max_num_batched_tokens", "max_num_batched_tokens"), ("block_size", "block_size")):
        value = f(name)
        if value and value.isdigit():
            changes[key] = int(value)
    if facts.backend_block_size and not (f("block_size") or "").isdigit():
        changes["block_size"] = facts.backend_block_size
    a = facts.attention
    if a is not None and a.block_size is not None and not (a.block_size_source or "").startswith(
            "Setting attention block size"):
        # The block size vLLM ran with wins over the one asked (a backend's forced or set size, the capacity
        # lines, the CPU platform's default); the asked one stays in `a.block_size_asked`, shown beside it. A
        # hybrid's raised attention block size is not an input: the estimate raises it the way vLLM does.
        changes["block_size"] = a.block_size
    positions = f("max_position_embeddings")
    if positions and positions.isdigit():  # the log's --hf-overrides: the model config vLLM checked lengths with
        changes["shape"] = replace(x.shape, max_position_embeddings=int(positions))
    kv = f("kv_cache_dtype")
    if kv:
        changes["kv_cache_dtype"] = kv
    if f("enable_prefix_caching") in ("True", "False"):
        changes["prefix_caching"] = f("enable_prefix_caching") == "True"
    if f("async_scheduling") in ("True", "False"):
        changes["async_scheduling"] = f("async_scheduling") == "True"
    ssm = f("mamba_ssm_cache_dtype")
    if ssm:
        changes["mamba_ssm_cache_dtype"] = ssm
    return replace(x, **changes)  # type: ignore[arg-type]
