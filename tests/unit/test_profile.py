"""Windowed length quantiles from bucket deltas, on histograms recorded from the real vLLM."""

from __future__ import annotations

import math

from exporter.engines import base
from exporter.engines.vllm import VLLM
from exporter.pipeline import exposition, profile
from tests import fixtures


def prompt_hist(text: str) -> base.Histogram:
    engine = VLLM.read(exposition.parse(text, VLLM.wanted)).engines[0]
    return engine.histograms[base.PROMPT_LENGTHS]


FRAMES = fixtures.recording("kv-full").frames  # lifetime: 2,000+ short prompts, then 352-token ones
BEFORE, DURING, AFTER = prompt_hist(FRAMES[0][1]), prompt_hist(FRAMES[12][1]), prompt_hist(FRAMES[-1][1])


def test_window_quantile_counts_only_requests_finished_inside_it() -> None:
    w = profile.Window(60.0)
    w.observe(0.0, BEFORE)
    w.observe(10.0, AFTER)
    # Every request of the window had a 352-token prompt (bucket 200-500): the window's mean is exact.
    assert w.quantile(0.99, 512) == profile.Quantile(352, "window", int(AFTER.count - BEFORE.count), 200, 500, 10.0)
    # Lifetime: 2,000+ prompts of 16 tokens (bucket 10-20) and a few of 352: interpolated inside 10-20.
    q = profile.histogram_quantile(AFTER, 0.5, 512, "lifetime")
    assert q is not None and (q.lower, q.upper, q.basis) == (10, 20, "lifetime") and 10 < q.tokens <= 20


def test_old_snapshots_leave_the_window() -> None:
    w = profile.Window(5.0)
    w.observe(0.0, BEFORE)
    w.observe(10.0, DURING)
    w.observe(20.0, AFTER)
    q = w.quantile(0.99, 512)
    assert q is not None and q.samples == int(AFTER.count - DURING.count)


def test_a_counter_reset_restarts_the_window_instead_of_going_negative() -> None:
    w = profile.Window(60.0)
    w.observe(0.0, AFTER)
    w.observe(10.0, BEFORE)  # vLLM restarted: every bucket went down
    q = w.quantile(0.99, 512)
    assert q is not None and (q.basis, q.samples, q.upper) == ("lifetime", int(BEFORE.count), 20)
    w.observe(20.0, DURING)  # the window starts again from the restart
    assert w.quantile(0.99, 512) == profile.Quantile(352, "window", int(DURING.count - BEFORE.count), 200, 500, 10.0)


def test_inf_bucket_means_max_model_len() -> None:
    buckets = ((20.0, 0.0), (500.0, 0.0), (float("inf"), 3.0))
    assert profile.histogram_quantile(base.Histogram(buckets, 3.0, 0.0), 0.99, 512, "window") == \
        profile.Quantile(512, "window", 3, 500, 512, open_ended=True)
    assert profile.histogram_quantile(base.Histogram(buckets, 3.0, 0.0), 0.99, None, "window") is None


def test_interpolation_inside_a_bucket_carries_its_bounds() -> None:
    # The lifetime histogram of the kv-full recording's end: 2,074 prompts of 16 tokens, 1,110 of 352.
    # Its p99 falls in the 200-500 bucket: the bucket's mean from _sum (the 16-token ones counted at their
    # bucket's midpoint, 15) is 352 +- 10; the bounds say how far a quantile may be off.
    q = profile.histogram_quantile(AFTER, 0.99, 512, "lifetime")
    assert q is not None and (q.lower, q.upper) == (200, 500) and abs(q.tokens - 352) <= 10
    # Only the bucket bound was known before: 500 for a 352-token prompt (16 blocks of 32 instead of 11).
    assert profile.bucket_quantile(AFTER.buckets, 0.999) == 500


def test_a_window_holds_about_the_same_snapshots_at_a_1s_interval_as_at_5s() -> None:
    """Issue 21: the window is bounded in time and, as a backstop, in snapshots, so an engine's memory does not
    grow five times when the interval is 1 s instead of 5 s. Every recorded frame of the kv-full timeline, fed for
    20 minutes (the recording replayed on and on, its counters carried on): at the 5 s default every snapshot is
    kept and every answer is the exact window's; at 1 s the capped window holds at most its cap + 3 snapshots where
    the exact one holds 301, and covers at least the window, at most the window plus the spacing."""
    hists = [prompt_hist(text) for _t, text in FRAMES]
    top = hists[-1]

    def carried(i: int) -> base.Histogram:  # the i-th scrape: the recording's frame on top of earlier passes
        laps, h = divmod(i, len(hists))
        at = hists[h]
        return base.Histogram(tuple((b, c + laps * t) for (b, c), (_b, t) in zip(at.buckets, top.buckets,
                                                                                  strict=True)),
                              at.count + laps * top.count, at.sum + laps * top.sum)

    for interval in (5.0, 1.0):
        capped, exact = profile.Window(300.0), profile.Window(300.0, max_snapshots=0)
        for i in range(int(1200 / interval)):
            now, hist = i * interval, carried(i)
            capped.observe(now, hist)
            exact.observe(now, hist)
            assert len(capped) <= profile.defaults.PROFILE_WINDOW_SNAPSHOTS + 3
            a, b = capped.quantile(0.99, 512), exact.quantile(0.99, 512)
            if interval == 5.0:
                assert a == b
            elif now >= 300.0:
                assert a is not None and b is not None and a.span is not None and b.span is not None
                assert 300.0 <= b.span <= a.span <= 300.0 + capped.spacing + interval and a.samples >= b.samples
        assert len(exact) == (61 if interval == 5.0 else 301)
        assert len(capped) == (61 if interval == 5.0 else 62)


def test_a_window_keeps_its_snapshots_compact() -> None:
    """A 300 s window at the 5 s default holds 60 snapshots per engine and histogram, 100 engines per sidecar: each
    kept as bounds shared with the others and one array of counts (issue 21's soak: the windows filling were the
    sidecar's RSS rise, 0.23 MB per engine as Histograms of pairs)."""
    import tracemalloc

    from exporter.engines.base import Histogram
    bounds = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 32768, math.inf]

    def hist(i: int) -> Histogram:
        return Histogram(tuple((float(b), float(3 * i + k)) for k, b in enumerate(bounds)), 3.0 * i + 16, 100.0 * i)

    windows = [profile.Window(300.0) for _ in range(50)]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for t in range(60):
            for w in windows:
                w.observe(5.0 * t, hist(t))
        per_window = (tracemalloc.get_traced_memory()[0] - base) / len(windows)
    finally:
        tracemalloc.stop()
    assert all(len(w) == 60 for w in windows)
    assert per_window < 40_000, f"{per_window / 1000:.0f} KB per window of 60 snapshots"
    # What it keeps still answers: the window's requests, its quantile over them.
    recent = windows[0].recent()
    assert recent is not None and recent.count == 3 * 59 and recent.buckets[0] == (1.0, 3 * 59)
