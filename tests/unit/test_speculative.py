"""Issue 23 item 4: speculative decoding in `estimate` and in the admission gate.

vLLM puts a drafter's attention layers into the model's KV-cache spec after the target's and groups them with
the target's layers of the same spec (vllm/v1/core/kv_cache_planning.py:416-560 @0.33.0); its per-step admission
gate adds `num_lookahead_tokens` (vllm/config/vllm.py:626-652 @0.33.0: k for EAGLE, EAGLE3, MTP and a draft model,
k + 1 for DFlash, 0 for ngram) to the step's chunk (vllm/v1/core/kv_cache_manager.py:550-588 @0.33.0).

Evidence: vllm-project/vllm PR#29303 ("[Hybrid Allocator] Better layer padding strategy for gpt-oss eagle",
merged 2025-11): `vllm serve openai/gpt-oss-120b --speculative-config '{"method": "eagle3", "model":
"nvidia/gpt-oss-120b-Eagle3", "num_speculative_tokens": 1}'` prints "Add 1 padding layers, may waste at most 5.56%
KV cache memory", grouping "19 full + 18 sliding" into two groups of 19. The PR prints no block count: its figure
is that layout and that percentage; the blocks follow from it (pool ÷ 19 layers' pages). The drafter's config.json
(tests/fixtures/estimate-configs/gpt-oss-120b-eagle3-drafter.json) could not be read here: hidden size,
intermediate size, heads and vocabulary are the public checkpoint's; its KV heads × head_dim (8 × 64) are the ones
the PR's grouping shows (the drafter's layer joins the target's full-attention group, so its page is the
target's). tests/e2e/test_spec_decode_layout.py runs vLLM's own grouping function on the same layer specs.
A real vLLM 0.32.0 run with a 1-layer draft model (tests/fixtures/admission-0.32.0/spec-draft-model) gives the
recorded block count the drafter's layer costs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import cli
from exporter.engines.vllm.args import num_lookahead_tokens, parse_vllm_args_noting, speculative_method
from exporter.planning import estimate as est
from exporter.planning.estimate import GiB

CONFIGS = Path("tests/fixtures/estimate-configs")
GPT_OSS = str(CONFIGS / "gpt-oss-120b.json")
DRAFTER = str(CONFIGS / "gpt-oss-120b-eagle3-drafter.json")
PR_29303 = '{"method": "eagle3", "model": "nvidia/gpt-oss-120b-Eagle3", "num_speculative_tokens": 1}'
RECORDED = Path("tests/fixtures/admission-0.32.0/spec-draft-model")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert cli.main(["estimate", *argv, "--json"]) == 0, capsys.readouterr().err
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def test_the_eagle3_drafter_on_gpt_oss_120b_groups_as_pr_29303_prints(capsys: pytest.CaptureFixture[str]) -> None:
    pool = "40GiB"
    with_drafter = run_json(capsys, GPT_OSS, "--kv-cache-memory", pool, "--max-model-len", "32k",
                            "--speculative-config", PR_29303, "--draft-model-config", DRAFTER)
    alone = run_json(capsys, GPT_OSS, "--kv-cache-memory", pool, "--max-model-len", "32k")
    # The PR's own line, word for word.
    assert any(w.startswith("Add 1 padding layers, may waste at most 5.56% KV cache memory")
               for w in with_drafter["warnings"])  # type: ignore[union-attr]
    page = 16 * 2 * 8 * 64 * 2  # block 16 tokens, K and V, 8 KV heads, head_dim 64, bf16
    assert with_drafter["bytes_per_block"] == 19 * page and alone["bytes_per_block"] == 18 * page
    assert with_drafter["num_blocks"] == 40 * GiB // (19 * page)
    # Today's number without the drafter is the "5.6 % too high"; ours is vLLM's grouping exactly.
    too_high = alone["num_blocks"] / with_drafter["num_blocks"] - 1  # type: ignore[operator]
    assert abs(too_high - 0.0556) < 0.005
    inputs = with_drafter["inputs"]
    assert inputs["speculative_method"] == "eagle3" and inputs["num_lookahead_tokens"] == 1  # type: ignore[index]
    assert inputs["drafter_layers"] == 1  # type: ignore[index]


def test_the_drafter_is_named_in_the_text_and_costs_a_what_if_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["estimate", GPT_OSS, "--kv-cache-memory", "40GiB", "--max-model-len", "32k",
                     "--speculative-config", PR_29303, "--draft-model-config", DRAFTER]) == 0
    out = capsys.readouterr().out
    assert "drafter: eagle3, 1 attention layer" in out and "19 full, 18 sliding layers in 2 groups" in out
    assert "without the drafter" in out


def test_a_recorded_draft_model_costs_the_blocks_vllm_counted(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.32.0 (CPU), the tiny Llama (2 layers) with a 1-layer draft model of its attention shape, 1 GiB of KV
    cache, no override: cache_config_info num_gpu_blocks 43,690 (one block holds 3 layers' pages, 24,576 bytes),
    "CPU KV cache size: 1,398,080 tokens"; without the drafter it would be 65,536."""
    meta = json.loads((RECORDED / "meta.json").read_text())
    spec = json.dumps({**meta["speculative_config"], "model": "draft"})
    doc = run_json(capsys, str(RECORDED / "config.json"), "--kv-cache-memory", "1GiB", "--block-size", "32",
                   "--max-model-len", "512", "--speculative-config", spec, "--draft-model-config",
                   str(RECORDED / "draft-config.json"), "--max-num-batched-tokens", "2048", "--no-async-scheduling")
    assert doc["num_blocks"] == meta["observed"]["num_gpu_blocks"] == 43690
    assert doc["kv_tokens"] == meta["observed"]["kv_cache_size_tokens"]
    assert f"{doc['max_concurrency']:.2f}" == f"{meta['observed']['max_concurrency']:.2f}"


