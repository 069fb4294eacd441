"""`estimate` against a live vLLM 0.32.0: the start-up lines must equal ours.

Every recorded shape is checked from its recording in tests/unit/test_capacity_exact.py. Live, CI starts one
shape per family (dense, fp32 at block size 64, a failing start, Mistral-style and padded interleaved sliding
windows, a Gated-DeltaNet and a Mamba-2 hybrid, an uneven pipeline split) to stay within its time budget;
`VLLM_HEADROOM_E2E_ALL_SHAPES=1 make e2e` starts all of them.
"""

from __future__ import annotations

import os

import pytest

from tests.unit.test_capacity_exact import compare

from .capacity import SHAPES, Shape, meta_of, observe

pytestmark = pytest.mark.e2e

ONE_PER_FAMILY = {
    "l2-kv1-hd64-bf16-bs32", "l2-kv2-hd64-fp32-bs64", "too-long-l2-kv1-bs32", "swa-mistral-l2-w128-bs32",
    "interleaved-7-padded-w128-bs32", "hybrid-qwen3next-l4-gdn", "hybrid-nemotronh-m-mstar", "pp2-uneven-l3-kv1-bs32",
}
LIVE = SHAPES if os.environ.get("VLLM_HEADROOM_E2E_ALL_SHAPES") == "1" else [s for s in SHAPES
                                                                               if s.name in ONE_PER_FAMILY]


def test_the_live_selection_names_real_shapes() -> None:
    assert {s.name for s in SHAPES} >= ONE_PER_FAMILY


@pytest.mark.parametrize("shape", LIVE, ids=[s.name for s in LIVE])
def test_estimate_equals_a_live_vllm(shape: Shape) -> None:
    compare(shape.config, meta_of(shape), observe(shape))
