"""Why requests wait: one judgement per engine and scrape, from derived numbers, their inputs' provenance and what
earlier scrapes showed.

`classify` is a pure function of one observation plus the few facts history supplies (did preemptions rise
lately, since when has the engine made no progress, what did the previous scrape show); `Tracker` keeps that
history per engine, holds the false-full flag, and checks the gauges against the counters.

What binds now is what vLLM's scheduler checks at its next step (vllm/v1/core/sched/scheduler.py @0.32.0):
a slot (`len(self.running) >= max_num_running_reqs: break`), the head's whole prompt in free blocks
(`allocate_slots(..., full_sequence_must_fit=...)` returns None: `break`), the token budget (`while token_budget >
0`), a skipped (deferred) request, a running request's next block (preemption). Risk (running requests that would
outgrow the pool at the profile's or at max_model_len's worst case) is reported beside it and never changes it.

The next step admits min(free slots, free blocks // the head's blocks) of the queue: when the queue is larger, the
limit that runs out first binds, whether running equals max_num_seqs or a few requests finished since the last
step (a cap met within one step's turnover counts as met). A conclusion may rest on an input nobody stated
(max_num_seqs inferred or unknown, max_num_batched_tokens assumed) only if it holds for every value that input
may have; otherwise the judgement is `undecided` and `decided_by` lists what each value would mean.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

from ..core import defaults
from ..core.records import quick_init
from ..engines.base import Candidate
from . import catalogue, derive
from .catalogue import Limit as Limit
from .catalogue import Verdict as Verdict
from .derive import Pool

CEILING_WINDOW = defaults.CEILING_WINDOW  # seconds of running counts that stand in for an unknown max_num_seqs

# Verdicts in which requests wait although the pool has room (the panel looks fine, the queue grows), and those a
# first look at a wait beside room keeps from the previous scrape (preempting is not kept: it holds only on its own
# evidence, the counter or the gauges): the catalogue's families.
FALSE_FULL_VERDICTS = catalogue.FALSE_FULL_VERDICTS
_WAITING_VERDICTS = catalogue.WAITING_VERDICTS
# kv_role values of a P/D instance that keeps a finished prefill's blocks until its decode side has read them
# (NIXL `delay_free_blocks`, vllm/v1/core/sched/scheduler.py:2714-2745 @0.32.0).
PRODUCER_ROLES = frozenset({"kv_producer", "kv_both"})
# Generated tokens per engine step at or above which the steps since the last scrape decoded several requests at
# once: with the gauges reading idle at the scrape, a load the gauges did not show.
CONCURRENT = 2.0
# Little's law (in flight = arrival rate x time in the system): L, the requests in flight on average over an interval
# between two scrapes whose gauges both read idle, is the summed e2e latency of the requests that finished in it
# over its length (with honest gauges such a request started after the scrape before it, else that scrape saw it, so
# its whole latency lies inside the interval). An honest reading is idle with odds of about e^-L (Poisson), so a run
# of idle readings whose L add up to `IDLE_EVIDENCE` has odds of e^-12 (about 6 in a million): the gauges are stale.
# The first interval after a busy reading may hold a drain and is not counted.
IDLE_EVIDENCE = 12.0
# s of scrapes with no step, no generated token and no finished request after which idle gauges are believed again:
# an engine serving load steps many times a second (a decode step takes milliseconds; vLLM 0.32.0's Rust frontend
# in tests/fixtures/vllm-0.32.0-rust/*-unpinned steps 300-500 times a second under load), so half a second of none
# is an engine with nothing to do. Scrapes a few milliseconds apart add almost nothing.
QUIET_IDLE = 0.5


@dataclass(frozen=True)
class Thresholds:
    """Verdict thresholds; defaults in `core.defaults`. Durations in seconds, usage a fraction."""

    full_usage: float = defaults.FULL_USAGE  # at or above: waiting is judged KV-bound; below: false-full candidate
    false_full_hold: float = defaults.FALSE_FULL_HOLD
    stuck_after: float = defaults.STUCK_AFTER
    leak_after: float = defaults.LEAK_AFTER
    preempt_window: float = defaults.PREEMPT_WINDOW


@quick_init
@dataclass(frozen=True)
class Observation:
    """One engine at one scrape, as the verdict sees it."""

    running: int
    waiting: int
    deferred: int | None  # waiting requests by reason "deferred" (vLLM ≥ 0.20), else None
    usage: float
    max_num_seqs: int | None  # stated, or inferred (max_num_seqs_inferred) from the running ceiling
    awake: bool | None  # vLLM's sleep state (None: the release exports none)
    headroom: Pool  # the pool's figures (those that do not depend on max_num_seqs)
    largest_prompt_blocks: int | None = None  # blocks of the longest prompt vLLM has finished (bucket bound)
    finished_total: float | None = None  # requests finished since start (count of the prompt histogram)
    max_model_len_exceeds_pool: bool = False  # one request of max_model_len needs more blocks than the pool
    max_num_seqs_inferred: bool = False
    memory_pressure: bool = False  # a risk: oversubscribed (safe headroom < 0) or requests beyond the profile
    requests_grow: bool = True  # running requests are expected to need more blocks than they hold on average
    thin_profile: bool = False  # the worst case is taken at max_model_len for want of finished requests
    # The values max_num_seqs may have when nobody states it (vLLM's defaults per device class), ascending.
    max_num_seqs_candidates: tuple[Candidate, ...] = ()
    # max_num_batched_tokens: the stated value (one candidate), or vLLM's defaults when assumed; () for V0.
    budget_candidates: tuple[Candidate, ...] = ()
    budget_stated: bool = False
    chunked_prefill: bool = True  # vLLM V1's default; False only where the command line says so
    prompt_tokens: int | None = None  # one typical (median) prefill's uncached tokens: the token budget's use
    preemptions_total: float | None = None  # since start (one-shot: the only preemption evidence)
    profile_backed: bool = True  # the head's size comes from finished requests (not the in-flight floor)
    stale_profile: bool = False  # requests in flight already hold more blocks than the profile's worst case
    profile_recent: bool = True  # the head's size comes from requests finished within the window (not lifetime)
    kv_role: str | None = None  # --kv-transfer-config's kv_role (P/D)
    # The engine exports a KV connector's own counters (NIXL's) and no command line says it has none: it may take
    # part in P/D whatever its unstated role (vllm-rs exports NIXL's series without a connector)
    connector_series: bool = False
    # Seconds a P/D producer holds a finished prefill's blocks at most (its kv_lease_duration); None: unknown
    producer_hold_limit: float | None = None
    # One observation of a server whose gauges may read 0 under load (vLLM 0.32's Rust frontend): idle gauges
    # cannot be checked against counters, so they do not show an idle server
    idle_gauges_unverifiable: bool = False
    # Of the requests finished since the last scrape: (how many lived longer than the interval, their summed
    # latency in seconds, the interval in seconds); None without vLLM's e2e latency histogram (sidecar only).
    latency_since: tuple[int, float, float] | None = None
    unfinished_tokens: float | None = None  # tokens generated since the last scrape by requests not finished yet
    tokens_per_step: float | None = None  # tokens the engine scheduled per step lately (sidecar only; inf: all prefill)
    finished_any: float | None = None  # requests finished since start, aborted ones included where vLLM counts them
    # The waiting requests vLLM's LoRA cap lets through at the next step, (fewest, most) (`lora_admissible`); None:
    # LoRA off, or the cap holds no waiting request back.
    lora_admits: tuple[int, int] | None = None
    # Tokens the engine scheduled per step over the interval since the last scrape alone (sidecar only; inf: all
    # prefill): whether those steps used the token budget. With `uncounted_prefill`, a lower bound: the tokens the
    # blocks' growth holds, less one partly filled block per running request.
    step_tokens_since: float | None = None
    # The blocks in use grew since the last scrape by more than the tokens counted since then fill (less one partly
    # filled block per running request): a prefill under way that vLLM counts only when it completes.
    uncounted_prefill: bool = False
    sleep_mode: bool | None = None  # --enable-sleep-mode (None: not known); with `awake` None sleep may explain a stall
    # The head's size is known only as a range, from the typical (median) prompt of the profile to its quantile
    # (the conservative size `headroom.prompt_blocks` and the KV room are taken at): the quantile's uncached prompt
    # tokens (what it would take of the token budget) and how many heads of the typical prompt the free blocks
    # admit. None: no profile of finished requests (one size only).
    head_tokens: int | None = None
    kv_room_typical: int | None = None


@quick_init
@dataclass(frozen=True)
class History:
    """What earlier scrapes say; in one-shot diagnosis every field is None/False (gauges only)."""

    preempted_recently: bool = False
    no_progress_for: float | None = None  # seconds without a new engine step
    waiting_on_previous: bool | None = None  # None: no previous scrape
    running_ceiling: int | None = None  # highest running seen lately, stands in for an unknown max_num_seqs
    idle_with_blocks_for: float | None = None
    previous: Verdict | None = None  # the verdict of the previous scrape; None in one-shot diagnosis
    head_of_line_before: bool = False  # the previous scrape showed room for the head, and none was admitted since
    preemption_inferred: bool = False  # gauges show a preemption the lagging counter has not counted yet
    preempted_now: bool = False  # the counter rose at this scrape
    one_shot: bool = False  # a single observation (diagnose): nothing can be confirmed by a second look
    pool_empty_before: bool = False  # the previous scrape also showed nothing running, requests waiting
    # The previous scrape counted every waiting request deferred and the count fell since: skipped requests are
    # being admitted (vLLM counts a request deferred from its first skip until it is admitted)
    deferred_fell: bool = False


@dataclass(frozen=True)
class Case:
    """One value an unknown input may have, and what would bind if it has it (`undecided` answers)."""

    input: str  # "max_num_seqs" | "max_num_batched_tokens"
    value: int
    rule: str  # where the value comes from: the running count, a default's device class, ...
    limit: Limit  # what binds then (Limit.NONE: the next step admits the whole queue)


@quick_init
@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    binds: Limit = Limit.NONE  # what binds now (the answer's binding_limit)
    slots_inferred: bool = False  # slots_full with max_num_seqs inferred (the running plateau)
    head_of_line_candidate: bool = False  # room by the profile's measure, yet waiting
    preemption_inferred: bool = False  # preempting judged from the gauges, the counter has not risen yet
    suspected: bool = False  # one observation only: leak / never_fits / preemption need a second look
    first_look: bool = False  # the frame can be transient (between two engine steps); a second look decides
    decided_by: tuple[Case, ...] = ()  # undecided: what each value of the unknown input would mean
    admits: int | None = None  # requests the next step can admit (free slots and free blocks), when known
    producer_holding: bool = False  # a P/D producer keeps finished prefills' blocks for its decode side
    asleep_or_stuck: bool = False  # a stall that sleep may explain: the release exports no sleep state
    gauges_reliable: bool = True  # False: the gauges contradict the counters; judged from `judged_from`
    judged_from: float | None = None  # seconds since the consistent scrape this answer repeats (gauges unreliable)
    idle_unverified: bool = False  # idle gauges nothing shows idle (`Observation.idle_gauges_unverifiable`)


def pool_exhausted(o: Observation) -> bool:
    """No free block while requests that still grow decode and others wait: vLLM's next block allocation
    preempts the newest running request (`_preempt_request`, vllm/v1/core/sched/scheduler.py @0.32.0). A pool
    full of requests that will not grow (a shared cached prefix, short outputs) preempts nobody."""
    return o.waiting > 0 and o.running > 0 and o.headroom.kv_free_blocks == 0 and o.requests_grow


def pool_tight(o: Observation) -> bool:
    """The free blocks may not cover the next step's allocations: the queue head does not fit, or fewer blocks are
    free than every running request's next block plus one prefill chunk of the token budget (blocks_for_tokens of
    the largest budget it may have; none when unknown). vLLM preempts only when `allocate_slots` fails for a
    running request (vllm/v1/core/sched/scheduler.py:253-280 @0.10.2, :778-836 @0.32.0), a decode asking at most
    one new block per step: a preemption seconds ago beside free blocks that cover all that says the storm has
    passed, and what binds now is judged as on any other scrape (engine truth: tests/fixtures/vllm-0.10.2/
    prod-mixed, 472-1,029 blocks free for 150 running 4-10 s after the last preemption, the budget binding)."""
    hr = o.headroom
    if not hr.head_fits:
        return True
    chunk = max((c.value for c in o.budget_candidates), default=0)
    return hr.kv_free_blocks < o.running + derive.blocks_for_tokens(chunk, hr.block_size_tokens)


def suspected_preemption(o: Observation) -> bool:
    """One observation, requests waiting, vLLM counted preemptions since it started, the running requests leave
    no room for one more of the profile's worst case while the free blocks are within two such requests of
    running out, or they already hold more than it (a workload the profile has not seen). One frame cannot date the
    preemptions; the sidecar sees them as the counter rises."""
    if not o.preemptions_total or o.waiting <= 0 or o.running <= 0:
        return False
    hr = o.headroom
    # vLLM preempts only when allocate_slots fails for a running request (vllm/v1/core/sched/scheduler.py:253-280
    # @0.10.2, :778-836 @0.32.0): free blocks that still hold two more worst-case requests leave the running ones
    # room to grow for many steps, whatever their count says at the worst case (that is risk: safe headroom).
    # Engine truth (tests/fixtures/SCORE.md, prod-burst / prod-mixed): 256 short requests beside 16,000 free
    # blocks and a profile worst case of 1,024 preempted nothing.
    # ... and within what the next step may ask of them (`pool_tight`: every running request's next block and a
    # prefill chunk): 472-771 free blocks beside 144-173 running preempted nothing (prod-mixed, 0.10.2).
    near = hr.kv_free_blocks < 2 * hr.worst_case_blocks_profile and pool_tight(o)
    no_room = o.profile_backed and not o.thin_profile and (o.running + 1) * hr.worst_case_blocks_profile > \
        hr.kv_capacity_blocks
    return (near and no_room) or o.stale_profile


def next_step(free_slots: int | None, kv_room: int, waiting: int, budget_room: float | None = None,
              budget_first: bool = False) -> Limit:
    """What binds the queue at the next engine step: it admits min(free slots, requests whose prompt fits the
    free blocks, prefills the step's token budget has room for); a queue no larger is admitted (NONE), else the
    limit that runs out first binds (slots, then blocks, on a tie: a free block or budget without a slot admits
    nobody). `free_slots` None: no slot cap (an unknown one taken as large); `budget_room` None: not modelled.
    `budget_first`: the budget's room counts a last partial chunk (chunked prefill, `derive.budget_heads`), which
    leaves no budget: on a tie the scan's first test, `while token_budget > 0` (vllm/v1/core/sched/scheduler.py:334
    @0.10.2, :912 @0.32.0), ends it before the slot test and allocate_slots."""
    big = waiting + kv_room + 1
    slots = free_slots if free_slots is not None else big
    budget = budget_room if budget_room is not None else float(big)
    if waiting <= min(slots, kv_room, budget):
        return Limit.NONE
    if budget_first and budget <= min(slots, kv_room):
        return Limit.TOKEN_BUDGET
    if slots <= kv_room and slots <= budget:
        return Limit.SLOTS
    return Limit.BLOCKS if kv_room <= budget else Limit.TOKEN_BUDGET


def default_rule(c: Candidate) -> str:
    """A default's candidate as a case's rule: `vLLM's default on CPU (for one rank: ...)`."""
    return f"vLLM's default on {c.rule}"


def classify(o: Observation, h: History, t: Thresholds) -> Judgement:
    """The judgement for one observation."""
    hr = o.headroom
    if o.awake is False:
        # Put to sleep on purpose (POST /sleep with --enable-sleep-mode): it steps no more until /wake_up.
        return Judgement(Verdict.SLEEPING, Limit.SLEEP)
    # vLLM 0.32.0 counts a preemption when the preempted request's next output is processed (the PREEMPTED
    # event rides on it: vllm/v1/metrics/stats.py `update_from_events`), one or more scrapes late: the
    # gauges (running fell, waiting rose, nothing finished, the pool full) show it first.
    # Within the window after a rise, preempting holds while requests wait and the pool is still tight: free
    # blocks that cover every running request's next block and a prefill chunk say the storm has passed, and what
    # binds now is judged as on any other scrape (`pool_tight`).
    # A rise with nothing waiting beside free blocks that cover the next step (V1, whose budget sizes the chunk
    # `pool_tight` counts): the preempted requests were admitted again since (V1 counts a preemption when the
    # request's next output is processed, scrapes late): nothing is held back now (engine truth: 0.32.0
    # prod-sleep, 63 running beside 19,015 free blocks; 0.10.2 prod-kv, 20 running beside 1,975).
    readmitted = o.waiting <= 0 and bool(o.budget_candidates) and not pool_tight(o)
    if (h.preempted_now and not readmitted) or (h.preempted_recently and o.waiting > 0 and pool_tight(o)):
        return Judgement(Verdict.PREEMPTING, Limit.BLOCKS)
    if h.preemption_inferred or pool_exhausted(o):
        return Judgement(Verdict.PREEMPTING, Limit.BLOCKS, preemption_inferred=True, suspected=h.one_shot)
    if o.idle_gauges_unverifiable and o.running == 0 and o.waiting == 0 and hr.kv_used_blocks == 0:
        # vLLM 0.32.0's Rust frontend reads 0 on most scrapes under load (tests/fixtures/vllm-0.32.0-rust,
        # false-full-unpinned: 47 of 47 loaded frames): such a reading proves nothing unless the counters show
        # no step since the last scrape; `serve` checks the gauges against the token counters across scrapes.
        return Judgement(Verdict.UNDECIDED, Limit.UNDECIDED, idle_unverified=True)
    if o.waiting <= 0:
        idle_with_blocks = hr.kv_used_blocks > 0 and o.running == 0
        producer = o.kv_role in PRODUCER_ROLES or (o.kv_role is None and o.connector_series)
        # A hold longer than the producer's lease (plus the leak hold) is no longer explained by the decode side.
        past_lease = (o.producer_hold_limit is not None and h.idle_with_blocks_for is not None
                      and h.idle_with_blocks_for >= o.producer_hold_limit + t.leak_after)
        leak_due = idle_with_blocks and (h.one_shot or (h.idle_with_blocks_for is not None
                                                        and h.idle_with_blocks_for >= t.leak_after))
        if idle_with_blocks and producer and not past_lease:
            # A P/D prefill instance keeps finished prefills' blocks until its decode side reads them (a lease,
            # `kv_lease_duration` renewed by heartbeats in 0.32.0; VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s, before):
            # held on purpose, not leaked. With no role stated, a connector's own counters (vLLM exports
            # NIXL's only with a NIXL connector; vllm-rs always) say the instance may be that producer: once a
            # leak would be said, the role decides it, and the answer is undecided.
            if o.kv_role is None and leak_due:
                return Judgement(Verdict.UNDECIDED, Limit.UNDECIDED, producer_holding=True, first_look=not h.one_shot)
            return Judgement(Verdict.OK, Limit.NONE, producer_holding=True)
        if leak_due:
            return Judgement(Verdict.LEAK, Limit.NONE, suspected=h.one_shot)
        return Judgement(Verdict.OK, Limit.NONE)
    stalled = h.no_progress_for is not None and h.no_progress_for >= t.stuck_after
    # A release without a sleep state (vLLM 0.10.2 exports no engine_sleep_state) and sleep mode on or not known:
    # an engine put to sleep (POST /sleep) makes no step either, with its requests kept (tests/fixtures/vllm-0.32.0/
    # prod-sleep: 63 running while asleep). GET /is_sleeping decides; a restart is advised for neither.
    sleep_may_explain = o.awake is None and o.sleep_mode is not False
    if stalled and o.running > 0:
        if sleep_may_explain:
            return _asleep_or_stuck(h)
        # Running requests make no step: nothing but the engine explains that.
        return Judgement(Verdict.STUCK, Limit.ENGINE)
    if o.deferred is not None and o.deferred > 0 and o.deferred >= o.waiting and not h.deferred_fell:
        # Every waiting request is deferred (LoRA, grammar, KV transfer): a free slot would not admit any of them.
        # An engine with nothing else to do makes no step meanwhile: that is the deferral, not a hang. vLLM counts
        # a request deferred from its first skip until it is admitted (`skip_request` adds it to
        # `deferred_waiting`, discarded only at admission: vllm/v1/core/sched/scheduler.py:903-910, :1344
        # @0.32.0), so a count that fell while it covered the whole queue says skipped requests are being admitted
        # (the adapter they waited for runs now): the others are judged by what else binds. The next step admits
        # at most the requests vLLM does not count deferred.
        return Judgement(Verdict.DEFERRED, Limit.DEFERRAL, admits=max(0, o.waiting - o.deferred))
    if o.running == 0 and hr.kv_used_blocks == 0 and o.max_model_len_exceeds_pool:
        # Nothing runs, the whole pool is free, yet the head is not admitted: it needs more than the pool
        # (possible only when max_model_len exceeds the pool). vLLM >= 0.19 admits the head only if its whole
        # uncached prompt fits (`allocate_slots(..., full_sequence_must_fit=self.scheduler_reserve_full_isl)`,
        # vllm/v1/core/sched/scheduler.py @0.32.0) and stops at it (FCFS), with no rejection (vllm#39734): the
        # engine then makes no step, which is this, not a hang. Between steps this can last one scrape, so the
        # sidecar looks twice. vLLM 0.32.0 itself refuses to start a full-attention model whose max_model_len
        # exceeds the pool (vllm/v1/core/kv_cache_utils.py); hybrid and sliding-window paths and other releases start.
        if h.one_shot or h.pool_empty_before:
            return Judgement(Verdict.NEVER_FITS, Limit.POOL_SIZE, suspected=h.one_shot)
        return Judgement(Verdict.TRANSIENT, Limit.UNDECIDED, first_look=True)
    if h.one_shot and suspected_preemption(o):
        return Judgement(Verdict.PREEMPTING, Limit.BLOCKS, suspected=True)
    # What vLLM's scheduler checks, not the panel: a pool 90 % used whose free blocks still hold the head binds no
    # more than one 20 % used (the usage threshold only decides whether the panel hides the wait: false-full).
    head_fits = hr.head_fits  # free >= the head's blocks, and the watermark beside running requests
    kv_room = hr.kv_admission_headroom_requests  # heads the free blocks admit (the watermark kept once)
    if not head_fits and hr.head_may_fit and o.profile_backed:
        return _cached_prefix(o, h, t)
    cap = o.max_num_seqs
    if cap is None and o.running > 0 and not h.one_shot:
        # max_num_seqs unknown: a running count pinned at its recent maximum while requests waited, or free blocks
        # that would hold even the longest prompt vLLM has seen, point at the slot cap. One observation cannot
        # infer a cap: its running count may be any moment of a ramp or a preemption.
        plateau = h.running_ceiling is not None and o.running >= h.running_ceiling and bool(h.waiting_on_previous)
        roomy = o.largest_prompt_blocks is not None and o.largest_prompt_blocks <= hr.kv_free_blocks
        if plateau or roomy:
            o = replace(o, max_num_seqs=o.running, max_num_seqs_inferred=True)
            cap = o.running
    if cap is not None and o.running >= cap:
        if not head_fits and o.profile_backed and not o.thin_profile and o.profile_recent:
            # Slots taken and, by requests finished within the window, the head would not fit either: a free slot
            # would not admit it; "a slot, not memory" would be false. Never on lifetime histograms alone (a
            # one-shot, or a window in which nothing finished): they may hold another workload's prompts, and the
            # slots bind for certain (a real 0.32.0 slot-bound probe after 4,000-token prompts was said kv_full
            # with 90 free blocks and a 1-block head).
            return Judgement(Verdict.KV_FULL, Limit.HEAD_PROMPT)
        return _slots(o, h, 0, kv_room, o.budget_candidates or (None,))
    if not head_fits and o.profile_backed:
        return Judgement(Verdict.KV_FULL, Limit.HEAD_PROMPT, admits=0)
    if not head_fits:
        # No finished request shows the head's size: the blocks requests in flight hold each exceed the free ones,
        # but the head may be smaller. One observation cannot tell; a second look with nothing admitted can.
        if not h.one_shot and h.head_of_line_before:
            return Judgement(Verdict.HEAD_OF_LINE, Limit.HEAD_PROMPT, head_of_line_candidate=True)
        if h.one_shot:
            # Not the moment between two steps (a fresh reviewer: 0.32.0 prod-preempt frame 52 without
            # max_model_len, 77 of 20,000 blocks free, 216 running, 40 waiting, a 93-block head: said `transient`):
            # a pool in use at `full_usage` binds whatever the head's size; otherwise the head's size decides.
            if o.usage >= t.full_usage:
                return Judgement(Verdict.KV_FULL, Limit.BLOCKS, head_of_line_candidate=True, admits=0)
            return _head_size_undecided(o, h, 0)
        return Judgement(Verdict.TRANSIENT, Limit.UNDECIDED, head_of_line_candidate=True, suspected=h.one_shot,
                         first_look=True)
    if stalled:
        if sleep_may_explain:  # (above): asleep or stuck, not told apart
            return _asleep_or_stuck(h)
        # Nothing runs, the head fits, nothing is deferred, the engine is awake, yet it makes no step.
        return Judgement(Verdict.STUCK, Limit.ENGINE)
    budgets: tuple[Candidate | None, ...] = o.budget_candidates or (None,)
    if cap is not None:
        free_slots = cap - o.running
        outs = {c: step_limit(o, free_slots, kv_room, c) for c in budgets}
        limit = resolve_budget(outs)
        by_size = [x for c in budgets for x in head_size_cases(o, free_slots, kv_room, c)]
        if by_size and limit is not Limit.SLOTS and o.lora_admits is None:
            # The head's size decides, and nothing seen tells it (the sidecar reads the steps' budget use).
            if not h.one_shot and not h.waiting_on_previous and by_size[0].limit is Limit.NONE:
                # A queue the last scrape did not show, admitted whole at the typical size, and the steps since
                # did not spend the budget: the sidecar's first look, as for any queue beside room; the next
                # scrape tells (engine truth: vllm-0.32.0/prod-mixed frames 14 and 29, 3 and 2 requests that
                # appeared beside 28 and 71 running, all admitted at the next step).
                return Judgement(Verdict.TRANSIENT, Limit.UNDECIDED, head_of_line_candidate=True, first_look=True,
                                 decided_by=tuple(by_size[:2]), admits=kv_room)
            return _undecided(h, by_size[:2], kv_room)
        if o.lora_admits is not None:
            lora = _lora(o, h, free_slots, kv_room, budgets, limit)
            if lora is not None:
                return lora
        if limit is Limit.SLOTS:
            return _slots(o, h, free_slots, kv_room, budgets)
        if limit is Limit.TOKEN_BUDGET:
            return Judgement(Verdict.BUDGET_FULL, Limit.TOKEN_BUDGET, admits=_admits(o, free_slots, kv_room, budgets))
        if limit is None:
            return _undecided(h, [Case("max_num_batched_tokens", c.value, default_rule(c), lim)
                                  for c, lim in outs.items() if c is not None], kv_room)
        return _room(o, h, limit, min(free_slots, kv_room))
    # max_num_seqs unknown: with it at the running count the slots bind; with vLLM's defaults the next step admits
    # what the free blocks (and the token budget) let in.
    # With nothing running no cap binds (vLLM's is at least 1): only the larger values are cases.
    cases = [Case("max_num_seqs", o.running, "the running count: vLLM never runs more than its cap", Limit.SLOTS)
             ] if o.running > 0 else []
    larger = [c for c in o.max_num_seqs_candidates if c.value > o.running] or [
        Candidate(o.running + o.waiting, "any cap above the running count and the queue")]
    by_budget: list[Case] = []
    for c in larger:
        outs = {b: step_limit(o, c.value - o.running, kv_room, b) for b in budgets}
        limit = resolve_budget(outs, strict=True)
        if limit is None:
            limit = Limit.UNDECIDED
            by_budget = [Case("max_num_batched_tokens", b.value, default_rule(b), lim) for b, lim in outs.items()
                         if b is not None]
        cases.append(Case("max_num_seqs", c.value, default_rule(c), limit))
    if o.prompt_tokens is None and o.head_tokens is not None and not o.profile_backed:
        # No finished request sizes the head, so the budget's share is not judged (`step_limit`); at the size the
        # requests in flight hold each, the budget may bind first: a case of what decides, never a verdict.
        sized = replace(o, prompt_tokens=o.head_tokens)
        room = larger[-1].value - o.running
        binds = [b for b in budgets if b is not None and step_limit(sized, room, kv_room, b) is Limit.TOKEN_BUDGET]
        if binds:
            by_budget.append(Case("request_tokens", o.head_tokens, "no finished request sizes the queue head: as "
                                  f"long as the requests in flight hold each, against a budget of {binds[-1].value} "
                                  f"({'stated' if o.budget_stated else default_rule(binds[-1])})",
                                  Limit.TOKEN_BUDGET))
    if not by_budget and {c.limit for c in cases} == {Limit.NONE}:
        # Nothing runs and every cap it may have admits the queue at the next step: the moment between two steps.
        return Judgement(Verdict.TRANSIENT, Limit.NONE, head_of_line_candidate=True, suspected=h.one_shot,
                         first_look=True, admits=kv_room)
    # Slots bind if the cap is the running count, and the queue goes in at the next step at every larger cap: the
    # cap decides, so the answer says so (undecided with its cases), never `transient` on one side of it.
    return replace(_undecided(h, cases + by_budget, kv_room), head_of_line_candidate=True)


def _cached_prefix(o: Observation, h: History, t: Thresholds) -> Judgement:
    """The head fits at the fewest blocks it may need and not at the most (`Pool.head_may_fit`): with prefix
    caching on, vLLM's per-step gate counts the step's chunk and the head's cached blocks that sit evictable in the
    free queue (`get_num_blocks_to_allocate` adds `num_evictable_computed_blocks`,
    vllm/v1/core/single_type_kv_cache_manager.py @0.10.2), a count no metric exports. The answer holds over the
    range or names what decides it: what binds with the head at its fewest blocks (`classify` on that reading)
    where the blocks bind there too, or the token budget leaves no room before any head is examined (the scan's
    `while token_budget > 0` ends the step first: vllm/v1/core/sched/scheduler.py:334 @0.10.2, :912 @0.32.0);
    otherwise undecided between that and the head's prompt (engine truth, tests/fixtures/vllm-0.10.2/prod-kv:
    the same 28k-token heads asked 304 and 573 blocks beside 262-791 free)."""
    hr = o.headroom
    need = hr.admission
    assert need is not None and need.least_blocks is not None  # head_may_fit
    if not h.one_shot and h.head_of_line_before and budget_used_since(o) is False:
        # The sidecar looked twice: since the last scrape the steps left budget (so they examined the head), nothing
        # was admitted and nothing finished: the head's cached blocks did not fit beside its chunk.
        return Judgement(Verdict.KV_FULL, Limit.HEAD_PROMPT, head_of_line_candidate=True, admits=0)
    if o.chunked_prefill and budget_used_since(o) is True:
        # The steps since the last scrape spent the budget: the scan's first test (`while token_budget > 0`)
        # ended them before any head's blocks were asked, whatever its cached prefix (engine truth,
        # tests/fixtures/vllm-0.10.2/prod-kv frame 137: the blocks grew by 12,800 tokens a step, none counted).
        return Judgement(Verdict.BUDGET_FULL, Limit.TOKEN_BUDGET, admits=0)
    least = replace(need, blocks=need.least_blocks + need.reserved_blocks, step_blocks=need.least_blocks,
                    least_blocks=None)
    room = derive.kv_admission_headroom(hr.kv_free_blocks, least.blocks, least.watermark_blocks, o.running)
    fits = replace(o, headroom=replace(hr, prompt_blocks=least.blocks, admission=least, head_admissible=True,
                                       kv_admission_headroom_requests=room))
    # Looking twice is judged here (above), with the steps' budget use: at its fewest blocks the head is not
    # concluded larger than they because it stood.
    j = classify(fits, replace(h, head_of_line_before=False), t)
    spent = o.chunked_prefill and bool(o.budget_candidates) and all(
        _taken(o) >= c.value for c in o.budget_candidates)
    if j.binds in (Limit.HEAD_PROMPT, Limit.BLOCKS) or (j.binds is Limit.TOKEN_BUDGET and spent):
        return j
    cached = need.blocks - need.reserved_blocks - need.least_blocks
    first = j.decided_by or (Case("head_cached_blocks", 0, f"none: its chunk alone, {need.least_blocks:,} blocks",
                                  j.binds),)
    return replace(_undecided(h, [*first, Case("head_cached_blocks", cached, "all of its prompt, as a request resumed "
                                               f"after a preemption: {need.blocks:,} blocks", Limit.HEAD_PROMPT)],
                              room), head_of_line_candidate=True)


def lora_admissible(max_lora: int | None, waiting_adapters: tuple[str, ...], running_adapters: tuple[str, ...],
                    waiting: int) -> tuple[int, int] | None:
    """How many of the `waiting` requests vLLM's LoRA cap lets through at the next step: (fewest, most); None when
    it holds none back (LoRA off, max_lora unknown, or every waiting adapter runs or can be loaded).

    vLLM skips a waiting request whose adapter is not among the step's adapters once they number max_loras
    (`len(scheduled_loras) == max_loras and lora_int_id not in scheduled_loras`: skip, and the scan goes on to
    the next request: vllm/v1/core/sched/scheduler.py:364-372 @0.10.2, :941-952 @0.32.0); the step's adapters
    start as the running requests' and grow by each admitted one (:320-326/:522-523 @0.10.2). The exposition (its
    LoRA info series, engines/vllm/metrics.py) names the adapters with requests waiting and running, not how many
    requests each has nor whether base-model requests wait: each adapter named has at least one. So: an adapter
    that runs lets
    at least one of its requests through, an adapter that can still be loaded too, and each adapter beyond
    max_loras holds at least one back."""
    if max_lora is None or waiting <= 0:
        return None
    running = set(running_adapters)
    names = tuple(dict.fromkeys(waiting_adapters))
    held = [a for a in names if a not in running]
    loadable = max(0, max_lora - len(running))
    if len(held) <= loadable:
        return None
    most = max(0, waiting - (len(held) - loadable))
    fewest = min(most, sum(1 for a in names if a in running) + loadable)
    return fewest, most


def budget_used_since(o: Observation) -> bool | None:
    """Whether the engine's steps since the last scrape used the token budget: on average they left no room for
    one more typical prefill (True), or did (False); None when unknown (one observation, no step counted, the
    budget unknown, the prompt unknown without chunked prefill, or the budget's possible values disagree). With
    chunked prefill the share of the budget spent decides, whatever the prompts' size (engine truth,
    tests/fixtures/vllm-0.10.2/prod-lora frame 4: 475 tokens a step of 8,192 before any request finished, 104 waiting
    requests skipped for the LoRA cap)."""
    spent = o.step_tokens_since
    if spent is None or not o.budget_candidates or (o.prompt_tokens is None and not o.chunked_prefill):
        return None
    if math.isinf(spent):
        return True
    # With chunked prefill a step with budget left admits the head with a partial chunk, so steps that average
    # within `BUDGET_SPENT_SHARE` of the budget spent it (the rest is the counters' lumpiness: prompt tokens count
    # when a prefill completes).
    prompt = o.prompt_tokens or 0  # read only without chunked prefill (checked above)
    used = {spent >= defaults.BUDGET_SPENT_SHARE * c.value if o.chunked_prefill else spent + prompt > c.value
            for c in o.budget_candidates}
    if o.uncounted_prefill and used != {True}:
        return None  # the steps spent at least `spent`, more than the counters show: only "spent" is known
    return used.pop() if len(used) == 1 else None


def _step_room(o: Observation, free_slots: int, kv_room: int, budget: Candidate | None) -> float | None:
    """Requests the next step could admit but for the LoRA cap: min(free slots, free blocks' heads, the token
    budget's prefills (`step_limit`'s)); None when the budget is known but not what a prefill takes of it."""
    room = float(min(free_slots, kv_room))
    saturated = o.tokens_per_step is not None and math.isinf(o.tokens_per_step)
    if budget is None:
        return room
    taken = _taken(o)
    if saturated or math.isinf(taken):
        return 0.0
    if o.prompt_tokens is None:
        return None
    return min(room, derive.budget_heads(budget.value, taken, o.prompt_tokens, o.chunked_prefill))


def _lora(o: Observation, h: History, free_slots: int, kv_room: int, budgets: tuple[Candidate | None, ...],
          other: Limit | None) -> Judgement | None:
    """The LoRA cap holds some waiting requests back (`o.lora_admits`): it binds when the requests it lets through
    are fewer than the next step could admit (every one admitted, the rest skipped: the scan ends on the queue, not
    the budget); None when another limit binds whatever their number. In between, what the exposition does not
    show decides (how many waiting requests ask for a running adapter or none): the sidecar reads it from the
    steps since its last scrape (the budget left room for another prefill while the queue stood: the deferral;
    used up: the other limit), one observation says it is undecided."""
    assert o.lora_admits is not None
    fewest, most = o.lora_admits
    rooms = [_step_room(o, free_slots, kv_room, b) for b in budgets]

    def binds(n: int) -> bool:  # surely: every room known and larger
        return all(r is not None and n < o.waiting and n < r for r in rooms)

    if binds(most):
        return Judgement(Verdict.DEFERRED, Limit.DEFERRAL, admits=most)
    if not any(fewest < o.waiting and (r is None or fewest < r) for r in rooms):
        return None
    used = budget_used_since(o) if h.waiting_on_previous else None
    if used is False:
        return Judgement(Verdict.DEFERRED, Limit.DEFERRAL, admits=fewest)
    if used is True:
        return None
    return _undecided(h, [Case("lora_admissible_requests", fewest, "the fewest the LoRA info allows: one for each "
                               "waiting adapter that runs or that max_lora still loads", Limit.DEFERRAL),
                          Case("lora_admissible_requests", most, "the most it allows: all but one for each adapter "
                               "held back", other or Limit.UNDECIDED)], kv_room)


def step_limit(o: Observation, free_slots: int | None, kv_room: int, budget: Candidate | None) -> Limit:
    """`next_step` with the token budget's admissions when the budget (`budget`) and a typical prompt are known:
    one typical prefill each of what the running requests leave of it, by what the engine scheduled per step
    lately (the sidecar: decodes and the running prefills' chunks) or, in one observation, their decode tokens.

    The head's size is a range (`Observation.head_tokens`, `kv_room_typical`): the limit is judged with one size
    on both sides, the typical prompt's and the quantile's (the same head takes the budget and the blocks: a
    long head that takes a whole step's budget binds the budget first, whatever the blocks). Where the two
    agree, that limit binds. Where they differ, the steps since the sidecar's last scrape may decide (they spent
    the budget: the budget binds); otherwise this returns the conservative reading (the blocks at the quantile's
    size, the budget at the typical prompt's), and `classify` answers undecided with `head_size_cases` (engine
    truth, tests/fixtures/SCORE.md: 0.32.0 prod-preempt, a lifetime profile of 36-token prompts and a 32k quantile
    while 2k prompts took the budget)."""
    saturated = o.tokens_per_step is not None and math.isinf(o.tokens_per_step)
    if budget is None or (o.prompt_tokens is None and not saturated):
        return next_step(free_slots, kv_room, o.waiting)
    taken = _taken(o)
    # All prefill lately (blocks grew, no step or token counted): the running prefills take the whole budget.
    room = 0.0 if math.isinf(taken) or o.prompt_tokens is None else derive.budget_heads(
        budget.value, taken, o.prompt_tokens, o.chunked_prefill)
    conservative = next_step(free_slots, kv_room, o.waiting, room, budget_first=o.chunked_prefill)
    sizes = _head_limits(o, free_slots, kv_room, budget, taken)
    if sizes is None:
        return conservative
    typical, large = sizes
    if typical is large:
        return typical
    if budget_used_since(o) and Limit.TOKEN_BUDGET in (typical, large):
        return Limit.TOKEN_BUDGET
    return conservative


def _taken(o: Observation) -> float:
    """Tokens of a step the running requests take before any waiting one: their decodes, or what the engine
    scheduled per step lately where the sidecar measured it (inf: all prefill)."""
    return float(o.running) if o.tokens_per_step is None else max(float(o.running), o.tokens_per_step)


def _head_limits(o: Observation, free_slots: int | None, kv_room: int, budget: Candidate,
                 taken: float) -> tuple[Limit, Limit] | None:
    """What binds with the queue head at one size on both sides of the budget and the blocks: (at the profile's
    typical prompt, at its quantile); None where the head has one size only (no profile of finished requests)."""
    if o.head_tokens is None or o.kv_room_typical is None or o.prompt_tokens is None:
        return None

    def room(tokens: int) -> float:
        return 0.0 if math.isinf(taken) else derive.budget_heads(budget.value, taken, tokens, o.chunked_prefill)

    return (next_step(free_slots, o.kv_room_typical, o.waiting, room(o.prompt_tokens), budget_first=o.chunked_prefill),
            next_step(free_slots, kv_room, o.waiting, room(o.head_tokens), budget_first=o.chunked_prefill))


def head_size_cases(o: Observation, free_slots: int, kv_room: int, budget: Candidate | None) -> list[Case]:
    """Where the queue head's size decides (`step_limit`'s two sizes disagree and no step since a last scrape shows
    the budget spent): a case per size, the typical prompt's and the quantile's; [] otherwise."""
    taken = _taken(o)
    sizes = None if budget is None or math.isinf(taken) else _head_limits(o, free_slots, kv_room, budget, taken)
    if sizes is None:
        return []
    typical, large = sizes
    if typical is large or (budget_used_since(o) and Limit.TOKEN_BUDGET in (typical, large)):
        return []  # one answer: both sizes agree, or the steps since the last scrape spent the budget
    assert o.prompt_tokens is not None and o.head_tokens is not None  # _head_limits gave two sizes
    return [Case("request_tokens", o.prompt_tokens, "the profile's typical prompt, uncached", typical),
            Case("request_tokens", o.head_tokens, "the profile's quantile, uncached", large)]


def resolve_budget(outs: dict[Candidate | None, Limit], strict: bool = False) -> Limit | None:
    """One limit over the values the token budget may have, or None when what binds depends on it: the same limit
    at every value; or the token budget at the small defaults and slots or blocks at the large ones, where those run
    out before the queue does whatever the budget (they bind regardless; the budget may bind first). `strict`: the
    answer is already a list of cases (max_num_seqs unknown), so a budget that may bind first is one of them (the
    loop's first test binds before the blocks: vllm/v1/core/sched/scheduler.py:334 @0.10.2, :912 @0.32.0)."""
    limits = set(outs.values())
    if len(limits) == 1:
        return next(iter(limits))
    if not strict and len(limits) == 2 and Limit.TOKEN_BUDGET in limits:
        other = next(iter(limits - {Limit.TOKEN_BUDGET}))
        if other in (Limit.SLOTS, Limit.BLOCKS):
            return other
    return None


def _admits(o: Observation, free_slots: int, kv_room: int, budgets: tuple[Candidate | None, ...]) -> int:
    rooms = [derive.budget_heads(b.value, o.running, o.prompt_tokens, o.chunked_prefill) for b in budgets
             if b is not None and o.prompt_tokens is not None]
    return min([free_slots, kv_room, *rooms])


def _undecided(h: History, cases: list[Case], kv_room: int) -> Judgement:
    return Judgement(Verdict.UNDECIDED, Limit.UNDECIDED, decided_by=tuple(cases), admits=kv_room,
                     first_look=not h.one_shot)


def _slots(o: Observation, h: History, free_slots: int, kv_room: int,
           budgets: tuple[Candidate | None, ...]) -> Judgement:
    """Slots bind: every slot taken, or the next step fills the few free ones (requests finished since the last
    step) and the rest of the queue waits. With max_num_seqs inferred this holds only if the token budget cannot
    explain the plateau over its range (prefills that take whole steps keep running low without any cap)."""
    if o.max_num_seqs_inferred:
        explains = [(b, lim) for b in budgets if b is not None
                    and (lim := step_limit(o, None, kv_room, b)) is Limit.TOKEN_BUDGET]
        if explains:
            cases = [Case("max_num_seqs", o.max_num_seqs or o.running,
                          "inferred: the highest running count while requests waited beside room", Limit.SLOTS)]
            cases += [Case("max_num_batched_tokens", b.value, "stated" if o.budget_stated else default_rule(b), lim)
                      for b, lim in explains]
            return _undecided(h, cases, kv_room)
    return Judgement(Verdict.SLOTS_FULL, Limit.SLOTS, slots_inferred=o.max_num_seqs_inferred,
                     admits=min(free_slots, kv_room))


def _room(o: Observation, h: History, limit: Limit, admits: int) -> Judgement:
    """The head fits and a slot is free: the next step admits `admits` requests. A queue no larger is admitted
    (the moment between two steps); a larger one leaves the rest waiting for blocks. The sidecar looks twice: if
    the previous scrape showed the same room and nothing was admitted or finished since, the head is larger than
    the profile's prompt (head-of-line)."""
    if not h.one_shot and h.head_of_line_before:
        return Judgement(Verdict.HEAD_OF_LINE, Limit.HEAD_PROMPT, head_of_line_candidate=True, admits=admits)
    if limit is Limit.BLOCKS and o.profile_backed:
        # The free blocks hold fewer of the profile's prompts than wait: the next step fills the pool.
        return Judgement(Verdict.KV_FULL, Limit.BLOCKS, head_of_line_candidate=True, admits=admits)
    if limit is Limit.BLOCKS and h.one_shot and o.waiting > admits:
        # The free blocks hold fewer heads than wait only at a size no finished request backs (what requests in
        # flight hold each): one observation cannot call that the moment between two steps. The head's size
        # decides (a fresh reviewer, vllm-0.32.0/head-of-line frame 12 with its flags: "the next step can admit 2"
        # of 7 waiting, said to be transient; the real head is 255 blocks).
        return _head_size_undecided(o, h, admits)
    return Judgement(Verdict.TRANSIENT, Limit.NONE, head_of_line_candidate=True, suspected=h.one_shot,
                     first_look=True, admits=admits)


def _asleep_or_stuck(h: History) -> Judgement:
    """A stall that sleep may explain (the release exports no sleep state): undecided, GET /is_sleeping decides."""
    return Judgement(Verdict.UNDECIDED, Limit.UNDECIDED, asleep_or_stuck=True, first_look=not h.one_shot)


def _head_size_undecided(o: Observation, h: History, admits: int) -> Judgement:
    """One observation whose free blocks hold fewer heads than wait at the size the headroom takes, a size no
    finished request backs: undecided between the pool binding (at that size) and the queue going in (at the size
    that lets the free blocks hold it all)."""
    hr = o.headroom
    bs = hr.block_size_tokens
    each = hr.kv_free_blocks // max(o.waiting, 1)
    if each < 1:  # not even one block for each waiting request: the pool binds whatever their size
        return Judgement(Verdict.KV_FULL, Limit.BLOCKS, head_of_line_candidate=True, admits=0)
    return _undecided(h, [
        Case("request_tokens", hr.prompt_blocks * bs, "the size the headroom takes, no finished request sizing it: "
             "what requests in flight hold each, else max_model_len", Limit.BLOCKS),
        Case("request_tokens", each * bs, f"or less: at most {each:,} blocks each, so the free blocks hold the whole "
             "queue", Limit.NONE)], admits)


def false_full_condition(o: Observation, verdict: Verdict, t: Thresholds) -> bool:
    """Waiting > 0 while u < threshold and the verdict says the pool is not what holds requests back.

    Risk never vetoes it: running requests that would outgrow the pool (safe headroom < 0) or that already hold more
    than the profile's worst case are reported as risk; what holds requests back now is the verdict's limit."""
    return o.waiting > 0 and o.usage < t.full_usage and verdict in FALSE_FULL_VERDICTS


def gauges_show_preemption(running: int, waiting: int, finished: float | None, prev_running: int | None,
                            prev_waiting: int | None, prev_finished: float | None) -> bool:
    """Running fell and waiting rose while no request finished: a running request went back to the queue.

    New arrivals raise waiting and finishes or aborts lower running, but only a preemption moves a request
    from running to waiting (vLLM 0.32.0 `_preempt_request` prepends it to the waiting queue)."""
    if prev_running is None or prev_waiting is None or finished is None or prev_finished is None:
        return False
    return running < prev_running and waiting > prev_waiting and finished == prev_finished


@quick_init
@dataclass(frozen=True)
class _Consistent:
    """The last scrape whose gauges agreed with the counters, and its judgement."""

    at: float
    running: int
    waiting: int
    finished: float | None
    judgement: Judgement


class Tracker:
    """History of one engine across scrapes."""

    def __init__(self, thresholds: Thresholds, one_shot: bool = False) -> None:
        self.t = thresholds
        self.one_shot = one_shot
        self._clear()

    def engine_still(self, progress: tuple[float | None, float | None]) -> bool:
        """The engine's step and generation counters are those of the last scrape: it made no step since. False on
        the first look, after a restart (a counter fell) and without the counters: nothing shows it still."""
        last = self._last_progress_value
        return last is not None and None not in progress and progress == last

    def _clear(self) -> None:
        self._last_preemptions: float | None = None
        self._last_preempt_rise: float | None = None
        self._last_counted_rise: float | None = None
        self._last_inferred: float | None = None
        self._last_progress_value: tuple[float | None, float | None] | None = None
        self._last_progress_at: float | None = None
        self._waiting_prev: bool | None = None
        self._prev: tuple[int, int, float | None] | None = None  # running, waiting, finished of the last scrape
        self._ceiling: deque[tuple[float, int]] = deque()  # (time, running), running decreasing: a sliding max
        self._caps: deque[tuple[float, int]] = deque()  # the same, only over frames that show the slot cap
        self._idle_since: float | None = None
        self._false_full_since: float | None = None
        self._bridged = False  # the hold was kept across one first look (transient/undecided) just now
        self._last_time: float | None = None
        self._previous: Verdict | None = None
        self._room_before = False
        self._pool_empty_before = False
        self._deferred_prev: tuple[int, int] | None = None  # (deferred, waiting) at the last scrape
        self._consistent: _Consistent | None = None
        self.preemptions_per_second: float | None = None
        self.seconds_without_progress = 0.0
        self._busy: deque[tuple[float, int]] = deque()  # (time, running) while requests waited: a sliding max
        self.busy_ceiling: int | None = None  # highest running seen while requests waited, over CEILING_WINDOW
        self.busy_frames = 0  # scrapes with requests waiting inside that window
        self.unreliable_scrapes = 0  # scrapes whose gauges contradicted the counters, since start (or a restart)
        self._last_gauges: tuple[int, int] | None = None  # running, waiting of the last scrape, consistent or not
        self._idle_evidence = 0.0  # the run of idle readings' summed L (requests in flight on average, Little)
        self._quiet = 0.0  # s of scrapes with idle gauges and no step, token or finished request (`QUIET_IDLE`)
        self._last_used: int | None = None  # blocks in use at the last scrape

    def restart_if_reset(self, o: Observation, preemptions_total: float | None,
                         progress: tuple[float | None, float | None]) -> bool:
        """Forget every counter-derived state when a counter fell: vLLM restarted (counters start at 0 again), so
        earlier preemptions, steps, running ceilings and finished counts say nothing about the new process."""
        def fell(new: float | None, old: float | None) -> bool:
            return new is not None and old is not None and new < old

        last_progress = self._last_progress_value or (None, None)
        prev_finished = self._prev[2] if self._prev is not None else None
        if not (fell(preemptions_total, self._last_preemptions) or fell(progress[0], last_progress[0])
                or fell(progress[1], last_progress[1]) or fell(o.finished_total, prev_finished)):
            return False
        self._clear()
        return True

    def _preempting(self, now: float, o: Observation, preemptions_total: float | None) -> tuple[bool, bool, bool]:
        """(counted rise now, inferred from the gauges now, within the preempt window) without folding."""
        rose = (preemptions_total is not None and self._last_preemptions is not None
                and preemptions_total > self._last_preemptions)
        prev = self._prev
        inferred = not rose and (pool_exhausted(o) or (prev is not None and gauges_show_preemption(
            o.running, o.waiting, o.finished_total, prev[0], prev[1], prev[2])))
        recent = self._last_preempt_rise is not None and now - self._last_preempt_rise <= self.t.preempt_window
        return rose, inferred, recent or rose or inferred

    def _finished_since(self, o: Observation) -> bool:
        prev = self._prev
        return (prev is not None and prev[2] is not None and o.finished_total is not None
                and o.finished_total > prev[2])

    def gauges_contradict_counters(self, o: Observation, progress: tuple[float | None, float | None]) -> bool:
        """The gauges say nothing is in flight (nothing running or waiting, no block used) while the engine's step
        or generation counters rose since the last scrape, and the counters show requests the gauges do not:
        - tokens were generated since the last scrape by requests that have not finished (vLLM's generation
          counter grew by more than the generated-length histogram's sum, which grows by a request's whole
          output when it finishes): they are in flight now;
        - requests that finished since the last scrape lived longer than the interval (the e2e latency
          histogram), more of them than that scrape's gauges showed: they were in flight then, unseen;
        - a run of idle readings over which the finished requests' latency puts so many in flight on average that
          honest gauges would have shown some (Little's law, `IDLE_EVIDENCE`), whether or not this interval's
          counters moved;
        - the requests the last consistent scrape showed have not all finished (aborted ones count where vLLM
          records them), and the steps since decoded `CONCURRENT` or more requests each on average.
        vLLM 0.32.0's Rust frontend reads 0 on most scrapes under load (reference section 12), on every scrape in
        the recording tests/fixtures/vllm-0.32.0-rust/false-full-unpinned, and counts tokens only when a request
        finishes. A real drain finishes its requests; a burst that came and went between two scrapes lived shorter
        than the interval; a light load puts less than one request in flight."""
        last = self._last_progress_value
        c = self._consistent
        idle = not (o.running or o.waiting or o.headroom.kv_used_blocks)
        steps, gen = ((None, None) if last is None else tuple(
            None if new is None or old is None else new - old for new, old in zip(progress, last, strict=True)))
        rose = (steps or 0) > 0 or (gen or 0) > 0
        lat = o.latency_since
        seen = self._last_gauges
        if idle and seen == (0, 0) and lat is not None and lat[2] > 0:
            self._idle_evidence += lat[1] / lat[2]  # an interval between two idle readings
        elif not idle:
            self._idle_evidence = 0.0
        quiet = idle and not rose and lat is not None and lat[1] == 0
        self._quiet = self._quiet + lat[2] if quiet and lat is not None else 0.0
        if self._quiet >= QUIET_IDLE:
            # No step, no token and no request finished for `QUIET_IDLE` seconds of scrapes: the engine is idle
            # as its gauges say (the load has ended); the evidence of a run of idle readings under load ends.
            self._idle_evidence = 0.0
            return False
        if self.one_shot or last is None or c is None or not idle:
            return False
        if self._idle_evidence >= IDLE_EVIDENCE:
            return True  # whether or not this interval's counters moved (vLLM-rs adds them as requests finish)
        if not rose:
            return False
        if o.unfinished_tokens is not None and o.unfinished_tokens > 0:
            return True
        if lat is not None and seen is not None and lat[0] > seen[0] + seen[1]:
            return True
        in_flight = c.running + c.waiting
        finished = None if o.finished_any is None or c.finished is None else o.finished_any - c.finished
        vanished = in_flight > 0 and (finished is None or finished < in_flight)
        return vanished and steps is not None and gen is not None and steps > 0 and gen / steps >= CONCURRENT

    def infer_max_num_seqs(self, now: float, o: Observation, preemptions_total: float | None) -> int | None:
        """max_num_seqs when nobody states it: the highest running count over `CEILING_WINDOW` among scrapes
        where requests waited beside room for the queue head (so the slot cap, not memory, held them) and
        no preemption was under way (preemption lowers running below the cap). None before such a scrape."""
        _rose, _inferred, preempting = self._preempting(now, o, preemptions_total)
        hr = o.headroom
        if o.waiting > 0 and o.running > 0 and not preempting and hr.head_fits:
            while self._caps and self._caps[-1][1] <= o.running:
                self._caps.pop()
            self._caps.append((now, o.running))
        while self._caps and now - self._caps[0][0] > CEILING_WINDOW:
            self._caps.popleft()
        return self._caps[0][1] if self._caps else None

    def update(
        self,
        now: float,
        o: Observation,
        preemptions_total: float | None,
        progress: tuple[float | None, float | None],
    ) -> tuple[Judgement, bool]:
        """Fold one scrape into the history; return the judgement and the held false-full flag."""
        self.restart_if_reset(o, preemptions_total, progress)
        unreliable = self.gauges_contradict_counters(o, progress)
        self._last_gauges = (o.running, o.waiting)
        if unreliable:
            return self._unreliable(now, preemptions_total, progress)
        rose, inferred, _ = self._preempting(now, o, preemptions_total)
        # Preemptions: a counter; a drop means vLLM restarted.
        rate = None
        if preemptions_total is not None:
            if self._last_preemptions is not None and self._last_time is not None and now > self._last_time:
                rise = preemptions_total - self._last_preemptions
                rate = max(rise, 0.0) / (now - self._last_time) if rise >= 0 else None
            self._last_preemptions = preemptions_total
        if rose:
            self._last_preempt_rise = self._last_counted_rise = now
        elif inferred:
            # Judged for this scrape only: an inference the counter never confirms must not hold `preempting`
            # for the whole window (vLLM <= 0.18 moves a request whose next prefill chunk does not fit back
            # to the queue; it is counted, if ever, when that request next produces a token).
            self._last_inferred = now
        self.preemptions_per_second = rate
        preempted = self._last_preempt_rise is not None and now - self._last_preempt_rise <= self.t.preempt_window

        # An engine with nothing to do makes no steps: that is idle, not stuck.
        nothing_to_do = o.running == 0 and o.waiting == 0
        # Blocks in use that change while requests run are steps too: a long prompt prefilling chunk by chunk moves
        # no counter on releases that count a step only when it produces a token (0.10.2).
        moved = self._last_used is not None and o.headroom.kv_used_blocks != self._last_used and o.running > 0
        # Whether the engine made a step since the last scrape (unknown without its counters: taken as yes). With
        # nothing running the scheduler still tries the head on every loop, making no step it counts (no token).
        stepped = progress[0] is None or progress != self._last_progress_value or moved or o.running == 0
        # No step while requests run (no counter moved, the same gauges and blocks: a step longer than the
        # interval): vLLM's stats are the ones the last scrape judged, with more evidence (its steps); this one
        # repeats that answer until `stuck_after`.
        unchanged = not stepped and (self._last_used == o.headroom.kv_used_blocks and self._prev is not None
                                     and self._prev == (o.running, o.waiting, o.finished_total) and o.waiting > 0)
        self._last_used = o.headroom.kv_used_blocks
        if progress != self._last_progress_value or self._last_progress_at is None or nothing_to_do or moved:
            self._last_progress_value = progress
            self._last_progress_at = now
        no_progress = now - self._last_progress_at
        self.seconds_without_progress = no_progress

        while self._ceiling and self._ceiling[-1][1] <= o.running:
            self._ceiling.pop()
        self._ceiling.append((now, o.running))
        while now - self._ceiling[0][0] > CEILING_WINDOW:
            self._ceiling.popleft()
        ceiling = self._ceiling[0][1]

        if o.waiting > 0:
            while self._busy and self._busy[-1][1] <= o.running:
                self._busy.pop()
            self._busy.append((now, o.running))
            self.busy_frames += 1
        while self._busy and now - self._busy[0][0] > CEILING_WINDOW:
            self._busy.popleft()
        if not self._busy:
            self.busy_frames = 0
        self.busy_ceiling = self._busy[0][1] if self._busy else None

        idle_with_blocks = o.running == 0 and o.waiting == 0 and o.headroom.kv_used_blocks > 0
        if not idle_with_blocks:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now

        prev = self._prev
        # The previous scrape showed room for the head beside a free slot and since then the engine stepped, nothing
        # was admitted (running did not rise) and nothing finished: the head did not fit, whatever the profile says.
        # Without a step no head was examined (a fresh reviewer: two scrapes of one exposition read as a head that
        # stood, "none was admitted").
        # A head that fits even at max_model_len cannot be one that did not fit (a fresh reviewer: a stalled engine
        # with nothing running beside 20,000 free blocks was called head-of-line until stuck-after).
        w_max = o.headroom.worst_case_blocks_max_model_len
        any_head_fits = w_max is not None and w_max <= o.headroom.kv_free_blocks
        stood = (self._room_before and prev is not None and o.running <= prev[0] and o.waiting > 0
                 and not self._finished_since(o) and stepped and not any_head_fits)
        history = History(
            preempted_recently=preempted,
            no_progress_for=no_progress,
            waiting_on_previous=self._waiting_prev,
            running_ceiling=ceiling,
            idle_with_blocks_for=None if self._idle_since is None else now - self._idle_since,
            previous=self._previous,
            head_of_line_before=stood,
            preemption_inferred=inferred,
            preempted_now=rose,
            one_shot=self.one_shot,
            pool_empty_before=self._pool_empty_before,
            deferred_fell=self._deferred_fell(o),
        )
        judgement = classify(o, history, self.t)
        c = self._consistent
        if (unchanged and c is not None and no_progress < self.t.stuck_after and judgement.verdict is not Verdict.STUCK
                and c.judgement.verdict is not Verdict.STUCK):
            # (engine truth, tests/fixtures/vllm-0.10.2/prod-kv frames 116 and 138: a CPU step longer than the
            # scrape interval; the second look otherwise reads a head that was never examined as one that stood)
            judgement = c.judgement
        if judgement.verdict is Verdict.PREEMPTING and not judgement.preemption_inferred and not judgement.suspected:
            # Still inside the window: inferred when the gauges showed it after the counter last rose.
            counted, guessed = self._last_counted_rise, self._last_inferred
            if guessed is not None and (counted is None or guessed > counted):
                judgement = replace(judgement, preemption_inferred=True, suspected=self.one_shot)
        self._previous = judgement.verdict
        self._room_before = judgement.head_of_line_candidate
        self._pool_empty_before = o.running == 0 and o.waiting > 0 and o.headroom.kv_used_blocks == 0
        self._waiting_prev = o.waiting > 0
        self._deferred_prev = None if o.deferred is None else (o.deferred, o.waiting)
        self._prev = (o.running, o.waiting, o.finished_total)
        self._last_time = now
        self._consistent = _Consistent(now, o.running, o.waiting, o.finished_any, judgement)

        if false_full_condition(o, judgement.verdict, self.t):
            if self._false_full_since is None:
                self._false_full_since = now
            self._bridged = False
        elif (judgement.first_look and judgement.verdict in (Verdict.TRANSIENT, Verdict.UNDECIDED)
              and not self._bridged and o.waiting > 0):
            self._bridged = True
        else:
            self._false_full_since = None
            self._bridged = False
        # A frame that can be transient (a second look is pending) is never flagged; one such frame between two
        # false-full ones does not restart the hold.
        held = (self._false_full_since is not None and now - self._false_full_since >= self.t.false_full_hold
                and judgement.verdict in FALSE_FULL_VERDICTS)
        return judgement, held

    def _deferred_fell(self, o: Observation) -> bool:
        """The previous scrape counted every waiting request deferred and this one counts fewer deferred."""
        prev = self._deferred_prev
        return prev is not None and o.deferred is not None and 0 < prev[1] <= prev[0] and o.deferred < prev[0]

    def _unreliable(self, now: float, preemptions_total: float | None,
                    progress: tuple[float | None, float | None]) -> tuple[Judgement, bool]:
        """A scrape whose gauges contradict the counters: the counters' baselines move on (the engine made
        steps), every gauge-derived state stays as the last consistent scrape left it, and the answer repeats that
        scrape's judgement, said to be so, while it is recent (`stuck_after`) and names a limit other than memory
        (a KV-full or preemption claim rests on the pool's numbers, which this scrape reads as free); otherwise
        the answer is undecided. Never `ok`."""
        self.unreliable_scrapes += 1
        if preemptions_total is not None:
            if self._last_preemptions is not None and preemptions_total > self._last_preemptions:
                self._last_preempt_rise = self._last_counted_rise = now
            self._last_preemptions = preemptions_total
        self._last_progress_value = progress
        self._last_progress_at = now
        self.seconds_without_progress = 0.0
        c = self._consistent
        assert c is not None
        age = now - c.at
        if age <= self.t.stuck_after and c.judgement.verdict in FALSE_FULL_VERDICTS:
            judgement = replace(c.judgement, gauges_reliable=False, judged_from=age, first_look=False)
        else:
            judgement = Judgement(Verdict.UNDECIDED, Limit.UNDECIDED, gauges_reliable=False, judged_from=age)
        held = (self._false_full_since is not None and now - self._false_full_since >= self.t.false_full_hold
                and judgement.verdict in FALSE_FULL_VERDICTS)
        return judgement, held
