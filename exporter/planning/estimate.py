"""Capacity planning: KV bytes from a model's config.json, the memory budget, and vLLM's own block math.

Follows vLLM 0.30-0.33 (`vllm/v1/core/kv_cache_utils.py`): layers of one attention kind form KV-cache
groups of equal size (the smaller kind's layer count, or the larger when they are within 1.5x); one pool
block holds one page for every layer of a group; num_blocks = pool // bytes per block; max concurrency =
num_blocks / Σ groups' blocks per max_model_len request (null block included, as vLLM logs it); a
sliding-window group holds cdiv(min(window − 1 + in-flight tokens, max_model_len), bs) + 1 blocks per
request; the largest max_model_len that fits reserves the null block first. Attention + Mamba hybrids
are refused, not guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..model.kv_layout import (
    blocks_per_request,
    ceil_div,
    dtype_bytes,
    kv_bytes_per_token_per_layer,
    layout,
    sliding_blocks,
)
from ..model.shape import ModelShape, load_config, shape_from_config

GiB = 1024**3
DEFAULT_ACTIVATION_BYTES = 2 * GiB  # activations + non-torch memory + CUDA graphs of a mid-size model

def load_model(path: Path) -> tuple[ModelShape, int | None]:
    """The shape of a config.json (or model folder) and, for a folder, its weights' bytes; raises ValueError."""
    cfg, weights = load_config(path)
    return shape_from_config(cfg), weights


def needed_bytes(shape: ModelShape, page: int, max_model_len: int, block_size: int, in_flight: int) -> int:
    """vLLM's start-up check: Σ over layers of each layer's worst case at max_model_len."""
    full = shape.full_layers * ceil_div(max_model_len, block_size)
    slide = (shape.sliding_layers * sliding_blocks(shape.sliding_window, in_flight, max_model_len, block_size)
             if shape.sliding_window else 0)
    return (full + slide) * page


def fit_length(shape: ModelShape, page: int, block_size: int, in_flight: int, budget: int, cap: int) -> int:
    """vLLM's 'estimated maximum model length': binary search of the longest that fits in `budget`."""
    if needed_bytes(shape, page, 1, block_size, in_flight) > budget:
        return 0
    lo, hi, best = 1, cap, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if needed_bytes(shape, page, mid, block_size, in_flight) <= budget:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def kv_pool_bytes(gpu_memory: int, utilization: float, weights_per_device: int, activation: int) -> int:
    """KV pool per device = ceil(memory × gpu_memory_utilization) − weights − activation reserve."""
    return math.ceil(gpu_memory * utilization) - weights_per_device - activation


@dataclass(frozen=True)
class Inputs:
    shape: ModelShape
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    block_size: int = 16
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192  # sliding-window layers keep this many in-flight tokens per batch
    async_scheduling: bool = True  # two batches in flight (vLLM's default where supported)
    gpu_memory: int | None = None  # bytes per device
    gpu_memory_utilization: float = 0.92
    weights_bytes: int | None = None  # whole model
    params: int | None = None  # parameter count, when the weights' size is not known
    activation_bytes: int = DEFAULT_ACTIVATION_BYTES
    kv_cache_memory: int | None = None  # bytes per device, skips the budget math
    num_gpu_blocks_override: int | None = None

    @property
    def model_dtype(self) -> str:
        return self.shape.dtype if self.dtype == "auto" else self.dtype

    @property
    def kv_dtype(self) -> str:
        return self.model_dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype

    @property
    def in_flight_tokens(self) -> int:
        """vLLM's max_in_flight_tokens: max_num_batched_tokens per concurrent batch."""
        return self.max_num_batched_tokens * (2 if self.async_scheduling else 1)

    @property
    def context(self) -> int:
        if self.max_model_len is not None:
            return self.max_model_len
        if self.shape.max_position_embeddings:
            return int(self.shape.max_position_embeddings)
        raise ValueError("max_model_len is unknown: pass --max-model-len")


