"""The one advice engine: what to change, from what to what, for what the judgement says binds now.

The judgement (pipeline/verdict.py via pipeline/judge.py) decides what binds; this module only sizes the change,
so the verdict, the binding limit and the advice cannot disagree. `judge()` stores the result on the report
(`EngineReport.advice`); `diagnose`, the sidecar's diagnosis, the status page and `recommend` read it there.

Rules, from one engine's report:
* A value nobody stated (max_num_seqs inferred or unknown, max_num_batched_tokens assumed) is never raised, lowered
  or added to: the advice is `state` it, with what it decides.
* A worst case no finished request backs (a thin profile: taken at max_model_len; no finished request: the
  in-flight floor) sizes no change of max_num_seqs or of the pool.
* Slots bind (`slots`): the pool holds `fits = floor(B / W)` requests of the observed worst case W; when that is
  more than max_num_seqs, raise it to `SHARE_LOW`–`SHARE_HIGH` of `fits`, at most doubled per step and never above
  max_num_batched_tokens, saying what keeps it safe (how much current evidence the size rests on). Never `keep`
  while the pool holds more (docs/runbook.md, slots_full). Not while requests in flight hold more than the
  profile's worst case (the workload changed: issue 11's raise before a storm).
* Memory binds (`blocks`, `head_prompt`, preemption): how much KV capacity, a shorter max_model_len or an fp8 KV
  cache would hold the requests; max_num_seqs lowered when the pool holds fewer worst-case requests than it.
* The token budget binds (`token_budget`): raise max_num_batched_tokens (stated) or cap each prefill's share.
* Risk (oversubscription while something else binds): max_num_seqs lowered to what the pool holds, sized by a
  profile of finished requests only.
* max_model_len above the pool: one such request can never be admitted; lower max_model_len.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core import defaults
from . import derive
from .config import value
from .inputs import GUESSED, provenance
from .report import Advice, EngineReport
from .verdict import Case, Limit, Verdict

SHARE_LOW, SHARE_HIGH = 0.70, 0.80  # max_num_seqs as a share of the worst-case concurrency the pool allows
SIZED_BASES = frozenset({"window", "lifetime"})  # a prompt profile of finished requests


def seqs_range(fits: int) -> tuple[int, int]:
    """`SHARE_LOW`–`SHARE_HIGH` of the worst-case concurrency, at least 1."""
    return max(1, math.floor(SHARE_LOW * fits)), max(1, math.floor(SHARE_HIGH * fits))


def _source(e: EngineReport, name: str) -> str | None:
    known = getattr(e.config, name)
    return None if known is None else str(known.source)


def cap_guessed(e: EngineReport) -> bool:
    """max_num_seqs is inferred or unknown: nobody stated it."""
    known = e.config.max_num_seqs
    return known is None or provenance(known.source) in GUESSED


def size_backed(e: EngineReport) -> bool:
    """The worst case per request rests on finished requests: the profile is not thin and its prompt is read from
    the length histograms (not the in-flight floor, not max_model_len), and neither its prompt nor its output
    quantile lies in vLLM's +Inf bucket, where the histogram says only "longer than the last bound" and the size
    taken is max_model_len (a fresh reviewer: 0.32.0 prod-preempt, a p99 prompt between 20,000 tokens and
    max_model_len's 32,768 sized "lower max_num_seqs from 256 to 13-15", the top of that range)."""
    q = e.profile
    return (q is not None and not q.thin and e.prompt is not None and e.prompt.basis in SIZED_BASES
            and not e.prompt.open_ended and not (e.max_tokens is not None and e.max_tokens.open_ended))


def kv_capacity(e: EngineReport, wanted: int) -> Advice | None:
    """The pool cannot hold `wanted` worst-case requests: what capacity, max_model_len or fp8 KV would.
    None when it already holds them (an action of zero blocks is no action) or when no finished request backs the
    worst case it would be sized by."""
    if not size_backed(e):
        return None
    h = e.headroom
    w, b, bs = h.worst_case_blocks_profile, h.kv_capacity_blocks, h.block_size_tokens
    missing = wanted * w - b
    if missing <= 0:
        return None
    options = [f"{missing} more blocks ({missing * bs:,} tokens, +{100 * missing / b:.0f} %) hold {wanted} requests "
               f"of {w} blocks"]
    length = value(e.config.max_model_len)
    per = b // max(wanted, 1) * bs
    if length and per < length:
        options.append(f"or max_model_len <= {per:,} tokens gives {wanted} requests of max_model_len")
    dtype = (value(e.config.kv_cache_dtype) or value(e.config.cache_dtype) or "auto").lower()
    if "fp8" not in dtype:
        options.append(f"or an fp8 KV cache (--kv-cache-dtype fp8) about doubles the pool: "
                       f"{derive.max_concurrency(2 * b, w)} requests of {w} blocks")
    return Advice("kv_capacity", "add", b, "blocks", f"{missing} blocks", "; ".join(options[1:]),
                  f"the pool ({b} blocks) holds {derive.max_concurrency(b, w)} worst-case requests; "
                  f"{options[0]}")


def _pool_binds(admits: int | None) -> str:
    if admits is None:
        return "the pool binds"
    if admits == 0:
        return "the free blocks hold no more heads and the pool binds"
    held = "the one request" if admits == 1 else f"the {admits} requests"
    return f"the next step admits {held} the free blocks hold and the pool binds the rest"


def limit_words(limit: Limit, admits: int | None) -> str:
    """What binds, in words, when an unknown input has one of its values."""
    return {
        Limit.SLOTS: "the slots bind (a free slot would admit the head)",
        Limit.TOKEN_BUDGET: "the token budget binds (such prefills take whole steps)",
        Limit.BLOCKS: _pool_binds(admits),
        Limit.HEAD_PROMPT: "the head's prompt does not fit in the free blocks",
        Limit.NONE: "vLLM admits the queue at its next step",
        Limit.DEFERRAL: "vLLM skips the rest (their LoRA adapter waits for a slot under max_loras)",
        Limit.UNDECIDED: "it depends on max_num_batched_tokens (below)",
    }.get(limit, f"{limit} binds")


@dataclass(frozen=True)
class Evidence:
    """An input of a judgement's cases that is no vLLM setting: what decides it is evidence, not a flag."""

    name: str  # the input in a case's words: "if <name> is <value>, ..."
    what: str  # what the answer depends on: "What binds depends on <what>"
    one_shot: str  # what decides it, said to one observation
    serve: str  # ... said by the sidecar, which looks again at the next scrape


EVIDENCE = {
    "request_tokens": Evidence(
        "the queue head's uncached prompt (tokens)", "the queue head's size",
        "watch it with `serve`, which reads from the steps between scrapes whether the head goes in and what they "
        "spend of the budget",
        "wait for the next scrape (the steps until then show whether the head goes in and the budget's use)"),
    "head_cached_blocks": Evidence(
        "the queue head's prompt blocks cached in free blocks",
        "how much of the queue head's prompt sits cached in free blocks (vLLM's per-step gate counts them with "
        "its chunk; no metric exports them)",
        "watch it with `serve` (a head still waiting after steps that left token budget does not fit)",
        "wait for the next scrape (a head still waiting after steps that left token budget does not fit)"),
    "lora_admissible_requests": Evidence(
        "the count of waiting requests for a running adapter or the base model",
        "how many waiting requests ask for a running LoRA adapter or the base model (vLLM's LoRA info series names "
        "the adapters with requests waiting, not how many requests each has, nor the base model's)",
        "watch it with `serve` (steps that leave token budget while the queue stands show the LoRA cap holding it)",
        "wait for the next scrape (steps that leave token budget while the queue stands show the LoRA cap holding "
        "it)"),
}
CASE_NAMES = {k: v.name for k, v in EVIDENCE.items()}


def cases_text(cases: tuple[Case, ...] | list[Case], admits: int | None, named: bool = True) -> str:
    """`if max_num_seqs is 8 (the running count), the slots bind; if it is 128 (vLLM's default on CPU) or 1,024
    (...), the next step admits ...`: one clause per input and limit, each conditional."""
    groups: list[tuple[str, Limit, list[Case]]] = []
    for c in cases:
        if groups and groups[-1][0] == c.input and groups[-1][1] is c.limit:
            groups[-1][2].append(c)
        else:
            groups.append((c.input, c.limit, [c]))
    out = []
    for name, limit, group in groups:
        values = [f"{c.value:,} ({c.rule})" for c in group]
        said = values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]
        out.append(f"if {CASE_NAMES.get(name, name) if named else 'it'} is {said}, {limit_words(limit, admits)}")
    return "; ".join(out)


