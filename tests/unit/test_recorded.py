"""Verdicts and numbers on timelines recorded from the real vLLM 0.32.0, frame by frame.

The engine's own truth for each frame is read with prometheus_client's parser (not ours), so these tests
check our parser, derivations and verdicts against what the engine exported.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.pipeline.config import value
from exporter.pipeline.target import EngineReport, Settings, Target
from exporter.pipeline.verdict import Thresholds, Verdict
from tests import fixtures

BLOCKS = 40  # --num-gpu-blocks-override 40
USABLE = 39  # block 0 is vLLM's null block
HOLD = 2.0


@dataclass(frozen=True)
class Truth:
    running: float
    waiting: float
    usage: float
    preemptions: float


def truth(text: str) -> Truth:
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                          "vllm:num_preemptions_total"):
                values[s.name] = s.value
    return Truth(values["vllm:num_requests_running"], values["vllm:num_requests_waiting"],
                 values["vllm:kv_cache_usage_perc"], values["vllm:num_preemptions_total"])


def replay(scenario: str) -> list[tuple[float, Truth, EngineReport]]:
    target = Target(Settings("recorded", vllm_args=fixtures.vllm_argv(scenario), discover_cmdline=False,
                             thresholds=Thresholds(false_full_hold=HOLD)))
    out = []
    for t, text in fixtures.recording(scenario).frames:
        report = target.observe(t, text)
        assert report.up and len(report.engines) == 1
        out.append((t, truth(text), report.engines[0]))
    return out


def test_idle_capacity_matches_the_startup_log() -> None:
    meta = fixtures.meta("idle")
    startup = meta["startup_capacity"]
    for _t, eng, ours in replay("idle"):
        assert eng.waiting == 0 and ours.verdict is Verdict.OK
        h = ours.headroom
        assert h.kv_capacity_blocks == startup["num_gpu_blocks"] - 1 == USABLE
        assert h.block_size_tokens == 32
        # vLLM's own line: "KV cache size: 1,280 tokens" counts the null block; we do not.
        assert startup["kv_cache_size_tokens"] == (h.kv_capacity_blocks + 1) * h.block_size_tokens
        assert value(ours.config.kv_cache_max_concurrency) == startup["max_concurrency"]
        assert h.worst_case_blocks_max_model_len == 512 // 32
        assert h.max_concurrency_max_model_len == int(startup["max_concurrency"])  # floor(39 / 16) = 2
        assert h.kv_free_blocks == USABLE and ours.false_full is False


def test_false_full_is_slots_full_with_low_usage() -> None:
    frames = replay("false-full")
    state = [(t, e, o) for t, e, o in frames if e.waiting > 0 and e.running == 8]
    assert len(state) >= 20, "the recording must hold the slots-bound state"
    for _t, eng, ours in state:
        assert eng.usage < 0.8
        assert ours.verdict is Verdict.SLOTS_FULL
        assert ours.headroom.admission_headroom_requests == 0
        assert ours.headroom.slot_headroom_requests == 0
        assert ours.headroom.effective_usage_ratio == 1.0
        assert ours.headroom.kv_used_blocks == round(eng.usage * USABLE)
    first = state[0][0]
    flagged = [t for t, _e, o in frames if o.false_full]
    assert flagged and flagged[0] - first <= HOLD + 0.5 + 1e-6  # hold plus one 0.5 s frame
    assert all(not o.false_full for _t, e, o in frames if e.waiting == 0)


def test_kv_full_is_kv_full_and_never_false_full() -> None:
    frames = replay("kv-full")
    prompt_blocks = 352 // 32  # the scenario's prompts need 11 blocks at admission
    state = [(t, e, o) for t, e, o in frames if e.waiting > 0 and (1 - e.usage) * USABLE < prompt_blocks]
    assert len(state) >= 10
    for _t, eng, ours in state:
        assert eng.running < 8  # slots were free: memory held the queue back
        assert ours.verdict is Verdict.KV_FULL
        assert ours.headroom.admission_headroom_requests == 0
    assert not any(o.false_full for _t, _e, o in frames)


def test_preemption_storm_is_predicted_then_reported() -> None:
    frames = replay("preemption")
    rises = [i for i in range(1, len(frames)) if frames[i][1].preemptions > frames[i - 1][1].preemptions]
    assert rises, "the engine must have preempted"
    for i in rises:
        _t, _eng, ours = frames[i]
        assert ours.verdict is Verdict.PREEMPTING
        assert ours.preemptions_per_second and ours.preemptions_per_second > 0
    # Once the storm's max_tokens are in the profile, every frame with 4+ running is oversubscribed:
    # 16 + 400 tokens = 13 blocks each (the window's exact mean, not the 500 bucket bound); 4 need 52 of 39.
    learned = [(e, o) for _t, e, o in frames if o.max_tokens and o.max_tokens.tokens >= 400]
    assert learned and all(o.max_tokens is not None and o.max_tokens.tokens == 400 for _e, o in learned)
    for eng, ours in learned:
        if eng.running >= 4:
            assert ours.headroom.safe_headroom_requests < 0
    # The first frame with load, before the counter moved, already says oversubscribed.
    first_load = next(o for _t, e, o in frames if e.running > 0)
    assert first_load.headroom.safe_headroom_requests < 0
    # Idle after the storm is ok again.
    assert frames[-1][2].verdict is Verdict.OK


@pytest.mark.parametrize("scenario", ["idle", "false-full", "kv-full", "preemption"])
def test_waiting_zero_never_gets_a_waiting_verdict(scenario: str) -> None:
    for _t, eng, ours in replay(scenario):
        if eng.waiting == 0 and eng.running == 0:
            assert ours.verdict in (Verdict.OK, Verdict.LEAK)


def test_head_of_line_is_named_while_slots_and_blocks_are_free() -> None:
    frames = replay("head-of-line")
    head_blocks = 8160 // 32  # the head prompt needs 255 blocks; the pool has 320 usable
    state = [(t, e, o) for t, e, o in frames
             if e.waiting > 0 and e.running < 8 and (1 - e.usage) * 320 < head_blocks]
    assert len(state) >= 6, "the recording must hold the head-of-line state"
    # The first frame of the state may keep the previous verdict (a second look is required).
    for _t, eng, ours in state[1:]:
        assert eng.usage < 0.8
        assert ours.verdict is Verdict.HEAD_OF_LINE
        assert ours.headroom.slot_headroom_requests and ours.headroom.slot_headroom_requests > 0
    assert any(o.false_full for _t, _e, o in state)


def test_profile_follows_the_window_not_the_servers_lifetime() -> None:
    # The kv-full recording ran on the server that had just served 2,000+ short false-full requests:
    # lifetime p99 prompt is 20 tokens, the requests finishing in the window have 352-token prompts.
    frames = replay("kv-full")
    first = frames[0][2]
    assert first.prompt is not None and (first.prompt.upper, first.prompt.basis) == (20, "lifetime")
    loaded = [o for _t, e, o in frames if e.waiting > 0 and o.prompt is not None and o.prompt.basis == "window"]
    # 352 tokens, inside the bucket 200-500 it falls in (interpolated, not its upper bound): 11 blocks.
    assert loaded and all(o.prompt is not None and (o.prompt.tokens, o.prompt.lower, o.prompt.upper) == (352, 200, 500)
                          and o.headroom.prompt_blocks == 11 for o in loaded)
