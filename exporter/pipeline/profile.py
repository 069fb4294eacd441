"""The request profile: windowed quantiles of vLLM's length histograms, from bucket deltas between scrapes.

vLLM observes these histograms when a request *finishes*; its buckets run 1, 2, 5, 10, 20, 50 ... up to
max_model_len. For worst-case math a quantile is the upper bound of the bucket it falls in, and a quantile
in the +Inf bucket is max_model_len (nothing longer can be admitted).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from .vllm import Histogram


@dataclass(frozen=True)
class Quantile:
    """A profile value in tokens, how it was obtained, and from how many requests."""

    tokens: int
    basis: str  # "window" | "lifetime" | "max_model_len"
    samples: int


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
    if [b for b, _ in new.buckets] != [b for b, _ in old.buckets] or new.count < old.count:
        return None
    buckets = tuple((b, n - o) for (b, n), (_, o) in zip(new.buckets, old.buckets, strict=True))
    if any(c < 0 for _, c in buckets):
        return None
    return Histogram(buckets, new.count - old.count, new.sum - old.sum)


def to_tokens(bound: float, max_model_len: int | None) -> int | None:
    """A bucket bound as a token count: +Inf (or anything beyond the context) means max_model_len."""
    if math.isinf(bound):
        return max_model_len
    tokens = math.ceil(bound)
    return min(tokens, max_model_len) if max_model_len else tokens


def histogram_quantile(hist: Histogram, q: float, max_model_len: int | None, basis: str) -> Quantile | None:
    bound = bucket_quantile(hist.buckets, q)
    if bound is None:
        return None
    tokens = to_tokens(bound, max_model_len)
    return None if tokens is None else Quantile(tokens, basis, int(hist.count))


class Window:
    """Recent cumulative snapshots of one histogram; quantiles over the requests finished in the window."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._snapshots: deque[tuple[float, Histogram]] = deque()

    def observe(self, now: float, hist: Histogram) -> None:
        if self._snapshots and delta(hist, self._snapshots[-1][1]) is None:
            self._snapshots.clear()  # counter reset (vLLM restarted): older snapshots no longer subtract
        self._snapshots.append((now, hist))
        # Keep one snapshot at or before the window's start, so the delta spans the whole window.
        while len(self._snapshots) >= 2 and self._snapshots[1][0] <= now - self.seconds:
            self._snapshots.popleft()

    def quantile(self, q: float, max_model_len: int | None) -> Quantile | None:
        """The windowed quantile; falls back to the lifetime histogram when nothing finished in the window."""
        if not self._snapshots:
            return None
        latest = self._snapshots[-1][1]
        if len(self._snapshots) >= 2:
            d = delta(latest, self._snapshots[0][1])
            if d is not None and d.count > 0:
                return histogram_quantile(d, q, max_model_len, "window")
        return histogram_quantile(latest, q, max_model_len, "lifetime")


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
