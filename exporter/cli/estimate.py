"""`vllm-headroom estimate`: vLLM's KV arithmetic from a model's config.json, before deploying."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import textwrap
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import defaults
from ..engines.vllm import VLLM
from ..planning import blocks, memory, startup_log
from ..planning import estimate as est
from .flags import (
    DRAFT_WITHOUT_SPEC,
    UsageError,
    add,
    add_kv_cache_memory_bytes,
    block_size,
    fraction,
    params,
    positive_int,
    tokens,
)

DESCRIPTION = (
    "Estimate vLLM 0.32.0's KV cache from a Hugging Face config.json: pages, KV-cache groups, blocks, max "
    'concurrency and fit, for dense, sliding-window, MLA and hybrid (attention + Mamba / linear attention) '
    'models, with tensor, pipeline and data parallel. Memory side: --gpu-memory with the weights (safetensors '
    'index of a model folder, --params or --weights-bytes) and an activation reserve; or --kv-cache-memory '
    "for the pool directly (vLLM's 'Available KV cache memory'); or --num-gpu-blocks-override alone; or "
    '--from-log. Without any, it answers the inverse question: bytes per token and per request, and the '
    'memory max_num_seqs requests need.'
)

EPILOG = """\
sizes: a unit is optional; a bare number is GiB (80 = 80GiB); 23.58GiB, 6.51GiB and 80GB work as vLLM prints them.

examples:
  # a 70B dense model on 4 x 80 GiB
  vllm-headroom estimate docs/examples/llama-3.1-70b.json --tensor-parallel-size 4 --gpu-memory 80GiB \\
      --params 70.6B --max-model-len 32k --max-num-seqs 64

  # hybrid: Qwen3-Next-80B-A3B (1 attention layer in 4, the rest Gated DeltaNet with a fixed state per
  # request); vLLM raises the attention block size to 272 tokens at TP4 so a page holds one state
  vllm-headroom estimate docs/examples/qwen3-next-80b-a3b.json --tensor-parallel-size 4 \\
      --kv-cache-memory 30GiB --max-model-len 256k --max-num-seqs 16

  # pipeline parallel: DeepSeek-V2-Lite over 2 stages x TP2; stage 0 holds 14 of 27 layers, the pool is
  # the smallest stage's (one pool per stage, as vLLM logs one per worker)
  vllm-headroom estimate docs/examples/deepseek-v2-lite.json --tensor-parallel-size 2 \\
      --pipeline-parallel-size 2 --kv-cache-memory 12.13GiB,11.33GiB --max-model-len 1024

  # the inverse question: no memory given -> bytes per token and per request, memory for 32 x 128k
  vllm-headroom estimate meta-llama/Llama-3.1-8B --max-model-len 128k --max-num-seqs 32

  # a pasted start-up log: what it states next to what we compute
  vllm-headroom estimate docs/examples/deepseek-v2-lite.json --from-log server.log
