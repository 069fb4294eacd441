"""Why requests wait: a verdict per engine, and the false-full flag, from derived numbers and their history.

`classify` is a pure function of one observation plus the few facts history supplies (did preemptions
rise lately, since when has the engine made no progress, ...); `Tracker` keeps that history per engine.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from ..core import defaults
from . import catalogue
from .catalogue import Verdict as Verdict
from .derive import Pool

CEILING_WINDOW = defaults.CEILING_WINDOW  # seconds of running counts that stand in for an unknown max_num_seqs

# Verdicts in which requests wait although the pool has room (the panel looks fine, the queue grows), and those a
# first look at a wait beside room keeps from the previous scrape (preempting is not kept: it holds only on its own
# evidence, the counter or the gauges): the catalogue's families.
FALSE_FULL_VERDICTS = catalogue.FALSE_FULL_VERDICTS
_WAITING_VERDICTS = catalogue.WAITING_VERDICTS


@dataclass(frozen=True)
class Thresholds:
    """Verdict thresholds; defaults in `core.defaults`. Durations in seconds, usage a fraction."""

    full_usage: float = defaults.FULL_USAGE  # at or above: waiting is judged KV-bound; below: false-full candidate
    false_full_hold: float = defaults.FALSE_FULL_HOLD
    stuck_after: float = defaults.STUCK_AFTER
    leak_after: float = defaults.LEAK_AFTER
    preempt_window: float = defaults.PREEMPT_WINDOW


@dataclass(frozen=True)
class Observation:
    """One engine at one scrape, as the verdict sees it."""

    running: int
    waiting: int
    deferred: int | None  # waiting requests by reason "deferred" (vLLM ≥ 0.20), else None
    usage: float
    max_num_seqs: int | None  # stated, or inferred (max_num_seqs_inferred) from the running ceiling
    awake: bool | None
    headroom: Pool  # the pool's figures (those that do not depend on max_num_seqs)
    largest_prompt_blocks: int | None = None  # blocks of the longest prompt vLLM has finished (bucket bound)
    finished_total: float | None = None  # requests finished since start (count of the prompt histogram)
    budget_used: float | None = None  # share of a step one typical prefill takes: prompt / max_num_batched_tokens
    max_model_len_exceeds_pool: bool = False  # one request of max_model_len needs more blocks than the pool
    max_num_seqs_inferred: bool = False
    memory_pressure: bool = False  # oversubscribed (safe headroom < 0) or requests in flight beyond the profile
    requests_grow: bool = True  # running requests are expected to need more blocks than they hold on average
    thin_profile: bool = False  # the worst case is taken at max_model_len for want of finished requests


@dataclass(frozen=True)
class History:
    """What earlier scrapes say; in one-shot diagnosis every field is None/False (gauges only)."""

    preempted_recently: bool = False
    no_progress_for: float | None = None  # seconds without a new engine step
    waiting_on_previous: bool | None = None  # None: no previous scrape
    running_ceiling: int | None = None  # highest running seen lately, stands in for an unknown max_num_seqs
    idle_with_blocks_for: float | None = None
    previous: Verdict | None = None  # the verdict of the previous scrape; None in one-shot diagnosis
    head_of_line_before: bool = False  # the previous scrape already looked like head-of-line blocking
    preemption_inferred: bool = False  # gauges show a preemption the lagging counter has not counted yet
    preempted_now: bool = False  # the counter rose at this scrape
    one_shot: bool = False  # a single observation (diagnose): nothing can be confirmed by a second look
    pool_empty_before: bool = False  # the previous scrape also showed nothing running, requests waiting
    budget_before: bool = False  # the previous scrape also showed prefills filling the token budget


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    slots_inferred: bool = False  # slots_full judged from the running plateau, max_num_seqs unknown
    head_of_line_candidate: bool = False  # room by the profile's measure, yet waiting
    preemption_inferred: bool = False  # preempting judged from the gauges, the counter has not risen yet
    suspected: bool = False  # one observation only: leak / never_fits / preemption need a second look
    first_look: bool = False  # the frame can be transient (between two engine steps); a second look decides


def pool_exhausted(o: Observation) -> bool:
    """No free block while requests that still grow decode and others wait: vLLM's next block allocation
    preempts the newest running request (`_preempt_request`, vllm/v1/core/sched/scheduler.py @0.32.0). A pool
    full of requests that will not grow (a shared cached prefix, short outputs) preempts nobody."""
    return o.waiting > 0 and o.running > 0 and o.headroom.kv_free_blocks == 0 and o.requests_grow


def classify(o: Observation, h: History, t: Thresholds) -> Judgement:
    """The verdict for one observation."""
    hr = o.headroom
    if o.awake is False:
        # Put to sleep on purpose (POST /sleep with --enable-sleep-mode): it steps no more until /wake_up.
        return Judgement(Verdict.SLEEPING)
    # vLLM 0.32.0 counts a preemption when the preempted request's next output is processed (the PREEMPTED
    # event rides on it: vllm/v1/metrics/stats.py `update_from_events`), one or more scrapes late: the
    # gauges (running fell, waiting rose, nothing finished, the pool full) show it first.
    if h.preempted_now or (h.preempted_recently and o.waiting > 0):
        return Judgement(Verdict.PREEMPTING)
    if h.preemption_inferred or pool_exhausted(o):
        return Judgement(Verdict.PREEMPTING, preemption_inferred=True, suspected=h.one_shot)
    if o.waiting <= 0:
        idle_with_blocks = hr.kv_used_blocks > 0 and o.running == 0
        if idle_with_blocks and (h.one_shot or (h.idle_with_blocks_for is not None
                                                and h.idle_with_blocks_for >= t.leak_after)):
            return Judgement(Verdict.LEAK, suspected=h.one_shot)
        return Judgement(Verdict.OK)
    if h.no_progress_for is not None and h.no_progress_for >= t.stuck_after:
        return Judgement(Verdict.STUCK)
    if o.deferred is not None and o.deferred > 0 and o.deferred >= o.waiting:
        # Every waiting request is deferred (LoRA, grammar, KV transfer): a free slot would not admit any of them.
        return Judgement(Verdict.DEFERRED)
    head_fits = hr.head_fits  # free >= the head's blocks, and the watermark beside running requests
    if o.max_num_seqs is not None and o.running >= o.max_num_seqs:
        if o.usage >= t.full_usage or (not o.thin_profile and (not head_fits or o.memory_pressure)):
            # Slots taken and memory binds too: the pool is (nearly) exhausted, or by a profile of finished
            # requests (not by max_model_len, the stand-in of a thin profile) the head would not fit, the running
            # requests will outgrow the pool (safe headroom < 0) or already hold more than the profile (a new
            # workload). A free slot would not help; "a slot, not memory" would be false.
            return Judgement(Verdict.KV_FULL)
        return Judgement(Verdict.SLOTS_FULL, slots_inferred=o.max_num_seqs_inferred)
    if o.running == 0 and hr.kv_used_blocks == 0 and o.max_model_len_exceeds_pool:
        # Nothing runs, the whole pool is free, yet the head is not admitted: it needs more than the pool
        # (possible only when max_model_len exceeds the pool). vLLM >= 0.19 admits the head only if its whole
        # uncached prompt fits (`allocate_slots(..., full_sequence_must_fit=self.scheduler_reserve_full_isl)`,
        # vllm/v1/core/sched/scheduler.py @0.32.0) and stops at it (FCFS). Between steps this can last one
        # scrape, so the sidecar looks twice. vLLM 0.32.0 itself refuses to start a full-attention model whose
        # max_model_len exceeds the pool, even an overridden one (vllm/v1/core/kv_cache_utils.py); hybrid and
        # sliding-window paths and other releases start.
        if h.one_shot or h.pool_empty_before:
            return Judgement(Verdict.NEVER_FITS, suspected=h.one_shot)
        return Judgement(h.previous if h.previous in _WAITING_VERDICTS else Verdict.OK, first_look=True)
    if not head_fits or o.usage >= t.full_usage or (o.memory_pressure and not o.thin_profile):
        # Memory pressure the panel does not show yet (running requests will outgrow the pool, or already hold
        # more than any finished request did: a new workload) binds before a large head or a step's gap would.
        return Judgement(Verdict.KV_FULL)
    if o.budget_used is not None and o.budget_used >= BUDGET_BOUND:
        # Prefills that fill whole steps completed since the last scrape; a second scrape in a row confirms it
        # is the state, not one long prompt that has just been prefilled.
        if h.budget_before:
            return Judgement(Verdict.BUDGET_FULL)
        return Judgement(h.previous if h.previous in _WAITING_VERDICTS else Verdict.OK, first_look=True,
                         head_of_line_candidate=True)
    if o.max_num_seqs is None and o.running > 0 and not h.one_shot:
        # One observation cannot infer a cap: its running count may be any moment of a ramp or a preemption.
        # max_num_seqs unknown: a running count pinned at its recent maximum, or free blocks that would hold
        # even the longest prompt vLLM has seen, point at the slot cap rather than at a large queue head.
        plateau = h.running_ceiling is not None and o.running >= h.running_ceiling and h.waiting_on_previous
        roomy = o.largest_prompt_blocks is not None and o.largest_prompt_blocks <= hr.kv_free_blocks
        if plateau or roomy:
            return Judgement(Verdict.SLOTS_FULL, slots_inferred=True)
    if h.one_shot:
        # One observation of requests waiting beside room: the usual case is a frame between two steps (the
        # engine admits them at the next one). A head larger than the free blocks stays possible.
        return Judgement(Verdict.TRANSIENT, head_of_line_candidate=True, suspected=True, first_look=True)
    if h.previous is not None and not h.head_of_line_before:
        # Slots and blocks free up between steps: a request seen waiting beside free room once is most
        # likely admitted at the next step. Keep the previous verdict until a second look confirms.
        kept = h.previous if h.previous in _WAITING_VERDICTS else Verdict.OK
        return Judgement(kept, head_of_line_candidate=True, first_look=True)
    return Judgement(Verdict.HEAD_OF_LINE, head_of_line_candidate=True)


# Share of a step's token budget one typical prefill takes at or above which requests waiting beside free slots
# and blocks are judged held back by the budget: V1 schedules running requests first and admits waiting ones
# only while budget is left (`while token_budget > 0`, vllm/v1/core/sched/scheduler.py @0.32.0); a prefill of
# the whole budget leaves none.
BUDGET_BOUND = 1.0



def false_full_condition(o: Observation, verdict: Verdict, t: Thresholds) -> bool:
    """Waiting > 0 while u < threshold and the verdict says the pool is not what holds requests back.

    Not while the pool is under memory pressure the panel does not show yet: running requests that would
    outgrow it (safe headroom < 0) or that already hold more than the profile's worst case (a new workload,
    preemption ahead) make memory a limit too, so the panel's low usage is not "false"."""
    return (o.waiting > 0 and o.usage < t.full_usage and verdict in FALSE_FULL_VERDICTS
            and not o.memory_pressure)


