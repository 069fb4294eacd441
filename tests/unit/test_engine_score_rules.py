"""The engine-truth scorer's label rules (tests/engine_score.py) and the judgement fixes they exposed, each on a
real recording with the recorder's steps (tests/fixtures/vllm-*/prod-*)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from exporter.pipeline import derive
from exporter.pipeline.catalogue import Limit
from exporter.pipeline.report import EngineReport
from exporter.pipeline.target import Settings, Target
from exporter.pipeline.verdict import Case, Thresholds, next_step
from tests import engine_score, fixtures
from tests.e2e.engine_truth import frame_gauges

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@functools.cache
def _load(name: str) -> engine_score.Truthful:
    return engine_score.load(FIXTURES / name)


def _sidecar_until(name: str, frame: int) -> EngineReport:
    """The sidecar's answer at `frame`, replayed on the recording's clock from its first frame."""
    tr = _load(name)
    settings = Settings("recorded", vllm_args=[str(a) for a in tr.meta["server_argv"]], discover_cmdline=False,
                        thresholds=Thresholds(false_full_hold=engine_score._hold_s(tr.meta)))
    target = fixtures.as_recorded(Target(settings), tr.meta)
    out = None
    for t, text in tr.frames[:frame + 1]:
        out = target.observe(t, text).engines
    assert out
    return out[0]


def test_a_frame_that_shows_nothing_waiting_is_ok_whatever_arrived_before_its_step() -> None:
    # vllm-0.32.0/prod-mixed: frames whose gauges (the stats made after the previous step) show no queue, joined to
    # a step that started with requests that arrived since and stopped on the budget (frame 3: 1 running, 0
    # waiting; the step began with 17).
    tr = _load("vllm-0.32.0/prod-mixed")
    unseen = [i for i, a in enumerate(tr.aligned) if a.matched and a.step is not None and a.step["w0"]
              and a.step["stop"] == "token_budget" and frame_gauges(tr.frames[i][1])[1] == 0]
    assert len(unseen) >= 3
    assert {engine_score.judge(tr, i).label for i in unseen} == {"ok"}
    # A frame that shows a queue on a budget stop keeps the engine's reason.
    j = next(k for k, a in enumerate(tr.aligned)
             if a.step is not None and a.step["stop"] == "token_budget" and frame_gauges(tr.frames[k][1])[1] > 0)
    assert engine_score.judge(tr, j).label == "budget_full"


def test_a_budget_stop_also_accepts_what_answered_for_capacity_at_the_next_scan() -> None:
    # vllm-0.10.2/prod-mixed: steps that stop on the budget, followed (nothing finishing or preempted on the way) by
    # a step whose scan reached allocate_slots and was refused.
    tr = _load("vllm-0.10.2/prod-mixed")
    steps = tr.steps.steps
    answered = [engine_score.capacity_stop(steps, j) for j, s in enumerate(steps) if s["w0"]
                and s["stop"] in engine_score.BUDGET_STOPS]
    assert "kv" in answered and None in answered
    # A step that did not stop on the budget answers for itself.
    kv = next(j for j, s in enumerate(steps) if s["stop"] == "kv")
    assert engine_score.capacity_stop(steps, kv) == "kv"


def test_undecided_agrees_without_flags_only_when_a_case_names_the_engines_reason() -> None:
    budget = engine_score.Label("budget_full", False, "token_budget: 0 tokens left", frozenset({"slots_full"}))
    slots = Case("max_num_seqs", 20, "the running count", Limit.SLOTS)
    blocks = Case("max_num_seqs", 1024, "vLLM's default", Limit.BLOCKS)
    tokens = Case("max_num_batched_tokens", 2048, "vLLM's default", Limit.TOKEN_BUDGET)
    assert engine_score.named_case(budget, (blocks, tokens))
    assert engine_score.named_case(budget, (slots, blocks))  # every slot taken: the engine reports it too
    assert not engine_score.named_case(engine_score.Label("budget_full", False, ""), (slots, blocks))
    assert not engine_score.named_case(engine_score.Label("kv_full", False, ""), (slots, tokens))


def test_the_named_case_rule_counts_apart_and_with_flags_only_over_evidence() -> None:
    scores = engine_score.score(FIXTURES / "vllm-0.32.0" / "prod-slots")
    by = {s.mode: s for s in scores}
    assert by["one-shot-noflags"].undecided_named > 0
    assert by["sidecar"].undecided_named == by["one-shot"].undecided_named == 0
    assert by["one-shot-noflags"].undecided_named <= by["one-shot-noflags"].agree
    # With flags a case over a flag's value (max_num_seqs, the budget) never agrees: the user could have stated it.
    budget = engine_score.Label("budget_full", False, "token_budget: 0 tokens left")
    tokens = Case("max_num_batched_tokens", 2048, "vLLM's default", Limit.TOKEN_BUDGET)
    small = Case("request_tokens", 36, "the profile's typical prompt, uncached", Limit.NONE)
    large = Case("request_tokens", 32768, "the profile's quantile, uncached", Limit.TOKEN_BUDGET)
    assert engine_score.named_case(budget, (tokens,)) and not engine_score.named_case(budget, (tokens,), flags=True)
    assert engine_score.named_case(budget, (small, large), flags=True)
    assert not engine_score.named_case(budget, (small, tokens), flags=True)
    # On the recordings where only the queue head's size or the LoRA split decides, the rule counts with flags.
    lora = {s.mode: s for s in engine_score.score(FIXTURES / "vllm-0.10.2" / "prod-lora")}
    assert 0 < lora["one-shot"].undecided_named <= lora["one-shot"].agree


def test_a_preemption_seconds_ago_beside_room_for_the_next_step_is_judged_by_what_binds_now() -> None:
    # vllm-0.10.2/prod-mixed frame 97, 4 s after the last preemption (t=93.1): 472 blocks free for 144 running
    # requests' next blocks and a chunk of the 8,192-token budget (256 blocks); the engine stopped on the budget.
    tr = _load("vllm-0.10.2/prod-mixed")
    assert engine_score.judge(tr, 97).label == "budget_full"
    e = _sidecar_until("vllm-0.10.2/prod-mixed", 97)
    assert str(e.verdict) != "preempting"
    # Frame 91: 30 blocks free, the head refused for KV: the storm goes on.
    assert str(_sidecar_until("vllm-0.10.2/prod-mixed", 91).verdict) == "preempting"


def test_a_frame_whose_queue_the_step_admitted_whole_is_transient_whatever_came_after() -> None:
    # vllm-0.32.0/prod-mixed frame 22: the frame shows 3 waiting; the step began with 7 (4 arrived since), admitted
    # 3 (FCFS: the frame's 3 first) and stopped on the budget for the newcomers.
    tr = _load("vllm-0.32.0/prod-mixed")
    step = tr.aligned[22].step
    assert step is not None and step["stop"] == "token_budget" and step["w0"] == 7 and len(step.adm) == 3
    assert frame_gauges(tr.frames[22][1])[1] == 3
    assert engine_score.judge(tr, 22).label == "transient"


def test_chunked_prefill_admits_a_last_partial_chunk_and_then_the_budget_ends_the_scan() -> None:
    # vllm-0.32.0/prod-budget frame 11: 62 running take ~7,200 of the 8,192-token budget a step, one 7,000-token
    # prompt waits; the engine admitted it with the ~1,000 tokens left (a first chunk) and the budget ran out.
    tr = _load("vllm-0.32.0/prod-budget")
    assert engine_score.judge(tr, 11).label == "transient"
    e = _sidecar_until("vllm-0.32.0/prod-budget", 11)
    assert e.waiting == 1 and str(e.verdict) == "transient" and e.admits is not None and e.admits >= 1
    # The budget's room counts that partial chunk; on a tie with the free blocks' heads the budget, the scan's
    # first test, ends it (vllm/v1/core/sched/scheduler.py:912 @0.32.0).
    assert next_step(10, 1, 2, 1, budget_first=True) is Limit.TOKEN_BUDGET
    assert next_step(10, 1, 2, 1) is Limit.BLOCKS
    assert derive.budget_heads(8192, 7200, 7000) == 1 and derive.budget_heads(8192, 7200, 7000, chunked=False) == 0


def _one_shot(name: str, frame: int, flags: bool = True) -> EngineReport:
    from exporter.pipeline.target import one_shot
    tr = _load(name)
    settings = Settings("recorded", vllm_args=[str(a) for a in tr.meta["server_argv"]] if flags else None,
                        discover_cmdline=False)
    t, text = tr.frames[frame]
    out = fixtures.as_recorded(one_shot(settings), tr.meta).observe(t, text, gauges_only=True).engines
    assert out
    return out[0]


def test_the_head_is_one_size_on_both_sides_of_the_budget_and_the_blocks() -> None:
    # vllm-0.32.0/prod-preempt frames 3-7: the profile (finished requests of earlier traffic) says a typical prompt of
    # 36 tokens and a quantile of 32,768; 2,000-3,000-token prompts took the 8,192-token budget, ~4 admitted a step
    # while 4,463-17,099 blocks stayed free. Blocks at the quantile against the budget at 36 tokens said kv_full;
    # one size on both sides says the budget (the steps since the last scrape spent ~8,100 of 8,192 a step).
    tr = _load("vllm-0.32.0/prod-preempt")
    for frame in (3, 4, 5, 6, 7):
        assert engine_score.judge(tr, frame).label == "budget_full"
        e = _sidecar_until("vllm-0.32.0/prod-preempt", frame)
        assert (str(e.verdict), str(e.binding_limit)) == ("budget_full", "token_budget"), frame
    # vllm-0.10.2/prod-mixed frame 77: 474 blocks free, 8k-token heads; at either size one such head fills the
    # budget before the blocks run out: the budget binds (engine: 0 tokens left, 1 admitted).
    assert engine_score.judge(_load("vllm-0.10.2/prod-mixed"), 77).label == "budget_full"
    assert str(_sidecar_until("vllm-0.10.2/prod-mixed", 77).verdict) == "budget_full"
    assert str(_one_shot("vllm-0.10.2/prod-mixed", 77).verdict) == "budget_full"


def test_one_observation_says_the_heads_size_decides_where_the_two_sizes_disagree() -> None:
    # The same prod-preempt frame alone: no step is seen; a head of the typical 36-token prompt goes in with the whole
    # queue, one at the 32k quantile lets the budget bind: what binds rests on a size one frame cannot tell, so the
    # answer says so with both cases (it said kv_full, "the other 194 wait for KV cache", before).
    from exporter.expose import diagnosis
    e = _one_shot("vllm-0.32.0/prod-preempt", 4)
    assert str(e.verdict) == "undecided" and not e.false_full
    cases = [(c.input, c.value, str(c.limit)) for c in e.decided_by]
    assert cases == [("request_tokens", 36, "none"), ("request_tokens", 32768, "token_budget")]
    text = diagnosis.explain(e)
    assert "the queue head's size" in text and "request_tokens" not in text and "`serve`" in text
    # Where both sizes agree (prod-mixed frame 77: one such head fills the budget either way), one answer.
    assert str(_one_shot("vllm-0.10.2/prod-mixed", 77).verdict) == "budget_full"


def test_without_a_finished_request_the_budget_at_the_in_flight_size_is_named_among_the_cases() -> None:
    # vllm-0.10.2/prod-never-fits without flags: one request prefills a prompt beyond the pool, 13-65 wait; the
    # engine stops on the budget. No finished request sizes the head; at what the running one holds (1,536 blocks)
    # vLLM's default budgets bind first: that is among what decides, beside max_num_seqs.
    tr = _load("vllm-0.10.2/prod-never-fits")
    assert engine_score.judge(tr, 17).label == "budget_full"
    e = _one_shot("vllm-0.10.2/prod-never-fits", 17, flags=False)
    assert str(e.verdict) == "undecided"
    limits = {(c.input, str(c.limit)) for c in e.decided_by}
    assert ("request_tokens", "token_budget") in limits and ("max_num_seqs", "slots") in limits
    # Nobody stated the budget or the cap: the advice may ask to state them, never to change them.
    assert all(a.direction in ("state", "check", "keep") for a in e.advice
               if a.setting in ("max_num_batched_tokens", "max_num_seqs"))


def test_one_observation_suspects_preemption_only_where_the_next_step_may_not_find_its_blocks() -> None:
    # vllm-0.10.2/prod-mixed frames 92-98, seconds after 5 preemptions: 472-515 blocks free for 144 running requests
    # (each asks at most one block a step) and a 256-block chunk; free blocks under two worst cases (331 each) said
    # "preempting" to one observation, the engine stopped on the budget and preempted nobody.
    tr = _load("vllm-0.10.2/prod-mixed")
    for frame in (92, 97, 98):
        step = tr.aligned[frame].step
        assert engine_score.judge(tr, frame).label == "budget_full" and step is not None and not step.pre
        assert str(_one_shot("vllm-0.10.2/prod-mixed", frame).verdict) == "budget_full", frame
    # Frame 91: 30 blocks free beside 146 running: suspected, as before.
    assert str(_one_shot("vllm-0.10.2/prod-mixed", 91).verdict) == "preempting"


def test_admission_headroom_is_a_range_where_the_heads_size_is_one() -> None:
    # vllm-0.32.0/prod-preempt frame 3: 17,099 blocks free, 210 free slots, 210 waiting; a head at the profile's
    # quantile (1,024 blocks) lets 16 in, one of its typical 36-token prompts every slot: the engine admitted 210.
    from exporter.expose import diagnosis
    tr = _load("vllm-0.32.0/prod-preempt")
    e = _sidecar_until("vllm-0.32.0/prod-preempt", 3)
    h = e.headroom
    assert (h.admission_headroom_requests, h.admission_headroom_requests_max) == (16, 210)
    assert engine_score.capacity_admitted(tr.steps.steps, tr.steps.steps.index(tr.aligned[3].step))[0] == 210
    assert diagnosis.admission_text(h) == "16-210"
    # One size known (the head fits at both ends alike): one number, as before.
    assert derive.with_head_range(h, None) is h
    narrow = dataclasses.replace(h, admission_headroom_requests_max=None)
    assert derive.with_head_range(narrow, 16).admission_headroom_requests_max is None


def test_a_late_counted_preemption_beside_room_and_no_queue_holds_nothing_back() -> None:
    # vllm-0.32.0/prod-sleep frame 17: the preemption counter rose since the last scrape (V1 counts a preemption
    # when the request's next output is processed), nothing waits and 19,015 blocks are free beside 63 running.
    tr = _load("vllm-0.32.0/prod-sleep")
    assert engine_score.judge(tr, 17).label == "ok"
    e = _sidecar_until("vllm-0.32.0/prod-sleep", 17)
    assert (e.waiting, str(e.verdict)) == (0, "ok")


def test_with_prefix_caching_the_heads_need_is_a_range_and_only_what_holds_over_it_is_claimed() -> None:
    # vllm-0.10.2/prod-kv frames 113-125: 27-28k-token heads whose chunk is 256 blocks, prefix caching on (the
    # default). The engine asked 304-573 blocks of them (the chunk and the cached blocks evictable in the free
    # queue, which no metric counts) beside 262-791 free, and stopped on the budget (113-116) or refused the head
    # (117-125). We said kv_full on all of them, from the whole prompt (874-898 blocks): right on half by luck.
    from exporter.expose import diagnosis
    name = "vllm-0.10.2/prod-kv"
    tr = _load(name)
    assert [engine_score.judge(tr, i).label for i in (114, 115, 116)] == ["budget_full"] * 3
    assert [engine_score.judge(tr, i).label for i in range(118, 122)] == ["kv_full"] * 4
    for i in (114, 115, 116, 118, 119):
        e = _one_shot(name, i)
        need = e.headroom.admission
        assert need is not None and need.least_blocks == 256 and e.headroom.prompt_blocks > e.headroom.kv_free_blocks
        # One observation: the blocks at the range's low end fit, at its high end not: what decides is said.
        assert str(e.verdict) == "undecided" and not e.false_full, (i, e.verdict)
        assert {c.input for c in e.decided_by} >= {"head_cached_blocks"}
        assert any(c.input == "head_cached_blocks" and c.limit is Limit.HEAD_PROMPT for c in e.decided_by)
        text = diagnosis.explain(e)
        assert f"taken to need 256-{e.headroom.prompt_blocks}" in text and "head_cached_blocks" not in text
        assert "cached in free blocks" in text and "`serve`" in text
        assert all(a.setting not in ("kv_capacity", "gpu_memory_utilization") or a.direction != "raise"
                   for a in e.advice), e.advice
    # The sidecar looks twice: after steps that left budget (no prefill ran), the head still waits with nothing
    # admitted or finished: its cached blocks did not fit beside its chunk (the engine: needs 565-573, 301-326 free).
    for i in (119, 120, 121):
        e = _sidecar_until(name, i)
        assert (str(e.verdict), str(e.binding_limit)) == ("kv_full", "head_prompt"), (i, e.verdict)
        assert "since the last scrape the engine's steps left token budget" in diagnosis.explain(e)
    # Frame 139: blocks grew by 256 since the last scrape while the counters show 21 tokens a step: a prefill under
    # way that vLLM counts only when it completes. The steps' budget use is then unknown, so looking twice
    # concludes nothing (the engine admitted the head at that step).
    assert engine_score.judge(tr, 139).label == "transient"
    assert str(_sidecar_until(name, 139).verdict) == "undecided"
    # Without a stated budget the chunk is the smallest vLLM may have: the same range, not a single guessed figure.
    e = _one_shot(name, 118, flags=False)
    assert e.headroom.admission is not None and e.headroom.admission.least_blocks is not None
    assert str(e.verdict) != "kv_full"


def test_a_budget_stop_that_skipped_requests_for_the_lora_cap_also_reports_the_deferral() -> None:
    tr = _load("vllm-0.32.0/prod-lora")
    # Frame 3's step skipped 42 requests whose adapter max_loras could not load, then ran out of budget.
    skipped = engine_score.judge(tr, 3)
    assert skipped.label == "budget_full" and "deferred" in skipped.also
    assert "deferred" in skipped.accepts("sidecar")
    # Frame 28's budget stop skipped none: the LoRA cap held nothing back there.
    clean = engine_score.judge(tr, 28)
    assert clean.label == "budget_full" and "deferred" not in clean.accepts("sidecar")


def test_a_step_that_spent_its_budget_admitting_the_whole_queue_is_budget_bound_too() -> None:
    tr = _load("vllm-0.10.2/prod-budget")
    # Frames 26 and 27 show the same state (60 running, 2 waiting 7,000-token prompts, the 8,192 budget): the step
    # after 26 admitted 1 and stopped on the budget; the step after 27 admitted both, the second with the last
    # tokens of the budget. Both frames are budget-bound; only the second also admitted the queue whole.
    before, after = engine_score.judge(tr, 26), engine_score.judge(tr, 27)
    assert before.label == "budget_full"
    assert after.label == "transient" and after.also == frozenset({"budget_full"})
    assert "budget_full" in after.accepts("sidecar")
    step = tr.aligned[27].step
    assert step is not None and engine_score.spent_to_empty(step)
    # A step that admitted the queue and left budget is transient only (0.32.0 prod-budget frame 25: 1,070 left).
    other = _load("vllm-0.32.0/prod-budget")
    left = other.aligned[25].step
    assert left is not None and str(left["stop"]) == "empty" and left["left"] == 1070
    assert engine_score.judge(other, 25).label == "transient" and engine_score.judge(other, 25).also == frozenset()
