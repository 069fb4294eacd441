"""Benchmark 5: detection latency, from a state change in the replay to the verdict change in our /metrics.

bench/fastreplay.py --snapshots serves one recorded real scenario snapshot and switches on `GET /control/X`
(answering the CLOCK_MONOTONIC time of the switch). The sidecar scrapes it at interval I; we poll our
/metrics every 20 ms until the expected verdict reads 1. Each switch waits a random fraction of I first, so
the change lands at a uniform phase of the scrape tick. Goal: within 2 I.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

import httpx

from .common import free_port, loadavg, quick, save, sidecar_argv, spawn, wait_http

# (scenario switched to, verdict expected); each change goes back to idle ("ok") after. Preemption comes
# last: for --verdict.preempt-window (60 s) after preemptions rose, `preempting` rightly outranks the others,
# so every repeat starts a fresh sidecar.
CHANGES = [("head-of-line", "head_of_line"), ("false-full", "slots_full"), ("kv-full", "kv_full"),
           ("preemption", "preempting")]
POLL_S = 0.02


def verdict_on(client: httpx.Client, url: str, verdict: str) -> bool:
    text = client.get(url, timeout=5.0).text
    return f'verdict="{verdict}"}} 1.0' in text


def trial(client: httpx.Client, rbase: str, ourl: str, scenario: str, verdict: str, interval: float,
          rng: random.Random) -> float | None:
    time.sleep(rng.uniform(0.0, interval))
    switched = float(client.get(f"{rbase}/control/{scenario}").json()["switched_at"])
    deadline = switched + 5 * interval
    while time.monotonic() < deadline:
        if verdict_on(client, ourl, verdict):
            return time.monotonic() - switched
        time.sleep(POLL_S)
    return None


def run(interval: float, repeats: int, rng: random.Random) -> dict[str, object]:
    rport = free_port()
    load_before = loadavg()
    rbase = f"http://127.0.0.1:{rport}"
    rows: list[dict[str, object]] = []
    with spawn([sys.executable, "-m", "bench.fastreplay", "--port", str(rport), "--snapshots"]):
        wait_http(rbase + "/health")
        for _ in range(repeats):
            sport = free_port()
            with spawn(sidecar_argv([rbase], sport, f"{interval:g}s")), httpx.Client() as client:
                client.get(f"{rbase}/control/idle")
                ourl = f"http://127.0.0.1:{sport}/metrics"
                wait_http(ourl)
                time.sleep(interval + 1)
                for scenario, verdict in CHANGES:
                    for scn, vd in ((scenario, verdict), ("idle", "ok")):
                        latency = trial(client, rbase, ourl, scn, vd, interval, rng)
                        rows.append({"to": scn, "verdict": vd, "latency_s": latency})
    found = [float(r["latency_s"]) for r in rows if r["latency_s"] is not None]  # type: ignore[arg-type]
    per_verdict: dict[str, float] = {}
    for r in rows:
        if r["latency_s"] is not None:
            v = str(r["verdict"])
            per_verdict[v] = max(per_verdict.get(v, 0.0), float(r["latency_s"]))  # type: ignore[arg-type]
    return {"interval_s": interval, "changes": len(rows), "missed": len(rows) - len(found),
            "median_s": statistics.median(found) if found else None, "max_s": max(found) if found else None,
            "max_in_intervals": max(found) / interval if found else None, "max_by_verdict_s": per_verdict,
            "trials": rows, "load_before": load_before, "load_after": loadavg()}


def main() -> None:
    rng = random.Random(7)
    plan = ((1.0, 1), (5.0, 1)) if quick() else ((1.0, 4), (5.0, 2))
    out = []
    for interval, repeats in plan:
        r = run(interval, repeats, rng)
        out.append(r)
        print(f"interval {interval:g} s: {r['changes']} changes, missed {r['missed']}, median {r['median_s']:.2f} s, "
              f"max {r['max_s']:.2f} s = {r['max_in_intervals']:.2f} intervals; by verdict {r['max_by_verdict_s']}")
    save("b5_detect", {"runs": out})


if __name__ == "__main__":
    main()
