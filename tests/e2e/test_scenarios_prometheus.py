"""A real Prometheus scrapes the real vLLM and our sidecar every 30 s during a false-full incident driven live,
evaluating the shipped rules: VLLMKVFalseFull fires, every dashboard query answers (All and one pod picked), and
the recording rules' capacity agrees with the sidecar's.

Nothing asserts an instantaneous value after an unrelated condition: the alert is read from the ALERTS series
Prometheus stored, the flags from max_over_time over the whole run, each polled with a deadline.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.monitoring.test_real_prometheus import EXACT, POD, Stack, _wait, all_dashboard_queries_answered, run_stack

from .load import Load
from .test_scenarios import _short
from .vllm_server import VllmServer

pytestmark = pytest.mark.e2e
SCRAPE = "30s"
LOAD_S = 300.0  # long enough for 5m windows to hold ten samples of the incident
FIRED = '''max(max_over_time(ALERTS{alertname="VLLMKVFalseFull",alertstate="firing"}[15m]))'''


def _stored(stack: Stack, expr: str) -> float:
    return stack.value(expr) or 0.0


def _history(stack: Stack) -> str:
    """Every sample of the false-full flag's inputs, to say which one kept the alert from firing."""
    lines = []
    for expr in ("up", "vllm_headroom_up", "instance_engine:vllm_num_requests_waiting:max",
                 "instance_engine:vllm_kv_usage_ratio:max_over_time5m", "instance_engine:vllm_kv_free_blocks:sub",
                 "instance_engine:vllm_prompt_blocks:ceil", "instance_engine:vllm_num_preemptions:rate5m",
                 "instance_engine:vllm_kv_false_full:bool", "instance_engine:vllm_stuck:bool",
                 "instance:vllm_headroom_target_down:bool", "ALERTS"):
        for r in stack.query(f"{expr}[15m]"):
            lines.append(f"{expr} {r['metric']}: {[v for _t, v in r['values']]}")
    return "\n".join(lines)


def test_false_full_fires_at_a_30s_scrape_interval(vllm_main: VllmServer, tmp_path: Path) -> None:
    sidecar = ["--verdict.false-full-hold", "0s", "--profile.window", "30s"]
    with run_stack(tmp_path, vllm_main.url, sidecar, for_={"VLLMKVFalseFull": "1m"}, scrape_interval=SCRAPE,
                   sidecar_interval=5.0) as stack:
        started = time.monotonic()
        load = Load(vllm_main.url, vllm_main.served_model_name, _short("false-full", LOAD_S)).start()
        try:
            end = started + LOAD_S - 20
            while _stored(stack, FIRED) != 1:
                if time.monotonic() > end:
                    pytest.fail(f"VLLMKVFalseFull never stored as firing; the load finished {len(load.results)} "
                                f"requests with {len(load.errors)} errors {load.errors[:3]}; what Prometheus "
                                "stored:\n" + _history(stack))
                time.sleep(2)
            fired_after = time.monotonic() - started
            print(f"VLLMKVFalseFull firing {fired_after:.0f} s after the load started (scrape {SCRAPE}, for 1m)")
            assert _stored(stack, "max(max_over_time(instance_engine:vllm_kv_false_full:bool[15m]))") == 1
            _wait("the sidecar's false-full flag stored", lambda: _stored(
                stack, "max(max_over_time(vllm_headroom_false_full[15m]))") == 1, stack, 60)
            for pod in (None, POD):
                pending = all_dashboard_queries_answered(stack, 120, pod=pod, rate_interval="2m")
                assert not pending, f"pod={pod}: queries with no series:\n" + "\n".join(
                    f"{u} / {t}: {e}" for u, t, e in sorted(pending))
            # Capacity must agree exactly; the profile-based figures use different windows (rules: 5m of
            # bucket rates; sidecar: 30 s here), which the replay test compares on a stationary recording.
            for rule, ours in EXACT[:3]:
                assert stack.value(f"max({rule})") == stack.value(f"max({ours})"), (rule, ours)
            assert stack.value("max(instance_engine:vllm_kv_capacity_blocks:usable)") == 39
            quiet = ("VLLMKVCacheFull", "VLLMPreemptionStorm", "VLLMSchedulerStuck", "VLLMHeadroomTargetDown",
                     "VLLMStartupSlow", "VLLMMetricsAbsent")
            for name in quiet:
                assert not stack.query(f'ALERTS{{alertname="{name}",alertstate="firing"}}[15m]'), name
        finally:
            load.cancel()
            load.wait(120)
