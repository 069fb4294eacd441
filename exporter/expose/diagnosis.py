"""The JSON diagnosis (`/api/v1/diagnosis`, `diagnose --json`) and its plain-English explanation.

Numeric fields are named like the metrics without the `vllm_headroom_` prefix; a metric split by a label
becomes an object keyed by the label's value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..core import defaults
from ..engines.vllm import VLLM
from ..pipeline import catalogue
from ..pipeline.catalogue import Verdict
from ..pipeline.report import EngineGap, EngineReport, TargetReport
from ..planning import advice
from . import headline

SCHEMA_VERSION = 1

HOW_TO_SUPPLY = (
    "max_num_seqs is not exported by vLLM: pass --max-num-seqs (env VLLM_HEADROOM_MAX_NUM_SEQS), "
    "give vLLM's command line with --vllm-args, or share the pod's process namespace so it is read from /proc"
)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _profile_text(e: EngineReport) -> str:
    p = e.prompt
    if p is None:
        return "no finished request yet and max_model_len unknown, so a prompt is taken as one block"
    if p.basis == "in_flight":
        return f"no finished request yet: {p.tokens} prompt tokens computed per request started"
    if p.basis == "max_model_len":
        return f"no finished request yet: a prompt may be as long as max_model_len ({p.tokens} tokens)"
    basis = {"window": "over the window", "lifetime": "since start"}
    rng = "" if p.lower is None or p.upper is None else f", between {p.lower} and {p.upper}"
    return f"prompt p-quantile {p.tokens} tokens{rng} {basis.get(p.basis, p.basis)}, {p.samples} requests"


def profile_text(e: EngineReport) -> str:
    """How many finished requests back the profile, over which window, and whether it is used."""
    q = e.profile
    if q is None:
        return "no request profile"
    if q.samples == 0:
        base = "no finished request backs the profile"
    else:
        span = {"window": f"over the last {q.span:.0f} s" if q.span is not None else "over the window",
                "lifetime": "since the server started" + ("" if e.gauges_only else " (none finished in the window)"),
                }.get(q.basis, q.basis)
        base = f"{q.samples} finished requests {span}"
    if q.thin:
        base += f"; thin (< {defaults.PROFILE_MIN_REQUESTS}): worst case taken at max_model_len"
    if q.stale:
        base += (f"; stale: requests in flight hold {q.held_blocks_per_running} blocks each, more than the profile's "
                 f"{e.headroom.worst_case_blocks_profile_only}: worst case floored by them")
    return base


def _budget_hint(e: EngineReport) -> str:
    b = e.budget
    if b is None or b.used is None or b.used < 1.0:
        return ""
    return (f" (likely here: a typical prompt of {b.prefill_tokens:,.0f} tokens fills the budget of "
            f"{b.max_num_batched_tokens:,})")


def _used(e: EngineReport) -> str:
    return f"{_pct(e.headroom.panel_usage_ratio)} of blocks are in use"


def _slots_full(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    slots = "" if e.max_num_seqs is None else f" of {e.cap_setting}={e.max_num_seqs}"
    if e.slots_inferred:
        cap = e.max_num_seqs or e.running
        return (f"{used}, {e.running} requests run and {e.waiting} wait although {h.kv_free_blocks} blocks are "
                f"free: all slots of an inferred max_num_seqs of {cap} are taken (not stated; "
                + ("from this one observation: the free blocks would hold the longest prompt vLLM has served, "
                   "yet requests wait" if e.gauges_only else
                   "the highest running count seen while requests waited beside free blocks, outside preemption")
                + "; supply it to confirm). Requests wait for a slot, not for memory.")
    return (f"{used}, but all {e.max_num_seqs} slots{slots} are taken; {e.waiting} requests wait for a slot, "
            f"not for memory ({h.kv_free_blocks} of {h.kv_capacity_blocks} blocks are free).")


def _kv_full(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    if e.max_num_seqs is not None and e.running >= e.max_num_seqs:
        slots = f" of {e.cap_setting}={e.max_num_seqs}"
        why = (f"{h.kv_free_blocks} free blocks cannot hold the next request's {h.prompt_blocks}"
               if h.kv_free_blocks < h.prompt_blocks else
               f"the {e.running} running requests, each growing to {h.worst_case_blocks_profile} blocks, need up to "
               f"{e.running * h.worst_case_blocks_profile} of the {h.kv_capacity_blocks} (safe headroom "
               f"{h.safe_headroom_requests})")
        return (f"{used}; all {e.max_num_seqs} slots{slots} are taken and memory binds too: {why}. "
                f"{e.waiting} requests wait for memory as much as for a slot: more slots would not admit them.")
    return (f"{used}: {h.kv_free_blocks} blocks are free and the next request needs about {h.prompt_blocks} "
            f"({_profile_text(e)}); {e.waiting} requests wait for KV cache.")


def _preempting(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    if e.preemption_inferred:
        how = ("no block is free while requests decode and others wait: the next block vLLM needs preempts the "
               "newest running request" if h.kv_free_blocks == 0 else
               "running fell and waiting rose while no request finished: a running request went back to the queue")
        return (f"Preemption inferred from the gauges ({how}); vLLM counts a preemption only when the preempted "
                f"request produces its next token, so num_preemptions_total may rise a scrape or more later. "
                f"{used}, {e.running} running, {e.waiting} waiting.")
    rate = "" if not e.preemptions_per_second else f" ({e.preemptions_per_second:.2f}/s)"
    need = e.running * h.worst_case_blocks_profile
    if need > h.kv_capacity_blocks:
        why = (f"{e.running} running requests that each grow to {h.worst_case_blocks_profile} blocks need up to "
               f"{need} blocks, the pool has {h.kv_capacity_blocks}")
    else:
        # Never contradict our own numbers: the running requests fit now, so longer ones did it lately.
        why = (f"the counter rose within the preempt window; the {e.running} requests running now need up to "
               f"{need} of {h.kv_capacity_blocks} blocks by the profile, so longer requests (or more of them) "
               "outgrew the pool moments ago")
    return (f"vLLM is preempting running requests{rate}: {why}. Preempted requests are recomputed from "
            "scratch.")


def _head_of_line(e: EngineReport) -> str:
    h = e.headroom
    return (f"{_used(e)} and {h.kv_free_blocks} blocks are free, enough for a typical request "
            f"({h.prompt_blocks} blocks), yet {e.waiting} requests wait: the request at the head of the queue "
            "is larger than typical (vLLM admits in order and needs its whole prompt to fit), or running "
            "prefills use up the step's token budget (max_num_batched_tokens).")


def _deferred(e: EngineReport) -> str:
    return (f"{_used(e)}; {int(e.waiting_by_reason.get('deferred', 0))} of {e.waiting} waiting requests are deferred "
            "by vLLM (LoRA adapter budget, grammar compilation or a KV transfer), not short of memory.")


def _stuck(e: EngineReport) -> str:
    return (f"{e.waiting} requests wait and the engine has made no step for {e.seconds_without_progress:.0f} s; "
            f"{_used(e)}. The scheduler is not making progress.")


def _sleeping(e: EngineReport) -> str:
    return (f"The engine is asleep ({VLLM.names.sleep_state} awake=0: put to sleep with POST /sleep, "
            f"--enable-sleep-mode); it runs nothing until woken. {e.running} running, {e.waiting} waiting; "
            f"{_used(e)} (the pool's numbers are those it kept when it fell asleep).")


def _leak(e: EngineReport) -> str:
    h = e.headroom
    if e.suspected:
        return (f"Suspected leak: {h.kv_used_blocks} blocks are in use although nothing runs or waits. One "
                "observation cannot show whether they stay in use; the sidecar reports a leak once it lasts "
                "--verdict.leak-after.")
    return (f"{h.kv_used_blocks} blocks stay in use although nothing runs or waits: blocks are not being "
            "returned to the pool.")


def _budget_full(e: EngineReport) -> str:
    h, b = e.headroom, e.budget
    per = "" if b is None or b.prefill_tokens is None else f" (a typical prompt is {b.prefill_tokens:,.0f} tokens)"
    budget = "" if b is None else (f"{b.max_num_batched_tokens:,} tokens "
                                   f"({'assumed: vLLM default' if b.source == 'default' else b.source})")
    return (f"{_used(e)}, {h.kv_free_blocks} blocks and free slots, yet {e.waiting} requests wait: a running "
            f"prefill takes the whole token budget of {budget} of each step{per} (max_num_batched_tokens). "
            "vLLM schedules running requests first and admits waiting ones only while budget is left.")


def _never_fits(e: EngineReport) -> str:
    h = e.headroom
    wmax = h.worst_case_blocks_max_model_len
    sure = (" One observation: it may also be the moment between two steps; a second look confirms."
            if e.suspected else "")
    return (f"Nothing runs and all {h.kv_capacity_blocks} blocks are free, yet {e.waiting} requests wait: the "
            f"request at the head of the queue needs more blocks than the whole pool (max_model_len needs "
            f"{wmax} blocks, the pool has {h.kv_capacity_blocks}). vLLM admits in order, so it and every "
            f"request behind it wait forever.{sure}")


def _transient(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    if e.max_num_seqs is None and e.running > 0:
        return (f"{used}, {h.kv_free_blocks} blocks are free (a typical request needs {h.prompt_blocks}), "
                f"{e.running} run and {e.waiting} wait. max_num_seqs is unknown and one observation cannot infer it: "
                f"if it is {e.running}, requests wait for a slot, not for memory; otherwise this is most often the "
                "moment between two engine steps. Supply max_num_seqs, or watch it with `serve`.")
    return (f"{used}, {h.kv_free_blocks} blocks are free (a typical request needs {h.prompt_blocks}) and "
            f"{e.waiting} requests wait: in one observation this is most often the moment between two engine "
            "steps (vLLM admits them at the next step). If it persists, the head of the queue is larger than "
            "the free blocks or prefills use up the token budget" + _budget_hint(e)
            + ": watch it with `serve` or diagnose again.")


def _ok(e: EngineReport) -> str:
    h = e.headroom
    return (f"Nothing is held back: {_used(e)}, {e.running} running, {e.waiting} waiting; room for "
            f"{h.admission_headroom_requests} more requests now and {max(h.safe_headroom_requests, 0)} more "
            "that could each reach max_tokens without preemption.")


def _target_down(r: TargetReport) -> str:
    return f"the last scrape failed ({r.error_reason}): {r.error}; numbers would be stale"


# The explanation of each verdict by its catalogue key (exporter/pipeline/catalogue.py): engine verdicts from the
# engine's report, target_down from the failed target's.
EXPLANATIONS: dict[str, Callable[[EngineReport], str]] = {
    "ok": _ok, "kv_full": _kv_full, "slots_full": _slots_full, "preempting": _preempting,
    "head_of_line": _head_of_line, "deferred": _deferred, "stuck": _stuck, "leak": _leak,
    "budget_full": _budget_full, "never_fits": _never_fits, "transient": _transient, "sleeping": _sleeping,
}
TARGET_EXPLANATIONS: dict[str, Callable[[TargetReport], str]] = {"target_down": _target_down}

# The fixed actions of each verdict by its catalogue key, after the advice engine's settings.
ACTIONS: dict[str, tuple[str, ...]] = {
    "ok": (), "kv_full": (), "slots_full": (), "preempting": (), "budget_full": (), "never_fits": (),
    "transient": (),
    "head_of_line": ("route very long prompts to a separate pool or lower max_model_len; the head needs its whole "
                     "uncached prompt in free blocks (vLLM >= 0.19)",),
    "deferred": ("raise max_loras, pre-compile grammars, or check the KV-transfer connector",),
    "stuck": ("check the engine log; restart the pod if the engine is hung",),
    "sleeping": ("wake the engine: POST /wake_up on the vLLM server (vLLM started with --enable-sleep-mode; the "
                 "endpoint is served with VLLM_SERVER_DEV_MODE=1); do not restart it, it is not hung",),
    "leak": ("report the vLLM version; restart the pod to reclaim the blocks",),
    "target_down": ("check that vLLM is running and reachable from the sidecar",),
}


def explain(e: EngineReport) -> str:
    """One paragraph saying why requests wait (or that nothing does)."""
    return EXPLANATIONS[catalogue.entry(e.verdict).explanation](e)


def actions(e: EngineReport, engines: list[EngineReport] | None = None) -> list[str]:
    """Concrete changes an operator can make, most useful first (settings from the one advice engine); with the
    server's other engines (data parallel), max_num_seqs is advised once for the server."""
    out = [a.text() for a in advice.advise_server(e, engines or [e])]
    out += ACTIONS[catalogue.entry(e.verdict).actions]
    known = e.config.max_num_seqs
    if known is None or known.source == "inferred":
        out.append(HOW_TO_SUPPLY)
    wrong = stated_cap_doubt(e)
    if wrong:
        out.append(wrong)
    return out


