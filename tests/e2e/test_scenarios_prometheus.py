"""A real Prometheus scrapes the real vLLM and our sidecar during a false-full incident driven live:
every dashboard query answers, the recording rules agree with the sidecar, and VLLMKVFalseFull fires."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.monitoring.test_real_prometheus import EXACT, Stack, _wait, all_dashboard_queries_answered, run_stack

from .load import Load
from .test_scenarios import _short
from .vllm_server import VllmServer

pytestmark = pytest.mark.e2e


def _firing(stack: Stack, name: str) -> bool:
    groups = stack.get("/api/v1/rules?type=alert")["data"]["groups"]
    return any(r["name"] == name and r["state"] == "firing" for g in groups for r in g["rules"])


def test_real_prometheus_on_real_vllm(vllm_main: VllmServer, tmp_path: Path) -> None:
    sidecar = ["--verdict.false-full-hold", "0s", "--profile.window", "30s"]
    with run_stack(tmp_path, vllm_main.url, sidecar, false_full_for="2s") as stack:
        load = Load(vllm_main.url, vllm_main.served_model_name, _short("false-full", 25.0)).start()
        try:
            _wait("VLLMKVFalseFull firing on the live incident", lambda: _firing(stack, "VLLMKVFalseFull"), stack, 30)
            assert stack.value("max(vllm_headroom_false_full)") == 1
            pending = all_dashboard_queries_answered(stack, 20)
            assert not pending, "queries with no series:\n" + "\n".join(f"{u} / {t}: {e}" for u, t, e in pending)
            # Capacity must agree exactly; the profile-based figures use different windows (rules: 5m of
            # bucket rates; sidecar: 30 s here), which the replay test compares on a stationary recording.
            for rule, ours in EXACT[:3]:
                assert stack.value(f"max({rule})") == stack.value(f"max({ours})"), (rule, ours)
            assert stack.value("max(instance_engine:vllm_kv_capacity_blocks:usable)") == 39
        finally:
            load.wait(120)
