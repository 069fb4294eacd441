"""vLLM's LoRA cap (`--max-loras`) as a limit: the judgement and the admission headroom, from the recordings whose
engine wrote its own per-step truth (tests/fixtures/vllm-*/prod-lora: `--enable-lora --max-loras 1`, two adapters).

vLLM skips a waiting request whose adapter is not among the step's adapters once they number max_loras, and its
scan goes on to the next request (vllm/v1/core/sched/scheduler.py:364-372 @0.10.2, :941-952 @0.32.0). 0.10.2
exports no deferred count: `vllm:lora_requests_info` (the adapters with requests waiting and running) is the
evidence, and it names adapters, not how many requests each has; 0.32.0 counts a request deferred from its first
skip until it is admitted (`deferred_waiting`, :903-910/:1344), so the count outlives the cause.
"""

from __future__ import annotations

import functools
from pathlib import Path

from exporter.engines.vllm.read import lora_state
from exporter.pipeline import exposition
from exporter.pipeline.catalogue import Limit, Verdict
from exporter.pipeline.report import EngineReport
from exporter.pipeline.target import Settings, Target, one_shot
from exporter.pipeline.verdict import Thresholds, lora_admissible
from exporter.replay import recording
from tests import engine_score, fixtures

OLD = fixtures.ROOT.parent / "vllm-0.10.2" / "prod-lora"
NEW = fixtures.ROOT / "prod-lora"


def _settings(folder: Path) -> Settings:
    meta = recording.load(folder).meta
    return Settings("recorded", vllm_args=[str(a) for a in meta["server_argv"]], discover_cmdline=False,
                    thresholds=Thresholds(false_full_hold=engine_score._hold_s(meta)))


@functools.cache
def _sidecar(folder: Path) -> tuple[EngineReport | None, ...]:
    """The sidecar's answer at every frame of a recording, replayed on its clock."""
    rec = recording.load(folder)
    target = fixtures.as_recorded(Target(_settings(folder)), rec.meta)
    out = []
    for t, text in rec.frames:
        engines = target.observe(t, text).engines
        out.append(engines[0] if engines else None)
    return tuple(out)


def _one_shot(folder: Path, i: int) -> EngineReport:
    rec = recording.load(folder)
    t, text = rec.frames[i]
    return fixtures.as_recorded(one_shot(_settings(folder)), rec.meta).observe(t, text, gauges_only=True).engines[0]


def _lora_at(folder: Path, i: int) -> tuple[int, int] | None:
    text = recording.load(folder).frames[i][1]
    state = lora_state(exposition.parse(text))
    assert state is not None
    waiting = int(next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("vllm:num_requests_waiting{")))
    return lora_admissible(state.max_lora, state.waiting, state.running, waiting)


def test_the_lora_info_bounds_what_the_cap_lets_through() -> None:
    # 0.10.2 frame 4: adapter-b runs, adapter-a waits, max_lora 1: every adapter-a request is skipped; the 104
    # waiting may hold base-model requests (not shown): 0 to 103 pass. Frame 5: adapter-b waits too: 1 to 112.
    assert _lora_at(OLD, 4) == (0, 103)
    assert _lora_at(OLD, 5) == (1, 112)
    # Frame 12: nothing runs, adapter-a waits: max_lora still loads it, nothing is held back.
    assert _lora_at(OLD, 12) is None
    # 0.32.0's LoRA info names a waiting adapter only while its first output is processed (QUEUED rides on it:
    # vllm/v1/metrics/stats.py:569-575 @0.32.0): here it shows the running adapter waiting, never the held one.
    assert _lora_at(NEW, 8) is None


