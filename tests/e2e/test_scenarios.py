"""The six scenarios of the real-vLLM suite: drive a real vLLM 0.32.0, run our sidecar as a real process
against it, and check both what the engine did (its own /metrics) and what we said about it.

Tests on `vllm_main` run in file order: idle first, on a server nobody has loaded yet.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .load import Load, Wave, engine_state
from .scenarios import SCENARIOS
from .sidecar import SidecarProcess
from .vllm_server import VllmServer

pytestmark = pytest.mark.e2e

INTERVAL = 1.0  # the sidecar's scrape interval in these tests
REPORT = Path(os.environ.get("VLLM_HEADROOM_E2E_REPORT", Path(tempfile.gettempdir()) / "vllm-headroom-e2e.jsonl"))


def report(scenario: str, engine: dict[str, Any], ours: dict[str, Any]) -> None:
    """Keep what the engine did next to what we said, for the run's summary (scripts/test prints it)."""
    keys = ("verdict", "false_full", "requests_running", "requests_waiting", "panel_usage_ratio", "kv_free_blocks",
            "admission_headroom_requests", "safe_headroom_requests", "worst_case_blocks_per_request")
    with REPORT.open("a") as f:
        f.write(json.dumps({"scenario": scenario, "engine": engine, "ours": {k: ours.get(k) for k in keys}}) + "\n")
FAST = ["--verdict.false-full-hold", "0s", "--profile.window", "30s"]


@dataclasses.dataclass
class Sample:
    t: float
    engine: dict[str, float | None]
    ours: dict[str, Any] | None


class Watch:
    """Samples the engine's /metrics and our diagnosis side by side, every `period` seconds."""

    def __init__(self, server: VllmServer, sidecar: SidecarProcess, period: float = 0.25) -> None:
        self.server, self.sidecar, self.period = server, sidecar, period
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                t = time.monotonic()
                try:
                    engine = engine_state(client.get(self.server.url + "/metrics").text)
                    ours = self.sidecar.engine()
                except httpx.HTTPError:
                    engine, ours = {}, None
                if engine:
                    self.samples.append(Sample(t, engine, ours))
                self._stop.wait(max(0.0, self.period - (time.monotonic() - t)))

    def first(self, pred: Callable[[Sample], bool]) -> Sample | None:
        return next((s for s in list(self.samples) if pred(s)), None)


def _n(s: Sample, key: str) -> float:
    return s.engine.get(key) or 0.0


def _run_load(server: VllmServer, waves: list[Wave], timeout: float = 120.0) -> Load:
    load = Load(server.url, server.served_model_name, waves).start()
    assert load.wait(timeout), "the load did not finish in time"
    assert not load.errors, load.errors[:3]
    return load


def drive(load: Load, watch: Watch, enough: Callable[[list[Sample]], bool], deadline: float) -> bool:
    """Run `load` until the samples show `enough` of the state under test, at most `deadline` seconds; cancel it.

    No timing luck: build the load's closed-loop waves with `until_cancelled`, so a slow machine gets more time,
    not a thinner state. False when the deadline passed first: the caller's assertions then say what was seen."""
    load.start()
    end = time.monotonic() + deadline
    try:
        while time.monotonic() < end:
            if enough(list(watch.samples)):
                return True
            if load.errors:
                raise AssertionError(f"the load failed: {load.errors[:3]}")
            if load.done:
                return enough(list(watch.samples))
            time.sleep(0.5)
        return False
    finally:
        load.cancel()


def until_cancelled(waves: list[Wave], deadline: float) -> list[Wave]:
    """The waves with every closed-loop wave running until `drive` cancels it (or `deadline` seconds)."""
    return [dataclasses.replace(w, duration=deadline) if w.duration else w for w in waves]


def _wait_idle(sidecar: SidecarProcess) -> dict[str, Any]:
    _t, engine = sidecar.wait_for(lambda e: e["requests_running"] == 0 and e["requests_waiting"] == 0, 30)
    return engine


def _short(name: str, seconds: float) -> list[Wave]:
    return until_cancelled(SCENARIOS[name].waves, seconds)


