"""The live end-to-end check on one older vLLM release (tests/e2e/old-release.txt), beside the pinned 0.32.0.

Every other release is judged from its recordings (tests/unit/test_matrix.py); this one runs for real in
CI from its cached venv (scripts/vllm-version-venv, built by scripts/bootstrap), so a change to the sidecar
is checked live against the other conventions: 0.10.2 exports both usage gauges (gpu_cache_usage_perc and
kv_cache_usage_perc, the null block already excluded), admits on the first prefill chunk (before 0.19's
whole-prompt gate) and prints its start-up capacity on two lines. It also needs the libstdc++ workaround, so
the venv recipe is exercised too. One server start (~1 min on 2 cores), three short loads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .load import Wave
from .record import server_flags
from .scenarios import SHARED_FLAGS
from .sidecar import SidecarProcess
from .test_scenarios import (
    FAST,
    Watch,
    _n,
    _run_load,
    _wait_idle,
    admission_burst,
    assert_reported_within_two_scrapes,
    report,
)
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
    ours = watch.reported(state, lambda o: o["verdict"] == "slots_full" and o["false_full"])
    assert_reported_within_two_scrapes(state, ours)
    assert ours is not None and ours.ours is not None
    report(f"{OLD} slots-bound false-full", state.engine, ours.ours)


def test_old_release_admission_headroom_within_one(vllm_old: VllmServer) -> None:
    """The engine admits what we said it would: `admission_headroom_requests` more, within one (see
    `admission_burst`). One steady request (16 + 496 tokens: 16 blocks of 32 at the end, as long as
    max_model_len 512 allows) and 2-block burst requests (16 + 32): 16 + 7 x 2 = 30 of 39 blocks, no preemption."""
    with SidecarProcess(vllm_old.url, [*FAST, "--scrape.interval", "0.2s"]) as sidecar:
        _wait_idle(sidecar)
        _run_load(vllm_old, [Wave(20, 16, 16)])  # the profile learns 1-block prompts
        sidecar.wait_for(lambda e: e["prompt_blocks"] == 1 and e["requests_running"] == 0, 10, 0.1)
        h, e, admitted = admission_burst(vllm_old, sidecar, Wave(1, 16, 496), 32)
    assert abs(admitted - h) <= 1, (h, admitted)
    report(f"{OLD} prediction", {"admitted": admitted, "sent": h + 2}, e)
