"""`estimate` against a live vLLM 0.32.0 for every recorded shape: the start-up lines must equal ours."""

from __future__ import annotations

import pytest

from tests.unit.test_capacity_exact import compare

from .capacity import SHAPES, Shape, meta_of, observe

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_estimate_equals_a_live_vllm(shape: Shape) -> None:
    compare(shape.config, meta_of(shape), observe(shape))
