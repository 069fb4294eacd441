"""Every verdict of the classifier, including those a CPU vLLM cannot be driven into (deferred, stuck,
leak): their inputs start from a recorded real engine state and change only what the verdict is about."""

from __future__ import annotations

from dataclasses import replace

from exporter.engines.base import Candidate
from exporter.pipeline.target import EngineReport, Settings, Target
from exporter.pipeline.verdict import (
    FALSE_FULL_VERDICTS,
    History,
    Limit,
    Observation,
    Thresholds,
    Tracker,
    Verdict,
    classify,
    false_full_condition,
)
from tests import fixtures

T = Thresholds()


def recorded(scenario: str) -> EngineReport:
    target = Target(Settings("t", vllm_args=fixtures.vllm_argv(scenario), discover_cmdline=False))
    return target.observe(1.0, fixtures.snapshot(scenario)).engines[0]


def obs(e: EngineReport, **changes: object) -> Observation:
    deferred = e.waiting_by_reason.get("deferred")
    base = Observation(e.running, e.waiting, None if deferred is None else int(deferred), e.headroom.panel_usage_ratio,
                       e.max_num_seqs, True, e.headroom)
    return replace(base, **changes)  # type: ignore[arg-type]


SLOTS = recorded("false-full")  # running 8/8, waiting 92, 16 of 39 blocks used
KV = recorded("kv-full")  # running 3, waiting 27, 3 blocks free
IDLE = recorded("idle")


def test_slots_full_and_kv_full_from_recorded_states() -> None:
    assert classify(obs(SLOTS), History(), T).verdict is Verdict.SLOTS_FULL
    assert classify(obs(KV), History(), T).verdict is Verdict.KV_FULL
    assert classify(obs(IDLE), History(), T).verdict is Verdict.OK


def test_preempting_needs_activity() -> None:
    assert classify(obs(KV), History(preempted_recently=True), T).verdict is Verdict.PREEMPTING
    assert classify(obs(IDLE), History(preempted_recently=True), T).verdict is Verdict.OK


def test_deferred_when_every_waiting_request_is_deferred() -> None:
    free_slots = obs(SLOTS, running=4, deferred=92)
    assert classify(free_slots, History(), T).verdict is Verdict.DEFERRED
    # Some wait for capacity too: the capacity cause is named instead. 92 wait for 4 free slots while the free
    # blocks hold 23 more: the next step fills the slots and the rest wait for one (issue 19, kind 9).
    assert classify(obs(SLOTS, running=4, deferred=10), History(), T).verdict is Verdict.SLOTS_FULL


def test_stuck_after_no_progress_asleep_is_sleeping() -> None:
    assert classify(obs(SLOTS), History(no_progress_for=61.0), T).verdict is Verdict.STUCK
    assert classify(obs(SLOTS), History(no_progress_for=59.0), T).verdict is Verdict.SLOTS_FULL
    # An engine put to sleep is not hung: its own verdict (a wake-up, not a restart), never a false-full one.
    asleep = classify(obs(SLOTS, awake=False), History(no_progress_for=600.0), T).verdict
    assert asleep is Verdict.SLEEPING and asleep not in FALSE_FULL_VERDICTS


def test_leak_when_blocks_stay_used_with_nothing_to_do() -> None:
    leaking = obs(SLOTS, running=0, waiting=0)  # 16 blocks used, nothing running or waiting
    assert classify(leaking, History(idle_with_blocks_for=121.0), T).verdict is Verdict.LEAK
    assert classify(leaking, History(idle_with_blocks_for=100.0), T).verdict is Verdict.OK


def test_head_of_line_needs_a_second_look_in_a_running_sidecar() -> None:
    # 5 of 8 running and 2 waiting beside 23 free blocks for 1-block heads: the next step could admit both. Before
    # issue 19 this used 92 waiting, which the next step cannot admit (3 free slots): slots bind there (kind 9).
    hol = obs(SLOTS, running=5, waiting=2)
    once = classify(hol, History(one_shot=True), T)
    assert once.verdict is Verdict.TRANSIENT and once.suspected  # one observation cannot tell
    first = classify(hol, History(previous=Verdict.SLOTS_FULL), T)
    assert first.verdict is Verdict.TRANSIENT and first.head_of_line_candidate and first.first_look
    # The previous scrape showed the same room, nothing was admitted and nothing finished since.
    second = classify(hol, History(previous=Verdict.TRANSIENT, head_of_line_before=True), T)
    assert second.verdict is Verdict.HEAD_OF_LINE
    assert classify(obs(SLOTS, running=5), History(), T).verdict is Verdict.SLOTS_FULL  # 92 wait for 3 slots