"""


def _gib_size(flag: str) -> Callable[[str], int]:
    """`flag`'s size in the units grammar; a bare number is GiB, one that cannot be is refused as bytes."""
    def conv(text: str) -> int:
        try:
            return memory.parse_gib_size(flag, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    conv.__name__ = "size"
    return conv


def _gib_sizes(text: str) -> int | tuple[int, ...]:
    """One size, or one per pipeline stage separated by commas (a tuple)."""
    sizes = tuple(_gib_size("--kv-cache-memory")(part) for part in text.split(","))
    return sizes if len(sizes) > 1 else sizes[0]


def register(sub: Any) -> None:
    p = sub.add_parser("estimate", help="KV memory and capacity of a model on given devices, vLLM's block math",
                       description=textwrap.fill(DESCRIPTION, width=100, break_on_hyphens=False),
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="config.json, a model folder holding it (and "
                   "model.safetensors.index.json), or a Hugging Face id found in the local cache")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--from-log", metavar="FILE", help="a vLLM start-up log: take the memory, blocks, block size and "
                   "max_model_len it states, and show its figures next to ours")
    g = p.add_argument_group("model and cache")
    add(g, "--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
        help="model dtype (auto = the config's torch_dtype)")
    add(g, "--kv-cache-dtype", default="auto", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
        help="KV cache dtype (auto = the model dtype)")
    add(g, "--mamba-ssm-cache-dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
        help="dtype of Mamba / linear-attention SSM states (auto = the model's; vLLM's CPU build uses float32)")
    add(g, "--tensor-parallel-size", positive_int, defaults.ESTIMATE_TENSOR_PARALLEL_SIZE,
        help="tensor parallel size; KV heads are split across it and it must divide the attention heads")
    add(g, "--pipeline-parallel-size", positive_int, 1,
        help="pipeline stages; each holds its layers' KV, the pool is the smallest stage's")
    add(g, "--data-parallel-size", positive_int, 1, help="data-parallel engines, each with its own pool")
    add(g, "--block-size", block_size, defaults.ESTIMATE_BLOCK_SIZE,
        help="KV block size in tokens (hybrids: vLLM raises it until a page holds one state)")
    add(g, "--max-model-len", tokens, help="context length, e.g. 32k (default: the config's max_position_embeddings)")
    add(g, "--max-num-seqs", positive_int, defaults.ESTIMATE_MAX_NUM_SEQS, help="max_num_seqs to check against "
        "the pool")
    add(g, "--max-num-batched-tokens", tokens, defaults.ESTIMATE_MAX_NUM_BATCHED_TOKENS,
        help="vLLM's token budget per step; sliding-window layers keep this many in-flight tokens")
    add(g, "--async-scheduling", action=argparse.BooleanOptionalAction, default=True,
        help="two batches in flight (vLLM's default where the platform supports it)")
    add(g, "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
        help="vLLM's default; hybrids then hold 2 (Mamba-2: 3) state blocks per request instead of 1")
    add(g, "--num-gpu-blocks-override", positive_int, help="like vLLM's: the number of blocks, no memory needed")
    add(g, "--speculative-config", help="vLLM's --speculative-config JSON, e.g. '{\"method\": \"eagle3\", "
        "\"model\": \"org/drafter\", \"num_speculative_tokens\": 3}': the drafter's layers join the KV cache")
    add(g, "--draft-model-config", help="the drafter's config.json or folder (EAGLE, EAGLE3, DFlash, a draft model); "
        "else its --speculative-config model is looked up like the model")
    add(g, "--prompt-tokens", positive_int, help="a typical request's prompt, for the block-size what-if (empty "
        "slots per block, requests that fit)")
    add(g, "--output-tokens", positive_int, help="a typical request's output, with --prompt-tokens")
    add(g, "--allow-long-max-model-len", action="store_true",
        help="like VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: a max_model_len above max_position_embeddings warns, not fails")
    g = p.add_argument_group("memory per device (a bare number is GiB)")
    add(g, "--gpu-memory", _gib_size("--gpu-memory"), help="memory of one device, e.g. 80GiB or 23.58GiB")
    add(g, "--gpu-memory-utilization", fraction, defaults.ESTIMATE_GPU_MEMORY_UTILIZATION,
        help="vLLM's gpu_memory_utilization")
    add(g, "--params", params, help="parameter count when there is no safetensors index, e.g. 70B")
    add(g, "--weights-bytes", _gib_size("--weights-bytes"),
        help="weights' size of the whole model, e.g. 140GB (overrides the index)")
    add(g, "--activation-memory", _gib_size("--activation-memory"),
        help="activations, non-torch memory and CUDA graphs per device (default 2GiB)")
    add(g, "--kv-cache-memory", _gib_sizes, help="KV pool per device, e.g. 6.51GiB, or one per pipeline stage "
        "(12.13GiB,11.33GiB): skip the budget math")
    add_kv_cache_memory_bytes(g)
    p.set_defaults(run=run)