def test_mtp_drafts_with_the_models_own_layers(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 ships one MTP layer (num_nextn_predict_layers 1), MLA like the 61 it serves: 62 layers share
    the one group, so a block is 62 pages."""
    spec = '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'
    doc = run_json(capsys, str(CONFIGS / "deepseek-v3.json"), "--kv-cache-memory", "40GiB", "--max-model-len", "32k",
                   "--speculative-config", spec, "--tensor-parallel-size", "8")
    alone = run_json(capsys, str(CONFIGS / "deepseek-v3.json"), "--kv-cache-memory", "40GiB", "--max-model-len",
                     "32k", "--tensor-parallel-size", "8")
    assert doc["bytes_per_block"] * 61 == alone["bytes_per_block"] * 62  # type: ignore[operator]
    assert doc["inputs"]["speculative_method"] == "mtp"  # type: ignore[index]


@pytest.mark.parametrize(("argv", "sentence"), [
    (["--speculative-config", '{"method": "eagle3", "model": "org/not-in-any-cache", "num_speculative_tokens": 2}'],
     "its config.json is needed"),
    (["--speculative-config", "{not json"], "is not JSON"),
    (["--speculative-config", '{"num_speculative_tokens": 2}'], "names neither a method nor a model"),
    (["--speculative-config", '{"method": "draft_model", "model": "d", "num_speculative_tokens": 2}',
      "--draft-model-config", str(CONFIGS / "llama31-70b.json")], "differs from the target's"),
])
def test_a_drafter_that_cannot_be_sized_is_refused(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                   sentence: str) -> None:
    assert cli.main(["estimate", GPT_OSS, "--kv-cache-memory", "40GiB", "--max-model-len", "32k", *argv]) == 2
    assert sentence in capsys.readouterr().err


@pytest.mark.parametrize(("spec", "method", "lookahead"), [
    ({"method": "eagle3", "model": "m", "num_speculative_tokens": 3}, "eagle3", 3),
    ({"method": "eagle", "model": "m", "num_speculative_tokens": 2}, "eagle", 2),
    ({"method": "deepseek_mtp", "num_speculative_tokens": 1}, "mtp", 1),
    ({"method": "dflash", "model": "m", "num_speculative_tokens": 7}, "dflash", 8),
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}, "ngram", 0),
    ({"model": "[ngram]", "num_speculative_tokens": 4}, "ngram", 0),
    ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}, "eagle3", 3),
    ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 3}, "eagle", 3),
    ({"model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 15}, "dflash", 16),
    ({"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 5}, "draft_model", 5),
])
def test_vllms_method_and_lookahead(spec: dict[str, object], method: str, lookahead: int) -> None:
    """vllm/config/speculative.py:1236-1250, 1432-1473 (the method) and vllm/config/vllm.py:626-652 (the
    lookahead) @0.33.0."""
    assert speculative_method(spec) == method
    assert num_lookahead_tokens(method, spec.get("num_speculative_tokens")) == lookahead  # type: ignore[arg-type]
    got, notes = parse_vllm_args_noting(["vllm", "serve", "m", "--speculative-config", json.dumps(spec)])
    assert notes == [] and (got["speculative_method"], got["num_lookahead_tokens"]) == (method, lookahead)


def test_vllms_other_spellings_of_the_flag() -> None:
    """`-sc`, the dotted form, and 0.33's --spec-method/--spec-model/--spec-tokens (vllm/engine/arg_utils.py
    :1864-1866 and :2108-2121 @0.33.0) read the same."""
    want = {"speculative_method": "eagle3", "speculative_model": "m", "num_speculative_tokens": 3,
            "num_lookahead_tokens": 3}
    for argv in (["-sc", '{"method":"eagle3","model":"m","num_speculative_tokens":3}'],
                 ["--speculative-config.method", "eagle3", "--speculative-config.model", "m",
                  "--speculative-config.num_speculative_tokens", "3"],
                 ["--spec-method", "eagle3", "--spec-model", "m", "--spec-tokens", "3"]):
        got, notes = parse_vllm_args_noting(["vllm", "serve", "t", *argv])
        assert notes == [] and {k: got[k] for k in want} == want, argv


def test_without_num_speculative_tokens_the_lookahead_is_unknown_and_said() -> None:
    got, notes = parse_vllm_args_noting(["vllm", "serve", "t", "--speculative-config", '{"method":"mtp"}'])
    assert got["speculative_method"] == "mtp" and "num_lookahead_tokens" not in got
    assert notes and "lookahead is unknown" in notes[0]


def test_requirements_count_the_drafters_layers() -> None:
    shape = est.load_model(GPT_OSS)[0]
    drafter = est.load_model(DRAFTER)[0]
    x = est.Inputs(shape, max_model_len=32000, speculative_method="eagle3", num_speculative_tokens=1,
                   draft_shape=drafter)
    r = est.requirements(x)
    assert r.kv_bytes_per_token == 37 * 2048 and r.bytes_per_block == 19 * 32768
