"""Issue 21, kind 1: one slow target freezes no other target and no HTTP surface.

Real loopback servers (tests/hostile.py) stand for the targets: three healthy ones serve the recorded real
vLLM 0.32.0 exposition, one drips its answer a byte at a time, each byte well inside httpx's read timeout (or
stalls, or never ends its body, or drips /v1/models). The sidecar runs its real schedules. Nothing is timed:
the slow target's own scrapes (each cut by the deadline) are the clock, and every healthy target must have
been scraped as often as it, give or take one (a schedule that starts later in the interval, or a slot a
loaded machine made it skip).
"""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from exporter.expose.server import Sidecar, make_app
from exporter.pipeline.target import Settings, Target
from tests import hostile

INTERVAL, TIMEOUT = 1.0, 0.5
ROUNDS = 5  # scrapes of the slow target to wait for
HANG = float(os.environ.get("HANG_GUARD", "90"))  # s: only a guard against hanging forever (the old tick
# never ended), not a threshold; the check that this test fails without the fix sets it lower


async def _fleet(mode: str) -> tuple[Sidecar, list[hostile.Target], hostile.Target]:
    healthy = [await hostile.Target("ok").start() for _ in range(3)]
    slow = await hostile.Target(mode).start()
    targets = [Target(Settings(t.url, discover_cmdline=False, timeout=TIMEOUT)) for t in [*healthy[:2], slow,
                                                                                          healthy[2]]]
    return Sidecar(targets, INTERVAL), healthy, slow


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers", "endless", "silent"])
def test_a_slow_target_is_down_for_timeout_and_the_others_keep_their_interval(mode: str) -> None:
    async def run() -> None:
        sidecar, healthy, slow = await _fleet(mode)
        loop = asyncio.create_task(sidecar.run())
        slow_target = sidecar.targets[2]
        try:
            async with asyncio.timeout(HANG):
                while slow_target.scrapes < ROUNDS + 1:  # ROUNDS scrapes of it ended, the next one began
                    await asyncio.sleep(0.05)
            # The surfaces answer while the slow target's scrape is in flight.
            transport = httpx.ASGITransport(app=make_app(sidecar, start_loop=False))
            async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
                answers = [await client.get(p) for p in ("/healthz", "/metrics", "/api/v1/diagnosis", "/")]
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            for t in [*healthy, slow]:
                await t.stop()
        assert [a.status_code for a in answers] == [200, 200, 200, 200]
        done = slow_target.scrapes - 1  # the last one was still running
        assert (slow_target.last.up, slow_target.last.error_reason) == (False, "timeout")
        assert slow_target.errors.get("timeout", 0) >= done - 1
        for t in (sidecar.targets[0], sidecar.targets[1], sidecar.targets[3]):
            assert t.last.up, t.last.error
            assert t.scrapes >= done - 1, (f"{t.settings.url}: {t.scrapes} scrapes while the slow one had {done} "
                                           f"(slots skipped: {sidecar.missed})")
        metrics = answers[1].text
        assert f'vllm_headroom_up{{target="{slow.url}"}} 0.0' in metrics
        assert f'vllm_headroom_scrape_errors_total{{reason="timeout",target="{slow.url}"}}' in metrics

    asyncio.run(run())


def test_a_slow_models_endpoint_keeps_the_target_up_and_delays_nobody() -> None:
    async def run() -> None:
        sidecar, healthy, slow = await _fleet("drip-models")
        loop = asyncio.create_task(sidecar.run())
        dripping = sidecar.targets[2]
        try:
            async with asyncio.timeout(HANG):
                while dripping.scrapes < ROUNDS + 1:
                    await asyncio.sleep(0.05)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            for t in [*healthy, slow]:
                await t.stop()
        assert dripping.last.up and dripping.last.engines, dripping.last.error
        assert dripping.errors.get("models", 0) >= 1  # /v1/models cut at the deadline, counted under `models`
        assert dripping.models_error is not None and "within 0.5 s" in dripping.models_error
        for t in (sidecar.targets[0], sidecar.targets[1], sidecar.targets[3]):
            assert t.last.up and t.scrapes >= dripping.scrapes - 1

    asyncio.run(run())


def test_one_shot_diagnose_honours_the_deadline() -> None:
    """`diagnose URL --scrape.timeout 1s` on a target that drips its body: down (timeout) once the deadline
    passes (it ran past 20 s at 2 s; the dripped body here would take 45 minutes)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    with hostile.serving("drip-body") as target:
        done = subprocess.run([sys.executable, "-m", "exporter", "diagnose", target.url, "--scrape.timeout", "1s"],
                              capture_output=True, text=True, timeout=HANG, cwd=repo,
                              env={**os.environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 1, done.stderr
    assert "DOWN (timeout)" in done.stdout and "did not send its whole body within 1 s" in done.stdout
