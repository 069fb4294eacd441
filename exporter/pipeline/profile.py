"""The request profile: windowed quantiles of vLLM's length histograms, from bucket deltas between scrapes.

vLLM observes these histograms when a request *finishes* (vllm/v1/metrics/loggers.py
`record_finished_request` @0.32.0); its buckets run 1, 2, 5, 10, 20, 50 ... up to max_model_len. A quantile
is interpolated inside the bucket it falls in and carries the bucket's bounds as its uncertainty range
(`lower`, `upper`); when every request of the window fell in that one bucket the window's mean
(`_sum / _count`) is the estimate, exact for a workload of one size. A quantile in the +Inf bucket is
max_model_len (nothing longer can be admitted). `samples` says how many finished requests back it and
`span` over how many seconds (the window actually covered, shorter than the window at start).
"""

from __future__ import annotations

import math
import operator
from array import array
from collections import deque
from dataclasses import dataclass

from ..core import defaults
from ..core.records import quick_init
from ..engines.base import Histogram


@quick_init
@dataclass(frozen=True)
class Quantile:
    """A profile value in tokens, how it was obtained, and from how many requests."""

    tokens: int
    basis: str  # "window" | "lifetime" | "max_model_len"
    samples: int
    lower: int | None = None  # the bucket's bounds around `tokens`: the uncertainty of a bucketed quantile
    upper: int | None = None
    span: float | None = None  # seconds of finished requests behind it ("window"); None: lifetime or unknown
    # In vLLM's +Inf bucket: the histogram says only "longer than the last bound" (`lower`); `tokens` and `upper`
    # are max_model_len, a bound, not a size any request was seen to have.
    open_ended: bool = False


def interpolated_quantile(hist: Histogram, q: float) -> tuple[float, float, float] | None:
    """(estimate, bucket lower bound, bucket upper bound) of quantile q; upper is inf for the +Inf bucket.

    The estimate is the mean of the observations inside the bucket the quantile falls in: the histogram's
    `_sum` less the other buckets' counts at their midpoints, divided by the bucket's count, kept inside its
    bounds (exact when the bucket holds requests of one size, the common case for one workload; linear
    interpolation would put 352-token prompts at 492 and the bucket bound at 500). Linear interpolation when
    the sum is not usable: the +Inf bucket, no `_sum`, or the other buckets' uncertainty (half their widths)
    spread over this bucket's requests exceeds a quarter of its width (a few long requests among many
    short ones: their mean cannot be told apart from the short ones' rounding).
    """
    buckets = hist.buckets
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    # One pass to the bucket, one over the others: the same sums, added in the same order, as lists of every
    # bucket's lower bound and count would give (this runs several times per engine and scrape).
    low, previous = 0.0, 0.0
    for i, (bound, cumulative) in enumerate(buckets):
        inside = cumulative - previous
        if cumulative < rank or inside <= 0:
            low, previous = bound, cumulative
            continue
        if math.isinf(bound):
            return bound, low, bound
        others: float = 0
        error: float = 0  # the others' sum is known to within this
        infinite = False
        lo, before = 0.0, 0.0
        for j, (b, c) in enumerate(buckets):
            n = c - before
            if j != i and n > 0:
                others += n * (lo + b) / 2
                error += n * (b - lo) / 2
                infinite = infinite or math.isinf(b)
            lo, before = b, c
        if hist.sum > 0 and not infinite and error / inside <= (bound - low) / 4:
            mean = (hist.sum - others) / inside
            return min(max(mean, low), bound), low, bound
        return low + (bound - low) * (rank - (cumulative - inside)) / inside, low, bound
    return buckets[-1][0], (buckets[-2][0] if len(buckets) > 1 else 0.0), buckets[-1][0]


