"""The probe's plan, prediction, observations and capacity ledger: pure functions, no I/O.

A probe sends requests of one stated shape (prompt P tokens, exactly M output tokens with `ignore_eos`) from c
closed-loop clients, for c rising step by step, and scrapes /metrics at each step. The queue *forms* at the first
step whose scrapes mostly show requests waiting; what *ran* is the highest running count seen.

The prediction is the pipeline's own: `derive.pool` for the stated P and M on the engine's resolved config (the
worst case W = ceil(min(P + M, L) / bs) per request, floor(B / W) requests at once), capped by max_num_seqs.
The queue is predicted to form one request past that. vLLM's own `kv_cache_max_concurrency` (requests of
max_model_len, 0.24+) is shown beside it, not used.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..core import defaults
from ..engines.base import FULL_PROMPT
from ..pipeline import derive
from ..pipeline.config import value
from ..pipeline.report import EngineReport, TargetReport

# -- the plan ----------------------------------------------------------------------------------------------


def parse_ramp(text: str) -> tuple[int, ...] | None:
    """`START:STOP[:STEP]` or `A,B,C` as rising concurrency steps; `auto` (None) to derive them from the
    prediction. Raises ValueError with one sentence."""
    text = text.strip()
    if text == "auto":
        return None
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            start, stop, step = parts[0], parts[1], parts[2] if len(parts) == 3 else 1
            if step < 1 or stop < start:
                raise ValueError
            steps = tuple(range(start, stop + 1, step))
        else:
            steps = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ValueError(f"{text!r} is not a concurrency ramp such as 1:12, 1:32:4 or 2,4,8,9,10") from None
    if not steps or steps[0] < 1 or any(b <= a for a, b in itertools.pairwise(steps)):
        raise ValueError(f"{text!r} must rise from at least 1, e.g. 1:12 or 2,4,8")
    return steps


def auto_ramp(predicted: int, limit: int = defaults.PROBE_AUTO_STEPS) -> tuple[int, ...]:
    """Steps that find a queue at or around `predicted` requests: 1 .. predicted + 2 one by one while that is at
    most `limit` steps, else `limit` steps spread up to 1.25 × predicted + 2 that include predicted and the step
    after it."""
    top = predicted + 2
    if top <= limit:
        return tuple(range(1, top + 1))
    top = math.ceil(1.25 * predicted) + 2
    spread = {max(1, round(1 + i * (top - 1) / (limit - 3))) for i in range(limit - 2)}
    return tuple(sorted(spread | {predicted, predicted + 1}))


@dataclass(frozen=True)
class Plan:
    """What the probe will send and watch."""

    url: str
    model: str | None  # the served model name to ask for; None: the first of /v1/models
    prompt_tokens: int
    max_tokens: int
    ramp: tuple[int, ...] | None  # None: auto, from the prediction
    max_requests: int = defaults.PROBE_MAX_REQUESTS
    step_scrapes: int = defaults.PROBE_STEP_SCRAPES
    step_interval: float = defaults.PROBE_STEP_INTERVAL  # s
    step_settle: float = defaults.PROBE_STEP_SETTLE  # s
    prompt_kind: str = "auto"  # "auto" | "token_ids" | "text"


# -- the prediction ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnginePrediction:
    """One engine's capacity ledger and what the pipeline predicts for the plan's requests."""

    model_name: str
    engine: str
    num_gpu_blocks: int
    usable_blocks: int
    block_size: int
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_seqs_source: str | None
    prompt_blocks: int  # free blocks the queue head needs to be admitted (the release's admission rule)
    worst_case_blocks: int  # W for the stated prompt + max_tokens
    kv_concurrency: int  # floor(B / W)
    kv_cache_max_concurrency: float | None  # vLLM's own, for max_model_len requests (0.24+)

    @property
    def max_concurrency(self) -> int:
        """min(max_num_seqs, floor(B / W)); the KV figure alone when max_num_seqs is unknown."""
        return self.kv_concurrency if self.max_num_seqs is None else min(self.max_num_seqs, self.kv_concurrency)

    @property
    def binding(self) -> str:
        """Which limit the prediction rests on: "slots", "blocks", or "slots and blocks" when they are equal."""
        if self.max_num_seqs is None or self.kv_concurrency < self.max_num_seqs:
            return "blocks"
        return "slots" if self.max_num_seqs < self.kv_concurrency else "slots and blocks"


@dataclass(frozen=True)
class Prediction:
    """The whole server: one prediction per engine (data-parallel engines each take a share of the load)."""

    engines: tuple[EnginePrediction, ...]
    prompt_tokens: int
    max_tokens: int

    @property
    def max_concurrency(self) -> int:
        return sum(e.max_concurrency for e in self.engines)

    @property
    def queue_point(self) -> int:
        """The concurrency at which a request is predicted to wait: one past what fits at once."""
        return self.max_concurrency + 1

    @property
    def slots_known(self) -> bool:
        return all(e.max_num_seqs is not None for e in self.engines)


class PlanRefused(ValueError):
    """The plan cannot be run against this server (one sentence): a prompt vLLM would reject, no capacity."""


def predict(report: TargetReport, prompt_tokens: int, max_tokens: int) -> Prediction:
    """The pipeline's prediction for requests of `prompt_tokens` + `max_tokens` on every engine of `report`.

    Raises PlanRefused when an engine's capacity cannot be derived or vLLM would refuse the requests."""
    if not report.engines:
        why = report.gaps[0].explanation if report.gaps else "the server reports no engine"
        raise PlanRefused(f"{report.url}: {why}")
    rules = report.rules  # the release's rules the pipeline judged with (V1 keeps a null block)
    null = rules.has_null_block if rules is not None else True
    counts_null = bool(rules.usage_counts_null_block) if rules is not None else False
    admission = rules.admission if rules is not None else FULL_PROMPT
    return Prediction(tuple(_predict_engine(e, null, counts_null, admission, prompt_tokens, max_tokens)
                            for e in report.engines), prompt_tokens, max_tokens)