CAP_DOUBT_FRAMES = 6  # scrapes with requests waiting before a stated cap far above the running count is doubted


def stated_cap_doubt(e: EngineReport) -> str | None:
    """A stated max_num_seqs the engine contradicts: more requests run than it allows."""
    known = e.config.max_num_seqs
    if known is None or known.source == "inferred":
        return None
    seen = e.busy_ceiling
    if (e.running <= known.value and seen is not None and e.busy_frames >= CAP_DOUBT_FRAMES and seen > 0
            and 2 * seen <= known.value and e.verdict in (Verdict.HEAD_OF_LINE, Verdict.OK, Verdict.TRANSIENT)):
        return (f"check max_num_seqs: you stated {known.value} ({known.source}), but at most {seen} ran while "
                f"requests waited over the last {e.busy_frames} scrapes with requests waiting; if vLLM's real cap "
                f"is {seen}, slots are what binds")
    if e.running <= known.value:
        return None
    return (f"check max_num_seqs: running {e.running} exceeds max_num_seqs {known.value} you stated "
            f"({known.source}); vLLM never runs more than its cap, so the stated value is wrong and every slot "
            "figure built on it is too")


def notes(e: EngineReport) -> list[str]:
    """What the numbers rest on: one observation, inferred values, the profile's backing."""
    h = e.headroom
    out: list[str] = []
    if e.gauges_only:
        out.append("judged from one observation: no rates or hold times; it can show an exhausted pool, slots "
                   "taken, a suspected leak or a head that can never fit, but not whether a wait beside free room "
                   "lasts (transient) nor preemptions over time; false_full is judged without its hold time")
    if e.suspected:
        out.append(f"{e.verdict} is suspected from one observation, not confirmed")
    if e.preemption_inferred:
        out.append("preemption inferred from the gauges: vLLM's num_preemptions_total counts it late")
    known = e.config.max_num_seqs
    if known is not None and known.source == "inferred":
        out.append(f"max_num_seqs {known.value} is inferred (highest running count beside free room, outside "
                   "preemption), used for slot and admission headroom alike")
    out.append("request profile: " + profile_text(e))
    if h.hybrid:
        out.append("hybrid KV layout (several KV groups): capacity per request comes from vLLM's own "
                   "kv_cache_max_concurrency rather than from block arithmetic")
    return out


