"""The live end-to-end check on one older vLLM release (tests/e2e/old-release.txt), beside the pinned 0.32.0.

Every other release is judged from its recordings (tests/unit/test_matrix.py); this one runs for real in
CI from its cached venv (scripts/vllm-version-venv, built by scripts/bootstrap), so a change to the sidecar
is checked live against the other conventions: 0.10.2 exports both usage gauges (gpu_cache_usage_perc and
kv_cache_usage_perc, the null block already excluded), admits on the first prefill chunk (before 0.19's
whole-prompt gate) and prints its start-up capacity on two lines. It also needs the libstdc++ workaround, so
the venv recipe is exercised too. One server start (~1 min on 2 cores), three short loads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .load import Load, Wave, engine_state
from .record import server_flags
from .scenarios import SHARED_FLAGS
from .sidecar import SidecarProcess
from .test_scenarios import FAST, INTERVAL, Watch, _n, _run_load, _wait_idle, report
from .vllm_server import VllmServer, venv_runtime, vllm_python

pytestmark = pytest.mark.e2e
OLD = (Path(__file__).parent / "old-release.txt").read_text().strip()


@pytest.fixture(scope="module")
def vllm_old() -> Iterator[VllmServer]:
    flags = server_flags(SHARED_FLAGS, venv_runtime(vllm_python(OLD)))
    with VllmServer(**flags, version=OLD) as server:  # type: ignore[arg-type]
        server.pin_self()
        try:
            yield server
        finally:
            server.unpin_self()


def test_old_release_capacity_version_and_idle(vllm_old: VllmServer) -> None:
    cap = vllm_old.startup_capacity()  # two lines before 0.28: size, then concurrency
    assert (cap["num_gpu_blocks"], cap["max_model_len"], cap["max_concurrency"]) == (40, 512, 2.5)
    with SidecarProcess(vllm_old.url, FAST) as sidecar:
        _t, e = sidecar.wait_for(lambda e: True, 15)
        assert sidecar.diagnosis()["targets"][0]["vllm_version"] == OLD
        assert e["verdict"] == "ok" and e["kv_capacity_blocks"] == 39 and e["kv_used_blocks"] == 0
        report(f"{OLD} idle", {"startup": cap.get("line")}, e)


def test_old_release_slots_bound_queue_is_false_full(vllm_old: VllmServer) -> None:
    with SidecarProcess(vllm_old.url, FAST) as sidecar, Watch(vllm_old, sidecar) as watch:
        _wait_idle(sidecar)
        # One burst rather than closed-loop clients: an older engine drains a queue of short requests faster
        # than 100 clients on the API server's CPU refill it (the recordings of 0.18/0.19 show it).
        _run_load(vllm_old, [Wave(300, 16, 64)])
    state = watch.first(lambda s: _n(s, "waiting") > 0 and _n(s, "running") == 8 and _n(s, "kv_cache_usage_perc") < 0.8)
    assert state is not None, "the engine never showed the slots-bound state"
    ours = watch.first(lambda s: s.t >= state.t and s.ours is not None and s.ours["verdict"] == "slots_full"
                       and s.ours["false_full"])
    assert ours is not None and ours.ours is not None and ours.t - state.t <= 2 * INTERVAL + 0.5
    report(f"{OLD} slots-bound false-full", state.engine, ours.ours)


def test_old_release_admission_headroom_within_one(vllm_old: VllmServer) -> None:
    with SidecarProcess(vllm_old.url, [*FAST, "--scrape.interval", "0.5s"]) as sidecar:
        _wait_idle(sidecar)
        _run_load(vllm_old, [Wave(20, 16, 16)])  # the profile learns 1-block prompts
        sidecar.wait_for(lambda e: e["prompt_blocks"] == 1 and e["requests_running"] == 0, 10, 0.1)
        # 3 long-running requests (16 + 200 tokens: 7 blocks each at the end, 21 of 39).
        steady = Load(vllm_old.url, vllm_old.served_model_name, [Wave(3, 16, 200, duration=10.0)]).start()
        try:
            _t, e = sidecar.wait_for(lambda e: e["requests_running"] == 3 and e["requests_waiting"] == 0, 10, 0.1)
            h = e["admission_headroom_requests"]
            burst = Load(vllm_old.url, vllm_old.served_model_name, [Wave(h + 2, 16, 32)]).start()
            frames = []
            with httpx.Client(timeout=5) as client:
                deadline = time.monotonic() + 1.5
                while time.monotonic() < deadline:
                    frames.append(engine_state(client.get(vllm_old.url + "/metrics").text))
                    time.sleep(0.05)
            assert burst.wait(60) and not burst.errors
        finally:
            steady.cancel()
    peak = max(frames, key=lambda f: (f["running"] or 0.0, f["waiting"] or 0.0))
    admitted = (peak["running"] or 0.0) - 3
    assert abs(admitted - h) <= 1, (h, frames)
    report(f"{OLD} prediction", {**peak, "admitted": admitted, "sent": h + 2}, e)
