"""Why requests wait: a verdict per engine, and the false-full flag, from derived numbers and their history.

`classify` is a pure function of one observation plus the few facts history supplies (did preemptions
rise lately, since when has the engine made no progress, ...); `Tracker` keeps that history per engine.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from ..core import defaults
from .derive import Headroom


class Verdict(StrEnum):
    OK = "ok"
    KV_FULL = "kv_full"
    SLOTS_FULL = "slots_full"
    PREEMPTING = "preempting"
    HEAD_OF_LINE = "head_of_line"
    DEFERRED = "deferred"
    STUCK = "stuck"
    LEAK = "leak"
    TARGET_DOWN = "target_down"


CEILING_WINDOW = defaults.CEILING_WINDOW  # seconds of running counts that stand in for an unknown max_num_seqs

# Verdicts in which requests wait although the pool has room: the panel looks fine, the queue grows.
FALSE_FULL_VERDICTS = frozenset({Verdict.SLOTS_FULL, Verdict.HEAD_OF_LINE, Verdict.DEFERRED, Verdict.STUCK})


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
    deferred: int | None  # vllm:num_requests_waiting_by_reason{reason="deferred"} (≥0.20), else None
    usage: float
    max_num_seqs: int | None
    awake: bool | None
    headroom: Headroom
    largest_prompt_blocks: int | None = None  # blocks of the longest prompt vLLM has finished (bucket bound)


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


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    slots_inferred: bool = False  # slots_full judged from the running plateau, max_num_seqs unknown
    head_of_line_candidate: bool = False  # room by the profile's measure, yet waiting


def classify(o: Observation, h: History, t: Thresholds) -> Judgement:
    """The verdict for one observation."""
    hr = o.headroom
    if h.preempted_recently and (o.running > 0 or o.waiting > 0):
        return Judgement(Verdict.PREEMPTING)
    if o.waiting <= 0:
        if (
            h.idle_with_blocks_for is not None
            and h.idle_with_blocks_for >= t.leak_after
            and hr.kv_used_blocks > 0
            and o.running == 0
        ):
            return Judgement(Verdict.LEAK)
        return Judgement(Verdict.OK)
    if o.awake is False or (h.no_progress_for is not None and h.no_progress_for >= t.stuck_after):
        return Judgement(Verdict.STUCK)
    if o.max_num_seqs is not None and o.running >= o.max_num_seqs:
        return Judgement(Verdict.SLOTS_FULL)
    if o.deferred is not None and o.deferred > 0 and o.deferred >= o.waiting:
        return Judgement(Verdict.DEFERRED)
    head_fits = hr.kv_free_blocks >= hr.prompt_blocks
    if not head_fits or o.usage >= t.full_usage:
        return Judgement(Verdict.KV_FULL)
    if o.max_num_seqs is None and o.running > 0:
        # max_num_seqs unknown: a running count pinned at its recent maximum, or free blocks that would hold
        # even the longest prompt vLLM has seen, point at the slot cap rather than at a large queue head.
        plateau = h.running_ceiling is not None and o.running >= h.running_ceiling and h.waiting_on_previous
        roomy = o.largest_prompt_blocks is not None and o.largest_prompt_blocks <= hr.kv_free_blocks
        if plateau or roomy:
            return Judgement(Verdict.SLOTS_FULL, slots_inferred=True)
    if h.previous is not None and not h.head_of_line_before:
        # Slots and blocks free up between steps: a request seen waiting beside free room once is most
        # likely admitted at the next step. Keep the previous verdict until a second look confirms.
        kept = h.previous if h.previous in _WAITING_VERDICTS else Verdict.OK
        return Judgement(kept, head_of_line_candidate=True)
    return Judgement(Verdict.HEAD_OF_LINE, head_of_line_candidate=True)


_WAITING_VERDICTS = frozenset({Verdict.SLOTS_FULL, Verdict.KV_FULL, Verdict.DEFERRED})


def false_full_condition(o: Observation, verdict: Verdict, t: Thresholds) -> bool:
    """Waiting > 0 while u < threshold and the verdict says the pool is not what holds requests back."""
    return o.waiting > 0 and o.usage < t.full_usage and verdict in FALSE_FULL_VERDICTS


class Tracker:
    """History of one engine across scrapes."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.t = thresholds
        self._last_preemptions: float | None = None
        self._last_preempt_rise: float | None = None
        self._last_progress_value: tuple[float | None, float | None] | None = None
        self._last_progress_at: float | None = None
        self._waiting_prev: bool | None = None
        self._ceiling: deque[tuple[float, int]] = deque()  # (time, running), running decreasing: a sliding max
        self._idle_since: float | None = None
        self._false_full_since: float | None = None
        self._last_time: float | None = None
        self._previous: Verdict | None = None
        self._hol_before = False
        self.preemptions_per_second: float | None = None
        self.seconds_without_progress = 0.0

    def update(
        self,
        now: float,
        o: Observation,
        preemptions_total: float | None,
        progress: tuple[float | None, float | None],
    ) -> tuple[Judgement, bool]:
        """Fold one scrape into the history; return the verdict and the held false-full flag."""
        # Preemptions: a counter; a drop means vLLM restarted.
        rate = None
        if preemptions_total is not None:
            if self._last_preemptions is not None and self._last_time is not None and now > self._last_time:
                rise = preemptions_total - self._last_preemptions
                if rise > 0:
                    self._last_preempt_rise = now
                rate = max(rise, 0.0) / (now - self._last_time) if rise >= 0 else None
            self._last_preemptions = preemptions_total
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
            head_of_line_before=self._hol_before,
        )
        judgement = classify(o, history, self.t)
        self._previous = judgement.verdict
        self._hol_before = judgement.head_of_line_candidate
        self._waiting_prev = o.waiting > 0
        self._last_time = now

        if false_full_condition(o, judgement.verdict, self.t):
            if self._false_full_since is None:
                self._false_full_since = now
        else:
            self._false_full_since = None
        held = self._false_full_since is not None and now - self._false_full_since >= self.t.false_full_hold
        return judgement, held
