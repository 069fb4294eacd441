"""The JSON diagnosis (`/api/v1/diagnosis`, `diagnose --json`) and its plain-English explanation.

Numeric fields are named like the metrics without the `vllm_headroom_` prefix; a metric split by a label
becomes an object keyed by the label's value.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..pipeline.config import value
from ..pipeline.target import EngineGap, EngineReport, TargetReport
from ..pipeline.verdict import Verdict
from . import headline

SCHEMA_VERSION = 1

HOW_TO_SUPPLY = (
    "max_num_seqs is not exported by vLLM: pass --max-num-seqs (env VLLM_HEADROOM_MAX_NUM_SEQS), "
    "give vLLM's command line with --vllm-args, or share the pod's process namespace so it is read from /proc"
)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _profile_text(e: EngineReport) -> str:
    if e.prompt is None:
        return "no finished request yet, so a prompt is taken as one block"
    basis = {"window": "over the window", "lifetime": "since start", "max_model_len": "max_model_len"}
    return f"prompt p-quantile {e.prompt.tokens} tokens {basis.get(e.prompt.basis, e.prompt.basis)}"


def explain(e: EngineReport) -> str:
    """One paragraph saying why requests wait (or that nothing does)."""
    h = e.headroom
    used = f"{_pct(h.panel_usage_ratio)} of blocks are in use"
    slots = "" if e.max_num_seqs is None else f" of max_num_seqs={e.max_num_seqs}"
    v = e.verdict
    if v is Verdict.SLOTS_FULL:
        if e.slots_inferred:
            return (f"{used}, {e.running} requests run and {e.waiting} wait although {h.kv_free_blocks} blocks are "
                    "free, enough for the longest prompt vLLM has served or with running pinned at its maximum: "
                    f"most likely all slots of a max_num_seqs of {e.running} are taken (max_num_seqs is not known; "
                    "supply it to confirm). Requests wait for a slot, not for memory.")
        return (f"{used}, but all {e.max_num_seqs} slots{slots} are taken; {e.waiting} requests wait for a slot, "
                f"not for memory ({h.kv_free_blocks} of {h.kv_capacity_blocks} blocks are free).")
    if v is Verdict.KV_FULL:
        return (f"{used}: {h.kv_free_blocks} blocks are free and the next request needs about {h.prompt_blocks} "
                f"({_profile_text(e)}); {e.waiting} requests wait for KV cache.")
    if v is Verdict.PREEMPTING:
        rate = "" if not e.preemptions_per_second else f" ({e.preemptions_per_second:.2f}/s)"
        return (f"vLLM is preempting running requests{rate}: {e.running} running requests that each grow to "
                f"{h.worst_case_blocks_profile} blocks need up to {e.running * h.worst_case_blocks_profile} blocks, "
                f"the pool has {h.kv_capacity_blocks}. Preempted requests are recomputed from scratch.")
    if v is Verdict.HEAD_OF_LINE:
        return (f"{used} and {h.kv_free_blocks} blocks are free, enough for a typical request "
                f"({h.prompt_blocks} blocks), yet {e.waiting} requests wait: the request at the head of the queue "
                "is larger than typical (vLLM admits in order and needs its whole prompt to fit), or running "
                "prefills use up the step's token budget (max_num_batched_tokens).")
    if v is Verdict.DEFERRED:
        return (f"{used}; {int(e.waiting_by_reason.get('deferred', 0))} of {e.waiting} waiting requests are deferred "
                "by vLLM (LoRA adapter budget, grammar compilation or a KV transfer), not short of memory.")
    if v is Verdict.STUCK:
        return (f"{e.waiting} requests wait and the engine has made no step for a while (or is asleep); "
                f"{used}. The scheduler is not making progress.")
    if v is Verdict.LEAK:
        return (f"{h.kv_used_blocks} blocks stay in use although nothing runs or waits: blocks are not being "
                "returned to the pool.")
    return (f"Nothing is held back: {used}, {e.running} running, {e.waiting} waiting; room for "
            f"{h.admission_headroom_requests} more requests now and {max(h.safe_headroom_requests, 0)} more "
            "that could each reach max_tokens without preemption.")


def actions(e: EngineReport) -> list[str]:
    """Concrete changes an operator can make, most useful first."""
    h = e.headroom
    out: list[str] = []
    cfg_len = value(e.config.max_model_len)
    fits = h.max_concurrency_profile
    if e.verdict is Verdict.SLOTS_FULL:
        current = e.max_num_seqs or e.running
        if fits > current:
            out.append(f"raise max_num_seqs from {current} to {fits}: the pool holds {fits} requests of the observed "
                       f"worst case ({h.worst_case_blocks_profile} blocks each) without preemption")
        else:
            out.append(f"the pool holds only {fits} worst-case requests, so more slots would preempt: add replicas")
    if e.verdict in (Verdict.KV_FULL, Verdict.PREEMPTING):
        observed = None if e.max_tokens is None or e.prompt is None else e.prompt.tokens + e.max_tokens.tokens
        if observed is not None and cfg_len and observed < cfg_len:
            out.append(f"lower max_model_len from {cfg_len} towards the observed p-quantile of {observed} tokens "
                       "(prompt + max_tokens)")
        out.append("add KV capacity: raise gpu_memory_utilization, use an fp8 KV cache, more tensor parallelism, "
                   "or more replicas")
    oversubscribed = e.max_num_seqs is not None and e.max_num_seqs > fits
    if e.verdict is Verdict.PREEMPTING or h.safe_headroom_requests < 0 or oversubscribed:
        out.append(f"expect preemption above {fits} concurrent requests (each can grow to "
                   f"{h.worst_case_blocks_profile} blocks of {h.kv_capacity_blocks}): set max_num_seqs to "
                   f"{max(fits, 1)} or cap max_tokens")
    if e.verdict is Verdict.HEAD_OF_LINE:
        out.append("check max_num_batched_tokens and long prompts: enable chunked prefill, raise "
                   "max_num_batched_tokens, or route very long prompts to a separate pool")
    if e.verdict is Verdict.DEFERRED:
        out.append("raise max_loras, pre-compile grammars, or check the KV-transfer connector")
    if e.verdict is Verdict.STUCK:
        out.append("check the engine log and the engine_sleep_state metric; restart the pod if the engine is hung")
    if e.verdict is Verdict.LEAK:
        out.append("report the vLLM version; restart the pod to reclaim the blocks")
    if e.max_num_seqs is None:
        out.append(HOW_TO_SUPPLY)
    return out


def engine_json(e: EngineReport) -> dict[str, Any]:
    h = e.headroom
    notes: list[str] = []
    if e.gauges_only:
        notes.append("judged from one observation: no rates or hold times, so preemption, stuck and leak "
                     "cannot be seen and false_full is judged without its hold time")
    if h.hybrid:
        notes.append("hybrid KV layout (several KV groups): capacity per request comes from vLLM's own "
                     "kv_cache_max_concurrency rather than from block arithmetic")
    return {
        "model_name": e.model_name,
        "engine": e.engine,
        "verdict": str(e.verdict),
        "false_full": e.false_full,
        "explanation": explain(e),
        "actions": actions(e),
        "notes": notes,
        "requests_running": e.running,
        "requests_waiting": e.waiting,
        "requests_waiting_by_reason": e.waiting_by_reason,
        "kv_capacity_blocks": h.kv_capacity_blocks,
        "kv_capacity_tokens": h.kv_capacity_tokens,
        "kv_used_blocks": h.kv_used_blocks,
        "kv_free_blocks": h.kv_free_blocks,
        "block_size_tokens": h.block_size_tokens,
        "panel_usage_ratio": h.panel_usage_ratio,
        "unreachable_pool_ratio": round(headline.unreachable_pool_ratio(h), 6),
        "binding_limit": headline.binding_limit(h),
        "effective_usage_ratio": round(h.effective_usage_ratio, 6),  # deprecated alias, removed in 0.2.0
        "worst_case_blocks_per_request": {
            "profile": h.worst_case_blocks_profile,
            "max_model_len": h.worst_case_blocks_max_model_len,
        },
        "prompt_blocks": h.prompt_blocks,
        "slot_headroom_requests": h.slot_headroom_requests,
        "admission_headroom_requests": h.admission_headroom_requests,
        "safe_headroom_requests": h.safe_headroom_requests,
        "max_concurrency_requests": {
            "profile": h.max_concurrency_profile,
            "max_model_len": h.max_concurrency_max_model_len,
        },
        "max_num_seqs": e.max_num_seqs,
        "preemptions_per_second": e.preemptions_per_second,
        "preemptions_total": e.preemptions_total,
        "seconds_without_progress": round(e.seconds_without_progress, 3),
        "request_profile_tokens": {
            "prompt": None if e.prompt is None else e.prompt.__dict__,
            "max_tokens": None if e.max_tokens is None else e.max_tokens.__dict__,
        },
        "config": e.config.as_json(),
        **({} if e.kv_bytes is None else dict(e.kv_bytes.__dict__)),
    }


def _gap_json(g: EngineGap) -> dict[str, str | None]:
    return {"model_name": g.model_name, "engine": g.engine, "missing": g.missing or None,
            "config_error": g.config_error, "explanation": g.explanation}


def target_json(r: TargetReport) -> dict[str, Any]:
    return {
        "target": r.url,
        "up": r.up,
        "error_reason": r.error_reason,
        "error": r.error,
        "vllm_version": r.version,
        "engines": [engine_json(e) for e in r.engines],
        "undetermined_engines": [_gap_json(g) for g in r.gaps],
    }


def document(reports: list[TargetReport]) -> dict[str, Any]:
    """The whole diagnosis document."""
    return {
        "schema_version": SCHEMA_VERSION,
        "exporter_version": __version__,
        "targets": [target_json(r) for r in reports],
    }


def render_text(reports: list[TargetReport]) -> str:
    """The human-readable form of the same document."""
    lines: list[str] = []
    for r in reports:
        if not r.up:
            lines.append(f"{r.url}: DOWN ({r.error_reason}): {r.error}")
            continue
        for e in r.engines:
            h = e.headroom
            lines.append(f"{r.url}  model={e.model_name} engine={e.engine}")
            lines.append(f"  verdict: {e.verdict}    false_full: {'yes' if e.false_full else 'no'}")
            lines.append(f"  {explain(e)}")
            slots = "unknown" if h.slot_headroom_requests is None else str(h.slot_headroom_requests)
            lines.append(
                f"  panel usage {_pct(h.panel_usage_ratio)}; a new worst-case request cannot get "
                f"{_pct(headline.unreachable_pool_ratio(h))} of the pool ({headline.binding_limit(h)} bind); "
                f"blocks {h.kv_used_blocks} used / {h.kv_free_blocks} free / {h.kv_capacity_blocks} usable "
                f"(block size {h.block_size_tokens})")
            lines.append(
                f"  running {e.running}, waiting {e.waiting}; headroom: admission {h.admission_headroom_requests}, "
                f"slots {slots}, safe {h.safe_headroom_requests}")
            wmax = h.worst_case_blocks_max_model_len
            lines.append(
                f"  worst case per request: {h.worst_case_blocks_profile} blocks (profile), "
                f"{'?' if wmax is None else wmax} at max_model_len; max concurrency {h.max_concurrency_profile} / "
                f"{'?' if h.max_concurrency_max_model_len is None else h.max_concurrency_max_model_len}")
            cfg = ", ".join(f"{k}={v['value']} ({v['source']})" for k, v in e.config.as_json().items())
            lines.append(f"  config: {cfg}")
            for a in actions(e):
                lines.append(f"  - {a}")
            if e.gauges_only:
                lines.append("  note: judged from one observation (gauges only): no rates or hold times.")
        for g in r.gaps:
            lines.append(f"{r.url}  model={g.model_name} engine={g.engine}: {g.explanation}")
    return "\n".join(lines)
