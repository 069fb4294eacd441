"""Issue 11's acceptance, measured by the scorer (tests/truth.py) on every recorded real vLLM 0.32.0 timeline."""

from __future__ import annotations

import pytest

from tests import truth

SCORES = [s for folder in truth.recordings() for s in truth.score(folder)]


@pytest.mark.parametrize("mode,bound", [("sidecar", truth.SIDECAR_MIN), ("one-shot", truth.ONE_SHOT_MIN)])
def test_verdicts_agree_with_the_engine_on_enough_frames(mode: str, bound: float) -> None:
    scores = [s for s in SCORES if s.mode == mode]
    frames = sum(s.frames for s in scores)
    agree = sum(s.agree for s in scores)
    assert frames >= 250 and agree >= bound * frames, [m for s in scores for m in s.misses]


def test_no_kv_bound_preempting_or_transient_frame_is_flagged_false_full() -> None:
    assert not [m for s in SCORES for m in s.misses if "flagged false_full" in m]


def test_the_truth_is_not_what_we_say() -> None:
    # The scorer can fail: a sidecar that always said "ok" would agree on well under the bound.
    always_ok = sum(n for s in SCORES if s.mode == "sidecar" for (label, ok), n in s.per_truth.items()
                    if label == "ok")
    frames = sum(s.frames for s in SCORES if s.mode == "sidecar")
    assert always_ok / frames < 0.7 < truth.SIDECAR_MIN  # it would agree only on the idle frames
    labels = {label for s in SCORES for (label, _ok) in s.per_truth}
    assert {"ok", "slots_full", "kv_full", "preempting", "budget_full", "head_of_line"} <= labels
