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
from dataclasses import dataclass, field, replace

from ..core import defaults
from ..engines.base import GENERATION_LENGTHS, MAX_TOKENS_LENGTHS, PROMPT_LENGTHS, EngineSample, Snapshot
from ..model.kv_layout import bytes_per_block, drafter_of, resolve_kv_dtype, served_kv_bytes_per_token
from ..model.shape import ModelShape
from . import derive
from .config import FoundCmdline, Known, ServingConfig, Source, value
from .derive import Headroom, Pool
from .profile import Quantile, Window, histogram_quantile, profile_value
from .report import BudgetUse, EngineGap, EngineReport, KvTransfer, ProfileQuality
from .verdict import Observation, Thresholds, Tracker


@dataclass(frozen=True)
class Judging:
    """How engines are judged (from the target's Settings)."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    quantile: float = defaults.PROFILE_QUANTILE
    window: float = defaults.PROFILE_WINDOW  # s
    model_shape: ModelShape | None = None  # from --model-config: adds absolute bytes
    draft_shape: ModelShape | None = None  # from --draft-model-config: the speculative drafter's layers


class EngineHistory:
    """What one engine's judgement remembers across scrapes: its verdict tracker, its profile windows (one per
    length histogram) and the counters' values at the last scrape."""

    __slots__ = ("prefix", "prompt_tokens", "tracker", "windows")

    def __init__(self, thresholds: Thresholds, one_shot: bool) -> None:
        self.tracker = Tracker(thresholds, one_shot=one_shot)
        self.windows: dict[str, Window] = {}
        self.prompt_tokens: float | None = None  # the prompt-token counter at the last scrape
        self.prefix: tuple[float, float, float] | None = None  # prefix-cache queries, hits, last hit share

    def window(self, now: float, e: EngineSample, role: str, seconds: float) -> Window | None:
        """The window of the length histogram `role`, fed this scrape's sample; None when the engine exports none."""
        hist = e.histograms.get(role)
        if hist is None:
            return None
        window = self.windows.get(role) or self.windows.setdefault(role, Window(seconds))
        window.observe(now, hist)
        return window

    def hit_share(self, e: EngineSample, gauges_only: bool) -> float:
        """Share of prompt tokens found in the prefix cache: over the last interval that looked any up (the
        sidecar), or since start (one-shot). vLLM >= 0.28 records the lookups at admission
        (`record_prefix_cache_stats`, vllm/v1/core/kv_cache_manager.py @0.32.0)."""
        q, h = e.prefix_queries_total, e.prefix_hits_total
        if q is None or h is None:
            return 0.0
        if gauges_only:
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


def in_flight_prompt(prompt_tokens_total: float | None, finished: float | None, running: int,
                     max_model_len: int | None) -> Quantile | None:
    """The prompt size when no request has finished: prompt tokens computed so far per request started
    (finished + running), from vLLM's `prompt_tokens_total` counter; basis "in_flight". Without that evidence
    a prompt may be as long as max_model_len (never assume one block); None when that is unknown too."""
    started = (finished or 0.0) + running
    if prompt_tokens_total is not None and prompt_tokens_total > 0 and started > 0:
        tokens = math.ceil(prompt_tokens_total / started)
        return Quantile(min(tokens, max_model_len) if max_model_len else tokens, "in_flight", int(started))
    if max_model_len is not None:
        return Quantile(max_model_len, "max_model_len", 0)
    return None


def config_problem(cfg: ServingConfig) -> str | None:
    """One sentence when the resolved config makes no sense for block arithmetic, else None."""
    n = value(cfg.num_gpu_blocks)
    bs = value(cfg.block_size)
    if n is not None and n < 2:
        src = cfg.num_gpu_blocks.source if cfg.num_gpu_blocks else ""
        return (f"num_gpu_blocks={n} (from {src}) leaves no usable block: vLLM keeps one null block, "
                "so at least 2 are needed")
    if bs is not None and bs < 1:
        return f"block_size={bs} is not a positive number of tokens"
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        v = value(getattr(cfg, name))
        if v is not None and v < 1:
            return f"{name}={v} is not a positive number"
    return None


def budget_use(cfg: ServingConfig, snap: Snapshot, prompt: Quantile | None) -> BudgetUse | None:
    """The token budget and how much of a step one typical prefill takes.

    V1 schedules running requests first, a prefill taking min(remaining prompt, budget left) tokens per
    step, and admits waiting requests only while budget is left (`while token_budget > 0`,
    vllm/v1/core/sched/scheduler.py @0.32.0). A prompt at least as long as the budget therefore fills
    whole steps until its last chunk. vLLM 0.32.0 exports no per-step prefill count: `prompt_tokens_total`
    and `iteration_tokens_total` are counted when a prefill completes (the request's first output,
    vllm/v1/metrics/stats.py `IterationStats.update_from_output`), so one 3,072-token prefill chunked over
    12 steps of 256 shows as one iteration of 3,072 tokens. The prompt profile is the evidence.
    """
    stated = cfg.max_num_batched_tokens
    if stated is not None:
        budget, source = stated.value, str(stated.source)
    elif snap.rules is not None and snap.rules.engine == "V1":
        budget, source = defaults.VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS, str(Source.DEFAULT)
    else:
        return None
    return BudgetUse(budget, source, None if prompt is None else float(prompt.tokens))