def _state_seqs(e: EngineReport) -> Advice:
    """Ask for max_num_seqs: what it would decide, from the judgement's cases."""
    known = e.config.max_num_seqs
    current = None if known is None else known.value
    src = None if known is None else str(known.source)
    cases = [c for c in e.decided_by if c.input == "max_num_seqs"]
    h = e.headroom
    cap = e.max_num_seqs if e.max_num_seqs is not None else e.running
    if cases:
        said = cases_text(cases, e.admits, named=False)
    elif cap > 0 and e.waiting > 0:
        said = f"if it is {cap:,}, slots bind" + (
            f" and the pool holds {h.max_concurrency_profile} requests of the observed worst case"
            if size_backed(e) else "")
    else:  # nothing runs or waits: no cap binds now (vLLM's is at least 1)
        said = "it sizes the slot and admission headroom"
    return Advice("max_num_seqs", "state", current, src, None, "",
                  "pass --max-num-seqs or vLLM's command line (--vllm-args), or share the pod's process namespace: "
                  f"{said}; a guessed value is never raised")


def _state_budget(e: EngineReport) -> Advice:
    cases = [c for c in e.decided_by if c.input == "max_num_batched_tokens"]
    b = e.budget
    p = None if b is None or b.prefill_tokens is None else f"{b.prefill_tokens:,.0f}"
    lead = f"a typical prompt is {p} tokens; " if p else ""
    return Advice("max_num_batched_tokens", "state", None, None, None, "",
                  "pass --max-num-batched-tokens or vLLM's command line (--vllm-args): vLLM's default depends on the "
                  f"device, which it does not export; {lead}{cases_text(cases, e.admits, named=False)}")


