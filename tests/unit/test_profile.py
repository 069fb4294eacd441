"""Windowed length quantiles from bucket deltas, on histograms recorded from the real vLLM."""

from __future__ import annotations

from exporter.pipeline import exposition, profile, vllm
from tests import fixtures


def prompt_hist(text: str) -> vllm.Histogram:
    engine = vllm.read(exposition.parse(text, vllm.WANTED)).engines[0]
    return engine.histograms[vllm.PROMPT_HIST]


FRAMES = fixtures.recording("kv-full").frames  # lifetime: 2,000+ short prompts, then 352-token ones
BEFORE, DURING, AFTER = prompt_hist(FRAMES[0][1]), prompt_hist(FRAMES[12][1]), prompt_hist(FRAMES[-1][1])


def test_window_quantile_counts_only_requests_finished_inside_it() -> None:
    w = profile.Window(60.0)
    w.observe(0.0, BEFORE)
    w.observe(10.0, AFTER)
    assert w.quantile(0.99, 512) == profile.Quantile(500, "window", int(AFTER.count - BEFORE.count))
    assert profile.histogram_quantile(AFTER, 0.5, 512, "lifetime") == profile.Quantile(20, "lifetime", int(AFTER.count))


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
    assert w.quantile(0.99, 512) == profile.Quantile(20, "lifetime", int(BEFORE.count))
    w.observe(20.0, DURING)  # the window starts again from the restart
    assert w.quantile(0.99, 512) == profile.Quantile(500, "window", int(DURING.count - BEFORE.count))


def test_inf_bucket_means_max_model_len() -> None:
    buckets = ((20.0, 0.0), (500.0, 0.0), (float("inf"), 3.0))
    assert profile.histogram_quantile(vllm.Histogram(buckets, 3.0, 0.0), 0.99, 512, "window") == \
        profile.Quantile(512, "window", 3)
    assert profile.histogram_quantile(vllm.Histogram(buckets, 3.0, 0.0), 0.99, None, "window") is None
