"""The engine states the fixtures and e2e tests reproduce on a real vLLM 0.32.0 (CPU).

Each scenario names the server flags it needs, the load that produces the state, and the
predicate that says whether one /metrics frame shows that state. The numbers are sized for
the tiny model at block_size 32 (see tests/e2e/tiny-llama and the reference, section 8):

* the shared server has 40 blocks, 39 usable (block 0 is vLLM's null block), so
  kv_cache_usage_perc = used / 39;
* the tiny model decodes a step in ~1.5 ms, so a one-shot burst of 100 requests drains in about
  a second; states that must hold for many seconds use closed-loop load (Wave.duration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .load import Wave

State = dict[str, float | None]

SHARED_FLAGS: dict[str, Any] = {
    "max_model_len": 512,
    "block_size": 32,
    "num_gpu_blocks_override": 40,
    "max_num_seqs": 8,
}

# Head-of-line blocking can only last while the running requests' decode growth keeps free
# blocks below the head's prompt; with 39 usable blocks and 512-token contexts that is at
# most ~128 engine steps (observed: 0.14 s). A pool sized for 8192-token contexts makes the
# same mechanism last ~6,000 steps (~8 s). The tiny config says max_position_embeddings 4096;
# the override lifts vLLM's max_model_len check (weights are random anyway).
HOL_FLAGS: dict[str, Any] = {
    "max_model_len": 8192,
    "block_size": 32,
    "num_gpu_blocks_override": 321,  # 320 usable blocks
    "max_num_seqs": 8,
    "extra_args": ("--hf-overrides", '{"max_position_embeddings": 8192}'),
}


def _num(st: State, key: str) -> float:
    v = st.get(key)
    return 0.0 if v is None else v


@dataclass(frozen=True)
class Scenario:
    name: str
    flags: dict[str, Any]
    waves: list[Wave]
    description: str
    # True for frames that show the scenario's state; `prev` is the frame before (or None).
    shows: Callable[[State, State | None], bool]
    # Among frames that show the state, the snapshot is the one with the highest score.
    score: Callable[[State, State | None], float] = lambda st, prev: 0.0
    lead_s: float = 2.0  # idle frames before the load starts
    tail_s: float = 3.0  # idle frames after the engine is idle again
    min_hold_s: float = 0.0  # the recorder flags the recording if the state held shorter
    extra: dict[str, Any] = field(default_factory=dict)


def _false_full(st: State, prev: State | None) -> bool:
    return (
        _num(st, "waiting") > 0
        and _num(st, "kv_cache_usage_perc") < 0.8
        and _num(st, "running") == SHARED_FLAGS["max_num_seqs"]
    )


def _kv_full(st: State, prev: State | None) -> bool:
    no_new_preemption = prev is None or _num(st, "num_preemptions_total") == _num(prev, "num_preemptions_total")
    return (
        _num(st, "waiting") > 0
        and _num(st, "running") < SHARED_FLAGS["max_num_seqs"]
        and _num(st, "kv_cache_usage_perc") >= 0.8
        and no_new_preemption
    )


def _preempting(st: State, prev: State | None) -> bool:
    return prev is not None and _num(st, "num_preemptions_total") > _num(prev, "num_preemptions_total")


def _head_of_line(st: State, prev: State | None) -> bool:
    no_new_preemption = prev is None or _num(st, "num_preemptions_total") == _num(prev, "num_preemptions_total")
    return (
        _num(st, "waiting") > 0
        and 0 < _num(st, "running") < HOL_FLAGS["max_num_seqs"]
        and _num(st, "kv_cache_usage_perc") < 0.8
        and no_new_preemption
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            name="idle",
            flags=SHARED_FLAGS,
            waves=[],
            description="No load: a freshly started server (all counters zero).",
            shows=lambda st, prev: _num(st, "running") == 0 and _num(st, "waiting") == 0,
            lead_s=3.0,
            tail_s=0.0,
        ),
        Scenario(
            name="false-full",
            flags=SHARED_FLAGS,
            # 16 + 64 tokens = 3 blocks at most per request; 8 running use <= 24 of 39
            # blocks, so KV never limits: max_num_seqs does. 100 closed-loop clients keep
            # ~92 requests queued for the whole 20 s.
            waves=[Wave(100, 16, 64, duration=20.0)],
            description=(
                "100 concurrent clients in closed loop for 20 s (each sends a new request when "
                "its previous one returns), prompt 16 tokens, max_tokens 64, ignore_eos. "
                "max_num_seqs (8) limits admission while KV usage stays low."
            ),
            shows=_false_full,
            score=lambda st, prev: _num(st, "waiting"),
            min_hold_s=15.0,
        ),
        Scenario(
            name="kv-full",
            flags=SHARED_FLAGS,
            # 352-token prompt = 11 blocks, + 32 output tokens -> 12 blocks. Three fit
            # (36 <= 39 blocks, never preempted); the next needs 11 free blocks and only 3-6
            # are free, so it waits although 5 slots are free.
            waves=[Wave(30, 352, 32, duration=15.0)],
            description=(
                "30 concurrent clients in closed loop for 15 s, prompt 352 tokens (11 blocks), "
                "max_tokens 32 (12 blocks at the end). 3 requests fill 33-36 of 39 blocks; the "
                "queue head needs 11 free blocks, so it waits with running 3 < max_num_seqs 8."
            ),
            shows=_kv_full,
            score=lambda st, prev: _num(st, "kv_cache_usage_perc") * 1000 + _num(st, "waiting"),
            min_hold_s=5.0,
        ),
        Scenario(
            name="preemption",
            flags=SHARED_FLAGS,
            # 16 + 400 tokens -> up to 13 blocks each; 8 running would need 104 > 39 blocks,
            # and admission reserves only the prompt (1 block), so decode growth preempts.
            waves=[Wave(12, 16, 400, duration=10.0)],
            description=(
                "12 concurrent clients in closed loop for 10 s, prompt 16 tokens, max_tokens "
                "400. Admission reserves only the prompt; decode growth exhausts the 39 "
                "blocks and vLLM preempts (recompute) the newest running request."
            ),
            shows=_preempting,
            score=lambda st, prev: (
                _num(st, "num_preemptions_total") - (_num(prev, "num_preemptions_total") if prev else 0.0)
            ),
            min_hold_s=5.0,
        ),
        Scenario(
            name="head-of-line",
            flags=HOL_FLAGS,
            waves=[
                # A: 2,112-token prompt = 66 blocks; decodes 6,000 tokens, growing to 254
                # blocks (usage 0.79): it never crosses 0.8 of the 320 usable blocks.
                Wave(1, 2112, 6000, delay=0.0),
                # Head: 8,160-token prompt = 255 blocks. vLLM >= 0.19 admits the queue head
                # only if its whole prompt fits; free is at most 320 - 66 = 254 < 255 and
                # shrinks as A grows, so it waits until A finishes.
                Wave(1, 8160, 16, delay=0.3),
                # Behind it: short requests that would fit (1 block, 7 free slots) but FCFS
                # admission stops at the blocked head.
                Wave(6, 16, 16, delay=0.6),
            ],
            description=(
                "Own server (max_model_len 8192 with --hf-overrides max_position_embeddings "
                "8192, 321 blocks = 320 usable; block_size and max_num_seqs as the shared "
                "server). t=0: request A, prompt 2112 tokens (66 blocks), max_tokens 6000. "
                "t=0.3 s: head request, prompt 8160 tokens (255 blocks), max_tokens 16: free "
                "blocks (<= 254) < 255, so it waits. t=0.6 s: 6 requests, prompt 16, max_tokens "
                "16: they would fit but wait behind the head. The state holds while A decodes "
                "(usage 0.21 -> 0.79); when A finishes the head and the short requests run."
            ),
            shows=_head_of_line,
            score=lambda st, prev: _num(st, "waiting"),
            min_hold_s=5.0,
        ),
        Scenario(
            name="admission",
            flags=HOL_FLAGS,
            waves=[
                # Steady state: 3 long-running requests (2,016 tokens = 63 blocks each at the end).
                Wave(3, 16, 2000, duration=12.0),
                # Then more 1-block prompts than the 5 free slots: the engine admits
                # min(8 - 3, free / 1) = 5 of them in one step and queues 2.
                Wave(7, 16, 500, delay=5.0),
            ],
            description=(
                "The head-of-line server. t=0: 3 clients in closed loop for 12 s, prompt 16, max_tokens 2000 "
                "(63 blocks each at the end). t=5 s: 7 requests, prompt 16 (1 block), max_tokens 500. The "
                "frame before t=5 s predicts how many the engine admits (5 slots, ~250 free blocks: 5); the "
                "frames after show running 8 and 2 waiting."
            ),
            shows=lambda st, prev: _num(st, "waiting") > 0 and _num(st, "running") == HOL_FLAGS["max_num_seqs"],
            score=lambda st, prev: _num(st, "waiting"),
        ),
    ]
}