def test_slots_inferred_from_a_running_plateau_when_max_num_seqs_is_unknown() -> None:
    unknown = obs(SLOTS, max_num_seqs=None)
    j = classify(unknown, History(running_ceiling=8, waiting_on_previous=True, previous=Verdict.OK), T)
    assert (j.verdict, j.slots_inferred) == (Verdict.SLOTS_FULL, True)


def test_tracker_holds_false_full_and_resets_it() -> None:
    tracker = Tracker(Thresholds(false_full_hold=30.0))
    progress = 0.0
    flags = []
    for t in range(0, 40, 5):
        progress += 1
        _j, held = tracker.update(float(t), obs(SLOTS), 0.0, (progress, progress))
        flags.append(held)
    assert flags == [False] * 6 + [True, True]  # 0..25 s not yet, 30 s and 35 s held
    _j, held = tracker.update(40.0, obs(IDLE), 0.0, (progress, progress))
    assert held is False


def test_tracker_sees_stuck_and_preemptions_over_time() -> None:
    tracker = Tracker(T)
    j, _ = tracker.update(0.0, obs(SLOTS), 0.0, (1.0, 1.0))
    assert j.verdict is Verdict.SLOTS_FULL
    j, _ = tracker.update(61.0, obs(SLOTS), 0.0, (1.0, 1.0))  # no step for 61 s while 92 wait
    assert j.verdict is Verdict.STUCK and tracker.seconds_without_progress == 61.0
    j, _ = tracker.update(62.0, obs(KV), 3.0, (2.0, 2.0))
    assert j.verdict is Verdict.PREEMPTING and tracker.preemptions_per_second == 3.0
    j, _ = tracker.update(200.0, obs(KV), 3.0, (3.0, 3.0))  # the last preemption is older than the window
    assert j.verdict is Verdict.KV_FULL


def test_idle_engine_is_never_stuck() -> None:
    tracker = Tracker(T)
    tracker.update(0.0, obs(IDLE), 0.0, (1.0, 1.0))
    tracker.update(500.0, obs(IDLE), 0.0, (1.0, 1.0))  # idle for minutes: no steps, nothing to do
    j, _ = tracker.update(501.0, obs(SLOTS), 0.0, (1.0, 1.0))
    assert j.verdict is Verdict.SLOTS_FULL


def test_false_full_needs_low_usage_and_a_non_kv_verdict() -> None:
    assert false_full_condition(obs(SLOTS), Verdict.SLOTS_FULL, T)  # 41 % used, every slot taken
    assert not false_full_condition(obs(SLOTS, usage=0.85), Verdict.SLOTS_FULL, T)  # the pool is busy too
    assert not false_full_condition(obs(KV), Verdict.KV_FULL, T)
    assert not false_full_condition(obs(SLOTS, usage=0.3), Verdict.KV_FULL, T)  # true capacity, not false-full
    assert not false_full_condition(obs(SLOTS, waiting=0), Verdict.SLOTS_FULL, T)


# -- issue 19: what binds now, over the values an unknown input may have --------------------------------------------
CPU_GPU = (Candidate(128, "CPU"), Candidate(256, "a GPU under 70 GiB"), Candidate(1024, "a GPU from 70 GiB"))


def test_a_queue_the_next_step_cannot_admit_is_bound_by_what_runs_out_first() -> None:
    # 7 of 8 running (a request finished since the last step), 92 waiting, 23 free blocks for 1-block heads: the
    # next step fills the one free slot; the slots bind (a cap met within one step's turnover).
    j = classify(obs(SLOTS, running=7), History(), T)
    assert (j.verdict, j.binds, j.admits) == (Verdict.SLOTS_FULL, Limit.SLOTS, 1)
    # 1 of 8 running: the 7 free slots run out before the free blocks' 23 heads of 1 block: still the slots.
    assert classify(obs(SLOTS, running=1), History(), T).binds is Limit.SLOTS
    # The queue fits the next step: nothing binds yet.
    j = classify(obs(SLOTS, running=7, waiting=1), History(one_shot=True), T)
    assert (j.verdict, j.binds) == (Verdict.TRANSIENT, Limit.NONE)


