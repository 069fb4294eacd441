"""Issues 11 and 19's acceptance, measured by the scorer (tests/truth.py) on every recorded real vLLM timeline."""

from __future__ import annotations

import functools

import pytest

from tests import truth


@functools.cache
def _scores() -> tuple[truth.Score, ...]:
    """Scored once per session, on first use (not at collection: `pytest -k other` stays quick)."""
    return tuple(truth.all_scores())



@pytest.mark.parametrize("mode,bound", [("sidecar", truth.SIDECAR_MIN), ("one-shot", truth.ONE_SHOT_MIN),
                                        ("one-shot-noflags", truth.ONE_SHOT_NOFLAGS_MIN)])
def test_verdicts_agree_with_the_engine_on_enough_frames(mode: str, bound: float) -> None:
    scores = [s for s in _scores() if s.mode == mode]
    frames = sum(s.frames for s in scores)
    agree = sum(s.agree for s in scores)
    assert frames >= 250 and agree >= bound * frames, [m for s in scores for m in s.misses]


def test_no_kv_bound_preempting_or_transient_frame_is_flagged_false_full() -> None:
    # Nor, in one-shot, any frame from a max_num_seqs one observation inferred.
    assert not [m for s in _scores() for m in s.misses if "flagged false_full" in m]


def test_no_max_num_seqs_raise_in_the_lead_up_to_a_preemption_storm() -> None:
    # Sidecar, one-shot with the server's flags and one-shot without any: the advice that preceded a storm.
    lead_up = {mode: sum(s.lead_up for s in _scores() if s.mode == mode) for mode in truth.MODES}
    assert all(n > 0 for n in lead_up.values()), lead_up  # the storms are there to be judged
    assert not [m for s in _scores() for m in s.misses if "advises raising max_num_seqs" in m]


def test_slots_full_is_not_accepted_where_memory_binds() -> None:
    # Stricter than before: a frame whose preemption counter rises (now or at the next scrape), or whose slots
    # are taken while the pool is exhausted in a storm, is preempting or kv_full; slots_full ("a slot, not
    # memory") disagrees there.
    for folder in truth.recordings():
        if folder.name != "preemption":
            continue
        from exporter.replay import recording
        rec = recording.load(folder)
        frames = [truth.read_frame(t, text) for t, text in rec.frames]
        srv = truth.server_of([str(a) for a in rec.meta["server_argv"]])
        sent, exact = truth.sent_requests(folder, rec.meta)
        for i in range(len(frames)):
            j = truth.judge(frames, i, srv, sent, exact)
            if j.label == "preempting":
                assert "slots_full" not in j.accept | j.accept_one_shot, (folder, i)


def test_the_truth_is_not_what_we_say() -> None:
    # The scorer can fail: a sidecar that always said "ok" would agree on well under the bound.
    always_ok = sum(n for s in _scores() if s.mode == "sidecar" for (label, ok), n in s.per_truth.items()
                    if label == "ok")
    frames = sum(s.frames for s in _scores() if s.mode == "sidecar")
    assert always_ok / frames < 0.7 < truth.SIDECAR_MIN  # it would agree only on the idle frames
    labels = {label for s in _scores() for (label, _ok) in s.per_truth}
    assert {"ok", "slots_full", "kv_full", "preempting", "budget_full", "head_of_line"} <= labels


def test_every_recorded_0_32_0_frame_is_judged_in_every_mode() -> None:
    # "Undetermined" (no capacity to derive) is for pools vLLM does not export; it must not hide 0.32.0 frames.
    assert not [(s.scenario, s.mode) for s in _scores() if s.scenario.startswith("vllm-0.32.0/") and s.undetermined]


def test_no_recording_is_left_behind_by_the_average() -> None:
    # A kind confined to one timeline (a restart kept `preempting` over a whole incident: 52 % of its frames)
    # hides under the aggregate bound; every recording must agree on most of its frames in every mode.
    low = [(s.scenario, s.mode, round(s.agreement, 3)) for s in _scores() if s.frames and s.agreement < 0.85]
    assert not low, low


def test_memory_bound_frames_are_never_called_slots_full() -> None:
    # Preempting (counted now or at the next scrape) or slots taken beside an exhausted pool in a storm: saying
    # "a slot, not memory" there is the dangerous miss.
    said = [(s.scenario, s.mode, n) for s in _scores() for (truth_label, ours), n in s.confusion.items()
            if truth_label == "preempting" and ours == "slots_full"]
    assert not said, said


def test_only_v0_and_dead_engine_recordings_are_left_out_of_the_score() -> None:
    left = truth.unscored()
    assert not [f for f, _ in left if f.parent.name == "vllm-0.32.0"]
    assert all(why.startswith(("V0 engine", "the engine died")) for _, why in left), left
    scored_releases = {f.parent.name for f in truth.recordings()}
    assert len(scored_releases) >= 7, scored_releases
