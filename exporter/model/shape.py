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
from dataclasses import dataclass, replace
from math import prod
from pathlib import Path
from typing import Any

from ..core.errors import Unsupported as Unsupported
from ..engines.vllm import VLLM

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
    max_len_key: str | None = None  # the key vLLM's derived max_model_len came from
    max_len_text: str | None = None  # the derived length as vLLM prints it (a float for RoPE models: 8192.0)
    model_max_length: int | None = None  # the config's model_max_length, named in vLLM's refusal
    default_max_model_len: int | None = None  # vLLM's max_model_len when none is given (LongRoPE: the original)
    weight_bytes: float | None = None  # bytes per parameter of the checkpoint's weights, from quantization_config
    weight_note: str = ""  # what weight_bytes assumes, said in the output
    linear_heads: tuple[tuple[str, int], ...] = ()  # (what, count) of linear/Mamba heads TP must divide
    implied_params: int | None = None  # a rough parameter count from the config, for a sanity warning
    source: str = ""  # where the config was read from (the HF snapshot for an id)
    experts: int | None = None  # routed experts, where vLLM's MoE block refuses a TP above them
    mtp_layers: int = 0  # multi-token-prediction layers the config ships (num_nextn_predict_layers, ...)

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

    The id resolves as huggingface_hub resolves revision 'main' offline: `<cache>/models--org--name/refs/main`
    names the commit, whose `snapshots/<commit>/` is used; without refs/main, the newest snapshot holding a
    config.json (said by `model_source`). Nothing is downloaded. Raises ValueError in one sentence saying how
    to fetch the two files.
    """
    path = Path(name)
    if path.exists():
        return path
    if name.count("/") == 1 and not name.startswith((".", "/")) and not name.endswith(".json"):
        folder = "models--" + name.replace("/", "--")
        for cache in hf_cache_dirs():
            repo = cache / folder
            ref = repo / "refs" / "main"
            if ref.is_file():
                snap = repo / "snapshots" / ref.read_text().strip()
                if (snap / "config.json").is_file():
                    return snap
                raise ValueError(f"{name}: refs/main in {repo} names snapshot {snap.name}, which has no "
                                 "config.json; fetch it again, e.g. `hf download "
                                 f"{name} config.json model.safetensors.index.json`")
            snaps = sorted((repo / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime,
                           reverse=True)
            if snaps:
                return snaps[0].parent
        raise ValueError(
            f"{name} is neither a file nor in a local Hugging Face cache ({', '.join(map(str, hf_cache_dirs()))}); "
            f"fetch its config.json and model.safetensors.index.json, e.g. `hf download {name} config.json "
            "model.safetensors.index.json`, and pass the folder")
    raise ValueError(f"no such file or folder: {name}")


def model_source(name: str, path: Path) -> str:
    """Which HF snapshot a model id resolved to (and whether refs/main chose it); '' for a local path."""
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        ref = path.parent.parent / "refs" / "main"
        how = "refs/main" if ref.is_file() and ref.read_text().strip() == path.name else \
            "the newest snapshot; the cache has no refs/main"
        return f"{name} from the local Hugging Face cache, snapshot {path.name} ({how})"
    return ""


def load_config(path: Path) -> tuple[dict[str, Any], int | None]:
    """config.json (a file or a model folder) and, for a folder, the weights' bytes from its safetensors index."""
    folder = path if path.is_dir() else path.parent
    file = path / "config.json" if path.is_dir() else path
    try:
        cfg: Any = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read a model config from {file}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{file} is not a model config: it holds a JSON {type(cfg).__name__}, not an object "
                         "with model_type, num_hidden_layers and the other keys")
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


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _count(cfg: dict[str, Any], model_type: str, *keys: str, low: int = 1) -> int | None:
    """The first of `keys` the config sets, as a whole number >= low; None when none is set; Unsupported when
    the value is not a whole number or too small (vLLM would fail on it)."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise Unsupported(f"{model_type}: {key} is {value!r}, not a whole number (vLLM's model code needs an "
                              "integer)")
        if value < low:
            raise Unsupported(f"{model_type}: {key} is {int(value)}; a model needs at least {low}")
        return int(value)
    return None


# Configs whose Hugging Face config class fills `layer_types` when config.json omits it, and vLLM 0.32.0's
# model reads it per layer. model_type: (pattern key, default period, default sliding_window, full layer at
# i % period == 0 rather than (i + 1) % period == 0). Sources (transformers 5.19, the version vLLM 0.32.0's
# venv installs): configuration_gemma2.py:88,95-97; configuration_gemma3.py:97,109-113;
# configuration_cohere2.py:85,96-100; configuration_gpt_oss.py:58,83-85; configuration_olmo3.py:86,93-95;
# configuration_exaone4.py:96-108; configuration_afmoe.py:91-92,102-105; configuration_cwm.py:84,98-104
# (full first); configuration_vaultgemma.py:87,93-95. vLLM reads them in gemma2.py:155, gemma3.py,
# commandr.py:243, gpt_oss.py, olmo3, exaone4.py, afmoe.py:194; CWM and VaultGemma run on vLLM's
# Transformers backend (registry.py:712, :729). Checked against the config classes themselves (the
# default layer_types of a 12-layer config of each type). Gemma-3n is refused (num_kv_shared_layers);
# Qwen2/Qwen3's default (sliding from max_window_layers on, with use_sliding_window) is `_sliding_layers`.
_DEFAULT_PATTERN: dict[str, tuple[str | None, int, int, bool]] = {
    "gemma2": (None, 2, 4096, False), "gemma3": ("sliding_window_pattern", 6, 4096, False),
    "gemma3_text": ("sliding_window_pattern", 6, 4096, False),
    "cohere2": ("sliding_window_pattern", 4, 4096, False), "gpt_oss": (None, 2, 128, False),
    "olmo3": (None, 4, 4096, False), "exaone4": ("sliding_window_pattern", 4, 4096, False),
    "afmoe": ("global_attn_every_n_layers", 4, 1024, False), "cwm": (None, 4, 8192, True),
    "vaultgemma": (None, 2, 4096, False),
}
# Cohere-2 passes sliding_window + 1 to attention (vllm/model_executor/models/commandr.py:237-244).
_WINDOW_PLUS_ONE = ("cohere2",)


def _class_defaults(cfg: dict[str, Any], model_type: str, layers: int) -> dict[str, Any]:
    """`cfg` with the sliding_window and layer_types its Hugging Face config class fills in when config.json
    omits them (see _DEFAULT_PATTERN); unchanged for other model types."""
    if model_type not in _DEFAULT_PATTERN:
        return cfg
    key, period, window, full_first = _DEFAULT_PATTERN[model_type]
    if "sliding_window" not in cfg:
        cfg = {**cfg, "sliding_window": window}
    if cfg.get("layer_types") is not None or not isinstance(cfg.get("sliding_window"), int):
        return cfg
    raw = cfg.get(key) if key else None
    if isinstance(raw, str):
        raise Unsupported(f"{model_type}: {key} {raw!r} without layer_types: the config class cannot build the "
                          "layer pattern from a string (transformers configuration_exaone4.py:102-108), so vLLM "
                          "cannot load it; give layer_types")
    if isinstance(raw, int) and raw > 0:
        period = raw
    types = ["full_attention" if (i if full_first else i + 1) % period == 0 else "sliding_attention"
             for i in range(layers)]
    return {**cfg, "layer_types": types, "_layer_types_default": True}


def weight_bytes_per_param(cfg: dict[str, Any], model_type: str) -> tuple[float | None, str]:
    """Bytes per parameter of the checkpoint's weights from quantization_config, and what that assumes.

    None (the model dtype's bytes) without quantization_config. fp8 (fp8, fbgemm_fp8, FP8 modelopt,
    8-bit compressed-tensors): 1 byte; awq / gptq / bitsandbytes: `bits` / 8 (4-bit: 0.5), scales and
    zero points not counted; mxfp4 (gpt-oss): MoE experts at 4.25 bits and the rest at 16 bits, taken as
    0.55 bytes per parameter overall (gpt-oss-120b: 65 GB for 117B parameters); nvfp4: 0.5625. Unknown
    methods: Unsupported, asking for --weights-bytes.
    """
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None, ""
    method = str(q.get("quant_method") or q.get("quant_algo") or "").lower()
    algo = str(q.get("quant_algo") or "").lower()
    bits = q.get("bits") or q.get("w_bit")
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8") or algo == "fp8":
        return 1.0, f"{method} checkpoint: 1 byte per parameter"
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "autoround", "auto-round"):
        b = int(bits) if isinstance(bits, int) else 4
        return b / 8, f"{method} {b}-bit checkpoint: {b / 8:g} bytes per parameter (scales and zeros not counted)"
    if method == "bitsandbytes":
        if q.get("load_in_8bit"):
            return 1.0, "bitsandbytes 8-bit checkpoint: 1 byte per parameter"
        return 0.5, "bitsandbytes 4-bit checkpoint: 0.5 bytes per parameter"
    if method == "mxfp4":
        return 0.55, ("mxfp4 checkpoint: experts at 4.25 bits, the rest 16-bit, taken as 0.55 bytes per parameter "
                      "(gpt-oss-120b's ratio); give --weights-bytes for the exact size")
    if method in ("modelopt_fp4", "nvfp4") or algo == "nvfp4":
        return 0.5625, "nvfp4 checkpoint: 4.5 bits per parameter with its scales"
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        found = {g.get("weights", {}).get("num_bits") for g in groups.values()
                 if isinstance(g, dict) and isinstance(g.get("weights"), dict)} if isinstance(groups, dict) else set()
        if len(found) == 1 and next(iter(found)) in (4, 8):
            b = int(next(iter(found)))
            return b / 8, f"compressed-tensors {b}-bit weights: {b / 8:g} bytes per parameter"
    named = f"quant_method {method!r}" if method else "without a quant_method"
    raise Unsupported(f"{model_type}: quantization_config {named} has a weight size this version does not know; "
                      "give --weights-bytes (the checkpoint's size) instead of --params")


def shape_from_config(cfg: dict[str, Any]) -> ModelShape:
    """Read the KV-relevant shape; multimodal configs keep the language model under text_config."""
    if not isinstance(cfg, dict):
        raise Unsupported(f"the model config is a JSON {_JSON_TYPES.get(type(cfg), 'value')}, not an object")
    quant = cfg.get("quantization_config")
    if isinstance(cfg.get("text_config"), dict):
        outer_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
        cfg = {"torch_dtype": outer_dtype, **cfg["text_config"]}
        if quant is not None:
            cfg.setdefault("quantization_config", quant)
    model_type = str(cfg.get("model_type", "unknown"))
    layers = _count(cfg, model_type, "num_hidden_layers", "n_layer", "num_layers")
    heads = _count(cfg, model_type, "num_attention_heads", "n_head")
    if layers is None or heads is None:
        raise Unsupported(f"config of model_type {model_type!r} names no num_hidden_layers/num_attention_heads")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    derived, max_len_key, default_len = VLLM.derived_max_model_len(cfg, model_type)
    # vLLM multiplies by a float RoPE factor whenever the config has RoPE parameters (transformers 5 fills
    # rope_parameters from rope_theta), so its message prints "max_position_embeddings=8192.0".
    rope = any(k in cfg for k in ("rope_theta", "rope_scaling", "rope_parameters")) and "gemma3" not in model_type
    mml = cfg.get("model_max_length")
    weight_bytes, weight_note = weight_bytes_per_param(cfg, model_type)
    for extra, what in _UNSIZED:
        if cfg.get(extra):
            raise Unsupported(f"{model_type}: {extra} ({what}) changes vLLM's KV layout in a way this version does "
                              "not size; read the capacity from the server's start-up log (estimate --from-log)")
    cfg = _class_defaults(cfg, model_type, layers)
    kinds, key = _layer_kinds(cfg, model_type, layers)
    if cfg.get("_layer_types_default"):
        key = f"layer_types (the {model_type} config class's default)"
    linear = _linear_state(cfg, model_type, key) if kinds and LINEAR in kinds else None
    if kinds is None and any(k in cfg for k in _MAMBA_HINTS):
        hint = next(k for k in _MAMBA_HINTS if k in cfg)
        raise Unsupported(f"{model_type}: the config has {hint} but no per-layer layout this version can read; "
                          "read the capacity from the server's start-up log (estimate --from-log)")
    if kinds is None and ("mamba" in model_type or "jamba" in model_type):
        raise Unsupported(f"{model_type}: a Mamba model without a per-layer layout key (layer_types, "
                          "hybrid_override_pattern, attn_layer_period) is not supported")
    common: dict[str, Any] = {"max_position_embeddings": derived, "num_attention_heads": heads,
                              "linear": linear, "layout_key": key, "max_len_key": max_len_key,
                              "default_max_model_len": default_len, "weight_bytes": weight_bytes,
                              "max_len_text": f"{float(derived)}" if rope else str(derived),
                              "model_max_length": mml if isinstance(mml, int) else None,
                              "weight_note": weight_note, "linear_heads": _linear_heads(linear)}
    if cfg.get("kv_lora_rank"):
        latent = (_count(cfg, model_type, "kv_lora_rank") or 0) + (_count(cfg, model_type, "qk_rope_head_dim",
                                                                          low=0) or 0)
        if kinds and SLIDING in kinds:
            raise Unsupported(f"{model_type}: MLA with sliding-window layers ({key}) is not supported")
        return _with_params(cfg, ModelShape(model_type, layers, 1, latent, dtype, mla_latent=latent,
                                            kinds=kinds or (), **common))
    kv_heads = _count(cfg, model_type, "num_key_value_heads", low=1) or heads
    if kv_heads > heads:
        raise Unsupported(f"{model_type}: num_key_value_heads ({kv_heads}) is more than num_attention_heads "
                          f"({heads}); a KV head serves one or more query heads, so the config is wrong")
    head_dim = _count(cfg, model_type, "head_dim", "attention_head_dim")
    if head_dim is None:
        hidden = _count(cfg, model_type, "hidden_size")
        if hidden is None:
            raise Unsupported(f"{model_type}: the config names neither head_dim nor hidden_size")
        head_dim = hidden // heads
    if kinds is not None:
        sliding = kinds.count(SLIDING)
        window = cfg.get("sliding_window") if sliding else None
        if sliding and not (isinstance(window, int) and window > 0):
            raise Unsupported(f"{model_type}: sliding layers in {key} without a positive sliding_window size")
        if window is not None and model_type in _WINDOW_PLUS_ONE:
            window += 1
        return _with_params(cfg, ModelShape(model_type, layers, kv_heads, head_dim, dtype, sliding_window=window,
                                            sliding_layers=sliding, kinds=kinds, **common))
    window, order = _sliding_layers(cfg, layers, derived)
    return _with_params(cfg, ModelShape(model_type, layers, kv_heads, head_dim, dtype, sliding_window=window,
                                        sliding_layers=order.count(SLIDING), kinds=order, **common))


# MoE blocks that raise "Tensor parallel size N is greater than the number of experts M." (vLLM 0.32.0,
# vllm/model_executor/models/<file>:<line>): the config key each reads.
_EXPERTS_TP = {
    "qwen2_moe": "num_experts",  # qwen2_moe.py:138
    "qwen3_moe": "num_experts",  # qwen3_moe.py:154-158
    "qwen3_next": "num_experts",  # qwen3_next.py:176-180
    "cohere2_moe": "num_experts",  # cohere2_moe.py:268
    "exaone_moe": "num_experts",  # exaone_moe.py:85
    "minimax_m2": "num_local_experts",  # minimax_m2.py:79-83
    "mimo_v2": "n_routed_experts", "mimo_v2_flash": "n_routed_experts",  # mimo_v2.py:139
    "lfm2_moe": "num_experts",  # lfm2_moe.py:114 (n_routed_experts = config.num_experts)
    "ernie4_5_moe": "moe_num_experts",  # ernie45_moe.py:152
    "step3_text": "moe_num_experts",  # step3_text.py:68
}


def _with_params(cfg: dict[str, Any], shape: ModelShape) -> ModelShape:
    try:
        implied = _implied_params(cfg, shape)
    except (TypeError, ValueError):  # a key the rough count reads is malformed: no sanity warning
        implied = None
    key = _EXPERTS_TP.get(shape.model_type)
    experts = cfg.get(key) if key else None
    # The MTP drafter's layers, as vLLM reads them for `--speculative-config {"method": "mtp"}`
    # (`SpeculativeConfig.hf_config_override`, vllm/config/speculative.py:735-1020 @0.33.0).
    mtp = next((cfg[k] for k in _MTP_KEYS if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool)), 0)
    return replace(shape, implied_params=implied, mtp_layers=max(0, mtp),
                   experts=experts if isinstance(experts, int) and not isinstance(experts, bool) else None)


_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


def _implied_params(c: dict[str, Any], shape: ModelShape) -> int | None:
    """A rough parameter count from the config (embeddings, attention, MLP / experts), for a sanity warning."""
    try:
        hidden = int(c["hidden_size"])
        vocab = int(c.get("vocab_size") or 0)
        inter = int(c.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError):
        return None
    heads = shape.num_attention_heads or 1
    hd = shape.head_dim if shape.mla_latent is None else int(c.get("v_head_dim") or 128)
    attn = 2 * hidden * heads * hd + 2 * hidden * shape.num_kv_heads * hd
    if shape.mla_latent is not None:
        q = int(c.get("q_lora_rank") or 0)
        qk = int(c.get("qk_nope_head_dim") or 128) + int(c.get("qk_rope_head_dim") or 64)
        attn = ((hidden * q + q * heads * qk) if q else hidden * heads * qk) + hidden * shape.mla_latent \
            + int(c.get("kv_lora_rank") or 0) * heads * (qk + hd) + heads * hd * hidden
    experts = int(c.get("n_routed_experts") or c.get("num_local_experts") or c.get("num_experts") or 0)
    moe_inter = int(c.get("moe_intermediate_size") or inter)
    shared = int(c.get("n_shared_experts") or 0)
    dense_first = int(c.get("first_k_dense_replace") or 0)
    mlp_dense = 3 * hidden * inter
    mlp_moe = 3 * hidden * moe_inter * (experts + shared) + hidden * experts if experts else mlp_dense
    total = vocab * hidden * (1 if c.get("tie_word_embeddings") else 2)
    for i in range(shape.num_layers):
        total += (attn if shape.layer_kinds[i] != LINEAR else 3 * hidden * hidden) \
            + (mlp_dense if i < dense_first else mlp_moe)
    return total


def _linear_heads(linear: LinearState | None) -> tuple[tuple[str, int], ...]:
    """The head counts of linear / Mamba layers vLLM 0.32.0 splits over TP with `divide`: Mamba-2 heads
    (mamba_mixer2.py:315-317), Gated DeltaNet value heads (mamba_utils.py:297,
    gdn/qwen_gdn_linear_attn.py:557; key heads are floored, not divided), KDA heads (mamba_utils.py:326).
    The conv dims they also divide (mamba_utils.py:213, :292, :324) are checked in `LinearState.shapes`."""
    if linear is None:
        return ()
    if linear.kind == "mamba2":
        return (("Mamba-2 heads", linear.num_heads),)
    if linear.kind == "gdn":
        return (("linear-attention value heads", linear.num_heads),)
    if linear.kind == "kda":
        return (("KDA heads", linear.num_heads),)
    return ()


def _named_kinds(values: list[Any], key: str, model_type: str, layers: int) -> tuple[str, ...]:
    unknown = sorted({str(v) for v in values} - set(_KIND_NAMES))
    if unknown:
        raise Unsupported(f"{model_type}: {key} names layer kinds {unknown} that this version cannot size; "
                          f"use kv_cache_max_concurrency from {VLLM.names.cache_config} or estimate --from-log")
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
    if not isinstance(window, int) or window <= 0 or (isinstance(max_pos, int) and window >= max_pos):
        return None, (FULL,) * layers  # no window, or one as long as the context: full attention
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return window, tuple(FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers))
    if cfg.get("use_sliding_window") and isinstance(cfg.get("max_window_layers"), int):
        full = int(cfg["max_window_layers"])
        return window, tuple(FULL if i < full else SLIDING for i in range(layers))
    return window, (SLIDING,) * layers