def test_blocks_that_hold_fewer_heads_than_wait_bind_before_free_slots() -> None:
    # kv-full's 3 running, 27 waiting, 3 free blocks (92 % used): the 11-block head does not fit (whatever the usage).
    assert classify(obs(KV), History(), T).binds is Limit.HEAD_PROMPT
    # With 25 blocks free (2 heads) and 5 free slots: the next step admits 2 and the pool binds the rest.
    roomy = obs(KV, headroom=replace(KV.headroom, kv_free_blocks=25, kv_used_blocks=13, head_admissible=True,
                                      kv_admission_headroom_requests=2), usage=0.33)
    j = classify(roomy, History(one_shot=True), T)
    assert (j.verdict, j.binds, j.admits) == (Verdict.KV_FULL, Limit.BLOCKS, 2)


def test_an_unknown_cap_is_undecided_unless_every_value_it_may_have_agrees() -> None:
    unknown = obs(SLOTS, max_num_seqs=None, max_num_seqs_candidates=CPU_GPU)
    j = classify(unknown, History(one_shot=True), T)
    # 92 waiting, room for 23: at 8 (the running count) the slots bind, at vLLM's defaults the pool does.
    assert (j.verdict, j.binds) == (Verdict.UNDECIDED, Limit.UNDECIDED)
    assert [(c.value, c.limit) for c in j.decided_by] == [(8, Limit.SLOTS), (128, Limit.BLOCKS), (256, Limit.BLOCKS),
                                                          (1024, Limit.BLOCKS)]
    assert not false_full_condition(unknown, j.verdict, T)
    # A queue the free blocks hold: at 8 the slots bind, at the defaults vLLM admits it at its next step. The cap
    # decides, so the answer is undecided (it was `transient`, a conclusion that holds on one side of the cap only).
    small = classify(replace(unknown, waiting=5), History(one_shot=True), T)
    assert small.verdict is Verdict.UNDECIDED and {c.limit for c in small.decided_by} == {Limit.SLOTS, Limit.NONE}


def test_an_assumed_budget_decides_only_if_it_binds_at_every_default() -> None:
    budgets = (Candidate(2048, "CPU"), Candidate(8192, "a GPU from 70 GiB"), Candidate(16384, "a GPU from 160 GiB"))
    # 2 running, 6 free slots, 23 free blocks, typical prompts of 3,072 tokens: the budget lets 0.7, 2.7 or 5.3
    # prefills start per step. 4 waiting: at 16,384 the next step admits them all, at 2,048 the budget binds.
    wait = obs(SLOTS, running=2, waiting=4, budget_candidates=budgets, prompt_tokens=3072)
    j = classify(wait, History(), T)
    assert j.verdict is Verdict.UNDECIDED
    assert {(c.value, c.limit) for c in j.decided_by} == {(2048, Limit.TOKEN_BUDGET), (8192, Limit.TOKEN_BUDGET),
                                                          (16384, Limit.NONE)}
    # 7 waiting: more than even 16,384 tokens let start (5.3, the sixth with a partial chunk): the budget binds at
    # every default.
    filled = classify(replace(wait, waiting=7), History(), T)
    assert (filled.verdict, filled.binds) == (Verdict.BUDGET_FULL, Limit.TOKEN_BUDGET)
    # 16-token prompts: the slots run out first whatever the budget.
    assert classify(replace(wait, waiting=60, prompt_tokens=16), History(), T).binds is Limit.SLOTS


def test_risk_never_vetoes_the_flag_nor_makes_memory_bind() -> None:
    pressed = obs(SLOTS, memory_pressure=True, thin_profile=False)
    j = classify(pressed, History(), T)
    assert j.verdict is Verdict.SLOTS_FULL and false_full_condition(pressed, j.verdict, T)


