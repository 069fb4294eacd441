"""The judgement of one engine at one scrape: from its parsed sample, its resolved config, the release's rules and
the engine's history to its report (verdict, false-full flag, headroom, profile, budget).

No I/O and no clock: `judge` is a function of its arguments; the only state it touches is the `EngineHistory` it
is given (the engine's profile windows, verdict tracker and counter baselines), into which it folds this scrape.
Tested from recordings without a server (tests/unit); `Target.observe` calls it once per engine and scrape.

Order, so that every figure of one answer rests on one max_num_seqs: the profile (windows), the pool's figures
(`derive.pool`, which do not depend on max_num_seqs), the history (restart, an inferred cap), the verdict, then
the cap of the answer (stated, inferred, or the running count when slots_full was judged from a plateau) and the
slot figures under it (`derive.with_slots`): derived once.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

from ..core import defaults
from ..engines.base import (
    E2E_LATENCY,
    GENERATION_LENGTHS,
    MAX_TOKENS_LENGTHS,
    PROMPT_LENGTHS,
    BatchDefaults,
    Candidate,
    Engine,
    EngineSample,
    Histogram,
    Snapshot,
)
from ..engines.vllm import VLLM
from ..engines.vllm.args import NIXL_LONGEST_HOLD
from ..model.kv_layout import bytes_per_block, drafter_of, resolve_kv_dtype, served_kv_bytes_per_token
from ..model.shape import ModelShape
from . import advice, derive
from .config import FoundCmdline, Known, ServingConfig, Source, value
from .derive import Headroom, Pool
from .inputs import Input, Provenance, provenance
from .profile import Lengths, Quantile, Window, delta, histogram_quantile, lengths, profile_value
from .report import Advice, BudgetUse, EngineGap, EngineReport, KvTransfer, ProfileQuality, Risk
from .verdict import Judgement, Observation, Thresholds, Tracker, Verdict, lora_admissible

WORK_SCRAPES = 5  # intervals the engine's tokens per step are averaged over (vLLM adds a prompt when it completes)


@dataclass(frozen=True)
class Judging:
    """How engines are judged (from the target's Settings)."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    quantile: float = defaults.PROFILE_QUANTILE
    window: float = defaults.PROFILE_WINDOW  # s
    model_shape: ModelShape | None = None  # from --model-config: adds absolute bytes
    engine: Engine = VLLM  # whose defaults stand in for values nobody stated
    draft_shape: ModelShape | None = None  # from --draft-model-config: the speculative drafter's layers


class EngineHistory:
    """What one engine's judgement remembers across scrapes: its verdict tracker, its profile windows (one per
    length histogram) and the counters' values at the last scrape."""

    __slots__ = ("consistent", "generated", "interval", "latency", "prefix", "rate", "steps", "tracker", "used",
                 "windows", "work")

    def __init__(self, thresholds: Thresholds, one_shot: bool) -> None:
        self.tracker = Tracker(thresholds, one_shot=one_shot)
        self.windows: dict[str, Window] = {}
        self.prefix: tuple[float, float, float] | None = None  # prefix-cache queries, hits, last hit share
        self.consistent: EngineReport | None = None  # the report of the last scrape whose gauges were consistent
        self.latency: tuple[float, Histogram | None] | None = None  # the e2e latency histogram at the last scrape
        self.generated: tuple[float, float] | None = None  # generation tokens: the counter and the histogram's sum
        self.steps: tuple[float, float, float, float] | None = None  # steps, prompt, generated, cached tokens: last
        self.work: deque[tuple[float, float]] = deque(maxlen=WORK_SCRAPES)  # (steps, tokens) per recent interval
        self.used: int | None = None  # blocks in use at the last scrape
        self.rate: float | None = None  # the last tokens-per-step estimate
        self.interval: tuple[float, float] | None = None  # (steps, tokens) since the last scrape, when counted

    def window(self, now: float, e: EngineSample, role: str, seconds: float) -> Window | None:
        """The window of the length histogram `role`, fed this scrape's sample; None when the engine exports none."""
        hist = e.histograms.get(role)
        if hist is None:
            return None
        window = self.windows.get(role) or self.windows.setdefault(role, Window(seconds))
        window.observe(now, hist)
        return window

    def latency_since(self, now: float, e: EngineSample,
                      received: float | None = None) -> tuple[int, float, float] | None:
        """Of the requests finished since the last scrape (vLLM's e2e latency histogram, observed when a request
        finishes): (how many lived longer than the interval, so were in flight at that scrape, counted from the
        first bucket bound at or above it: a lower count, never a higher one; their summed latency in seconds;
        the interval). A histogram not exported yet (no request finished: vLLM's Rust frontend exports none
        until then) counts as empty. None without a previous scrape or after a reset.

        vLLM renders the body somewhere between the request (`now`) and the response (`received`, seconds on the
        same clock; `now` when unknown): a busy API server answers late, and its body then shows a later moment
        than `now`. The interval is the longest the two bodies can be apart, from the last request to this
        response, so a request counted here surely lived across the last body (engine truth,
        tests/fixtures/vllm-0.10.2/prod-burst frame 4: asked at 4.06 s, its counters those of the engine's step
        at 6.35 s, after 119 requests of ~3 s arrived and finished)."""
        hist = e.histograms.get(E2E_LATENCY)
        before, self.latency = self.latency, (now, hist)
        if hist is None or before is None or now <= before[0]:
            return None
        d = hist if before[1] is None else delta(hist, before[1])
        if d is None:
            return None
        interval = max(now, received or now) - before[0]
        lived = next((int(d.count - n) for bound, n in d.buckets if bound >= interval), 0)
        return lived, d.sum, interval

    def used_before(self, used: int) -> int:
        """Blocks in use at the last scrape (this scrape's when there is none); remembers this scrape's."""
        before, self.used = self.used, used
        return used if before is None else before

    def tokens_per_step(self, e: EngineSample, used_grew: bool) -> float | None:
        """Tokens the engine scheduled per step over the last `WORK_SCRAPES` intervals: prompt tokens computed (less
        those found in the prefix cache) and tokens generated, per engine step (`iteration_tokens_total_count`).
        vLLM adds a prompt's tokens when its prefill completes, so one interval is noisy and several average it.
        Steps that only prefill are not counted by every release (0.10.2 counts none while one long prompt
        prefills): an interval in which the blocks in use grew while no step or token was counted is all prefill
        (infinite). None without the counters or a previous scrape."""
        now = (e.steps_total, e.prompt_tokens_total, e.generation_tokens_total, e.prefix_hits_total or 0.0)
        self.interval = None
        if None in now[:3]:
            self.steps = self.rate = None
            return None
        current = (float(now[0] or 0.0), float(now[1] or 0.0), float(now[2] or 0.0), float(now[3]))
        before, self.steps = self.steps, current
        if before is None or any(c < b for c, b in zip(current, before, strict=True)):
            self.work.clear()
            self.rate = None
            return None
        steps = current[0] - before[0]
        tokens = max(0.0, (current[1] - before[1]) - (current[3] - before[3])) + (current[2] - before[2])
        if steps == 0 and tokens == 0:
            if not used_grew:
                return self.rate  # nothing counted or grown: a step still under way, the last estimate stands
            self.rate = math.inf
            return self.rate
        self.work.append((steps, tokens))
        self.interval = (steps, tokens)
        total = sum(s for s, _t in self.work)
        self.rate = math.inf if total == 0 else sum(t for _s, t in self.work) / total
        return self.rate

    def unfinished_tokens(self, e: EngineSample) -> float | None:
        """Tokens generated since the last scrape beyond what the requests finished since then generated in all
        (the generation-length histogram's sum grows by a request's whole output when it finishes): > 0 means a
        request that generated tokens since the last scrape has not finished, so it is in flight now. None
        without both series or a previous scrape."""
        hist = e.histograms.get(GENERATION_LENGTHS)
        now = None if hist is None or e.generation_tokens_total is None else (e.generation_tokens_total, hist.sum)
        before, self.generated = self.generated, now
        if now is None or before is None or now[0] < before[0] or now[1] < before[1]:
            return None
        return (now[0] - before[0]) - (now[1] - before[1])

    def lengths(self, role: str, max_model_len: int | None) -> Lengths | None:
        """The lengths of the requests the window of `role` holds (fed by `window` this scrape)."""
        window = self.windows.get(role)
        hist = None if window is None else window.recent()
        return None if hist is None else lengths(hist, max_model_len)

    def hit_share(self, e: EngineSample, gauges_only: bool) -> float:
        """Share of prompt tokens found in the prefix cache: over the last interval that looked any up (the
        sidecar), or since start (one-shot). vLLM >= 0.28 records the lookups at admission
        (`record_prefix_cache_stats`, vllm/v1/core/kv_cache_manager.py @0.32.0)."""
        q, h = e.prefix_queries_total, e.prefix_hits_total
        if q is None or h is None:
            return 0.0
        if gauges_only:
            if e.prompt_tokens_total is not None and h > e.prompt_tokens_total:
                # More tokens found in the cache than prompt tokens vLLM computed: the lookups are counted on each
                # try of a waiting request (before 0.28), not once per prompt, and say nothing of the head's share
                # (a fresh reviewer: 0.10.2 head-of-line frame 12, 9.75M hits of 13.03M lookups beside 2,112
                # prompt tokens, took a 66-block head as 17 and said "the next step can admit 7").
                return 0.0
            return h / q if q > 0 else 0.0
        before = self.prefix
        share = before[2] if before is not None else 0.0
        if before is not None and q > before[0] and h >= before[1]:
            share = (h - before[1]) / (q - before[0])
        elif before is not None and q < before[0]:
            share = 0.0  # counters reset: vLLM restarted with an empty cache
        self.prefix = (q, h, share)
        return share


def requests_grow(h: Pool, prompt: Quantile | None, max_tokens: Quantile | None, hit_share: float) -> bool:
    """Running requests will need more blocks than they hold on average: the profile's blocks per request
    (beyond a shared cached prefix: uncached prompt + max_tokens) exceed blocks in use / running."""
    held = h.held_blocks_per_running
    if held is None or prompt is None or max_tokens is None:
        return True
    if held > h.worst_case_blocks_profile_only:
        return True  # a new workload the profile has not seen: nothing says its requests stop growing
    bs = h.block_size_tokens
    own = derive.blocks_for_tokens(derive.uncached_prompt(prompt.tokens, hit_share) + max_tokens.tokens, bs)
    return (own if hit_share > 0 else h.worst_case_blocks_profile) > held


def under_pressure(h: Pool) -> bool:
    """Memory binds soon although usage is low: oversubscribed, or requests in flight beyond the profile."""
    held = h.held_blocks_per_running
    return h.safe_headroom_requests < 0 or (held is not None and held > h.worst_case_blocks_profile_only)


def in_flight_prompt(held_blocks: int | None, block_size: int, prompt_tokens_total: float | None,
                     finished: float | None, running: int) -> Quantile | None:
    """The prompt size when no request has finished, from the requests in flight, basis "in_flight": the blocks
    each running request holds now (prompt and the tokens generated so far), or less when vLLM's histograms show no
    request finished since it started: then `prompt_tokens_total` counts the prefills of exactly the running
    requests (vLLM adds a prompt when its prefill completes, `IterationStats.update_from_output` @0.32.0), and its
    mean is their prompt. Never that counter without the finished count: a lifetime counter divided by the requests
    running now says nothing about them (issue 19, kind 3). None when nothing runs."""
    if held_blocks is None:
        return None
    held = held_blocks * block_size
    if finished == 0 and prompt_tokens_total and running > 0:
        return Quantile(min(held, math.ceil(prompt_tokens_total / running)), "in_flight", 0, upper=held)
    return Quantile(held, "in_flight", 0, upper=held)


def config_problem(cfg: ServingConfig) -> str | None:
    """One sentence when the resolved config makes no sense for block arithmetic, else None."""
    n = value(cfg.num_gpu_blocks)
    bs = value(cfg.block_size)
    if n is not None and n < 2:
        known = cfg.num_gpu_blocks
        src = "" if known is None else f"{known.source}{', ' + known.basis if known.basis else ''}"
        return (f"num_gpu_blocks={n} (from {src}) leaves no usable block: vLLM keeps one null block, "
                "so at least 2 are needed")
    if bs is not None and bs < 1:
        return f"block_size={bs} is not a positive number of tokens"
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        v = value(getattr(cfg, name))
        if v is not None and v < 1:
            return f"{name}={v} is not a positive number"
    return None


def budget_use(cfg: ServingConfig, snap: Snapshot, prompt: Quantile | None, hit_share: float,
               batch: BatchDefaults) -> BudgetUse | None:
    """The token budget and how much of a step one typical prefill takes.

    V1 schedules running requests first, a prefill taking min(remaining prompt, budget left) tokens per
    step, and admits waiting requests only while budget is left (`while token_budget > 0`,
    vllm/v1/core/sched/scheduler.py @0.32.0). A prompt at least as long as the budget therefore fills
    whole steps until its last chunk. vLLM 0.32.0 exports no per-step prefill count: `prompt_tokens_total`
    and `iteration_tokens_total` are counted when a prefill completes (the request's first output,
    vllm/v1/metrics/stats.py `IterationStats.update_from_output`), so one 3,072-token prefill chunked over
    12 steps of 256 shows as one iteration of 3,072 tokens. The prompt profile (of finished requests, less the
    prefix cache's share) is the evidence. Nobody stated the budget: vLLM's default for each device class it may
    run on (`batch`), never one of them assumed.
    """
    tokens = None
    if prompt is not None and prompt.basis in advice.SIZED_BASES:
        tokens = float(derive.uncached_prompt(prompt.tokens, hit_share))
    stated = cfg.max_num_batched_tokens
    if stated is not None:
        return BudgetUse(stated.value, str(stated.source), tokens)
    if snap.rules is not None and snap.rules.engine == "V1":
        return BudgetUse(None, str(Source.DEFAULT), tokens, batch.max_num_batched_tokens)
    return None


def largest_prompt_blocks(e: EngineSample, max_model_len: int | None, block_size: int) -> int | None:
    """Blocks of the longest prompt the engine has finished (the top bucket bound of its lifetime histogram)."""
    hist = e.histograms.get(PROMPT_LENGTHS)
    largest = None if hist is None else histogram_quantile(hist, 1.0, max_model_len, "lifetime")
    if largest is None:
        return None
    return derive.blocks_for_tokens(largest.upper or largest.tokens, block_size)


def kv_waste(history: EngineHistory, e: EngineSample, pool: Pool, max_model_len: int | None,
             hit_share: float, cfg: ServingConfig | None = None) -> tuple[derive.Waste | None, derive.Waste | None]:
    """The empty-slot share of used blocks (the profile's lengths inside the in-flight bounds) and the share of
    prompt tokens a shared prefix loses at the full-block boundary (none with prefix caching off); None where
    nothing shows them. A hybrid layout's groups have their own blocks: no single answer there."""
    if pool.hybrid:
        return None, None
    bs = pool.block_size_tokens
    prompt = history.lengths(PROMPT_LENGTHS, max_model_len)
    generated = history.lengths(GENERATION_LENGTHS, max_model_len)
    profile = None
    if prompt is not None and generated is not None:
        profile = derive.profile_waste(prompt.mean, (prompt.lower, prompt.upper), generated.mean,
                                       (generated.lower, generated.upper), bs)
    waste = derive.block_waste(pool.kv_used_blocks, int(e.running or 0), bs, profile)
    caching = value(cfg.enable_prefix_caching) if cfg is not None else None
    boundary = None if prompt is None or caching is False else \
        derive.prefix_boundary_loss(hit_share, round(prompt.mean), bs)
    return waste, boundary


def kv_bytes(shape: ModelShape | None, cfg: ServingConfig, headroom: Headroom,
             block_size: int, draft: ModelShape | None = None) -> derive.KvBytes | None:
    """Absolute bytes per device, with --model-config; None without it."""
    if shape is None:
        return None
    cache_dtype = value(cfg.kv_cache_dtype) or value(cfg.cache_dtype)
    tp = value(cfg.tensor_parallel_size) or 1
    try:
        drafter = drafter_of(value(cfg.speculative_method), shape, resolve_kv_dtype(shape, cache_dtype), tp, draft)
        per_block = bytes_per_block(shape, cache_dtype, tp, block_size, drafter)
    except ValueError:
        return None  # a drafter whose layers cannot be sized: no byte figures rather than wrong ones
    return derive.kv_bytes(headroom, served_kv_bytes_per_token(shape, cache_dtype, tp, drafter), per_block)


def admission_cap(cfg: ServingConfig, snap: Snapshot) -> int | None:
    """The cap on admissions into RUNNING: max_num_seqs, or `--max-num-active-seqs` below it where the release
    has it (vLLM >= 0.32, `max_num_active_reqs`, vllm/v1/core/sched/scheduler.py:134-138 @0.33.0; a paused
    streaming session holds one of its slots, :1071-1074, and no metric counts those)."""
    seqs, active = value(cfg.max_num_seqs), value(cfg.max_num_active_seqs)
    rule = snap.rules.admission_rule if snap.rules is not None else None
    if active is None or rule is None or not rule.active_cap:
        return seqs
    return active if seqs is None else min(seqs, active)


def cap_setting(cfg: ServingConfig, snap: Snapshot) -> str:
    """The flag behind `admission_cap`: max_num_active_seqs where it is below max_num_seqs (or max_num_seqs is
    unknown) and the release applies it, else max_num_seqs. Raising max_num_seqs does not lift the other."""
    seqs, active = value(cfg.max_num_seqs), value(cfg.max_num_active_seqs)
    rule = snap.rules.admission_rule if snap.rules is not None else None
    if active is not None and rule is not None and rule.active_cap and (seqs is None or active < seqs):
        return "max_num_active_seqs"
    return "max_num_seqs"


def admission_inputs(cfg: ServingConfig, snap: Snapshot) -> tuple[str, int, float]:
    """(gate, lookahead tokens, watermark share) the head's admission is judged with: the release's gate
    (`--no-scheduler-reserve-full-isl` turns the full-prompt gate off: vllm/config/scheduler.py:190 @0.33.0),
    the drafter's lookahead where the per-step gate adds it, the watermark where the release applies one."""
    rule = snap.rules.admission_rule if snap.rules is not None else None
    gate = rule.gate if rule is not None else derive.FULL_PROMPT
    if gate == derive.FULL_PROMPT and value(cfg.scheduler_reserve_full_isl) is False and (
            rule is None or rule.era != "V0"):
        gate = derive.FIRST_CHUNK
    lookahead = (value(cfg.num_lookahead_tokens) or 0) if rule is None or rule.lookahead else 0
    watermark = (value(cfg.watermark) or 0.0) if rule is None or rule.watermark else 0.0
    return gate, lookahead, watermark


def watermark_decides(cfg: ServingConfig, snap: Snapshot, h: derive.Headroom, running: int) -> float | None:
    """The smallest `--watermark` share that keeps the queue head out, when nobody stated the flag, the release
    applies one (0.24 on, or a release the exposition cannot tell) and the admission headroom (read at vLLM's
    default 0.0) claims room: vLLM takes any share in [0.0, 1.0) (`watermark: float = Field(default=0.0, ge=0.0,
    lt=1.0)`, vllm/config/scheduler.py:196 @0.32.0 and @0.33.0) and keeps int(share × num_blocks) blocks free
    beside a running request (kv_cache_manager.py:209-210, 518-525 @0.33.0). None when the answer holds over the
    whole range (stated, not applied, nothing runs, no room claimed)."""
    rule = snap.rules.admission_rule if snap.rules is not None else None
    listed = argv_known(cfg) or (cfg.model is not None and cfg.model.source == Source.STARTUP_LOG)
    if cfg.watermark is not None or listed or (rule is not None and not rule.watermark) or running <= 0:
        return None  # a known command line (or the log's "non-default args") without the flag runs vLLM's 0.0
    need = h.admission
    if need is None or h.kv_admission_headroom_requests <= 0 or h.kv_capacity_blocks <= 0:
        return None
    n = value(cfg.num_gpu_blocks) or h.kv_capacity_blocks
    # int(w × n) > free − blocks keeps the head out: w >= (free − blocks + 1) / n.
    share = (h.kv_free_blocks - need.blocks + 1) / n
    return share if share < 1.0 else None


def admission_notes(cfg: ServingConfig, snap: Snapshot) -> tuple[str, ...]:
    """What the admission headroom cannot show, one sentence each, from the flags and the release's rules
    (engines/vllm/releases.py `admission_rule_of` names the upstream lines)."""
    rule = snap.rules.admission_rule if snap.rules is not None else None
    out: list[str] = []
    interval = value(cfg.prefill_schedule_interval)
    dp = value(cfg.data_parallel_size) or snap.data_parallel_engines
    if interval is not None and interval > 1:
        if rule is None or rule.local_cadence or dp > 1:
            out.append(f"prefill_schedule_interval {interval}: while requests decode, prefills (new ones and "
                       f"running chunks) run once every {interval} steps; no metric or log shows the hold, and it "
                       "lifts while a release step cannot drain the queue, so it delays short queues, never holds "
                       "a standing one")
        else:
            out.append(f"prefill_schedule_interval {interval} holds prefills on this release only under "
                       "data-parallel coordination (0.33 applies it on every engine); no effect here")
    active = value(cfg.max_num_active_seqs)
    if active is not None:
        if rule is not None and not rule.active_cap:
            out.append(f"max_num_active_seqs {active} is no flag of this release (>= 0.32): not applied")
        else:
            out.append(f"admission into RUNNING stops at max_num_active_seqs {active}; paused streaming sessions "
                       "hold one of those slots and no metric counts them, so slot headroom is at most this")
    w = value(cfg.watermark)
    if w and rule is not None and not rule.watermark:
        out.append(f"watermark {w:g} is no flag of this release (>= 0.24): not applied")
    elif w:
        out.append(f"watermark {w:g}: that share of the blocks stays free when a request is admitted beside "
                   "running ones (not for the first into an idle engine)")
    if cfg.speculative_method is not None and cfg.num_lookahead_tokens is None:
        out.append(f"{cfg.speculative_method.value} drafter without num_speculative_tokens: the per-step "
                   "lookahead is unknown and not counted")
    if value(cfg.scheduler_reserve_full_isl) is False:
        out.append("--no-scheduler-reserve-full-isl: only the step's chunk must fit; later chunks can preempt")
    if value(cfg.kv_role) in ("kv_consumer", "kv_both"):
        out.append("a request loading remote KV holds its blocks while counted as waiting, and is admitted "
                   "against free blocks less those in-flight loads still need (not exported)")
    return tuple(out)


def kv_transfer(cfg: ServingConfig, e: EngineSample) -> KvTransfer | None:
    """The engine's KV-transfer facts, None when it has no connector, no connector series and no offload tier."""
    if (cfg.kv_connector is None and cfg.kv_role is None and not e.connector_counters and not e.kv_fetch_by_stage
            and not e.offload_tiers):
        return None
    lease = cfg.kv_lease_duration
    return KvTransfer(value(cfg.kv_connector), value(cfg.kv_role), value(lease),
                      None if lease is None else (lease.basis or str(lease.source)), dict(e.connector_counters),
                      dict(e.connector_transfers), dict(e.kv_fetch_by_stage), e.offload_tiers, e.offload_usage)


def deferred_causes(e: EngineSample, cfg: ServingConfig) -> tuple[str, ...]:
    """What the exposition shows behind the waiting requests counted by reason "deferred", one sentence each.

    vLLM counts a request as deferred from its first skip until it is admitted or finishes (`skip_request` adds
    it to `deferred_waiting`, discarded only at admission: vllm/v1/core/sched/scheduler.py:1052-1058 and :1548
    @0.33.0, exported by `len(self.deferred_waiting)`, :3288), so a request skipped once for a LoRA slot or a
    remote-KV load that now waits for blocks or a slot is still "deferred". The LoRA adapters waiting (vLLM's
    LoRA info series) and the remote-KV loads by stage (its KV-fetch series, kv_consumer only; the names are in
    engines/vllm/metrics.py) say whether a cause of skipping is still there."""
    deferred = e.waiting_by_reason.get("deferred")
    # Releases without the deferred count (before 0.20): the LoRA info alone shows an adapter held back.
    held = e.lora is not None and lora_admissible(e.lora.max_lora, e.lora.waiting, e.lora.running,
                                                  int(e.waiting or 0)) is not None
    if not deferred and not held:
        return ()
    out: list[str] = []
    if e.lora is not None and e.lora.waiting:
        cap = e.lora.max_lora if e.lora.max_lora is not None else "?"
        outside = [a for a in dict.fromkeys(e.lora.waiting) if a not in e.lora.running]
        if outside:
            out.append(f"LoRA: adapters {', '.join(outside)} wait for a slot (max_lora {cap}, running "
                       f"{', '.join(e.lora.running) or 'none'})")
        elif deferred:
            # 0.32.0 names an adapter waiting only while its request's first output is processed
            # (vllm/v1/metrics/stats.py:569-575 @0.32.0): the running one, never one held back (prod-lora: 110-195
            # adapter-a requests skipped while the series named adapter-b, which ran).
            out.append(f"LoRA: the adapters vLLM's info names waiting all run ({', '.join(e.lora.running)}, "
                       f"max_lora {cap}); this release does not name an adapter held back, so requests of "
                       "another adapter may be what is skipped")
    loads = {k: v for k, v in e.kv_fetch_by_stage.items() if v}
    if loads:
        out.append("remote KV: " + ", ".join(f"{int(v)} {k.replace('_', ' ')}" for k, v in sorted(loads.items())))
    elif value(cfg.kv_role) in ("kv_consumer", "kv_both"):
        out.append("remote KV: a kv_consumer (its loads by stage are not exported by this release)")
    if not out and deferred:
        out.append(f"{int(deferred)} counted as deferred with no LoRA adapter waiting and no remote-KV load in "
                   "flight: requests skipped once (grammar, streaming input, stale output) stay counted until "
                   "admitted, so they may now wait for a slot or blocks")
    return tuple(out)


def capacity_decides(cfg: ServingConfig, x: derive.Inputs, nominal: Pool) -> str | None:
    """One sentence when num_gpu_blocks is known only within a range (the start-up log's rounding, an estimate)
    and what the answer rests on differs between its ends: whether the queue head fits, whether the pool holds
    one max_model_len request, whether running requests will outgrow it, whether a block is free. None when the
    value is exact or the range agrees."""
    known = cfg.num_gpu_blocks
    if known is None or not known.uncertain or known.low is None or known.high is None:
        return None
    ends = [derive.pool(replace(x, num_gpu_blocks=n)) for n in (known.low, known.high)]

    def facts(p: Pool) -> tuple[bool, bool, bool, bool]:
        w_max = p.worst_case_blocks_max_model_len
        return (p.head_fits, w_max is not None and w_max > p.kv_capacity_blocks,
                p.safe_headroom_requests < 0, p.kv_free_blocks == 0)

    if facts(ends[0]) == facts(ends[1]) == facts(nominal):
        return None
    names = ("whether the queue head fits", "whether one max_model_len request fits the pool",
             "whether running requests outgrow the pool", "whether a block is free")
    split = [n for n, a, b in zip(names, facts(ends[0]), facts(ends[1]), strict=True) if a != b]
    return (f"capacity is known only as {known.low:,}-{known.high:,} blocks ({known.basis or known.source}); "
            f"{' and '.join(split) or 'the answer'} differs across that range: state --num-gpu-blocks (or vLLM's "
            "--num-gpu-blocks-override) to decide")


def _version(snap: Snapshot) -> str | None:
    """The release number when /version answered (the defaults' table depends on it), else None."""
    return snap.rules.release if snap.rules is not None and snap.rules.source == "version" else None


def argv_known(cfg: ServingConfig) -> bool:
    """vLLM's command line is known (--vllm-args or read from the process): a flag it lacks has vLLM's default."""
    return cfg.model is not None and str(cfg.model.source) in (Source.VLLM_ARGS, Source.CMDLINE)


def producer_hold_limit(cfg: ServingConfig) -> float | None:
    """Seconds a stated P/D producer may hold a finished prefill's blocks: its stated kv_lease_duration; with the
    lease only assumed (NIXL's default), the longest hold of any release (480 s), so a leak verdict holds over the
    lease's whole range. None: not a stated producer, or no lease known."""
    lease = cfg.kv_lease_duration
    if value(cfg.kv_role) not in ("kv_producer", "kv_both") or lease is None:
        return None
    if str(lease.source) == Source.DEFAULT:
        return float(max(lease.value, NIXL_LONGEST_HOLD))
    return float(lease.value)


def _batch_defaults(how: Judging, cfg: ServingConfig, snap: Snapshot) -> BatchDefaults:
    tp, pp = value(cfg.tensor_parallel_size), value(cfg.pipeline_parallel_size)
    world = None if tp is None and pp is None else (tp or 1) * (pp or 1)
    mode = value(cfg.performance_mode) or ("default" if argv_known(cfg) else None)
    return how.engine.batch_defaults(_version(snap), world, mode)


def _seqs_input(cfg: ServingConfig, cap: int | None, batch: BatchDefaults, running: int,
                busy_ceiling: int | None) -> Input:
    known = cfg.max_num_seqs
    top = max(c.value for c in batch.max_num_seqs)
    if known is not None and known.source != Source.INFERRED:
        return Input("max_num_seqs", known.value, provenance(known.source))
    floor = max(1, running, busy_ceiling or 0, cap or 0)  # vLLM's cap is at least 1
    cands = tuple(c for c in batch.max_num_seqs if c.value >= floor)
    if cap is not None:
        return Input("max_num_seqs", cap, Provenance.INFERRED, cap, max(top, cap),
                     "the highest running count while requests waited beside room for the queue head, outside "
                     "preemption (vLLM never runs more than its cap)", cands)
    return Input("max_num_seqs", None, Provenance.UNKNOWN, floor, max(top, floor),
                 "not exported by vLLM and not stated: at least the running count, at most vLLM's default for the "
                 "device (or any value given on a command line we cannot see)", cands)


def _budget_input(b: BudgetUse | None) -> Input | None:
    if b is None:
        return None
    if b.max_num_batched_tokens is not None:
        return Input("max_num_batched_tokens", b.max_num_batched_tokens, provenance(b.source))
    lo, hi = min(c.value for c in b.candidates), max(c.value for c in b.candidates)
    return Input("max_num_batched_tokens", None, Provenance.ASSUMED_DEFAULT, lo, hi,
                 "vLLM's default for the device it runs on, which it does not export", b.candidates)


def _size_input(prompt: Quantile | None, thin: bool, headroom: Headroom) -> Input:
    """The request size behind the worst case and the head's admission blocks."""
    w, w_max, held = (headroom.worst_case_blocks_profile, headroom.worst_case_blocks_max_model_len,
                      headroom.held_blocks_per_running)
    if prompt is None:
        return Input("request_blocks", w, Provenance.UNKNOWN, None, w_max,
                     "no finished request and nothing running: the head is taken as one block")
    if prompt.basis == "in_flight":
        return Input("request_blocks", w, Provenance.INFERRED, held, w_max,
                     "no finished request yet: at least the blocks each running request holds now, at most "
                     "max_model_len")
    if thin:
        return Input("request_blocks", w, Provenance.READ_FROM_VLLM, held or headroom.prompt_blocks, w_max,
                     f"{prompt.samples} finished requests (fewer than {defaults.PROFILE_MIN_REQUESTS}): the worst "
                     "case is taken at max_model_len, the size any request can reach")
    return Input("request_blocks", w, Provenance.READ_FROM_VLLM, headroom.prompt_blocks, w,
                 f"the p-quantile of {prompt.samples} finished requests ({prompt.basis}), floored by the blocks "
                 "requests in flight hold")


def risks_of(headroom: Headroom, running: int, thin: bool, stale: bool) -> tuple[Risk, ...]:
    """What may bind later, with its basis (never what binds now)."""
    h = headroom
    out: list[Risk] = []
    w = h.worst_case_blocks_profile
    if h.safe_headroom_requests < 0 and running > 0:
        basis = "max_model_len" if thin and h.worst_case_blocks_max_model_len == w else (
            "in_flight" if stale else "profile")
        by = {"max_model_len": "max_model_len (too few finished requests to size them)",
              "in_flight": "the blocks requests in flight already hold", "profile": "the profile's worst case"}[basis]
        out.append(Risk("oversubscription", basis,
                        f"the {running} running requests, each growing to {w} blocks ({by}), would need up to "
                        f"{running * w} of the {h.kv_capacity_blocks} blocks: vLLM preempts before that"))
    if stale:
        out.append(Risk("beyond_profile", "in_flight",
                        f"requests in flight already hold {h.held_blocks_per_running} blocks each, more than any "
                        f"finished request of the profile ({h.worst_case_blocks_profile_only} blocks): the workload "
                        "changed, and the profile's sizes no longer bound it"))
    w_max = h.worst_case_blocks_max_model_len
    if w_max is not None and w_max > h.kv_capacity_blocks:
        out.append(Risk("max_model_len_over_pool", "max_model_len",
                        f"one request of max_model_len needs {w_max} blocks, the pool has {h.kv_capacity_blocks}: "
                        "such a prompt would never be admitted"))
    return tuple(out)


def judge(now: float, e: EngineSample, cfg: ServingConfig, snap: Snapshot, history: EngineHistory, how: Judging,
          gauges_only: bool, found: FoundCmdline | None = None,
          idle_gauges_doubt: str | None = None, received: float | None = None) -> EngineReport | EngineGap:
    """The report of engine `e` at `now` (seconds, monotonic: when the body was asked for; `received`: when it
    arrived, if known), or why its capacity cannot be derived.

    `idle_gauges_doubt`: why this server's gauges may read 0 under load (`Engine.idle_gauges_doubt`), or None;
    with a doubt, idle gauges mean an idle engine only where its counters show no step since the last scrape
    (never in one-shot): otherwise the answer is undecided, and the explanation names the doubt.

    `gauges_only` marks a one-shot diagnosis (one observation: no rates, no inferred cap); `found` is the vLLM
    process whose command line gave config values (named in the report).
    """
    n_blocks = value(cfg.num_gpu_blocks)
    block_size = value(cfg.block_size)
    missing = [k for k, v in (("num_gpu_blocks", n_blocks), ("block_size", block_size),
                              ("usage", e.usage), ("running", e.running), ("waiting", e.waiting)) if v is None]
    if missing:
        info = snap.cache_info.get(e.engine) or next(iter(snap.cache_info.values()), None)
        bad = None if info is None else info.unreadable()
        return EngineGap(e.model_name, e.engine, ", ".join(missing), config_error=bad)
    assert n_blocks is not None and block_size is not None and e.usage is not None
    problem = config_problem(cfg)
    if problem is not None:
        return EngineGap(e.model_name, e.engine, "", config_error=problem)
    max_model_len = value(cfg.max_model_len)

    def quantile(window: Window | None) -> Quantile | None:
        return None if window is None else window.quantile(how.quantile, max_model_len)

    prompt_window = history.window(now, e, PROMPT_LENGTHS, how.window)
    prompt = quantile(prompt_window)
    # The median prompt: what one typical prefill takes of the step's token budget (the quantile sizes the worst case).
    median = None if prompt_window is None else prompt_window.quantile(0.5, max_model_len)
    # Every window follows every scrape; the generated lengths are read only when max_tokens is not exported.
    stated = quantile(history.window(now, e, MAX_TOKENS_LENGTHS, how.window))
    generated = history.window(now, e, GENERATION_LENGTHS, how.window)
    max_tokens = profile_value(stated, quantile(generated) if stated is None else None, max_model_len)
    running = int(e.running or 0)
    waiting = int(e.waiting or 0)
    samples = 0 if prompt is None else prompt.samples
    thin = samples < defaults.PROFILE_MIN_REQUESTS
    finished = e.histograms[PROMPT_LENGTHS].count if PROMPT_LENGTHS in e.histograms else None
    has_null = snap.has_engine_label  # V1 (>= 0.8, engine label) keeps a null block; V0 has none
    if prompt is None or prompt.samples == 0:
        used = min(derive.usable_blocks(n_blocks, has_null), derive.used_blocks(
            e.usage, n_blocks, has_null, bool(snap.usage_counts_null_block)))
        prompt = in_flight_prompt(derive.in_flight_floor(used, running), block_size, e.prompt_tokens_total,
                                  finished, running)
    hit_share = history.hit_share(e, gauges_only)

    max_num_seqs = admission_cap(cfg, snap)
    refuted: Known[int] | None = None
    # vLLM never runs more than its cap: what it reads refutes a stated value below the running count, and the
    # answer is judged without it (the cap unknown, its floor the running count, if max_num_seqs itself is
    # refuted), never advising a change of the refuted figure. Each of the two caps is judged on its own (a fresh
    # reviewer: a wrong --max-num-active-seqs threw away a right --max-num-seqs).
    active = value(cfg.max_num_active_seqs)
    if max_num_seqs is not None and running > max_num_seqs and active is not None and active < running:
        refuted = cfg.max_num_active_seqs
        cfg = replace(cfg, max_num_active_seqs=None)
        max_num_seqs = admission_cap(cfg, snap)
    if max_num_seqs is not None and running > max_num_seqs:
        refuted = cfg.max_num_seqs
        cfg = replace(cfg, max_num_seqs=None)
        max_num_seqs = admission_cap(cfg, snap)
    gate = admission_inputs(cfg, snap)
    derived_from = derive.Inputs(
        num_gpu_blocks=n_blocks,
        block_size=block_size,
        has_null_block=has_null,
        usage_counts_null_block=bool(snap.usage_counts_null_block),
        usage=e.usage or 0.0,
        running=running,
        waiting=waiting,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        # No evidence of any request's size: the head is taken as long as max_model_len for the admission headroom
        # (never one block: issue 11); the judgement claims no KV limit from that guess (profile_backed False).
        prompt_tokens=prompt.tokens if prompt else max_model_len,
        # A thin profile says little about the longest request: worst case at max_model_len.
        max_tokens=max_tokens.tokens if max_tokens and not (thin and max_model_len) else None,
        kv_cache_max_concurrency=value(cfg.kv_cache_max_concurrency),
        kv_cache_size_tokens=value(cfg.kv_cache_size_tokens),
        admission_rule=gate[0],
        max_num_batched_tokens=value(cfg.max_num_batched_tokens),
        prefix_hit_share=hit_share,
        lookahead_tokens=gate[1],
        watermark=gate[2],
    )
    pool: Pool = derive.pool(derived_from)
    decides = capacity_decides(cfg, derived_from, pool)
    held = pool.held_blocks_per_running
    stale = held is not None and held > pool.worst_case_blocks_profile_only and prompt is not None \
        and prompt.basis in advice.SIZED_BASES
    floored = held is not None and (stale or (thin and prompt is not None and prompt.basis in advice.SIZED_BASES))
    batch = _batch_defaults(how, cfg, snap)
    if floored and held is not None:
        # Requests in flight already hold more than any finished request did (the workload changed), or too few
        # requests finished to size one: the queue's head is as likely one of those in flight. Its admission blocks,
        # and the prefill it will ask of the step's budget, are floored by what they hold now.
        # The step's chunk at the budget, or at the smallest it may have (the fewest blocks the head may need).
        chunk_budget = derived_from.max_num_batched_tokens
        if chunk_budget is None:
            chunk_budget = min((c.value for c in batch.max_num_batched_tokens), default=None)
        pool = derive.with_head_floor(pool, held, running, chunk_budget, chunk_is_least=value(
            cfg.enable_prefix_caching) is not False or derived_from.max_num_batched_tokens is None)
        if median is not None and held * block_size > median.tokens:
            median = replace(median, tokens=held * block_size)
    waste, boundary = kv_waste(history, e, pool, max_model_len, hit_share, cfg)
    tracker = history.tracker
    budget = budget_use(cfg, snap, median, hit_share, batch)
    w_max = pool.worst_case_blocks_max_model_len
    budget_cands: tuple[Candidate, ...] = ()
    if budget is not None:
        budget_cands = ((Candidate(budget.max_num_batched_tokens, budget.source),)
                        if budget.max_num_batched_tokens is not None else budget.candidates)
    head_tokens = kv_room_typical = None
    if budget is not None and budget.prefill_tokens is not None and prompt is not None \
            and prompt.basis in advice.SIZED_BASES:
        # The head's size as a range (verdict.step_limit): the quantile's prompt (floored by what requests in flight
        # hold, as the pool's head is) and the KV room of a head of the typical prompt, by the same gates.
        q_tokens = derived_from.prompt_tokens or 0
        if floored and held is not None:
            q_tokens = max(q_tokens, held * block_size)
        head_tokens = derive.uncached_prompt(q_tokens, hit_share)
        need = derive.admission_need(int(budget.prefill_tokens), block_size, gate[0],
                                     derived_from.max_num_batched_tokens, gate[1],
                                     derive.watermark_blocks(gate[2], n_blocks), max_model_len)
        kv_room_typical = derive.kv_admission_headroom(pool.kv_free_blocks, need.blocks, need.watermark_blocks,
                                                       running)
    elif prompt is not None and prompt.basis == "in_flight":
        # No finished request sizes the head: what the requests in flight hold each is the only size there is
        # (a case of an undecided answer, never the verdict's: verdict.classify).
        head_tokens = derive.uncached_prompt(prompt.tokens, hit_share)
    # The history's baselines move in this order, before the observation is built once.
    latency_since = None if gauges_only else history.latency_since(now, e, received)
    unfinished_tokens = None if gauges_only else history.unfinished_tokens(e)
    used_before = history.used_before(pool.kv_used_blocks)
    tokens_per_step = None if gauges_only else history.tokens_per_step(
        e, used_grew=running > 0 and pool.kv_used_blocks > used_before)
    step_tokens_since = None
    uncounted_prefill = False
    if not gauges_only and history.interval is not None:
        steps_since, tokens_since = history.interval
        # Tokens the blocks' growth holds: written by the steps since, counted or not (0.10.2 counts a prompt's
        # tokens only when its prefill completes); finished requests' freed blocks make it a lower bound.
        grown = (pool.kv_used_blocks - used_before - running) * block_size
        uncounted_prefill = grown > tokens_since
        step_tokens_since = max(tokens_since, grown) / steps_since if steps_since else math.inf
    obs = Observation(
        running, waiting, None if (d := e.waiting_by_reason.get("deferred")) is None else int(d), e.usage,
        max_num_seqs, e.awake, pool, largest_prompt_blocks(e, max_model_len, block_size),
        finished_total=finished,
        max_model_len_exceeds_pool=w_max is not None and w_max > pool.kv_capacity_blocks,
        memory_pressure=under_pressure(pool),
        requests_grow=requests_grow(pool, prompt, max_tokens, hit_share), thin_profile=thin,
        max_num_seqs_candidates=batch.max_num_seqs, budget_candidates=budget_cands,
        budget_stated=budget is not None and budget.max_num_batched_tokens is not None,
        chunked_prefill=value(cfg.enable_chunked_prefill) is not False,
        prompt_tokens=None if budget is None or budget.prefill_tokens is None else int(budget.prefill_tokens),
        preemptions_total=e.preemptions_total,
        profile_backed=prompt is not None and prompt.basis in advice.SIZED_BASES, stale_profile=stale,
        profile_recent=prompt is not None and prompt.basis == "window",
        kv_role=value(cfg.kv_role),
        # Behind a doubt, idle gauges mean an idle engine only where its counters show it made no step since the
        # last scrape (one-shot: no last scrape; the sidecar's first look, a restart, or steps since: unverified).
        idle_gauges_unverifiable=idle_gauges_doubt is not None and (
            gauges_only or not tracker.engine_still((e.steps_total, e.generation_tokens_total))),
        # A known command line without --kv-transfer-config has no connector: its NIXL series (vllm-rs exports
        # them regardless) say nothing of a role.
        connector_series=bool(e.connector_counters) and not (argv_known(cfg) and cfg.kv_connector is None),
        producer_hold_limit=producer_hold_limit(cfg),
        latency_since=latency_since,
        unfinished_tokens=unfinished_tokens,
        tokens_per_step=tokens_per_step,
        finished_any=(e.histograms[GENERATION_LENGTHS].count if GENERATION_LENGTHS in e.histograms else finished),
        lora_admits=None if e.lora is None else lora_admissible(e.lora.max_lora, e.lora.waiting, e.lora.running,
                                                                waiting),
        head_tokens=head_tokens, kv_room_typical=kv_room_typical, step_tokens_since=step_tokens_since,
        uncounted_prefill=uncounted_prefill, sleep_mode=value(cfg.enable_sleep_mode))
    progress = (e.steps_total, e.generation_tokens_total)
    if tracker.restart_if_reset(obs, e.preemptions_total, progress):
        # vLLM restarted: its counters began again at 0; the prefix-hit and prefill baselines go too.
        history.prefix = None
    inferred_cap = None
    if max_num_seqs is None and not gauges_only:
        inferred_cap = tracker.infer_max_num_seqs(now, obs, e.preemptions_total)
        if inferred_cap is not None:
            # One cap for the whole answer: slot and admission headroom, the verdict and the advice.
            max_num_seqs = inferred_cap
            cfg = replace(cfg, max_num_seqs=Known(inferred_cap, Source.INFERRED))
            obs = replace(obs, max_num_seqs=inferred_cap, max_num_seqs_inferred=True)
    judgement, false_full = tracker.update(now, obs, e.preemptions_total, progress)
    if decides is not None:
        # The answer rests on a capacity known only within a range that decides it: no flag raised on it.
        false_full = False
    if judgement.slots_inferred and max_num_seqs is None and running > 0:
        # slots_full judged with the cap unknown: the running count is the cap this answer uses throughout.
        max_num_seqs = inferred_cap = running
        cfg = replace(cfg, max_num_seqs=Known(running, Source.INFERRED))
    headroom = derive.with_head_range(derive.with_lora(derive.with_slots(pool, max_num_seqs, running),
                                                       obs.lora_admits), kv_room_typical)
    if judgement.verdict is Verdict.DEFERRED and obs.lora_admits is None and judgement.admits is not None:
        # vLLM's own count: the requests it counts deferred are skipped by its scan while the verdict holds.
        top = headroom.admission_headroom_requests_max
        low = min(headroom.admission_headroom_requests, judgement.admits)
        high = None if top is None else min(top, judgement.admits)
        headroom = replace(headroom, admission_headroom_requests=low,
                           admission_headroom_requests_max=high if high is not None and high > low else None)
    quality = ProfileQuality(
        samples=samples, basis="none" if prompt is None else prompt.basis,
        span=None if prompt is None else prompt.span, thin=thin,
        stale=held is not None and held > headroom.worst_case_blocks_profile_only,
        held_blocks_per_running=held, window=None if gauges_only else how.window)
    inputs = {"max_num_seqs": _seqs_input(cfg, inferred_cap, batch, running,
                                          None if gauges_only else tracker.busy_ceiling),
              "request_blocks": _size_input(prompt, thin, headroom)}
    budget_input = _budget_input(budget)
    if budget_input is not None:
        inputs["max_num_batched_tokens"] = budget_input
    report = _report(now, e, cfg, snap, judgement, false_full, headroom, prompt, max_tokens, max_num_seqs,
                     gauges_only, how, block_size, quality, budget, found, tracker, inputs,
                     risks_of(headroom, running, thin, quality.stale), decides, waste, boundary,
                     hit_share if e.prefix_queries_total is not None and e.prefix_hits_total is not None else None,
                     idle_gauges_doubt if judgement.idle_unverified else None, refuted)
    if judgement.gauges_reliable:
        _complete(report, tuple(advice.advise(report)))
        history.consistent = report
        return report
    # The gauges contradict the counters: the judgement and the advice are the consistent scrape's, said so.
    last = history.consistent
    same = last is not None and last.verdict is judgement.verdict
    return _complete(report, last.advice if last is not None and same else (), last)


def _complete(report: EngineReport, advised: tuple[Advice, ...],
              consistent: EngineReport | None = None) -> EngineReport:
    """`report`, which `judge` has just made and nobody else holds yet, with its advice (made from the report
    itself) and the consistent report it repeats: set in place, as `replace` would give them, without copying
    its ~45 fields once more (that copy was ~5 % of a scrape's instructions)."""
    object.__setattr__(report, "advice", advised)
    object.__setattr__(report, "consistent", consistent)
    return report


def _report(now: float, e: EngineSample, cfg: ServingConfig, snap: Snapshot, judgement: Judgement, false_full: bool,
            headroom: Headroom, prompt: Quantile | None, max_tokens: Quantile | None, max_num_seqs: int | None,
            gauges_only: bool, how: Judging, block_size: int, quality: ProfileQuality, budget: BudgetUse | None,
            found: FoundCmdline | None, tracker: Tracker, inputs: dict[str, Input],
            risks: tuple[Risk, ...], decides: str | None, waste: derive.Waste | None,
            boundary: derive.Waste | None, hit_ratio: float | None, gauges_doubt: str | None,
            refuted: Known[int] | None) -> EngineReport:
    return EngineReport(
        model_name=e.model_name,
        engine=e.engine,
        verdict=judgement.verdict,
        false_full=false_full,
        slots_inferred=judgement.slots_inferred,
        running=int(e.running or 0),
        waiting=int(e.waiting or 0),
        waiting_by_reason=dict(e.waiting_by_reason),
        headroom=headroom,
        config=cfg,
        prompt=prompt,
        max_tokens=max_tokens,
        preemptions_per_second=tracker.preemptions_per_second,
        preemptions_total=e.preemptions_total,
        max_num_seqs=max_num_seqs,
        gauges_only=gauges_only,
        kv_bytes=kv_bytes(how.model_shape, cfg, headroom, block_size, how.draft_shape),
        seconds_without_progress=tracker.seconds_without_progress,
        histograms=dict(e.histograms),
        preemption_inferred=judgement.preemption_inferred,
        suspected=judgement.suspected or decides is not None,
        profile=quality,
        budget=budget,
        cmdline_pid=found.pid if found else None,
        cmdline_found_by=found.found_by if found else None,
        busy_ceiling=None if gauges_only else tracker.busy_ceiling,
        busy_frames=0 if gauges_only else tracker.busy_frames,
        binding_limit=judgement.binds,
        decided_by=judgement.decided_by,
        risks=risks,
        inputs=inputs,
        admits=judgement.admits,
        gauges_reliable=judgement.gauges_reliable,
        gauges_doubt=gauges_doubt,
        judged_from=judgement.judged_from,
        unreliable_scrapes=tracker.unreliable_scrapes,
        producer_holding=judgement.producer_holding,
        asleep_or_stuck=judgement.asleep_or_stuck,
        capacity_decides=decides,
        admission_notes=admission_notes(cfg, snap),
        kv_transfer=kv_transfer(cfg, e),
        deferred_causes=deferred_causes(e, cfg),
        cap_setting=cap_setting(cfg, snap),
        watermark_decides=watermark_decides(cfg, snap, headroom, int(e.running or 0)),
        block_waste=waste,
        prefix_boundary_loss=boundary,
        prefix_cache_hit_ratio=hit_ratio,
        max_num_seqs_refuted=refuted,
    )