def _predict_engine(e: EngineReport, has_null_block: bool, counts_null: bool, admission: str,
                    prompt: int, max_tokens: int) -> EnginePrediction:
    cfg = e.config
    n = value(cfg.num_gpu_blocks)
    bs = value(cfg.block_size)
    length = value(cfg.max_model_len)
    assert n is not None and bs is not None  # an EngineReport exists only with both known (judge.judge)
    if length is not None and prompt >= length:
        raise PlanRefused(f"--prompt-tokens {prompt} is not below max_model_len {length}: vLLM rejects such a "
                          "request")
    if length is not None and prompt + max_tokens > length:
        raise PlanRefused(f"--prompt-tokens {prompt} + --max-tokens {max_tokens} exceed max_model_len {length}: "
                          "vLLM rejects such a request (or, from 0.32, shortens its output), so the lengths would "
                          "not be the ones stated")
    pool = derive.pool(derive.Inputs(
        num_gpu_blocks=n, block_size=bs, has_null_block=has_null_block, usage_counts_null_block=counts_null,
        usage=0.0, running=0, waiting=0, max_model_len=length, max_num_seqs=None, prompt_tokens=prompt,
        max_tokens=max_tokens, kv_cache_max_concurrency=value(cfg.kv_cache_max_concurrency),
        kv_cache_size_tokens=value(cfg.kv_cache_size_tokens), admission_rule=admission,
        max_num_batched_tokens=value(cfg.max_num_batched_tokens)))
    if pool.prompt_blocks > pool.kv_capacity_blocks:
        raise PlanRefused(f"a prompt of {prompt} tokens needs {pool.prompt_blocks} blocks, the pool has "
                          f"{pool.kv_capacity_blocks}: vLLM would never admit it")
    seqs = cfg.max_num_seqs
    return EnginePrediction(
        model_name=e.model_name, engine=e.engine, num_gpu_blocks=n, usable_blocks=pool.kv_capacity_blocks,
        block_size=bs, max_model_len=length, max_num_seqs=None if seqs is None else seqs.value,
        max_num_seqs_source=None if seqs is None else str(seqs.source), prompt_blocks=pool.prompt_blocks,
        worst_case_blocks=pool.worst_case_blocks_profile, kv_concurrency=pool.max_concurrency_profile,
        kv_cache_max_concurrency=value(cfg.kv_cache_max_concurrency))