def _inputs(args: argparse.Namespace) -> tuple[est.Inputs, startup_log.LogFacts | None]:
    facts = None
    if args.from_log:
        try:
            facts = startup_log.parse(Path(args.from_log).read_text(errors="replace"))
        except OSError as exc:
            raise ValueError(f"cannot read --from-log {args.from_log}: {exc.strerror}") from None
    model = args.model or (facts.model if facts else None)
    if not model:
        raise ValueError("name the model: a config.json, a model folder or a Hugging Face id in the local cache")
    shape, indexed = est.load_model(model)
    pools = args.kv_cache_memory
    pools = (pools,) if isinstance(pools, int) else pools
    if args.kv_cache_memory_bytes is not None:
        if pools:
            raise ValueError("give the KV pool once: --kv-cache-memory or vLLM's --kv-cache-memory-bytes, not both")
        pools = (args.kv_cache_memory_bytes,)
    x = est.Inputs(
        shape=shape, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
        tensor_parallel_size=args.tensor_parallel_size, pipeline_parallel_size=args.pipeline_parallel_size,
        data_parallel_size=args.data_parallel_size, block_size=args.block_size,
        max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs, gpu_memory=args.gpu_memory,
        max_num_batched_tokens=args.max_num_batched_tokens, async_scheduling=args.async_scheduling,
        prefix_caching=args.enable_prefix_caching, mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
        gpu_memory_utilization=args.gpu_memory_utilization,
        weights_bytes=args.weights_bytes or indexed, params=args.params,
        activation_bytes=est.DEFAULT_ACTIVATION_BYTES if args.activation_memory is None else args.activation_memory,
        kv_cache_memory=pools[0] if pools and len(pools) == 1 else None,
        stage_kv_memory=pools if pools and len(pools) > 1 else None,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        allow_long_max_model_len=args.allow_long_max_model_len or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
        in ("1", "true", "True"),
    )
    if args.speculative_config:
        x = _with_drafter(x, args.speculative_config, args.draft_model_config)
    elif args.draft_model_config:
        raise ValueError(DRAFT_WITHOUT_SPEC.format(where="the command has"))
    if facts is not None:
        x = startup_log.apply(facts, x)
    return x, facts


def _with_drafter(x: est.Inputs, text: str, draft_config: str | None) -> est.Inputs:
    """`x` with vLLM's --speculative-config, read as vLLM reads it, and the drafter's shape when it has layers."""
    spec, notes = VLLM.parse_args(["--speculative-config", text], "--speculative-config")
    if notes:
        raise ValueError(notes[0])
    method = spec.get("speculative_method")
    if method is None:
        raise ValueError("--speculative-config names neither a method nor a model")
    draft = None
    if draft_config:
        draft = est.load_model(draft_config)[0]
    elif method not in ("mtp", "ngram", "suffix") and spec.get("speculative_model"):
        try:
            draft = est.load_model(spec["speculative_model"])[0]
        except ValueError as exc:
            raise ValueError(f"the {method} drafter's layers join the KV cache and its config.json is needed: "
                             f"{exc}; or give --draft-model-config") from None
    return replace(x, speculative_method=method, num_speculative_tokens=spec.get("num_speculative_tokens"),
                   draft_shape=draft)


def _log_rows(facts: startup_log.LogFacts, e: est.Estimate) -> list[tuple[str, str, Any, Any]]:
    """(key, label, the log's figure, ours) for every figure the log states."""
    rows = [("num_blocks", "blocks", facts.override or facts.num_gpu_blocks, e.num_blocks),
            ("kv_tokens", "KV cache size (tokens)", facts.kv_tokens, e.kv_tokens),
            ("max_concurrency", "max concurrency", facts.max_concurrency, round(e.max_concurrency, 2)),
            ("block_size", "attention block size", facts.attention_block_size or facts.backend_block_size,
             e.block_size),
            ("max_model_len_fit", "estimated maximum model length", facts.estimated_max_model_len,
             e.max_model_len_fit)]
    return [r for r in rows if r[2] is not None]


def _block_sizes(args: argparse.Namespace, x: est.Inputs, facts: startup_log.LogFacts | None
                 ) -> list[blocks.BlockSizeRow]:
    """The block-size what-if: each size the backend takes (the log's backend when it names one)."""
    if (args.prompt_tokens is None) != (args.output_tokens is None):
        raise UsageError("give --prompt-tokens and --output-tokens together: the lengths of a typical request")

    def num_blocks(bs: int) -> int | None:
        try:
            e = est.estimate(dataclasses.replace(x, block_size=bs))
        except ValueError:
            return None  # vLLM would refuse this size for the model (or the pool holds no block)
        return e.num_blocks if e.block_size == bs else None  # a hybrid raises the size: not this row's

    backend = ((facts.attention.backend if facts.attention else None) or facts.backend) if facts else None
    return blocks.what_if(x.block_size, backend, args.prompt_tokens, args.output_tokens,
                          num_blocks, x.context, running=x.max_num_seqs)