def engine_json(e: EngineReport, engines: list[EngineReport] | None = None) -> dict[str, Any]:
    h = e.headroom
    q = e.profile
    b = e.budget
    return {
        "model_name": e.model_name,
        "engine": e.engine,
        "verdict": str(e.verdict),
        "false_full": e.false_full,
        "explanation": explain(e),
        "actions": actions(e, engines),
        "advice": [a.as_json() for a in advice.advise_server(e, engines or [e])],
        "notes": notes(e),
        "suspected": e.suspected,
        "preemption_inferred": e.preemption_inferred,
        "request_profile": None if q is None else {
            "finished_requests": q.samples, "basis": q.basis, "window_seconds": q.span, "thin": q.thin,
            "stale": q.stale, "held_blocks_per_running": q.held_blocks_per_running},
        "token_budget": None if b is None else {
            "max_num_batched_tokens": b.max_num_batched_tokens, "source": b.source,
            "prefill_tokens": b.prefill_tokens},
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
        "capacity": capacity_json(e),
        "admission": admission_json(e),
        "kv_transfer": kv_transfer_json(e),
        "deferred_causes": list(e.deferred_causes),
        "vllm_cmdline": None if e.cmdline_pid is None else {"pid": e.cmdline_pid, "found_by": e.cmdline_found_by},
        **({} if e.kv_bytes is None else dict(e.kv_bytes.__dict__)),
    }


