"""Benchmark 7: the cost of the status page (`/`) and `/api/v1/history` at 100 targets, beside `/metrics`.

In-process, on the recorded false-full timeline: 100 targets, one engine each, a full 15-minute history at the
default 5 s interval (181 points per engine). Each body is rendered `runs` times; the figures are the median CPU
time per render and the body size, with ratios to our /metrics render (what Prometheus pulls every scrape). Also
the history's memory after one and after two windows (it must stay flat). No thresholds: figures only.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from prometheus_client import generate_latest

from exporter.expose import diagnosis, page
from exporter.expose.server import Sidecar
from exporter.pipeline.config import split_args
from exporter.pipeline.target import Settings, Target
from exporter.replay import recording

from .common import FIXTURES, VLLM_ARGS, loadavg, machine, quick, save

TARGETS = 100
INTERVAL = 5.0


def _median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    out = fn()
    times = []
    for _ in range(runs):
        started = time.process_time()
        out = fn()
        times.append(1000 * (time.process_time() - started))
    return statistics.median(times), out


def _fill(sidecar: Sidecar, frames: list[str], ticks: int, start: int = 0) -> None:
    for k in range(start, start + ticks):
        now = k * INTERVAL
        text = frames[k % len(frames)]
        for t in sidecar.targets:
            t.last = t.observe(now, text)
        sidecar.history.record(now, [t.last for t in sidecar.targets])


def _history_bytes(sidecar: Sidecar) -> int:
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    return sum(s.size for s in snapshot.statistics("filename")
               if "history.py" in s.traceback[0].filename)


def main() -> None:
    load_before = loadavg()
    rec = recording.load(FIXTURES / "false-full")
    frames = [text for _, text in rec.frames]
    targets = [Target(Settings(url=f"http://10.0.{i // 250}.{i % 250}:8000", vllm_args=split_args(VLLM_ARGS),
                               discover_cmdline=False)) for i in range(TARGETS)]
    sidecar = Sidecar(targets, INTERVAL)
    window_ticks = int(sidecar.history.window / INTERVAL) + 1
    tracemalloc.start()
    _fill(sidecar, frames, window_ticks)
    one_window = _history_bytes(sidecar)
    _fill(sidecar, frames, window_ticks, start=window_ticks)
    two_windows = _history_bytes(sidecar)
    tracemalloc.stop()
    points = {len(h.points) for h in sidecar.history.engines.values()}
    runs = 5 if quick() else 20
    reports = [t.last for t in targets]
    bodies: dict[str, Callable[[], bytes]] = {
        "metrics": lambda: generate_latest(sidecar.registry),
        "diagnosis": lambda: json.dumps(diagnosis.document(reports)).encode(),
        "history": lambda: json.dumps(sidecar.history_document()).encode(),
        "page": lambda: page.render(reports, sidecar.history, INTERVAL).encode(),
    }
    figures: dict[str, dict[str, float]] = {}
    for name, fn in bodies.items():
        ms, body = _median_ms(fn, runs)
        figures[name] = {"cpu_ms": round(ms, 2), "bytes": len(body)}
    base = figures["metrics"]
    for f in figures.values():
        f["cpu_ratio_to_metrics"] = round(f["cpu_ms"] / base["cpu_ms"], 2)
        f["bytes_ratio_to_metrics"] = round(f["bytes"] / base["bytes"], 2)
    data = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "quick": quick(), "machine": machine(),
        "load_before": load_before, "load_after": loadavg(),
        "targets": TARGETS, "interval_s": INTERVAL, "points_per_engine": sorted(points), "runs": runs,
        "bodies": figures,
        "history_bytes_one_window": one_window, "history_bytes_two_windows": two_windows,
        "page_cpu_share_at_interval": round(figures["page"]["cpu_ms"] / 1000 / INTERVAL, 4),
    }
    print(json.dumps(data, indent=2))
    save("b7_status_page", data)


if __name__ == "__main__":
    main()
