"""Benchmark 6: the cost we put on vLLM, its own /metrics rendering per scrape on the real CPU server.

Starts the real vLLM 0.32.0 CPU build (tests/e2e/vllm_server.py, the recorded scenarios' flags), sends a
few requests so every histogram is populated (a ~50 KB exposition like the recordings), then measures the
API server process (which renders /metrics) over a quiet window and over back-to-back scrapes: CPU per
render = (CPU during scrapes - idle CPU rate x duration) / scrapes, plus wall latency per scrape.
From that: vLLM CPU spent on rendering per second at our interval, with Prometheus also scraping vLLM every
15 s, versus a pass-through mode where Prometheus reads vLLM's series from the sidecar (one render per
interval).
"""

from __future__ import annotations

import statistics
import time

import httpx

from tests.e2e.load import prompt_ids
from tests.e2e.vllm_server import VllmServer

from .common import cpu_seconds, loadavg, percentile, quick, save

PROMETHEUS_INTERVAL = 15.0


def main() -> None:
    load_before = loadavg()
    scrapes = 100 if quick() else 400
    started = time.monotonic()
    with VllmServer() as server:
        startup_s = time.monotonic() - started
        server.pin_self()
        try:
            with httpx.Client(timeout=120.0) as client:
                for i in range(8):
                    client.post(server.url + "/v1/completions", json={
                        "model": server.served_model_name, "prompt": prompt_ids(48, 1000 + i), "max_tokens": 16,
                        "ignore_eos": True}).raise_for_status()
                body = client.get(server.url + "/metrics").content
                time.sleep(2.0)
                quiet = 10.0
                c0, t0 = cpu_seconds(server.pid), time.monotonic()
                time.sleep(quiet)
                idle_rate = (cpu_seconds(server.pid) - c0) / (time.monotonic() - t0)
                walls: list[float] = []
                c0, t0 = cpu_seconds(server.pid), time.monotonic()
                for _ in range(scrapes):
                    s = time.perf_counter()
                    client.get(server.url + "/metrics").raise_for_status()
                    walls.append(time.perf_counter() - s)
                span = time.monotonic() - t0
                cpu = cpu_seconds(server.pid) - c0 - idle_rate * span
        finally:
            server.unpin_self()
    render_ms = 1000 * cpu / scrapes
    per_interval = {}
    for interval in (1.0, 5.0, 15.0):
        with_prom = render_ms * (1 / interval + 1 / PROMETHEUS_INTERVAL)
        passthrough = render_ms / interval
        per_interval[f"{interval:g}s"] = {
            "renders_per_s_vs_prometheus_alone": (1 / interval + 1 / PROMETHEUS_INTERVAL) * PROMETHEUS_INTERVAL,
            "vllm_cpu_ms_per_s": with_prom,
            "vllm_cpu_ms_per_s_passthrough": passthrough,
            "passthrough_saving_ms_per_s": with_prom - passthrough,
            "passthrough_saving_share": (with_prom - passthrough) / with_prom,
        }
    result = {
        "startup_s": startup_s,
        "exposition_bytes": len(body),
        "scrapes": scrapes,
        "render_cpu_ms": render_ms,
        "scrape_wall_ms_p50": 1000 * statistics.median(walls),
        "scrape_wall_ms_p99": 1000 * percentile(walls, 0.99),
        "api_server_idle_cpu_share": idle_rate,
        "prometheus_interval_s": PROMETHEUS_INTERVAL,
        "per_interval": per_interval,
        "load_before": load_before,
        "load_after": loadavg(),
    }
    save("b6_vllm_cost", result)
    print(f"vLLM /metrics ({len(body)} B): {render_ms:.2f} ms CPU per render, wall p50 "
          f"{result['scrape_wall_ms_p50']:.2f} ms p99 {result['scrape_wall_ms_p99']:.2f} ms; idle API server "
          f"{100 * idle_rate:.1f} % CPU; load {load_before} -> {result['load_after']}")
    for k, v in per_interval.items():
        print(f"  our interval {k}: vLLM renders {v['renders_per_s_vs_prometheus_alone']:.0f}x Prometheus-alone, "
              f"{v['vllm_cpu_ms_per_s']:.2f} ms CPU/s; pass-through {v['vllm_cpu_ms_per_s_passthrough']:.2f} ms/s")


if __name__ == "__main__":
    main()
