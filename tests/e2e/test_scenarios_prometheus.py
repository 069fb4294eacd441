"""A real Prometheus scrapes the real vLLM and our sidecar every 30 s during a false-full incident driven live,
evaluating the shipped rules: VLLMKVFalseFull fires, every dashboard query answers (All and one pod picked), and
the recording rules' capacity agrees with the sidecar's.

No timing luck: the load is closed-loop clients sized from the server's flags so that a queue *must* stand
(max_num_seqs run, many times as many wait, and the running requests' worst case stays under the full-usage
threshold). Each HTTP request asks for PARALLEL samples (`n`): vLLM runs them as PARALLEL engine requests, so the
engine, not vLLM's HTTP front end, is the bottleneck. (Measured on a loaded machine with one engine request per HTTP
request: the front end delivered ~20 requests/s to an engine that finishes 64 tokens in 0.1 s, and 40 closed-loop
clients kept 0-8 running and nothing waiting, the way this test once failed.) The load runs until the test ends (a
failed request is retried, not a lost client), and the test first verifies from the engine's own gauges that the
queue stands before it waits for the alert, with a deadline derived from the scrape interval and the alert's `for:`.
While it waits it keeps reading the gauges: a momentary drain is what production queues do too and only matters if a
scrape lands on it, so it fails nobody by itself; if the alert misses its deadline, the failure says whether the
queue drained meanwhile (the load's fault) or stood throughout (the rules'). The alert is read from the ALERTS
series Prometheus stored, the flags from max_over_time over the whole run, each polled with a deadline.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from pathlib import Path

import httpx
import pytest

from exporter.core.units import parse_duration
from grafana.config import DEFAULT
from tests.monitoring.test_real_prometheus import EXACT, POD, Stack, _wait, all_dashboard_queries_answered, run_stack

from .load import MetricsTimeline, complete, engine_state
from .scenarios import SHARED_FLAGS
from .vllm_server import VllmServer

pytestmark = pytest.mark.e2e
SCRAPE = "30s"
FOR = "1m"
FIRED = '''max(max_over_time(ALERTS{alertname="VLLMKVFalseFull",alertstate="firing"}[15m]))'''

# Sizing: every engine request is PROMPT + MAX_TOKENS tokens; CLIENTS HTTP requests of PARALLEL samples each are
# in flight, SLOTS engine requests run, the other QUEUE wait.
SLOTS = int(SHARED_FLAGS["max_num_seqs"])
PROMPT, MAX_TOKENS = 16, 64
PARALLEL = SLOTS  # one HTTP request alone fills every slot
CLIENTS = 24  # 24 x 8 engine requests in flight: a queue of 184 rides out the front end's bursts (12 drained once)
QUEUE = CLIENTS * PARALLEL - SLOTS
BLOCKS_PER_REQUEST = math.ceil((PROMPT + MAX_TOKENS) / SHARED_FLAGS["block_size"])
USABLE_BLOCKS = SHARED_FLAGS["num_gpu_blocks_override"] - 1
STANDING = 5  # consecutive gauge reads (1 s apart) with the queue up and every slot taken
QUEUE_DEADLINE = 90.0  # seconds for the load to build the queue on a loaded machine
# From a standing queue to a stored firing alert: Prometheus' next scrape of it, the for: hold, the evaluation
# that writes ALERTS, each up to one interval late, plus a minute of slack for a loaded machine.
FIRE_DEADLINE = 2 * parse_duration(SCRAPE) + parse_duration(FOR) + 2 * parse_duration(SCRAPE) + 60


class ClosedLoop:
    """`clients` workers, each sending its next request as soon as the previous one returns, until stop().

    A failed request is counted and retried after a short pause: the concurrency never silently shrinks."""

    def __init__(self, url: str, model: str, clients: int) -> None:
        self.url, self.model, self.clients = url, model, clients
        self.finished = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="e2e-closed-loop",
                                        daemon=True)

    def start(self) -> ClosedLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=self.clients + 4, max_keepalive_connections=self.clients + 4)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            await asyncio.gather(*(self._worker(client, i) for i in range(self.clients)))

    async def _worker(self, client: httpx.AsyncClient, index: int) -> None:
        seed = index * 1_000
        while not self._stop.is_set():
            seed += 1
            try:
                # vLLM rejects n > 1 with greedy sampling; the length is fixed by ignore_eos anyway.
                await complete(client, self.url, self.model, PROMPT, MAX_TOKENS, seed, n=PARALLEL, temperature=1.0)
                self.finished += 1
            except Exception as exc:
                self.errors.append(exc)
                await asyncio.sleep(0.2)


def _gauges(timeline: MetricsTimeline, since: float = 0.0) -> list[tuple[float, float, float]]:
    """(t, running, waiting) of every frame of vLLM's own /metrics at or after `since`."""
    out = []
    for t, text in list(timeline.frames):
        if t >= since:
            st = engine_state(text)
            out.append((t, st["running"] or 0.0, st["waiting"] or 0.0))
    return out


def _standing(frames: list[tuple[float, float, float]]) -> bool:
    last = frames[-STANDING:]
    return len(last) == STANDING and all(r == SLOTS and w >= SLOTS for _t, r, w in last)


def _stored(stack: Stack, expr: str) -> float:
    return stack.value(expr) or 0.0


