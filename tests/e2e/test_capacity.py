"""`estimate` against a live vLLM 0.32.0 for every recorded shape: the start-up lines must equal ours."""

from __future__ import annotations

import pytest

from tests.unit.test_capacity_exact import compare

from .capacity import SHAPES, Shape, observe

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_estimate_equals_a_live_vllm(shape: Shape) -> None:
    meta = {"dtype": shape.dtype, "block_size": shape.block_size, "max_model_len": shape.max_model_len,
            "VLLM_CPU_KVCACHE_SPACE": shape.kvcache_space_gib, "num_gpu_blocks_override": shape.override,
            "max_num_batched_tokens": shape.max_num_batched_tokens, "async_scheduling": False}
    compare(shape.config, meta, observe(shape))
