"""Issue 11's scenarios on a real vLLM 0.32.0 with our sidecar as a real process: what the engine did (its own
/metrics, sampled beside ours) against what we said. Servers and loads: tests/e2e/scenarios_truth.py.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .engine_truth import align, frame_gauges, read_steps
from .load import Load, MetricsTimeline, Wave
from .scenarios_truth import BUDGET, SCENARIOS, SLOTS4, SMALL_POOL, TOO_LONG, TruthLoad
from .sidecar import SidecarProcess
from .test_scenarios import FAST, Sample, Watch, assert_reported_within_two_scrapes, drive, report, until_cancelled
from .vllm_server import VllmServer
from .workload import Driver, Workload

pytestmark = pytest.mark.e2e


def _serve(flags: dict[str, Any], truth: Path | None = None) -> Iterator[VllmServer]:
    with VllmServer(**flags, truth=truth) as server:
        server.pin_self()
        try:
            yield server
        finally:
            server.unpin_self()


@pytest.fixture(scope="module")
def vllm_slots4() -> Iterator[VllmServer]:
    yield from _serve(SLOTS4)


@pytest.fixture(scope="module")
def vllm_budget() -> Iterator[VllmServer]:
    yield from _serve(BUDGET)


@pytest.fixture(scope="module")
def vllm_small_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    # With the engine-truth recorder on (tests/e2e/truth_plugin): test_the_engine_truth_is_what_the_driver_saw.
    yield from _serve(SMALL_POOL, tmp_path_factory.mktemp("truth") / "steps.jsonl")


def _n(s: Sample, key: str) -> float:
    return s.engine.get(key) or 0.0


def _truth_load(server: VllmServer, waves: list[Wave]) -> TruthLoad:
    return TruthLoad(server.url, server.served_model_name, waves, 0.0)


def _load(server: VllmServer, waves: list[Wave], timeout: float) -> Load:
    load = TruthLoad(server.url, server.served_model_name, waves, 0.0).start()
    if not load.wait(timeout):
        load.cancel()
    return load


def _idle(sidecar: SidecarProcess) -> None:
    sidecar.wait_for(lambda e: e["requests_running"] == 0 and e["requests_waiting"] == 0, 60)


def _ours(samples: list[Sample]) -> list[dict[str, Any]]:
    return [s.ours for s in samples if s.ours is not None]


# (d) ------------------------------------------------------------------------------------------------------
def test_inferred_max_num_seqs_equals_the_real_one(vllm_slots4: VllmServer) -> None:
    def slots_bound(samples: list[Sample]) -> list[Sample]:
        return [s for s in samples if s.ours and s.ours["requests_waiting"] > 0 and s.ours["requests_running"] == 4]

    with SidecarProcess(vllm_slots4.url, [*FAST, "--no-vllm-cmdline-discovery"]) as sidecar, \
            Watch(vllm_slots4, sidecar) as watch:
        _idle(sidecar)
        # 3 HTTP clients asking for 8 samples each: the same 24 engine requests, which vLLM's front end and our load
        # driver keep queued on a loaded machine (24 one-request clients left the queue empty there: ci6).
        waves = [dataclasses.replace(w, count=max(1, w.count // 8), n=8)
                 for w in until_cancelled(SCENARIOS["false-full-inferred"].waves, 180)]
        drive(_truth_load(vllm_slots4, waves), watch, lambda samples: len(slots_bound(samples)) >= 8, 180)
    slots = slots_bound(watch.samples)
    assert len(slots) >= 5, [(s.engine.get("running"), s.engine.get("waiting")) for s in watch.samples[-10:]]
    cfgs = {(s.ours or {})["config"].get("max_num_seqs", {}).get("value") for s in slots[2:]}
    assert cfgs == {4}, cfgs
    assert all((s.ours or {})["slot_headroom_requests"] == 0 for s in slots[2:])
    report("d inferred cap", slots[-1].engine, slots[-1].ours or {})


# (a) ------------------------------------------------------------------------------------------------------
def test_workload_switch_no_raise_before_the_storm(vllm_slots4: VllmServer) -> None:
    with SidecarProcess(vllm_slots4.url, FAST) as sidecar, Watch(vllm_slots4, sidecar, period=0.25) as watch:
        _idle(sidecar)
        _load(vllm_slots4, SCENARIOS["workload-switch"].waves, 120)
    base = _n(watch.samples[0], "num_preemptions_total")
    rise = next((s for s in watch.samples if _n(s, "num_preemptions_total") > base), None)
    assert rise is not None, "the engine never preempted"
    before = [s for s in watch.samples if s.t < rise.t and s.ours is not None]
    for s in before:
        # Issue 19 (kind 7): while slots bind and the pool holds more of the short requests, a raise, saying what
        # keeps it safe (the profile is young: requests must stay within the observed size); never once requests
        # in flight outgrow the profile, and never an unconditional one before the storm (issue 11).
        raised = [a for a in (s.ours or {}).get("advice", [])
                  if a["direction"] == "raise" and a["setting"] == "max_num_seqs"]
        assert all("safe while requests stay within" in a["condition"] for a in raised), raised
        assert not (raised and ((s.ours or {}).get("request_profile") or {}).get("stale")), raised
    said = watch.reported(rise, lambda o: o["verdict"] == "preempting")
    assert_reported_within_two_scrapes(rise, said)
    assert said is not None
    report("a workload switch", {**rise.engine, "said_after_s": round(said.t - rise.t, 2)}, said.ours or {})


# (b) ------------------------------------------------------------------------------------------------------
def test_budget_bound_queue_is_named(vllm_budget: VllmServer) -> None:
    def queued_with_free_slots(samples: list[Sample]) -> list[dict[str, Any]]:
        return [o for o in _ours(samples) if o["requests_waiting"] > 0 and o["requests_running"] < 8]

    with SidecarProcess(vllm_budget.url, FAST) as sidecar, Watch(vllm_budget, sidecar) as watch:
        _idle(sidecar)
        # 10 s of the engine's own gauges in the budget-bound state (Watch reads every 0.25 s).
        drive(_truth_load(vllm_budget, until_cancelled(SCENARIOS["budget-bound"].waves, 120)), watch,
              lambda samples: sum(1 for x in samples if _n(x, "waiting") > 0 and _n(x, "running") < 8) >= 40, 120)
    waiting = queued_with_free_slots(watch.samples)
    named = [o for o in waiting if o["verdict"] == "budget_full"]
    assert len(named) >= 3, [o["verdict"] for o in waiting]
    assert all(o["verdict"] != "slots_full" for o in waiting)
    assert any(a["setting"] == "max_num_batched_tokens" for a in named[0]["advice"])
    report("b budget-bound", watch.samples[len(watch.samples) // 2].engine, named[0])


# (c) ------------------------------------------------------------------------------------------------------
def test_max_model_len_above_the_pool_is_refused_by_vllm() -> None:
    # vLLM 0.32.0 plans its admission check against the overridden pool: it will not start.
    server = VllmServer(**TOO_LONG)
    with pytest.raises(RuntimeError) as exc:
        server.start()
    report("c refused", {"vllm": str(exc.value).splitlines()[0][:200]}, {})


def test_a_head_the_size_of_the_pool_is_never_called_never_fits(vllm_small_pool: VllmServer) -> None:
    # The closest shape vLLM starts: max_model_len = the pool. The head needs every block, so it waits until
    # the short requests drain; it always fits eventually, so never_fits and "lower max_model_len" are wrong.
    with SidecarProcess(vllm_small_pool.url, FAST) as sidecar, Watch(vllm_small_pool, sidecar) as watch:
        _idle(sidecar)
        _load(vllm_small_pool, SCENARIOS["pool-sized-head"].waves, 30.0)
        _idle(sidecar)
    ours = _ours(watch.samples)
    assert ours and not any(o["verdict"] == "never_fits" for o in ours)
    assert not any(a["setting"] == "max_model_len" and a["direction"] == "lower" for o in ours for a in o["advice"])
    report("c pool-sized head", watch.samples[-1].engine, ours[-1])


# (e) ------------------------------------------------------------------------------------------------------
def test_prefix_cached_admission(vllm_small_pool: VllmServer) -> None:
    # 20 shared cached blocks + 1 new block per request: the engine runs at most 19 at once. While it is busy,
    # running + our admission headroom (the prompt less its prefix-cache hits) must say the same, within 1.
    # The recorded scenario's requests, but each HTTP request asks for n=8 samples: vLLM runs them as 8 engine
    # requests (the same prompt: 20 cached blocks + 1 new each), so the engine, not vLLM's HTTP front end, sets
    # the pace. (CI, loaded machine, one engine request per HTTP request: 24 clients kept only 12 running.)
    warm, clients = SCENARIOS["prefix-shared"].waves
    waves = [warm, dataclasses.replace(clients, count=4, n=8)]

    def busy(samples: list[Sample]) -> list[dict[str, Any]]:
        out = [o for o in _ours(samples) if o["requests_running"] > 0]
        return [o for i, o in enumerate(out) if i == 0 or o != out[i - 1]]  # one per sidecar scrape

    def standing(samples: list[Sample]) -> int:  # engine reads with a queue behind the running requests
        return sum(1 for x in samples if _n(x, "waiting") > 0 and _n(x, "running") >= 15)

    with SidecarProcess(vllm_small_pool.url, [*FAST, "--scrape.interval", "0.5s"]) as sidecar, \
            Watch(vllm_small_pool, sidecar, period=0.1) as watch:
        _idle(sidecar)
        drive(_truth_load(vllm_small_pool, until_cancelled(waves, 120)), watch,
              lambda samples: standing(samples) >= 30 and len(busy(samples)) >= 8, 120)
    admitted = max(_n(s, "running") for s in watch.samples)
    distinct = busy(watch.samples)
    assert admitted >= 15 and len(distinct) >= 4, (admitted, len(distinct))
    predicted = [o["requests_running"] + o["admission_headroom_requests"] for o in distinct[1:]]
    report("e prefix cache", {"admitted_at_once": admitted}, {**distinct[-1], "running_plus_admission": predicted})
    assert all(abs(p - admitted) <= 1 for p in predicted), (predicted, admitted)


# issue 22 ----------------------------------------------------------------------------------------------------
# A fixed seed (CI): a burst beyond max_num_seqs (24), then a Poisson stream; prompts of 8-32 tokens (1 block).
TRUTH_WORKLOAD = "seed=22 | burst n=60 at=0.5 mix=tiny | poisson rate=30 for=5 at=1 mix=tiny"


def test_the_engine_truth_is_what_the_driver_saw(vllm_small_pool: VllmServer) -> None:
    """The recorder's per-step lines against the load driver's own clock: every request the driver got an answer
    for was admitted once, in a step that started after it was sent and before its first output arrived; every
    step's running count adds up; the scrapes align to the steps they show."""
    server = vllm_small_pool
    assert server.truth is not None
    timeline = MetricsTimeline(server.url, 0.5).start()
    driver = Driver(server.url, server.served_model_name, Workload.parse(TRUTH_WORKLOAD), timeline._t0,
                    stream=True).start()
    assert driver.wait(120), "the load did not finish"
    time.sleep(1.5)  # the recorder flushes every 0.2 s; a few idle frames
    timeline.stop()
    steps = read_steps(server.truth)
    t0 = timeline._t0
    assert steps.header["max_num_seqs"] == 24 and not steps.errors, (steps.header, steps.errors)
    answered = [r for r in driver.records if r.get("status") == 200]
    assert len(answered) == len(driver.records) >= 100 and not driver.errors, driver.errors[:3]
    admitted: dict[str, list[tuple[int, float]]] = {}
    preempted: dict[str, int] = {}
    for s in steps.steps:
        assert s["r"] == s["r0"] + len(s.adm) - len(s.pre), (s.k, s.state, s.adm, s.pre)
        for rid in s.adm:
            admitted.setdefault(rid.split("-")[0], []).append((s.k, s.t - t0))
        for rid in s.pre:
            preempted[rid.split("-")[0]] = preempted.get(rid.split("-")[0], 0) + 1
    late = []
    for r in answered:
        got = admitted.get(r["id"])
        assert got, f"{r['id']} answered but never admitted"
        k, at = got[0]
        if not r["sent"] - 1e-3 <= at <= r.get("first", r["finished"]) + 1e-3:
            late.append((r["id"], k, round(at, 4), r["sent"], r.get("first")))
    assert not late, late[:5]
    ours = {r["id"] for r in driver.records}
    window = [rid for rid in admitted if rid.startswith("s22")]
    # Admitted once, and once more after each preemption (resumed), never a request nobody sent.
    assert sorted(window) == sorted(ours)
    assert all(len(admitted[rid]) == 1 + preempted.get(rid, 0) for rid in ours)
    slots = [s for s in steps.steps if s["w0"] and s["stop"] == "max_num_seqs"]
    assert slots and all(s["r"] == 24 for s in slots)  # the burst stopped admission at max_num_seqs
    # Each scrape that shows activity is joined to the step whose stats vLLM had reported (sr, sw).
    frames = [(t, text) for t, text in timeline.frames if any(frame_gauges(text))]
    aligned = align(steps, frames, t0)
    assert frames and sum(a.matched for a in aligned) >= 0.9 * len(aligned), [
        (frame_gauges(text), a.step and a.step.state) for (_t, text), a in zip(frames, aligned, strict=True)
        if not a.matched][:5]
    report("22 engine truth", {"steps_written": len(steps.steps), "admitted": sum(len(v) for v in admitted.values()),
                               "stops": sorted({str(s["stop"]) for s in steps.steps}),
                               "cost": steps.costs[-1] if steps.costs else None}, {})
