"""Tiny model shapes whose start-up capacity lines from the real vLLM prove `vllm-headroom estimate` exact.

Each shape varies layers, KV heads, head_dim, dtype and block size (the CPU backend needs block sizes that
are multiples of 32 and a head_dim it has kernels for), and the hybrids mix attention with Gated DeltaNet
(Qwen3-Next layout), Mamba-2 (Nemotron-H) or Mamba-1 (Jamba) layers. `record()` starts vLLM with each shape
and keeps its start-up lines under tests/fixtures/vllm-0.32.0/capacity/<name>/; the unit suite checks them
without vLLM.

vLLM's CPU build sizes Gated DeltaNet's SSM state in float32 ("Reset SSM cache type to float32 for
accelerated GDN mamba backend", `vllm/platforms/cpu.py`), so those shapes record mamba_ssm_cache_dtype
float32; Nemotron-H uses float32 on every platform ("Updating mamba_ssm_cache_dtype to 'float32'").
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from exporter.engines.vllm import metrics as vllm
from exporter.pipeline import exposition

from .vllm_server import VllmServer, parse_startup_capacity

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32.0" / "capacity"
FIT_RE = re.compile(r"max seq len \((\d+)\).*?estimated maximum model length is (\d+)", re.S)
ATTN_BLOCK_RE = re.compile(r"Setting attention block size to (\d+) tokens")
CPU_ERROR_RE = re.compile(r"Worker failed with error '([^']*)'")


def llama(layers: int, heads: int, kv_heads: int, head_dim: int, dtype: str = "bfloat16") -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": heads * head_dim,
        "intermediate_size": 256, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "vocab_size": 512,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "torch_dtype": dtype, "tie_word_embeddings": False,
    }


@dataclass(frozen=True)
class Shape:
    name: str
    config: dict[str, Any]
    block_size: int
    max_model_len: int
    dtype: str = "bfloat16"
    override: int | None = None  # num_gpu_blocks_override; with a max_model_len that cannot fit: a failing start
    kvcache_space_gib: int = 1
    # Stated, not left to defaults: sliding-window layers hold this many in-flight tokens per request.
    max_num_batched_tokens: int = 2048
    expect_failure: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    mamba_ssm_cache_dtype: str = "auto"  # what vLLM's CPU build uses for the shape's linear layers
    pipeline_parallel_size: int = 1


def with_layers(cfg: dict[str, Any], kinds: str, window: int) -> dict[str, Any]:
    """`kinds` like "sfsf": s = sliding_attention, f = full_attention, one letter per layer."""
    names = {"s": "sliding_attention", "f": "full_attention"}
    return {**cfg, "num_hidden_layers": len(kinds), "sliding_window": window,
            "layer_types": [names[k] for k in kinds]}


MISTRAL = {**llama(2, 2, 1, 64), "architectures": ["MistralForCausalLM"], "model_type": "mistral",
           "sliding_window": 128}

def qwen3_next(layers: int, interval: int) -> dict[str, Any]:
    """Qwen3-Next's layout at toy size: every `interval`-th layer full attention, the rest Gated DeltaNet."""
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": 512, "hidden_size": 128,
        "intermediate_size": 256, "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 64, "partial_rotary_factor": 0.25, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32,
        "linear_value_head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "decoder_sparse_step": 1,
        "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "num_experts_per_tok": 2,
        "num_experts": 4, "norm_topk_prob": True, "mlp_only_layers": [], "full_attention_interval": interval,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }


def nemotron_h(pattern: str) -> dict[str, Any]:
    """Nemotron-H's layout at toy size: M = Mamba-2, * = attention, - = MLP."""
    return {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": 512, "hidden_size": 128,
        "intermediate_size": 256, "num_hidden_layers": len(pattern), "hybrid_override_pattern": pattern,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "mamba_num_heads": 4,
        "mamba_head_dim": 32, "n_groups": 1, "ssm_state_size": 16, "conv_kernel": 4, "expand": 1, "chunk_size": 64,
        "max_position_embeddings": 4096, "layer_norm_epsilon": 1e-5, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False, "mlp_hidden_act": "relu2", "use_conv_bias": True, "use_bias": False,
        "mamba_hidden_act": "silu", "residual_in_fp32": False,
    }


