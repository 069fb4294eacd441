"""Capacity planning: per-token KV sizes of real models from public facts, vLLM's block math, verdicts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter import cli
from exporter.model import kv_layout
from exporter.model.shape import ModelShape, Unsupported, shape_from_config
from exporter.planning import estimate
from exporter.planning.estimate import GiB, Inputs

# Configs written from the models' published config.json values.
LLAMA3_8B = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "hidden_size": 4096, "torch_dtype": "bfloat16", "max_position_embeddings": 8192}
LLAMA3_70B = {"model_type": "llama", "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
              "hidden_size": 8192, "torch_dtype": "bfloat16", "max_position_embeddings": 131072}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
               "qk_nope_head_dim": 128, "v_head_dim": 128, "torch_dtype": "bfloat16", "max_position_embeddings": 163840}
FALCON_MQA = {"model_type": "falcon", "num_hidden_layers": 32, "num_attention_heads": 71, "num_key_value_heads": 1,
              "hidden_size": 4544, "torch_dtype": "bfloat16", "max_position_embeddings": 2048}


def per_token(cfg: dict[str, object], tp: int = 1, kv: str = "auto") -> int:
    shape = shape_from_config(cfg)
    return kv_layout.served_kv_bytes_per_token(shape, kv, tp)


def test_llama3_8b_is_128_kib_per_token_in_bf16() -> None:
    assert per_token(LLAMA3_8B) == 128 * 1024
    assert per_token(LLAMA3_8B, kv="fp8") == 64 * 1024


def test_gqa_heads_split_across_tensor_parallel_ranks_but_never_below_one() -> None:
    assert per_token(LLAMA3_70B) == 320 * 1024
    assert per_token(LLAMA3_70B, tp=8) == 40 * 1024  # 8 KV heads over 8 ranks: one each
    assert per_token(LLAMA3_70B, tp=16) == 40 * 1024  # replicated, not split further


def test_deepseek_v3_mla_is_one_latent_per_token_and_layer_on_every_rank() -> None:
    assert per_token(DEEPSEEK_V3) == 61 * (512 + 64) * 2
    assert per_token(DEEPSEEK_V3, tp=8) == 61 * (512 + 64) * 2
    assert shape_from_config(DEEPSEEK_V3).family == "mla"


def test_mqa_and_multimodal_text_config() -> None:
    assert per_token(FALCON_MQA) == 32 * 2 * 1 * 64 * 2
    wrapped = {"model_type": "llava", "torch_dtype": "bfloat16", "text_config": LLAMA3_8B}
    assert per_token(wrapped) == 128 * 1024


@pytest.mark.parametrize(("cfg", "fragment"), [
    ({**LLAMA3_8B, "model_type": "jamba", "mamba_d_state": 16}, "has mamba_d_state but no per-layer layout"),
    ({**LLAMA3_8B, "model_type": "llama4", "layer_types": ["chunked_attention", "full_attention"]},
     "layer_types names layer kinds ['chunked_attention']"),
    ({"model_type": "weird"}, "names no num_hidden_layers"),
])
def test_unsupported_layouts_say_so_instead_of_a_number(cfg: dict[str, object], fragment: str) -> None:
    with pytest.raises(Unsupported, match=re.escape(fragment)):
        shape_from_config(cfg)


def test_sliding_window_families_are_read_from_each_config_style() -> None:
    mistral = shape_from_config({**LLAMA3_8B, "model_type": "mistral", "sliding_window": 4096,
                                          "max_position_embeddings": 32768})
    assert (mistral.family, mistral.sliding_layers, mistral.sliding_window) == ("sliding_window", 32, 4096)
    gemma3 = shape_from_config({**LLAMA3_8B, "num_hidden_layers": 62, "sliding_window": 1024,
                                         "sliding_window_pattern": 6, "max_position_embeddings": 131072})
    assert (gemma3.family, gemma3.full_layers, gemma3.sliding_layers) == ("interleaved_sliding_window", 10, 52)
    gpt_oss = shape_from_config({**LLAMA3_8B, "num_hidden_layers": 24, "sliding_window": 128,
                                          "layer_types": ["sliding_attention", "full_attention"] * 12})
    assert (gpt_oss.full_layers, gpt_oss.sliding_layers) == (12, 12)
    qwen2 = shape_from_config({**LLAMA3_8B, "use_sliding_window": True, "sliding_window": 4096,
                                        "max_window_layers": 28, "max_position_embeddings": 32768})
    assert (qwen2.full_layers, qwen2.sliding_layers) == (28, 4)
    off = shape_from_config({**LLAMA3_8B, "use_sliding_window": False, "sliding_window": 4096,
                                      "max_position_embeddings": 32768})
    assert off.family == "gqa"


def test_vllms_grouping_of_hybrid_layers() -> None:
    def lay(full: int, sliding: int) -> tuple[int, int, int]:
        shape = ModelShape("m", full + sliding, 8, 128, "bfloat16", sliding_window=1024,
                                    sliding_layers=sliding)
        groups = kv_layout.group_layers(shape)
        return (max(len(g.layers) for g in groups), sum(g.kind == "full" for g in groups),
                sum(g.kind == "sliding" for g in groups))

    assert lay(10, 52) == (10, 1, 6)  # Gemma-3 style 5:1: groups of the smaller count, the last one padded
    assert lay(13, 12) == (13, 1, 1)  # within 1.5x: groups of the larger count (vLLM's gpt-oss + eagle case)
    assert lay(32, 0) == (32, 1, 0)  # uniform: one group of every layer
    # Sliding-window layers hold cdiv(min(window - 1 + in-flight, L), bs) + 1 blocks per request.
    assert kv_layout.sliding_blocks(128, 2048, 4096, 32) == 69
    assert kv_layout.sliding_blocks(128, 2048, 2048, 32) == 65  # capped by max_model_len, still + 1


def test_a_window_as_long_as_the_context_is_full_attention() -> None:
    cfg = {**LLAMA3_8B, "sliding_window": 8192}
    assert shape_from_config(cfg).family == "gqa"


def test_the_observed_cpu_pool_matches_vllms_log() -> None:
    # vLLM 0.32.0 CPU, tiny model: "Overriding num_gpu_blocks=65536" from 1 GiB at block size 32, 1,280 tokens,
    # 2.50x for 512 tokens with the override of 40 blocks (reference §8.1).
    tiny = json.loads((Path(__file__).parents[1] / "e2e" / "tiny-llama" / "config.json").read_text())
    shape = shape_from_config(tiny)
    e = estimate.estimate(Inputs(shape, block_size=32, max_model_len=512, kv_cache_memory=GiB))
    assert e.num_blocks == 65536 and e.bytes_per_block == 16 * 1024
    e = estimate.estimate(Inputs(shape, block_size=32, max_model_len=512, kv_cache_memory=GiB,
                                 num_gpu_blocks_override=40))
    assert (e.kv_tokens, round(e.max_concurrency, 2)) == (1280, 2.5)
    assert e.max_model_len_fit == 39 * 32  # the longest one request fits: every usable block (null block excluded)
    # 64 blocks of 16 with max_model_len 2048: "the estimated maximum model length is 1008".
    e = estimate.estimate(Inputs(shape, block_size=16, max_model_len=2048, kv_cache_memory=GiB,
                                 num_gpu_blocks_override=64))
    assert (e.verdict, e.max_model_len_fit) == ("sequence_too_long", 1008)


def test_verdicts_from_the_budget() -> None:
    shape = shape_from_config(LLAMA3_70B)
    base = Inputs(shape, tensor_parallel_size=8, max_model_len=32768, max_num_seqs=64, gpu_memory=64 * GiB,
                  weights_bytes=141 * GiB)
    assert estimate.estimate(base).verdict == "too_many_sequences"
    assert estimate.estimate(Inputs(**{**base.__dict__, "max_num_seqs": 8})).verdict == "fits"
    assert estimate.estimate(Inputs(**{**base.__dict__, "tensor_parallel_size": 2})).verdict == "budget_exhausted"
    long = estimate.estimate(Inputs(**{**base.__dict__, "max_model_len": 131072, "gpu_memory_utilization": 0.35}))
    assert long.verdict == "sequence_too_long" and 0 < long.max_model_len_fit < 131072
    assert long.max_model_len_fit % 16 == 0


def test_what_if_changes_move_the_numbers_the_right_way() -> None:
    shape = shape_from_config(LLAMA3_8B)
    x = Inputs(shape, gpu_memory=24 * GiB, weights_bytes=16 * 10**9, max_model_len=8192)
    base = estimate.estimate(x)
    rows = {name.split(" (")[0]: e for name, e, _cost in estimate.what_if(x, base)}
    assert rows["KV cache fp8"].num_blocks >= 2 * base.num_blocks
    assert rows["max_model_len halved"].max_concurrency == pytest.approx(2 * base.max_concurrency, rel=0.01)
    assert rows["tensor parallel 2"].num_blocks > 2 * base.num_blocks  # KV halves and weights halve
    assert rows["gpu_memory_utilization +0.05"].num_blocks > base.num_blocks
    assert rows[f"max_num_seqs {base.max_num_seqs_fit}"].verdict == "fits"


def test_cli_json_fields_and_folder_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16060522496}}))
    assert cli.main(["estimate", str(tmp_path), "--gpu-memory", "24GiB", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("kv_bytes_per_token", "bytes_per_block", "num_blocks", "kv_tokens", "max_concurrency",
                "max_model_len_fit", "verdict", "partitions", "what_if"):
        assert key in doc
    assert doc["partitions"]["weights_per_device"] == 16060522496
    assert doc["kv_bytes_per_token"] == 128 * 1024


def test_cli_refuses_unsupported_models_in_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA3_8B, "model_type": "jamba", "mamba_d_state": 16}))
    assert cli.main(["estimate", str(path), "--kv-cache-memory", "10GiB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mamba_d_state" in err


def test_the_readmes_worked_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["estimate", "docs/examples/llama-3.1-70b.json", "--tensor-parallel-size", "8", "--gpu-memory",
                     "64GiB", "--params", "70.6B", "--max-model-len", "32768", "--max-num-seqs", "64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["kv_bytes_per_token"], doc["num_blocks"], doc["verdict"]) == (40960, 66260, "too_many_sequences")
    assert round(doc["max_concurrency"], 2) == 32.35
    assert cli.main(["estimate", "docs/examples/deepseek-v2-lite.json", "--gpu-memory", "80GiB", "--params", "15.7B",
                     "--max-model-len", "32768", "--max-num-seqs", "128", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["kv_bytes_per_token_per_layer"], doc["kv_bytes_per_token"], doc["num_blocks"]) == (1152, 31104, 91386)


def test_the_documented_hybrid_and_pipeline_examples_are_what_estimate_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    """docs/capacity-planning.md's `estimate` examples, run: every figure row they show is in what it prints."""
    readme = (Path(__file__).parents[2] / "docs" / "capacity-planning.md").read_text()
    blocks = re.findall(r"```\n\$ vllm-headroom estimate (.*?)\n(?=model:)(.*?)```", readme, re.S)
    assert len(blocks) >= 2
    for command, shown in blocks:
        argv = command.replace("\\\n", " ").split()
        assert cli.main(["estimate", *argv]) == 0
        out = capsys.readouterr().out
        rows = [line for line in shown.splitlines() if line.startswith("  ") and line.strip() != "..."]
        assert rows and all(row in out for row in rows), [row for row in rows if row not in out]
