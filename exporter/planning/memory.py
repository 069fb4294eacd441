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

from ..core.units import format_size

GiB = 1024**3
TiB = 1024**4

# flag: (lowest, highest, example) — a device's memory, a pool, a model's weights, an activation reserve.
SIZE_RANGES = {
    "--gpu-memory": (GiB, 2 * TiB, "80GiB"),
    "--kv-cache-memory": (1024**2, 2 * TiB, "6.51GiB"),
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


def check_params(params: int | None) -> None:
    """ValueError for a parameter count below a million or above 100 trillion (a unit left off)."""
    if params is not None and not PARAMS_RANGE[0] <= params <= PARAMS_RANGE[1]:
        raise ValueError(f"--params {params} is not a model's parameter count (1M–100T): give a unit, e.g. 70B")


def check_tensor_parallel(num_attention_heads: int | None, tp: int) -> None:
    """vLLM's check (`ModelConfig.verify_with_parallel_config`, 0.32.0), with its message."""
    if num_attention_heads and num_attention_heads % tp:
        raise ValueError(f"Total number of attention heads ({num_attention_heads}) must be divisible by tensor "
                         f"parallel size ({tp}).")


def check_max_model_len(max_model_len: int, max_position_embeddings: int | None, allow_long: bool) -> str | None:
    """vLLM's check (`_get_and_verify_max_len`, `vllm/config/model.py` 0.32.0): its error, or its warning
    (returned) when VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set."""
    if not max_position_embeddings or max_model_len <= max_position_embeddings:
        return None
    msg = (f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
           f"(max_position_embeddings={max_position_embeddings} or model_max_length=None in model's config.json).")
    if allow_long:
        return msg
    raise ValueError(f"{msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")


def weights_per_device(weights_total: int, tp: int, pp: int) -> int:
    """The whole model's weight bytes split over TP × PP devices."""
    return math.ceil(weights_total / (tp * pp))


def kv_pool_bytes(gpu_memory: int, utilization: float, weights: int, activation: int) -> int:
    """KV pool per device = ceil(memory × gpu_memory_utilization) − weights − activation reserve."""
    return math.ceil(gpu_memory * utilization) - weights - activation


def gpu_memory_needed(pool: int, utilization: float, weights: int, activation: int) -> int:
    """The device memory whose share under gpu_memory_utilization holds weights, activations and `pool`."""
    return math.ceil((pool + weights + activation) / utilization)
