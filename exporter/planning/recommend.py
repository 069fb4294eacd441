"""`vllm-headroom recommend`: max_model_len and max_num_seqs from a server's observed length histograms.

vLLM exports the prompt and generation lengths as two separate histograms, so the quantile of their sum is
bounded, not measured: P(prompt + gen > a + b) ≤ P(prompt > a) + P(gen > b). We take a and b at the
(1 − (1 − q) / 2) quantiles, so at most a share 1 − q of requests exceed the recommended length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..engines.base import GENERATION_LENGTHS, PROMPT_LENGTHS, Histogram
from ..engines.vllm import VLLM
from ..pipeline import derive
from ..pipeline.config import value
from ..pipeline.profile import bucket_quantile
from ..pipeline.report import EngineReport
from . import advice


@dataclass(frozen=True)
class LengthAdvice:
    quantile: float
    max_model_len: int
    exceed_share_bound: float  # at most this share of requests would exceed it
    prompts_over: float  # share of observed prompts longer than it (rejected outright)


def share_above(hist: Histogram, tokens: int) -> float:
    """Share of observations above `tokens`, from the first bucket bound at or above it (an upper bound)."""
    total = hist.buckets[-1][1] if hist.buckets else 0.0
    if total <= 0:
        return 0.0
    for bound, cumulative in hist.buckets:
        if bound >= tokens:
            return max(0.0, 1.0 - cumulative / total)
    return 0.0


def length_advice(prompt: Histogram, gen: Histogram, q: float, block_size: int,
                  cap: int | None) -> LengthAdvice:
    """A max_model_len at quantile q of prompt + generated tokens, rounded up to whole blocks."""
    half = 1.0 - (1.0 - q) / 2
    a = bucket_quantile(prompt.buckets, half)
    b = bucket_quantile(gen.buckets, half)
    if a is None or b is None or math.isinf(a) or math.isinf(b):
        raise ValueError(f"the p{100 * q:g} falls in the histograms' open-ended bucket: nothing to recommend below "
                         "the current max_model_len")
    tokens = derive.blocks_for_tokens(math.ceil(a + b), block_size) * block_size
    if cap is not None:
        tokens = min(tokens, cap)
    return LengthAdvice(q, tokens, 1.0 - q, share_above(prompt, tokens))


def recommend(e: EngineReport, min_requests: int) -> dict[str, Any]:
    """Advice for one engine from its report and the lifetime length histograms it carries."""
    prompt = e.histograms.get(PROMPT_LENGTHS)
    gen = e.histograms.get(GENERATION_LENGTHS)
    names = VLLM.names
    if prompt is None or gen is None:
        raise ValueError(f"the exposition has no {names.prompt_hist} / "
                         f"{names.generation_hist.removeprefix(names.prefix)} histograms")
    n = int(prompt.count)
    if n < min_requests:
        raise ValueError(f"only {n} finished requests observed; at least {min_requests} are needed to recommend")
    h = e.headroom
    bs = h.block_size_tokens
    current_len = value(e.config.max_model_len)
    out: dict[str, Any] = {"model_name": e.model_name, "engine": e.engine, "requests_observed": n,
                           "basis": f"lifetime histograms of {names.prompt_hist} and {names.generation_hist} "
                                    "(observed when requests finish); the quantile of their sum is bounded by the "
                                    "union bound",
                           "current": {"max_model_len": current_len, "max_num_seqs": e.max_num_seqs,
                                       "max_concurrency_at_max_model_len": h.max_concurrency_max_model_len}}
    lengths = []
    for q in (0.99, 0.999):
        if n * (1 - q) < 1:
            lengths.append({"quantile": q, "refused": f"p{100 * q:g} needs at least {math.ceil(1 / (1 - q))} requests"})
            continue
        try:
            adv = length_advice(prompt, gen, q, bs, current_len)
        except ValueError as exc:
            lengths.append({"quantile": q, "refused": str(exc)})
            continue
        w = derive.blocks_for_tokens(adv.max_model_len, bs)
        lengths.append({
            "quantile": q, "max_model_len": adv.max_model_len, "exceed_share_at_most": round(adv.exceed_share_bound, 6),
            "prompts_longer": round(adv.prompts_over, 6),
            "max_concurrency": derive.max_concurrency(h.kv_capacity_blocks, w),
            "max_concurrency_change": derive.max_concurrency(h.kv_capacity_blocks, w)
            - (h.max_concurrency_max_model_len or 0),
        })
    out["max_model_len"] = lengths
    fits = h.max_concurrency_profile
    low, high = advice.seqs_range(fits)
    # The same advice diagnose gives on the same exposition: the judgement's, else the standalone sizing.
    seqs = next((a for a in e.advice if a.setting == "max_num_seqs"), None) or advice.max_num_seqs(e)
    out["max_num_seqs"] = {
        "range": [low, high],
        "current": e.max_num_seqs,
        "direction": None if seqs is None else seqs.direction,
        "advice": None if seqs is None else seqs.as_json(),
        "worst_case_concurrency": fits,
        "worst_case_blocks_per_request": h.worst_case_blocks_profile,
        "why": f"the pool holds {fits} requests of the observed worst case ({h.worst_case_blocks_profile} blocks each)"
               f"; {int(100 * advice.SHARE_LOW)}-{int(100 * advice.SHARE_HIGH)} % of that leaves room for longer "
               "outliers without preemption",
        "concurrency_change": None if e.max_num_seqs is None else high - e.max_num_seqs,
    }
    return out


def render_text(advice: list[dict[str, Any]]) -> str:
    """The human-readable form of `recommend`'s advice, one block per engine."""
    lines: list[str] = []
    for a in advice:
        lines.append(f"model={a['model_name']} engine={a['engine']}: {a['requests_observed']} finished requests")
        lines.append(f"  basis: {a['basis']}")
        for item in a["max_model_len"]:
            if "refused" in item:
                lines.append(f"  max_model_len at p{100 * item['quantile']:g}: not recommended ({item['refused']})")
            else:
                lines.append(f"  max_model_len at p{100 * item['quantile']:g}: {item['max_model_len']} "
                             f"(at most {100 * item['exceed_share_at_most']:.2f} % of requests longer; "
                             f"max concurrency {item['max_concurrency']}, {item['max_concurrency_change']:+d})")
        m = a["max_num_seqs"]
        if m.get("advice"):
            lines.append(f"  max_num_seqs: {m['advice']['text']}")
        else:
            lines.append(f"  max_num_seqs: {m['range'][0]}-{m['range'][1]} ({m['why']})")
    return "\n".join(lines)
