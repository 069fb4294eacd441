"""Capacity planning: vLLM 0.32.0's KV pool, blocks, max concurrency and fit from a model's config.json.

The KV layout (pages, groups, hybrid block size, pipeline stages) is `model.kv_layout.plan`; this module
adds the memory side (`planning.memory`) and vLLM's start-up arithmetic (`vllm/v1/core/kv_cache_utils.py`,
0.32.0):

- num_blocks = min over pipeline stages of pool // the stage's bytes per block
  (`get_kv_cache_configs`), or `num_gpu_blocks_override`;
- max concurrency = num_blocks / Σ groups' blocks per max_model_len request (null block included, as
  vLLM logs it); "KV cache size" tokens = int(concurrency × max_model_len);
- the start-up fit check reserves the null block: one request must fit in num_blocks − 1 blocks on every
  stage, and the longest max_model_len that does is vLLM's "estimated maximum model length";
- data parallel: every engine has its own pool of the same size.

`estimate` needs memory (a device's memory and the weights, a pool, or a block count); without it,
`requirements` answers the inverse question: bytes per token and per request, and the memory that
max_num_seqs requests of max_model_len need. Errors: ValueError in one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core import defaults
from ..core.units import format_size
from ..engines.vllm import args as VLLM_ARGS
from ..engines.vllm import attention
from ..model.kv_layout import Drafter, Plan, drafter_of, dtype_bytes, plan
from ..model.shape import FULL, LINEAR, SLIDING, ModelShape, load_config, model_source, resolve_model, shape_from_config
from . import memory

GiB = memory.GiB
DEFAULT_ACTIVATION_BYTES = defaults.ESTIMATE_ACTIVATION_BYTES


def load_model(path: Path | str) -> tuple[ModelShape, int | None]:
    """The shape of a config.json, a model folder or a Hugging Face id in the local cache, and the weights'
    bytes when a safetensors index is beside it; raises ValueError."""
    resolved = resolve_model(str(path))
    cfg, weights = load_config(resolved)
    return replace(shape_from_config(cfg), source=model_source(str(path), resolved)), weights


@dataclass(frozen=True)
class Inputs:
    """What vLLM is started with, and the memory side; sizes in bytes per device."""

    shape: ModelShape
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    block_size: int = defaults.ESTIMATE_BLOCK_SIZE
    max_model_len: int | None = None
    max_num_seqs: int = defaults.ESTIMATE_MAX_NUM_SEQS
    max_num_batched_tokens: int = defaults.ESTIMATE_MAX_NUM_BATCHED_TOKENS
    async_scheduling: bool = True  # two batches in flight without PP (vLLM's default where supported)
    prefix_caching: bool = True  # vLLM's default; hybrids then keep 2 (+ checkpoints) state blocks per request
    mamba_ssm_cache_dtype: str = "auto"  # vLLM's --mamba-ssm-cache-dtype (its CPU build forces float32 for GDN)
    gpu_memory: int | None = None
    gpu_memory_utilization: float = defaults.ESTIMATE_GPU_MEMORY_UTILIZATION
    weights_bytes: int | None = None  # whole model
    params: int | None = None  # parameter count, when the weights' size is not known
    activation_bytes: int = DEFAULT_ACTIVATION_BYTES
    kv_cache_memory: int | None = None  # pool per device, skips the budget math
    stage_kv_memory: tuple[int, ...] | None = None  # pool per pipeline stage, as vLLM logs one per worker
    num_gpu_blocks_override: int | None = None
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    speculative_method: str | None = None  # --speculative-config's method (vLLM's inference), None: no drafter
    num_speculative_tokens: int | None = None
    draft_shape: ModelShape | None = None  # the drafter's config.json (EAGLE, EAGLE3, DFlash, a draft model)

    @property
    def model_dtype(self) -> str:
        return self.shape.dtype if self.dtype == "auto" else self.dtype

    @property
    def kv_dtype(self) -> str:
        return self.model_dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype

    @property
    def in_flight_tokens(self) -> int:
        """vLLM's max_in_flight_tokens: max_num_batched_tokens × concurrent batches (2 with async scheduling
        and no PP, else the PP size; `VllmConfig.max_concurrent_batches`, 0.32.0)."""
        pp = self.pipeline_parallel_size
        batches = 2 if self.async_scheduling and pp == 1 else pp
        return self.max_num_batched_tokens * batches

    @property
    def context(self) -> int:
        if self.max_model_len is not None:
            return self.max_model_len
        if self.shape.default_max_model_len:
            return int(self.shape.default_max_model_len)
        if self.shape.max_position_embeddings:
            return int(self.shape.max_position_embeddings)
        raise ValueError("max_model_len is unknown: pass --max-model-len")

    @property
    def has_memory(self) -> bool:
        return any(v is not None for v in (self.gpu_memory, self.kv_cache_memory, self.stage_kv_memory,
                                           self.num_gpu_blocks_override))

    @property
    def drafter(self) -> Drafter | None:
        """The drafter whose layers join the KV cache (`model.kv_layout.drafter_of`); raises ValueError when its
        shape is needed and unknown."""
        return drafter_of(self.speculative_method, self.shape, self.kv_dtype, self.tensor_parallel_size,
                          self.draft_shape)

    @property
    def num_lookahead_tokens(self) -> int | None:
        """KV slots per request and step past the scheduled tokens (vLLM's `num_lookahead_tokens`)."""
        return VLLM_ARGS.num_lookahead_tokens(self.speculative_method, self.num_speculative_tokens)

    def layout(self) -> Plan:
        return plan(self.shape, self.kv_dtype, self.tensor_parallel_size, self.block_size,
                    self.pipeline_parallel_size, self.prefix_caching, self.model_dtype, self.mamba_ssm_cache_dtype,
                    self.drafter)


def check(x: Inputs) -> list[str]:
    """vLLM's start-up checks and our sanity ranges; raises ValueError, returns vLLM's warnings."""
    for flag, value in (("--gpu-memory", x.gpu_memory), ("--kv-cache-memory", x.kv_cache_memory),
                        ("--weights-bytes", x.weights_bytes), ("--activation-memory", x.activation_bytes)):
        memory.check_size(flag, value)
    for value in x.stage_kv_memory or ():
        memory.check_size("--kv-cache-memory", value)
    memory.check_params(x.params)
    memory.check_tensor_parallel(x.shape, x.tensor_parallel_size)
    attention.check_block_size(x.block_size)
    if x.pipeline_parallel_size > x.shape.num_layers:
        raise ValueError(f"pipeline parallel size {x.pipeline_parallel_size} exceeds the model's "
                         f"{x.shape.num_layers} layers")
    if x.stage_kv_memory is not None and len(x.stage_kv_memory) not in (1, x.pipeline_parallel_size):
        raise ValueError(f"{len(x.stage_kv_memory)} KV pools given for {x.pipeline_parallel_size} pipeline stages")
    warnings = []
    if x.shape.max_len_key == "None" and x.max_model_len is None:  # vllm/config/model.py:2563-2574
        warnings.append("The model's config.json does not contain any of the keys to determine the original maximum "
                        "length of the model. Assuming the model's maximum length is 2048.")
    warning = memory.check_max_model_len(x.context, x.shape, x.allow_long_max_model_len)
    if warning:
        warnings.append(warning)
    if x.params is not None and x.weights_bytes is None and (x.gpu_memory is not None or not x.has_memory):
        implied = implied_params(x.shape)
        if implied and not implied / 2 <= x.params <= implied * 2:
            warnings.append(f"--params {x.params / 1e9:,.1f}B is far from the roughly {implied / 1e9:,.1f}B "
                            "parameters this config implies; check the value (or give --weights-bytes)")
    if x.shape.weight_note and x.params is not None and x.weights_bytes is None:
        warnings.append(f"weights from --params: {x.shape.weight_note}")
    if x.shape.mla_latent is not None and x.block_size == 16 and not x.num_gpu_blocks_override:
        warnings.append("MLA: block size 16 assumed (vLLM's CPU / Triton MLA); on GPU vLLM picks the backend's "
                        "block size, FlashMLA 64 (vllm/v1/attention/backends/mla/flashmla.py:58-59) or CUTLASS MLA "
                        "128 (mla/cutlass_mla.py:49-50), logged as 'Setting kv cache block size to N': pass "
                        "--block-size 64 or 128 to match")
    return warnings


def weights_total(x: Inputs) -> int | None:
    """The whole model's weight bytes: --weights-bytes / the safetensors index, else --params × the
    checkpoint's bytes per parameter (quantization_config, `shape.weight_bytes_per_param`) or the model dtype's."""
    if x.weights_bytes is not None:
        return x.weights_bytes
    if x.params is None:
        return None
    per = x.shape.weight_bytes if x.shape.weight_bytes is not None else dtype_bytes(x.model_dtype)
    return int(x.params * per)


def implied_params(shape: ModelShape) -> int | None:
    """The rough parameter count the config implies (`shape.implied_params`), for a sanity warning."""
    return shape.implied_params


@dataclass(frozen=True)
class Estimate:
    """vLLM's start-up figures for one engine, every size per device (with PP: the stage that sets the pool)."""

    family: str
    block_size: int
    kv_bytes_per_token_per_layer: int
    kv_bytes_per_token: int  # attention layers of the whole model, one device (one stage with PP: its share)
    linear_state_bytes: int  # one linear layer's state per request, one device, unpadded
    bytes_per_block: int
    stage_bytes_per_block: tuple[int, ...]
    weights_per_device: int | None
    activation_bytes: int | None
    kv_pool_bytes: int  # the limiting stage's (negative: weights and activations exceed the memory)
    stage_kv_pool_bytes: tuple[int, ...]
    num_blocks: int
    blocks_per_request: int
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    max_model_len_fit: int  # the longest max_model_len one request fits in (vLLM's estimate when it refuses)
    max_num_seqs_fit: int  # the most max_model_len requests the pool holds at once
    max_num_seqs: int
    engines: int
    verdict: str
    explanation: str
    warnings: tuple[str, ...] = field(default=())
    limiting_stage: int = 0  # the pipeline stage whose pool // bytes per block is the smallest


VERDICTS = ("budget_exhausted", "sequence_too_long", "too_many_sequences", "fits")


def _pools(x: Inputs, lay: Plan) -> tuple[tuple[int, ...], int | None, int | None]:
    """KV pool per stage, weights per device and the activation reserve (None when not part of the math)."""
    pp = x.pipeline_parallel_size
    if x.stage_kv_memory is not None:
        pools = x.stage_kv_memory * (pp if len(x.stage_kv_memory) == 1 else 1)
        return pools, None, None
    if x.kv_cache_memory is not None:
        return (x.kv_cache_memory,) * pp, None, None
    if x.gpu_memory is None:
        if x.num_gpu_blocks_override is not None:
            return tuple(x.num_gpu_blocks_override * b for b in lay.stage_bytes_per_block), None, None
        raise ValueError("give --gpu-memory (with weights), --kv-cache-memory or --num-gpu-blocks-override")
    total = weights_total(x)
    if total is None:
        raise ValueError("the weights' size is unknown: pass a model folder with a safetensors index, "
                         "--params or --weights-bytes")
    weights = memory.weights_per_device(total, x.tensor_parallel_size, pp)
    pool = memory.kv_pool_bytes(x.gpu_memory, x.gpu_memory_utilization, weights, x.activation_bytes)
    return (pool,) * pp, weights, x.activation_bytes


def largest(ok: Any, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with ok(n), for ok true up to some point and false after; lo − 1 if none."""
    best = lo - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def padding_warnings(lay: Plan) -> list[str]:
    """vLLM's own start-up warning for every kind it pads to the group size, word for word."""
    return [f"Add {pad} padding layers, may waste at most {pad / n * 100:.2f}% KV cache memory (vLLM's start-up "
            f"warning: {kind} layers padded to the group size)" for kind, pad, n in lay.padding]


def estimate(x: Inputs) -> Estimate:
    """vLLM's start-up figures for `x`; raises ValueError for inputs vLLM refuses or that lack memory."""
    warnings = check(x)
    lay = x.layout()
    warnings += padding_warnings(lay)
    pools, weights, activation = _pools(x, lay)
    stage_bpb = lay.stage_bytes_per_block
    per_stage_blocks = [max(0, p) // b for p, b in zip(pools, stage_bpb, strict=True)]
    blocks = min(per_stage_blocks)
    limiting = per_stage_blocks.index(blocks)  # the stage that sets the pool (vLLM takes the minimum)
    if x.num_gpu_blocks_override is not None:
        blocks = x.num_gpu_blocks_override
    length = x.context
    in_flight = x.in_flight_tokens
    per_request = lay.blocks_per_request(length, in_flight)
    conc = blocks / per_request if blocks else 0.0
    usable = blocks - 1  # the null block
    cap = max(length, x.shape.max_position_embeddings or 0)
    fit = max(0, largest(lambda n: lay.blocks_per_request(n, in_flight) <= usable, 1, cap)) if usable > 0 else 0
    seqs_fit = max(0, usable) // per_request
    per_token = lay.attention_bytes_per_token
    kinds = x.shape.layer_kinds + (lay.drafter.kinds if lay.drafter is not None else ())
    attention_layers = max(sum(1 for k in kinds[lo:hi] if k in (FULL, SLIDING)) for lo, hi in lay.stages)
    if min(pools) < 0:
        verdict = "budget_exhausted"
        why = (f"weights ({_gib(weights)}) and the activation reserve ({_gib(activation)}) exceed the memory vLLM "
               f"may use by {_gib(-min(pools))}: there is no KV cache (the pool would be negative); vLLM fails at "
               "start-up")
    elif blocks < 2:
        verdict = "budget_exhausted"
        why = (f"weights ({_gib(weights)}) and the activation reserve ({_gib(activation)}) leave "
               f"{_gib(max(min(pools), 0))} for the KV cache: not two blocks of {format_size(min(stage_bpb))}")
    elif fit < length:
        verdict = "sequence_too_long"
        why = (f"one request of max_model_len {length:,} needs {per_request} blocks, the pool has {usable} usable: "
               f"vLLM refuses to start; the largest max_model_len that fits is {fit:,}")
    elif x.max_num_seqs > seqs_fit:
        verdict = "too_many_sequences"
        why = (f"max_num_seqs {x.max_num_seqs} requests of max_model_len {length:,} need "
               f"{x.max_num_seqs * per_request:,} blocks, the pool has {usable:,} usable: vLLM starts, but only "
               f"{seqs_fit} such requests fit at once; more long requests are preempted")
    else:
        verdict = "fits"
        why = f"max_num_seqs {x.max_num_seqs} requests of max_model_len {length:,} fit in {usable:,} usable blocks"
    return Estimate(
        family=x.shape.family, block_size=lay.block_size, kv_bytes_per_token_per_layer=per_token,
        kv_bytes_per_token=per_token * attention_layers, linear_state_bytes=lay.state_bytes,
        bytes_per_block=stage_bpb[limiting], stage_bytes_per_block=stage_bpb, weights_per_device=weights,
        activation_bytes=activation, kv_pool_bytes=pools[limiting], stage_kv_pool_bytes=pools, num_blocks=blocks,
        blocks_per_request=per_request, kv_tokens=int(conc * length), max_model_len=length, max_concurrency=conc,
        max_model_len_fit=fit, max_num_seqs_fit=seqs_fit, max_num_seqs=x.max_num_seqs,
        engines=x.data_parallel_size, verdict=verdict, explanation=why, warnings=tuple(warnings),
        limiting_stage=limiting)


@dataclass(frozen=True)
class Requirements:
    """The inverse question: what max_num_seqs requests of max_model_len need, per device."""

    family: str
    block_size: int
    kv_bytes_per_token_per_layer: int
    kv_bytes_per_token: int
    linear_state_bytes: int
    bytes_per_block: int
    blocks_per_request: int
    bytes_per_request: int  # the pool bytes one max_model_len request takes (its blocks × bytes per block)
    max_model_len: int
    max_num_seqs: int
    kv_pool_needed: int  # max_num_seqs requests + the null block
    weights_per_device: int | None
    gpu_memory_needed: int | None  # with weights known: the device memory at gpu_memory_utilization
    warnings: tuple[str, ...] = ()


def requirements(x: Inputs) -> Requirements:
    """Bytes per token and per request, and the pool and device memory `max_num_seqs` requests need."""
    warnings = check(x)
    lay = x.layout()
    bpb = max(lay.stage_bytes_per_block)
    per_request = lay.blocks_per_request(x.context, x.in_flight_tokens)
    pool = (x.max_num_seqs * per_request + 1) * bpb
    total = weights_total(x)
    weights = None if total is None else memory.weights_per_device(total, x.tensor_parallel_size,
                                                                   x.pipeline_parallel_size)
    need = None if weights is None else memory.gpu_memory_needed(pool, x.gpu_memory_utilization, weights,
                                                                 x.activation_bytes)
    attention_layers = x.shape.attention_layers + (len(lay.drafter.kinds) if lay.drafter is not None else 0)
    warnings += padding_warnings(lay)
    return Requirements(
        family=x.shape.family, block_size=lay.block_size, kv_bytes_per_token_per_layer=lay.attention_bytes_per_token,
        kv_bytes_per_token=lay.attention_bytes_per_token * attention_layers, linear_state_bytes=lay.state_bytes,
        bytes_per_block=bpb, blocks_per_request=per_request, bytes_per_request=per_request * bpb,
        max_model_len=x.context, max_num_seqs=x.max_num_seqs, kv_pool_needed=pool, weights_per_device=weights,
        gpu_memory_needed=need, warnings=tuple(warnings))


def _gib(n: int | None) -> str:
    return "not known" if n is None else f"{n / GiB:.2f} GiB"


def _given(n: int | None) -> str:
    return "not used: the pool or block count was given" if n is None else _gib(n)


# -- what if -------------------------------------------------------------------------------------------------

def largest_max_num_seqs(e: Estimate) -> int:
    """The most max_model_len requests that fit at once: (num_blocks − 1) // blocks per request."""
    return e.max_num_seqs_fit


def largest_max_model_len(x: Inputs, e: Estimate) -> int:
    """The longest max_model_len at which max_num_seqs requests all fit at once (0 if none)."""
    lay = x.layout()
    usable = e.num_blocks - 1
    cap = max(x.context, x.shape.max_position_embeddings or 0)
    ok = lambda n: x.max_num_seqs * lay.blocks_per_request(n, x.in_flight_tokens) <= usable  # noqa: E731
    return max(0, largest(ok, 1, cap)) if usable > 0 else 0


def what_if(x: Inputs, e: Estimate) -> list[tuple[str, Estimate, str]]:
    """The same estimate under each standard change, with what the change costs; changes vLLM would refuse
    (a TP that does not divide the heads) are left out."""
    rows: list[tuple[str, Inputs, str]] = [
        ("max_model_len halved", replace(x, max_model_len=max(x.block_size, x.context // 2)),
         "halves the context window: longer prompts are rejected"),
        ("KV cache fp8", replace(x, kv_cache_dtype="fp8"),
         "quantization error in attention (usually small); needs hardware fp8 support"),
    ]
    tp2 = 2 * x.tensor_parallel_size
    try:
        memory.check_tensor_parallel(x.shape, tp2)  # a TP vLLM would refuse is no row
    except ValueError:
        pass
    else:
        rows.append((f"tensor parallel {tp2}", replace(x, tensor_parallel_size=tp2),
                     "twice the devices and all-reduce communication every layer"))
    seqs = e.max_num_seqs_fit
    if seqs and seqs != x.max_num_seqs:
        rows.append((f"max_num_seqs {seqs} (most that fit)", replace(x, max_num_seqs=seqs),
                     "fewer requests at once: less throughput" if seqs < x.max_num_seqs
                     else "more requests at once: more memory traffic per step"))
    length = largest_max_model_len(x, e)
    if length and length != x.context:
        rows.append((f"max_model_len {length:,} (longest for max_num_seqs)", replace(x, max_model_len=length),
                     "shorter context: longer prompts are rejected" if length < x.context
                     else "longer context than planned"))
    if x.speculative_method is not None:
        rows.append(("without the drafter", replace(x, speculative_method=None, num_speculative_tokens=None),
                     "no speculative decoding: each decode step yields one token"))
    if x.gpu_memory is not None and x.kv_cache_memory is None and x.stage_kv_memory is None:
        rows.append(("gpu_memory_utilization +0.05",
                     replace(x, gpu_memory_utilization=min(1.0, x.gpu_memory_utilization + 0.05)),
                     "less headroom for activations and other processes: OOM risk at start"))
    out = []
    for name, changed, cost in rows:
        try:
            out.append((name, estimate(changed), cost))
        except ValueError:
            continue  # e.g. a halved max_model_len the state cannot be split for: no row
    return out


def smallest_fit(x: Inputs, max_tp: int = 64) -> list[tuple[str, int | None, Estimate | None]]:
    """For the model dtype's KV cache and fp8: the smallest TP (dividing the attention heads) at which
    max_num_seqs requests of max_model_len fit, with its estimate; (dtype, None, None) when none up to max_tp."""
    out: list[tuple[str, int | None, Estimate | None]] = []
    for kv in dict.fromkeys((x.kv_cache_dtype, "fp8")):
        found: tuple[int | None, Estimate | None] = (None, None)
        for tp in range(1, max_tp + 1):
            try:
                e = estimate(replace(x, kv_cache_dtype=kv, tensor_parallel_size=tp))
            except ValueError:
                continue
            if e.verdict == "fits":
                found = (tp, e)
                break
        out.append((replace(x, kv_cache_dtype=kv).kv_dtype, *found))
    return out


# -- output ------------------------------------------------------------------------------------------------

def figures(x: Inputs, e: Estimate) -> list[tuple[str, str, Any, str]]:
    """(JSON key, label, value, text) of every figure: the text and the JSON are built from this one list."""
    stages = len(e.stage_bytes_per_block)
    per_stage = f" (stage {e.limiting_stage} of {stages}, sets the pool)" if stages > 1 else ""
    rows: list[tuple[str, str, Any, str]] = [
        ("weights_per_device", "weights per device", e.weights_per_device, _given(e.weights_per_device)),
        ("activation_bytes", "activation reserve per device", e.activation_bytes, _given(e.activation_bytes)),
        ("kv_pool_bytes", "KV pool per device" + per_stage, e.kv_pool_bytes,
         _gib(e.kv_pool_bytes) + (" (negative: weights and activations exceed the memory, no KV cache)"
                                  if e.kv_pool_bytes < 0 else "")),
        ("kv_bytes_per_token", "KV bytes per token per device", e.kv_bytes_per_token,
         f"{e.kv_bytes_per_token:,} ({e.kv_bytes_per_token_per_layer:,} per attention layer × "
         f"{e.kv_bytes_per_token // max(e.kv_bytes_per_token_per_layer, 1)} layers)"),
    ]
    if e.linear_state_bytes:
        rows.append(("linear_state_bytes", "linear/Mamba state per layer per request", e.linear_state_bytes,
                     f"{e.linear_state_bytes:,} bytes (padded to one page)"))
    rows += [
        ("block_size", "block size (tokens)", e.block_size, str(e.block_size)),
        ("bytes_per_block", "bytes per block per device" + per_stage, e.bytes_per_block, f"{e.bytes_per_block:,}"),
        ("num_blocks", "blocks (vLLM's num_gpu_blocks)", e.num_blocks,
         f"{e.num_blocks:,} ({e.num_blocks - 1:,} usable, one is the null block)" if e.num_blocks
         else "0 (no KV cache)"),
        ("blocks_per_request", "blocks per max_model_len request", e.blocks_per_request, f"{e.blocks_per_request:,}"),
        ("kv_tokens", "KV cache size (vLLM's 'KV cache size' tokens)", e.kv_tokens, f"{e.kv_tokens:,} tokens"),
        ("max_concurrency", "max concurrency (vLLM's 'Maximum concurrency')", round(e.max_concurrency, 4),
         f"{e.max_concurrency:.2f}x for {e.max_model_len:,} tokens per request"),
        ("max_num_seqs_fit", "max_model_len requests that fit at once", e.max_num_seqs_fit, f"{e.max_num_seqs_fit:,}"),
        ("max_model_len_fit", "longest max_model_len one request fits", e.max_model_len_fit,
         f"{e.max_model_len_fit:,} tokens" + (" (the config's limit)" if e.max_model_len_fit
                                              == x.shape.max_position_embeddings else "")),
    ]
    if e.engines > 1:
        rows.append(("kv_tokens_all_engines", f"KV cache size over {e.engines} data-parallel engines",
                     e.kv_tokens * e.engines, f"{e.kv_tokens * e.engines:,} tokens"))
    return rows


def _describe(x: Inputs, block_size: int) -> str:
    s = x.shape
    attn = (f"MLA latent {s.mla_latent}" if s.mla_latent else f"{s.num_kv_heads} KV heads × head_dim {s.head_dim}")
    lin = (f", {s.linear_layers} {s.linear.kind} layers with a fixed state (layout from {s.layout_key})"
           if s.linear is not None and s.linear_layers else "")
    par = f"TP {x.tensor_parallel_size}"
    if x.pipeline_parallel_size > 1:
        par += f" × PP {x.pipeline_parallel_size}"
    if x.data_parallel_size > 1:
        par += f", DP {x.data_parallel_size}"
    source = f"config: {s.source}\n" if s.source else ""
    text = (f"{source}model: {s.model_type} ({s.family}), {s.num_layers} layers: {s.attention_layers} attention "
            f"({attn})"
            f"{lin}; KV dtype {x.kv_dtype}, {par}, block size {block_size}")
    return text + _drafter_text(x)


def _drafter_text(x: Inputs) -> str:
    """The drafter line: its layers, how they group with the target's, and the lookahead."""
    if x.speculative_method is None:
        return ""
    d = x.drafter
    look = x.num_lookahead_tokens
    look_text = "lookahead unknown (num_speculative_tokens not given)" if look is None else \
        f"{look} lookahead token{'s' if look != 1 else ''} per request and step in admission"
    if d is None or not d.kinds:
        return f"\ndrafter: {x.speculative_method}, no KV of its own; {look_text}"
    lay = x.layout()
    kinds = x.shape.layer_kinds + d.kinds
    counts = ", ".join(f"{kinds.count(k)} {k}" for k in (FULL, SLIDING, LINEAR) if kinds.count(k))
    sizes = sorted({len(g.layers) for g in lay.groups})
    return (f"\ndrafter: {x.speculative_method}, {len(d.kinds)} attention layer{'s' if len(d.kinds) != 1 else ''} "
            f"({d.source}) join the KV-cache groups: {counts} layers in {len(lay.groups)} groups of "
            f"{'/'.join(map(str, sizes))}; {look_text}")


def as_json(x: Inputs, e: Estimate) -> dict[str, Any]:
    """The estimate as JSON: every figure of the text under its key, inputs, stages and the what-if table."""
    out: dict[str, Any] = {"family": e.family, "verdict": e.verdict, "explanation": e.explanation,
                           "warnings": list(e.warnings)}
    for key, _label, val, _text in figures(x, e):
        out[key] = val
    out["kv_bytes_per_token_per_layer"] = e.kv_bytes_per_token_per_layer
    out["max_model_len"] = e.max_model_len
    out["max_num_seqs"] = e.max_num_seqs
    out["partitions"] = {"weights_per_device": e.weights_per_device, "activation": e.activation_bytes,
                         "kv_pool": e.kv_pool_bytes}
    out["stages"] = [{"first_layer": lo, "last_layer": hi - 1, "bytes_per_block": b, "kv_pool_bytes": p}
                     for (lo, hi), b, p in zip(x.layout().stages, e.stage_bytes_per_block, e.stage_kv_pool_bytes,
                                               strict=True)]
    out["inputs"] = {"source": x.shape.source or None, "model_type": x.shape.model_type,
                     "num_layers": x.shape.num_layers,
                     "attention_layers": x.shape.attention_layers, "linear_layers": x.shape.linear_layers,
                     "num_kv_heads": x.shape.num_kv_heads, "head_dim": x.shape.head_dim, "dtype": x.model_dtype,
                     "kv_cache_dtype": x.kv_dtype, "tensor_parallel_size": x.tensor_parallel_size,
                     "pipeline_parallel_size": x.pipeline_parallel_size, "data_parallel_size": x.data_parallel_size,
                     "block_size": x.block_size, "max_model_len": x.context, "max_num_seqs": x.max_num_seqs,
                     "speculative_method": x.speculative_method, "num_speculative_tokens": x.num_speculative_tokens,
                     "num_lookahead_tokens": x.num_lookahead_tokens,
                     "drafter_layers": None if x.drafter is None else len(x.drafter.kinds)}
    out["what_if"] = [{"change": name, "verdict": w.verdict, "num_blocks": w.num_blocks,
                       "max_concurrency": round(w.max_concurrency, 4), "max_num_seqs_fit": w.max_num_seqs_fit,
                       "max_model_len_fit": w.max_model_len_fit, "cost": cost} for name, w, cost in what_if(x, e)]
    return out


def render(x: Inputs, e: Estimate) -> str:
    """The estimate as text: the same figures as `as_json`, labelled."""
    rows = [_describe(x, e.block_size), f"verdict: {e.verdict}: {e.explanation}"]
    rows += [f"warning: {w}" for w in e.warnings]
    rows.append("")
    rows += [f"  {label:<48} {text}" for _key, label, _val, text in figures(x, e)]
    if len(e.stage_bytes_per_block) > 1:
        for i, ((lo, hi), b, p) in enumerate(zip(x.layout().stages, e.stage_bytes_per_block, e.stage_kv_pool_bytes,
                                                 strict=True)):
            rows.append(f"  stage {i}: layers {lo}-{hi - 1}, {b:,} bytes per block, pool {_gib(p)}, "
                        f"{max(p, 0) // b:,} blocks")
    rows += ["", f"  {'what if':<48} {'verdict':<19} {'blocks':>9} {'concurrency':>12} {'seqs fit':>9} "
             f"{'longest fit':>12}  cost"]
    for name, w, cost in what_if(x, e):
        rows.append(f"  {name:<48} {w.verdict:<19} {w.num_blocks:>9,} {w.max_concurrency:>11.2f}x "
                    f"{w.max_num_seqs_fit:>9,} {w.max_model_len_fit:>12,}  {cost}")
    return "\n".join(rows)


def requirements_json(x: Inputs, r: Requirements) -> dict[str, Any]:
    """The inverse answer as JSON, the same figures as `render_requirements`."""
    out: dict[str, Any] = {key: val for key, _label, val, _text in requirement_figures(r)}
    out["family"] = r.family
    out["warnings"] = list(r.warnings)
    return out


def requirement_figures(r: Requirements) -> list[tuple[str, str, Any, str]]:
    """(JSON key, label, value, text) of every figure of the inverse answer."""
    rows: list[tuple[str, str, Any, str]] = [
        ("kv_bytes_per_token", "KV bytes per token per device", r.kv_bytes_per_token, f"{r.kv_bytes_per_token:,}"),
        ("linear_state_bytes", "linear/Mamba state per layer per request", r.linear_state_bytes,
         f"{r.linear_state_bytes:,}"),
        ("block_size", "block size (tokens)", r.block_size, str(r.block_size)),
        ("bytes_per_block", "bytes per block per device", r.bytes_per_block, f"{r.bytes_per_block:,}"),
        ("blocks_per_request", "blocks per max_model_len request", r.blocks_per_request, f"{r.blocks_per_request:,}"),
        ("bytes_per_request", f"KV bytes per request of {r.max_model_len:,} tokens", r.bytes_per_request,
         _gib(r.bytes_per_request)),
        ("kv_pool_needed", f"KV pool for max_num_seqs {r.max_num_seqs} such requests", r.kv_pool_needed,
         _gib(r.kv_pool_needed)),
        ("weights_per_device", "weights per device", r.weights_per_device, _gib(r.weights_per_device)),
        ("gpu_memory_needed", "device memory needed (at gpu_memory_utilization)", r.gpu_memory_needed,
         _gib(r.gpu_memory_needed)),
    ]
    return rows


def render_requirements(x: Inputs, r: Requirements) -> str:
    """The inverse answer as text."""
    rows = [_describe(x, r.block_size), "no memory given: what max_num_seqs requests of max_model_len need", ""]
    rows += [f"warning: {w}" for w in r.warnings]
    rows += [f"  {label:<52} {text}" for _key, label, _val, text in requirement_figures(r)]
    return "\n".join(rows)