@dataclass(frozen=True)
class Estimate:
    family: str
    kv_bytes_per_token_per_layer: int
    kv_bytes_per_token: int  # per device, whole model
    bytes_per_block: int
    weights_per_device: int | None
    activation_bytes: int | None
    kv_pool_bytes: int
    num_blocks: int
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    max_model_len_fit: int
    max_num_seqs: int
    verdict: str
    explanation: str


VERDICTS = ("budget_exhausted", "sequence_too_long", "too_many_sequences", "fits")


def estimate(x: Inputs) -> Estimate:
    """The five steps: budget, weights and activations, KV pool, one sequence (S side), many (N side)."""
    tp = x.tensor_parallel_size
    per_layer = kv_bytes_per_token_per_layer(x.shape, dtype_bytes(x.kv_dtype), tp)
    per_token = per_layer * x.shape.num_layers
    per_block = per_token * x.block_size
    weights = None
    if x.kv_cache_memory is not None:
        pool = x.kv_cache_memory
        activation = None
    else:
        if x.gpu_memory is None:
            raise ValueError("give --gpu-memory (with weights) or --kv-cache-memory")
        weights_total = x.weights_bytes
        if weights_total is None and x.params is not None:
            weights_total = x.params * dtype_bytes(x.model_dtype)
        if weights_total is None:
            raise ValueError("the weights' size is unknown: pass a model folder with a safetensors index, "
                             "--params or --weights-bytes")
        weights = ceil_div(weights_total, tp)
        activation = x.activation_bytes
        pool = kv_pool_bytes(x.gpu_memory, x.gpu_memory_utilization, weights, activation)
    lay = layout(x.shape)
    page = per_layer * x.block_size
    per_block = lay.bytes_per_block(page)
    blocks = max(0, pool // per_block)
    if x.num_gpu_blocks_override is not None:
        blocks = x.num_gpu_blocks_override
        pool = blocks * per_block  # what vLLM's fit check then plans against
    length = x.context
    per_request = blocks_per_request(x.shape, lay, length, x.block_size, x.in_flight_tokens)
    conc = blocks / per_request if blocks else 0.0
    # The fit check reserves the null block's bytes first.
    fit = fit_length(x.shape, page, x.block_size, x.in_flight_tokens, pool - per_block, length) if blocks else 0
    if blocks < 2:
        verdict = "budget_exhausted"
        why = (f"weights ({_gib(weights)}) and the activation reserve ({_gib(activation)}) leave "
               f"{_gib(max(pool, 0))} for the KV cache: not one block of {per_block} bytes")
    elif fit < length:
        verdict = "sequence_too_long"
        why = (f"one request of max_model_len {length} needs {per_request} blocks, the pool has {blocks - 1} "
               f"usable: vLLM refuses to start; the largest max_model_len that fits is {fit}")
    elif x.max_num_seqs * per_request > blocks - 1:
        verdict = "too_many_sequences"
        why = (f"{x.max_num_seqs} sequences at max_model_len need {x.max_num_seqs * per_request} blocks, the pool "
               f"has {blocks - 1}: it starts, but only {conc:.2f} full-length requests fit at once; more long "
               "requests will be preempted")
    else:
        verdict = "fits"
        why = f"{x.max_num_seqs} sequences of max_model_len {length} fit in {blocks - 1} usable blocks"
    return Estimate(
        family=x.shape.family,
        kv_bytes_per_token_per_layer=per_layer,
        kv_bytes_per_token=per_token,
        bytes_per_block=per_block,
        weights_per_device=weights,
        activation_bytes=activation,
        kv_pool_bytes=pool,
        num_blocks=blocks,
        kv_tokens=int(conc * length),
        max_model_len=length,
        max_concurrency=conc,
        max_model_len_fit=fit,
        max_num_seqs=x.max_num_seqs,
        verdict=verdict,
        explanation=why,
    )


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GiB:.2f} GiB"


WHAT_IF_COSTS = {
    "max_model_len halved": "halves the context window: longer prompts are rejected",
    "KV cache fp8": "quantization error in attention (usually small); needs hardware fp8 support",
    "tensor parallel doubled": "twice the devices and all-reduce communication every layer",
    "max_num_seqs 1": "peak concurrency of one request: throughput collapses",
    "gpu_memory_utilization +0.05": "less headroom for activations and other processes: OOM risk at start",
}