def max_num_seqs(e: EngineReport, advisable: bool | None = None) -> Advice | None:
    """The one max_num_seqs advice for an engine (None when nothing about it can be said).

    `advisable` (tests): take the profile as enough current evidence for a raise regardless of its coverage."""
    h = e.headroom
    fits = h.max_concurrency_profile
    low, high = seqs_range(fits)
    current = e.max_num_seqs
    setting = e.cap_setting  # max_num_active_seqs where that caps admission below max_num_seqs
    src = _source(e, setting)
    if cap_guessed(e):
        return _state_seqs(e) if (e.binding_limit in (Limit.SLOTS, Limit.UNDECIDED) or e.decided_by
                                  or current is not None) else None
    assert current is not None
    w = h.worst_case_blocks_profile
    margin = (f"{int(100 * SHARE_LOW)}-{int(100 * SHARE_HIGH)} % of the {fits} requests of {w} blocks the pool of "
              f"{h.kv_capacity_blocks} holds")
    backed = size_backed(e)
    slots_bind = e.binding_limit is Limit.SLOTS
    if not backed:
        if slots_bind and fits <= current:
            q = e.profile
            held = h.held_blocks_per_running
            seen = "" if held is None else (f"; the requests in flight hold {held} blocks each, so the pool would hold "
                                            f"{h.kv_capacity_blocks // max(held, 1)} of that size")
            return Advice(setting, "keep", current, src, None, "",
                          f"slots bind, but no worst case backs a raise yet: {q.samples if q else 0} finished requests "
                          f"(fewer than {defaults.PROFILE_MIN_REQUESTS}), so a request may grow to max_model_len "
                          f"({h.worst_case_blocks_max_model_len} blocks){seen}; a raise becomes safe to size once "
                          f"{defaults.PROFILE_MIN_REQUESTS} requests have finished")
        return None
    if slots_bind and fits <= current:
        return Advice(setting, "keep", current, src, [low, high], margin,
                      f"slots bind, but the pool holds only {fits} requests of the observed worst case ({w} blocks): "
                      "more slots would preempt")
    if high < 2:
        # "max_num_seqs 1" serves nobody: the pool is too small for the workload's worst case.
        return kv_capacity(e, max(2, current or 2))
    if not slots_bind and current > high:
        return Advice(setting, "lower", current, src, [low, high], margin,
                      f"{current} slots exceed the {fits} worst-case requests the pool holds: above that vLLM preempts")
    if not slots_bind:
        return Advice(setting, "keep", current, src, [low, high], margin, "it is inside the safe range") \
            if current >= low else None
    if e.profile is not None and e.profile.stale:
        return None  # the workload changed under the profile: a raise sized on it is issue 11's raise before a storm
    if current >= high:
        return Advice(setting, "keep", current, src, [low, high], margin,
                      f"slots bind, but {current} slots are already {100 * current // max(fits, 1)} % of the {fits} "
                      f"requests of the observed worst case ({w} blocks) the pool holds, above the "
                      f"{int(100 * SHARE_HIGH)} % a raise may reach: more slots would preempt once requests reach it")
    # A raise is sized by finished requests of a workload that may change: it says what keeps it safe (issue 11's
    # storm followed a raise sized on the previous workload; once requests in flight outgrow the profile, the
    # raise is withdrawn above).
    capped_low, capped_high, notes = low, high, []
    # A raise is a step, not a jump to what a large pool would hold: at most double (other limits, e.g. the
    # step's token budget, latency and activation memory, bind before the pool on a large server), and never
    # above max_num_batched_tokens: vLLM refuses max_num_batched_tokens < max_num_seqs
    # (SchedulerConfig._verify_args, vllm/config/scheduler.py @0.32.0).
    if capped_high > 2 * current:
        capped_low, capped_high = min(low, 2 * current), 2 * current
        notes.append(f"at most doubled per step: the pool alone would hold {low}-{high}, but latency, activation "
                     "memory and the token budget bind first; raise again once it holds")
    budget_tokens = e.budget.smallest if e.budget is not None else value(e.config.max_num_batched_tokens)
    if budget_tokens is not None and capped_high > budget_tokens:
        capped_high = budget_tokens
        capped_low = min(capped_low, capped_high)
        notes.append(f"vLLM requires max_num_batched_tokens ({budget_tokens}) >= max_num_seqs")
    if capped_high <= current:
        return Advice(setting, "keep", current, src, [low, high], margin,
                      "slots bind, but " + "; ".join(notes))
    return Advice(setting, "raise", current, src, [capped_low, capped_high],
                  margin + ("; " + "; ".join(notes) if notes else ""),
                  f"slots bind while the pool holds {fits} requests of the observed worst case ({w} blocks)",
                  condition=_safe_if(e, advisable))


