"""Issue 19, acceptance line 1: every answer is one judgement (tests/consistency.py holds the rules as data).

Over every recorded real timeline (each release under tests/fixtures and the demo's incident), in the sidecar
replayed on the recording's clock and in one-shot `diagnose` of each frame, with and without the recorded
command line, and over hypothesis-generated states written into recorded frames: no explanation naming a limit
that the flag, the binding limit or the advice contradicts; no advice changing an inferred or assumed value (or
sized by a worst case no finished request backs); no KV-full from a risk bound; no `ok` while requests wait.

`BEFORE` and `GENERATED_BEFORE` keep the counts of contradicting answers before issue 19 (`python -m
tests.consistency` prints them per rule, release, mode and verdict); the one judgement brings every one to 0.
The self-tests at the end plant each contradiction into a clean recorded answer and must stay green.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from exporter.pipeline.verdict import Verdict
from exporter.replay import recording
from tests import consistency as c

# Before issue 19 (commit 8c658ca): contradicting answers per rule, over all recorded timelines.
BEFORE = {
    "sidecar": "advice_contradicts_claim 417, advice_from_a_guessed_worst_case 1120, binding_contradicts_claim 95, "
               "flag_contradicts_claim 65, kv_full_from_a_risk_bound 39, ok_while_requests_wait 18",
    "sidecar-noflags": "advice_contradicts_claim 926, advice_from_a_guessed_worst_case 1036, "
                       "binding_contradicts_claim 209, changes_a_guessed_value 43, flag_contradicts_claim 66, "
                       "kv_full_from_a_risk_bound 23, ok_while_requests_wait 2",
    "one-shot": "advice_contradicts_claim 944, advice_from_a_guessed_worst_case 865, binding_contradicts_claim 68, "
                "flag_contradicts_claim 64, kv_full_from_a_risk_bound 14",
    "one-shot-noflags": "advice_contradicts_claim 535, advice_from_a_guessed_worst_case 783, "
                        "kv_full_from_a_risk_bound 14",
}
GENERATED_BEFORE = ("200 derandomized timelines: advice_contradicts_claim 52, advice_from_a_guessed_worst_case 631, "
                    "binding_contradicts_claim 117, changes_a_guessed_value 204, flag_contradicts_claim 12, "
                    "kv_full_from_a_risk_bound 166, ok_while_requests_wait 22")


def _report(counts: c.Tally, examples: dict[tuple[str, str], str]) -> str:
    by_rule = c.summary(counts, (0,))
    by_release = c.summary(counts, (0, 1))
    lines = []
    for (rule,), n in sorted(by_rule.items()):
        releases = ", ".join(f"{rel} {m}" for (r, rel), m in sorted(by_release.items()) if r == rule)
        example = next((v for (r, _m), v in examples.items() if r == rule), "")
        lines.append(f"{rule}: {n} answers ({releases}); e.g. {example}")
    return "\n".join(lines)


@pytest.mark.parametrize("mode", c.MODES)
def test_every_recorded_answer_is_one_judgement(mode: str) -> None:
    """0 contradicting answers in every mode (before issue 19: `BEFORE`)."""
    examples: dict[tuple[str, str], str] = {}
    counts = c.tally(modes=(mode,), examples=examples)
    assert not counts, "contradicting answers:\n" + _report(counts, examples)


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(c.timelines_strategy())
def test_every_generated_answer_is_one_judgement(case: tuple[str, int, int | None, bool, bool, list[c.State]]) -> None:
    """0 contradicting answers over the generated states (before issue 19: `GENERATED_BEFORE`)."""
    template, blocks, cap, flags, histograms, states = case
    for mode, answer, held in c.generated_answers(template, blocks, cap, flags, states, histograms):
        found = c.check(answer, held)
        assert not found, f"{mode}: " + "; ".join(f"{v.rule}: {v.detail}" for v in found)


# -- the check itself: it must catch each contradiction planted into a clean recorded answer -------------------
def _first(folder: str, mode: str, verdict: str) -> dict[str, Any]:
    """The first answer of `verdict` that the check finds clean, in a recorded timeline."""
    rec = recording.load(c.FIXTURES / folder)
    for _t, answer, held in c.replay(rec.meta, rec.frames, mode):
        if answer["verdict"] == verdict and not c.check(answer, held):
            return answer
    raise AssertionError(f"no clean {verdict} answer in {folder} ({mode})")


def _rules(answer: dict[str, Any], held: float | None = None) -> set[str]:
    return {v.rule for v in c.check(answer, held)}


@pytest.fixture(scope="module")
def kv_full() -> dict[str, Any]:
    # 0.32.0 kv-full, the sidecar: 3 requests hold 36 of 39 blocks, the 11-block head does not fit.
    a = _first("vllm-0.32.0/kv-full", "sidecar", "kv_full")
    assert a["kv_free_blocks"] < a["prompt_blocks"] and not a["false_full"] and a["binding_limit"] == "head_prompt"
    return a


@pytest.fixture(scope="module")
def idle() -> dict[str, Any]:
    # 0.32.0 false-full, the sidecar, once the queue has drained (its profile is backed by finished requests).
    a = _first("vllm-0.32.0/false-full", "sidecar", "ok")
    assert a["requests_waiting"] == 0
    return a


def _planted(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    a = copy.deepcopy(base)
    a.update(changes)
    return a


def test_a_clean_recorded_answer_passes(kv_full: dict[str, Any], idle: dict[str, Any]) -> None:
    assert _rules(kv_full) == set() and _rules(idle) == set()


def test_the_check_catches_a_flag_that_contradicts_the_claim(kv_full: dict[str, Any]) -> None:
    assert "flag_contradicts_claim" in _rules(_planted(kv_full, false_full=True))
    # slots bind, the panel is low, one observation (no hold): the flag must be up.
    slots = _planted(kv_full, verdict="slots_full", binding_limit="slots", panel_usage_ratio=0.3, advice=[],
                     actions=[], explanation="30 % of blocks are in use, but all 8 slots are taken; 20 requests wait "
                     "for a slot, not for memory.")
    assert _rules(slots) == {"flag_contradicts_claim"}
    assert _rules(slots, held=c.HOLD - 0.5) == set()  # the sidecar's hold has not passed yet
    assert _rules(slots, held=c.HOLD) == {"flag_contradicts_claim"}


def test_the_check_catches_a_binding_limit_that_contradicts_the_claim(kv_full: dict[str, Any]) -> None:
    assert _rules(_planted(kv_full, binding_limit="slots")) == {"binding_contradicts_claim",
                                                                "binding_outside_catalogue"}
    # A limit the claim allows but the verdict's catalogue entry (the reference page's "binding limit") does not.
    blocks_head = _rules(_planted(kv_full, verdict="head_of_line", binding_limit="blocks"))
    assert "binding_outside_catalogue" in blocks_head and "binding_contradicts_claim" not in blocks_head
    # An explanation that says "a slot, not memory" on a memory verdict contradicts its own binding limit.
    said = _planted(kv_full, explanation=kv_full["explanation"] + " Requests wait for a slot, not for memory.")
    assert "binding_contradicts_claim" in _rules(said)
    conditional = _planted(kv_full, explanation=kv_full["explanation"] + " If it is 8, requests wait for a slot, "
                           "not for memory.")
    assert _rules(conditional) == set()


def test_the_check_catches_advice_that_contradicts_the_claim(kv_full: dict[str, Any]) -> None:
    raise_seqs = {"setting": "max_num_seqs", "direction": "raise", "current": 8, "current_source": "vllm_args",
                  "target": [10, 12], "margin": "", "reason": "planted", "text": "raise max_num_seqs: planted"}
    assert _rules(_planted(kv_full, advice=[*kv_full["advice"], raise_seqs])) == {"advice_contradicts_claim"}
    never = _planted(kv_full, verdict="never_fits", binding_limit="pool_size", requests_running=0,
                     actions=[*kv_full["actions"], "check the engine log; restart the pod if the engine is hung"])
    assert "advice_contradicts_claim" in _rules(never)


def test_the_check_catches_advice_that_changes_a_guessed_value(kv_full: dict[str, Any]) -> None:
    lower = {"setting": "max_num_seqs", "direction": "lower", "current": 21, "current_source": "inferred",
             "target": [8, 9], "margin": "", "reason": "planted", "text": "lower max_num_seqs: planted"}
    assert "changes_a_guessed_value" in _rules(_planted(kv_full, advice=[lower]))
    budget = {"setting": "max_num_batched_tokens", "direction": "raise", "current": 2048, "current_source": "default",
              "target": ">= 4,096", "margin": "", "reason": "planted", "text": "raise max_num_batched_tokens: planted"}
    assert "changes_a_guessed_value" in _rules(_planted(kv_full, verdict="budget_full", advice=[budget]))
    keep = {**lower, "direction": "keep"}  # keeping (or stating) a guessed value changes nothing
    assert "changes_a_guessed_value" not in _rules(_planted(kv_full, advice=[keep]))


def test_the_check_catches_advice_sized_by_a_guessed_worst_case(kv_full: dict[str, Any]) -> None:
    assert any(a["setting"] == "kv_capacity" and a["direction"] == "add" for a in kv_full["advice"])
    thin = _planted(kv_full, request_profile={**kv_full["request_profile"], "thin": True})
    assert _rules(thin) == {"advice_from_a_guessed_worst_case"}


def test_the_check_catches_a_kv_full_from_a_risk_bound(kv_full: dict[str, Any]) -> None:
    # The free blocks hold the one waiting head: only the safe headroom (a risk) says memory.
    risk = _planted(kv_full, panel_usage_ratio=0.35, kv_free_blocks=kv_full["prompt_blocks"] + 4,
                    safe_headroom_requests=-3, requests_waiting=1)
    assert _rules(risk) == {"kv_full_from_a_risk_bound"}
    # More heads wait than the free blocks hold while a slot is free for each of them: the next step fills the pool,
    # so memory binds now. With the slots fewer than the free blocks' room, the slots would bind first.
    step = _planted(risk, requests_waiting=5, slot_headroom_requests=5)
    assert _rules(step) == set()
    assert _rules(_planted(step, slot_headroom_requests=1)) == {"kv_full_from_a_risk_bound"}
    assert _rules(_planted(step, slot_headroom_requests=None)) == {"kv_full_from_a_risk_bound"}


def test_the_check_catches_ok_while_requests_wait(idle: dict[str, Any]) -> None:
    assert _rules(_planted(idle, requests_waiting=144)) == {"ok_while_requests_wait"}


def test_every_verdict_the_product_gives_has_a_claim(idle: dict[str, Any]) -> None:
    assert {str(v) for v in Verdict} - {"target_down"} <= set(c.VERDICT_CLAIM)
    assert _rules(_planted(idle, verdict="producer_holding")) == {"unknown_verdict"}


def test_the_hold_starts_with_the_claim_and_ends_with_it(kv_full: dict[str, Any]) -> None:
    slots = _planted(kv_full, verdict="slots_full", binding_limit="slots", panel_usage_ratio=0.3, advice=[],
                     actions=[])
    hold = c.Hold()
    assert [hold.update(t, a) for t, a in ((0.0, slots), (1.0, slots), (2.5, kv_full), (3.0, slots))] == [
        0.0, 1.0, None, 0.0]


def test_the_check_catches_an_explanation_that_asks_to_state_what_no_setting_holds(idle: dict[str, Any]) -> None:
    # Before this rule the LoRA split was said as one to state (vllm-0.10.2/prod-lora frame 4, one-shot with flags):
    # "State lora_admissible_requests to decide."; only a vLLM setting the product reads may be asked for.
    asked = _planted(idle, explanation="What binds depends on it. State lora_admissible_requests to decide.")
    assert _rules(asked) == {"evidence_named_as_a_setting"}
    other = _planted(idle, explanation="What binds depends on it. State max_num_seqs and waiting_split to decide.")
    assert _rules(other) == {"evidence_named_as_a_setting"}  # any name no setting holds, listed as evidence or not
    setting = _planted(idle, explanation="What binds depends on it. State max_num_seqs and max_num_batched_tokens "
                       "to decide.")
    assert _rules(setting) == set()
