"""Absolute bytes in the sidecar come from the planner's layer grouping: one formula for bytes per block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import cli
from exporter.planning import estimate
from tests import fixtures

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    # interleaved sliding window: 6 sliding + 2 full layers, grouped by vLLM into groups of 2 layers
    "interleaved": ROOT / "tests/fixtures/vllm-0.32.0/capacity/interleaved-sssf-x2-w256-bs64/config.json",
    "interleaved-padded": ROOT / "tests/fixtures/vllm-0.32.0/capacity/interleaved-7-padded-w128-bs32/config.json",
    "mla": ROOT / "docs/examples/deepseek-v2-lite.json",
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_free_bytes_per_free_block_equal_the_planners_bytes_per_block(model: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = str(fixtures.ROOT / "false-full" / "snapshot.prom")
    assert cli.main(["diagnose", snapshot, "--json", "--model-config", str(MODELS[model])]) == 0
    e = json.loads(capsys.readouterr().out)["targets"][0]["engines"][0]
    shape, _ = estimate.load_model(MODELS[model])
    planned = estimate.estimate(estimate.Inputs(shape, block_size=e["block_size_tokens"], kv_cache_memory=2**30,
                                                max_model_len=512))
    assert e["kv_free_blocks"] > 0
    assert e["kv_free_bytes"] / e["kv_free_blocks"] == planned.bytes_per_block
    assert e["kv_bytes_per_block"] == planned.bytes_per_block
    w = e["worst_case_blocks_per_request"]["profile"]
    assert e["worst_case_request_bytes"] == w * planned.bytes_per_block


def test_interleaved_block_is_not_bytes_per_token_times_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    """The old formula (bytes per token × block size) was 2–3.5× off on these layouts."""
    snapshot = str(fixtures.ROOT / "false-full" / "snapshot.prom")
    assert cli.main(["diagnose", snapshot, "--json", "--model-config", str(MODELS["interleaved-padded"])]) == 0
    e = json.loads(capsys.readouterr().out)["targets"][0]["engines"][0]
    assert e["kv_bytes_per_block"] != e["kv_bytes_per_token"] * e["block_size_tokens"]
