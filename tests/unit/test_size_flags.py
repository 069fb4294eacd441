"""Sizes as vLLM users paste them: a bare number that is neither GiB nor bytes is ambiguous (asked for a unit,
never read as TiB), and vLLM's own `--kv-cache-memory-bytes` is one flag, read as vLLM reads it
(`human_readable_int`, vllm/utils/argparse_utils.py @0.33.0) and accepted wherever --kv-cache-memory is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter import cli
from exporter.cli.flags import UsageError
from exporter.planning import memory
from exporter.replay import recording
from tests import rewrite

FIXTURES = Path(__file__).parent.parent / "fixtures"
TINY = Path("tests/e2e/tiny-llama")


@pytest.mark.parametrize("raw", ["2049", "655360", "1048575", "3000.5"])
def test_a_bare_number_neither_gib_nor_bytes_asks_for_a_unit(raw: str) -> None:
    with pytest.raises(ValueError) as exc:
        memory.parse_gib_size("--kv-cache-memory", raw)
    text = str(exc.value)
    assert "no unit" in text and "give a unit" in text and "TiB is outside" not in text
    assert "above 2TiB" in text and "below 1MiB" in text


def test_bare_numbers_either_side_of_the_ambiguous_span_keep_their_reading() -> None:
    assert memory.parse_gib_size("--kv-cache-memory", "2048") == 2048 * 2**30
    with pytest.raises(ValueError, match=re.escape("1048576 looks like bytes: 0.00 GiB; write 1048576B")):
        memory.parse_gib_size("--kv-cache-memory", "1048576")
    with pytest.raises(ValueError, match=re.escape("6990059274 looks like bytes: 6.51 GiB; write 6990059274B")):
        memory.parse_gib_size("--kv-cache-memory", "6990059274")


def test_estimate_refuses_an_ambiguous_pool_and_names_vllms_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["estimate", str(TINY), "--kv-cache-memory", "655360", "--max-model-len", "512"]) == 2
    err = capsys.readouterr().err
    assert "640TiB" not in err and "--kv-cache-memory 655360 has no unit" in err
    assert cli.main(["estimate", str(TINY), "--kv-cache-memory-bytes", "7", "--max-model-len", "512"]) == 2
    err = capsys.readouterr().err
    assert "--kv-cache-memory-bytes 7B is outside" in err and "--kv-cache-memory 7B" not in err


def _no_cache_config(tmp_path: Path) -> str:
    text = recording.load(FIXTURES / "vllm-0.32.0" / "idle").frames[-1][1]
    path = tmp_path / "rust.prom"
    path.write_text(rewrite.drop(text, "vllm:cache_config_info"))
    return str(path)


@pytest.mark.parametrize("command", ["diagnose", "serve"])
def test_vllms_bytes_flag_is_accepted_where_kv_cache_memory_is(command: str) -> None:
    parser = cli.build_parser()
    head = [command, "x"] if command == "diagnose" else [command]
    args = parser.parse_args([*head, "--kv-cache-memory-bytes", "1G"])
    assert args.kv_cache_memory_bytes == 2**30
    with pytest.raises(UsageError, match="is not how vLLM reads --kv-cache-memory-bytes"):
        parser.parse_args([*head, "--kv-cache-memory-bytes", "6.51GiB"])


def test_diagnose_sizes_the_pool_from_vllms_bytes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _no_cache_config(tmp_path)
    base = ["diagnose", path, "--model-config", str(TINY), "--vllm-args", "vllm serve m --block-size 32", "--json"]
    assert cli.main([*base, "--kv-cache-memory-bytes", "1G"]) == 0
    cap = json.loads(capsys.readouterr().out)["targets"][0]["engines"][0]["capacity"]
    page = 2 * 2 * 32 * 64 * 2  # 2 layers, K+V, 32 tokens, 1 KV head x 64, bf16
    assert cap["source"] == "estimated" and cap["num_gpu_blocks"] == 2**30 // page
    assert "--kv-cache-memory-bytes 1,073,741,824" in cap["basis"]
    assert cli.main([*base, "--kv-cache-memory-bytes", "1G", "--kv-cache-memory", "1GiB"]) == 2
    assert "give the KV pool once" in capsys.readouterr().err