def jamba(layers: int, period: int, offset: int) -> dict[str, Any]:
    """Jamba's layout at toy size: attention where index % period == offset, Mamba-1 elsewhere."""
    return {
        "architectures": ["JambaForCausalLM"], "model_type": "jamba", "vocab_size": 512, "hidden_size": 128,
        "intermediate_size": 256, "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 1,
        "attn_layer_period": period, "attn_layer_offset": offset, "expert_layer_period": 2, "expert_layer_offset": 1,
        "num_experts": 2, "num_experts_per_tok": 1, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
        "mamba_dt_rank": 8, "mamba_conv_bias": True, "mamba_proj_bias": False, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    }


SHAPES = [
    Shape("l2-kv1-hd64-bf16-bs32", llama(2, 2, 1, 64), 32, 512),
    Shape("l4-kv2-hd64-bf16-bs64", llama(4, 4, 2, 64), 64, 2048),
    Shape("l3-kv4-hd128-bf16-bs32", llama(3, 4, 4, 128), 32, 4096),
    Shape("l2-kv2-hd64-fp32-bs64", llama(2, 2, 2, 64, "float32"), 64, 1024, dtype="float32"),
    Shape("l6-kv1-hd128-bf16-bs64", llama(6, 2, 1, 128), 64, 3000),
    Shape("too-long-l2-kv1-bs32", llama(2, 2, 1, 64), 32, 4096, override=64, expect_failure=True),
    Shape("swa-mistral-l2-w128-bs32", MISTRAL, 32, 4096),
    Shape("interleaved-sfsf-w128-bs32", with_layers(llama(4, 2, 1, 64), "sfsf", 128), 32, 4096),
    Shape("interleaved-sssf-x2-w256-bs64", with_layers(llama(8, 2, 2, 64), "sssfsssf", 256), 64, 4096,
          max_num_batched_tokens=1024),
    Shape("interleaved-7-padded-w128-bs32", with_layers(llama(7, 2, 1, 64), "ssfssfs", 128), 32, 3000),
    Shape("too-long-interleaved-sfsf", with_layers(llama(4, 2, 1, 64), "sfsf", 128), 32, 4096, override=100,
          expect_failure=True),
    Shape("hybrid-qwen3next-l4-gdn", qwen3_next(4, 4), 32, 2048, mamba_ssm_cache_dtype="float32"),
    Shape("hybrid-qwen3next-l8-gdn-bs64", qwen3_next(8, 4), 64, 3000, mamba_ssm_cache_dtype="float32"),
    Shape("too-long-hybrid-qwen3next", qwen3_next(4, 4), 32, 4096, override=20, expect_failure=True,
          mamba_ssm_cache_dtype="float32"),
    Shape("hybrid-nemotronh-m-mstar", nemotron_h("M-M*"), 32, 2048),
    Shape("hybrid-nemotronh-6", nemotron_h("M*M-M*"), 32, 4096),
    # vLLM 0.32.0's CPU build cannot run Mamba-1 layers: its profile run fails in mamba_mixer.py forward_impl
    # ("IndexError: Dimension out of range"), after it printed the aligned attention block size, which is kept.
    # Pipeline parallel, uneven: 3 layers over 2 stages is [2, 1] (get_pp_indices); each worker gets the same
    # VLLM_CPU_KVCACHE_SPACE, so the 2-layer stage sets the pool.
    Shape("pp2-uneven-l3-kv1-bs32", llama(3, 2, 1, 64), 32, 1024, pipeline_parallel_size=2),
    # A hybrid over 2 stages: each stage holds 1 attention + 3 Gated DeltaNet layers of the 4 global groups.
    Shape("pp2-hybrid-qwen3next-l8", qwen3_next(8, 4), 32, 2048, pipeline_parallel_size=2,
          mamba_ssm_cache_dtype="float32"),
    Shape("cpu-unsupported-jamba-l4", jamba(4, 4, 3), 32, 2048, expect_failure=True, mamba_ssm_cache_dtype="float32"),
]