def bucket_quantile(buckets: tuple[tuple[float, float], ...], q: float) -> float | None:
    """Upper bound of the first bucket whose cumulative count reaches q of the total (inf for +Inf)."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    for bound, cumulative in buckets:
        if cumulative >= rank:
            return bound
    return buckets[-1][0]


def delta(new: Histogram, old: Histogram) -> Histogram | None:
    """new − old bucket by bucket; None when the counter was reset or the buckets changed."""
    if len(new.buckets) != len(old.buckets) or new.count < old.count:
        return None
    buckets: list[tuple[float, float]] = []
    for (bound, n), (old_bound, o) in zip(new.buckets, old.buckets, strict=True):
        if bound != old_bound or n < o:
            return None
        buckets.append((bound, n - o))
    return Histogram(tuple(buckets), new.count - old.count, new.sum - old.sum)


def to_tokens(bound: float, max_model_len: int | None) -> int | None:
    """A bucket bound as a token count: +Inf (or anything beyond the context) means max_model_len."""
    if math.isinf(bound):
        return max_model_len
    tokens = math.ceil(bound)
    return min(tokens, max_model_len) if max_model_len else tokens


def histogram_quantile(hist: Histogram, q: float, max_model_len: int | None, basis: str,
                       span: float | None = None) -> Quantile | None:
    found = interpolated_quantile(hist, q)
    if found is None:
        return None
    estimate, low, high = found
    tokens = to_tokens(estimate, max_model_len)
    if tokens is None:
        return None
    lower = to_tokens(low, max_model_len) if low > 0 else 0
    return Quantile(tokens, basis, int(hist.count), lower, to_tokens(high, max_model_len), span,
                    open_ended=math.isinf(high))


@dataclass(frozen=True, slots=True)
class _Counts:
    """One cumulative histogram as a window keeps it: its bucket bounds shared with the window's other snapshots,
    its counts in one array of doubles (~0.3 KB for vLLM's 16 buckets, against ~2 KB as a `Histogram` of pairs)."""

    bounds: tuple[float, ...]
    counts: array[float]
    count: float
    sum: float


def _delta(new: _Counts, old: _Counts) -> Histogram | None:
    """`delta` of two kept snapshots: None when the counter was reset or the buckets changed."""
    if new.bounds is not old.bounds and new.bounds != old.bounds:
        return None
    if new.count < old.count or any(n < o for n, o in zip(new.counts, old.counts, strict=True)):
        return None
    return Histogram(tuple(zip(new.bounds, (n - o for n, o in zip(new.counts, old.counts, strict=True)), strict=True)),
                     new.count - old.count, new.sum - old.sum)


_Snapshot = tuple[float, _Counts]  # (seconds, the cumulative histogram then)


class Window:
    """Recent cumulative snapshots of one histogram; quantiles over the requests finished in the window.

    Bounded in time and, as a backstop, in snapshots: the quantiles read only the window's two ends (the newest
    snapshot and the last one at or before `seconds` ago), and the snapshots between them only keep a start at hand
    as time moves on. A snapshot closer than `seconds / max_snapshots` to the one before it gives its place to the
    next, so at most ~`max_snapshots` + 3 are held whatever the scrape interval, and below that spacing the window
    spans between `seconds` and `seconds` plus the spacing (4.7 s of 300 s by default). At a wider interval (the 5 s
    default) every snapshot is kept, as before.
    """

    def __init__(self, seconds: float, max_snapshots: int = defaults.PROFILE_WINDOW_SNAPSHOTS) -> None:
        self.seconds = seconds
        self.spacing = seconds / max_snapshots if max_snapshots > 0 else 0.0
        self._snapshots: deque[_Snapshot] = deque()
        self._newest: Histogram | None = None  # the newest snapshot as observed
        self._bounds: tuple[float, ...] = ()  # the bucket bounds the kept snapshots share
        self._newest_bounds: tuple[float, ...] = ()  # the newest's bucket bounds and cumulative counts
        self._newest_counts: tuple[float, ...] = ()
        # `_windowed`'s last answer and the two ends it was computed from.
        self._memo: tuple[_Snapshot, _Snapshot, tuple[Histogram, float] | None] | None = None

    def observe(self, now: float, hist: Histogram) -> None:
        snapshots = self._snapshots
        buckets = hist.buckets
        bounds, counts = zip(*buckets, strict=True) if buckets else ((), ())  # each bucket is (bound, count)
        newest = self._newest
        if snapshots and (newest is None or not (hist is newest or self._follows(hist, newest, bounds, counts))):
            snapshots.clear()  # counter reset (vLLM restarted): older snapshots no longer subtract
        elif len(snapshots) >= 2 and snapshots[-1][0] - snapshots[-2][0] < self.spacing:
            snapshots.pop()  # closer to the one before it than the spacing: this scrape's takes its place
        if bounds != self._bounds:
            self._bounds = bounds
        snapshots.append((now, _Counts(self._bounds, array("d", counts), hist.count, hist.sum)))
        self._newest = hist
        self._newest_bounds, self._newest_counts = bounds, counts
        # Keep one snapshot at or before the window's start, so the delta spans the whole window.
        while len(snapshots) >= 2 and snapshots[1][0] <= now - self.seconds:
            snapshots.popleft()

    def _follows(self, hist: Histogram, newest: Histogram, bounds: tuple[float, ...],
                 counts: tuple[float, ...]) -> bool:
        """Whether `delta(hist, newest)` is not None (the same buckets, no count fallen), without building the
        difference: from the bounds and counts of both as tuples (the newest's kept from its `observe`), compared by
        C loops."""
        if len(bounds) != len(self._newest_counts) or hist.count < newest.count:
            return False
        return (all(map(operator.eq, bounds, self._newest_bounds))
                and all(map(operator.ge, counts, self._newest_counts)))

    def __len__(self) -> int:
        """Snapshots held."""
        return len(self._snapshots)

    def _windowed(self) -> tuple[Histogram, float] | None:
        """The requests finished in the window and the seconds it spans; None when none did (or one snapshot).
        Several readers ask each scrape (quantiles, lengths): the difference is computed once per pair of ends."""
        if len(self._snapshots) < 2:
            return None
        head, tail = self._snapshots[0], self._snapshots[-1]
        memo = self._memo
        if memo is not None and memo[0] is head and memo[1] is tail:
            return memo[2]
        d = _delta(tail[1], head[1])
        found = None if d is None or d.count <= 0 else (d, tail[0] - head[0])
        self._memo = (head, tail, found)
        return found

    def recent(self) -> Histogram | None:
        """The requests finished in the window (the lifetime histogram when none did)."""
        if not self._snapshots:
            return None
        w = self._windowed()
        return self._newest if w is None else w[0]

    def quantile(self, q: float, max_model_len: int | None) -> Quantile | None:
        """The windowed quantile; falls back to the lifetime histogram when nothing finished in the window."""
        if not self._snapshots:
            return None
        w = self._windowed()
        if w is not None:
            return histogram_quantile(w[0], q, max_model_len, "window", w[1])
        assert self._newest is not None  # a snapshot is kept
        return histogram_quantile(self._newest, q, max_model_len, "lifetime")


def profile_value(
    primary: Quantile | None, fallback: Quantile | None, max_model_len: int | None
) -> Quantile | None:
    """The first known of primary, fallback, max_model_len."""
    if primary is not None:
        return primary
    if fallback is not None:
        return fallback
    if max_model_len is not None:
        return Quantile(max_model_len, "max_model_len", 0)
    return None


@quick_init
@dataclass(frozen=True)
class Lengths:
    """The lengths of the requests a histogram holds: their mean (`_sum / _count`) and the bounds of the buckets
    they fell in (lowest bucket's lower bound, highest bucket's upper bound, +Inf as max_model_len)."""

    mean: float
    lower: int
    upper: int
    samples: int


def lengths(hist: Histogram, max_model_len: int | None) -> Lengths | None:
    """The mean and the bucket range of `hist`'s observations; None when it holds none, or reaches +Inf with
    max_model_len unknown."""
    if hist.count <= 0:
        return None
    previous = 0.0
    lower: float | None = None
    upper = 0.0
    low_bound = 0.0
    for bound, cumulative in hist.buckets:
        if cumulative > previous:
            if lower is None:
                lower = low_bound
            upper = bound
        previous, low_bound = cumulative, bound
    if lower is None:
        return None
    top = to_tokens(upper, max_model_len)
    if top is None:
        return None
    return Lengths(hist.sum / hist.count, int(lower), top, int(hist.count))