def attention_lines(a: startup_log.AttentionFacts | None) -> list[str]:
    """What the log says about the attention backend, the block size and the KV dtype, asked beside in effect."""
    if a is None:
        return []
    if a.backend:
        chose = f" out of {', '.join(a.candidates)}" if a.candidates else ""
        backend = f"attention backend {a.backend}{chose} (the log: {a.backend_line!r})"
    else:
        backend = ("attention backend: the log names none (vLLM's CPU build, for one, selects CPU_ATTN for every "
                   "model without MLA and logs nothing, vllm/platforms/cpu.py:177-179 @0.32.0)")
    if a.backend_asked:
        backend += f"; asked: {a.backend_asked}"
    asked = "not asked (vLLM's default)" if a.block_size_asked is None else f"--block-size {a.block_size_asked}"
    block = (f"block size in effect {a.block_size} (from {a.block_size_source}); {asked}" if a.block_size
             else f"block size in effect: the log does not say; {asked}")
    kv = f"KV cache dtype in effect {a.kv_cache_dtype or 'not stated'}" + (
        f"; asked --kv-cache-dtype {a.kv_cache_dtype_asked}" if a.kv_cache_dtype_asked else "")
    return [backend, block, kv, *(f"differs from the flags: {n}" for n in a.notes)]


def run(args: argparse.Namespace) -> int:
    try:
        x, facts = _inputs(args)
        if not x.has_memory:
            r = est.requirements(x)
            print(json.dumps(est.requirements_json(x, r), indent=2) if args.json else est.render_requirements(x, r))
            return 0
        result = est.estimate(x)
        fits = est.smallest_fit(x) if x.gpu_memory is not None else []
    except ValueError as exc:  # Unsupported and vLLM's own refusals included: one sentence, never a wrong number
        raise UsageError(str(exc)) from None
    sizes = _block_sizes(args, x, facts)
    log_rows = _log_rows(facts, result) if facts else []
    if args.json:
        doc = est.as_json(x, result)
        if fits:
            doc["smallest_fit"] = [{"kv_cache_dtype": kv, "tensor_parallel_size": tp} for kv, tp, _e in fits]
        doc["block_size_what_if"] = [r.as_json() for r in sizes]
        if facts:
            doc["from_log"] = {"version": facts.version, **{k: {"log": v, "ours": o} for k, _l, v, o in log_rows}}
            doc["from_log_notes"] = {"backend": facts.backend, "backend_block_size": facts.backend_block_size,
                                     "unread_lines": list(facts.unread)}
            doc["from_log_attention"] = None if facts.attention is None else dataclasses.asdict(facts.attention)
        print(json.dumps(doc, indent=2))
        return 0
    text = est.render(x, result)
    lengths = (f"requests of {args.prompt_tokens} + {args.output_tokens} tokens" if args.prompt_tokens
               and args.output_tokens else f"the pool filled by max_num_seqs {x.max_num_seqs} requests; give "
               "--prompt-tokens and --output-tokens for a request's own")
    text += "\n\n" + "\n".join(blocks.render([r.as_json() for r in sizes], lengths))
    if fits:
        text += "\n\n  smallest tensor parallel size at which max_num_seqs requests of max_model_len fit:\n"
        text += "\n".join(f"    KV {kv:<10} " + (f"TP {tp}" if tp else "none up to TP 64") for kv, tp, _e in fits)
    if facts:
        version = f"vLLM {facts.version}" if facts.version else "the log does not name the vLLM version"
        text += f"\n\n  from the log ({version}){'':<8} {'log':>14} {'ours':>14}\n"
        text += "\n".join(f"    {label:<50} {log!s:>14} {ours!s:>14}" for _k, label, log, ours in log_rows)
        if facts.backend_block_size:
            text += (f"\n    block size {facts.backend_block_size}: the log's 'Setting kv cache block size' for "
                     f"{facts.backend}")
        text += "".join(f"\n    {line}" for line in attention_lines(facts.attention))
        for line in facts.unread:
            text += f"\n    a capacity line of the log could not be read, so it is not used: {line}"
        if facts.kv_memory_gib:
            text += "\n    (a pool printed in GiB with 2 decimals is known to ±0.005 GiB: blocks may differ slightly)"
    print(text)
    return 0
