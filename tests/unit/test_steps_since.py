"""What the sidecar reads from the engine's steps between two scrapes, checked against the engine's own per-step
truth (tests/fixtures/vllm-*/prod-*: the scheduler's state written at every step by the truth plugin):

- a queue the last scrape did not show, admitted whole at the typical prompt's size, is a first look (transient,
  with the head's size as what decides), not undecided: the next scrape tells;
- steps that spent the token budget end vLLM's scan before any head's blocks are asked (`while token_budget > 0`,
  vllm/v1/core/sched/scheduler.py:334 @0.10.2), also where the blocks' growth, not the counters, shows the spending
  (0.10.2 counts a prompt's tokens only when its prefill completes);
- a scrape after no engine step (no counter moved, the same gauges and blocks) repeats the last answer: vLLM's
  stats are the ones already judged, and a second look at a head no step examined says nothing about it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from exporter.engines.base import EngineSample
from exporter.engines.vllm import VLLM
from exporter.pipeline import exposition
from exporter.pipeline.catalogue import Limit, Verdict
from exporter.pipeline.judge import EngineHistory
from exporter.pipeline.report import EngineReport
from exporter.pipeline.target import Settings, Target
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording
from tests import engine_score, fixtures

MIXED = fixtures.ROOT / "prod-mixed"  # vLLM 0.32.0
KV_OLD = fixtures.ROOT.parent / "vllm-0.10.2" / "prod-kv"


@functools.cache
def _sidecar(folder: Path) -> tuple[EngineReport | None, ...]:
    rec = recording.load(folder)
    meta = rec.meta
    settings = Settings("recorded", vllm_args=[str(a) for a in meta["server_argv"]], discover_cmdline=False,
                        thresholds=Thresholds(false_full_hold=engine_score._hold_s(meta)))
    target = fixtures.as_recorded(Target(settings), meta)
    out = []
    for t, text in rec.frames:
        engines = target.observe(t, text).engines
        out.append(engines[0] if engines else None)
    return tuple(out)


def test_a_queue_the_last_scrape_did_not_show_is_a_first_look() -> None:
    tr = engine_score.load(MIXED)
    answers = _sidecar(MIXED)
    # Frames 14 and 29: 3 and 2 requests appeared beside 28 and 71 running; the profile's typical prompt (~1,200
    # tokens) is admitted whole, its 29k-token quantile would take the budget. The engine admitted all of them.
    for i in (14, 29):
        assert engine_score.judge(tr, i).label == "transient"
        before, e = answers[i - 1], answers[i]
        assert before is not None and before.waiting == 0
        assert e is not None and e.waiting > 0
        assert e.verdict is Verdict.TRANSIENT and not e.false_full
        assert {c.input for c in e.decided_by} == {"request_tokens"}  # what the next scrape decides
        assert {c.limit for c in e.decided_by} == {Limit.NONE, Limit.TOKEN_BUDGET}


def test_steps_that_spent_the_budget_end_the_scan_before_a_cached_head() -> None:
    tr = engine_score.load(KV_OLD)
    answers = _sidecar(KV_OLD)
    # Frame 137: a 28k-token head whose chunk fits the 644 free blocks and whose whole prompt (if cached after a
    # preemption) does not; since the last scrape the used blocks grew by 12,800 tokens a step while the counters
    # showed 21 (decodes): the steps spent the 8,192-token budget. The engine stopped on the budget.
    assert engine_score.judge(tr, 137).label == "budget_full"
    e = answers[137]
    assert e is not None and e.verdict is Verdict.BUDGET_FULL and e.binding_limit is Limit.TOKEN_BUDGET


def test_a_scrape_after_no_engine_step_repeats_the_last_answer() -> None:
    tr = engine_score.load(KV_OLD)
    answers = _sidecar(KV_OLD)
    # Frames 137/138 and 115/116: a CPU step longer than the 1 s scrape interval; the second frame shows the same
    # step's stats (the engine's own step index is the same) and no counter moved.
    for first, second in ((137, 138), (115, 116)):
        assert tr.aligned[first].step is tr.aligned[second].step
        a, b = answers[first], answers[second]
        assert a is not None and b is not None
        assert (b.verdict, b.binding_limit, b.decided_by) == (a.verdict, a.binding_limit, a.decided_by)
    # Before, frame 116 was read as a second look at a head that stood (`head_of_line_before`) though no step had
    # examined it; it now says what frame 115 said.
    assert answers[138] is not None and answers[138].verdict is Verdict.BUDGET_FULL


BURST_OLD = fixtures.ROOT.parent / "vllm-0.10.2" / "prod-burst"


def test_a_body_that_came_late_is_judged_over_the_time_it_can_span() -> None:
    # Frame 4 was asked for at 4.06 s and shows idle gauges, while 119 requests of ~3 s e2e latency finished since
    # frame 3 (3.07 s, idle too). The engine's own step log: the burst arrived at 3.78 s, and frame 4's counters are
    # those of its step at 6.35 s (the busy API server answered /metrics 2.3 s late; the recorder kept only the
    # request's time, so the response's is taken from the step log here). Over the 1 s between the requests those
    # requests must have been in flight at frame 3, unseen; over the 3.3 s the two bodies can span, none had to be.
    tr = engine_score.load(BURST_OLD)
    assert engine_score.judge(tr, 4).label == "ok"
    (t3, text3), (t4, text4) = recording.load(BURST_OLD).frames[3:5]
    sample3, sample4 = (exposition_engine(text) for text in (text3, text4))
    for received, lived in ((None, 119), (t4 + 2.3, 0)):
        history = EngineHistory(Thresholds(), one_shot=False)
        assert history.latency_since(t3, sample3) is None  # the first scrape: no interval yet
        since = history.latency_since(t4, sample4, received)
        assert since is not None and since[0] == lived
        assert since[2] == pytest.approx((received or t4) - t3)
    # Left as it was: one interval that held 119 finished requests beside idle readings at both ends puts ~107 in
    # flight on average, the same sign vllm-rs gives on its first loaded interval (test_issue19_kinds, kind 6):
    # from the counters alone a burst that came and went between two bodies is not told apart, and the answer is
    # the gauges' doubt (undecided), never `ok` while they may be stale.


def exposition_engine(text: str) -> EngineSample:
    [engine] = VLLM.read(exposition.parse(text), None).engines
    return engine
