"""Inputs that were silently ignored: a drafter's config without --speculative-config, a start-up log that cannot
be read in a one-shot run (exit 2, one sentence; the sidecar keeps a note and stays up), and the estimated
capacity's basis naming its source twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import cli
from exporter.pipeline.target import Settings, Target
from exporter.replay import recording
from tests import rewrite
from tests.fixtures import as_recorded

FIXTURES = Path(__file__).parent.parent / "fixtures"
IDLE = FIXTURES / "vllm-0.32.0" / "idle"
TINY = Path("tests/e2e/tiny-llama")


def test_estimate_refuses_a_drafter_config_without_speculative_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["estimate", str(TINY), "--draft-model-config", str(TINY), "--kv-cache-memory", "1GiB",
                     "--max-model-len", "512"]) == 2
    err = capsys.readouterr().err
    assert "--draft-model-config" in err and "no --speculative-config" in err and err.count("\n") == 1


def test_diagnose_refuses_a_drafter_config_its_command_line_never_uses(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", str(IDLE / "snapshot.prom"), "--model-config", str(TINY),
                     "--draft-model-config", str(TINY), "--vllm-args", "vllm serve m"]) == 2
    assert "--vllm-args has no --speculative-config" in capsys.readouterr().err


def test_the_sidecar_notes_a_drafter_config_no_command_line_uses() -> None:
    from exporter.planning.estimate import load_model
    r = recording.load(IDLE)
    target = as_recorded(Target(Settings("recorded", discover_cmdline=False, model_shape=load_model(TINY)[0],
                                         draft_shape=load_model(TINY)[0])), r.meta)
    report = target.observe(*r.frames[-1])
    assert report.up and any("--draft-model-config is not used" in n for n in report.notes)


def test_a_one_shot_run_with_an_unreadable_startup_log_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", str(IDLE / "snapshot.prom"), "--vllm-startup-log", "/nonexistent/vllm.log"]) == 2
    err = capsys.readouterr().err
    assert err == "vllm-headroom: cannot read --vllm-startup-log /nonexistent/vllm.log: No such file or directory\n"


def test_the_estimated_capacity_names_its_source_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = recording.load(IDLE).frames[-1][1]
    path = tmp_path / "rust.prom"
    path.write_text(rewrite.drop(text, "vllm:cache_config_info"))
    args = ["diagnose", str(path), "--model-config", str(TINY), "--kv-cache-memory", "1GiB", "--vllm-args",
            "vllm serve m --block-size 32"]
    assert cli.main(args) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if "capacity:" in x]
    assert "(estimated: --kv-cache-memory 1GiB" in line and "estimated: estimated" not in line
    assert cli.main([*args, "--json"]) == 0
    cap = json.loads(capsys.readouterr().out)["targets"][0]["engines"][0]["capacity"]
    assert cap["source"] == "estimated" and not cap["basis"].startswith("estimated")
