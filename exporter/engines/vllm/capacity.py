"""What vLLM's start-up log's capacity figures allow num_gpu_blocks to be (the log's arithmetic is vLLM's).

"<device> KV cache size: T tokens, Maximum concurrency for L tokens per request: C x" (`update_kv_cache_capacity`,
vllm/v1/core/kv_cache_utils.py:1136-1156 @0.33.0; the same text from 0.30): C = N / R printed with `%.2f`, and
T = int(N / R × L) (`get_kv_cache_capacity`, :1125-1133), R the blocks one request of L tokens takes over the
KV-cache groups (`get_max_concurrency_for_kv_cache_config`, :1061-1093). vLLM 0.20-0.28 print the same two
figures (0.20-0.24 on two lines); vLLM 0.9-0.19 print T = N // groups × block size
(`_report_kv_cache_config`, kv_cache_utils.py:1254-1296 @0.12.0).
"""

from __future__ import annotations

import math

from ..base import LogFacts
from .releases import parse_release

CONCURRENCY_STEP = 0.005  # half the last printed digit of "%.2fx"


def blocks_from_figures(facts: LogFacts, block_size: int, per_request: int) -> tuple[int, int] | None:
    """(lowest, highest) num_gpu_blocks both printed figures allow for R = `per_request` blocks per request of
    the log's max_model_len; None when the log lacks a figure or no block count gives both."""
    tokens, conc, length = facts.kv_tokens, facts.max_concurrency, facts.max_model_len
    if tokens is None or conc is None or length is None or per_request < 1:
        return None
    lo = math.ceil(per_request * (conc - CONCURRENCY_STEP) - 1e-9)
    hi = math.floor(per_request * (conc + CONCURRENCY_STEP) + 1e-9)
    release = parse_release(facts.version)
    before_020 = release is not None and release < (0, 20, 0)
    fits = [n for n in range(max(lo, 2), hi + 1)
            if (n * block_size == tokens if before_020 else int(n / per_request * length) == tokens)]
    return (fits[0], fits[-1]) if fits else None
