"""Fixtures for the real-vLLM end-to-end suite (marker `e2e`).

Starting vLLM takes ~1 min on 2 cores, so scenarios share servers: `vllm_main` serves every
scenario with the shared flags, `vllm_hol` the head-of-line scenario that needs a bigger pool.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .scenarios import HOL_FLAGS, SHARED_FLAGS
from .vllm_server import VllmServer


def pytest_sessionstart(session: pytest.Session) -> None:
    from .test_scenarios import REPORT

    REPORT.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print each scenario's engine numbers next to ours (written by test_scenarios.report)."""
    from .test_scenarios import REPORT

    if REPORT.exists() and REPORT.stat().st_size:
        terminalreporter.section("real vLLM vs vllm-headroom, per scenario")
        for line in REPORT.read_text().splitlines():
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    # Every server the suite starts runs eager: no torch.compile of the model, half the start-up (VllmServer).
    VllmServer.EAGER_DEFAULT = True
    config.addinivalue_line(
        "markers",
        "e2e: starts a real vLLM 0.32.0 CPU server from scripts/vllm-venv (slow: ~1 min each)",
    )


def _serve(flags: dict[str, object]) -> Iterator[VllmServer]:
    with VllmServer(**flags) as server:  # type: ignore[arg-type]
        # Load and scrape threads must not compete with the engine's CPU (see VllmServer._pin).
        server.pin_self()
        try:
            yield server
        finally:
            server.unpin_self()


@pytest.fixture(scope="session")
def vllm_main() -> Iterator[VllmServer]:
    """One server for all scenarios with max_model_len 512, block_size 32, 40 blocks, 8 seqs."""
    yield from _serve(SHARED_FLAGS)


@pytest.fixture(scope="session")
def vllm_hol() -> Iterator[VllmServer]:
    """Server for head-of-line blocking: 8192-token contexts, 321 blocks (320 usable)."""
    yield from _serve(HOL_FLAGS)