# -- what each step showed ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """One scrape during a step, summed over the server's engines; the verdict is the pipeline's."""

    running: int
    waiting: int
    free_blocks: int | None
    preemptions_total: float | None
    verdict: str | None


@dataclass(frozen=True)
class Step:
    """One concurrency step: its frames and how the engine took it."""

    concurrency: int
    frames: tuple[Frame, ...]
    held: bool  # the engine held all `concurrency` requests at once (running + waiting) before the frames
    preemptions: float | None  # preemptions during the step (vLLM's counter)

    @property
    def running(self) -> int:
        return max((f.running for f in self.frames), default=0)

    @property
    def waiting(self) -> int:
        return max((f.waiting for f in self.frames), default=0)

    @property
    def free_blocks(self) -> int | None:
        free = [f.free_blocks for f in self.frames if f.free_blocks is not None]
        return min(free) if free else None

    @property
    def queued(self) -> bool:
        """A queue formed: requests waited while the engine never ran all of the step's requests at once. A wait of
        a step or two beside room (a prefill chunk took the token budget) leaves the engine running them all in
        another scrape; clients between two requests wait nowhere, so a share of scrapes would count them."""
        return any(f.waiting > 0 for f in self.frames) and self.running < self.concurrency

    @property
    def verdict(self) -> str | None:
        """The pipeline's most frequent verdict while requests waited in the step (else over all its scrapes)."""
        waited = [f for f in self.frames if f.waiting > 0] or list(self.frames)
        if not waited:
            return None
        return Counter(f.verdict for f in waited).most_common(1)[0][0]


@dataclass(frozen=True)
class Ledger:
    """Theory beside what ran: within 20 % normal, beyond 50 % misconfigured, between: look closer."""

    theoretical: int
    observed: int
    slots_known: bool = True  # max_num_seqs known: else `theoretical` is the blocks' figure alone

    @property
    def undecided(self) -> bool:
        """Fewer ran than the blocks allow while max_num_seqs is unknown: max_num_seqs may be exactly what bound
        them (a gap of 0) or above the blocks' figure (the whole gap), so the gap judges nothing."""
        return not self.slots_known and self.observed < self.theoretical

    @property
    def gap(self) -> float:
        """(theoretical − observed) / theoretical: positive when fewer ran than the theory says."""
        return (self.theoretical - self.observed) / self.theoretical if self.theoretical else 0.0

    @property
    def judgement(self) -> str:
        if self.undecided:
            return "undecided"
        g = abs(self.gap)
        if g <= defaults.LEDGER_NORMAL_GAP:
            return "normal"
        if g > defaults.LEDGER_MISCONFIGURED_GAP:
            return "misconfigured"
        return "look_closer"

    def sentence(self) -> str:
        pct = f"{100 * self.gap:+.0f} %"
        if self.undecided:
            return (f"undecided: max_num_seqs decides it and is unknown (not exported): if it is {self.observed}, "
                    f"the slots bound what ran and the gap is 0 %; if it is {self.theoretical} or more, the gap is "
                    f"{pct}; pass --max-num-seqs or --vllm-args")
        if self.judgement == "normal":
            return (f"gap {pct}: within {100 * defaults.LEDGER_NORMAL_GAP:.0f} %, normal: the configuration is "
                    "what limits")
        if self.judgement == "misconfigured":
            return (f"gap {pct}: beyond {100 * defaults.LEDGER_MISCONFIGURED_GAP:.0f} %, something is "
                    "misconfigured: check max_num_seqs, the block size vLLM really uses and the lengths the "
                    "server really saw")
        return (f"gap {pct}: more than {100 * defaults.LEDGER_NORMAL_GAP:.0f} %: look at fragmentation (blocks "
                "a request holds beyond its tokens) or at what the metric counts")