# 1 ------------------------------------------------------------------------------------------------
def test_idle_capacity_and_provenance_are_discovered_exactly(vllm_main: VllmServer) -> None:
    cap = vllm_main.startup_capacity()  # "CPU KV cache size: 1,280 tokens, Maximum concurrency ... 2.50x"
    assert (cap["num_gpu_blocks"], cap["kv_cache_size_tokens"], cap["max_model_len"]) == (40, 1280, 512)
    with SidecarProcess(vllm_main.url, FAST) as sidecar:
        _t, e = sidecar.wait_for(lambda e: True, 15)
        assert e["verdict"] == "ok" and e["false_full"] is False
        # Ours excludes vLLM's null block; vLLM's own line counts it.
        assert e["kv_capacity_blocks"] == cap["num_gpu_blocks"] - 1
        assert (e["kv_capacity_blocks"] + 1) * e["block_size_tokens"] == cap["kv_cache_size_tokens"]
        assert e["max_concurrency_requests"]["max_model_len"] == int(cap["max_concurrency"])
        cfg = e["config"]
        # The sidecar found vLLM's process on this machine and read its command line from /proc.
        assert cfg["max_num_seqs"] == {"value": 8, "source": "cmdline"}
        assert cfg["max_model_len"] == {"value": cap["max_model_len"], "source": "cmdline"}
        assert cfg["num_gpu_blocks"] == {"value": cap["num_gpu_blocks"], "source": "cache_config_info"}
        assert cfg["kv_cache_max_concurrency"] == {"value": cap["max_concurrency"], "source": "cache_config_info"}
        # Nothing has finished yet: a prompt may be as long as max_model_len (16 blocks), never one block.
        assert e["slot_headroom_requests"] == 8 and e["admission_headroom_requests"] == 39 // 16
        report("1 idle", {"startup": cap["line"]}, e)
    with SidecarProcess(vllm_main.url, [*FAST, "--no-vllm-cmdline-discovery"]) as sidecar:
        _t, e = sidecar.wait_for(lambda e: True, 15)
        cfg = e["config"]
        assert cfg["max_model_len"] == {"value": 512, "source": "v1_models"}
        assert cfg["block_size"] == {"value": 32, "source": "cache_config_info"}
        assert "max_num_seqs" not in cfg and e["slot_headroom_requests"] is None  # unknown, not assumed
        assert any("--max-num-seqs" in a for a in e["actions"])


# 2 ------------------------------------------------------------------------------------------------
def test_slots_bound_false_full_is_reported_within_two_intervals(vllm_main: VllmServer) -> None:
    with SidecarProcess(vllm_main.url, FAST) as sidecar, Watch(vllm_main, sidecar) as watch:
        _wait_idle(sidecar)
        # Enough of the slots-bound state with a deep queue for the checks below (Watch reads every 0.25 s).
        drive(Load(vllm_main.url, vllm_main.served_model_name, until_cancelled(SCENARIOS["false-full"].waves, 120)),
              watch, lambda samples: sum(1 for s in samples if _n(s, "running") == 8 and _n(s, "waiting") > 20) >= 24,
              120)
    state = watch.first(lambda s: _n(s, "waiting") > 0 and _n(s, "running") == 8 and _n(s, "kv_cache_usage_perc") < 0.8)
    assert state is not None, "the engine never showed the slots-bound state"
    ours = watch.first(lambda s: s.t >= state.t and s.ours is not None and s.ours["verdict"] == "slots_full"
                       and s.ours["false_full"])
    assert ours is not None and ours.ours is not None
    assert ours.t - state.t <= 2 * INTERVAL + 0.5, (ours.t - state.t)
    assert ours.ours["admission_headroom_requests"] == 0
    assert ours.ours["panel_usage_ratio"] < 0.8 and ours.ours["kv_free_blocks"] > ours.ours["kv_capacity_blocks"] / 4
    # While the engine holds the state, we keep saying so.
    held = [s for s in watch.samples if s.t > ours.t + INTERVAL and _n(s, "running") == 8 and _n(s, "waiting") > 20]
    assert held and all(s.ours and s.ours["verdict"] == "slots_full" for s in held[:5])
    report("2 slots-bound false-full", {**state.engine, "state_to_verdict_s": round(ours.t - state.t, 2)}, ours.ours)


# 3 ------------------------------------------------------------------------------------------------
def test_kv_bound_true_full_is_kv_full_not_false_full(vllm_main: VllmServer) -> None:
    with SidecarProcess(vllm_main.url, FAST) as sidecar, Watch(vllm_main, sidecar) as watch:
        _wait_idle(sidecar)
        # 6 s of the KV-bound state by the engine's own gauges: at least 3 sidecar scrapes (1 s) of it.
        drive(Load(vllm_main.url, vllm_main.served_model_name, until_cancelled(SCENARIOS["kv-full"].waves, 120)),
              watch, lambda samples: sum(1 for s in samples if _n(s, "waiting") > 0 and _n(s, "running") < 8
                                         and _n(s, "kv_cache_usage_perc") >= 0.8) >= 24, 120)
    engine_state_seen = watch.first(lambda s: _n(s, "waiting") > 0 and _n(s, "running") < 8
                                    and _n(s, "kv_cache_usage_perc") >= 0.8)
    assert engine_state_seen is not None, "the engine never showed the KV-bound state"
    ours = [s.ours for s in watch.samples if s.ours is not None and s.ours["requests_waiting"] > 0]
    assert sum(1 for o in ours if o["verdict"] == "kv_full") >= 3
    assert not any(o["false_full"] for o in ours)
    assert all(o["verdict"] != "slots_full" for o in ours)
    report("3 kv-bound true-full", engine_state_seen.engine, next(o for o in ours if o["verdict"] == "kv_full"))


