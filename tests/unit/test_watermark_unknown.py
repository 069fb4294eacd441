"""An unknown `--watermark` is no 0: vLLM takes any share in [0.0, 1.0), default 0.0 (`watermark: float =
Field(default=0.0, ge=0.0, lt=1.0)`, vllm/config/scheduler.py:196, the same in 0.32.0 and 0.33.0) and keeps
int(share × num_blocks) blocks free when admitting beside a running request (vllm/v1/core/kv_cache_manager.py:
209-210, 518-525 @0.33.0). An admission figure read at the default holds only below the share that keeps the head
out: the answer says so and what decides it; with the flag stated, the explanation says how many blocks it keeps.

Recorded: tests/fixtures/admission-0.32.0/watermark (the real vLLM 0.32.0 with --watermark 0.25, 40 blocks: it ran
2 requests with 15 blocks free and 28 waiting, admitting none).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import cli

SNAPSHOT = Path(__file__).parent.parent / "fixtures" / "admission-0.32.0" / "watermark" / "snapshot.prom"
LOG = SNAPSHOT.parent / "startup.log"


def diagnose(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, dict]:  # type: ignore[type-arg]
    assert cli.main(["diagnose", str(SNAPSHOT), *args]) == 0
    text = capsys.readouterr().out
    assert cli.main(["diagnose", str(SNAPSHOT), "--json", *args]) == 0
    [e] = json.loads(capsys.readouterr().out)["targets"][0]["engines"]
    return text, e


def test_an_unknown_watermark_says_what_decides_the_admission(capsys: pytest.CaptureFixture[str]) -> None:
    text, e = diagnose(capsys)
    # 15 free, the head needs 11: one admission at 0.0; from int(w × 40) >= 5 (w >= 0.125) none.
    assert "headroom: admission 1 (0 from --watermark 0.125)" in text
    assert "rests on vLLM's default --watermark 0.0, which nobody stated" in text
    assert "state --watermark to decide" in text
    assert e["admission_watermark_decides"] == 0.125
    [rules] = [line for line in text.splitlines() if "rules:" in line]
    assert "gates (watermark" not in rules and "the watermark only where stated" in rules


def test_a_stated_watermark_says_how_many_blocks_it_keeps(capsys: pytest.CaptureFixture[str]) -> None:
    text, e = diagnose(capsys, "--vllm-args", "vllm serve tiny-llama --watermark 0.25 --max-num-seqs 8")
    assert "--watermark 0.25 keeps 10 of the 40 blocks free beside running requests: 5 are left" in text
    assert "headroom: admission 0," in text and e["admission_watermark_decides"] is None
    assert e["verdict"] == "kv_full"


@pytest.mark.parametrize("args", [["--vllm-args", "vllm serve tiny-llama --max-num-seqs 8"],
                                  ["--vllm-startup-log", str(LOG)]])
def test_a_known_command_line_without_the_flag_runs_the_default(capsys: pytest.CaptureFixture[str],
                                                                args: list[str]) -> None:
    """A command line without --watermark runs vLLM's 0.0: nothing left to decide. The start-up log's
    "non-default args" list it when set: the recorded log's 'watermark': 0.25 is read."""
    text, e = diagnose(capsys, *args)
    assert e["admission_watermark_decides"] is None and "nobody stated" not in text
    if "--vllm-startup-log" in args:
        assert "keeps 10 of the 40 blocks free" in text
