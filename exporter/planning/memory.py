"""The memory side of a plan: vLLM's start-up checks on the inputs, weights per device, the KV pool.

- Pool per device = ceil(gpu_memory × gpu_memory_utilization) − weights per device − activation reserve,
  as vLLM 0.32.0 requests memory (`vllm/v1/worker/gpu_worker.py`, `requested = ceil(total × util)`).
  Weights per device = the whole model's bytes / (TP × PP).
- Sanity ranges catch a unit left off (`--gpu-memory 80` read as 80 bytes, `--params 70` as 70 parameters).
- vLLM's own start-up checks, with its message (`vllm/config/model.py`, 0.32.0): TP must divide the
  attention heads; a max_model_len above max_position_embeddings is refused unless
  VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.

Every function raises ValueError with one sentence.
"""

from __future__ import annotations

import math
import re

from ..core.units import format_size, human_readable_int, parse_size
from ..model.shape import ModelShape

GiB = 1024**3
TiB = 1024**4

# flag: (lowest, highest, example) — a device's memory, a pool, a model's weights, an activation reserve.
SIZE_RANGES = {
    "--gpu-memory": (GiB, 2 * TiB, "80GiB"),
    "--kv-cache-memory": (1024**2, 2 * TiB, "6.51GiB"),
    "--kv-cache-memory-bytes": (1024**2, 2 * TiB, "7G"),
    "--weights-bytes": (1024**2, 200 * TiB, "140GB"),
    "--activation-memory": (0, 2 * TiB, "2GiB"),
}
PARAMS_RANGE = (10**6, 10**14)


def check_size(flag: str, value: int | None) -> None:
    """ValueError when a size is outside what a device, pool or model can be: usually a unit left off."""
    if value is None:
        return
    low, high, example = SIZE_RANGES[flag]
    if not low <= value <= high:
        raise ValueError(f"{flag} {format_size(value)} is outside {format_size(low)}–{format_size(high)}: "
                         f"give a unit, e.g. {example}")


def parse_gib_size(flag: str, text: str) -> int:
    """A size of `flag` in the units grammar, a bare number read as GiB (`80` = 80 GiB); raises ValueError.

    A bare number that cannot be GiB (above the flag's ceiling, e.g. 6990059274 GiB for a KV pool) is a size in
    bytes pasted from vLLM (`--kv-cache-memory-bytes`, `kv_cache_memory_bytes` in cache_config_info): refused
    with the conversion, "6990059274 looks like bytes: 6.51 GiB; write 6990059274B".
    A bare number that is neither (above the ceiling as GiB, below the floor as bytes: 2049 to 1048575 for a KV
    pool) is ambiguous and refused as such, with no guessed unit.
    """
    value = parse_size(text, default_unit="GiB")
    raw = text.strip()
    if flag in SIZE_RANGES and re.fullmatch(r"\d+(?:\.\d+)?", raw):
        low, high, example = SIZE_RANGES[flag]
        if value > high:
            if raw.isdigit() and low <= int(raw) <= high:
                raise ValueError(f"{raw} looks like bytes: {int(raw) / GiB:.2f} GiB; write {raw}B")
            raise ValueError(f"{flag} {raw} has no unit and is no size either way: as GiB it is above "
                             f"{format_size(high)}, as bytes below {format_size(low)}; give a unit, e.g. {example}")
    return value


def parse_vllm_bytes(flag: str, text: str) -> int:
    """A size as vLLM reads `--kv-cache-memory-bytes` (vllm/engine/arg_utils.py:396-409 @0.33.0, the same in
    0.32.0: `human_readable_int`, vllm/utils/argparse_utils.py:29-74): a whole number of bytes, or one with
    `k m g t` (×1000) or `K M G T` (×1024); a decimal only with a lowercase suffix. Raises ValueError naming
    vLLM's grammar for anything else (`6.51GiB` is our --kv-cache-memory's)."""
    try:
        value = human_readable_int(text)
    except ValueError as exc:
        if "Decimals are not allowed" in str(exc):
            raise
        raise ValueError(f"{text.strip()!r} is not how vLLM reads {flag}: a whole number of bytes such as "
                         "6990059274, or with a suffix k/m/g/t (x1000) or K/M/G/T (x1024) such as 7G; "
                         f"for a size such as 6.51GiB use --kv-cache-memory") from None
    if value <= 0:
        raise ValueError(f"{flag} {text.strip()!r} is not a positive number of bytes")
    return value


def check_params(params: int | None) -> None:
    """ValueError for a parameter count below a million or above 100 trillion (a unit left off)."""
    if params is not None and not PARAMS_RANGE[0] <= params <= PARAMS_RANGE[1]:
        raise ValueError(f"--params {params} is not a model's parameter count (1M–100T): give a unit, e.g. 70B")


