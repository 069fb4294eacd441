"""A model's KV-relevant shape, read from its Hugging Face `config.json`.

`shape_from_config` reads layers, KV heads, head_dim, dtype, MLA latent width, sliding-window layout and
the per-layer layout of hybrid models: which layers are full attention, sliding-window attention, a
linear-attention / Mamba layer with a fixed state, or a layer with no cache at all (an MLP or MoE block).
Layout keys, each as the config (and vLLM 0.32.0's model code) spells it:

- `layer_types` (Gemma-3/4, gpt-oss, Qwen3.5, Granite-4.0-H: `full_attention`, `sliding_attention`,
  `linear_attention`, `attention`, `mamba`) and `layers_block_type` (Nemotron-H, Jamba: `attention`,
  `mamba`, `mlp`, `moe`);
- `full_attention_interval` (Qwen3-Next: every n-th layer is full attention, the rest Gated DeltaNet);
- `linear_attn_config.full_attn_layers` / `kda_layers` (Kimi-Linear, 1-based layer numbers);
- `hybrid_override_pattern` (Nemotron-H: `M` Mamba-2, `*` attention, `-` MLP, `E` MoE);
- `attn_layer_period` / `attn_layer_offset` (Jamba: attention where index % period == offset);
- Gemma's `sliding_window_pattern`, Qwen2's `max_window_layers`, a plain `sliding_window`.

The state of a linear layer follows vLLM 0.32.0's `MambaStateShapeCalculator` /
`MambaStateDtypeCalculator` (`vllm/model_executor/layers/mamba/mamba_utils.py`) and each model's
`get_mamba_state_shape_from_config` (`qwen3_next.py`, `qwen3_5.py`, `nemotron_h.py`,
`granitemoehybrid.py`, `jamba.py`, `vllm/models/kimi_k3/nvidia/model.py`).

Errors: `Unsupported` (a `ValueError`) for a layout it cannot compute exactly, in one sentence naming the
key; a hybrid is never computed as if it were dense.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any


class Unsupported(ValueError):
    """The model's KV layout is one this version cannot compute exactly."""


FULL, SLIDING, LINEAR, NONE = "full", "sliding", "linear", "none"

# Per-layer kind names as configs write them (layer_types, layers_block_type).
_KIND_NAMES = {
    "full_attention": FULL, "attention": FULL, "global_attention": FULL, "global": FULL,
    "sliding_attention": SLIDING, "local_attention": SLIDING, "sliding": SLIDING,
    "linear_attention": LINEAR, "mamba": LINEAR, "mamba2": LINEAR, "ssm": LINEAR, "kda": LINEAR,
    "gated_deltanet": LINEAR,
    "mlp": NONE, "moe": NONE,
}
# Nemotron-H's hybrid_override_pattern letters (configuration_nemotron_h.py).
_PATTERN = {"M": LINEAR, "*": FULL, "-": NONE, "E": NONE}


