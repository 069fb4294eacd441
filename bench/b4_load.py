"""Benchmark 4: our /metrics under load from a second process on loopback.

A sidecar at a 1 s interval watches 1 target (the per-pod sidecar) and then 100 targets (fleet mode) of
bench/fastreplay.py, so the scrape loop runs while /metrics is being served. `hey` holds 200 requests per
second (10 workers x 20 qps) and reports p50/p99; `wrk` then measures unbounded throughput. Both are
client processes on the same 2-core machine, so their own CPU competes with ours.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from .common import free_port, loadavg, quick, save, sidecar_argv, spawn, wait_http

GOAL_P99_MS = 10.0


def hey(url: str, seconds: int, extra: Sequence[str] = ()) -> dict[str, float]:
    out = subprocess.run(["hey", "-z", f"{seconds}s", "-c", "10", "-q", "20", *extra, url], capture_output=True,
                         text=True, check=True, timeout=seconds + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    pct = {int(p): 1000 * float(s) for p, s in re.findall(r"(\d+)%+ in ([\d.]+) secs", out)}
    codes = re.findall(r"\[(\d+)\]\s+(\d+) responses", out)
    errors = out.split("Error distribution:", 1)[1] if "Error distribution:" in out else ""
    return {"rps": rps, "p50_ms": pct.get(50, float("nan")), "p90_ms": pct.get(90, float("nan")),
            "p99_ms": pct.get(99, float("nan")), "ok_200": sum(int(n) for c, n in codes if c == "200"),
            "non_200": sum(int(n) for c, n in codes if c != "200"),
            "errors": sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]", errors, re.M))}


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def wrk(url: str, seconds: int) -> dict[str, float | str]:
    out = subprocess.run(["wrk", "-t1", "-c10", f"-d{seconds}s", "--latency", url], capture_output=True,
                         text=True, check=True, timeout=seconds + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    pct = dict(re.findall(r"^\s+(\d+)%\s+(\S+)$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    transfer = re.search(r"Transfer/sec:\s+(\S+)", out)
    return {"rps": rps, "p50_ms": _ms(pct["50"]), "p99_ms": _ms(pct["99"]),
            "non_2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": sum(map(int, sock.groups())) if sock else 0,
            "transfer_per_s": transfer.group(1) if transfer else "?"}


def run(n: int, seconds: int) -> dict[str, object]:
    rport, sport = free_port(), free_port()
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        targets = Path(tmp) / "targets"
        targets.write_text("".join(f"http://127.0.0.1:{rport}/t/{i}\n" for i in range(n)))
        with spawn([sys.executable, "-m", "bench.fastreplay", "--port", str(rport)]):
            wait_http(f"http://127.0.0.1:{rport}/health")
            with spawn(sidecar_argv(None, sport, "1s", targets_file=targets)):
                url = f"http://127.0.0.1:{sport}/metrics"
                wait_http(url)
                time.sleep(3)
                size = len(httpx.get(url).content)
                at_200 = hey(url, seconds)
                unbounded = wrk(url, max(5, seconds // 2))
    return {"targets": n, "server": "serve", "metrics_bytes": size, "hey_200rps": at_200, "wrk_unbounded": unbounded,
            "load_before": load_before, "load_after": loadavg()}


def main() -> None:
    seconds = 10 if quick() else 30
    rows = [run(n, seconds) for n in (1, 100)]
    for r in rows:
        h, w = r["hey_200rps"], r["wrk_unbounded"]
        print(f"{r['targets']:4d} targets, {r['server']:6s} ({r['metrics_bytes']} B): 200 rps -> {h['rps']:.0f} rps "  # type: ignore[index]
              f"p50 {h['p50_ms']:.2f} ms p99 {h['p99_ms']:.2f} ms; wrk {w['rps']:.0f} rps "  # type: ignore[index]
              f"p99 {w['p99_ms']:.1f} ms; load {r['load_after']}")  # type: ignore[index]
    save("b4_load", {"rows": rows, "goal_p99_ms": GOAL_P99_MS})


if __name__ == "__main__":
    main()