def check_tensor_parallel(shape: ModelShape, tp: int) -> None:
    """Every TP split vLLM 0.32.0 makes of the layers we model, with its message; ValueError when one fails.

    - attention heads: `ModelConfig.verify_with_parallel_config` (vllm/config/model.py), its message;
    - KV heads: `QKVParallelLinear` (vllm/model_executor/layers/linear.py:1053-1057) divides TP by them when
      TP >= KV heads and them by TP otherwise, through `divide` (vllm/distributed/utils.py:51-62), an
      assertion "X is not divisible by Y"; MLA keeps one latent per rank and is exempt;
    - Mamba-2: heads must divide (mamba_mixer2.py:315-317) and n_groups must divide or be 1
      (mamba_mixer2.py:319-322); Gated DeltaNet / KDA heads are split with `divide` as well
      (mamba_utils.py:292-297, :324-326), so TP must divide them;
    - MoE: Qwen2/3-MoE, Qwen3-Next, MiniMax-M2 and others refuse a TP above their experts
      (e.g. qwen3_moe.py:154-158; the list is `shape._EXPERTS_TP`).
    """
    heads = shape.num_attention_heads
    if heads and heads % tp:
        raise ValueError(f"Total number of attention heads ({heads}) must be divisible by tensor "
                         f"parallel size ({tp}).")
    if shape.experts is not None and tp > shape.experts:  # the MoE blocks listed in shape._EXPERTS_TP
        raise ValueError(f"Tensor parallel size {tp} is greater than the number of experts {shape.experts}.")
    kv = shape.num_kv_heads
    if shape.mla_latent is None and kv and shape.attention_layers:
        if tp >= kv and tp % kv:
            raise ValueError(f"vLLM refuses TP {tp} for {kv} KV heads: with TP at least the KV heads, the heads are "
                             f"replicated and TP must be a multiple of them ({tp} is not divisible by {kv})")
        if tp < kv and kv % tp:
            raise ValueError(f"vLLM refuses TP {tp} for {kv} KV heads: TP must divide them "
                             f"({kv} is not divisible by {tp})")
    lin = shape.linear
    if lin is None or not shape.linear_layers:
        return
    for what, n in shape.linear_heads:
        if n % tp:
            raise ValueError(f"vLLM refuses TP {tp}: it must divide the {what} ({n})")
    if lin.kind == "mamba2" and lin.n_groups % tp and lin.n_groups != 1:
        raise ValueError(f"vLLM refuses TP {tp}: If tensor parallel world size does not divide num_groups, then "
                         f"num_groups must equal 1 (n_groups {lin.n_groups})")


def check_max_model_len(max_model_len: int, shape: ModelShape, allow_long: bool) -> str | None:
    """vLLM's check (`_get_and_verify_max_len`, vllm/config/model.py:2637-2664 in 0.32.0): its error, or its
    warning (returned) when VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set."""
    derived = shape.max_position_embeddings
    if not derived or max_model_len <= derived:
        return None
    msg = (f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
           f"({shape.max_len_key}={shape.max_len_text or derived} or model_max_length={shape.model_max_length} "
           "in model's config.json).")
    warning = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
               "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses "
               "absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA array "
               "out-of-bounds error.")
    if allow_long:
        return f"{msg} {warning}"
    raise ValueError(f"{msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
                     f"{warning}")


def weights_per_device(weights_total: int, tp: int, pp: int) -> int:
    """The whole model's weight bytes split over TP × PP devices."""
    return math.ceil(weights_total / (tp * pp))


def kv_pool_bytes(gpu_memory: int, utilization: float, weights: int, activation: int) -> int:
    """KV pool per device = ceil(memory × gpu_memory_utilization) − weights − activation reserve."""
    return math.ceil(gpu_memory * utilization) - weights - activation


def gpu_memory_needed(pool: int, utilization: float, weights: int, activation: int) -> int:
    """The device memory whose share under gpu_memory_utilization holds weights, activations and `pool`."""
    return math.ceil((pool + weights + activation) / utilization)


def weights_from_params(params: int, shape: ModelShape, model_dtype: str) -> int:
    """The whole model's weight bytes from a parameter count: × the checkpoint's bytes per parameter
    (`shape.weight_bytes`, from quantization_config) or the model dtype's."""
    from ..model.kv_layout import dtype_bytes

    per = shape.weight_bytes if shape.weight_bytes is not None else dtype_bytes(model_dtype)
    return int(params * per)


def kv_pool_range(gpu_memory: int, utilizations: tuple[float, float], weights_per_device: int,
                  activations: tuple[int, int]) -> tuple[int, int]:
    """(lowest, highest) KV pool per device over a range of gpu_memory_utilization and activation reserve:
    `kv_pool_bytes` at (lowest share, largest reserve) and (highest share, smallest reserve), at least 0."""
    low = kv_pool_bytes(gpu_memory, min(utilizations), weights_per_device, max(activations))
    high = kv_pool_bytes(gpu_memory, max(utilizations), weights_per_device, min(activations))
    return max(0, low), max(0, high)