def _divide(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise ValueError(f"{what} ({n}) is not divisible by the tensor parallel size ({tp}), as vLLM requires")
    return n // tp


@dataclass(frozen=True)
class LinearState:
    """The fixed per-request state of one linear-attention / Mamba layer (vLLM's `MambaSpec`).

    kind: 'mamba1' (Jamba), 'mamba2' (Nemotron-H, Granite-4.0-H), 'gdn' (Gated DeltaNet: Qwen3-Next,
    Qwen3.5), 'kda' (Kimi Delta Attention: Kimi-Linear). Sizes are the config's, before the TP split.
    ssm_dtype None: the same dtype as the conv state (vLLM's mamba_ssm_cache_dtype 'auto').
    checkpoint_blocks: vLLM's num_prefill_checkpoint_blocks (1 for the Mamba-2 mixer, 0 otherwise).
    """

    kind: str
    conv_kernel: int
    intermediate: int = 0  # mamba1/mamba2: expand × hidden (or heads × head_dim)
    state_size: int = 0  # mamba1/mamba2: d_state
    n_groups: int = 0  # mamba2
    num_heads: int = 0  # mamba2 heads, GDN value heads, KDA heads
    head_dim: int = 0  # mamba2 head_dim, GDN value head dim, KDA head dim
    num_k_heads: int = 0  # GDN key heads
    head_k_dim: int = 0  # GDN key head dim
    ssm_dtype: str | None = None
    checkpoint_blocks: int = 0

    def shapes(self, tp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(conv state shape, temporal/recurrent state shape) on one TP rank; ValueError if TP does not divide."""
        k = self.conv_kernel - 1
        if self.kind == "mamba1":
            inner = _divide(self.intermediate, tp, "mamba intermediate size")
            return (k, inner), (inner, self.state_size)
        if self.kind == "mamba2":
            groups = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
            conv = _divide(self.intermediate + 2 * groups * self.state_size, tp, "mamba conv dim")
            return (k, conv), (_divide(self.num_heads, tp, "mamba heads"), self.head_dim, self.state_size)
        if self.kind == "gdn":
            conv_dim = self.head_k_dim * self.num_k_heads * 2 + self.head_dim * self.num_heads
            return ((k, _divide(conv_dim, tp, "linear-attention conv dim")),
                    (_divide(self.num_heads, tp, "linear value heads"), self.head_dim, self.head_k_dim))
        if self.kind == "kda":
            conv_dim = 3 * self.num_heads * self.head_dim
            return ((k, _divide(conv_dim, tp, "KDA conv dim")),
                    (_divide(self.num_heads, tp, "KDA heads"), self.head_dim, self.head_dim))
        raise Unsupported(f"linear layer kind {self.kind!r} is not supported")

    def state_bytes(self, tp: int, conv_dtype_bytes: int, ssm_dtype_bytes: int) -> int:
        """Bytes of one layer's state for one request on one rank (vLLM's unpadded MambaSpec page)."""
        conv, temporal = self.shapes(tp)
        return prod(conv) * conv_dtype_bytes + prod(temporal) * ssm_dtype_bytes


@dataclass(frozen=True)
class ModelShape:
    """What decides the KV cache size of a model, read from its config.

    `kinds` lists every hidden layer's kind (FULL, SLIDING, LINEAR, NONE) in layer order when the config
    names a per-layer layout; left empty, the layers are `sliding_layers` sliding ones and the rest full.
    """

    model_type: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str  # the config's torch_dtype
    mla_latent: int | None = None  # kv_lora_rank + qk_rope_head_dim (DeepSeek-V2/V3, Kimi-Linear)
    sliding_window: int | None = None
    sliding_layers: int = 0  # how many of num_layers slide; the rest are full attention
    max_position_embeddings: int | None = None
    kinds: tuple[str, ...] = ()
    linear: LinearState | None = None
    num_attention_heads: int | None = None
    layout_key: str | None = None  # the config key the per-layer layout was read from

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        if self.kinds:
            return self.kinds
        return (SLIDING,) * self.sliding_layers + (FULL,) * (self.num_layers - self.sliding_layers)

    @property
    def full_layers(self) -> int:
        return self.layer_kinds.count(FULL)

    @property
    def linear_layers(self) -> int:
        return self.layer_kinds.count(LINEAR)

    @property
    def attention_layers(self) -> int:
        return self.full_layers + self.layer_kinds.count(SLIDING)

    @property
    def family(self) -> str:
        if self.mla_latent is not None:
            attn = "mla"
        elif self.sliding_layers == self.attention_layers and self.sliding_layers:
            attn = "sliding_window"
        elif self.sliding_layers:
            attn = "interleaved_sliding_window"
        elif self.num_kv_heads == 1:
            attn = "mqa"
        else:
            attn = "gqa" if self.num_kv_heads else "mha"
        if self.linear is not None and self.linear_layers:
            return f"hybrid_{attn}_{self.linear.kind}"
        return attn


def hf_cache_dirs() -> list[Path]:
    """Where a local Hugging Face cache keeps models: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub."""
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def resolve_model(name: str) -> Path:
    """A config.json path, a model folder, or a Hugging Face id ('org/name') found in a local HF cache.

    The id is looked up as `<cache>/models--org--name/snapshots/*/config.json` (newest snapshot first);
    nothing is downloaded. Raises ValueError in one sentence saying how to fetch the two files.
    """
    path = Path(name)
    if path.exists():
        return path
    if name.count("/") == 1 and not name.startswith((".", "/")) and not name.endswith(".json"):
        folder = "models--" + name.replace("/", "--")
        for cache in hf_cache_dirs():
            snaps = sorted((cache / folder / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime,
                           reverse=True)
            if snaps:
                return snaps[0].parent
        raise ValueError(
            f"{name} is neither a file nor in a local Hugging Face cache ({', '.join(map(str, hf_cache_dirs()))}); "
            f"fetch its config.json and model.safetensors.index.json, e.g. `hf download {name} config.json "
            "model.safetensors.index.json`, and pass the folder")
    raise ValueError(f"no such file or folder: {name}")


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


_MAMBA_HINTS = ("mamba_d_state", "ssm_state_size", "mamba_expand", "mamba_n_heads", "linear_num_value_heads",
                "linear_attn_config", "hybrid_override_pattern", "layers_block_type", "full_attention_interval",
                "attn_layer_period")


# Keys whose layouts would be miscounted as plain attention: refused by name rather than guessed.
_UNSIZED = (
    ("num_kv_shared_layers", "Gemma-3n/4 layers that reuse another layer's KV"),
    ("attention_chunk_size", "Llama-4 chunked local attention"),
    ("index_topk", "DeepSeek-V3.2 sparse attention with an indexer cache"),
)


def shape_from_config(cfg: dict[str, Any]) -> ModelShape:
    """Read the KV-relevant shape; multimodal configs keep the language model under text_config."""
    if isinstance(cfg.get("text_config"), dict):
        outer_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
        cfg = {"torch_dtype": outer_dtype, **cfg["text_config"]}
    model_type = str(cfg.get("model_type", "unknown"))
    layers = cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers")
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    if not isinstance(layers, int) or not isinstance(heads, int):
        raise Unsupported(f"config of model_type {model_type!r} names no num_hidden_layers/num_attention_heads")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    # vLLM's derived max_model_len reads the first of these keys (`_get_and_verify_max_len`, 0.32.0).
    max_pos = next((cfg[k] for k in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                                     "model_max_length", "max_sequence_length", "max_seq_length", "seq_len")
                    if isinstance(cfg.get(k), int)), None)
    for extra, what in _UNSIZED:
        if cfg.get(extra):
            raise Unsupported(f"{model_type}: {extra} ({what}) changes vLLM's KV layout in a way this version does "
                              "not size; read the capacity from the server's start-up log (estimate --from-log)")
    kinds, key = _layer_kinds(cfg, model_type, layers)
    linear = _linear_state(cfg, model_type, key) if kinds and LINEAR in kinds else None
    if kinds is None and any(k in cfg for k in _MAMBA_HINTS):
        hint = next(k for k in _MAMBA_HINTS if k in cfg)
        raise Unsupported(f"{model_type}: the config has {hint} but no per-layer layout this version can read; "
                          "read the capacity from the server's start-up log (estimate --from-log)")
    if kinds is None and ("mamba" in model_type or "jamba" in model_type):
        raise Unsupported(f"{model_type}: a Mamba model without a per-layer layout key (layer_types, "
                          "hybrid_override_pattern, attn_layer_period) is not supported")
    common: dict[str, Any] = {"max_position_embeddings": max_pos, "num_attention_heads": heads,
                              "linear": linear, "layout_key": key}
    if cfg.get("kv_lora_rank"):
        latent = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 0))
        if kinds and SLIDING in kinds:
            raise Unsupported(f"{model_type}: MLA with sliding-window layers ({key}) is not supported")
        return ModelShape(model_type, layers, 1, latent, dtype, mla_latent=latent, kinds=kinds or (), **common)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg.get("attention_head_dim") or cfg["hidden_size"] // heads)
    if kinds is not None:
        sliding = kinds.count(SLIDING)
        window = cfg.get("sliding_window") if sliding else None
        if sliding and not isinstance(window, int):
            raise Unsupported(f"{model_type}: sliding layers in {key} without a sliding_window size")
        return ModelShape(model_type, layers, kv_heads, head_dim, dtype, sliding_window=window,
                          sliding_layers=sliding, kinds=kinds, **common)
    window, order = _sliding_layers(cfg, layers, max_pos)
    return ModelShape(model_type, layers, kv_heads, head_dim, dtype, sliding_window=window,
                      sliding_layers=order.count(SLIDING), kinds=order, **common)


def _named_kinds(values: list[Any], key: str, model_type: str, layers: int) -> tuple[str, ...]:
    unknown = sorted({str(v) for v in values} - set(_KIND_NAMES))
    if unknown:
        raise Unsupported(f"{model_type}: {key} names layer kinds {unknown} that this version cannot size; "
                          "use kv_cache_max_concurrency from vllm:cache_config_info or estimate --from-log")
    if len(values) < layers:
        raise Unsupported(f"{model_type}: {key} lists {len(values)} layers for num_hidden_layers {layers}")
    return tuple(_KIND_NAMES[str(v)] for v in values[:layers])


def _layer_kinds(cfg: dict[str, Any], model_type: str, layers: int) -> tuple[tuple[str, ...] | None, str | None]:
    """Each layer's kind from whichever per-layer layout key the config has, or (None, None)."""
    for key in ("layer_types", "layers_block_type"):
        value = cfg.get(key)
        if isinstance(value, list) and value:
            return _named_kinds(value, key, model_type, layers), key
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        unknown = sorted(set(pattern) - set(_PATTERN))
        if unknown or len(pattern) < layers:
            raise Unsupported(f"{model_type}: hybrid_override_pattern {pattern!r} has letters {unknown} or too few "
                              "layers; known letters are M, *, - and E")
        return tuple(_PATTERN[c] for c in pattern[:layers]), "hybrid_override_pattern"
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers)), "full_attention_interval"
    lin = cfg.get("linear_attn_config")
    if isinstance(lin, dict):
        full = lin.get("full_attn_layers")
        kda = lin.get("kda_layers")
        if not isinstance(full, list) or not isinstance(kda, list):
            raise Unsupported(f"{model_type}: linear_attn_config has no full_attn_layers/kda_layers lists")
        base = int(lin.get("kda_layer_index_base", 1))  # Kimi-Linear numbers layers from 1; later configs say 0
        full_set, kda_set = {int(i) for i in full}, {int(i) for i in kda}
        return tuple(FULL if i + base in full_set else LINEAR if i + base in kda_set else NONE
                     for i in range(layers)), "linear_attn_config"
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset")
    if isinstance(period, int) and isinstance(offset, int) and period > 0:
        return tuple(FULL if i % period == offset else LINEAR for i in range(layers)), "attn_layer_period"
    types = cfg.get("layer_types")
    if types is not None and not isinstance(types, list):
        raise Unsupported(f"{model_type}: layer_types is not a list")
    return None, None


