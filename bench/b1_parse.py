"""Benchmark 1: parse + derive per scrape vs prometheus_client's text parser, on the same bytes, side by side.

For each shape (bench/shapes.py) a handful of real timeline frames (values change frame to frame, label sets
repeat, as between two scrapes) are built once; then rounds alternate: our `exposition.parse` alone, our
whole `Target.observe` (parse + read + derive + verdict), our parse with a cold label cache (the first scrape
of a target), and `list(text_string_to_metric_families(text))`. CPU time is `time.process_time`; each figure
is the median of the rounds, so a burst of load from other processes on the machine hits both sides alike.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exporter.engines.vllm import metrics as vllm
from exporter.pipeline import exposition
from exporter.pipeline.target import Settings, Target
from exporter.replay import recording as replay

from .common import FIXTURES, VLLM_ARGS, loadavg, quick, save
from .shapes import SHAPES, build

GOAL_RATIO = 20.0
GOAL_MS = 2.0


def _cpu_per_call(fn: Callable[[str], object], texts: list[str], budget_s: float) -> float:
    """CPU seconds per call of fn, cycling through texts for about budget_s of CPU (at least one pass)."""
    calls, started = 0, time.process_time()
    while True:
        for text in texts:
            fn(text)
            calls += 1
        spent = time.process_time() - started
        if spent >= budget_s:
            return spent / calls


def measure(shape: str, frames: list[str], rounds: int, budget_s: float,
            vllm_args: list[str] | None = None) -> dict[str, float]:
    texts = [build(shape, f) for f in frames]
    target = Target(Settings("http://bench", vllm_args=vllm_args or VLLM_ARGS.split(), discover_cmdline=False))
    clock = [0.0]

    def observe(text: str) -> object:
        clock[0] += 1.0
        return target.observe(clock[0], text)

    def parse(text: str) -> object:
        return exposition.parse(text, vllm.WANTED)

    def parse_cold(text: str) -> object:
        exposition._label_cache.clear()  # the first scrape of a target: every label set is new
        getattr(exposition, "_line_cache", {}).clear()  # and every sample line
        return exposition.parse(text, vllm.WANTED)

    def prom(text: str) -> object:
        return list(text_string_to_metric_families(text))

    for fn in (observe, parse, prom):  # warm-up: caches, histogram windows, imports
        fn(texts[0])
    runs: dict[str, list[float]] = {"observe": [], "parse": [], "parse_cold": [], "prometheus_client": []}
    for _ in range(rounds):
        runs["observe"].append(_cpu_per_call(observe, texts, budget_s))
        runs["parse"].append(_cpu_per_call(parse, texts, budget_s))
        runs["parse_cold"].append(_cpu_per_call(parse_cold, texts, budget_s))
        runs["prometheus_client"].append(_cpu_per_call(prom, texts, budget_s))
    exposition._label_cache.clear()
    getattr(exposition, "_line_cache", {}).clear()
    med = {k: statistics.median(v) for k, v in runs.items()}
    size = sum(map(len, texts)) / len(texts)
    return {
        "bytes": size,
        "ours_observe_ms": 1000 * med["observe"],
        "ours_parse_ms": 1000 * med["parse"],
        "ours_parse_cold_ms": 1000 * med["parse_cold"],
        "prometheus_client_ms": 1000 * med["prometheus_client"],
        "ratio_observe": med["prometheus_client"] / med["observe"],
        "ratio_parse": med["prometheus_client"] / med["parse"],
        "ratio_parse_cold": med["prometheus_client"] / med["parse_cold"],
        "ours_observe_mb_s": size / med["observe"] / 1e6,
        "prometheus_client_mb_s": size / med["prometheus_client"] / 1e6,
    }


def main() -> None:
    load_before = loadavg()
    rec = replay.load(Path(FIXTURES / "false-full"))
    every = max(1, len(rec.frames) // 8)
    frames = [text for _, text in rec.frames[::every]][:8]
    rounds, budget = (3, 0.1) if quick() else (7, 0.4)
    results: dict[str, dict[str, float]] = {}
    for shape in SHAPES:
        per = frames if shape == "1x" else frames[:3]
        results[shape] = measure(shape, per, rounds, budget if shape != "5MB" else 2 * budget)
        r = results[shape]
        print(f"{shape:9s} {r['bytes'] / 1e3:8.0f} KB  observe {r['ours_observe_ms']:8.3f} ms  "
              f"parse {r['ours_parse_ms']:8.3f} ms (cold {r['ours_parse_cold_ms']:8.3f})  "
              f"prometheus_client {r['prometheus_client_ms']:9.2f} ms  ratio {r['ratio_observe']:6.1f}x")
    # The five recorded scenarios at 1x, as captured (one snapshot each).
    scenarios: dict[str, dict[str, float]] = {}
    for name in ("idle", "false-full", "kv-full", "preemption", "head-of-line"):
        text = (FIXTURES / name / "snapshot.prom").read_text()
        scenarios[name] = measure("1x", [text], rounds, budget / 2)
    # Production-shaped recordings (tests/e2e/production.py: 20,000 blocks, 256 slots, 8,192-token budget), each
    # with its own command line: the busiest frame, as a 256-slot engine exports it.
    for name in ("prod-slots", "prod-kv", "prod-preempt"):
        folder = FIXTURES / name
        if (folder / "snapshot.prom").exists():
            argv = [str(a) for a in json.loads((folder / "meta.json").read_text())["server_argv"]]
            scenarios[name] = measure("1x", [(folder / "snapshot.prom").read_text()], rounds, budget / 2, argv)
    save("b1_parse", {"shapes": results, "scenarios": scenarios, "load_before": load_before,
                      "load_after": loadavg(), "goal_ratio": GOAL_RATIO, "goal_ms": GOAL_MS})


if __name__ == "__main__":
    main()
