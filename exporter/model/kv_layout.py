"""vLLM's KV-cache layout of a model: page sizes, KV-cache groups, bytes per block, blocks per request.

Follows vLLM 0.32.0 on its default (layer-outer, `LBNHC`) KV layout:

- Attention page (`vllm/v1/kv_cache_interface.py`, `AttentionSpec.page_size_bytes`): block_size × 2 (K, V)
  × max(1, kv_heads // TP) × head_dim × bytes; MLA: block_size × latent × bytes on every rank.
- Linear / Mamba layers (`MambaSpec`): a fixed state per request (`shape.LinearState`). For a hybrid,
  `Platform._align_hybrid_block_size` (`vllm/platforms/interface.py`) raises the attention block size to
  the smallest multiple of the kernel block (the block size, at least 128 for MLA) whose page holds the
  state, and pads the state's page to the attention page.
- Groups (`_get_kv_cache_groups_uniform_page_size`, `vllm/v1/core/kv_cache_utils.py`): layers of one
  kind form groups of equal size (the smallest kind's layer count, or the largest when within 1.5x);
  group i of a kind holds its layers [i::n]. One pool block = one page for every layer of the largest
  group (`_get_kv_cache_bytes_per_block`).
- Pipeline parallel: stage s holds layers `get_pp_indices` gives it (`vllm/distributed/utils.py`; the
  remainder goes to the stages before the last); its block is its share of the largest group.
- Per request (`get_max_concurrency_for_kv_cache_config`): full attention cdiv(L, bs); sliding window
  cdiv(min(window − 1 + in-flight, L), bs) + 1; a linear group 1 block, or 2 + prefill checkpoints with
  prefix caching (`mamba_cache_mode` 'align', vLLM 0.32.0's default for hybrids).
- A speculative drafter with its own KV (EAGLE, EAGLE3, MTP, a draft model: `uses_draft_kv_cache`,
  vllm/config/speculative.py:2172-2177 @0.33.0) adds its attention layers to the model's KV-cache spec after the
  target's; they are grouped with the target's layers of the same spec (`_get_kv_cache_groups_uniform_page_size`,
  vllm/v1/core/kv_cache_planning.py:416-560 @0.33.0). gpt-oss-120b + an EAGLE3 drafter: 19 full + 18 sliding
  layers form 2 groups of 19 ("Add 1 padding layers, may waste at most 5.56% KV cache memory", vllm-project/vllm
  PR#29303), so a block holds 19 layers' pages, not the 18 of the target alone. The drafter runs on the last
  pipeline stage.

Shared by the sidecar (absolute bytes of a running server) and the planner (`estimate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import Unsupported
from .shape import FULL, LINEAR, NONE, SLIDING, ModelShape

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for non-negative integers."""
    return -(-a // b)


def dtype_bytes(name: str) -> int:
    """Bytes of one element of a torch dtype name or a KV-cache dtype ('fp8'); ValueError if unknown."""
    try:
        return KV_DTYPE_BYTES.get(name) or DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def kv_bytes_per_token_per_layer(shape: ModelShape, kv_bytes: int, tp: int) -> int:
    """Attention: 2 (K, V) × max(1, kv_heads // TP) × head_dim × bytes; MLA: one latent × bytes, on every rank."""
    if shape.mla_latent is not None:
        return shape.mla_latent * kv_bytes
    return 2 * max(1, shape.num_kv_heads // tp) * shape.head_dim * kv_bytes


def resolve_kv_dtype(shape: ModelShape, cache_dtype: str | None) -> str:
    """The KV dtype of a server: its cache_dtype / --kv-cache-dtype, 'auto' (or unknown) = the model's dtype."""
    return shape.dtype if cache_dtype in (None, "", "auto") else str(cache_dtype)


def served_kv_bytes_per_token(shape: ModelShape, cache_dtype: str | None, tp: int,
                              drafter: Drafter | None = None) -> int:
    """KV bytes per token per device of a running server (attention layers only; linear layers hold a state),
    the drafter's layers included."""
    kv = resolve_kv_dtype(shape, cache_dtype)
    extra = len(drafter.kinds) if drafter is not None else 0
    return kv_bytes_per_token_per_layer(shape, dtype_bytes(kv), tp) * (shape.attention_layers + extra)


def pp_partitions(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM 0.32.0's `get_pp_indices` splits them: even, the remainder one each
    to the stages before the last (walking back from the second-to-last)."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def sliding_blocks(window: int, in_flight: int, max_model_len: int, block_size: int) -> int:
    """Blocks a sliding-window layer holds per request: cdiv(min(window − 1 + in-flight, L), bs) + 1."""
    return ceil_div(min(window - 1 + in_flight, max_model_len), block_size) + 1


@dataclass(frozen=True)
class Group:
    """One KV-cache group: a kind (full, sliding, linear) and the global indices of its layers."""

    kind: str
    layers: tuple[int, ...]


@dataclass(frozen=True)
class Drafter:
    """A speculative drafter's attention layers that join the target's KV-cache groups: their kinds (FULL or
    SLIDING, in layer order), one layer's KV bytes per token per rank, and where the shape was read."""

    method: str
    kinds: tuple[str, ...]
    bytes_per_token: int
    source: str = ""


@dataclass(frozen=True)
class Plan:
    """vLLM's KV-cache plan for one model on one parallel layout: every figure per device (rank)."""

    block_size: int  # tokens per block, after hybrid alignment
    attention_bytes_per_token: int  # one attention layer, one token, one rank
    page: int  # bytes of one layer's page of one block (the Mamba state padded to it)
    state_bytes: int  # one linear layer's state of one request, unpadded (0 without linear layers)
    groups: tuple[Group, ...]
    stages: tuple[tuple[int, int], ...]  # [start, end) layer range of each pipeline stage
    linear_blocks: int  # blocks a linear group holds per request
    window: int | None
    drafter: Drafter | None = None
    padding: tuple[tuple[str, int, int], ...] = ()  # (kind, padding layers, layers of the kind), as vLLM warns

    @property
    def stage_bytes_per_block(self) -> tuple[int, ...]:
        """Bytes of one pool block on each stage: its layers of the largest group × page."""
        return tuple(max(sum(1 for i in g.layers if lo <= i < hi) for g in self.groups) * self.page
                     for lo, hi in self.stages)

    @property
    def bytes_per_block(self) -> int:
        """Bytes of one pool block on the first stage (the whole model without pipeline parallel)."""
        return self.stage_bytes_per_block[0]

    def group_blocks(self, group: Group, max_model_len: int, in_flight: int) -> int:
        """Blocks one max_model_len request takes in one group."""
        if group.kind == LINEAR:
            return self.linear_blocks
        if group.kind == SLIDING and self.window is not None:
            return sliding_blocks(self.window, in_flight, max_model_len, self.block_size)
        return ceil_div(max_model_len, self.block_size)

    def blocks_per_request(self, max_model_len: int, in_flight: int) -> int:
        """Pool blocks one max_model_len request takes: Σ over groups (every stage holds every group)."""
        return sum(self.group_blocks(g, max_model_len, in_flight) for g in self.groups)


def hybrid_block_size(shape: ModelShape, block_size: int, attn_per_token: int, state: int) -> int:
    """vLLM's attention block size for a hybrid: the smallest multiple of the kernel block (the block size,
    at least 128 for MLA) whose attention page holds one linear state; the given block size if larger."""
    if not state:
        return block_size
    kernel = max(block_size, 128) if shape.mla_latent is not None else block_size
    return max(block_size, kernel * ceil_div(state, kernel * attn_per_token))


def padding(kinds: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """(kind, padding layers, layers of that kind) for each kind vLLM pads to the group size: its warning
    "Add %d padding layers, may waste at most %.2f%% KV cache memory" (padding / layers × 100,
    vllm/v1/core/kv_cache_planning.py:533-541 @0.33.0)."""
    counts = [(k, kinds.count(k)) for k in (FULL, SLIDING, LINEAR) if kinds.count(k)]
    if not counts:
        return ()
    size = _group_size([n for _k, n in counts])
    return tuple((k, size - n % size, n) for k, n in counts if n % size)


def _group_size(counts: list[int]) -> int:
    """vLLM's group size: the smallest kind's layer count, or the largest when within 1.5× of it
    (kv_cache_planning.py:521-532 @0.33.0)."""
    size = min(counts)
    return max(counts) if max(counts) < 1.5 * size else size


def group_layers(shape: ModelShape, extra: tuple[str, ...] = ()) -> tuple[Group, ...]:
    """Split layers into vLLM's equal-size groups, one kind per group, round-robin within a kind; `extra` are a
    drafter's layers, indexed after the target's."""
    kinds = shape.layer_kinds + extra
    buckets = [(k, [i for i, kind in enumerate(kinds) if kind == k]) for k in (FULL, SLIDING, LINEAR)]
    buckets = [(k, idx) for k, idx in buckets if idx]
    if not buckets:
        return ()
    size = _group_size([len(idx) for _, idx in buckets])
    groups: list[Group] = []
    for kind, idx in buckets:
        n = ceil_div(len(idx), size)
        groups.extend(Group(kind, tuple(idx[i::n])) for i in range(n))
    return tuple(groups)


def drafter_of(method: str | None, shape: ModelShape, kv_dtype: str, tp: int,
               draft: ModelShape | None = None) -> Drafter | None:
    """The drafter whose layers join the KV cache, None for a method without KV (ngram, suffix) or none at all.

    MTP drafts with the target's own `mtp_layers` (their attention as the target's); EAGLE, EAGLE3, DFlash,
    DSpark and a draft model with the layers of `draft` (its config.json), which is needed. Raises ValueError when
    the drafter's shape is unknown or holds layers that keep no plain KV (linear, Mamba).
    """
    if method is None or method in ("ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states"):
        return None
    kv = dtype_bytes(kv_dtype)
    if method == "mtp":
        if not shape.mtp_layers:
            raise ValueError(f"{shape.model_type}: the config names no MTP layers (num_nextn_predict_layers, "
                             "mtp_num_hidden_layers), so the MTP drafter's KV cannot be sized")
        kind = FULL if FULL in shape.layer_kinds else SLIDING
        return Drafter("mtp", (kind,) * shape.mtp_layers, kv_bytes_per_token_per_layer(shape, kv, tp),
                       "the model's own MTP layers")
    if draft is None:
        raise ValueError(f"the {method} drafter's layers join the KV cache: give its config.json "
                         "(--draft-model-config) to size them")
    kinds = tuple(k for k in draft.layer_kinds if k != NONE)
    if SLIDING in kinds and draft.sliding_window != shape.sliding_window:
        raise Unsupported(f"the {method} drafter's sliding window ({draft.sliding_window}) differs from the "
                          f"target's ({shape.sliding_window}): its layers form groups this version does not size")
    if LINEAR in kinds:
        raise ValueError(f"the {method} drafter has linear/Mamba layers, which this version does not size")
    return Drafter(method, kinds, kv_bytes_per_token_per_layer(draft, kv, tp), draft.source or draft.model_type)


def plan(shape: ModelShape, kv_dtype: str, tp: int, block_size: int, pp: int = 1, prefix_caching: bool = True,
         model_dtype: str | None = None, ssm_dtype: str | None = None, drafter: Drafter | None = None) -> Plan:
    """vLLM 0.32.0's KV-cache plan: block size, page, groups and stages; ValueError for a TP the state cannot split.

    kv_dtype: the attention cache dtype ('fp8', 'bfloat16', ...); model_dtype: the dtype linear states use
    (vLLM's mamba_cache_dtype 'auto'), the config's when None; ssm_dtype: vLLM's mamba_ssm_cache_dtype when
    set (the CPU platform sets float32 for Gated DeltaNet), else the model's default.
    """
    per_token = kv_bytes_per_token_per_layer(shape, dtype_bytes(kv_dtype), tp)
    state = 0
    linear_blocks = 1
    if shape.linear is not None and shape.linear_layers:
        conv = dtype_bytes(model_dtype or shape.dtype)
        ssm_name = ssm_dtype if ssm_dtype not in (None, "auto") else shape.linear.ssm_dtype
        ssm = dtype_bytes(ssm_name) if ssm_name else conv
        state = shape.linear.state_bytes(tp, conv, ssm)
        if prefix_caching:
            linear_blocks = 2 + shape.linear.checkpoint_blocks
    if shape.attention_layers:
        block_size = hybrid_block_size(shape, block_size, per_token, state)
        page = block_size * per_token
    else:
        page = state
    extra: tuple[str, ...] = ()
    if drafter is not None and drafter.kinds:
        if drafter.bytes_per_token != per_token:
            raise Unsupported(f"the {drafter.method} drafter's KV page ({drafter.bytes_per_token} bytes per token "
                              f"and layer) differs from the target's ({per_token}): vLLM then unifies the page "
                              "sizes, which this version does not size")
        if state and SLIDING in drafter.kinds:
            raise Unsupported("a sliding-window drafter on a hybrid model is not sized by this version")
        extra = drafter.kinds
    parts = pp_partitions(shape.num_layers, pp)
    parts[-1] += len(extra)  # the drafter runs on the last pipeline stage
    stages = tuple((sum(parts[:s]), sum(parts[:s + 1])) for s in range(pp))
    return Plan(block_size, per_token, page, state, group_layers(shape, extra), stages, linear_blocks,
                shape.sliding_window, drafter, padding(shape.layer_kinds + extra))


def bytes_per_block(shape: ModelShape, cache_dtype: str | None, tp: int, block_size: int,
                    drafter: Drafter | None = None) -> int:
    """Bytes one pool block takes per device of a running server (its block_size is already aligned)."""
    return plan(shape, resolve_kv_dtype(shape, cache_dtype), tp, block_size, drafter=drafter).bytes_per_block