@dataclass(frozen=True)
class Outcome:
    """A finished (or stopped) probe."""

    plan: Plan
    ramp: tuple[int, ...]
    prediction: Prediction
    model: str
    prompt_kind: str  # "token_ids" | "text"
    steps: tuple[Step, ...] = ()
    sent: int = 0
    failed: int = 0
    stopped: str | None = None  # None, "max_requests", "interrupted" or "failed" (the server kept failing)
    notes: tuple[str, ...] = field(default=())
    void_from: int | None = None  # "failed": the concurrency of the step from which the result is void
    void_error: str | None = None  # "failed": the error, one sentence

    @property
    def observed_max_concurrency(self) -> int | None:
        return max((s.running for s in self.steps), default=None)

    @property
    def observed_queue_point(self) -> int | None:
        """The first step at which a queue formed; None when none did."""
        return next((s.concurrency for s in self.steps if s.queued), None)

    @property
    def ledger(self) -> Ledger | None:
        """The ledger once a queue formed (the limit was reached); None while the ramp stayed below it."""
        seen = self.observed_max_concurrency
        if self.observed_queue_point is None or seen is None:
            return None
        return Ledger(self.prediction.max_concurrency, seen, self.prediction.slots_known)


@dataclass(frozen=True)
class Budget:
    """The requests a ramp needs beside --max-requests. Closed-loop clients send one request after another, so
    what a step sends depends on how long a request takes, which nothing tells before the load: at least one per
    client over the whole ramp (every request outlasts it), one per client per step when a request lasts about a
    step, more when it is shorter."""

    ramp: tuple[int, ...]
    max_requests: int
    queue_point: int

    @property
    def at_least(self) -> int:
        return max(self.ramp, default=0)

    @property
    def to_point(self) -> int:
        """One request per client per step up to the first step at or past the predicted queue point."""
        total = 0
        for c in self.ramp:
            total += c
            if c >= self.queue_point:
                break
        return total

    @property
    def whole(self) -> int:
        """One request per client per step over the whole ramp."""
        return sum(self.ramp)


def budget_lines(plan: Plan, ramp: tuple[int, ...], prediction: Prediction) -> list[str]:
    b = Budget(ramp, plan.max_requests, prediction.queue_point)
    watch = plan.step_scrapes * plan.step_interval
    lines = [f"  requests the ramp needs: at least {b.at_least} (one per client); at one request per client per "
             f"step (a request lasting a step, {watch:g} s of scrapes or more) {b.to_point} to reach the predicted "
             f"queue point {prediction.queue_point} and {b.whole} for the whole ramp; shorter requests need more"]
    if plan.max_requests < b.to_point:
        lines.append(f"  --max-requests {plan.max_requests} runs out before the predicted queue point unless "
                     f"requests outlast a step: raise --max-requests to at least {b.to_point} ({b.whole} for the "
                     "whole ramp)")
    elif plan.max_requests < b.whole:
        lines.append(f"  --max-requests {plan.max_requests} may run out before the top step ({max(ramp)} clients), "
                     f"and before the predicted queue point if requests are shorter than a step: raise "
                     f"--max-requests to {b.whole} or more")
    return lines


# -- presenting ----------------------------------------------------------------------------------------------