def largest_prompt_blocks(e: EngineSample, max_model_len: int | None, block_size: int) -> int | None:
    """Blocks of the longest prompt the engine has finished (the top bucket bound of its lifetime histogram)."""
    hist = e.histograms.get(PROMPT_LENGTHS)
    largest = None if hist is None else histogram_quantile(hist, 1.0, max_model_len, "lifetime")
    if largest is None:
        return None
    return derive.blocks_for_tokens(largest.upper or largest.tokens, block_size)


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
    if not deferred:
        return ()
    out: list[str] = []
    if e.lora is not None and e.lora.waiting:
        out.append(f"LoRA: adapters {', '.join(e.lora.waiting)} wait for a slot (max_lora "
                   f"{e.lora.max_lora if e.lora.max_lora is not None else '?'}, running "
                   f"{', '.join(e.lora.running) or 'none'})")
    loads = {k: v for k, v in e.kv_fetch_by_stage.items() if v}
    if loads:
        out.append("remote KV: " + ", ".join(f"{int(v)} {k.replace('_', ' ')}" for k, v in sorted(loads.items())))
    elif value(cfg.kv_role) in ("kv_consumer", "kv_both"):
        out.append("remote KV: a kv_consumer (its loads by stage are not exported by this release)")
    if not out:
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


def judge(now: float, e: EngineSample, cfg: ServingConfig, snap: Snapshot, history: EngineHistory, how: Judging,
          gauges_only: bool, found: FoundCmdline | None = None) -> EngineReport | EngineGap:
    """The report of engine `e` at `now` (seconds, monotonic), or why its capacity cannot be derived.

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

    prompt = quantile(history.window(now, e, PROMPT_LENGTHS, how.window))
    # Every window follows every scrape; the generated lengths are read only when max_tokens is not exported.
    stated = quantile(history.window(now, e, MAX_TOKENS_LENGTHS, how.window))
    generated = history.window(now, e, GENERATION_LENGTHS, how.window)
    max_tokens = profile_value(stated, quantile(generated) if stated is None else None, max_model_len)
    running = int(e.running or 0)
    waiting = int(e.waiting or 0)
    samples = 0 if prompt is None else prompt.samples
    thin = samples < defaults.PROFILE_MIN_REQUESTS
    finished = e.histograms[PROMPT_LENGTHS].count if PROMPT_LENGTHS in e.histograms else None
    if prompt is None:
        prompt = in_flight_prompt(e.prompt_tokens_total, finished, running, max_model_len)
    hit_share = history.hit_share(e, gauges_only)

    max_num_seqs = admission_cap(cfg, snap)
    gate = admission_inputs(cfg, snap)
    inputs = derive.Inputs(
        num_gpu_blocks=n_blocks,
        block_size=block_size,
        has_null_block=snap.has_engine_label,  # V1 (>= 0.8, engine label) keeps a null block; V0 has none
        usage_counts_null_block=bool(snap.usage_counts_null_block),
        usage=e.usage or 0.0,
        running=running,
        waiting=waiting,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
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
    pool: Pool = derive.pool(inputs)
    decides = capacity_decides(cfg, inputs, pool)
    tracker = history.tracker
    budget = budget_use(cfg, snap, prompt)
    # Prefills completed since the last scrape: the engine is busy prefilling (a one-shot cannot tell).
    before = history.prompt_tokens
    if e.prompt_tokens_total is not None:
        history.prompt_tokens = e.prompt_tokens_total
    prefilling = (not gauges_only and before is not None and e.prompt_tokens_total is not None
                  and e.prompt_tokens_total > before)
    w_max = pool.worst_case_blocks_max_model_len
    obs = Observation(
        running, waiting, None if (d := e.waiting_by_reason.get("deferred")) is None else int(d), e.usage,
        max_num_seqs, e.awake, pool, largest_prompt_blocks(e, max_model_len, block_size),
        finished_total=finished, budget_used=budget.used if budget is not None and prefilling else None,
        max_model_len_exceeds_pool=w_max is not None and w_max > pool.kv_capacity_blocks,
        memory_pressure=under_pressure(pool),
        requests_grow=requests_grow(pool, prompt, max_tokens, hit_share), thin_profile=thin)
    progress = (e.steps_total, e.generation_tokens_total)
    if tracker.restart_if_reset(obs, e.preemptions_total, progress):
        # vLLM restarted: its counters began again at 0; the prefix-hit and prefill baselines go too.
        history.prefix = None
        history.prompt_tokens = None
        obs = replace(obs, budget_used=None)
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
        max_num_seqs = running
        cfg = replace(cfg, max_num_seqs=Known(running, Source.INFERRED))
    headroom = derive.with_slots(pool, max_num_seqs, running)
    held = headroom.held_blocks_per_running
    quality = ProfileQuality(
        samples=samples, basis="none" if prompt is None else prompt.basis,
        span=None if prompt is None else prompt.span, thin=thin,
        stale=held is not None and held > headroom.worst_case_blocks_profile_only,
        held_blocks_per_running=held, window=None if gauges_only else how.window)
    # Built once, with every field (no dataclasses.replace): it is the per-engine hot path of each scrape.
    return EngineReport(
        model_name=e.model_name,
        engine=e.engine,
        verdict=judgement.verdict,
        false_full=false_full,
        slots_inferred=judgement.slots_inferred,
        running=running,
        waiting=waiting,
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
        capacity_decides=decides,
        admission_notes=admission_notes(cfg, snap),
        kv_transfer=kv_transfer(cfg, e),
        deferred_causes=deferred_causes(e, cfg),
        cap_setting=cap_setting(cfg, snap),
    )
