"""The JSON diagnosis (`/api/v1/diagnosis`, `diagnose --json`) and its plain-English explanation.

Numeric fields are named like the metrics without the `vllm_headroom_` prefix; a metric split by a label
becomes an object keyed by the label's value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..core import defaults
from ..engines.vllm import VLLM
from ..pipeline import advice, catalogue, derive
from ..pipeline.catalogue import Limit, Verdict
from ..pipeline.report import EngineGap, EngineReport, ReplicaSignal, TargetReport
from . import headline

SCHEMA_VERSION = 1

HOW_TO_SUPPLY = (
    "max_num_seqs is not exported by vLLM: pass --max-num-seqs (env VLLM_HEADROOM_MAX_NUM_SEQS), "
    "give vLLM's command line with --vllm-args, or share the pod's process namespace so it is read from /proc"
)


def _waits(e: EngineReport) -> str:
    """'1 request waits' or 'N requests wait'."""
    return "1 request waits" if e.waiting == 1 else f"{e.waiting} requests wait"


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _profile_text(e: EngineReport) -> str:
    p = e.prompt
    if p is None:
        return "no finished request yet and nothing running, so the head is taken as one block"
    if p.basis == "in_flight":
        return (f"no finished request sizes it: at least the {e.headroom.held_blocks_per_running} blocks each running "
                "request holds now")
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
        base += f"; thin (< {defaults.PROFILE_MIN_REQUESTS}): worst case taken at max_model_len, a risk bound only"
    if q.stale:
        base += (f"; stale: requests in flight hold {q.held_blocks_per_running} blocks each, more than the profile's "
                 f"{e.headroom.worst_case_blocks_profile_only}: worst case and the head's blocks floored by them")
    return base


def _tokens(t: float | None) -> str:
    return "?" if t is None else f"{t:,.0f}"


def _budget_hint(e: EngineReport) -> str:
    b = e.budget
    if b is None or b.prefill_tokens is None:
        return ""
    if b.max_num_batched_tokens is not None:
        if b.prefill_tokens < b.max_num_batched_tokens:
            return ""
        return (f" (likely here: a typical prompt of {_tokens(b.prefill_tokens)} tokens fills the budget of "
                f"{b.max_num_batched_tokens:,})")
    fills = [c for c in b.candidates if b.prefill_tokens >= c.value]
    if not fills:
        return ""
    return (f" (if max_num_batched_tokens is {fills[0].value:,}, vLLM's default on {fills[0].rule}, a typical "
            f"prompt of {_tokens(b.prefill_tokens)} tokens fills it)")


def _used(e: EngineReport) -> str:
    return f"{_pct(e.headroom.panel_usage_ratio)} of blocks are in use"


def _risks(e: EngineReport) -> str:
    """The risks beside what binds now, with their basis."""
    shown = [r for r in e.risks if r.kind != "max_model_len_over_pool" or e.verdict is not Verdict.NEVER_FITS]
    return "".join(f" Risk ({r.kind}, by {r.basis.replace('_', ' ')}): {r.detail}." for r in shown)


def _inferred_cap(e: EngineReport) -> str:
    cap = e.max_num_seqs or e.running
    how = ("the free blocks would hold the longest prompt vLLM has served, yet requests wait" if e.gauges_only else
           "the highest running count seen while requests waited beside free blocks, outside preemption")
    return f" (max_num_seqs {cap} is inferred, not stated: {how}; state it to confirm)"


def _slots_full(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    cap = e.max_num_seqs if e.max_num_seqs is not None else e.running
    free = max(0, cap - e.running)
    inferred = _inferred_cap(e) if e.slots_inferred or (e.config.max_num_seqs is not None
                                                        and str(e.config.max_num_seqs.source) == "inferred") else ""
    if free > 0:
        return (f"{used}; {e.running} of {e.cap_setting}={cap} slots are taken and {_waits(e)}"
                f"{inferred}: "
                f"the next step fills the {free} free slot{'s' if free > 1 else ''} (requests finish and are replaced "
                f"between steps) and the other {e.waiting - free} wait for a slot, not for memory "
                f"({h.kv_free_blocks} of {h.kv_capacity_blocks} blocks are free).{_risks(e)}")
    return (f"{used}, but all {cap} slots of {e.cap_setting}={cap} are taken{inferred}; {_waits(e)} for "
            f"a slot, not for memory ({h.kv_free_blocks} of {h.kv_capacity_blocks} blocks are free).{_risks(e)}")


def _kv_full(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    if e.max_num_seqs is not None and e.running >= e.max_num_seqs:
        slots = f" of {e.cap_setting}={e.max_num_seqs}"
        why = (f"{h.kv_free_blocks} free blocks cannot hold the next request's {h.prompt_blocks}"
               if h.kv_free_blocks < h.prompt_blocks else f"the pool is {_pct(h.panel_usage_ratio)} used")
        return (f"{used}; all {e.max_num_seqs} slots{slots} are taken and memory binds too: {why}. "
                f"{_waits(e)} for memory as much as for a slot: more slots would not admit them.")
    if h.head_may_fit and not h.head_fits and h.admission is not None:
        return (f"{used}: {h.kv_free_blocks} blocks are free and the queue head needs {_head_need(h)} (its prefill "
                "chunk and its prompt's blocks cached in free blocks, which no metric counts); since the last "
                f"scrape the engine's steps left token budget, nothing was admitted and nothing finished: its "
                f"cached blocks do not fit beside its chunk, and {_waits(e)} for KV cache.{_risks(e)}")
    if h.kv_free_blocks < h.prompt_blocks:
        return (f"{used}: {h.kv_free_blocks} blocks are free and the next request needs about {h.prompt_blocks} "
                f"({_profile_text(e)}); {_waits(e)} for KV cache.{_risks(e)}")
    if e.binding_limit is Limit.BLOCKS and e.admits is not None and h.panel_usage_ratio < defaults.FULL_USAGE:
        return (f"{used}: {h.kv_free_blocks} blocks are free, enough for {e.admits} more requests of "
                f"{h.prompt_blocks} blocks ({_profile_text(e)}), and {e.waiting} wait: the next step admits "
                f"{e.admits} and the other {e.waiting - e.admits} wait for KV cache.{_risks(e)}")
    need = h.admission
    if need is not None and need.watermark_blocks and e.running > 0 and not h.head_admissible:
        left = max(h.kv_free_blocks - need.watermark_blocks, 0)
        w = e.config.watermark.value if e.config.watermark else None
        n = e.config.num_gpu_blocks.value if e.config.num_gpu_blocks else h.kv_capacity_blocks
        return (f"{used}: {h.kv_free_blocks} blocks are free, but --watermark {w:g} keeps {need.watermark_blocks} of "
                f"the {n} blocks free beside running requests: "
                f"{left} are left and the next request needs about {need.blocks} ({_profile_text(e)}); "
                f"{_waits(e)} for KV cache.{_risks(e)}")
    return (f"{used}: the pool is (nearly) exhausted ({h.kv_free_blocks} of {h.kv_capacity_blocks} blocks free); "
            f"{_waits(e)} for KV cache.{_risks(e)}")


def _preempting(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    if e.preemption_inferred:
        how = ("no block is free while requests decode and others wait: the next block vLLM needs preempts the "
               "newest running request" if h.kv_free_blocks == 0 else
               "running fell and waiting rose while no request finished: a running request went back to the queue")
        return (f"Preemption inferred from the gauges ({how}); vLLM counts a preemption only when the preempted "
                f"request produces its next token, so num_preemptions_total may rise a scrape or more later. "
                f"{used}, {e.running} running, {e.waiting} waiting.")
    if e.suspected:
        why = (f"the requests in flight hold {h.held_blocks_per_running} blocks each, more than any finished "
               "request did" if e.profile is not None and e.profile.stale else
               f"the {e.running} running requests leave no room for one more of {h.worst_case_blocks_profile} "
               f"blocks in the pool of {h.kv_capacity_blocks}")
        return (f"Suspected preemption: vLLM counted {e.preemptions_total or 0:.0f} preemptions since it started and "
                f"{why}; {e.waiting} requests most likely wait for memory. One observation cannot date the "
                f"preemptions: the sidecar sees them as num_preemptions_total rises. {used}.")
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
            f"({h.prompt_blocks} blocks), yet {_waits(e)} and none was admitted or finished since the "
            "last scrape: the request at the head of the queue is larger than typical (vLLM admits in order and "
            f"needs its whole prompt to fit), or running prefills use up the step's token budget "
            f"(max_num_batched_tokens).{_risks(e)}")


def admission_text(h: derive.Headroom) -> str:
    """The admission headroom as text: one number, or `fewest-most` where the exposition gives a range (the queue
    head's size between the profile's quantile and its typical prompt, or the LoRA cap's)."""
    most = h.admission_headroom_requests_max
    return f"{h.admission_headroom_requests}" if most is None else f"{h.admission_headroom_requests}-{most}"


def _deferred(e: EngineReport) -> str:
    role = "" if e.config.kv_role is None else (f" (this instance is a P/D {e.config.kv_role.value}: requests "
                                                "waiting for remote KV are deferred until the transfer completes)")
    if "deferred" not in e.waiting_by_reason:
        # A release without the deferred count (before 0.20): vLLM's LoRA info shows an adapter held back.
        h = e.headroom
        most = h.admission_headroom_requests_max
        admits = (f"between {h.admission_headroom_requests} and {most}" if most is not None
                  else f"{h.admission_headroom_requests}")
        return (f"{_used(e)}; {_waits(e)} and vLLM's LoRA cap skips those whose adapter is not loaded "
                f"({'; '.join(e.deferred_causes)}): the next step admits {admits} of them (the exposition does not "
                "say how many ask for a running adapter), not short of memory. The engine makes no step for the "
                "others meanwhile: that is the deferral, not a hang.")
    return (f"{_used(e)}; {int(e.waiting_by_reason.get('deferred', 0))} of {e.waiting} waiting requests are deferred "
            f"by vLLM (LoRA adapter budget, grammar compilation or a KV transfer), not short of memory{role}. The "
            "engine makes no step for them meanwhile: that is the deferral, not a hang.")


def _stuck(e: EngineReport) -> str:
    return (f"{_waits(e)} and the engine has made no step for {e.seconds_without_progress:.0f} s; "
            f"{_used(e)}. Nothing else explains it: no request is deferred, the engine is awake, and the head "
            "fits the pool. The scheduler is not making progress.")


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
    per = "" if b is None or b.prefill_tokens is None else f" (a typical prompt is {_tokens(b.prefill_tokens)} tokens)"
    if b is None:
        budget = ""
    elif b.max_num_batched_tokens is not None:
        budget = f"{b.max_num_batched_tokens:,} tokens ({b.source})"
    else:
        budget = f"at most {max(c.value for c in b.candidates):,} tokens (even vLLM's largest default)"
    taken = ("the running requests' tokens and the prefills admitted take" if e.running else
             "the prefills it admits take")
    return (f"{_used(e)}, {h.kv_free_blocks} free blocks and free slots, yet {_waits(e)}: {taken} "
            f"the whole token budget of {budget} of each step{per} (max_num_batched_tokens). vLLM schedules "
            f"running requests first and admits waiting ones only while budget is left.{_risks(e)}")


def _never_fits(e: EngineReport) -> str:
    h = e.headroom
    wmax = h.worst_case_blocks_max_model_len
    sure = (" One observation: it may also be the moment between two steps; a second look confirms."
            if e.suspected else "")
    return (f"Nothing runs and all {h.kv_capacity_blocks} blocks are free, yet {_waits(e)}: the "
            f"request at the head of the queue needs more blocks than the whole pool (max_model_len needs "
            f"{wmax} blocks, the pool has {h.kv_capacity_blocks}). vLLM admits in order and rejects nothing here "
            f"(vllm#39734), so it and every request behind it wait forever; the engine makes no step meanwhile, "
            f"which is this, not a hang.{sure}")


def _head_need(h: derive.Headroom) -> str:
    """The blocks the queue head needs: one figure, or `least-most` where its cached blocks decide
    (`AdmissionNeed.least_blocks`)."""
    need = h.admission
    if need is None or need.least_blocks is None:
        return f"{h.prompt_blocks}"
    return f"{need.least_blocks}-{h.prompt_blocks}"


def _cases(e: EngineReport) -> str:
    """The undecided answer's cases, each a conditional clause."""
    return advice.cases_text(e.decided_by, e.admits)


def _transient(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    if e.decided_by:
        return (f"{used}, {h.kv_free_blocks} blocks are free (the queue head is taken to need {_head_need(h)}), "
                f"{e.running} run and {e.waiting} wait. max_num_seqs is unknown and one observation cannot infer it; "
                f"{_cases(e)}. Most often this is the moment between two engine steps. Supply max_num_seqs, or "
                f"watch it with `serve`.{_risks(e)}")
    return (f"{used}, {h.kv_free_blocks} blocks are free (the queue head is taken to need {_head_need(h)}) and "
            f"{_waits(e)}: " + (
                f"the next step can admit {e.admits}, so in one observation this is most often the moment between "
                "two engine steps" if e.admits is not None else
                "in one observation this is most often the moment between two engine steps")
            + ". If it persists, the head of the queue is larger than the free blocks or prefills use up the token "
            "budget" + _budget_hint(e) + (": watch it with `serve` or diagnose again." if e.gauges_only else
                                          ": the next scrape tells.") + _risks(e))


def _unknown_role(e: EngineReport) -> str:
    later = ("if not, and they stay past --verdict.leak-after, they may be leaked" if str(e.verdict) == "ok" else
             "if not, they may be leaked")
    return (f"Nothing waits and nothing runs; {e.headroom.kv_used_blocks} blocks stay in use, and the engine exports "
            "vLLM's NIXL connector series but nobody stated its kv_role: if it is a P/D producer (kv_producer "
            "or kv_both), these are finished prefills it keeps until its decode side reads them (freed then, "
            f"or when their lease expires), held on purpose; {later}. Give vLLM's command line "
            "(--kv-transfer-config) to decide.")


def _unstated(e: EngineReport) -> str:
    wrong = e.max_num_seqs_refuted
    if wrong is not None and e.config.max_num_seqs is None:
        return f"nobody stated rightly (the stated {wrong.value} is below the {e.running} running)"
    return "nobody stated"


def _undecided(e: EngineReport) -> str:
    h, used = e.headroom, _used(e)
    if e.producer_holding:
        return _unknown_role(e)
    if e.asleep_or_stuck:
        mode = e.config.enable_sleep_mode
        return (f"{_waits(e)} and the engine has made no step for {e.seconds_without_progress:.0f} s; "
                f"{used}, {e.running} running. This vLLM exports no sleep state and its sleep mode is "
                f"{'on' if mode is not None and mode.value else 'not known'}: an engine put to sleep (POST /sleep) "
                "and a stuck scheduler look the same from here. The server's GET /is_sleeping decides.")
    if not e.decided_by:
        return f"{used}, {e.running} run and {e.waiting} wait; what binds cannot be told from what is consistent."
    unknown = sorted({c.input for c in e.decided_by} - set(advice.EVIDENCE))
    evidence = [advice.EVIDENCE[i] for i in dict.fromkeys(c.input for c in e.decided_by) if i in advice.EVIDENCE]
    what = [*unknown, *(x.what for x in evidence)]
    todo = [*([f"State {' and '.join(unknown)}"] if unknown else []),
            *((x.one_shot if e.gauges_only else x.serve) for x in evidence)]
    todo = [t[0].upper() + t[1:] if i == 0 else t for i, t in enumerate(todo)]
    return (f"{used}, {h.kv_free_blocks} blocks are free (the queue head is taken to need {_head_need(h)}), "
            f"{e.running} run and {e.waiting} wait: more than the next step could admit, so this is no moment between "
            f"two steps. What binds depends on {' and '.join(what)}, which "
            f"{_unstated(e) if unknown else 'one observation cannot tell'}; {_cases(e)}. "
            f"{'; or '.join(todo)} to decide.{_risks(e)}")


def _ok(e: EngineReport) -> str:
    h = e.headroom
    if e.producer_holding:
        if e.config.kv_role is None:
            return _unknown_role(e)
        return (f"Nothing waits and nothing runs; the {h.kv_used_blocks} blocks in use are finished prefills this "
                f"P/D producer (kv_role {e.config.kv_role.value}) keeps until its decode "
                "side reads them (vLLM's NIXL connector frees them then, or when their lease expires): held on "
                "purpose, not leaked.")
    late = (" vLLM counted preemptions since the last scrape; nothing waits and the free blocks cover the next step,"
            " so the preempted requests run again (V1 counts a preemption when the request's next output is "
            "processed)." if e.preemptions_per_second else "")
    return (f"Nothing is held back: {_used(e)}, {e.running} running, {e.waiting} waiting; room for "
            f"{admission_text(h)} more requests now and {max(h.safe_headroom_requests, 0)} more "
            f"that could each reach max_tokens without preemption.{late}{_risks(e)}")


def _unverified(e: EngineReport, doubt: str) -> str:
    """Idle gauges nothing shows idle (`EngineReport.gauges_doubt`): one-shot, or steps since the last scrape."""
    lead = (f"vLLM's gauges read 0 running, 0 waiting and no block in use, but {doubt}, and that frontend's gauges "
            "read 0 on most scrapes under load: this reading cannot tell an idle server from a loaded one. "
            "Undecided: ")
    if not e.gauges_only:  # the sidecar: the first look, a restart, or steps since the last scrape
        return lead + ("the engine ran steps since the last scrape, or there is none to compare with. It is said "
                       "idle once a scrape shows no step since the one before; the gauges are said unreliable once "
                       f"the counters ({VLLM.names.generation_tokens}, finished requests) show requests they miss.")
    url = ("diagnose a URL whose /version answers (it names the frontend), " if "/version" not in doubt else "")
    return lead + (f"{url}run `vllm-headroom serve` (it checks the gauges against the token counters across "
                   f"scrapes) or diagnose again while watching {VLLM.names.generation_tokens}.")


def _unreliable(e: EngineReport, inner: Callable[[EngineReport], str]) -> str:
    last = e.consistent
    lead = (f"vLLM's gauges read {e.running} running, {e.waiting} waiting and {_pct(e.headroom.panel_usage_ratio)} "
            "usage although the engine decoded several requests per step since the last scrape")
    if e.unreliable_scrapes > 1:
        lead += (f": the gauges are unreliable on this server ({e.unreliable_scrapes} such scrapes so far; vLLM "
                 "0.32's Rust frontend does this under load).")
    else:
        lead += (": either every request finished or was aborted just before this scrape, or the gauges are "
                 "unreliable on this server (vLLM 0.32's Rust frontend reads 0 on most scrapes under load).")
    if last is None or e.judged_from is None or last.verdict is not e.verdict:
        shown = "" if last is None else f" (it said {last.verdict}, {e.judged_from or 0:.0f} s ago)"
        return lead + (f" Nothing is judged from these gauges; the last consistent scrape{shown} is not repeated: "
                       "undecided until a consistent scrape.")
    return lead + f" Judged from the last consistent scrape, {e.judged_from:.0f} s ago: " + inner(last)


def _target_down(r: TargetReport) -> str:
    return f"the last scrape failed ({r.error_reason}): {r.error}; numbers would be stale"


# The explanation of each verdict by its catalogue key (exporter/pipeline/catalogue.py): engine verdicts from the
# engine's report, target_down from the failed target's.
EXPLANATIONS: dict[str, Callable[[EngineReport], str]] = {
    "ok": _ok, "kv_full": _kv_full, "slots_full": _slots_full, "preempting": _preempting,
    "head_of_line": _head_of_line, "deferred": _deferred, "stuck": _stuck, "leak": _leak,
    "budget_full": _budget_full, "never_fits": _never_fits, "transient": _transient, "sleeping": _sleeping,
    "undecided": _undecided,
}
TARGET_EXPLANATIONS: dict[str, Callable[[TargetReport], str]] = {"target_down": _target_down}

# The fixed actions of each verdict by its catalogue key, after the advice engine's settings.
ACTIONS: dict[str, tuple[str, ...]] = {
    "ok": (), "kv_full": (), "slots_full": (), "preempting": (), "budget_full": (), "never_fits": (),
    "transient": (), "undecided": (),
    "head_of_line": ("route very long prompts to a separate pool or lower max_model_len; the head needs its whole "
                     "uncached prompt in free blocks (vLLM >= 0.19)",),
    "deferred": ("raise max_loras, pre-compile grammars, or check the KV-transfer connector (on a P/D decode "
                 "instance: is the prefill side up and reachable?); the engine waits on purpose, it is not hung",),
    "stuck": ("check the engine log; restart the pod if the engine is hung",),
    "sleeping": ("wake the engine: POST /wake_up on the vLLM server (vLLM started with --enable-sleep-mode; the "
                 "endpoint is served with VLLM_SERVER_DEV_MODE=1); do not restart it, it is not hung",),
    "leak": ("report the vLLM version; if a P/D connector holds the blocks for a decode side, give vLLM's command line "
             "(--kv-transfer-config) so the sidecar knows; otherwise a restart of the pod reclaims them",),
    "target_down": ("check that vLLM is running and reachable from the sidecar",),
}


def explain(e: EngineReport) -> str:
    """One paragraph saying why requests wait (or that nothing does), from the engine's one judgement."""
    inner = EXPLANATIONS[catalogue.entry(e.verdict).explanation]
    if e.gauges_doubt is not None:
        return _unverified(e, e.gauges_doubt)
    if not e.gauges_reliable:
        return _unreliable(e, inner)
    return inner(e) + _watermark_decides(e)


def _watermark_decides(e: EngineReport) -> str:
    """What decides an admission figure read at vLLM's default watermark when nobody stated --watermark."""
    share = e.watermark_decides
    if share is None:
        return ""
    n = e.config.num_gpu_blocks.value if e.config.num_gpu_blocks else e.headroom.kv_capacity_blocks
    return (f" The room to admit rests on vLLM's default --watermark 0.0, which nobody stated (vLLM takes 0.0 to "
            f"below 1.0): from --watermark {share:.3g} on ({int(share * n)} of the {e.headroom.kv_free_blocks} free "
            "blocks kept free beside running requests) the queue head no longer fits and none is admitted; state "
            "--watermark to decide.")


def actions(e: EngineReport, engines: list[EngineReport] | None = None) -> list[str]:
    """Concrete changes an operator can make, most useful first (the judgement's advice), then the verdict's fixed
    actions; with the server's other engines (data parallel), max_num_seqs is advised once for the server."""
    shown = e.consistent if not e.gauges_reliable and e.consistent is not None else e
    given = advice.advise_server(e, engines or [e])
    out = [a.text() for a in given]
    fixed = ACTIONS[catalogue.entry(shown.verdict).actions]
    if shown.asleep_or_stuck:
        fixed = (ASLEEP_OR_STUCK_ACTION,)
    elif shown.producer_holding and str(shown.verdict) == "undecided":
        fixed = (KV_ROLE_ACTION,)
    out += deferral_actions(shown) if str(shown.verdict) == "deferred" else list(fixed)
    known = e.config.max_num_seqs
    if (known is None or known.source == "inferred") and not any(
            a.setting == "max_num_seqs" and a.direction == "state" for a in given):
        out.append(HOW_TO_SUPPLY)
    wrong = stated_cap_doubt(e)
    if wrong:
        out.append(wrong)
    return out


REMOTE_KV_ACTION = ("check the prefill side this decode instance loads KV from: is it up and reachable, and does "
                    "the connector report transfer failures or expired KV (its counters, under kv_transfer) on the "
                    "prefill instance? The requests wait for remote KV on purpose, the engine is not hung")
LORA_ACTION = "raise max_loras (--max-loras) or route fewer adapters to this pod; the engine waits on purpose"


def deferral_actions(e: EngineReport) -> list[str]:
    """The actions for deferred requests, by the cause the exposition shows (`EngineReport.deferred_causes`): a
    remote-KV wait is the prefill side's to fix, a LoRA wait max_loras'; with no cause in sight, the verdict's
    fixed actions (LoRA, grammar or a connector)."""
    causes = e.deferred_causes
    out = [LORA_ACTION for c in causes if c.startswith("LoRA")][:1]
    out += [REMOTE_KV_ACTION for c in causes if c.startswith("remote KV")][:1]
    return out or list(ACTIONS["deferred"])


# An undecided stall that sleep may explain (no sleep state exported): ask the server, restart for neither answer
# until the log is read.
KV_ROLE_ACTION = ("give vLLM's command line (--vllm-args, or share the pod's process namespace) with its "
                  "--kv-transfer-config: a kv_producer keeps these blocks on purpose; without a connector they are "
                  "leaked and a restart of the pod reclaims them")
ASLEEP_OR_STUCK_ACTION = ("ask the server: GET /is_sleeping (served with VLLM_SERVER_DEV_MODE=1); if it is asleep, "
                          "POST /wake_up; if not, the scheduler is stuck: check the engine log")


CAP_DOUBT_FRAMES = 6  # scrapes with requests waiting before a stated cap far above the running count is doubted


def stated_cap_doubt(e: EngineReport) -> str | None:
    """A stated max_num_seqs the engine contradicts: more requests run than it allows."""
    wrong = e.max_num_seqs_refuted
    if wrong is not None:
        # max_num_seqs still known: the refuted one was max_num_active_seqs (judge.py judges each on its own)
        name = "max_num_active_seqs" if e.config.max_num_seqs is not None else "max_num_seqs"
        taken = ("judged without it" if name == "max_num_active_seqs" else "this answer takes the cap as unknown")
        return (f"check {name}: {e.running} run, more than the {name} {wrong.value} you stated ({wrong.source}); "
                f"vLLM never runs more than its cap, so the stated value is wrong: {taken}; state the server's real "
                "value")
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


def _waste_json(w: derive.Waste | None) -> dict[str, Any] | None:
    """A ratio with its range, keyed like the metric's `bound` label, and what it rests on."""
    if w is None:
        return None
    return {"estimate": round(w.ratio, 6), "low": round(w.low, 6), "high": round(w.high, 6), "basis": w.basis}


def _token_usage_json(e: EngineReport) -> dict[str, float] | None:
    if e.block_waste is None:
        return None
    tokens, low, high = derive.token_usage(e.headroom.panel_usage_ratio, e.block_waste)
    return {"estimate": round(tokens, 6), "low": round(low, 6), "high": round(high, 6)}


def waste_text(e: EngineReport) -> str | None:
    """One line on block waste and the prefix cache, or None when nothing shows them."""
    parts = []
    w = e.block_waste
    if w is not None:
        tokens, low, high = derive.token_usage(e.headroom.panel_usage_ratio, w)
        basis = {"profile": "the profile's lengths", "in_flight": "running requests and used blocks",
                 "profile+in_flight": "the profile's lengths within the in-flight bounds"}.get(w.basis, w.basis)
        parts.append(f"{_pct(w.ratio)} of the token slots in used blocks hold no token ({_pct(w.low)}-"
                     f"{_pct(w.high)}, from {basis}): tokens fill {_pct(tokens)} ({_pct(low)}-{_pct(high)}) of the "
                     f"pool where the panel shows {_pct(e.headroom.panel_usage_ratio)}")
    if e.prefix_cache_hit_ratio is not None:
        parts.append(f"prefix cache hits {_pct(e.prefix_cache_hit_ratio)} of prompt tokens")
    b = e.prefix_boundary_loss
    if b is not None and b.basis == "prefix_hits":
        parts.append(f"a shared prefix loses {_pct(b.low)}-{_pct(b.high)} of the prompt at its last partial "
                     f"block (only full blocks of {e.headroom.block_size_tokens} tokens are cached)")
    return "; ".join(parts) or None


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
            "prefill_tokens": b.prefill_tokens,
            "candidates": [{"value": c.value, "rule": c.rule} for c in b.candidates]},
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
        "binding_limit": str(e.binding_limit),
        "decided_by": [{"input": c.input, "value": c.value, "rule": c.rule, "limit": str(c.limit)}
                       for c in e.decided_by],
        "risk": {r.kind: {"basis": r.basis, "detail": r.detail} for r in e.risks},
        "input_provenance": {k: str(v.provenance) for k, v in sorted(e.inputs.items())},
        "input_range": {k: {"value": v.value, "low": v.low, "high": v.high, "rule": v.rule,
                            "candidates": [{"value": c.value, "rule": c.rule} for c in v.candidates]}
                        for k, v in sorted(e.inputs.items()) if not v.exact},
        "admits_next_step_requests": e.admits,
        "gauges_reliable": e.gauges_reliable,
        "gauges_doubt": e.gauges_doubt,  # undecided idle gauges: why they may come from a loaded server
        "judged_from_seconds_ago": None if e.judged_from is None else round(e.judged_from, 3),
        "producer_holding": e.producer_holding,
        "asleep_or_stuck": e.asleep_or_stuck,
        "effective_usage_ratio": round(h.effective_usage_ratio, 6),  # deprecated alias, removed in 0.2.0
        "worst_case_blocks_per_request": {
            "profile": h.worst_case_blocks_profile,
            "max_model_len": h.worst_case_blocks_max_model_len,
        },
        "prompt_blocks": h.prompt_blocks,
        "kv_block_waste_ratio": _waste_json(e.block_waste),
        "kv_token_usage_ratio": _token_usage_json(e),  # the panel's usage × (1 − waste): slots that hold KV
        "prefix_cache_hit_ratio": None if e.prefix_cache_hit_ratio is None else round(e.prefix_cache_hit_ratio, 6),
        "prefix_cache_boundary_loss_ratio": _waste_json(e.prefix_boundary_loss),
        "slot_headroom_requests": h.slot_headroom_requests,
        "admission_headroom_requests": h.admission_headroom_requests,
        # the most vLLM may admit when only a range is known (the LoRA cap, or the queue head's size between the
        # profile's quantile and its typical prompt); null: the figure above is exact
        "admission_headroom_requests_max": h.admission_headroom_requests_max,
        # nobody stated --watermark: the admission figure holds only below this share (null: over the whole range)
        "admission_watermark_decides": e.watermark_decides,
        "safe_headroom_requests": h.safe_headroom_requests,
        "worst_case_headroom_requests": derive.worst_case_headroom(h.slot_headroom_requests, h.safe_headroom_requests),
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
        "least_blocks": None if need is None else need.least_blocks,
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


def replicas_json(s: ReplicaSignal) -> dict[str, Any]:
    return {"model_name": s.model_name, "replicas_needed": round(s.replicas_needed, 6),
            "replica_demand_requests": s.demand_requests, "replica_load_requests": round(s.load_requests, 6),
            "replica_capacity_requests": s.capacity_requests,
            "replicas_needed_basis": {"limit": s.limit, "max_num_seqs_source": s.max_num_seqs_source,
                                      "worst_case": s.worst_case, "conservative": s.conservative},
            "kv_capacity_requests": s.kv_capacity_requests, "target_utilization": s.target_utilization}


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
        "vllm_attention": None if r.attention is None else dataclasses.asdict(r.attention),
        "undetermined_engines": [_gap_json(g) for g in r.gaps],
        # The replica signal per model (one replica: this server, its engines summed); docs/autoscaling.md.
        "replicas": [replicas_json(s) for s in r.replicas] if r.up else [],
        "notes": list(r.notes),
        # Why /v1/models did not answer (e.g. vLLM's --api-key): max_model_len then comes from elsewhere or not at all.
        "models_error": r.models_error,
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


def _printable(text: str) -> str:
    """`text` as one line a terminal shows as it is: control characters (newlines, ANSI escapes) written as escapes,
    so a label value the target chose cannot forge lines or recolour the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def render_text(reports: list[TargetReport]) -> str:
    """The human-readable form of the same document."""
    lines: list[str] = []
    for r in reports:
        if not r.up:
            lines.append(f"{r.url}: DOWN ({r.error_reason}): {r.error}")
            continue
        for e in r.engines:
            h = e.headroom
            lines.append(f"{r.url}  model={_printable(e.model_name)} engine={_printable(e.engine)}")
            lines.append(f"  verdict: {e.verdict}    false_full: {'yes' if e.false_full else 'no'}")
            lines.append(f"  {explain(e)}")
            slots = "unknown" if h.slot_headroom_requests is None else str(h.slot_headroom_requests)
            lines.append(
                f"  panel usage {_pct(h.panel_usage_ratio)}; a new worst-case request cannot get "
                f"{_pct(headline.unreachable_pool_ratio(h))} of the pool (binding now: {e.binding_limit}); "
                f"blocks {h.kv_used_blocks} used / {h.kv_free_blocks} free / {h.kv_capacity_blocks} usable "
                f"(block size {h.block_size_tokens})")
            lines.append(
                f"  running {e.running}, waiting {e.waiting}; headroom: admission {admission_text(h)}"
                + ("" if e.watermark_decides is None else f" (0 from --watermark {e.watermark_decides:.3g})") + ", "
                f"slots {slots}, safe {h.safe_headroom_requests}")
            wmax = h.worst_case_blocks_max_model_len
            lines.append(
                f"  worst case per request: {h.worst_case_blocks_profile} blocks (profile), "
                f"{'?' if wmax is None else wmax} at max_model_len; max concurrency {h.max_concurrency_profile} / "
                f"{'?' if h.max_concurrency_max_model_len is None else h.max_concurrency_max_model_len}")
            waste = waste_text(e)
            if waste is not None:
                lines.append(f"  block waste: {waste}")
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
        att = r.attention
        if att is not None:
            lines.append(f"{r.url}  start-up log: attention backend {att.backend or 'not named'}, block size "
                         f"{att.block_size or '?'} in effect ({att.block_size_source or 'not stated'}), KV cache "
                         f"dtype {att.kv_cache_dtype or 'not stated'}")
        for g in r.gaps:
            lines.append(f"{r.url}  model={g.model_name} engine={g.engine}: {g.explanation}")
        for n in r.notes:
            lines.append(f"{r.url}  note: {n}")
        if r.up and r.models_error is not None:
            lines.append(f"{r.url}  note: {r.models_error}")
    return "\n".join(lines)
