"""`estimate` against a fresh tester's findings: quantized checkpoints, vLLM's TP refusals, config-class layer
defaults, vLLM's derived max_model_len, PP logs, MLA block sizes, the HF cache's refs/main, malformed input.

Configs: tests/fixtures/estimate-configs/ (model shapes from the models' public config.json files). Every vLLM
rule is cited to the vLLM 0.32.0 source it comes from in the module that implements it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from exporter import cli
from exporter.model.shape import FULL, SLIDING, Unsupported, shape_from_config
from exporter.planning import estimate, startup_log
from exporter.planning.estimate import GiB, Inputs

FIX = Path("tests/fixtures/estimate-configs")


def cfg(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIX / f"{name}.json").read_text())
    return doc


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["estimate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    return err


# -- 1: quantized checkpoints ------------------------------------------------------------------------------------

def test_fp8_checkpoint_counts_one_byte_per_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    # DeepSeek-V3's config.json: quantization_config {"quant_method": "fp8", "fmt": "e4m3", ...}
    doc = run_json(capsys, str(FIX / "deepseek-v3.json"), "--tensor-parallel-size", "8", "--gpu-memory", "141GB",
                   "--params", "671B", "--max-model-len", "32k", "--block-size", "64")
    assert doc["weights_per_device"] == math.ceil(671e9 / 8)  # 1 byte each, not 2
    assert doc["kv_pool_bytes"] > 0 and doc["verdict"] != "budget_exhausted"
    assert any("fp8 checkpoint: 1 byte per parameter" in w for w in doc["warnings"])


@pytest.mark.parametrize(("quant", "per_param"), [
    ({"quant_method": "awq", "bits": 4}, 0.5), ({"quant_method": "gptq", "bits": 8}, 1.0),
    ({"quant_method": "mxfp4"}, 0.55), ({"quant_method": "fbgemm_fp8"}, 1.0),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, 0.5),
])
def test_quantized_checkpoints_state_their_bytes_per_parameter(quant: dict[str, Any], per_param: float) -> None:
    shape = shape_from_config({**cfg("llama31-70b"), "quantization_config": quant})
    assert shape.weight_bytes == per_param and shape.weight_note
    x = Inputs(shape=shape, gpu_memory=80 * GiB, params=70 * 10**9, tensor_parallel_size=4, max_model_len=8192)
    assert estimate.estimate(x).weights_per_device == math.ceil(int(70e9 * per_param) / 4)


def test_an_unknown_quantization_asks_for_the_weights_size() -> None:
    with pytest.raises(Unsupported, match="--weights-bytes"):
        shape_from_config({**cfg("llama31-70b"), "quantization_config": {"quant_method": "hqq9"}})


def test_a_negative_pool_is_said_plainly_in_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = (str(FIX / "llama31-70b.json"), "--gpu-memory", "80GiB", "--params", "70.6B", "--max-model-len", "8k")
    doc = run_json(capsys, *argv)
    assert doc["kv_pool_bytes"] < 0 and doc["verdict"] == "budget_exhausted"
    assert "negative" in doc["explanation"] and "exceed" in doc["explanation"]
    code, out, _err = run(capsys, *argv)
    assert code == 0 and "0.00 GiB" not in out and "negative" in out and "0 (no KV cache)" in out


# -- 2: vLLM's TP refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("tp", [3, 6, 12])
def test_kv_heads_tp_does_not_divide_are_refused(capsys: pytest.CaptureFixture[str], tp: int) -> None:
    # GLM-4.5: 96 attention heads (3, 6, 12 divide them), 8 KV heads (vllm/model_executor/layers/linear.py:1053-1057)
    err = refused(capsys, str(FIX / "glm45.json"), "--tensor-parallel-size", str(tp), "--kv-cache-memory", "20GiB")
    assert f"vLLM refuses TP {tp} for 8 KV heads" in err


def test_mamba2_groups_tp_does_not_divide_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # Nemotron-H-8B: n_groups 8; mamba_mixer2.py:319 asserts n_groups % tp == 0 or n_groups == 1
    err = refused(capsys, str(FIX / "nemotron-h-8b.json"), "--tensor-parallel-size", "16", "--kv-cache-memory",
                  "20GiB")
    assert "num_groups must equal 1" in err


def test_no_what_if_row_or_smallest_fit_is_a_tp_vllm_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, str(FIX / "nemotron-h-8b.json"), "--tensor-parallel-size", "8", "--kv-cache-memory",
                   "20GiB", "--max-model-len", "8k")
    assert not any("tensor parallel 16" in r["change"] for r in doc["what_if"])
    shape = shape_from_config(cfg("glm45"))
    x = Inputs(shape=shape, gpu_memory=80 * GiB, params=355 * 10**9, max_model_len=131072, max_num_seqs=64)
    for _kv, tp, _e in estimate.smallest_fit(x):
        assert tp is None or tp in (1, 2, 4, 8, 16, 32)


# -- 3: layer patterns the config class fills in -----------------------------------------------------------------

def test_gemma2_alternates_sliding_and_full_as_its_config_class_does() -> None:
    # transformers' Gemma2Config fills layer_types sliding/full alternately; vLLM's gemma2.py:155 reads it.
    shape = shape_from_config(cfg("gemma2-9b"))
    assert shape.layer_kinds[:4] == (SLIDING, FULL, SLIDING, FULL)
    assert shape.full_layers == 21 and shape.sliding_layers == 21 and shape.sliding_window == 4096


@pytest.mark.parametrize(("extra", "period", "window"), [
    ({"model_type": "gemma3_text", "sliding_window_pattern": 6}, 6, 1024),
    ({"model_type": "gemma3_text"}, 6, 1024),
    ({"model_type": "cohere2"}, 4, 1025),  # commandr.py:237-244 passes sliding_window + 1
    ({"model_type": "cohere2", "sliding_window_pattern": 2}, 2, 1025),
    ({"model_type": "gpt_oss"}, 2, 1024),
    ({"model_type": "olmo3"}, 4, 1024),
    ({"model_type": "exaone4"}, 4, 1024), ({"model_type": "exaone4", "sliding_window_pattern": 3}, 3, 1024),
    ({"model_type": "afmoe", "global_attn_every_n_layers": 3}, 3, 1024),
    ({"model_type": "vaultgemma"}, 2, 1024),
])
def test_every_config_class_default_pattern(extra: dict[str, Any], period: int, window: int) -> None:
    # Each pattern is what the config class (transformers 5.19 in vLLM 0.32.0's venv) gives a 12-layer config.
    base = {"num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
            "hidden_size": 512, "sliding_window": 1024, "max_position_embeddings": 131072}
    shape = shape_from_config({**base, **extra})
    assert shape.layer_kinds == tuple(FULL if (i + 1) % period == 0 else SLIDING for i in range(12))
    assert shape.sliding_window == window


def test_config_class_quirks() -> None:
    base = {"num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
            "hidden_size": 512, "max_position_embeddings": 131072}
    # CWM: full attention at i % 4 == 0 (configuration_cwm.py:98-104), window 8192 when omitted
    cwm = shape_from_config({**base, "model_type": "cwm"})
    assert cwm.layer_kinds[:5] == (FULL, SLIDING, SLIDING, SLIDING, FULL) and cwm.sliding_window == 8192
    # A window the config omits is the class's default (Gemma-2: 4096, gpt-oss: 128); null means none.
    assert shape_from_config({**base, "model_type": "gemma2"}).sliding_window == 4096
    assert shape_from_config({**base, "model_type": "gpt_oss"}).sliding_window == 128
    assert shape_from_config({**base, "model_type": "gemma2", "sliding_window": None}).sliding_layers == 0
    # EXAONE-4's string pattern without layer_types breaks its config class: refused, not guessed.
    with pytest.raises(Unsupported, match="give layer_types"):
        shape_from_config({**base, "model_type": "exaone4", "sliding_window_pattern": "LLLG"})


# -- 4 and 6: start-up logs ------------------------------------------------------------------------------------

def test_pp_tp1_workers_have_no_tp_part_and_each_stage_keeps_its_pool() -> None:
    # multiproc_executor.py:1088-1096: "Worker" + "_PP<r>" (+ "_TP<r>" only with TP > 1)
    facts = startup_log.parse((FIX / "pp2tp1.log").read_text())
    assert facts.kv_memory_gib == (30.12, 20.50)


def test_the_stage_that_sets_the_pool_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(FIX / "llama31-70b.json"), "--from-log", str(FIX / "pp2tp1.log"))
    assert code == 0
    assert "KV pool per device (stage 1 of 2, sets the pool)" in out and "20.50 GiB" in out
    assert "vLLM ?" not in out and "the log does not name the vLLM version" in out


def test_backend_block_size_line_is_read() -> None:
    log = ("INFO [interface.py:777] Setting kv cache block size to 64 for FLASHMLA backend(s).\n"
           "(Worker_TP0 pid=1) INFO Available KV cache memory: 40.00 GiB\n")
    facts = startup_log.parse(log)
    assert facts.backend_block_size == 64 and facts.backend == "FLASHMLA"
    x = startup_log.apply(facts, Inputs(shape=shape_from_config(cfg("deepseek-v3")), tensor_parallel_size=8))
    assert x.block_size == 64


def test_an_unreadable_capacity_line_is_said() -> None:
    log = ("(Worker_TP0 pid=1) INFO Available KV cache memory: 40.00 GiB\n"
           "(Worker_TP1 pid=2) INFO Available KV cache memory: 4e1 GiB\n"
           "INFO GPU KV cache size: 12,34,5 tokens\n")
    facts = startup_log.parse(log)
    assert facts.kv_tokens is None and len(facts.unread) == 2
    with pytest.raises(ValueError, match="cannot be read"):
        startup_log.parse("INFO Available KV cache memory: 1e3 GiB\n")


def test_mla_states_the_block_size_it_assumes() -> None:
    e = estimate.estimate(Inputs(shape=shape_from_config(cfg("deepseek-v3")), tensor_parallel_size=8,
                                 kv_cache_memory=40 * GiB, max_model_len=32768))
    assert any("FlashMLA 64" in w and "CUTLASS MLA 128" in w and "--block-size" in w for w in e.warnings)


# -- 5: vLLM's derived max_model_len -----------------------------------------------------------------------------

def test_longrope_defaults_to_the_original_length() -> None:
    shape = shape_from_config(cfg("phi3-mini-128k"))
    assert shape.max_position_embeddings == 131072 and Inputs(shape=shape).context == 4096


@pytest.mark.parametrize(("rope", "derived"), [
    ({"rope_type": "linear", "factor": 2.0}, 16384), ({"type": "dynamic", "factor": 4.0}, 32768),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}, 8192),
    ({"rope_type": "llama3", "factor": 8.0}, 8192),
])
def test_rope_scaling_multiplies_as_vllm_does(rope: dict[str, Any], derived: int) -> None:
    shape = shape_from_config({**cfg("llama31-70b"), "max_position_embeddings": 8192, "rope_scaling": rope})
    assert shape.max_position_embeddings == derived


def test_the_smallest_length_key_wins_and_the_refusal_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    shape = shape_from_config({**cfg("llama31-70b"), "rope_scaling": None, "seq_length": 4096})
    assert (shape.max_position_embeddings, shape.max_len_key) == (4096, "seq_length")
    # vLLM 0.32.0's own message for this config (vllm/config/model.py:2644-2664, run on LlamaConfig with
    # seq_length=4096): "... (seq_length=4096.0 or model_max_length=None in model's config.json). To allow ..."
    with pytest.raises(ValueError, match=r"^User-specified max_model_len \(8192\) is greater than the derived "
                       r"max_model_len \(seq_length=4096\.0 or model_max_length=None in model's config\.json\)\. "
                       r"To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1\. "
                       r"VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution\."):
        estimate.estimate(Inputs(shape=shape, max_model_len=8192, kv_cache_memory=20 * GiB))


def test_no_length_key_is_vllms_2048_with_its_warning() -> None:
    shape = shape_from_config({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8,
                               "hidden_size": 512, "rope_theta": 10000.0, "max_position_embeddings": None})
    e = estimate.estimate(Inputs(shape=shape, kv_cache_memory=GiB))
    assert e.max_model_len == 2048 and any("Assuming the model's maximum length is 2048" in w for w in e.warnings)
    with pytest.raises(ValueError, match=r"derived max_model_len \(None=2048\.0 or model_max_length=None"):
        estimate.estimate(Inputs(shape=shape, kv_cache_memory=GiB, max_model_len=4096))


# -- 7: the HF cache's refs/main ------------------------------------------------------------------------------

def test_hf_ids_resolve_through_refs_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "hub" / "models--org--m"
    for snap, layers in (("aaa", 32), ("bbb", 40)):
        (repo / "snapshots" / snap).mkdir(parents=True)
        (repo / "snapshots" / snap / "config.json").write_text(json.dumps({**cfg("llama31-70b"),
                                                                           "num_hidden_layers": layers}))
    os.utime(repo / "snapshots" / "aaa" / "config.json", (1, 1))  # bbb is newer, refs/main names aaa
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    code, out, _ = run(capsys, "org/m", "--kv-cache-memory", "20GiB", "--max-model-len", "4096")
    assert code == 0 and "snapshot aaa (refs/main)" in out and "32 layers" in out


# -- 9 and 10: malformed input -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("doc", "message"), [
    ([], "not a model config"), ("x", "not a model config"), (3, "not a model config"),
    ({**{"model_type": "llama", "num_attention_heads": 32, "hidden_size": 4096}, "num_hidden_layers": -4},
     "num_hidden_layers is -4"),
    ({"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
      "num_key_value_heads": 0}, "num_key_value_heads is 0"),
    ({"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
      "num_key_value_heads": 64}, "more than num_attention_heads"),
    ({"model_type": "llama", "num_hidden_layers": "32", "num_attention_heads": 32, "hidden_size": 4096},
     "not a whole number"),
    ({"model_type": "llama", "num_hidden_layers": 32.0, "num_attention_heads": 32, "hidden_size": 4096},
     "not a whole number"),
    ({"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
      "max_position_embeddings": "131072"}, "max_position_embeddings is '131072', not a number"),
])
def test_malformed_configs_give_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any,
                                             message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    assert message in refused(capsys, str(path), "--kv-cache-memory", "10GiB")


def test_block_sizes_the_gpu_backends_refuse(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, str(FIX / "llama31-70b.json"), "--block-size", "24", "--kv-cache-memory", "10GiB")
    assert "not a multiple of 16" in err


@pytest.mark.parametrize("params", ["0.5B", "405B"])
def test_params_far_from_the_config_warn_with_the_implied_count(capsys: pytest.CaptureFixture[str],
                                                                 params: str) -> None:
    doc = run_json(capsys, str(FIX / "llama31-70b.json"), "--tensor-parallel-size", "8", "--gpu-memory", "80GiB",
                   "--params", params, "--max-model-len", "8k")
    assert any("far from the roughly 70.6B" in w for w in doc["warnings"]), doc["warnings"]
    doc = run_json(capsys, str(FIX / "llama31-70b.json"), "--tensor-parallel-size", "8", "--gpu-memory", "80GiB",
                   "--params", "70.6B", "--max-model-len", "8k")
    assert not any("far from" in w for w in doc["warnings"])


def test_figures_never_print_a_bare_question_mark(capsys: pytest.CaptureFixture[str]) -> None:
    # The inverse question without --params: the weights and device memory are unknown, said in words.
    code, out, _ = run(capsys, str(FIX / "llama31-70b.json"), "--max-model-len", "1024")
    assert code == 0 and " ?" not in out and "not known" in out


@pytest.mark.parametrize("name", ["deepseek-v3", "nemotron-h-8b", "gemma3-27b", "gpt-oss-120b", "glm45"])
def test_any_malformed_value_of_any_key_is_a_sentence_never_a_traceback(name: str) -> None:
    base = cfg(name)
    inner = base.get("text_config") if isinstance(base.get("text_config"), dict) else None
    keys = [(None, k) for k in base] + [("text_config", k) for k in (inner or {})]
    for parent, key in keys:
        for value in ("x", [1, 2], {}, None, -3, 0, 2.5, True):
            doc = json.loads(json.dumps(base))
            (doc[parent] if parent else doc)[key] = value
            try:
                shape = shape_from_config(doc)
                for x in (Inputs(shape=shape, kv_cache_memory=20 * GiB, tensor_parallel_size=2, max_model_len=4096),
                          Inputs(shape=shape, gpu_memory=80 * GiB, params=70 * 10**9, max_model_len=4096)):
                    e = estimate.estimate(x)
                    estimate.render(x, e)
            except ValueError as exc:
                assert "\n" not in str(exc), (key, value)


def test_moe_blocks_refuse_a_tp_above_their_experts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # qwen3_moe.py:154-158 (vLLM 0.32.0) raises this before any KV cache is sized
    small = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 8,
             "head_dim": 128, "hidden_size": 2048, "num_experts": 4, "max_position_embeddings": 32768}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(small))
    err = refused(capsys, str(path), "--tensor-parallel-size", "8", "--kv-cache-memory", "10GiB")
    assert "Tensor parallel size 8 is greater than the number of experts 4." in err
    doc = run_json(capsys, str(path), "--tensor-parallel-size", "4", "--kv-cache-memory", "10GiB")
    assert not any("tensor parallel 8" in r["change"] for r in doc["what_if"])
