"""The engine-truth recorder's file format, the seeded workload generator, and the recorded engine truth itself.

The recorder runs inside vLLM (tests/e2e/truth_plugin); its writer and our reader are tested here without vLLM.
The recordings under tests/fixtures/vllm-*/<scenario>/engine-steps.jsonl.gz are checked for what must hold in
any true record of a V1 scheduler: counts add up step by step, every request the driver got an answer for was
admitted between its send and its answer, and the frames align to steps.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import sys
from pathlib import Path

import pytest

from tests import engine_score
from tests.e2e import engine_truth
from tests.e2e.workload import CLASSES, Planned, Workload, random_workload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDED = engine_score.recordings(FIXTURES)


def _plugin():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(engine_truth.PLUGIN))
    try:
        return importlib.import_module("vllm_headroom_truth")
    finally:
        sys.path.remove(str(engine_truth.PLUGIN))


def test_the_writer_writes_only_changes_and_the_reader_carries_state_forward(tmp_path: Path) -> None:
    plugin = _plugin()
    path = tmp_path / "truth.jsonl"
    w = plugin.Writer(str(path))
    base = {k: 0 for k in plugin.STATE}
    w.step(1.0, 1, {**base, "r": 3, "free": 100}, {"adm": ["a-0", "b-0", "c-0"]})
    w.step(1.1, 2, {**base, "r": 3, "free": 100}, {})  # nothing changed: not written
    w.step(1.2, 3, {**base, "r": 3, "free": 97}, {})
    w.step(1.3, 4, {**base, "r": 2, "free": 97}, {"pre": ["c-0"]})
    w.flush()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["k"] for x in lines] == [1, 3, 4]
    assert json.loads(lines[1]) == {"t": 1.2, "k": 3, "free": 97}
    steps = engine_truth.read_steps(path)
    assert [s["r"] for s in steps.steps] == [3, 3, 2] and [s["free"] for s in steps.steps] == [100, 97, 97]
    assert steps.at(1.25).k == 3 and steps.at(0.5) is None and [s.k for s in steps.between(1.0, 1.3)] == [3, 4]
    assert steps.admitted() == {"a-0": [1.0], "b-0": [1.0], "c-0": [1.0]}


def test_the_plugin_is_staged_with_its_entry_point(tmp_path: Path) -> None:
    root = engine_truth.stage_plugin(tmp_path)
    eps = (next(root.glob("*.dist-info")) / "entry_points.txt").read_text()
    assert "[vllm.general_plugins]" in eps and "vllm_headroom_truth:register" in eps
    assert (root / "vllm_headroom_truth" / "__init__.py").exists()


def test_the_plugin_refuses_a_release_it_has_no_adapter_for() -> None:
    plugin = _plugin()
    assert plugin._release("0.32.0") == "0.32" and plugin._release("0.10.2+cpu") == "0.10"
    assert plugin._release("0.19.1") not in plugin.ADAPTERS  # written per release from its source, never guessed


def test_a_workload_is_one_line_and_the_same_seed_sends_the_same_requests() -> None:
    line = "seed=7 | poisson rate=40 for=20 mix=chat | burst n=300 at=25 mix=chat:3,rag | closed clients=64 for=10"
    w = Workload.parse(line)
    assert Workload.parse(w.describe()) == w and w.span == 35.0
    a, b = w.open_loop(), Workload.parse(line).open_loop()
    def key(ps: list[Planned]) -> list[tuple[str, int, int, float | None]]:
        return [(p.rid, p.prompt_len, p.max_tokens, p.at) for p in ps]

    assert key(a) == key(b)
    assert 650 < sum(p.phase == 0 for p in a) < 950 and sum(p.phase == 1 for p in a) == 300  # Poisson ~800
    first = list(itertools.islice(w.client(2, 5), 4))
    assert [p.rid for p in first] == [p.rid for p in itertools.islice(Workload.parse(line).client(2, 5), 4)]
    assert all(1 <= t <= 500 for p in a[:50] for t in p.prompt)
    chat = [p for p in a if p.cls == "chat"]
    lo, hi = CLASSES["chat"].prompt
    assert all(lo <= p.prompt_len - 512 <= hi and len(p.prompt) == p.prompt_len for p in chat[:200])
    # The shared system prompt is shared; the rest of each prompt is the request's own.
    same = [p for p in chat if p.prefix_seed == chat[0].prefix_seed][:2]
    assert same[0].prompt[:512] == same[1].prompt[:512] and same[0].prompt[512:600] != same[1].prompt[512:600]
    with pytest.raises(ValueError, match="unknown class"):
        Workload.parse("seed=1 | burst n=3 mix=nosuch")
    assert random_workload(11).describe() == random_workload(11).describe() != random_workload(12).describe()


@pytest.mark.parametrize("folder", RECORDED, ids=[f"{p.parent.name}/{p.name}" for p in RECORDED])
def test_the_recorded_engine_truth_adds_up(folder: Path) -> None:
    tr = engine_score.load(folder)
    steps = tr.steps
    assert steps.header["blocks"] >= 20_000 and steps.header["max_num_seqs"] == 256 and not steps.errors
    for s in steps.steps:
        # Within a step the running list changes only by admissions and preemptions.
        assert s["r"] == s["r0"] + len(s.adm) - len(s.pre), (s.k, s.state)
        if s["w0"] and s["stop"] in ("max_num_seqs", "max_num_active_seqs"):
            assert s["r"] >= steps.header["max_num_seqs"] or s["stop"] == "max_num_active_seqs"
        if s.ref:
            assert s["stop"] == "kv" and s.ref["need"] > s.ref["had"] - s.ref.get("reserved", 0) - 0
    admitted = steps.admitted()
    answered = [r for r in engine_score.requests_of(folder) if r.get("status") == 200]
    assert answered or tr.meta["load"]["cancelled"]  # a head that never fits: nothing answered, the load given up
    for r in answered:
        times = [t - tr.t0 for rid, ts in admitted.items() if rid.split("-")[0] == r["id"] for t in ts]
        assert times and r["sent"] - 0.05 <= min(times) <= r["finished"], (r, times)
    # Every frame that shows activity is joined to the step whose stats it shows (a paused scheduler takes none).
    busy = [a for i, ((_t, text), a) in enumerate(zip(tr.frames, tr.aligned, strict=True))
            if any(engine_truth.frame_gauges(text)) and tr.paused_at(tr.engine_t(i)) is None]
    assert sum(a.matched for a in busy) >= 0.95 * len(busy)


# -- the scorer on the engine's truth (tests/engine_score.py) ----------------------------------------------------
@functools.cache
def _scored() -> tuple[engine_score.EngineScore, ...]:
    return tuple(s for f in RECORDED for s in engine_score.score(f))


def test_every_engine_truth_frame_is_judged_and_every_limit_is_there() -> None:
    scores = _scored()
    assert scores and not [(s.scenario, s.mode) for s in scores if s.undetermined]
    labels = {lab for s in scores for (lab, _ok) in s.per_truth if s.scenario.startswith("vllm-0.32.0/")}
    # The limits of issue 22, as the engine itself named them: slots, the token budget, the head refused for KV,
    # a preemption storm, a LoRA deferral, a sleeping (paused) scheduler.
    assert {"slots_full", "budget_full", "kv_full", "preempting", "deferred", "sleeping"} <= labels, labels


def test_the_engine_truth_is_not_what_we_say() -> None:
    # The scorer can fail: always "ok" would agree on well under the bars; so would always "slots_full".
    scores = [s for s in _scored() if s.mode == "sidecar"]
    frames = sum(s.frames for s in scores)
    for verdict in ("ok", "slots_full"):
        agree = sum(n for s in scores for (lab, _ours), n in s.confusion.items()
                    if verdict in engine_score.judge_accepts(lab, "sidecar"))
        assert agree < 0.6 * frames, (verdict, agree, frames)


def test_admission_headroom_is_judged_on_frames_with_a_waiting_head() -> None:
    side = [s for s in _scored() if s.mode == "sidecar"]
    assert sum(s.adm_frames for s in side) >= 100
    slots = next(s for s in side if s.scenario.endswith("/prod-slots"))
    assert slots.adm_frames >= 10  # 256 running, a queue behind: what the engine admits per step is known


def test_a_budget_stopped_step_counts_what_the_engine_admitted_until_capacity_answered() -> None:
    # vllm-0.10.2/prod-kv: 28k-token prompts, 8192 tokens a step: every step that a prefill chunk fills stops on
    # the budget, and one request goes in every ~4 steps while 20,000 blocks hold ~22 of them.
    folder = next(f for f in RECORDED if f"{f.parent.name}/{f.name}" == "vllm-0.10.2/prod-kv")
    steps = engine_score.load(folder).steps.steps
    first = next(j for j, s in enumerate(steps) if s["w0"] and s["stop"] == "token_budget")
    got, exact = engine_score.capacity_admitted(steps, first)
    assert len(steps[first].adm) <= 1 < 20 <= got <= steps[first]["w0"]  # the step alone says ~0, the pool ~22
    assert not exact  # a completion came before the scan stopped on KV: the count is a lower bound
    kv = next(j for j, s in enumerate(steps) if s["w0"] and s["stop"] == "kv")
    assert engine_score.capacity_admitted(steps, kv) == (len(steps[kv].adm), True)  # KV answered at this step
