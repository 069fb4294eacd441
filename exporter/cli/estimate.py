"""`vllm-headroom estimate`: vLLM's KV arithmetic from a model's config.json, before deploying."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..core import defaults
from ..planning import estimate as est
from .flags import UsageError, add, fraction, params, positive_int, size, tokens


def register(sub: Any) -> None:
    p = sub.add_parser("estimate", help="KV memory and capacity of a model on given devices, vLLM's block math",
                       description="Estimate vLLM's KV cache from a Hugging Face config.json. Memory side: either "
                       "--gpu-memory with the weights (safetensors index of a model folder, --params or "
                       "--weights-bytes) and an activation reserve, or --kv-cache-memory for the pool directly. "
                       "Measure the activation reserve from vLLM's start-up log: requested memory "
                       "(gpu_memory × gpu_memory_utilization) − model weights − 'Available KV cache memory'.",
                       epilog="example:\n  vllm-headroom estimate docs/examples/llama-3.1-70b.json "
                       "--tensor-parallel-size 4 --gpu-memory 80GiB --params 70B --max-model-len 32k",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="config.json, or a model folder holding it (and model.safetensors.index.json)")
    p.add_argument("--json", action="store_true", help="print JSON")
    g = p.add_argument_group("model and cache")
    add(g, "--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
        help="model dtype (auto = the config's torch_dtype)")
    add(g, "--kv-cache-dtype", default="auto", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
        help="KV cache dtype (auto = the model dtype)")
    add(g, "--tensor-parallel-size", positive_int, defaults.ESTIMATE_TENSOR_PARALLEL_SIZE,
        help="tensor parallel size; KV heads are split across it")
    add(g, "--block-size", positive_int, defaults.ESTIMATE_BLOCK_SIZE, help="KV block size in tokens")
    add(g, "--max-model-len", tokens, help="context length, e.g. 32k (default: the config's max_position_embeddings)")
    add(g, "--max-num-seqs", positive_int, defaults.ESTIMATE_MAX_NUM_SEQS, help="max_num_seqs to check against "
        "the pool")
    add(g, "--max-num-batched-tokens", tokens, defaults.ESTIMATE_MAX_NUM_BATCHED_TOKENS,
        help="vLLM's token budget per step; sliding-window layers keep this many in-flight tokens")
    add(g, "--async-scheduling", action=argparse.BooleanOptionalAction, default=True,
        help="two batches in flight (vLLM's default where the platform supports it)")
    add(g, "--num-gpu-blocks-override", positive_int, help="like vLLM's: the number of blocks, no memory math")
    g = p.add_argument_group("memory per device")
    add(g, "--gpu-memory", size, help="memory of one device, e.g. 80GiB or 23.58GiB")
    add(g, "--gpu-memory-utilization", fraction, defaults.ESTIMATE_GPU_MEMORY_UTILIZATION,
        help="vLLM's gpu_memory_utilization")
    add(g, "--params", params, help="parameter count when there is no safetensors index, e.g. 70B")
    add(g, "--weights-bytes", size, help="weights' size of the whole model (overrides the index)")
    add(g, "--activation-memory", size, defaults.ESTIMATE_ACTIVATION_BYTES,
        help="activations, non-torch memory and CUDA graphs per device")
    add(g, "--kv-cache-memory", size, help="KV pool per device, e.g. 6.51GiB: skip the budget math")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        shape, indexed = est.load_model(Path(args.model))
        inputs = est.Inputs(
            shape=shape, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
            tensor_parallel_size=args.tensor_parallel_size, block_size=args.block_size,
            max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs, gpu_memory=args.gpu_memory,
            max_num_batched_tokens=args.max_num_batched_tokens, async_scheduling=args.async_scheduling,
            gpu_memory_utilization=args.gpu_memory_utilization,
            weights_bytes=args.weights_bytes or indexed, params=args.params,
            activation_bytes=args.activation_memory, kv_cache_memory=args.kv_cache_memory,
            num_gpu_blocks_override=args.num_gpu_blocks_override,
        )
        result = est.estimate(inputs)
    except ValueError as exc:  # Unsupported included: one sentence, never a wrong number
        raise UsageError(str(exc)) from None
    print(json.dumps(est.as_json(inputs, result), indent=2) if args.json else est.render(inputs, result))
    return 0