def _history(stack: Stack) -> str:
    """Every sample of the false-full flag's inputs, to say which one kept the alert from firing."""
    lines = []
    for expr in ("up", "vllm_headroom_up", "instance_engine:vllm_num_requests_waiting:max",
                 "instance_engine:vllm_kv_usage_ratio:max_over_time5m", "instance_engine:vllm_kv_free_blocks:sub",
                 "instance_engine:vllm_prompt_blocks:ceil", "instance_engine:vllm_num_preemptions:rate5m",
                 "instance_engine:vllm_kv_false_full:bool", "instance_engine:vllm_stuck:bool",
                 "instance_engine:vllm_prompt_fits:bool", "endpoint_engine:vllm_without_sidecar:bool", "ALERTS"):
        for r in stack.query(f"{expr}[15m]"):
            lines.append(f"{expr} {r['metric']}: {[v for _t, v in r['values']]}")
    return "\n".join(lines)


def test_load_sizing_forces_a_false_full_queue() -> None:
    """The sizing itself: slots bind before blocks, and the running worst case stays under full usage."""
    assert DEFAULT.full_usage * USABLE_BLOCKS > SLOTS * BLOCKS_PER_REQUEST  # 31.2 > 24: KV never binds
    assert USABLE_BLOCKS // BLOCKS_PER_REQUEST > SLOTS  # blocks would admit more than max_num_seqs does
    assert QUEUE >= 8 * SLOTS  # engine-bound: the front end hands over PARALLEL engine requests per HTTP request


def test_false_full_fires_at_a_30s_scrape_interval(vllm_main: VllmServer, tmp_path: Path) -> None:
    sidecar = ["--verdict.false-full-hold", "0s", "--profile.window", "30s"]
    with run_stack(tmp_path, vllm_main.url, sidecar, for_={"VLLMKVFalseFull": FOR}, scrape_interval=SCRAPE,
                   sidecar_interval=5.0) as stack:
        timeline = MetricsTimeline(vllm_main.url, interval=1.0).start()
        load = ClosedLoop(vllm_main.url, vllm_main.served_model_name, CLIENTS).start()
        try:
            # 1. The engine's own gauges say the queue stands (every slot taken, SLOTS+ waiting, STANDING reads).
            end = time.monotonic() + QUEUE_DEADLINE
            while not _standing(_gauges(timeline)):
                if time.monotonic() > end:
                    pytest.fail(f"the load ({CLIENTS} closed-loop clients, n={PARALLEL}) built no standing queue in "
                                f"{QUEUE_DEADLINE:.0f} s: {load.finished} finished, {len(load.errors)} errors "
                                f"{load.errors[:3]}; (t, running, waiting): {_gauges(timeline)[-10:]}")
                time.sleep(1)
            stood_at = timeline.now() - STANDING
            print(f"queue standing {stood_at:.0f} s after the load started: {_gauges(timeline)[-1]}")
            # 2. The alert, with a deadline from the rules' timing; the queue must keep standing meanwhile.
            end = time.monotonic() + FIRE_DEADLINE
            while _stored(stack, FIRED) != 1:
                if time.monotonic() > end:
                    # A read with nothing waiting can restart the alert's for: if a Prometheus scrape lands on it;
                    # the failure says whether that happened (the load's fault) or the queue stood throughout.
                    drained = [round(f[0]) for f in _gauges(timeline, stood_at) if f[2] == 0]
                    pytest.fail(f"VLLMKVFalseFull not stored as firing {FIRE_DEADLINE:.0f} s after the queue stood; "
                                + (f"the queue drained at t={drained[:10]} s ({load.finished} finished, "
                                   f"{len(load.errors)} errors {load.errors[:3]}): the load's fault, or the rules' "
                                   if drained else "it stood throughout: the rules' fault; ")
                                + "what Prometheus stored:\n" + _history(stack))
                time.sleep(2)
            print(f"VLLMKVFalseFull firing {timeline.now() - stood_at:.0f} s after the queue stood "
                  f"(scrape {SCRAPE}, for {FOR}, deadline {FIRE_DEADLINE:.0f} s)")
            assert _stored(stack, "max(max_over_time(instance_engine:vllm_kv_false_full:bool[15m]))") == 1
            _wait("the sidecar's false-full flag stored", lambda: _stored(
                stack, "max(max_over_time(vllm_headroom_false_full[15m]))") == 1, stack, 60)
            for pod in (None, POD):
                pending = all_dashboard_queries_answered(stack, 120, pod=pod, rate_interval="2m")
                assert not pending, f"pod={pod}: queries with no series:\n" + "\n".join(
                    f"{u} / {t}: {e}" for u, t, e in sorted(pending))
            # Capacity must agree exactly; the profile-based figures use different windows (rules: 5m of
            # bucket rates; sidecar: 30 s here), which the replay test compares on a stationary recording.
            for rule, ours in EXACT[:2]:  # capacity and block size (the profile-based ones follow)
                assert stack.value(f"max({rule})") == stack.value(f"max({ours})"), (rule, ours)
            assert stack.value("max(instance_engine:vllm_kv_capacity_blocks:usable)") == USABLE_BLOCKS
            quiet = ("VLLMKVCacheFull", "VLLMPreemptionStorm", "VLLMSchedulerStuck", "VLLMHeadroomTargetDown",
                     "VLLMStartupSlow", "VLLMMetricsAbsent", "VLLMHeadroomNeverFits", "VLLMHeadroomBudgetFull")
            for name in quiet:
                assert not stack.query(f'ALERTS{{alertname="{name}",alertstate="firing"}}[15m]'), name
        finally:
            load.stop()
            timeline.stop()