def what_if(x: Inputs) -> list[tuple[str, Estimate, str]]:
    """The same estimate under each standard change, with what the change costs."""
    changes: list[tuple[str, Inputs]] = [
        ("max_model_len halved", replace(x, max_model_len=max(x.block_size, x.context // 2))),
        ("KV cache fp8", replace(x, kv_cache_dtype="fp8")),
        ("tensor parallel doubled", replace(x, tensor_parallel_size=2 * x.tensor_parallel_size)),
        ("max_num_seqs 1", replace(x, max_num_seqs=1)),
    ]
    if x.kv_cache_memory is None:
        changes.append(("gpu_memory_utilization +0.05",
                        replace(x, gpu_memory_utilization=min(1.0, x.gpu_memory_utilization + 0.05))))
    return [(name, estimate(changed), WHAT_IF_COSTS[name]) for name, changed in changes]


def as_json(x: Inputs, e: Estimate) -> dict[str, Any]:
    out: dict[str, Any] = dict(e.__dict__)
    out["max_concurrency"] = round(e.max_concurrency, 4)
    out["partitions"] = {"weights_per_device": e.weights_per_device, "activation": e.activation_bytes,
                         "kv_pool": e.kv_pool_bytes}
    out["inputs"] = {"model_type": x.shape.model_type, "num_layers": x.shape.num_layers,
                     "num_kv_heads": x.shape.num_kv_heads, "head_dim": x.shape.head_dim, "dtype": x.model_dtype,
                     "kv_cache_dtype": x.kv_dtype, "tensor_parallel_size": x.tensor_parallel_size,
                     "block_size": x.block_size, "max_model_len": x.context, "max_num_seqs": x.max_num_seqs}
    out["what_if"] = [{"change": name, "verdict": w.verdict, "num_blocks": w.num_blocks,
                       "max_concurrency": round(w.max_concurrency, 4), "max_model_len_fit": w.max_model_len_fit,
                       "cost": cost} for name, w, cost in what_if(x)]
    return out


def render(x: Inputs, e: Estimate) -> str:
    rows = [
        f"model: {x.shape.model_type} ({e.family}), {x.shape.num_layers} layers, "
        + (f"MLA latent {x.shape.mla_latent}" if x.shape.mla_latent else
           f"{x.shape.num_kv_heads} KV heads × head_dim {x.shape.head_dim}")
        + f", KV dtype {x.kv_dtype}, TP {x.tensor_parallel_size}, block size {x.block_size}",
        f"verdict: {e.verdict}: {e.explanation}",
        "",
        f"  weights per device       {_gib(e.weights_per_device)}",
        f"  activation reserve       {_gib(e.activation_bytes)}",
        f"  KV pool per device       {_gib(e.kv_pool_bytes)}",
        f"  KV bytes per token       {e.kv_bytes_per_token_per_layer} per layer, {e.kv_bytes_per_token} per device "
        f"({e.kv_bytes_per_token / 1024:.1f} KiB)",
        f"  bytes per block          {e.bytes_per_block}",
        f"  blocks                   {e.num_blocks} ({max(e.num_blocks - 1, 0)} usable)",
        f"  KV cache size            {e.kv_tokens:,} tokens",
        f"  max concurrency          {e.max_concurrency:.2f}x at {e.max_model_len:,} tokens per request",
        f"  max_model_len that fits  {e.max_model_len_fit:,}",
        "",
        f"  {'what if':<30} {'verdict':<20} {'blocks':>10} {'concurrency':>12} {'fit':>10}  cost",
    ]
    for name, w, cost in what_if(x):
        rows.append(f"  {name:<30} {w.verdict:<20} {w.num_blocks:>10} {w.max_concurrency:>11.2f}x "
                    f"{w.max_model_len_fit:>10}  {cost}")
    return "\n".join(rows)