def capacity_json(e: EngineReport) -> dict[str, Any] | None:
    """Where the engine's block count came from, its range when inferred, and what the range decides."""
    known = e.config.num_gpu_blocks
    if known is None:
        return None
    return {"num_gpu_blocks": known.value, "source": str(known.source),
            "low": known.low if known.uncertain else None, "high": known.high if known.uncertain else None,
            "basis": known.basis, "decides": e.capacity_decides}


def admission_json(e: EngineReport) -> dict[str, Any]:
    """What admitting the queue head takes, gate by gate, and what the headroom cannot show."""
    need = e.headroom.admission
    cfg = e.config
    return {
        "gate": None if need is None else need.gate,
        "blocks_per_request": e.headroom.prompt_blocks,
        "full_prompt_blocks": None if need is None else need.full_prompt_blocks,
        "step_blocks": None if need is None else need.step_blocks,
        "watermark_blocks": 0 if need is None else need.watermark_blocks,
        "lookahead_tokens": 0 if need is None else need.lookahead_tokens,
        "cap": e.max_num_seqs,
        "max_num_active_seqs": None if cfg.max_num_active_seqs is None else cfg.max_num_active_seqs.value,
        "prefill_schedule_interval": None if cfg.prefill_schedule_interval is None
        else cfg.prefill_schedule_interval.value,
        "notes": list(e.admission_notes),
    }