def gauges_show_preemption(running: int, waiting: int, finished: float | None, prev_running: int | None,
                            prev_waiting: int | None, prev_finished: float | None) -> bool:
    """Running fell and waiting rose while no request finished: a running request went back to the queue.

    New arrivals raise waiting and finishes or aborts lower running, but only a preemption moves a request
    from running to waiting (vLLM 0.32.0 `_preempt_request` prepends it to the waiting queue)."""
    if prev_running is None or prev_waiting is None or finished is None or prev_finished is None:
        return False
    return running < prev_running and waiting > prev_waiting and finished == prev_finished


class Tracker:
    """History of one engine across scrapes."""

    def __init__(self, thresholds: Thresholds, one_shot: bool = False) -> None:
        self.t = thresholds
        self.one_shot = one_shot
        self._clear()

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
        self._last_time: float | None = None
        self._previous: Verdict | None = None
        self._hol_before = False
        self._pool_empty_before = False
        self._budget_before = False
        self.preemptions_per_second: float | None = None
        self.seconds_without_progress = 0.0
        self._busy: deque[tuple[float, int]] = deque()  # (time, running) while requests waited: a sliding max
        self.busy_ceiling: int | None = None  # highest running seen while requests waited, over CEILING_WINDOW
        self.busy_frames = 0  # scrapes with requests waiting inside that window

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
        """Fold one scrape into the history; return the verdict and the held false-full flag."""
        self.restart_if_reset(o, preemptions_total, progress)
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
        if progress != self._last_progress_value or self._last_progress_at is None or nothing_to_do:
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

        history = History(
            preempted_recently=preempted,
            no_progress_for=no_progress,
            waiting_on_previous=self._waiting_prev,
            running_ceiling=ceiling,
            idle_with_blocks_for=None if self._idle_since is None else now - self._idle_since,
            previous=self._previous,
            # A request finished since the last scrape: who runs and who heads the queue may have changed, so a
            # wait beside room needs a new second look.
            head_of_line_before=self._hol_before and not self._finished_since(o),
            preemption_inferred=inferred,
            preempted_now=rose,
            one_shot=self.one_shot,
            pool_empty_before=self._pool_empty_before,
            budget_before=self._budget_before,
        )
        judgement = classify(o, history, self.t)
        if judgement.verdict is Verdict.PREEMPTING and not judgement.preemption_inferred:
            # Still inside the window: inferred when the gauges showed it after the counter last rose.
            counted, guessed = self._last_counted_rise, self._last_inferred
            if guessed is not None and (counted is None or guessed > counted):
                judgement = replace(judgement, preemption_inferred=True, suspected=self.one_shot)
        self._previous = judgement.verdict
        self._hol_before = judgement.head_of_line_candidate
        self._pool_empty_before = o.running == 0 and o.waiting > 0 and o.headroom.kv_used_blocks == 0
        self._budget_before = o.waiting > 0 and o.budget_used is not None and o.budget_used >= BUDGET_BOUND
        self._waiting_prev = o.waiting > 0
        self._prev = (o.running, o.waiting, o.finished_total)
        self._last_time = now

        if false_full_condition(o, judgement.verdict, self.t):
            if self._false_full_since is None:
                self._false_full_since = now
        elif not judgement.first_look:
            self._false_full_since = None
        # A frame that can be transient (a second look is pending) is never flagged; it does not restart the hold.
        held = (self._false_full_since is not None and now - self._false_full_since >= self.t.false_full_hold
                and not judgement.first_look)
        return judgement, held
