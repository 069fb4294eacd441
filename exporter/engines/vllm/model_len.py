"""vLLM's derived max_model_len: the length vLLM 0.32.0 takes from a model's config.json when none is given.

The config keys, the RoPE types whose factor is applied and the default are vLLM's
(`vllm/transformers_utils/model_arch_config_convertor.py`, `vllm/config/model.py` @0.32.0).
"""

from __future__ import annotations

from typing import Any

from ...core.errors import Unsupported


def _rope_parameters(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The config's RoPE parameter dicts (rope_parameters, or the older rope_scaling), one per layer type
    when nested, as vLLM's iter_rope_parameters yields them (vllm/transformers_utils/config.py:644-653)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, dict) or not rope:
        return []
    nested = [v for v in rope.values() if isinstance(v, dict) and v]
    return nested or [rope]


def _rope_type(rp: dict[str, Any]) -> str:
    kind = str(rp.get("rope_type") or rp.get("type") or "default")
    return "longrope" if kind == "su" else kind


# vLLM's derived max_model_len keys, the smallest set one wins (model_arch_config_convertor.py:394-425).
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# RoPE types whose factor vLLM does not apply again (vllm/config/model.py:2590-2598).
_ROPE_UNSCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def derived_max_len(cfg: dict[str, Any], model_type: str) -> tuple[int, str, int]:
    """vLLM 0.32.0's (derived max_model_len, the key it names, the default max_model_len).

    - the smallest of the length keys set; model_max_length, when set, wins
      (`derive_max_model_len_and_key`, vllm/transformers_utils/model_arch_config_convertor.py:394-425);
    - none set: 2048 (vllm/config/model.py:2563-2574);
    - RoPE scaling other than su/longrope/llama3/yarn multiplies by its factor; Gemma-3 is exempt
      (vllm/config/model.py:2579-2612);
    - no max_model_len given: LongRoPE takes original_max_position_embeddings (vllm/config/model.py:2619-2627).
    """
    derived: float = float("inf")
    key = "None"  # vLLM names no key when none is set
    for k in _MAX_LEN_KEYS:
        value = cfg.get(k)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Unsupported(f"{model_type}: {k} is {value!r}, not a number; vLLM cannot compare it to derive "
                              "max_model_len")
        if value < derived:
            key = k
        derived = min(derived, value)
    if isinstance(cfg.get("model_max_length"), int | float) and cfg["model_max_length"]:
        derived, key = cfg["model_max_length"], "model_max_length"
    if derived == float("inf"):
        derived = 2048
    ropes = _rope_parameters(cfg)
    if ropes and "gemma3" not in model_type:
        factor: Any = 1.0
        for rp in ropes:
            if _rope_type(rp) not in _ROPE_UNSCALED:
                factor = rp.get("factor", factor)
        derived *= float(factor) if isinstance(factor, int | float) else 1.0
    if int(derived) < 1:
        raise Unsupported(f"{model_type}: the derived max_model_len ({key}={derived}) is not a positive length")
    default = int(derived)
    if any(_rope_type(rp) == "longrope" for rp in ropes):
        original = cfg.get("original_max_position_embeddings")
        if isinstance(original, int) and original > 0:
            default = original
    return int(derived), key, default