def kv_transfer_json(e: EngineReport) -> dict[str, Any] | None:
    """The connector, role and lease, the connector's counters, remote-KV loads and the offload tiers."""
    k = e.kv_transfer
    if k is None:
        return None
    return {
        "connector": k.connector, "kv_role": k.role, "lease_seconds": k.lease_seconds, "lease_source": k.lease_source,
        "counters": {f"{c}_{r}": v for (c, r), v in sorted(k.counters.items())},
        "transfers": dict(k.transfers), "remote_kv_loads": dict(k.loads_by_stage),
        "offload_tiers": [{"kind": t.kind, "size_bytes": t.size_bytes, "size_tokens": t.size_tokens,
                           "chunks": t.chunks, "blocks_per_chunk": t.blocks_per_chunk} for t in k.offload],
        "offload_usage_ratio": k.offload_usage,
        "offload_is_free_gpu": False,  # offloaded tiers never count as free GPU blocks
    }


def _kv_transfer_text(e: EngineReport) -> list[str]:
    k = e.kv_transfer
    if k is None:
        return []
    out = []
    if k.connector or k.role:
        lease = f", producer lease {k.lease_seconds} s ({k.lease_source})" if k.lease_seconds is not None else ""
        out.append(f"kv transfer: {k.connector or 'connector ?'} as {k.role or 'role ?'}{lease}")
    if k.counters:
        out.append("kv transfer counters: " + ", ".join(f"{c} {r.replace('_', ' ')} {v:g}"
                                                        for (c, r), v in sorted(k.counters.items())))
    if k.loads_by_stage:
        out.append("remote KV loads: " + ", ".join(f"{int(v)} {s.replace('_', ' ')}"
                                                   for s, v in sorted(k.loads_by_stage.items())))
    if k.offload:
        tokens = k.offload_tokens
        usage = "" if k.offload_usage is None else f", {_pct(k.offload_usage)} in use"
        out.append(f"KV offload: {len(k.offload)} host tier(s), "
                   f"{'?' if tokens is None else f'{tokens:,}'} tokens{usage} (not free GPU blocks)")
    return out


