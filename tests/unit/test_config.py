"""Reading vLLM command lines and merging config sources by precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.engines.vllm.read import CacheInfo
from exporter.pipeline import config
from exporter.pipeline.config import Overrides, Source


def test_parse_vllm_serve_command_line() -> None:
    argv = config.split_args(
        "vllm serve meta-llama/Llama-3.1-8B --max-num-seqs 64 --max_model_len=32k --block-size 16 "
        "--no-enable-chunked-prefill --api-key s3cret -tp 2 --port 8001"
    )
    got = config.parse_vllm_args(argv)
    assert got == {
        "model": "meta-llama/Llama-3.1-8B",
        "max_num_seqs": 64,
        "max_model_len": 32000,
        "block_size": 16,
        "enable_chunked_prefill": False,
        "tensor_parallel_size": 2,
        "port": 8001,
        "enable_sleep_mode": False,  # a whole command line without --enable-sleep-mode: vLLM's default, off
    }
    assert "s3cret" not in repr(got)
    # A bare list of flags says nothing of the others; the flag itself is read.
    assert "enable_sleep_mode" not in config.parse_vllm_args(["--max-num-seqs", "8"])
    assert config.parse_vllm_args(["--max-num-seqs", "8", "--enable-sleep-mode"])["enable_sleep_mode"] is True


@pytest.mark.parametrize(("text", "value"), [("4096", 4096), ("32k", 32000), ("32K", 32768), ("1M", 1048576),
                                             ("auto", None), ("-1", None), ("x", None)])
def test_token_counts(text: str, value: int | None) -> None:
    assert config.parse_token_count(text) == value


def test_precedence_flag_over_cmdline_over_cache_config_over_models_but_the_running_block_size() -> None:
    cache = CacheInfo({"block_size": "32", "num_gpu_blocks": "80", "engine": "0"})
    cfg = config.resolve(
        Overrides(max_num_seqs=4),
        {"max_num_seqs": 8, "max_model_len": 1024, "block_size": 64},
        Source.CMDLINE,
        cache,
        data_parallel_engines=2,
        models_max_model_len=512,
    )
    assert cfg.max_num_seqs == config.Known(4, Source.FLAG)
    assert cfg.max_model_len == config.Known(1024, Source.CMDLINE)
    # The block size vLLM runs (its cache_config_info) wins over the one its command line asked.
    assert cfg.block_size == config.Known(32, Source.CACHE_CONFIG_INFO)
    # num_gpu_blocks is summed over data-parallel engines from vLLM 0.9 (and says so where it explains an answer).
    assert cfg.num_gpu_blocks == config.Known(40, Source.CACHE_CONFIG_INFO,
                                              basis="the exported 80 shared by 2 data-parallel engines")
    assert cfg.max_num_batched_tokens is None  # unknown stays unknown


def test_models_fill_max_model_len_when_nothing_else_does() -> None:
    cfg = config.resolve(Overrides(), None, Source.CMDLINE, None, 1, 512)
    assert cfg.max_model_len == config.Known(512, Source.V1_MODELS)


def test_num_gpu_blocks_none_stays_unknown() -> None:
    cfg = config.resolve(Overrides(), None, Source.CMDLINE, CacheInfo({"num_gpu_blocks": "None"}), 1, None)
    assert cfg.num_gpu_blocks is None


def _fake_proc(root: Path, pid: int, argv: list[str]) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_find_vllm_cmdline_matches_the_port(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 10, ["python3", "-m", "http.server", "8000"])
    _fake_proc(tmp_path, 11, ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8001",
                              "--max-num-seqs", "3"])
    _fake_proc(tmp_path, 12, ["vllm", "serve", "m", "--max-num-seqs", "8"])
    _fake_proc(tmp_path, 13, ["/usr/bin/vllm-headroom", "serve", "--max-model-len", "99999", "--port", "8001"])
    (tmp_path / "self").mkdir()
    # No /proc/net here: the fallback matches a vLLM server's own --port, never a vllm-headroom process.
    found = config.find_vllm_cmdline(8001, tmp_path)
    assert found == config.FoundCmdline(
        ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8001", "--max-num-seqs", "3"],
        11, "command line port")
    found = config.find_vllm_cmdline(8000, tmp_path)
    assert found is not None and found.argv == ["vllm", "serve", "m", "--max-num-seqs", "8"] and found.pid == 12
    assert config.find_vllm_cmdline(9999, tmp_path) is None


def test_a_target_resolves_its_config_again_when_vllm_restarts_with_another_one() -> None:
    """The sidecar keeps each engine's resolved config between scrapes; a new max_model_len (/v1/models) or a new
    pool (cache_config_info) must still reach the very next scrape, and the notes on contradicting flags stay."""
    from exporter.pipeline.target import Settings, Target
    from tests import fixtures

    def scrape(scenario: str) -> tuple[object, object, list[str]]:
        report = target.observe(1.0, fixtures.snapshot(scenario))
        cfg = report.engines[0].config
        return cfg.num_gpu_blocks, cfg.max_model_len, report.notes

    def known(blocks: int, max_model_len: int) -> tuple[object, object]:
        return config.Known(blocks, Source.CACHE_CONFIG_INFO), config.Known(max_model_len, Source.V1_MODELS)

    target = fixtures.as_recorded(Target(Settings("http://x", Overrides(block_size=16), discover_cmdline=False)),
                                  fixtures.meta("false-full"))
    for _ in range(2):  # the second scrape of the same server answers from what was kept
        *got, notes = scrape("false-full")
        assert tuple(got) == known(40, 512)
        assert any("--block-size 16 contradicts" in n for n in notes)
    fixtures.as_recorded(target, fixtures.meta("head-of-line"))  # /v1/models now says 8192
    assert tuple(scrape("false-full")[:2]) == known(40, 8192)
    assert tuple(scrape("head-of-line")[:2]) == known(321, 8192)  # restarted with a larger pool