def _linear_state(cfg: dict[str, Any], model_type: str, key: str | None) -> LinearState:
    """The state of the model's linear / Mamba layers, from the keys its vLLM model class reads."""
    def need(*names: str) -> list[int]:
        missing = [n for n in names if not isinstance(cfg.get(n), int | float)]
        if missing:
            raise Unsupported(f"{model_type}: linear layers in {key} but no {missing[0]} for their state size")
        return [int(cfg[n]) for n in names]

    if "linear_num_value_heads" in cfg:  # Qwen3-Next, Qwen3.5: Gated DeltaNet
        nk, nv, dk, dv, kernel = need("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                      "linear_value_head_dim", "linear_conv_kernel_dim")
        # Qwen3.5's vLLM config takes the SSM dtype from the config's mamba_ssm_dtype (Qwen3-Next's does not).
        ssm = cfg.get("mamba_ssm_dtype") if model_type.startswith("qwen3_5") else None
        return LinearState("gdn", kernel, num_heads=nv, head_dim=dv, num_k_heads=nk, head_k_dim=dk,
                           ssm_dtype=str(ssm) if ssm else None)
    lin = cfg.get("linear_attn_config")
    if isinstance(lin, dict):  # Kimi-Linear: KDA, recurrent state float32 unless mamba_ssm_cache_dtype says
        try:
            return LinearState("kda", int(lin.get("short_conv_kernel_size", 4)), num_heads=int(lin["num_heads"]),
                               head_dim=int(lin["head_dim"]), ssm_dtype="float32")
        except (KeyError, TypeError, ValueError):
            raise Unsupported(f"{model_type}: linear_attn_config has no num_heads/head_dim") from None
    if "mamba_num_heads" in cfg:  # Nemotron-H: Mamba-2, SSM state float32 unless the config says
        h, d, g, n, kernel = need("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel")
        return LinearState("mamba2", kernel, intermediate=h * d, state_size=n, n_groups=g, num_heads=h, head_dim=d,
                           ssm_dtype=str(cfg.get("mamba_ssm_cache_dtype") or "float32"), checkpoint_blocks=1)
    if "mamba_n_heads" in cfg:  # Granite-4.0-H (granitemoehybrid): Mamba-2
        e, hidden, g, h, d, n, kernel = need("mamba_expand", "hidden_size", "mamba_n_groups", "mamba_n_heads",
                                             "mamba_d_head", "mamba_d_state", "mamba_d_conv")
        return LinearState("mamba2", kernel, intermediate=e * hidden, state_size=n, n_groups=g, num_heads=h,
                           head_dim=d, checkpoint_blocks=1)
    if "mamba_d_state" in cfg:  # Jamba: Mamba-1
        e, hidden, n, kernel = need("mamba_expand", "hidden_size", "mamba_d_state", "mamba_d_conv")
        return LinearState("mamba1", kernel, intermediate=e * hidden, state_size=n)
    raise Unsupported(f"{model_type}: {key} has linear/Mamba layers whose state size this version does not know")


def _sliding_layers(cfg: dict[str, Any], layers: int, max_pos: Any) -> tuple[int | None, tuple[str, ...]]:
    """The window and each layer's kind, from a Gemma-style pattern (every pattern-th layer global), Qwen2's
    max_window_layers (the first layers full) or a plain sliding_window (every layer, Mistral-style)."""
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) is not False else None
    if not isinstance(window, int) or (isinstance(max_pos, int) and window >= max_pos):
        return None, (FULL,) * layers  # no window, or one as long as the context: full attention
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return window, tuple(FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers))
    if cfg.get("use_sliding_window") and isinstance(cfg.get("max_window_layers"), int):
        full = int(cfg["max_window_layers"])
        return window, tuple(FULL if i < full else SLIDING for i in range(layers))
    return window, (SLIDING,) * layers
