"""Version, naming and topology paths, built by rewriting a recorded real 0.32.0 exposition the way other
vLLM versions and deployments export the same state (reference: vllm-metrics-and-admission.md §1)."""

from __future__ import annotations

import re

from exporter.pipeline.config import Known, Overrides, Source, value
from exporter.pipeline.target import Settings, Target
from exporter.pipeline.verdict import Verdict
from tests import fixtures

REAL = fixtures.snapshot("false-full")  # running 8, waiting 92, usage 16/39 on vLLM 0.32.0
ARGS = fixtures.vllm_argv("false-full")


def observe(text: str, version: str | None = "0.32.0", args: list[str] | None = ARGS) -> Target:
    target = Target(Settings("t", vllm_args=args, discover_cmdline=False))
    target.version = version
    target.last = target.observe(1.0, text)
    return target


def only_engine(target: Target):  # type: ignore[no-untyped-def]
    assert len(target.last.engines) == 1
    return target.last.engines[0]


def test_current_names() -> None:
    e = only_engine(observe(REAL))
    assert (e.headroom.kv_used_blocks, e.headroom.kv_capacity_blocks) == (16, 39)
    assert e.verdict is Verdict.SLOTS_FULL


def _as_v1_0_10(text: str) -> str:
    """0.9/0.10 export both usage names and divide by num_gpu_blocks (the null block counts as used)."""
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:kv_cache_usage_perc{"))
    labels = line[len("vllm:kv_cache_usage_perc"):line.rindex(" ")]
    used = 16
    old_usage = (used + 1) / 40
    text = text.replace(line, f"vllm:kv_cache_usage_perc{labels} {old_usage}")
    return text + f"vllm:gpu_cache_usage_perc{labels} {old_usage}\n"


def test_v1_0_10_counts_the_null_block_as_used() -> None:
    e = only_engine(observe(_as_v1_0_10(REAL), version="0.10.1"))
    assert e.headroom.kv_used_blocks == 16
    # Without /version the double export tells the era (0.9-0.10) but not the convention: 0.10.2 already
    # excludes the null block (block_pool.py get_usage @0.10.2). The conservative reading counts one more.
    e = only_engine(observe(_as_v1_0_10(REAL), version=None))
    assert e.headroom.kv_used_blocks == 17


def test_v0_names_without_engine_label() -> None:
    text = re.sub(r'engine="0",', "", REAL).replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    text += 'vllm:num_requests_swapped{model_name="tiny-llama"} 0.0\n'
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:gpu_cache_usage_perc{"))
    text = text.replace(line, line[: line.rindex(" ")] + f" {16 / 40}")
    e = only_engine(observe(text, version="0.6.3"))
    # V0 has no null block: all 40 blocks are usable and usage divides by 40.
    assert (e.headroom.kv_capacity_blocks, e.headroom.kv_used_blocks) == (40, 16)
    assert e.engine == "0"
    assert e.verdict is Verdict.SLOTS_FULL


def test_ray_prefixes() -> None:
    for prefix in ("ray_vllm:", "ray_vllm_"):
        e = only_engine(observe(REAL.replace("vllm:", prefix)))
        assert (e.headroom.kv_used_blocks, e.verdict) == (16, Verdict.SLOTS_FULL)


def test_data_parallel_engines_split_the_summed_block_count() -> None:
    engine1 = [ln.replace('engine="0"', 'engine="1"') for ln in REAL.splitlines() if 'engine="0"' in ln]
    text = REAL + "\n".join(engine1) + "\n"
    text = text.replace('num_gpu_blocks="40"', 'num_gpu_blocks="80"')  # ≥0.9 exports the sum on every engine
    target = observe(text)
    assert [e.engine for e in target.last.engines] == ["0", "1"]
    for e in target.last.engines:
        assert e.headroom.kv_capacity_blocks == 39
        assert value(e.config.num_gpu_blocks) == 40


def test_num_gpu_blocks_none_on_v1_0_8_is_a_gap_not_a_guess() -> None:
    text = REAL.replace('num_gpu_blocks="40"', 'num_gpu_blocks="None"')
    target = observe(text, version="0.8.5", args=[])
    assert target.last.engines == []
    assert target.last.gaps[0].missing == "num_gpu_blocks"
    # An operator can state it.
    target = Target(Settings("t", overrides=Overrides(num_gpu_blocks=40, max_num_seqs=8), discover_cmdline=False))
    target.version = "0.8.5"
    e = target.observe(1.0, text).engines[0]
    assert e.config.num_gpu_blocks == Known(40, Source.FLAG)
    assert e.headroom.kv_capacity_blocks == 39


def test_several_models_behind_one_server() -> None:
    other = [ln.replace('model_name="tiny-llama"', 'model_name="other"') for ln in REAL.splitlines()
             if 'model_name="tiny-llama"' in ln]
    target = observe(REAL + "\n".join(other) + "\n")
    assert sorted(e.model_name for e in target.last.engines) == ["other", "tiny-llama"]


def test_waiting_by_reason_deferred_is_read() -> None:
    text = REAL.replace('reason="deferred"} 0.0', 'reason="deferred"} 5.0')
    e = only_engine(observe(text))
    assert e.waiting_by_reason["deferred"] == 5.0
