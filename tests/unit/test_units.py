"""One grammar for sizes, durations and token counts: flags, env vars and --vllm-args read them alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter import cli
from exporter.core import units
from exporter.pipeline.config import parse_vllm_args

GiB = 1024**3


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5.0), ("0.5s", 0.5), ("300ms", 0.3), ("1m", 60.0), ("1h30m", 5400.0), ("2h0m5s", 7205.0), ("90", 90.0),
    ("1.5", 1.5), ("1d", 86400.0),
])
def test_durations(text: str, seconds: float) -> None:
    assert units.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "s5", "1h 30m", "m", "-1s", "1.2.3s", "5s5"])
def test_bad_durations_name_the_value(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|negative"):
        units.parse_duration(text)


@pytest.mark.parametrize(("text", "size"), [
    ("16MiB", 16 * 1024**2), ("512kB", 512_000), ("80G", 80 * GiB),
    ("6.51GiB", round(6.51 * GiB)), ("23.58GiB", round(23.58 * GiB)), ("80GB", 80 * 10**9),
    ("80Gi", 80 * GiB), ("512", 512), ("1.5KiB", 1536), ("2TiB", 2 * 1024**4),
])
def test_sizes(text: str, size: int) -> None:
    assert units.parse_size(text) == size


def test_a_bare_size_takes_the_stated_default_unit() -> None:
    assert units.parse_size("80", default_unit="GiB") == 80 * GiB


# vLLM 0.32.0's human_readable_int (vllm/utils/argparse_utils.py:29-70): lowercase k/m/g/t ×1000 with decimals
# truncated (int(float(n) × mult): '1.0001k' is 1000), uppercase K/M/G/T ×1024 and whole numbers only.
@pytest.mark.parametrize(("text", "tokens"), [("4096", 4096), ("32k", 32000), ("32K", 32768), ("1.5k", 1500),
                                              ("1M", 1024**2), ("1m", 10**6), ("25.6k", 25600), ("1.0001k", 1000),
                                              ("2t", 2 * 10**12), ("2T", 2 * 2**40), (" 8K ", 8192)])
def test_tokens_as_vllm_reads_them(text: str, tokens: int) -> None:
    assert units.parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["0", "abc", "1.5", "4096.0", "32 k", "1.5x"])
def test_token_counts_must_be_whole_and_positive(text: str) -> None:
    with pytest.raises(ValueError):
        units.parse_tokens(text)


@pytest.mark.parametrize("text", ["1.5K", "0.5M", "2.0G", "1.5T"])
def test_decimals_with_binary_suffixes_are_refused_with_vllms_message(text: str) -> None:
    with pytest.raises(ValueError, match=r"^Decimals are not allowed with binary suffixes like [KMGT]\. Did you mean "
                       r"to use [\d.]+[kmgt] instead\?$"):
        units.parse_tokens(text)
    with pytest.raises(ValueError, match="Decimals are not allowed"):
        units.parse_size(text)


@pytest.mark.parametrize(("text", "size"), [("512K", 512 * 1024), ("512k", 512_000), ("4G", 4 * GiB),
                                            ("4g", 4 * 10**9), ("1T", 1024**4)])
def test_single_letter_size_suffixes_read_as_vllms_kv_cache_memory_bytes(text: str, size: int) -> None:
    assert units.parse_size(text) == size


def test_the_sidecar_reads_vllm_args_on_the_same_rule() -> None:
    argv = ["vllm", "serve", "m", "--max-model-len", "32K", "--max-num-batched-tokens", "1.5K"]
    assert parse_vllm_args(argv) == {"model": "m", "max_model_len": 32768,  # vLLM itself refuses 1.5K
                                     "enable_sleep_mode": False}


@given(st.integers(min_value=1, max_value=10**7))
def test_durations_round_trip(ms: int) -> None:
    seconds = ms / 1000
    assert units.parse_duration(units.format_duration(seconds)) == pytest.approx(seconds)


@given(st.integers(min_value=1, max_value=2**50))
def test_exact_binary_sizes_round_trip(n: int) -> None:
    text = units.format_size(n)
    if "." not in text:
        assert units.parse_size(text) == n


def test_flag_and_vllm_args_share_the_token_grammar() -> None:
    args = cli.build_parser().parse_args(["diagnose", "x.prom", "--max-model-len", "32k"])
    assert args.max_model_len == parse_vllm_args(["vllm", "serve", "m", "--max-model-len", "32k"])["max_model_len"]
    assert args.max_model_len == 32000


def test_help_shows_defaults_in_units(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default 5s)" in out
    assert "(default 3s)" in out
    assert "(default 16MiB)" in out
    assert "(default 5m)" in out
    assert "16777216" not in out
    assert "(default 5.0)" not in out


def test_estimate_takes_sizes_as_vllm_prints_them() -> None:
    args = cli.build_parser().parse_args(["estimate", "c.json", "--kv-cache-memory", "6.51GiB",
                                          "--gpu-memory", "23.58GiB", "--max-model-len", "32k"])
    assert args.kv_cache_memory == round(6.51 * GiB)
    assert args.gpu_memory == round(23.58 * GiB)
    assert args.max_model_len == 32000
