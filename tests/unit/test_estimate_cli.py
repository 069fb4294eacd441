"""`estimate` as planners call it: sizes as vLLM prints them, vLLM's own refusals, the inverse question,
models named by Hugging Face id, a pasted start-up log, and labelled figures that agree in text and JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter import cli
from exporter.planning import estimate
from exporter.planning.estimate import GiB

LLAMA_70B = "docs/examples/llama-3.1-70b.json"
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "torch_dtype": "bfloat16",
            "max_position_embeddings": 131072}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["estimate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    doc: dict[str, object] = json.loads(out)
    return doc


# -- 3: vLLM's own numbers in ----------------------------------------------------------------------------------

def test_sizes_as_vllm_prints_them(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM prints "Available KV cache memory: 6.51 GiB" and "total_gpu_memory=23.58GiB"; both must be accepted.
    doc = run_json(capsys, LLAMA_70B, "--tensor-parallel-size", "8", "--kv-cache-memory", "6.51GiB",
                   "--max-model-len", "8192")
    assert doc["kv_pool_bytes"] == round(6.51 * GiB)
    doc = run_json(capsys, LLAMA_70B, "--tensor-parallel-size", "8", "--gpu-memory", "23.58GiB", "--params", "8B",
                   "--max-model-len", "8192")
    assert doc["partitions"]["weights_per_device"] == 2 * 10**9  # type: ignore[index]


def test_num_gpu_blocks_override_alone_needs_no_memory(capsys: pytest.CaptureFixture[str]) -> None:
    # reference §8.1 (vLLM 0.32.0 CPU, tiny Llama): 40 blocks of 32 at max_model_len 512 ->
    # "KV cache size: 1,280 tokens, Maximum concurrency for 512 tokens per request: 2.50x".
    doc = run_json(capsys, "tests/e2e/tiny-llama/config.json", "--num-gpu-blocks-override", "40", "--block-size", "32",
                   "--max-model-len", "512")
    assert (doc["num_blocks"], doc["kv_tokens"], doc["max_concurrency"]) == (40, 1280, 2.5)


def test_a_pasted_startup_log_fills_in_what_it_states(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Lines of https://github.com/vllm-project/vllm/pull/20665 (DeepSeek-V2-Lite, PP2 × TP2).
    log = tmp_path / "server.log"
    log.write_text(
        "INFO non-default args: {'model': 'deepseek-ai/DeepSeek-V2-Lite', 'max_model_len': 1024, "
        "'tensor_parallel_size': 2, 'pipeline_parallel_size': 2}\n"
        "(VllmWorker rank=3 pid=19834) INFO [gpu_worker.py:233] Available KV cache memory: 11.33 GiB\n"
        "(VllmWorker rank=0 pid=19831) INFO [gpu_worker.py:233] Available KV cache memory: 12.13 GiB\n"
        "INFO [kv_cache_utils.py:716] GPU KV cache size: 807,792 tokens\n"
        "INFO [kv_cache_utils.py:720] Maximum concurrency for 1,024 tokens per request: 788.86x\n")
    doc = run_json(capsys, "docs/examples/deepseek-v2-lite.json", "--from-log", str(log))
    assert doc["inputs"]["pipeline_parallel_size"] == 2 and doc["max_model_len"] == 1024  # type: ignore[index]
    assert [s["kv_pool_bytes"] for s in doc["stages"]] == [round(12.13 * GiB), round(11.33 * GiB)]  # type: ignore
    side = doc["from_log"]
    assert side["kv_tokens"]["log"] == 807_792  # type: ignore[index]
    assert abs(side["kv_tokens"]["ours"] - 807_792) < 21 * 16  # type: ignore[index]  # ±0.005 GiB of rounding
    code, out, _ = run(capsys, "docs/examples/deepseek-v2-lite.json", "--from-log", str(log))
    assert code == 0 and "from the log" in out and "807792" in out


# -- 4: impossible and unit-less inputs ------------------------------------------------------------------------

def test_a_bare_number_is_gib_as_the_help_says(capsys: pytest.CaptureFixture[str]) -> None:
    with_unit = run_json(capsys, LLAMA_70B, "--tensor-parallel-size", "8", "--gpu-memory", "80GiB", "--params",
                         "70B", "--max-model-len", "32k")
    bare = run_json(capsys, LLAMA_70B, "--tensor-parallel-size", "8", "--gpu-memory", "80", "--params", "70B",
                    "--max-model-len", "32k")
    assert bare["num_blocks"] == with_unit["num_blocks"] and bare["verdict"] != "budget_exhausted"


@pytest.mark.parametrize(("argv", "message"), [
    (["--gpu-memory", "80B", "--params", "70B"], "--gpu-memory 80B is outside"),
    (["--gpu-memory", "80GiB", "--params", "70"], "--params 70 is not a model's parameter count"),
    # vLLM 0.32.0 vllm/config/model.py verify_with_parallel_config, its words:
    (["--tensor-parallel-size", "3", "--kv-cache-memory", "10GiB"],
     "Total number of attention heads (64) must be divisible by tensor parallel size (3)."),
    # vLLM 0.32.0 vllm/config/model.py _get_and_verify_max_len, its words:
    (["--max-model-len", "200000", "--kv-cache-memory", "10GiB"],
     "User-specified max_model_len (200000) is greater than the derived max_model_len "
     "(max_position_embeddings=131072"),
])
def test_impossible_inputs_are_refused_in_one_sentence(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                       message: str) -> None:
    code, out, err = run(capsys, LLAMA_70B, *argv)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_vllms_long_context_escape_hatch_warns_instead(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, LLAMA_70B, "--tensor-parallel-size", "8", "--max-model-len", "200000",
                   "--kv-cache-memory", "10GiB", "--allow-long-max-model-len")
    # vLLM logs "%s %s" % (msg, its caution) instead of raising (vllm/config/model.py:2659-2660)
    assert "To allow overriding" not in str(doc["warnings"]) and "extreme caution" in str(doc["warnings"])


def test_what_if_offers_no_tp_vllm_would_refuse() -> None:
    shape = estimate.load_model(LLAMA_70B)[0]  # 64 heads: TP 3 is refused, so TP 48 is never offered
    x = estimate.Inputs(shape, tensor_parallel_size=8, max_model_len=32768, kv_cache_memory=20 * GiB)
    names = [n for n, _e, _c in estimate.what_if(x, estimate.estimate(x))]
    assert "tensor parallel 16" in names
    y = estimate.Inputs(estimate.load_model("docs/examples/kimi-linear-48b-a3b.json")[0], tensor_parallel_size=32,
                        max_model_len=32768, kv_cache_memory=20 * GiB)
    assert not [n for n, _e, _c in estimate.what_if(y, estimate.estimate(y)) if n.startswith("tensor")]


# -- 5: the inverse question -----------------------------------------------------------------------------------

def test_without_memory_it_answers_what_the_requests_need(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    doc = run_json(capsys, str(tmp_path), "--max-model-len", "8192", "--max-num-seqs", "32", "--params", "8B")
    # Llama-3.1-8B: 32 layers × 2 × 8 KV heads × 128 × 2 bytes = 128 KiB per token; a request of 8,192 tokens is
    # 512 blocks of 16; 32 of them plus the null block.
    assert doc["kv_bytes_per_token"] == 128 * 1024
    assert doc["bytes_per_request"] == 8192 * 128 * 1024
    assert doc["kv_pool_needed"] == (32 * 512 + 1) * 16 * 128 * 1024
    assert doc["gpu_memory_needed"] > doc["kv_pool_needed"] + 16 * 10**9  # type: ignore[operator]


def test_the_smallest_tp_and_kv_dtype_that_fit(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, LLAMA_70B, "--gpu-memory", "80GiB", "--params", "70.6B", "--max-model-len", "32k",
                   "--max-num-seqs", "32")
    fits = {f["kv_cache_dtype"]: f["tensor_parallel_size"] for f in doc["smallest_fit"]}  # type: ignore[attr-defined]
    assert fits["bfloat16"] is not None and fits["fp8"] is not None and fits["fp8"] <= fits["bfloat16"]
    shape = estimate.load_model(LLAMA_70B)[0]
    for kv, tp in fits.items():  # the named TP fits, the next smaller dividing TP does not
        x = estimate.Inputs(shape, kv_cache_dtype="fp8" if kv == "fp8" else "auto", tensor_parallel_size=tp,
                            gpu_memory=80 * GiB, params=70_600_000_000, max_model_len=32000, max_num_seqs=32)
        assert estimate.estimate(x).verdict == "fits"
        if tp > 1:
            assert estimate.estimate(estimate.Inputs(**{**x.__dict__, "tensor_parallel_size": tp // 2})).verdict \
                != "fits"


def test_what_if_offers_the_largest_max_num_seqs_and_max_model_len_that_fit() -> None:
    shape = estimate.load_model(LLAMA_70B)[0]
    x = estimate.Inputs(shape, tensor_parallel_size=8, max_model_len=32768, max_num_seqs=64, kv_cache_memory=20 * GiB)
    e = estimate.estimate(x)
    assert e.verdict == "too_many_sequences"
    rows = {n.split(" (")[0]: w for n, w, _c in estimate.what_if(x, e)}
    seqs = next(k for k in rows if k.startswith("max_num_seqs "))
    n = int(seqs.split()[1])
    assert rows[seqs].verdict == "fits" and n == (e.num_blocks - 1) // e.blocks_per_request
    assert estimate.estimate(estimate.Inputs(**{**x.__dict__, "max_num_seqs": n + 1})).verdict != "fits"
    length_row = next(k for k in rows if k.startswith("max_model_len ") and "halved" not in k)
    length = int(length_row.split()[1].replace(",", ""))
    assert rows[length_row].verdict == "fits"
    assert estimate.estimate(estimate.Inputs(**{**x.__dict__, "max_model_len": length + 16})).verdict != "fits"


# -- 6: models named as people name them ----------------------------------------------------------------------

def test_a_hugging_face_id_is_found_in_the_local_cache(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    snap = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_8B))
    (snap / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16060522496}}))
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    doc = run_json(capsys, "meta-llama/Llama-3.1-8B", "--gpu-memory", "24GiB", "--max-model-len", "8192")
    assert doc["kv_bytes_per_token"] == 128 * 1024 and doc["partitions"]["weights_per_device"] == 16060522496  # type: ignore


def test_an_id_not_in_the_cache_says_how_to_fetch_the_two_files(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    code, _out, err = run(capsys, "meta-llama/Llama-3.1-8B", "--kv-cache-memory", "10GiB")
    assert code == 2 and err.count("\n") == 1
    assert "config.json" in err and "model.safetensors.index.json" in err and "No such file" not in err


# -- 7: every figure says what it is, text and JSON agree -----------------------------------------------------

def test_text_and_json_show_the_same_labelled_figures(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [LLAMA_70B, "--tensor-parallel-size", "8", "--gpu-memory", "64GiB", "--params", "70.6B",
            "--max-model-len", "32768", "--max-num-seqs", "64"]
    doc = run_json(capsys, *argv)
    _code, text, _err = run(capsys, *argv)
    shape = estimate.load_model(LLAMA_70B)[0]
    x = estimate.Inputs(shape, tensor_parallel_size=8, gpu_memory=64 * GiB, params=70_600_000_000,
                        max_model_len=32768, max_num_seqs=64)
    for key, label, value, shown in estimate.figures(x, estimate.estimate(x)):
        assert doc[key] == value and f"{label}" in text and shown in text
    # "too many sequences" and the count of requests that fit say the same thing
    assert doc["verdict"] == "too_many_sequences" and doc["max_num_seqs_fit"] < 64
    assert f"only {doc['max_num_seqs_fit']} such requests fit" in text
    assert "requests fit" not in text.replace(f"only {doc['max_num_seqs_fit']} such requests fit", "")


def test_the_longest_max_model_len_that_fits_is_the_largest_not_the_requested(
        capsys: pytest.CaptureFixture[str]) -> None:
    # A pool of 2,000 blocks of 16 holds one request of 1,999 × 16 tokens (the null block excluded, vLLM 0.32.0
    # check_enough_kv_cache_memory), however short the requested max_model_len.
    doc = run_json(capsys, LLAMA_70B, "--num-gpu-blocks-override", "2000", "--max-model-len", "4096",
                   "--tensor-parallel-size", "8")
    assert doc["max_model_len_fit"] == 1999 * 16


def test_help_shows_a_hybrid_and_a_pipeline_parallel_example_that_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["estimate", "--help"])
    text = capsys.readouterr().out
    assert "hybrid" in text and "qwen3-next-80b-a3b.json" in text and "--pipeline-parallel-size 2" in text
    commands = re.findall(r"vllm-headroom estimate (docs/examples/\S+ .*?)(?:\n\n|\n  #)", text, re.S)
    runnable = [c for c in commands if "--from-log" not in c]
    assert len(runnable) >= 3
    for command in runnable:
        assert cli.main(["estimate", *command.replace("\\\n", " ").split()]) == 0, command
        capsys.readouterr()


def test_a_real_hybrid_startup_log_from_vllm_0_32_0(capsys: pytest.CaptureFixture[str]) -> None:
    # The start-up log of the real vLLM 0.32.0 CPU build serving the Qwen3-Next-shaped toy model (recorded here):
    # "Setting attention block size to 96 tokens", "Explicitly set (1.0/20.09) GiB for KV cache", "Reset SSM cache
    # type to float32", "CPU KV cache size: 3,195,611 tokens, Maximum concurrency for 2,048 tokens per request:
    # 1560.36x". Given only the config and the log, every figure it states must come out the same.
    folder = Path("tests/fixtures/vllm-0.32.0/capacity/hybrid-qwen3next-l4-gdn")
    doc = run_json(capsys, str(folder / "config.json"), "--from-log", str(folder / "startup.log"))
    side = doc["from_log"]
    assert {k: v["log"] for k, v in side.items() if k != "version"} == {  # type: ignore[union-attr]
        "kv_tokens": 3_195_611, "max_concurrency": 1560.36, "block_size": 96}
    assert all(v["log"] == v["ours"] for k, v in side.items() if k != "version")  # type: ignore[union-attr]
