"""Issue 23 item 5: sizes as vLLM users paste them into `estimate`.

vLLM's `--kv-cache-memory-bytes` takes bytes, read with `human_readable_int` (vllm/engine/arg_utils.py:396-409
@0.33.0, vllm/utils/argparse_utils.py:29-74: `k m g t` ×1000, `K M G T` ×1024, no decimal with a binary suffix);
users paste its value into our GiB-by-default flags. The start-up line vLLM prints with that flag is
"Initial free memory X GiB, reserved Y GiB memory for KV Cache as specified by kv_cache_memory_bytes config and
skipped memory profiling. ..." (vllm/v1/worker/gpu_worker.py:664-675 @0.33.0). It is printed by the GPU worker
only: the CPU worker prints "Explicitly set (Y/T) GiB for KV cache" instead (vllm/v1/worker/cpu_worker.py:226-232
@0.32.0), so the GPU line cannot be recorded on this machine; the tests rebuild it from the real 0.32.0 CPU start-up
log of tests/fixtures/vllm-0.32.0/false-full by replacing that one line with the GPU worker's format string.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import cli
from exporter.planning.estimate import GiB

TINY = "tests/e2e/tiny-llama/config.json"
LOG = Path("tests/fixtures/vllm-0.32.0/false-full/startup.log")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["estimate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def doc(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    parsed: dict[str, object] = json.loads(out)
    return parsed


@pytest.mark.parametrize(("flag", "text", "gib"), [("--kv-cache-memory", "6990059274", "6.51"),
                                                    ("--gpu-memory", "85899345920", "80.00"),
                                                    ("--activation-memory", "2147483648000", "2000.00")])
def test_a_bare_number_that_cannot_be_gib_is_refused_with_its_conversion(
        capsys: pytest.CaptureFixture[str], flag: str, text: str, gib: str) -> None:
    """The issue's example: `--kv-cache-memory 6990059274` (bytes pasted from vLLM) is 6.5 billion GiB, above the
    flag's 2 TiB ceiling; the refusal gives the conversion, not "...TiB is outside"."""
    code, _out, err = run(capsys, TINY, flag, text, "--params", "1B")
    assert code == 2
    assert f"{text} looks like bytes: {gib} GiB; write {text}B" in err
    assert "is outside" not in err and err.count("\n") == 1


def test_the_bytes_written_as_bytes_and_vllms_own_flag_are_the_same_pool(capsys: pytest.CaptureFixture[str]) -> None:
    a = doc(capsys, TINY, "--kv-cache-memory", "6990059274B", "--block-size", "32")
    b = doc(capsys, TINY, "--kv-cache-memory-bytes", "6990059274", "--block-size", "32")
    assert a["kv_pool_bytes"] == b["kv_pool_bytes"] == 6990059274
    assert a["num_blocks"] == b["num_blocks"] == 6990059274 // (2 * 2 * 32 * 1 * 64 * 2)  # 2 layers, K+V, bf16


@pytest.mark.parametrize(("text", "bytes_"), [("7G", 7 * 2**30), ("7g", 7 * 10**9), ("6.5g", 6_500_000_000),
                                              ("512M", 512 * 2**20)])
def test_kv_cache_memory_bytes_is_read_as_vllm_reads_it(capsys: pytest.CaptureFixture[str], text: str,
                                                        bytes_: int) -> None:
    assert doc(capsys, TINY, "--kv-cache-memory-bytes", text, "--block-size", "32")["kv_pool_bytes"] == bytes_


@pytest.mark.parametrize(("argv", "sentence"), [
    (["--kv-cache-memory-bytes", "1.5G"], "Decimals are not allowed with binary suffixes like G. Did you mean to "
                                          "use 1.5g instead?"),
    (["--kv-cache-memory-bytes", "6.51GiB"], "'6.51GiB' is not how vLLM reads --kv-cache-memory-bytes"),
    (["--kv-cache-memory-bytes", "7G", "--kv-cache-memory", "7GiB"], "give the KV pool once"),
])
def test_what_vllm_would_refuse_is_refused(capsys: pytest.CaptureFixture[str], argv: list[str], sentence: str) -> None:
    code, _out, err = run(capsys, TINY, *argv)
    assert code == 2 and sentence in err


def _gpu_log(tmp_path: Path, *, exact: bool, override: bool) -> Path:
    """The recorded 0.32.0 start-up log with the CPU worker's pool line replaced by the GPU worker's (0.33.0 format
    string, rounded to 2 decimals as `format_gib` does); `exact` adds vLLM's parsed kv_cache_memory_bytes to the
    "non-default args" line, `override` keeps the recorded "Overriding num_gpu_blocks" line."""
    text = LOG.read_text()
    cpu = "Explicitly set (1.0/8.71) GiB for KV cache on node 0."
    assert cpu in text
    text = text.replace(cpu, "Initial free memory 78.62 GiB, reserved 6.51 GiB memory for KV Cache as specified by "
                             "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
                             "gpu_memory_utilization config.")
    if exact:
        assert "'max_num_seqs': 8}" in text
        text = text.replace("'max_num_seqs': 8}", "'max_num_seqs': 8, 'kv_cache_memory_bytes': 6990059274}")
    if not override:
        text = "\n".join(line for line in text.splitlines()
                         if "Overriding num_gpu_blocks" not in line and "KV cache size" not in line)
    path = tmp_path / "server.log"
    path.write_text(text)
    return path


def test_from_log_reads_the_pool_vllm_reserved_as_kv_cache_memory_bytes(capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path) -> None:
    rounded = doc(capsys, TINY, "--from-log", str(_gpu_log(tmp_path, exact=False, override=False)))
    assert rounded["kv_pool_bytes"] == round(6.51 * GiB)
    exact = doc(capsys, TINY, "--from-log", str(_gpu_log(tmp_path, exact=True, override=False)))
    assert exact["kv_pool_bytes"] == 6990059274
    assert exact["num_blocks"] == 6990059274 // (2 * 2 * 32 * 64 * 2)
    # The override line, when vLLM printed one, still sets the blocks: 40 as recorded.
    assert doc(capsys, TINY, "--from-log", str(_gpu_log(tmp_path, exact=True, override=True)))["num_blocks"] == 40
