"""Benchmark 2: the running sidecar at a 1 s interval against the demo replay, CPU per scrape and RSS over time.

The replay is `vllm-headroom replay --loop` (the embedded real false-full incident, FastAPI); the sidecar is
`vllm-headroom serve` at 1 s. A Prometheus-like reader fetches our /metrics every 15 s (counted in our CPU).
CPU per scrape = the sidecar's CPU over the measured window / scrapes in it (window / interval).
"""

from __future__ import annotations

import sys
import time

import httpx

from .common import cpu_seconds, free_port, loadavg, quick, rss_mb, save, sidecar_argv, spawn, wait_http

INTERVAL = 1.0
WARMUP = 20.0


def slope_mb_per_10min(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mr = sum(r for _, r in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 600.0 * sum((t - mt) * (r - mr) for t, r in points) / var if var else 0.0


def main() -> None:
    duration = 60.0 if quick() else 600.0
    load_before = loadavg()
    rport, sport = free_port(), free_port()
    replay = [sys.executable, "-m", "exporter", "replay", "--speed", "1", "--loop",
              "--web.listen-address", f"127.0.0.1:{rport}"]
    with spawn(replay) as _rp:
        wait_http(f"http://127.0.0.1:{rport}/metrics")
        with spawn(sidecar_argv([f"http://127.0.0.1:{rport}"], sport, "1s")) as sc:
            base = f"http://127.0.0.1:{sport}"
            wait_http(base + "/healthz")
            time.sleep(WARMUP)
            t0, cpu0 = time.monotonic(), cpu_seconds(sc.pid)
            samples: list[tuple[float, float, float]] = []  # (t, cpu, rss)
            next_read = 0.0
            with httpx.Client() as client:
                while (now := time.monotonic() - t0) < duration:
                    samples.append((now, cpu_seconds(sc.pid) - cpu0, rss_mb(sc.pid)))
                    if now >= next_read:
                        client.get(base + "/metrics", timeout=5.0).raise_for_status()
                        next_read += 15.0
                    time.sleep(5.0)
                verdicts = [ln for ln in client.get(base + "/metrics").text.splitlines()
                            if ln.startswith("vllm_headroom_verdict{") and ln.endswith(" 1.0")]
            elapsed = time.monotonic() - t0
            cpu = cpu_seconds(sc.pid) - cpu0
            samples.append((elapsed, cpu, rss_mb(sc.pid)))
    scrapes = elapsed / INTERVAL
    rss = [r for _, _, r in samples]
    result = {
        "duration_s": round(elapsed, 1),
        "interval_s": INTERVAL,
        "scrapes": round(scrapes),
        "cpu_ms_per_scrape": 1000 * cpu / scrapes,
        "cpu_share_of_one_core": cpu / elapsed,
        "rss_mb_first": rss[0],
        "rss_mb_max": max(rss),
        "rss_mb_last": rss[-1],
        "rss_growth_mb": rss[-1] - rss[0],
        "rss_slope_mb_per_10min": slope_mb_per_10min([(t, r) for t, _, r in samples]),
        "rss_growth_second_half_mb": rss[-1] - next(r for t, _, r in samples if t >= elapsed / 2),
        "rss_series": [(round(t), round(r, 2)) for t, _, r in samples],
        "final_verdicts": verdicts,
        "load_before": load_before,
        "load_after": loadavg(),
    }
    save("b2_sidecar", result)
    print(f"sidecar 1 s interval, {elapsed:.0f} s: {result['cpu_ms_per_scrape']:.2f} ms CPU per scrape, "
          f"RSS {rss[0]:.1f} -> {rss[-1]:.1f} MB (max {max(rss):.1f}), load {load_before} -> {result['load_after']}")


if __name__ == "__main__":
    main()
