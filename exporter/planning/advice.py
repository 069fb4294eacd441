"""One advice engine behind `diagnose`, the sidecar's diagnosis and `recommend`: what to change, from what to what.

Every piece of advice states the setting, its current value (and where that came from), the direction
(raise, lower, keep, add), the target, the margin it keeps and the reason, so two commands reading the same
exposition cannot disagree, and a decrease never reads as a raise.

Rules, all from one engine's report (`pipeline.report.EngineReport`):
* max_num_seqs: the pool holds `fits = floor(B / W)` requests of the worst case W (profile, floored by what
  requests in flight hold); the advised range is `SHARE_LOW`–`SHARE_HIGH` of `fits`, leaving room for
  longer outliers. A raise is advised only from a profile of at least `RECOMMEND_MIN_REQUESTS` finished
  requests that is neither thin nor stale (issue 11: a raise from the previous workload's profile preceded a
  preemption storm). When even the range's floor is below 1 or 2, the pool is too small for the workload:
  say how much KV capacity to add, or what a shorter max_model_len or an fp8 KV cache gives, instead of
  "max_num_seqs 1".
* max_model_len above the pool (vLLM's "maximum concurrency" below 1): a request of max_model_len can never
  be admitted; lower max_model_len to at most B × bs tokens.
* A budget-bound queue: raise max_num_batched_tokens or cap each prefill's share of the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core import defaults
from ..pipeline import derive
from ..pipeline.config import value
from ..pipeline.report import EngineReport
from ..pipeline.verdict import Verdict

SHARE_LOW, SHARE_HIGH = 0.70, 0.80  # max_num_seqs as a share of the worst-case concurrency the pool allows


@dataclass(frozen=True)
class Advice:
    setting: str  # the vLLM setting (or "kv_capacity", "replicas")
    direction: str  # "raise" | "lower" | "keep" | "add" | "check"
    current: int | str | None
    current_source: str | None
    target: list[int] | int | str | None  # a [low, high] range, a bound, or a value
    margin: str
    reason: str

    def text(self) -> str:
        cur = "unknown" if self.current is None else str(self.current)
        if self.current_source:
            cur += f" ({self.current_source})"
        if isinstance(self.target, list):
            tgt = f"{self.target[0]}-{self.target[1]}" if self.target[0] != self.target[1] else str(self.target[0])
        else:
            tgt = "" if self.target is None else str(self.target)
        if self.direction == "keep":
            head = f"keep {self.setting} at {cur}"
        elif self.direction == "add":
            head = f"add {self.setting}: {tgt}"
        elif self.direction == "check":
            head = f"check {self.setting} (now {cur})"
        else:
            head = f"{self.direction} {self.setting} from {cur} to {tgt}"
        return f"{head}: {self.reason}" + (f" ({self.margin})" if self.margin else "")

    def as_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "direction": self.direction, "current": self.current,
                "current_source": self.current_source, "target": self.target, "margin": self.margin,
                "reason": self.reason, "text": self.text()}


def seqs_range(fits: int) -> tuple[int, int]:
    """`SHARE_LOW`–`SHARE_HIGH` of the worst-case concurrency, at least 1."""
    return max(1, math.floor(SHARE_LOW * fits)), max(1, math.floor(SHARE_HIGH * fits))


def _source(e: EngineReport, name: str) -> str | None:
    known = getattr(e.config, name)
    return None if known is None else str(known.source)


def kv_capacity(e: EngineReport, wanted: int) -> Advice | None:
    """The pool cannot hold `wanted` worst-case requests: what capacity, max_model_len or fp8 KV would.
    None when it already holds them: an action of zero blocks is no action."""
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


def max_num_seqs(e: EngineReport, advisable: bool | None = None) -> Advice | None:
    """The one max_num_seqs advice for an engine (None when max_num_seqs is unknown and nothing binds)."""
    h = e.headroom
    fits = h.max_concurrency_profile
    low, high = seqs_range(fits)
    current = e.max_num_seqs
    setting = e.cap_setting  # max_num_active_seqs where that caps admission below max_num_seqs
    src = _source(e, setting)
    quality = e.profile
    ok = advisable if advisable is not None else (quality is not None and quality.advisable)
    w = h.worst_case_blocks_profile
    margin = (f"{int(100 * SHARE_LOW)}-{int(100 * SHARE_HIGH)} % of the {fits} requests of {w} blocks the pool of "
              f"{h.kv_capacity_blocks} holds")
    if high < 2:
        # "max_num_seqs 1" serves nobody: the pool is too small for the workload's worst case.
        return kv_capacity(e, max(2, current or 2))
    if current is None:
        return Advice(setting, "check", None, None, [low, high], margin,
                      f"{setting} is unknown: supply it to compare")
    if current > high:
        return Advice(setting, "lower", current, src, [low, high], margin,
                      f"{current} slots exceed the {fits} worst-case requests the pool holds: above that vLLM preempts")
    if current >= low:
        return Advice(setting, "keep", current, src, [low, high], margin, "it is inside the safe range")
    if not ok:
        why = _why_not(e)
        return Advice(setting, "keep", current, src, [low, high], margin,
                      f"not advising a raise: {why}")
    # A raise is a step, not a jump to what a large pool would hold: at most double (other limits, e.g. the
    # step's token budget, latency and activation memory, bind before the pool on a large server), and never
    # above max_num_batched_tokens: vLLM refuses max_num_batched_tokens < max_num_seqs
    # (SchedulerConfig._verify_args, vllm/config/scheduler.py @0.32.0).
    capped_low, capped_high, notes = low, high, []
    if capped_high > 2 * current:
        capped_low, capped_high = min(low, 2 * current), 2 * current
        notes.append(f"at most doubled per step: the pool alone would hold {low}-{high}, but latency, activation "
                     "memory and the token budget bind first; raise again once it holds")
    budget_tokens = e.budget.max_num_batched_tokens if e.budget is not None else value(e.config.max_num_batched_tokens)
    if budget_tokens is not None and capped_high > budget_tokens:
        capped_high = budget_tokens
        capped_low = min(capped_low, capped_high)
        notes.append(f"vLLM requires max_num_batched_tokens ({budget_tokens}) >= max_num_seqs")
    if capped_high <= current:
        return Advice(setting, "keep", current, src, [low, high], margin,
                      "not advising a raise: " + "; ".join(notes))
    return Advice(setting, "raise", current, src, [capped_low, capped_high],
                  margin + ("; " + "; ".join(notes) if notes else ""),
                  f"slots bind while the pool holds {fits} requests of the observed worst case")


def _why_not(e: EngineReport) -> str:
    q = e.profile
    if e.gauges_only:
        return ("one observation: its histograms count every request since the server started, of unknown age, so "
                "they cannot show that the current workload is the one they describe (a switch to longer requests "
                "shows only once it preempts); watch it with `serve` for a whole profile window")
    if q is None or q.samples == 0:
        return "no finished request backs the profile"
    if q.stale:
        return (f"requests in flight already hold {q.held_blocks_per_running} blocks each, more than the "
                "profile's worst case: the workload changed")
    if q.thin or q.samples < defaults.RECOMMEND_MIN_REQUESTS:
        span = "" if q.span is None else f" over {q.span:.0f} s"
        return f"the profile has {q.samples} finished requests{span} (fewer than {defaults.RECOMMEND_MIN_REQUESTS})"
    if not q.covers_window:
        return (f"the profile covers {q.span or 0:.0f} s of its {q.window or 0:.0f} s window: a workload that "
                "changes within it would be missed")
    return "the profile is not current"


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
    """Every advice for one engine, most useful first; the verdict decides which apply."""
    out: list[Advice] = []
    too_long = max_model_len_over_pool(e)
    if too_long is not None:
        out.append(too_long)
    if e.verdict is Verdict.BUDGET_FULL:
        out += budget(e)
    seqs = max_num_seqs(e)
    if seqs is not None and (seqs.direction in ("lower", "add") or e.verdict is Verdict.SLOTS_FULL):
        out.append(seqs)
    if e.verdict in (Verdict.KV_FULL, Verdict.PREEMPTING) and not any(a.setting == "kv_capacity" for a in out):
        more = kv_capacity(e, e.max_num_seqs or max(e.running + e.waiting, 2))
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
    order = {"add": 0, "lower": 1, "check": 2, "keep": 3, "raise": 4}
    e, a = min(per, key=lambda x: (order.get(x[1].direction, 2),
                                   x[1].target[1] if isinstance(x[1].target, list) else 0))
    if a.direction == "raise" and not all(x.direction == "raise" for _e, x in per):
        a = next(x for _e, x in per if x.direction != "raise")
    return Advice(a.setting, a.direction, a.current, a.current_source, a.target, a.margin,
                  f"one setting for the {n} data-parallel engines, engine {e.engine} binds: {a.reason}")


def advise_server(e: EngineReport, engines: list[EngineReport]) -> list[Advice]:
    """`advise` for one engine of a server with several (data parallel): the max_num_seqs advice is the server's."""
    own = advise(e)
    peers = [x for x in engines if x.model_name == e.model_name]
    if len(peers) < 2:
        return own
    server = server_max_num_seqs(peers)
    caps = ("max_num_seqs", "max_num_active_seqs")  # the slot cap's setting (EngineReport.cap_setting)
    rest = [a for a in own if a.setting not in caps]
    if server is None or server.setting not in caps:
        return rest
    return [server, *rest]
