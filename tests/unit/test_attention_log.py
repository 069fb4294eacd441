"""Which attention backend vLLM ran, with which block size and KV dtype, from its real start-up logs.

Every recorded release's start-up log (tests/fixtures/vllm-*/<scenario>/startup.log) and excerpts published on
GitHub (tests/fixtures/published-logs, sources in SOURCES.md). The sidecar reads the same from --vllm-startup-log and
compares vLLM's command line with what the engine exports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.engines.vllm.read import CacheInfo
from exporter.engines.vllm.startup_log import attention
from exporter.pipeline import exposition
from exporter.pipeline.target import Settings, Target

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
PUBLISHED = FIXTURES / "published-logs"
LOGS = sorted(FIXTURES.glob("vllm-*/*/startup.log"))
# What each release's log names: V0 and V1 up to 0.11 "Using Torch SDPA backend.", 0.24 and 0.28 "Using HND KV
# cache layout for CPU_ATTN backend."; 0.18, 0.19 and 0.32 name none on CPU.
NAMED = {"0.8.5-v0": "TORCH_SDPA", "0.9.2": "TORCH_SDPA", "0.10.2": "TORCH_SDPA", "0.11.0": "TORCH_SDPA",
         "0.18.0": None, "0.19.1": None, "0.24.0": "CPU_ATTN", "0.28.0": "CPU_ATTN", "0.32.0": None,
         "0.32.0-rust": None}
# The Rust frontend exports no cache_config_info (its /metrics has no vllm:cache_config_info family).
NO_CACHE_INFO = {"0.32.0-rust"}


def _exported_block_size(snapshot: Path) -> int | None:
    expo = exposition.parse(snapshot.read_text(), {"vllm:cache_config_info"}, "vllm:")
    series = expo.series("vllm:cache_config_info")
    return CacheInfo(series[0][0]).block_size if series else None


@pytest.mark.parametrize("log", LOGS, ids=[f"{p.parts[-3]}/{p.parts[-2]}" for p in LOGS])
def test_every_recorded_release_names_its_backend_and_block_size(log: Path) -> None:
    release = log.parts[-3].removeprefix("vllm-")
    meta = json.loads((log.parent / "meta.json").read_text())
    facts = attention(log.read_text(errors="replace"))
    assert facts.backend == NAMED[release]
    # The block size in effect, from the capacity lines (not the flag): the recording's --block-size, as vLLM exports.
    assert facts.block_size == meta["flags"]["block_size"] == facts.block_size_asked
    assert facts.block_size_source is not None and facts.block_size_source.startswith("the capacity lines")
    exported = _exported_block_size(log.parent / "snapshot.prom")
    assert exported == (None if release in NO_CACHE_INFO else facts.block_size)
    assert facts.kv_cache_dtype == "bfloat16 (auto: the model dtype)" and facts.kv_cache_dtype_asked is None
    assert facts.notes == ()


# The admission recordings of 0.32.0 (other flags: max_num_active_seqs, a watermark, a draft model for spec decode).
ADMISSION_LOGS = sorted(FIXTURES.glob("admission-0.32.0/*/startup.log"))


@pytest.mark.parametrize("log", ADMISSION_LOGS, ids=[p.parts[-2] for p in ADMISSION_LOGS])
def test_the_admission_recordings_logs_give_the_block_size_they_ran(log: Path) -> None:
    meta = json.loads((log.parent / "meta.json").read_text())
    asked = meta["flags"]["block_size"] if "flags" in meta else meta["block_size"]
    text = log.read_text(errors="replace")
    facts = attention(text)
    assert facts.backend is None and facts.block_size == asked == facts.block_size_asked and facts.notes == ()
    assert facts.kv_cache_dtype == "bfloat16 (auto: the model dtype)"
    # Without a block count (no --num-gpu-blocks-override), "1,398,080 tokens" at 2730.62x for 512 tokens fits
    # every block size that divides 512: the flag stands, and the source says so.
    counted = "Overriding num_gpu_blocks" in text
    assert facts.block_size_source is not None
    assert facts.block_size_source.startswith("the capacity lines" if counted else "--block-size (no line")


def test_published_logs_give_backend_block_size_and_dtypes() -> None:
    v083 = attention((PUBLISHED / "vllm-issue-15630-v0.8.3.log").read_text())
    assert (v083.backend, v083.backend_line) == ("FLASH_ATTN", "Using Flash Attention backend on V1 engine.")
    env = attention((PUBLISHED / "flashinfer-issue-2252-v0.14.0rc1.log").read_text())
    assert env.backend_asked == "FLASHINFER" and env.backend is None  # the excerpt stops before the selection
    v063 = attention((PUBLISHED / "vllm-issue-13258-v0.6.3.post1.log").read_text())
    assert (v063.block_size_asked, v063.kv_cache_dtype_asked) == (32, "fp8")
    # "# GPU blocks: 1381" and "10.79x for 2048 tokens": only 16-token blocks give both (1381 × 16 / 2048).
    v07 = attention((PUBLISHED / "vllm-pr-12569-v1-0.7.log").read_text())
    assert v07.block_size == 16 and v07.block_size_asked is None
    # A hybrid (Mamba) model: vLLM raised the attention block to 528 tokens so one page holds a Mamba state.
    hybrid = attention((PUBLISHED / "vllm-pr-37467-hybrid-xpu.log").read_text())
    assert hybrid.block_size == 528 and hybrid.block_size_source == "Setting attention block size to 528 tokens"
    # Turing: FlashAttention refused, Triton taken; said once although two lines of the excerpt are one worker's.
    turing = attention((PUBLISHED / "vllm-pr-14071-turing-v1.log").read_text())
    assert turing.backend == "TRITON_ATTN" and turing.backend_line == "Using Triton backend on V1 engine."
    assert turing.notes == ("FLASH_ATTN (vLLM's first choice) cannot run on Turing GPUs: vLLM runs TRITON_ATTN",)
    sm120 = attention((PUBLISHED / "vllm-issue-40153-sm120.log").read_text())
    assert (sm120.backend, sm120.candidates) == ("TRITON_ATTN", ("TRITON_ATTN",)) and sm120.notes == ()
    # Every excerpt in the folder is checked above and listed in SOURCES.md with its address.
    sources = (PUBLISHED / "SOURCES.md").read_text()
    assert all(f"`{p.name}` | https://github.com/" in sources for p in PUBLISHED.glob("*.log"))


def _diagnose(*args: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-m", "exporter", "diagnose", *args, "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc: dict[str, object] = json.loads(out.stdout)["targets"][0]
    return doc


def test_the_sidecar_reads_the_start_up_log_and_says_where_the_command_line_differs() -> None:
    folder = FIXTURES / "vllm-0.24.0" / "idle"
    doc = _diagnose(str(folder / "snapshot.prom"), "--vllm-startup-log", str(folder / "startup.log"),
                    "--vllm-args", "vllm serve m --block-size 16 --kv-cache-dtype fp8 --attention-backend FLASHINFER")
    att = doc["vllm_attention"]
    assert isinstance(att, dict) and att["backend"] == "CPU_ATTN" and att["block_size"] == 32
    notes = doc["notes"]
    assert isinstance(notes, list)
    assert any("--block-size 16; vLLM runs 32-token blocks" in n for n in notes), notes
    assert any("--kv-cache-dtype fp8" in n for n in notes) and any("FLASHINFER" in n for n in notes)
    engines = doc["engines"]
    assert isinstance(engines, list) and engines[0]["block_size_tokens"] == 32  # the block size vLLM runs
    assert engines[0]["config"]["block_size"] == {"value": 32, "source": "cache_config_info"}


def test_an_unreadable_startup_log_is_one_note_and_the_rest_is_judged() -> None:
    folder = FIXTURES / "vllm-0.32.0" / "idle"
    target = Target(Settings(url="http://x", startup_log=str(folder / "missing.log"), discover_cmdline=False))
    report = target.observe(0.0, (folder / "snapshot.prom").read_text())
    assert report.engines and report.attention is None
    assert any("--vllm-startup-log" in n and "cannot be read" in n for n in report.notes)


def test_estimate_from_log_names_the_backend_and_the_block_size_in_effect() -> None:
    log = FIXTURES / "vllm-0.28.0" / "idle" / "startup.log"
    out = subprocess.run([sys.executable, "-m", "exporter", "estimate", str(REPO / "tests" / "e2e" / "tiny-llama"),
                          "--from-log", str(log), "--json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    att = doc["from_log_attention"]
    assert (att["backend"], att["block_size"], att["block_size_asked"]) == ("CPU_ATTN", 32, 32)
    # The what-if lists the sizes CPU_ATTN takes (multiples of 32), not 16.
    assert [r["block_size"] for r in doc["block_size_what_if"]] == [32, 64, 128, 256]
    text = subprocess.run([sys.executable, "-m", "exporter", "estimate", str(REPO / "tests" / "e2e" / "tiny-llama"),
                           "--from-log", str(log)], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    assert "attention backend CPU_ATTN" in text and "block size in effect 32" in text


def test_the_sidecar_exports_what_the_start_up_log_names() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.expose.collector import HeadroomCollector

    folder = FIXTURES / "vllm-0.28.0" / "idle"
    target = Target(Settings(url="http://x", startup_log=str(folder / "startup.log"), discover_cmdline=False))
    target.last = target.observe(0.0, (folder / "snapshot.prom").read_text())
    registry = CollectorRegistry()
    registry.register(HeadroomCollector([target]))
    text = generate_latest(registry).decode()
    assert ('vllm_headroom_attention_info{backend="CPU_ATTN",block_size="32",block_size_asked="32",'
            'kv_cache_dtype="bfloat16 (auto: the model dtype)",target="http://x"} 1.0') in text


def _estimate_from(log_text: str, tmp_path: Path) -> dict[str, object]:
    log = tmp_path / "startup.log"
    log.write_text(log_text)
    out = subprocess.run([sys.executable, "-m", "exporter", "estimate", str(REPO / "tests" / "e2e" / "tiny-llama"),
                          "--from-log", str(log), "--json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_a_cpu_log_without_block_size_computes_with_vllms_cpu_default(tmp_path: Path) -> None:
    # The real 0.32.0 CPU log with neither --block-size nor the override: vLLM's CPU platform then sets 128 for a
    # model without MLA (vllm/platforms/cpu.py:292-293 @0.32.0), not the GPU's 16.
    text = (FIXTURES / "vllm-0.32.0" / "idle" / "startup.log").read_text(errors="replace")
    text = text.replace("'block_size': 32, ", "").replace("block_size=32, ", "")
    text = "\n".join(line for line in text.splitlines() if "Overriding num_gpu_blocks" not in line)
    assert "block_size" not in text and "CPU KV cache size" in text
    doc = _estimate_from(text, tmp_path)
    att = doc["from_log_attention"]
    assert isinstance(att, dict) and att["block_size"] == 128 and att["block_size_asked"] is None
    assert "cpu.py:292-293" in att["block_size_source"]
    assert doc["block_size"] == 128 and doc["inputs"]["block_size"] == 128  # type: ignore[index]


def test_the_block_size_the_log_says_vllm_set_is_the_one_computed_with(tmp_path: Path) -> None:
    # --block-size 32 asked, "Setting kv cache block size to 64", capacity lines consistent with 40 blocks of 64.
    text = (FIXTURES / "vllm-0.32.0" / "idle" / "startup.log").read_text(errors="replace")
    text = text.replace("CPU KV cache size: 1,280 tokens, Maximum concurrency for 512 tokens per request: 2.50x",
                        "CPU KV cache size: 2,560 tokens, Maximum concurrency for 512 tokens per request: 5.00x")
    text = text.replace("(EngineCore pid=9858) INFO 11-29 13:32:36 [kv_cache_utils.py:2619] Overriding",
                        "(EngineCore pid=9858) INFO 11-29 13:32:36 [interface.py:777] Setting kv cache block size "
                        "to 64 for CPU_ATTN backend.\n(EngineCore pid=9858) INFO 11-29 13:32:36 "
                        "[kv_cache_utils.py:2619] Overriding")
    doc = _estimate_from(text, tmp_path)
    att = doc["from_log_attention"]
    assert isinstance(att, dict) and (att["block_size"], att["block_size_asked"]) == (64, 32)
    assert doc["block_size"] == 64 and doc["inputs"]["block_size"] == 64  # type: ignore[index]
    log = doc["from_log"]
    assert isinstance(log, dict)
    assert log["kv_tokens"] == {"log": 2560, "ours": 2560} and log["max_concurrency"] == {"log": 5.0, "ours": 5.0}
    chosen = [r for r in doc["block_size_what_if"] if r.get("chosen")]  # type: ignore[union-attr]
    assert [r["block_size"] for r in chosen] == [64]


def test_without_cache_config_info_the_sidecar_takes_the_block_size_the_log_says_vllm_ran() -> None:
    # The Rust frontend exports no cache_config_info: its command line (and ours) asks 32, the log says vLLM set 64.
    from exporter.engines.vllm.startup_log import parse
    from exporter.pipeline.config import Overrides, Source, resolve

    text = (FIXTURES / "vllm-0.32.0-rust" / "idle" / "startup.log").read_text(errors="replace")
    text += ("\n(EngineCore pid=1) INFO 11-29 13:32:36 [interface.py:777] Setting kv cache block size to 64 for "
             "CPU_ATTN backend.\n")
    cfg = resolve(Overrides(block_size=32), {"block_size": 32}, Source.CMDLINE, None, 1, None, parse(text))
    assert cfg.block_size is not None and (cfg.block_size.value, cfg.block_size.source) == (64, Source.STARTUP_LOG)
    # A log that does not say what ran leaves the stated size.
    plain = parse((FIXTURES / "vllm-0.32.0-rust" / "idle" / "startup.log").read_text(errors="replace"))
    cfg = resolve(Overrides(block_size=32), None, Source.CMDLINE, None, 1, None, plain)
    assert cfg.block_size is not None and cfg.block_size.value == 32
