"""Benchmark 3: fleet mode, one sidecar process watching 100, 500 and 1000 targets at a 15 s interval.

The targets are served by one bench/fastreplay.py process listening on one loopback port per target
(distinct origins, as in a real fleet; real recorded timelines, each target offset by one frame).
The sidecar runs `vllm-headroom serve --targets-file`. After one warm-up interval we measure,
over several intervals: the achieved scrape interval (gaps between consecutive /metrics requests per target,
seen by the replay server), the sidecar's CPU share of one core and its RSS, and the latency of our own
/metrics (fetched once per interval, as Prometheus would).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from .common import cpu_seconds, free_port, loadavg, quick, rss_mb, save, sidecar_argv, spawn, wait_http

INTERVAL = 15.0
DEADLINE = 300.0  # per fleet size: a loop far slower than the interval still ends


def _stats(client: httpx.Client, rport: int) -> dict[str, Any]:
    doc: dict[str, Any] = client.get(f"http://127.0.0.1:{rport}/stats", timeout=30.0).json()
    return doc


def run(n: int, intervals: int) -> dict[str, Any]:
    """Measure over at least `intervals` intervals and until every target was scraped twice (or DEADLINE)."""
    rport, sport = free_port(), free_port()
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        targets = Path(tmp) / "targets"
        replay_argv = [sys.executable, "-m", "bench.fastreplay", "--port", str(rport), "--count", str(n),
                       "--urls-file", str(targets)]
        with spawn(replay_argv) as rp:
            wait_http(f"http://127.0.0.1:{rport}/health")
            while not targets.exists():
                time.sleep(0.1)
            argv = sidecar_argv(None, sport, f"{INTERVAL:g}s", targets_file=targets,
                                extra=["--scrape.timeout", "10s"])
            with spawn(argv) as sc, httpx.Client() as client:
                base = f"http://127.0.0.1:{sport}"
                wait_http(base + "/healthz", timeout=60.0)
                deadline = time.monotonic() + DEADLINE
                while _stats(client, rport)["scrapes"] < n and time.monotonic() < deadline:
                    time.sleep(1.0)  # the first tick also reads /v1/models and /version of every target
                client.get(f"http://127.0.0.1:{rport}/stats/reset")
                t0, cpu0, rcpu0 = time.monotonic(), cpu_seconds(sc.pid), cpu_seconds(rp.pid)
                latencies: list[float] = []
                body, up, failed = 0, 0, 0
                next_fetch = t0 + INTERVAL
                while True:
                    now = time.monotonic()
                    stats = _stats(client, rport)
                    if (now - t0 >= intervals * INTERVAL and stats["gaps"] >= n) or now > deadline:
                        break
                    if now >= next_fetch:  # Prometheus reading our /metrics (its default timeout is 10 s)
                        next_fetch += INTERVAL
                        started = time.perf_counter()
                        try:
                            r = client.get(base + "/metrics", timeout=60.0)
                            body = len(r.content)
                            up = sum(1 for ln in r.text.splitlines()
                                     if ln.startswith("vllm_headroom_up{") and ln.endswith(" 1.0"))
                        except httpx.HTTPError:
                            failed += 1
                        latencies.append(time.perf_counter() - started)
                    time.sleep(1.0)
                elapsed = time.monotonic() - t0
                cpu = cpu_seconds(sc.pid) - cpu0
                rcpu = cpu_seconds(rp.pid) - rcpu0
                rss = rss_mb(sc.pid)
    achieved = stats["interval_median_s"] or float("nan")
    ticks = elapsed / max(INTERVAL, achieved)
    return {
        "targets": n,
        "targets_up": up,
        "window_s": round(elapsed, 1),
        "interval_goal_s": INTERVAL,
        "interval_median_s": stats["interval_median_s"],
        "interval_p95_s": stats["interval_p95_s"],
        "interval_max_s": stats["interval_max_s"],
        "targets_scraped_twice": stats["gaps"] >= n,
        "sidecar_cpu_share": cpu / elapsed,
        "sidecar_cpu_s_per_tick": cpu / ticks,
        "sidecar_cpu_ms_per_target_scrape": 1000 * cpu / ticks / n,
        "replay_server_cpu_share": rcpu / elapsed,
        "sidecar_rss_mb": rss,
        "our_metrics_bytes": body,
        "our_metrics_latency_ms_max": 1000 * max(latencies) if latencies else None,
        "our_metrics_failed": failed,
        "load_before": load_before,
        "load_after": loadavg(),
    }


def main() -> None:
    sizes, intervals = ((100, 1000), 2) if quick() else ((100, 500, 1000), 4)
    rows = []
    for n in sizes:
        row = run(n, intervals)
        rows.append(row)
        print(f"{n:5d} targets: interval median {row['interval_median_s'] or float('nan'):.2f} s "
              f"(max {row['interval_max_s'] or float('nan'):.2f}), "
              f"CPU {100 * float(row['sidecar_cpu_share'] or 0):.1f} % of a core, "
              f"RSS {float(row['sidecar_rss_mb'] or 0):.0f} MB, up {row['targets_up']}, load {row['load_after']}")
    save("b3_fleet", {"rows": rows})


if __name__ == "__main__":
    main()
