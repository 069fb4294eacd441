"""The formulas of exporter.derive, including the field write-up's worked examples."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.pipeline import derive


def test_worked_example_prompt_512_max_4096_leaves_room_for_two() -> None:
    # 1000 blocks of 16, 260 used, prompt 512 + max_tokens 4096.
    w = derive.worst_case_blocks(512, 4096, None, 16)
    assert w == 288
    assert derive.safe_headroom(1000, 260, 0, w) == 2


def test_worked_example_max_8192_leaves_room_for_one() -> None:
    w = derive.worst_case_blocks(512, 8192, None, 16)
    assert w == 544
    assert derive.safe_headroom(1000, 260, 0, w) == 1


@pytest.mark.parametrize(("max_model_len", "per_request", "concurrent"), [(8192, 512, 3), (4096, 256, 7)])
def test_worked_example_max_model_len_concurrency(max_model_len: int, per_request: int, concurrent: int) -> None:
    w_max = derive.blocks_for_tokens(max_model_len, 16)
    assert w_max == per_request
    assert derive.max_concurrency(2000, w_max) == concurrent


def test_effective_usage_of_the_first_worked_example_is_42_4_percent() -> None:
    w = derive.worst_case_blocks(512, 4096, None, 16)
    safe = derive.safe_headroom(1000, 260, 0, w)
    assert derive.effective_usage(1000, w, None, safe) == pytest.approx(0.424)
    assert derive.effective_usage(1000, w, 5, safe) == pytest.approx(0.424)
    # Every slot taken: nothing a new request could have.
    assert derive.effective_usage(1000, w, 0, safe) == 1.0


def test_worst_case_is_bounded_by_max_model_len() -> None:
    assert derive.worst_case_blocks(400, 400, 512, 32) == 16
    assert derive.worst_case_blocks(16, 400, 512, 32) == 13  # the preemption storm shape: ceil(416/32)


def test_safe_headroom_goes_negative_when_running_requests_can_outgrow_the_pool() -> None:
    # 8 running requests that each grow to 13 blocks need 104 of 39 usable blocks.
    assert derive.safe_headroom(39, 20, 8, 13) == -5  # floor((39 - 104) / 13)


def test_admission_headroom_is_the_smaller_of_slots_and_kv() -> None:
    assert derive.admission_headroom(derive.slot_headroom(8, 8), derive.kv_admission_headroom(25, 1)) == 0
    assert derive.admission_headroom(derive.slot_headroom(8, 3), derive.kv_admission_headroom(6, 11)) == 0
    assert derive.admission_headroom(derive.slot_headroom(8, 3), derive.kv_admission_headroom(30, 2)) == 5
    assert derive.admission_headroom(None, derive.kv_admission_headroom(30, 2)) == 15


@pytest.mark.parametrize(
    ("usage", "n", "has_null", "counts_null", "used"),
    [
        (14 / 39, 40, True, False, 14),  # 0.11+: u = 1 - free / (N - 1)
        (15 / 40, 40, True, True, 14),  # V1 <= 0.10: the null block is counted as used
        (1 / 40, 40, True, True, 0),  # an idle V1 0.10 engine shows 1/N
        (0.5, 40, False, False, 20),  # V0: no null block
    ],
)
def test_used_blocks_across_versions(usage: float, n: int, has_null: bool, counts_null: bool, used: int) -> None:
    assert derive.used_blocks(usage, n, has_null, counts_null) == used


def test_usable_blocks_exclude_the_null_block_on_v1_only() -> None:
    assert derive.usable_blocks(40, True) == 39
    assert derive.usable_blocks(40, False) == 40


def test_hybrid_layout_uses_vllms_own_concurrency() -> None:
    # A sliding-window model: vLLM says 10x at 32768 although 27650 blocks / 2048 per request would be 13.5x.
    x = derive.Inputs(num_gpu_blocks=27650, block_size=16, has_null_block=True, usage_counts_null_block=False,
                      usage=0.0, running=0, waiting=0, max_model_len=32768, max_num_seqs=None,
                      prompt_tokens=None, max_tokens=None, kv_cache_max_concurrency=10.0,
                      kv_cache_size_tokens=327680)
    h = derive.derive(x)
    assert h.hybrid
    assert h.worst_case_blocks_max_model_len == 2765
    assert h.kv_capacity_tokens == 327680


def test_uniform_layout_is_not_taken_for_hybrid() -> None:
    x = derive.Inputs(num_gpu_blocks=40, block_size=32, has_null_block=True, usage_counts_null_block=False,
                      usage=0.0, running=0, waiting=0, max_model_len=512, max_num_seqs=8, prompt_tokens=None,
                      max_tokens=None, kv_cache_max_concurrency=2.5, kv_cache_size_tokens=1280)
    h = derive.derive(x)
    assert not h.hybrid
    assert h.worst_case_blocks_max_model_len == 16
    assert h.max_concurrency_max_model_len == 2  # floor(39 / 16)


@given(
    capacity=st.integers(1, 100_000),
    used=st.integers(0, 100_000),
    running=st.integers(0, 2000),
    w=st.integers(1, 10_000),
    slots=st.one_of(st.none(), st.integers(0, 2000)),
)
def test_effective_usage_is_a_ratio_and_never_below_what_is_used(
    capacity: int, used: int, running: int, w: int, slots: int | None
) -> None:
    used = min(used, capacity)
    safe = derive.safe_headroom(capacity, used, running, w)
    eff = derive.effective_usage(capacity, w, slots, safe)
    assert 0.0 <= eff <= 1.0
    # What a worst-case request cannot have includes at least what is already used.
    assert eff >= used / capacity - 1e-9


def test_the_in_flight_floor_asks_the_per_step_gate_for_one_chunk_only_without_prefix_caching() -> None:
    # The shape of vllm-0.10.2/prod-kv (20,001 blocks of 32, budget 8,192, 28k-token prompts in flight: 874 blocks
    # held each, 791 free): before 0.19 allocate_slots asks for the step's chunk, min(prompt, budget) = 256 blocks.
    x = derive.Inputs(num_gpu_blocks=20001, block_size=32, has_null_block=True, usage_counts_null_block=False,
                      usage=19209 / 20001, running=22, waiting=2, max_model_len=32768, max_num_seqs=256,
                      prompt_tokens=7000, max_tokens=400, admission_rule=derive.FIRST_CHUNK,
                      max_num_batched_tokens=8192)
    p = derive.pool(x)
    chunked = derive.with_head_floor(p, 874, 22, token_budget=8192)
    assert chunked.prompt_blocks == 256 and chunked.head_fits
    assert chunked.kv_admission_headroom_requests == p.kv_free_blocks // 256
    # Prefix caching on (or the budget unknown): the gate also counts the head's evictable cached blocks, up to
    # the whole prompt, which no metric shows.
    whole = derive.with_head_floor(p, 874, 22)
    assert whole.prompt_blocks == 874 and not whole.head_fits
    # The full-prompt gate (>= 0.19) asks the whole prompt whatever the budget.
    full = derive.with_head_floor(derive.pool(replace(x, admission_rule=derive.FULL_PROMPT)), 874, 22, 8192)
    assert full.prompt_blocks == 874 and not full.head_fits