def _safe_if(e: EngineReport, advisable: bool | None) -> str:
    """What keeps a raise safe, when the profile is less than a whole window of current evidence."""
    q = e.profile
    if advisable or (q is not None and q.advisable):
        return ""
    w = e.headroom.worst_case_blocks_profile
    cond = f"safe while requests stay within {w} blocks each"
    if e.gauges_only:
        return (cond + ": one observation's histograms count every request since the server started, of unknown "
                "age; watch it with `serve` for a whole profile window before a larger raise")
    if q is None:
        return cond
    if q.samples < defaults.RECOMMEND_MIN_REQUESTS:
        span = "" if q.span is None else f" over {q.span:.0f} s"
        return cond + f": the profile has {q.samples} finished requests{span} (fewer than " \
            f"{defaults.RECOMMEND_MIN_REQUESTS})"
    if not q.covers_window:
        return cond + f": the profile covers {q.span or 0:.0f} s of its {q.window or 0:.0f} s window"
    return cond


def max_model_len_over_pool(e: EngineReport) -> Advice | None:
    """max_model_len longer than the whole pool: one such request can never be admitted."""
    h = e.headroom
    length = value(e.config.max_model_len)
    w_max = h.worst_case_blocks_max_model_len
    if length is None or w_max is None or w_max <= h.kv_capacity_blocks:
        return None
    limit = h.kv_capacity_blocks * h.block_size_tokens
    return Advice("max_model_len", "lower", length, _source(e, "max_model_len"), f"<= {limit:,}",
                  "vLLM >= 0.19 can instead admit it chunk by chunk with --no-scheduler-reserve-full-isl, but it "
                  "still cannot grow beyond the pool",
                  f"max concurrency at max_model_len is {h.kv_capacity_blocks / w_max:.2f} (< 1): a prompt longer "
                  f"than the pool's {limit:,} tokens waits at the head of the queue forever and blocks every "
                  "request behind it")


def budget(e: EngineReport) -> list[Advice]:
    """Actions for a queue held back by the step's token budget."""
    b = e.budget
    if b is None:
        return []
    if b.max_num_batched_tokens is None:
        return [_state_budget(e)]
    prompt = e.prompt.tokens if e.prompt else None
    target = f">= {max(prompt or 0, 2 * b.max_num_batched_tokens):,}"
    return [
        Advice("max_num_batched_tokens", "raise", b.max_num_batched_tokens, b.source, target,
               "each step then takes longer (inter-token latency of running requests rises)",
               "running prefills use up the step's token budget, so waiting requests are not admitted although "
               "slots and blocks are free"),
        Advice("long_prefill_token_threshold", "check", None, None, None, "",
               "--long-prefill-token-threshold caps one request's share of a step so several prompts prefill "
               "together (--max-num-partial-prefills exists only on V0, <= 0.10); for long prompts at volume, "
               "disaggregated prefill moves prefill off the decode engine"),
    ]


