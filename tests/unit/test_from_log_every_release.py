"""`estimate --from-log` on every recorded start-up log (issue 26's review: it refused 28 of them).

The recordings start the tiny model with `--hf-overrides '{"max_position_embeddings": N}'` (its config says 4,096)
and `--max-model-len N`; vLLM started, so the log's model config is the overridden one and the estimate must take
it, not refuse with vLLM's length error. Each log is estimated against the model config it was started with (the
folder's config.json where it has one, else the tiny model's).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from exporter import cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = Path(__file__).resolve().parents[1] / "e2e" / "tiny-llama" / "config.json"
LOGS = sorted({*FIXTURES.glob("*/*/startup.log"), *FIXTURES.glob("*/*/*/startup.log")})


def test_there_are_logs_with_hf_overrides() -> None:
    assert sum("max_position_embeddings" in p.read_text(errors="replace") for p in LOGS) >= 20


@pytest.mark.parametrize("log", LOGS, ids=[str(p.relative_to(FIXTURES).parent) for p in LOGS])
def test_every_recorded_startup_log_is_estimated(log: Path) -> None:
    cfg = log.parent / "config.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = cli.main(["estimate", str(cfg if cfg.exists() else TINY), "--from-log", str(log)])
    assert rc == 0, out.getvalue()[:400]
    assert "verdict:" in out.getvalue()
