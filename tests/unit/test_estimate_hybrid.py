"""Hybrid (attention + Mamba / linear attention) and pipeline-parallel plans against vLLM's own figures.

Expected numbers come from vLLM's printed start-up lines (cited per test) or from the model's published
config read as vLLM 0.32.0 reads it; model shapes only. The tiny CPU recordings of the real vLLM 0.32.0
(tests/fixtures/vllm-0.32.0/capacity/hybrid-*) are checked by test_capacity_exact.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter.model import kv_layout
from exporter.model.shape import FULL, LINEAR, NONE, Unsupported, shape_from_config
from exporter.planning import estimate
from exporter.planning.estimate import GiB, Inputs

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def example(name: str) -> dict[str, object]:
    return json.loads((EXAMPLES / name).read_text())


# Qwen3.6-35B-A3B (model_type qwen3_5_moe), text config as published: 40 layers, every 4th full attention,
# Gated DeltaNet elsewhere, SSM state dtype float32 (mamba_ssm_dtype).
QWEN36_35B = {
    "model_type": "qwen3_5_moe", "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mamba_ssm_dtype": "float32",
        "dtype": "bfloat16",
    },
}


@pytest.mark.parametrize(("pool_gib", "tokens", "concurrency"), [(5.98, 567_978, "4.33"), (6.01, 569_878, "4.35")])
def test_qwen36_35b_fp8_on_one_gpu_equals_the_published_startup_lines(pool_gib: float, tokens: int,
                                                                      concurrency: str) -> None:
    # https://github.com/noonghunna/club-3090/issues/612 and /652 (vLLM v0.24.0, one RTX 5090, fp8 KV,
    # max_model_len 131072, prefix caching on): "Available KV cache memory: 5.98 GiB" -> "GPU KV cache size:
    # 567,978 tokens", "Maximum concurrency for 131,072 tokens per request: 4.33x"; 6.01 GiB -> 569,878, 4.35x.
    shape = shape_from_config(QWEN36_35B)
    e = estimate.estimate(Inputs(shape, kv_cache_dtype="fp8", max_model_len=131072, max_num_seqs=1,
                                 kv_cache_memory=round(pool_gib * GiB)))
    assert e.kv_tokens == tokens
    assert f"{e.max_concurrency:.2f}" == concurrency


def test_qwen3_next_counts_only_its_attention_layers_per_token() -> None:
    # Issue 14: 1 attention layer in 4 (full_attention_interval), 2 KV heads × 256 over TP4: 12 KiB per token
    # per rank, not the 48 KiB of counting all 48 layers.
    shape = shape_from_config(example("qwen3-next-80b-a3b.json"))
    assert (shape.attention_layers, shape.linear_layers) == (12, 36)
    assert kv_layout.served_kv_bytes_per_token(shape, "auto", 4) == 12 * 1024
    # https://github.com/vllm-project/vllm/pull/32492: on one GPU "the model uses non-standard block size
    # (544)" -- vLLM raises the attention block size until a page holds one Gated DeltaNet state.
    assert kv_layout.plan(shape, "bfloat16", 1, 16).block_size == 544
    # At TP4 the state is a quarter ((3 × 8192/4) conv + (32/4 × 128 × 128) SSM bf16 elements = 274,432 bytes)
    # while the page per token halves (1 KV head per rank): by the same rule 16 × cdiv(274,432, 16 × 1,024).
    assert kv_layout.plan(shape, "bfloat16", 4, 16).block_size == 16 * -(-274_432 // (16 * 1024))


def test_kimi_linear_has_7_mla_layers_and_starts_where_vllm_started() -> None:
    # https://github.com/vllm-project/vllm/issues/28228: Kimi-Linear-48B-A3B at TP2 with max_model_len 120000
    # started on a 2.30 GiB KV pool ("Why would there only be 2.30GiB for KV cache"); we used to count 27 MLA
    # layers and say it could not start.
    shape = shape_from_config(example("kimi-linear-48b-a3b.json"))
    assert shape.layer_kinds.count(FULL) == 7 and shape.layer_kinds.count(LINEAR) == 20
    assert kv_layout.served_kv_bytes_per_token(shape, "auto", 2) == 7 * (512 + 64) * 2
    e = estimate.estimate(Inputs(shape, tensor_parallel_size=2, max_model_len=120000, max_num_seqs=8,
                                 kv_cache_memory=round(2.30 * GiB)))
    assert e.verdict != "sequence_too_long" and e.max_model_len_fit >= 120000


@pytest.mark.parametrize(("cfg", "kinds"), [
    ({"hybrid_override_pattern": "M-M*"}, (LINEAR, NONE, LINEAR, FULL)),  # Nemotron-H
    ({"layers_block_type": ["mamba", "attention", "mlp", "moe"]}, (LINEAR, FULL, NONE, NONE)),
    ({"layer_types": ["mamba", "mamba", "attention", "mamba"]}, (LINEAR, LINEAR, FULL, LINEAR)),  # Granite-4.0-H
    ({"attn_layer_period": 4, "attn_layer_offset": 2}, (LINEAR, LINEAR, FULL, LINEAR)),  # Jamba
    ({"full_attention_interval": 2}, (LINEAR, FULL, LINEAR, FULL)),  # Qwen3-Next
    ({"linear_attn_config": {"full_attn_layers": [2], "kda_layers": [1, 3, 4], "num_heads": 4, "head_dim": 32}},
     (LINEAR, FULL, LINEAR, LINEAR)),  # Kimi-Linear, 1-based
])
def test_every_layout_key_current_configs_use(cfg: dict[str, object], kinds: tuple[str, ...]) -> None:
    base = {"model_type": "hybrid", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1,
            "hidden_size": 256, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2}
    assert shape_from_config({**base, **cfg}).layer_kinds == kinds


@pytest.mark.parametrize(("cfg", "key"), [
    ({"layer_types": ["full_attention", "chunked_attention"]}, "layer_types"),
    ({"hybrid_override_pattern": "M*X"}, "hybrid_override_pattern"),
    ({"ssm_state_size": 16}, "ssm_state_size"),
    ({"layer_types": ["mamba", "full_attention"]}, "layer_types"),  # linear layers whose state size is unknown
    ({"attention_chunk_size": 8192}, "attention_chunk_size"),  # Llama-4
    ({"num_kv_shared_layers": 20}, "num_kv_shared_layers"),  # Gemma-3n/4
    ({"index_topk": 2048, "kv_lora_rank": 512}, "index_topk"),  # DeepSeek-V3.2
])
def test_an_unknown_layout_is_refused_in_one_sentence_naming_the_key(cfg: dict[str, object], key: str) -> None:
    base = {"model_type": "x", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}
    with pytest.raises(Unsupported) as err:
        shape_from_config({**base, **cfg})
    assert key in str(err.value) and "\n" not in str(err.value)


def test_pipeline_parallel_splits_layers_as_vllm_and_the_pool_is_the_smallest_stage() -> None:
    # vllm/distributed/utils.py get_pp_indices: even split, the remainder one each to the stages before the
    # last, walking back from the second-to-last.
    assert kv_layout.pp_partitions(27, 2) == [14, 13]
    assert kv_layout.pp_partitions(27, 4) == [7, 7, 7, 6]
    assert kv_layout.pp_partitions(61, 8) == [7, 7, 8, 8, 8, 8, 8, 7]  # as get_pp_indices of vLLM 0.32.0 returns
    # https://github.com/vllm-project/vllm/pull/20665 (DeepSeek-V2-Lite, PP2 × TP2, L4): stage 0 workers print
    # "Available KV cache memory: 12.13 GiB", stage 1 workers 11.33 GiB; "GPU KV cache size: 807,792 tokens",
    # "Maximum concurrency for 1,024 tokens per request: 788.86x". The pools are printed to 0.01 GiB, so ours
    # must bracket the printed tokens over ±0.005 GiB.
    shape = shape_from_config(example("deepseek-v2-lite.json"))

    def tokens(stage0: float, stage1: float) -> int:
        x = Inputs(shape, tensor_parallel_size=2, pipeline_parallel_size=2, max_model_len=1024,
                   stage_kv_memory=(round(stage0 * GiB), round(stage1 * GiB)))
        return estimate.estimate(x).kv_tokens

    assert tokens(12.125, 11.325) <= 807_792 <= tokens(12.135, 11.335)
    e = estimate.estimate(Inputs(shape, tensor_parallel_size=2, pipeline_parallel_size=2, max_model_len=1024,
                                 stage_kv_memory=(round(12.13 * GiB), round(11.33 * GiB))))
    assert abs(e.max_concurrency - 788.86) < 0.5  # stage 0 (14 of 27 layers) bounds the pool
    assert e.stage_bytes_per_block == (14 * 576 * 2 * 16, 13 * 576 * 2 * 16)


def test_data_parallel_engines_each_have_the_pool() -> None:
    shape = shape_from_config(example("llama-3.1-70b.json"))
    one = estimate.estimate(Inputs(shape, tensor_parallel_size=8, max_model_len=32768, kv_cache_memory=20 * GiB))
    dp = Inputs(shape, tensor_parallel_size=8, data_parallel_size=4, max_model_len=32768, kv_cache_memory=20 * GiB)
    doc = estimate.as_json(dp, estimate.estimate(dp))
    assert doc["kv_tokens"] == one.kv_tokens and doc["kv_tokens_all_engines"] == 4 * one.kv_tokens


def test_hybrid_groups_follow_vllm_grouping() -> None:
    # vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size: 7 MLA + 20 KDA layers -> groups
    # of 7: one MLA group and three KDA groups (the last padded); a block holds the largest group's pages.
    shape = shape_from_config(example("kimi-linear-48b-a3b.json"))
    groups = kv_layout.group_layers(shape)
    assert [(g.kind, len(g.layers)) for g in groups] == [(FULL, 7), (LINEAR, 7), (LINEAR, 7), (LINEAR, 6)]
    plan = kv_layout.plan(shape, "bfloat16", 2, 16)
    # MLA hybrids align to 128-token kernel blocks: the KDA state at TP2 (3 × 6144 bf16 conv + 16 × 128 × 128
    # float32 recurrent = 1,085,440 bytes) needs 8 × 128 tokens of 1,152-byte latents.
    assert plan.block_size == 1024 and plan.bytes_per_block == 7 * 1024 * 1152


def test_a_state_that_tp_cannot_split_is_refused_with_the_reason() -> None:
    shape = shape_from_config(example("qwen3-next-80b-a3b.json"))
    with pytest.raises(ValueError, match=re.escape("not divisible by the tensor parallel size (3)")):
        kv_layout.plan(shape, "bfloat16", 3, 16)
