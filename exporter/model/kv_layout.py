"""vLLM's KV-cache layout of a model: bytes per token, layer groups, bytes per block, blocks per request.

Follows vLLM 0.30-0.33 (`vllm/v1/core/kv_cache_utils.py`): layers of one attention kind form KV-cache
groups of equal size (the smaller kind's layer count, or the larger when they are within 1.5x); one pool
block holds one page for every layer of a group. Shared by the sidecar (absolute bytes of a running
server) and the planner (`estimate`), so each formula exists once.
"""

from __future__ import annotations

from dataclasses import dataclass

from .shape import ModelShape

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for non-negative integers."""
    return -(-a // b)


def dtype_bytes(name: str) -> int:
    try:
        return KV_DTYPE_BYTES.get(name) or DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def kv_bytes_per_token_per_layer(shape: ModelShape, kv_bytes: int, tp: int) -> int:
    """Full attention: 2 (K, V) × max(1, kv_heads // TP) × head_dim × bytes; MLA: one latent × bytes, on every rank."""
    if shape.mla_latent is not None:
        return shape.mla_latent * kv_bytes
    return 2 * max(1, shape.num_kv_heads // tp) * shape.head_dim * kv_bytes


def served_kv_bytes_per_token(shape: ModelShape, cache_dtype: str | None, tp: int) -> int:
    """KV bytes per token per device of a running server: its cache_dtype ('auto' = the model's) and TP."""
    kv = resolve_kv_dtype(shape, cache_dtype)
    return kv_bytes_per_token_per_layer(shape, dtype_bytes(kv), tp) * shape.num_layers


@dataclass(frozen=True)
class Layout:
    """vLLM's KV-cache groups for a model with one page size: how many groups of each kind, of what size."""

    group_size: int
    full_groups: int
    sliding_groups: int

    def bytes_per_block(self, page: int) -> int:
        """One pool block = one page for every layer of a group."""
        return self.group_size * page


def layout(shape: ModelShape) -> Layout:
    """Group layers like vLLM: equal-size groups per kind, the size the smaller kind's count (or the larger's)."""
    counts = [c for c in (shape.full_layers, shape.sliding_layers) if c]
    size = min(counts)
    if max(counts) < 1.5 * size:
        size = max(counts)
    return Layout(size, ceil_div(shape.full_layers, size), ceil_div(shape.sliding_layers, size))


def sliding_blocks(window: int, in_flight: int, max_model_len: int, block_size: int) -> int:
    """Blocks a sliding-window layer holds per request: cdiv(min(window − 1 + in-flight, L), bs) + 1."""
    return ceil_div(min(window - 1 + in_flight, max_model_len), block_size) + 1


def blocks_per_request(shape: ModelShape, lay: Layout, max_model_len: int, block_size: int, in_flight: int) -> int:
    """Pool blocks one max_model_len request takes: Σ over groups."""
    full = ceil_div(max_model_len, block_size)
    slide = sliding_blocks(shape.sliding_window, in_flight, max_model_len, block_size) if shape.sliding_window else 0
    return lay.full_groups * full + lay.sliding_groups * slide


def resolve_kv_dtype(shape: ModelShape, cache_dtype: str | None) -> str:
    """The KV dtype of a server: its cache_dtype / --kv-cache-dtype, 'auto' (or unknown) = the model's dtype."""
    return shape.dtype if cache_dtype in (None, "", "auto") else str(cache_dtype)


def bytes_per_block(shape: ModelShape, cache_dtype: str | None, tp: int, block_size: int) -> int:
    """Bytes one pool block takes per device: the layer group's pages, as vLLM sizes a block (one formula)."""
    page = kv_bytes_per_token_per_layer(shape, dtype_bytes(resolve_kv_dtype(shape, cache_dtype)), tp) * block_size
    return layout(shape).bytes_per_block(page)