def test_the_sidecar_says_deferral_where_the_engine_skipped_every_waiting_request() -> None:
    tr = engine_score.load(OLD)
    answers = _sidecar(OLD)
    deferred = [i for i in range(len(tr.frames)) if engine_score.judge(tr, i).label == "deferred"]
    assert len(deferred) >= 20
    said = [i for i in deferred if answers[i] is not None and answers[i].verdict is Verdict.DEFERRED]
    # Frame 4, before any request finished: with chunked prefill the steps since the last scrape spent 475 tokens
    # of the 8,192 budget, so the budget left room and the LoRA cap held the queue, whatever a prompt's size.
    assert set(deferred) == set(said)
    for i in said:
        e = answers[i]
        assert e is not None and e.binding_limit is Limit.DEFERRAL
        assert any(c.startswith("LoRA: adapters adapter-") for c in e.deferred_causes), e.deferred_causes


def test_the_budget_still_binds_where_the_running_adapter_fills_the_steps() -> None:
    # 0.10.2 frames 13 and 14: adapter-a runs and its requests fill 8,192-token steps (the steps since the last
    # scrape used the budget) while adapter-b waits: the engine stopped on the budget.
    tr = engine_score.load(OLD)
    answers = _sidecar(OLD)
    for i in (13, 14):
        assert engine_score.judge(tr, i).label == "budget_full"
        e = answers[i]
        assert e is not None and e.verdict is Verdict.BUDGET_FULL
        # The admission headroom is a range: the exposition does not say how many adapter-a requests wait.
        h = e.headroom
        assert h.admission_headroom_requests_max is not None
        assert h.admission_headroom_requests <= e.waiting - 1 <= h.admission_headroom_requests_max


def test_one_observation_names_what_decides_instead_of_guessing() -> None:
    e = _one_shot(OLD, 5)
    assert e.verdict is Verdict.UNDECIDED
    cases = {(c.input, c.value, c.limit) for c in e.decided_by}
    assert ("lora_admissible_requests", 1, Limit.DEFERRAL) in cases
    assert any(c.input == "lora_admissible_requests" and c.value == 112 and c.limit is Limit.TOKEN_BUDGET
               for c in e.decided_by)
    assert e.headroom.admission_headroom_requests == 1 and e.headroom.admission_headroom_requests_max == 112


def test_a_deferred_count_that_falls_is_no_deferral_of_the_whole_queue() -> None:
    # 0.32.0 frames 29-31: every waiting request is still counted deferred (skipped while adapter-a ran), but the
    # count fell since the last scrape: adapter-b runs now and they are admitted at the budget's pace.
    tr = engine_score.load(NEW)
    answers = _sidecar(NEW)
    for i in (13, 29, 30, 31):
        e = answers[i]
        assert engine_score.judge(tr, i).label == "budget_full"
        assert e is not None and e.waiting_by_reason.get("deferred", 0) >= e.waiting
        assert e.verdict is Verdict.BUDGET_FULL, (i, e.verdict)
    # While the count grows, the deferral holds, and the next step admits only what vLLM does not count deferred.
    for i in range(4, 13):
        e = answers[i]
        assert engine_score.judge(tr, i).label == "deferred"
        assert e is not None and e.verdict is Verdict.DEFERRED
        assert e.headroom.admission_headroom_requests == 0


def test_the_deferral_never_says_a_running_adapter_waits_for_a_slot() -> None:
    """0.32.0 frame 8 (real recording): 168 of 168 waiting counted deferred, the engine skipped 170 adapter-a
    requests for LoRA (the driver's record: 168 adapter-a waiting, 32 adapter-b running), and vLLM's LoRA info
    names adapter-b both running and waiting. Before: "LoRA: adapters adapter-b wait for a slot (max_lora 1,
    running adapter-b)". After: the adapters named run, and this release does not name the one held back. On
    0.10.2 (frame 8: adapter-a waiting, adapter-b running) the held adapter is named as before."""
    new = _one_shot(NEW, 8)
    assert new.verdict is Verdict.DEFERRED
    assert not any("adapter-b wait for a slot" in c for c in new.deferred_causes), new.deferred_causes
    assert any("does not name an adapter held back" in c for c in new.deferred_causes), new.deferred_causes
    old = _one_shot(OLD, 8)
    assert any(c.startswith("LoRA: adapters adapter-a wait for a slot") for c in old.deferred_causes), \
        old.deferred_causes