def test_a_producer_holding_blocks_is_ok_never_a_leak() -> None:
    held = obs(SLOTS, running=0, waiting=0, kv_role="kv_producer")
    j = classify(held, History(idle_with_blocks_for=600.0), T)
    assert (j.verdict, j.producer_holding) == (Verdict.OK, True)
    leak = classify(replace(held, kv_role="kv_consumer"), History(idle_with_blocks_for=600.0), T)
    assert leak.verdict is Verdict.LEAK


def test_stuck_is_the_last_reading() -> None:
    stalled = History(no_progress_for=600.0)
    assert classify(obs(SLOTS, running=0, deferred=92), stalled, T).verdict is Verdict.DEFERRED
    assert classify(obs(SLOTS), stalled, T).verdict is Verdict.STUCK  # running requests that make no step


def test_gauges_that_read_idle_while_unfinished_requests_generate_are_unreliable() -> None:
    tracker = Tracker(T)
    busy = obs(SLOTS, finished_total=100.0, finished_any=100.0)
    j, _ = tracker.update(0.0, busy, 0.0, (10.0, 1000.0))
    assert j.verdict is Verdict.SLOTS_FULL and j.gauges_reliable
    zero = replace(obs(IDLE), finished_total=100.0, finished_any=100.0)
    # 512 tokens over 500 steps (one request decoding: no load the step counter shows), none of them by a request
    # that finished: it is in flight now, whatever the gauges say.
    j, _ = tracker.update(0.5, replace(zero, unfinished_tokens=512.0), 0.0, (510.0, 1512.0))
    assert (j.verdict, j.gauges_reliable) == (Verdict.SLOTS_FULL, False)
    # A real drain: every request in flight finished, their tokens accounted for: consistent, ok.
    drained = Tracker(T)
    drained.update(0.0, busy, 0.0, (10.0, 1000.0))
    j, _ = drained.update(0.5, replace(zero, finished_total=200.0, finished_any=200.0, unfinished_tokens=-40.0),
                          0.0, (510.0, 1512.0))
    assert (j.verdict, j.gauges_reliable) == (Verdict.OK, True)


def test_with_no_request_seen_the_head_is_taken_at_max_model_len_for_headroom_never_for_a_kv_claim() -> None:
    # The idle recording: nothing has run or finished. The admission headroom takes a prompt as long as
    # max_model_len (16 blocks: 39 // 16 = 2 more now, never 39 one-block prompts, issue 11); a queue beside that
    # guess is not kv_full (issue 19): no request backs the size.
    assert (IDLE.headroom.prompt_blocks, IDLE.headroom.admission_headroom_requests) == (16, 39 // 16)
    queued = classify(obs(IDLE, waiting=3, profile_backed=False), History(one_shot=True), T)
    # The free blocks hold 2 such heads of the 3: the head's size decides (it was `transient`, a claim that holds
    # only for smaller heads); the sidecar's first look stays transient, its second look tells.
    assert queued.verdict is Verdict.UNDECIDED and {c.limit for c in queued.decided_by} == {Limit.BLOCKS, Limit.NONE}
    assert classify(obs(IDLE, waiting=3, profile_backed=False), History(), T).verdict is Verdict.TRANSIENT


def test_a_lifetime_profile_never_turns_known_full_slots_into_kv_full() -> None:
    # Real 0.32.0 (e2e, `probe` slots-bound on the 320-block server after 4,000-token prompts): 8 of 8 slots taken,
    # 90 blocks free, a 16-token head; nothing had finished within the window, so the head was sized by vLLM's
    # lifetime histogram, whose prompts were another test's. It was said kv_full. The slots bind for certain; only
    # requests finished within the window may add "and memory too".
    big_head = replace(SLOTS.headroom, prompt_blocks=SLOTS.headroom.kv_free_blocks + 1, head_may_be_admissible=False)
    assert not big_head.head_fits and not big_head.head_may_fit
    lifetime = obs(SLOTS, headroom=big_head, profile_backed=True, profile_recent=False)
    assert classify(lifetime, History(), T).verdict is Verdict.SLOTS_FULL
    recent = obs(SLOTS, headroom=big_head, profile_backed=True, profile_recent=True)
    assert classify(recent, History(), T).verdict is Verdict.KV_FULL
