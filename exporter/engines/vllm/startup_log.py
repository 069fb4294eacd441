"""What a pasted vLLM start-up log states about capacity (the plan inputs it fills in: planning/startup_log.py).

Reads the lines vLLM prints at start-up (format strings of `vllm/v1/core/kv_cache_utils.py`,
`vllm/v1/worker/gpu_worker.py`, `vllm/platforms/interface.py`, `vllm/entrypoints/utils.py`; V1 0.9-0.33):
"Available KV cache memory: X GiB" (one per worker; the CPU build's "Explicitly set (X/Y) GiB for KV
cache"), "Reset SSM cache type to float32", "Overriding num_gpu_blocks=N with
num_gpu_blocks_override=M", "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per
request: C x" (one line or two), "Setting attention block size to N tokens", "Setting kv cache block size to N for
<backend>", "the estimated maximum model
length is N", and the flags of "non-default args: {...}" / "Initializing a V1 LLM engine (vX) with config:".
"""

from __future__ import annotations

import re

from ..base import LogFacts

_MEMORY = re.compile(r"^([^\n]*?)Available KV cache memory: (\d+(?:\.\d+)?) GiB", re.M)
# With --kv-cache-memory-bytes vLLM skips profiling and prints the pool it reserved instead (`format_gib`: rounded
# to 2 decimals, vllm/v1/worker/gpu_worker.py:664-675 @0.33.0); the exact bytes are in "non-default args".
_RESERVED = re.compile(r"^([^\n]*?)reserved (\d+(?:\.\d+)?) GiB memory for KV Cache as specified by "
                       r"kv_cache_memory_bytes", re.M)
# Worker process names (vllm/v1/executor/multiproc_executor.py:1088-1096): "Worker", then _DP<r> with DP,
# _PP<r> with PP, _PCP<r>, _TP<r> with TP: a PP×TP1 worker is "Worker_PP1", with no _TP part.
_RANK = re.compile(r"Worker(?:_DP\d+)?_PP(\d+)(?![\d])|rank=(\d+)")
_MEMORY_ANY = re.compile(r"^.*(?:Available KV cache memory|KV cache size:|Maximum concurrency for|"
                         r"as specified by kv_cache_memory_bytes).*$", re.M)
_TOKENS_STRICT = re.compile(r"KV cache size: \d{1,3}(?:,\d{3})* tokens|KV cache size: \d+ tokens")
# "Setting kv cache block size to %d for %s backend(s)." (vllm/platforms/interface.py:775-779): the
# backend's block size when the user set none (FlashMLA 64, CUTLASS MLA 128, ...).
_BACKEND_BLOCK = re.compile(r"Setting kv cache block size to (\d+) for ([\w/]+) backend")
_CPU_MEMORY = re.compile(r"Explicitly set \((\d+(?:\.\d+)?)/[\d.]+\) GiB for KV cache")  # vllm/v1/worker/cpu_worker.py
_SSM_FLOAT32 = re.compile(r"Reset SSM cache type to float32|Updating mamba_ssm_cache_dtype to 'float32'")
_TOKENS = re.compile(r"(\w+) KV cache size: (\d{1,3}(?:,\d{3})+|\d+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: (\d+(?:\.\d+)?)x")
_OVERRIDE = re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
_ATTN_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
_ESTIMATED = re.compile(r"max seq len \((\d+)\).*?estimated maximum model length is (\d+)", re.S)
_VERSION = re.compile(r"(?:LLM engine \(v|version )(\d+\.\d+[\w.+-]*)")
_ARG = re.compile(r"'(model|max_model_len|tensor_parallel_size|pipeline_parallel_size|data_parallel_size|block_size|"
                  r"max_num_seqs|max_num_batched_tokens|kv_cache_dtype|dtype|gpu_memory_utilization|"
                  r"num_gpu_blocks_override|enable_prefix_caching|async_scheduling|mamba_ssm_cache_dtype|"
                  r"kv_cache_memory_bytes)': "
                  r"('[^']*'|[\d.]+|True|False)")
_CONFIG = re.compile(r"\b(model|max_seq_len|tensor_parallel_size|pipeline_parallel_size|data_parallel_size|"
                     r"kv_cache_dtype|enable_prefix_caching)=('[^']*'|[\w.]+)")


def parse(text: str) -> LogFacts:
    """The capacity facts of a start-up log; ValueError when it has none of them."""
    flags: dict[str, str] = {}
    for m in _CONFIG.finditer(text):
        key = "max_model_len" if m.group(1) == "max_seq_len" else m.group(1)
        flags.setdefault(key, m.group(2).strip("'"))
    for m in _ARG.finditer(text):
        flags[m.group(1)] = m.group(2).strip("'")  # the user's flags win over the resolved config
    tp = int(flags.get("tensor_parallel_size", "1"))
    by_stage: dict[int, float] = {}
    plain: list[float] = []
    for m in [*_MEMORY.finditer(text), *_RESERVED.finditer(text)]:
        gib = float(m.group(2))
        rank = _RANK.search(m.group(1))
        if rank is None:
            plain.append(gib)
        elif rank.group(1) is not None:
            by_stage.setdefault(int(rank.group(1)), gib)
        else:
            by_stage.setdefault(int(rank.group(2)) // tp, gib)
    plain += [float(m.group(1)) for m in _CPU_MEMORY.finditer(text)]
    unread = []
    for m in _MEMORY_ANY.finditer(text):
        line = m.group(0)
        ok = ("Available KV cache memory" not in line or _MEMORY.search(line)) and \
             ("as specified by kv_cache_memory_bytes" not in line or _RESERVED.search(line)) and \
             ("KV cache size:" not in line or _TOKENS_STRICT.search(line)) and \
             ("Maximum concurrency for" not in line or _CONCURRENCY.search(line))
        if not ok:
            unread.append(line.strip())
    memory = tuple(by_stage[k] for k in sorted(by_stage)) if by_stage else tuple(plain[:1])
    if _SSM_FLOAT32.search(text):
        flags.setdefault("mamba_ssm_cache_dtype", "float32")
    tokens = _TOKENS.search(text)
    conc = _CONCURRENCY.search(text)
    over = _OVERRIDE.search(text)
    block = _ATTN_BLOCK.search(text)
    est = _ESTIMATED.search(text)
    version = _VERSION.search(text)
    backend = _BACKEND_BLOCK.search(text)
    facts = LogFacts(
        version=version.group(1) if version else None,
        model=flags.get("model"),
        kv_memory_gib=memory,
        num_gpu_blocks=int(over.group(1)) if over else None,
        override=int(over.group(2)) if over else None,
        kv_tokens=int(tokens.group(2).replace(",", "")) if tokens else None,
        max_model_len=int(conc.group(1).replace(",", "")) if conc else (int(est.group(1)) if est else None),
        max_concurrency=float(conc.group(2)) if conc else None,
        attention_block_size=int(block.group(1)) if block else None,
        estimated_max_model_len=int(est.group(2)) if est else None,
        flags=tuple(sorted(flags.items())),
        backend_block_size=int(backend.group(1)) if backend else None,
        backend=backend.group(2) if backend else None,
        unread=tuple(unread),
    )
    if not (facts.kv_memory_gib or facts.kv_tokens or facts.override or facts.estimated_max_model_len):
        if unread:
            raise ValueError(f"the log's capacity line cannot be read: {unread[0]!r}")
        raise ValueError("the log has no capacity line (Available KV cache memory, KV cache size, "
                         "Overriding num_gpu_blocks, estimated maximum model length)")
    return facts
