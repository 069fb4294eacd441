"""A start-up log that holds several start-ups (a log volume vLLM appends to across restarts): only the last one
describes the engine that runs, and the sidecar, which re-reads the file every --models.interval, follows it.

The logs are the real vLLM 0.32.0 start-up log of tests/fixtures/vllm-0.32.0/idle (40 blocks of 32 tokens,
`--num-gpu-blocks-override 40`) followed by the same start-up rewritten to 20 blocks, as vLLM prints it when
restarted with `--num-gpu-blocks-override 20` (the override, token and concurrency lines and the flag).
"""

from __future__ import annotations

from pathlib import Path

from exporter.engines.vllm import VLLM
from exporter.pipeline.config import Source
from exporter.pipeline.target import EngineReport, Settings, Target
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording
from tests import rewrite
from tests.fixtures import as_recorded

FIXTURES = Path(__file__).parent.parent / "fixtures"
LOG = (FIXTURES / "vllm-0.32.0" / "idle" / "startup.log").read_text()


def restarted_with(blocks: int) -> str:
    """The real log as vLLM prints it when started with --num-gpu-blocks-override `blocks` (512-token requests of
    16 blocks: concurrency blocks / 16)."""
    out = LOG.replace("'num_gpu_blocks_override': 40", f"'num_gpu_blocks_override': {blocks}")
    out = out.replace("num_gpu_blocks_override=40", f"num_gpu_blocks_override={blocks}")
    out = out.replace("KV cache size: 1,280 tokens", f"KV cache size: {blocks * 32:,} tokens")
    out = out.replace("per request: 2.50x", f"per request: {blocks / 16:.2f}x")
    assert out.count(f"override={blocks}") == 1 and out != LOG
    return out


def test_only_the_last_startup_in_the_file_counts() -> None:
    facts = VLLM.parse_startup_log(LOG + restarted_with(20))
    assert (facts.override, facts.kv_tokens, facts.max_concurrency) == (20, 640, 1.25)
    assert dict(facts.flags)["num_gpu_blocks_override"] == "20"
    facts = VLLM.parse_startup_log(restarted_with(20) + LOG)
    assert (facts.override, facts.kv_tokens, facts.max_concurrency) == (40, 1280, 2.5)


def _target(tmp_path: Path, args: list[str] | None) -> tuple[Target, Path, recording.Recording]:
    r = recording.load(FIXTURES / "vllm-0.32.0" / "idle")
    path = tmp_path / "vllm.log"
    path.write_text(LOG)
    target = as_recorded(Target(Settings("recorded", vllm_args=args, discover_cmdline=False,
                                         startup_log=str(path), models_interval=1.0,
                                         thresholds=Thresholds(false_full_hold=2.0))), r.meta)
    return target, path, r


def _engine(target: Target, t: float, text: str) -> tuple[EngineReport, list[str]]:
    report = target.observe(t, rewrite.drop(text, "vllm:cache_config_info"))
    [e] = report.engines
    return e, report.notes


def test_the_sidecar_follows_a_restart_in_the_log_it_rereads(tmp_path: Path) -> None:
    target, path, r = _target(tmp_path, None)
    t0, first = r.frames[0]
    e, _notes = _engine(target, t0, first)
    assert e.config.num_gpu_blocks is not None and e.config.num_gpu_blocks.value == 40
    path.write_text(LOG + restarted_with(20))
    e, _notes = _engine(target, t0 + 5.0, first)
    assert e.config.num_gpu_blocks is not None and e.config.num_gpu_blocks.value == 20
    assert e.config.num_gpu_blocks.source == Source.STARTUP_LOG


def test_when_vllm_args_and_the_log_disagree_a_note_says_so_and_which_wins(tmp_path: Path) -> None:
    args = ["vllm", "serve", "tiny-llama", "--block-size", "32", "--num-gpu-blocks-override", "40"]
    target, path, r = _target(tmp_path, args)
    path.write_text(LOG + restarted_with(20))
    t0, first = r.frames[0]
    e, notes = _engine(target, t0, first)
    assert e.config.num_gpu_blocks is not None and e.config.num_gpu_blocks.value == 20
    [note] = [n for n in notes if "disagree" in n or "start-up log wins" in n]
    assert "--vllm-args" in note and "40" in note and "20 blocks" in note and "the start-up log wins" in note
    # Agreeing sources: no note.
    target, path, r = _target(tmp_path, args)
    e, notes = _engine(target, t0, first)
    assert e.config.num_gpu_blocks is not None and e.config.num_gpu_blocks.value == 40
    assert not [n for n in notes if "start-up log wins" in n]


def test_the_command_pasted_before_a_restart_belongs_to_it() -> None:
    """The published FlashInfer log (tests/fixtures/published-logs) starts with its command line,
    `VLLM_ATTENTION_BACKEND=FLASHINFER vllm serve ...`: kept with its own start-up, also as the second one."""
    published = (FIXTURES / "published-logs" / "flashinfer-issue-2252-v0.14.0rc1.log").read_text()
    assert VLLM.attention_facts(published).backend_asked == "FLASHINFER"
    assert VLLM.attention_facts(LOG + "\n" + published).backend_asked == "FLASHINFER"
    assert VLLM.attention_facts(published + "\n" + LOG).backend_asked is None
