"""`estimate` against the start-up lines of the real vLLM 0.32.0, recorded for dense, sliding-window and hybrid
(attention + Gated DeltaNet / Mamba) model shapes.

tests/e2e/capacity.py records them (`python -m tests.e2e.capacity`); tests/e2e/test_capacity.py repeats the
comparison against a live vLLM in CI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.model.shape import shape_from_config
from exporter.planning import estimate
from exporter.planning.estimate import GiB

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32.0" / "capacity"
SHAPES = sorted(p.name for p in ROOT.iterdir() if p.is_dir())


def ours(config: dict[str, Any], meta: dict[str, Any]) -> estimate.Estimate:
    shape = shape_from_config(config)
    return estimate.estimate(estimate.Inputs(
        shape, dtype=meta["dtype"], block_size=meta["block_size"], max_model_len=meta["max_model_len"],
        kv_cache_memory=meta["VLLM_CPU_KVCACHE_SPACE"] * GiB, num_gpu_blocks_override=meta["num_gpu_blocks_override"],
        max_num_seqs=8, max_num_batched_tokens=meta["max_num_batched_tokens"],
        async_scheduling=meta["async_scheduling"], mamba_ssm_cache_dtype=meta.get("mamba_ssm_cache_dtype", "auto"),
        pipeline_parallel_size=meta.get("pipeline_parallel_size", 1)))


def compare(config: dict[str, Any], meta: dict[str, Any], seen: dict[str, Any]) -> None:
    e = ours(config, meta)
    if "attention_block_size" in seen:  # "Setting attention block size to N tokens" (hybrids)
        assert e.block_size == seen["attention_block_size"]
    if seen.get("cpu_error"):
        return  # the CPU build cannot run this layer kind; its block size line (checked above) is what it printed
    if seen["failed"]:
        # "... the estimated maximum model length is N": vLLM refused to start, and so do we.
        assert e.verdict == "sequence_too_long"
        assert e.max_model_len_fit == seen["estimated_max_model_len"]
        return
    assert e.num_blocks == seen["num_gpu_blocks"]
    assert e.kv_tokens == seen["kv_cache_size_tokens"]  # "KV cache size: N tokens"
    assert f"{e.max_concurrency:.2f}" == f"{seen['max_concurrency']:.2f}"  # "Maximum concurrency ...: X.XXx"
    assert e.verdict in ("fits", "too_many_sequences")


def test_at_least_five_shapes_and_a_failing_start_are_recorded() -> None:
    metas = [json.loads((ROOT / n / "meta.json").read_text()) for n in SHAPES]
    assert sum(not m["observed"]["failed"] for m in metas) >= 5
    assert any("attention_block_size" in m["observed"] and not m["observed"]["failed"] for m in metas)  # hybrids
    assert any(m["observed"]["failed"] for m in metas)
    assert {m["block_size"] for m in metas} >= {32, 64}
    assert len({m["dtype"] for m in metas}) >= 2


@pytest.mark.parametrize("name", SHAPES)
def test_estimate_equals_vllms_startup_lines(name: str) -> None:
    meta = json.loads((ROOT / name / "meta.json").read_text())
    config = json.loads((ROOT / name / "config.json").read_text())
    compare(config, meta, meta["observed"])