def advise(e: EngineReport) -> list[Advice]:
    """Every advice for one engine, most useful first, for what its judgement says binds now."""
    out: list[Advice] = []
    too_long = max_model_len_over_pool(e)
    if too_long is not None:
        out.append(too_long)
    limit = e.binding_limit
    inputs = {c.input for c in e.decided_by}
    if limit is Limit.TOKEN_BUDGET:
        out += budget(e)
    elif "max_num_batched_tokens" in inputs:
        out.append(_state_budget(e))
    seqs = max_num_seqs(e)
    # More KV capacity is advice for a memory limit, or risk advice while nothing waits; never beside another
    # limit that binds now (slots, the budget) or an answer that cannot tell.
    memory = e.verdict in (Verdict.KV_FULL, Verdict.PREEMPTING, Verdict.OK, Verdict.LEAK, Verdict.NEVER_FITS)
    if seqs is not None and (limit is Limit.SLOTS or "max_num_seqs" in inputs or seqs.direction == "lower"
                             or (seqs.direction == "add" and memory)
                             or (seqs.direction == "state" and limit is Limit.UNDECIDED)):
        out.append(seqs)
    if (limit in (Limit.BLOCKS, Limit.HEAD_PROMPT) or e.verdict is Verdict.PREEMPTING) \
            and not any(a.setting == "kv_capacity" for a in out):
        more = kv_capacity(e, e.max_num_seqs if e.max_num_seqs is not None and not cap_guessed(e)
                           else max(e.running + e.waiting, 2))
        if more is not None:
            out.append(more)
    return out


def server_max_num_seqs(engines: list[EngineReport]) -> Advice | None:
    """max_num_seqs is one server setting (applied per data-parallel rank): one answer for all engines of a
    model. The most constrained engine decides: a lower (or more capacity) anywhere wins over a keep, and a raise
    only when every engine would raise, to the smallest range."""
    per = [(e, a) for e in engines if (a := max_num_seqs(e)) is not None]
    if not per:
        return None
    if len(per) == 1:
        return per[0][1]
    n = len(engines)
    down = [(e, a) for e, a in per if a.direction in ("lower", "add")]
    up = [(e, a) for e, a in per
          if a.direction == "raise" or (e.binding_limit is Limit.SLOTS and a.direction == "keep")]
    if down and up:
        # One cap, engines pulling both ways: a lower would contradict what binds on one, a raise preempt another.
        said = "; ".join(f"engine {e.engine}: {a.direction} ({a.reason})" for e, a in down + up)
        current = down[0][1].current if down[0][1].setting != "kv_capacity" else up[0][1].current
        return Advice(up[0][1].setting, "check", current, up[0][1].current_source, None, "",
                      f"one setting for the {n} data-parallel engines, and they disagree: {said}; the engines carry "
                      "different loads, so balance them (the router in front of them) before changing the shared cap")
    order = {"add": 0, "lower": 1, "state": 2, "check": 2, "keep": 3, "raise": 4}
    e, a = min(per, key=lambda x: (order.get(x[1].direction, 2),
                                   x[1].target[1] if isinstance(x[1].target, list) else 0))
    if a.direction == "raise" and not all(x.direction == "raise" for _e, x in per):
        a = next(x for _e, x in per if x.direction != "raise")
    return Advice(a.setting, a.direction, a.current, a.current_source, a.target, a.margin,
                  f"one setting for the {n} data-parallel engines, engine {e.engine} binds: {a.reason}")


def advise_server(e: EngineReport, engines: list[EngineReport]) -> list[Advice]:
    """The advice of one engine of a server with several (data parallel): the max_num_seqs advice is the
    server's. Reads each engine's own advice (`EngineReport.advice`) and judgement, never re-judges."""
    own = list(e.advice)
    peers = [x for x in engines if x.model_name == e.model_name]
    if len(peers) < 2:
        return own
    server = server_max_num_seqs(peers)
    caps = ("max_num_seqs", "max_num_active_seqs")  # the slot cap's setting (EngineReport.cap_setting)
    rest = [a for a in own if a.setting not in caps]
    if server is None or server.setting not in caps:
        return rest
    return [server, *rest]