def _ledger_lines(p: Prediction) -> list[str]:
    lines = []
    for e in p.engines:
        seqs = "unknown (not exported; pass --max-num-seqs or --vllm-args)" if e.max_num_seqs is None else \
            f"{e.max_num_seqs} ({e.max_num_seqs_source})"
        own = "" if e.kv_cache_max_concurrency is None else \
            f"; vLLM's own kv_cache_max_concurrency {e.kv_cache_max_concurrency:g} (max_model_len requests)"
        lines += [
            f"  engine {e.engine} ({e.model_name}): {e.num_gpu_blocks} blocks ({e.usable_blocks} usable) of "
            f"{e.block_size} tokens, max_model_len {e.max_model_len or 'unknown'}, max_num_seqs {seqs}",
            f"    lengths: prompt {p.prompt_tokens} + output {p.max_tokens} tokens (stated, ignore_eos): "
            f"{e.prompt_blocks} blocks to be admitted, W = {e.worst_case_blocks} blocks at the end",
            f"    theoretical concurrency {e.max_concurrency} = "
            + (f"min(max_num_seqs {e.max_num_seqs}, " if e.max_num_seqs is not None else "")
            + f"floor({e.usable_blocks} / {e.worst_case_blocks}) = {e.kv_concurrency}"
            + (")" if e.max_num_seqs is not None else "") + f", {e.binding} bind{own}",
        ]
    return lines


def render_plan(plan: Plan, ramp: tuple[int, ...], prediction: Prediction, model: str, prompt_kind: str) -> str:
    """The dry run: what would be sent, and what the pipeline predicts."""
    kind = "token ids (the server skips its tokenizer)" if prompt_kind == "token_ids" else \
        "text calibrated with the server's /tokenize"
    lines = [
        f"probe plan for {plan.url} (model {model}): nothing is sent without --yes",
        f"  requests: prompt {plan.prompt_tokens} tokens as {kind}, max_tokens {plan.max_tokens} with ignore_eos; "
        f"each request its own prefix (no prefix-cache sharing)",
        f"  ramp: {len(ramp)} steps of closed-loop clients: {', '.join(str(c) for c in ramp)}",
        f"  per step: wait up to {plan.step_settle:g} s for the engine to hold every request, then "
        f"{plan.step_scrapes} scrapes of /metrics {plan.step_interval:g} s apart",
        f"  at most {plan.max_requests} requests in all (--max-requests); Ctrl-C stops and cancels what was sent",
        *budget_lines(plan, ramp, prediction),
        "capacity ledger (before the load):",
        *_ledger_lines(prediction),
        f"  predicted: at most {prediction.max_concurrency} running at once; the queue forms at concurrency "
        f"{prediction.queue_point}",
    ]
    return "\n".join(lines)