def start(shape: Shape) -> VllmServer:
    # Pipeline stages are one CPU worker each: give each its own core (vLLM refuses to bind two workers to
    # one NUMA node by itself), and leave the processes unpinned.
    pp = shape.pipeline_parallel_size
    env = {"VLLM_CPU_OMP_THREADS_BIND": "|".join(str(i) for i in range(pp))} if pp > 1 else None
    return VllmServer(model_config=shape.config, dtype=shape.dtype, block_size=shape.block_size, env=env,
                      pin_cpus=pp == 1,
                      max_model_len=shape.max_model_len, num_gpu_blocks_override=shape.override,
                      kvcache_space_gib=shape.kvcache_space_gib, max_num_seqs=8,
                      max_num_batched_tokens=shape.max_num_batched_tokens,
                      extra_args=["--no-async-scheduling",
                                  "--pipeline-parallel-size", str(shape.pipeline_parallel_size)])


def meta_of(shape: Shape) -> dict[str, Any]:
    """The flags a shape is started with, as the unit suite replays them."""
    return {"block_size": shape.block_size, "max_model_len": shape.max_model_len, "dtype": shape.dtype,
            "num_gpu_blocks_override": shape.override, "VLLM_CPU_KVCACHE_SPACE": shape.kvcache_space_gib,
            "max_num_batched_tokens": shape.max_num_batched_tokens, "async_scheduling": False,
            "mamba_ssm_cache_dtype": shape.mamba_ssm_cache_dtype,
            "pipeline_parallel_size": shape.pipeline_parallel_size}


def observe(shape: Shape) -> dict[str, Any]:
    """Start vLLM with the shape; return what its start-up log says about capacity (or why it refused)."""
    server = start(shape)
    try:
        server.start()
    except RuntimeError:
        m = FIT_RE.search(server.log_text())  # the root cause is far above the traceback's tail
        if not m:
            err = CPU_ERROR_RE.search(server.log_text())
            if err and ATTN_BLOCK_RE.search(server.log_text()):  # the layer kind does not run on this build
                return {"failed": True, "cpu_error": err.group(1)[:300], **_attention_block(server.log_text())}
            raise
        return {"failed": True, "max_model_len": int(m.group(1)), "estimated_max_model_len": int(m.group(2)),
                "line": m.group(0)[:400], **_attention_block(server.log_text())}
    try:
        cap = parse_startup_capacity(server.log_text())
        # Without an override the log prints no block count; vLLM's own metric has it.
        info = exposition.parse(httpx.get(server.url + "/metrics").text, {vllm.CACHE_CONFIG}).series(vllm.CACHE_CONFIG)
        cap["num_gpu_blocks"] = int(info[0][0]["num_gpu_blocks"])
        return {"failed": False, **cap, **_attention_block(server.log_text())}
    finally:
        server.stop()


def _attention_block(log: str) -> dict[str, Any]:
    """A hybrid's "Setting attention block size to N tokens" line, when vLLM printed one."""
    m = ATTN_BLOCK_RE.search(log)
    return {"attention_block_size": int(m.group(1))} if m else {}


def record(names: list[str]) -> None:
    for shape in SHAPES:
        if names and shape.name not in names:
            continue
        seen = observe(shape)
        out = ROOT / shape.name
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(shape.config, indent=2) + "\n")
        meta = {**meta_of(shape), "observed": seen}
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(shape.name, seen, flush=True)


if __name__ == "__main__":
    record(sys.argv[1:])
