"""A model's KV-relevant shape, read from its Hugging Face `config.json`.

`shape_from_config` reads layers, KV heads, head_dim, dtype, MLA latent width and sliding-window layout
(`layer_types`, Gemma's `sliding_window_pattern`, Qwen2's `max_window_layers`, a plain `sliding_window`),
the keys vLLM's model configs read in `vllm/config/model.py` (0.30-0.33). Errors: `Unsupported` (a
`ValueError`) for a layout it cannot compute exactly, in one sentence naming the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Unsupported(ValueError):
    """The model's KV layout is one this version cannot compute exactly."""


@dataclass(frozen=True)
class ModelShape:
    """What decides the KV cache size of a model, read from its config."""

    model_type: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str  # the config's torch_dtype
    mla_latent: int | None = None  # kv_lora_rank + qk_rope_head_dim (DeepSeek-V2/V3)
    sliding_window: int | None = None
    sliding_layers: int = 0  # how many of num_layers slide; the rest are full attention
    max_position_embeddings: int | None = None

    @property
    def full_layers(self) -> int:
        return self.num_layers - self.sliding_layers

    @property
    def family(self) -> str:
        if self.mla_latent is not None:
            return "mla"
        if self.sliding_layers == self.num_layers:
            return "sliding_window"
        if self.sliding_layers:
            return "interleaved_sliding_window"
        if self.num_kv_heads == 1:
            return "mqa"
        return "gqa" if self.num_kv_heads else "mha"


def load_config(path: Path) -> tuple[dict[str, Any], int | None]:
    """config.json (a file or a model folder) and, for a folder, the weights' bytes from its safetensors index."""
    folder = path if path.is_dir() else path.parent
    file = path / "config.json" if path.is_dir() else path
    try:
        cfg: dict[str, Any] = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read a model config from {file}: {exc}") from None
    weights = None
    index = folder / "model.safetensors.index.json"
    if path.is_dir() and index.exists():
        try:
            weights = int(json.loads(index.read_text())["metadata"]["total_size"])
        except (ValueError, KeyError, TypeError):
            weights = None
    return cfg, weights


def shape_from_config(cfg: dict[str, Any]) -> ModelShape:
    """Read the KV-relevant shape; multimodal configs keep the language model under text_config."""
    if isinstance(cfg.get("text_config"), dict):
        outer_dtype = cfg.get("torch_dtype")
        cfg = {"torch_dtype": outer_dtype, **cfg["text_config"]}
    model_type = str(cfg.get("model_type", "unknown"))
    layers = cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers")
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    if not isinstance(layers, int) or not isinstance(heads, int):
        raise Unsupported(f"config of model_type {model_type!r} names no num_hidden_layers/num_attention_heads")
    if any(k in cfg for k in ("mamba_d_state", "ssm_state_size", "mamba_expand", "layers_block_type")) or \
            "mamba" in model_type or "jamba" in model_type:
        raise Unsupported(f"{model_type}: hybrid attention + Mamba layouts are not supported yet; "
                          "read the capacity from the server's start-up log or vllm:cache_config_info")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    max_pos = cfg.get("max_position_embeddings")
    if cfg.get("kv_lora_rank"):
        latent = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 0))
        return ModelShape(model_type, layers, 1, latent, dtype, mla_latent=latent, max_position_embeddings=max_pos)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    window, sliding = _sliding_layers(cfg, model_type, layers, max_pos)
    return ModelShape(model_type, layers, kv_heads, head_dim, dtype, sliding_window=window, sliding_layers=sliding,
                      max_position_embeddings=max_pos)


def _sliding_layers(cfg: dict[str, Any], model_type: str, layers: int, max_pos: Any) -> tuple[int | None, int]:
    """The window and how many layers use it, from layer_types, a Gemma-style pattern, Qwen2's
    max_window_layers or a plain sliding_window (every layer, Mistral-style)."""
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) is not False else None
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        kinds = {str(k) for k in layer_types}
        unknown = kinds - {"sliding_attention", "full_attention"}
        if unknown:
            raise Unsupported(f"{model_type}: layer types {sorted(unknown)} are not supported yet; "
                              "use kv_cache_max_concurrency from vllm:cache_config_info (vLLM >= 0.24)")
        sliding = sum(1 for k in layer_types[:layers] if k == "sliding_attention")
        if sliding and not isinstance(window, int):
            raise Unsupported(f"{model_type}: sliding layers without a sliding_window size")
        return (window if sliding else None), sliding
    if not isinstance(window, int) or (isinstance(max_pos, int) and window >= max_pos):
        return None, 0  # no window, or one as long as the context: full attention
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return window, sum(1 for i in range(layers) if (i + 1) % pattern != 0)  # every pattern-th layer is global
    if cfg.get("use_sliding_window") and isinstance(cfg.get("max_window_layers"), int):
        return window, max(0, layers - int(cfg["max_window_layers"]))  # Qwen2: the first layers stay full
    return window, layers