# 4 ------------------------------------------------------------------------------------------------
def test_preemption_storm_is_predicted_then_reported(vllm_main: VllmServer) -> None:
    with SidecarProcess(vllm_main.url, FAST) as sidecar, Watch(vllm_main, sidecar) as watch:
        _wait_idle(sidecar)
        # Teach the profile the storm's shape without a storm: two requests fit (2 x 13 <= 39 blocks).
        _run_load(vllm_main, [Wave(2, 16, 400)])
        _t, idle = sidecar.wait_for(lambda e: e["request_profile_tokens"]["max_tokens"]["tokens"] >= 400
                                    and e["requests_running"] == 0, 15)
        # Before any preemption: 8 slots but room for only floor(39 / 16) = 2 requests at their worst case.
        assert idle["max_concurrency_requests"]["profile"] == 2 < idle["max_num_seqs"] == 8
        # max_num_seqs 1 would serve nobody: the one advice engine names the KV capacity to add instead.
        assert any(a["setting"] == "kv_capacity" and a["direction"] == "add" for a in idle["advice"])
        before = watch.samples[-1].engine["num_preemptions_total"] or 0.0
        _run_load(vllm_main, _short("preemption", 5.0))
    rise = watch.first(lambda s: (s.engine["num_preemptions_total"] or 0.0) > before)
    assert rise is not None, "the engine never preempted"
    reported = watch.first(lambda s: s.t >= rise.t and s.ours is not None and s.ours["verdict"] == "preempting")
    assert reported is not None and reported.t - rise.t <= 2 * INTERVAL + 0.5
    busy = [s.ours for s in watch.samples if s.ours is not None and s.ours["requests_running"] >= 3]
    assert busy and all(o["safe_headroom_requests"] < 0 for o in busy)
    assert reported.ours is not None
    report("4 preemption storm", {**rise.engine, "rise_to_verdict_s": round(reported.t - rise.t, 2),
                                  "idle_max_concurrency_profile": idle["max_concurrency_requests"]["profile"]},
           reported.ours)


# 5 ------------------------------------------------------------------------------------------------
def test_head_of_line_blocking_is_named(vllm_hol: VllmServer) -> None:
    with SidecarProcess(vllm_hol.url, FAST) as sidecar, Watch(vllm_hol, sidecar) as watch:
        _wait_idle(sidecar)
        _run_load(vllm_hol, SCENARIOS["head-of-line"].waves)
    state = [s for s in watch.samples
             if _n(s, "waiting") > 0 and 0 < _n(s, "running") < 8 and _n(s, "kv_cache_usage_perc") < 0.8]
    assert len(state) >= 8, "the engine never held the head-of-line state"
    verdicts = [s.ours["verdict"] for s in state if s.ours is not None and s.ours["requests_waiting"] > 0]
    assert verdicts.count("head_of_line") >= 3, verdicts
    hol = next(s.ours for s in state if s.ours is not None and s.ours["verdict"] == "head_of_line")
    assert hol["false_full"] is True and hol["slot_headroom_requests"] > 0
    report("5 head-of-line", state[len(state) // 2].engine, hol)


# 6 ------------------------------------------------------------------------------------------------
def test_admission_headroom_predicts_how_many_the_engine_admits(vllm_hol: VllmServer) -> None:
    with SidecarProcess(vllm_hol.url, [*FAST, "--scrape.interval", "0.5s"]) as sidecar:
        _wait_idle(sidecar)
        # The profile must know today's prompts (16 tokens = 1 block), not the long ones of earlier tests.
        _run_load(vllm_hol, [Wave(20, 16, 16)])
        sidecar.wait_for(lambda e: e["request_profile_tokens"]["prompt"]["basis"] == "window"
                         and e["prompt_blocks"] == 1, 10, 0.1)
        # Steady state: 3 long-running requests (2,016 tokens = 63 blocks each at the end).
        steady = Load(vllm_hol.url, vllm_hol.served_model_name, [Wave(3, 16, 2000, duration=12.0)]).start()
        try:
            _t, e = sidecar.wait_for(lambda e: e["requests_running"] == 3 and e["requests_waiting"] == 0, 10, 0.1)
            h = e["admission_headroom_requests"]
            assert h == 5  # min(8 - 3 slots, free / 1 block)
            burst = Load(vllm_hol.url, vllm_hol.served_model_name, [Wave(h + 2, 16, 500)]).start()
            frames = []
            with httpx.Client(timeout=5) as client:
                deadline = time.monotonic() + 1.5
                while time.monotonic() < deadline:
                    frames.append(engine_state(client.get(vllm_hol.url + "/metrics").text))
                    time.sleep(0.05)
            assert burst.wait(60) and not burst.errors
        finally:
            steady.cancel()
    peak = max(frames, key=lambda f: (f["running"] or 0.0, f["waiting"] or 0.0))
    admitted = (peak["running"] or 0.0) - 3
    assert abs(admitted - h) <= 1, frames
    assert (peak["waiting"] or 0.0) >= 1, frames  # the rest queued
    report("6 prediction", {**peak, "admitted": admitted, "sent": h + 2}, e)