def render(o: Outcome) -> str:
    """The probe's result: one line per step, then the queue point and the ledger against the prediction."""
    p = o.prediction
    lines = [f"probe of {o.plan.url} (model {o.model}): prompt {p.prompt_tokens} + output {p.max_tokens} tokens, "
             f"{o.sent} requests sent" + (f", {o.failed} failed" if o.failed else ""),
             f"  {'step':>4} {'clients':>7} {'running':>7} {'waiting':>7} {'free blocks':>11} {'preemptions':>11}"
             "  queue  verdict"]
    for i, s in enumerate(o.steps, 1):
        free = "?" if s.free_blocks is None else str(s.free_blocks)
        pre = "?" if s.preemptions is None else f"{s.preemptions:g}"
        held = "" if s.held else "  (the engine never held all of them at once)"
        lines.append(f"  {i:>4} {s.concurrency:>7} {s.running:>7} {s.waiting:>7} {free:>11} {pre:>11}  "
                     f"{'yes' if s.queued else 'no':<5}  {s.verdict or '?'}{held}")
    if o.stopped == "max_requests":
        lines.append(f"  stopped: the budget of --max-requests {o.plan.max_requests} was spent")
    elif o.stopped == "interrupted":
        lines.append("  stopped: interrupted (Ctrl-C); the requests in flight were cancelled")
    elif o.stopped == "failed":
        lines.append(f"  stopped: the result is void from the step of {o.void_from} clients on: {o.void_error}"
                     + ("; the steps above were seen before it" if o.steps else ""))
    queue = o.observed_queue_point
    tried = o.steps[-1].concurrency if o.steps else 0
    lines.append(("queue formed at concurrency " + str(queue)) if queue is not None else
                 f"no queue formed up to concurrency {tried}")
    lines.append(f"  predicted: the queue forms at {p.queue_point}; at most {p.max_concurrency} run at once"
                 + ("" if p.slots_known else " (blocks only: max_num_seqs unknown)"))
    lines.append(f"  observed: at most {o.observed_max_concurrency or 0} ran at once")
    lines.append("capacity ledger:")
    lines += _ledger_lines(p)
    ledger = o.ledger
    if ledger is not None:
        lines.append(f"  theoretical {ledger.theoretical} beside {ledger.observed} that ran: {ledger.sentence()}")
    elif o.stopped == "max_requests":
        done = len(o.steps)
        need = round(o.sent * sum(o.ramp) / max(1, sum(o.ramp[:done + 1])))
        lines.append(f"  the budget of --max-requests {o.plan.max_requests} ran out after {done} of {len(o.ramp)} "
                     f"steps, before any queue formed (predicted at {p.queue_point}): raise --max-requests to about "
                     f"{max(need, o.plan.max_requests + 1)} to finish the ramp")
    elif o.steps and o.stopped is None:
        lines.append(f"  the ramp stayed below the limit (top step {tried}): raise --concurrency to reach it")
    lines += [f"note: {n}" for n in o.notes]
    return "\n".join(lines)


def as_json(o: Outcome) -> dict[str, Any]:
    p = o.prediction
    ledger = o.ledger
    return {
        "target": o.plan.url, "model": o.model, "prompt_kind": o.prompt_kind,
        "prompt_tokens": p.prompt_tokens, "max_tokens": p.max_tokens, "ramp": list(o.ramp),
        "requests_sent": o.sent, "requests_failed": o.failed, "max_requests": o.plan.max_requests,
        "stopped": o.stopped,
        "void": None if o.void_from is None else {"from_concurrency": o.void_from, "error": o.void_error},
        "steps": [{"concurrency": s.concurrency, "running": s.running, "waiting": s.waiting,
                   "free_blocks": s.free_blocks, "preemptions": s.preemptions, "queued": s.queued,
                   "held": s.held, "verdict": s.verdict,
                   "frames": [f.__dict__ for f in s.frames]} for s in o.steps],
        "predicted": {"max_concurrency": p.max_concurrency, "queue_point": p.queue_point,
                      "engines": [{**e.__dict__, "max_concurrency": e.max_concurrency, "binding": e.binding}
                                  for e in p.engines]},
        "observed": {"max_concurrency": o.observed_max_concurrency, "queue_point": o.observed_queue_point},
        "ledger": None if ledger is None else {"theoretical": ledger.theoretical, "observed": ledger.observed,
                                               "gap_ratio": None if ledger.undecided else round(ledger.gap, 4),
                                               "judgement": ledger.judgement, "sentence": ledger.sentence()},
        "requests_needed": _needed(Budget(o.ramp, o.plan.max_requests, p.queue_point)),
        "notes": list(o.notes),
    }


def _needed(b: Budget) -> dict[str, int]:
    """At least one per client; one per client per step to the predicted queue point and over the whole ramp."""
    return {"at_least": b.at_least, "to_queue_point_one_per_step": b.to_point, "whole_ramp_one_per_step": b.whole}


def plan_json(plan: Plan, ramp: tuple[int, ...], prediction: Prediction, model: str,
              prompt_kind: str) -> dict[str, Any]:
    o = Outcome(plan, ramp, prediction, model, prompt_kind)
    doc = as_json(o)
    doc["dry_run"] = True
    return doc