def _admission_text(e: EngineReport) -> str | None:
    need = e.headroom.admission
    if need is None or (need.lookahead_tokens == 0 and need.watermark_blocks == 0 and not e.admission_notes):
        return None
    parts = [f"{need.blocks} blocks per request ({'whole prompt' if need.gate == 'full_prompt' else 'first chunk'}"
             + (f", +{need.lookahead_tokens} lookahead tokens" if need.lookahead_tokens else "") + ")"]
    if need.watermark_blocks:
        parts.append(f"{need.watermark_blocks} watermark blocks kept free")
    return "admission: " + "; ".join(parts)


def _capacity_text(e: EngineReport) -> str | None:
    known = e.config.num_gpu_blocks
    if known is None or known.source in ("cache_config_info", "flag"):
        return None
    span = f", {known.low:,}-{known.high:,}" if known.uncertain else ""
    return f"capacity: {known.value:,} blocks ({known.source}{span}: {known.basis or 'as stated'})"


def _down_json(r: TargetReport, model: str, engine: str) -> dict[str, Any]:
    """An engine seen before its target went down: listed with verdict target_down, as in /metrics."""
    down = catalogue.entry(Verdict.TARGET_DOWN)
    return {"model_name": model, "engine": engine, "verdict": str(Verdict.TARGET_DOWN), "false_full": False,
            "explanation": TARGET_EXPLANATIONS[down.explanation](r), "actions": list(ACTIONS[down.actions]),
            "advice": [], "notes": []}


def _gap_json(g: EngineGap) -> dict[str, str | None]:
    return {"model_name": g.model_name, "engine": g.engine, "missing": g.missing or None,
            "config_error": g.config_error, "bad_value": g.bad_value, "explanation": g.explanation}


def target_json(r: TargetReport) -> dict[str, Any]:
    return {
        "target": r.url,
        "up": r.up,
        "error_reason": r.error_reason,
        "error": r.error,
        "scraped_at": r.scraped_at,
        "scrape_number": r.scrape_number,
        "scrape_duration_seconds": r.scrape_duration_seconds,
        "vllm_version": r.version,
        "vllm_frontend": r.frontend,
        "vllm_rules": None if r.rules is None else {
            "source": r.rules.source, "release": r.rules.release, "engine": r.rules.engine,
            "admission": r.rules.admission, "usage_counts_null_block": r.rules.usage_counts_null_block,
            "conservative": list(r.rules.conservative), "description": r.rules.describe()},
        "engines": ([engine_json(e, r.engines) for e in r.engines] if r.up
                    else [_down_json(r, m, e) for m, e in r.known_engines]),
        "undetermined_engines": [_gap_json(g) for g in r.gaps],
        "notes": list(r.notes),
    }


def document(reports: list[TargetReport]) -> dict[str, Any]:
    """The whole diagnosis document (valid JSON: a number that is not finite is null)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "exporter_version": __version__,
        "targets": [json_safe(target_json(r)) for r in reports],
    }


def json_safe(value: Any) -> Any:
    """`value` with every float that is not finite replaced by None: JSON has no NaN or Infinity, and a
    document that holds one is refused by strict parsers (`json.dumps(allow_nan=False)` raises)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


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
            if (cap := _capacity_text(e)) is not None:
                lines.append(f"  {cap}")
            if e.capacity_decides:
                lines.append(f"  note: {e.capacity_decides}")
            if (adm := _admission_text(e)) is not None:
                lines.append(f"  {adm}")
            for n in e.admission_notes:
                lines.append(f"  note: {n}")
            for line in _kv_transfer_text(e):
                lines.append(f"  {line}")
            for n in e.deferred_causes:
                lines.append(f"  deferred: {n}")
            if r.rules is not None:
                lines.append(f"  rules: {r.rules.describe()}")
            if e.cmdline_pid is not None:
                lines.append(f"  cmdline values read from /proc/{e.cmdline_pid}/cmdline "
                             f"(found by its {e.cmdline_found_by})")
            for a in actions(e, r.engines):
                lines.append(f"  - {a}")
            for n in notes(e):
                lines.append(f"  note: {n}")
        for g in r.gaps:
            lines.append(f"{r.url}  model={g.model_name} engine={g.engine}: {g.explanation}")
        for n in r.notes:
            lines.append(f"{r.url}  note: {n}")
    return "\n".join(lines)
