"""Fleet tick cost of the current scrape loop vs. bounded concurrency: evidence for a change in exporter/server.py.

`python -m bench.fleet_variants 1000` runs, in this process, steady ticks of `Sidecar.tick` over N targets
(one fastreplay port each) two ways and prints CPU and wall time per tick:
- current: every target's scrape gathered at once through one httpx client with max_connections = 2 N
  (what `Sidecar.run` does; httpcore's pool then rescans all its connections on every request event);
- bounded: the same scrapes through an asyncio.Semaphore(K) and a client with max_connections = K;
- per-target client: all scrapes at once, but each target through its own small httpx client (pool of one
  origin; one shared SSL context), so no pool ever scans more than its own connection.
Run last by `make bench`; its figures are in bench/RESULTS.md under benchmark 3.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client import generate_latest

from exporter.expose.server import Sidecar
from exporter.pipeline.target import Settings, Target

from .common import VLLM_ARGS, free_port, loadavg, save, spawn, wait_http


async def current(sidecar: Sidecar, ticks: int) -> list[tuple[float, float]]:
    limits = httpx.Limits(max_connections=max(10, 2 * len(sidecar.targets)))
    out = []
    async with httpx.AsyncClient(limits=limits) as client:
        for i in range(ticks + 1):
            w, c = time.perf_counter(), time.process_time()
            await sidecar.tick(client)
            if i:  # the first tick also reads /v1/models and /version
                out.append((time.perf_counter() - w, time.process_time() - c))
    return out


async def bounded(sidecar: Sidecar, ticks: int, k: int) -> list[tuple[float, float]]:
    limits = httpx.Limits(max_connections=k, max_keepalive_connections=k)
    gate = asyncio.Semaphore(k)
    out = []
    async with httpx.AsyncClient(limits=limits) as client:

        async def one(t: Target) -> None:
            async with gate:
                await t.scrape(client)

        for i in range(ticks + 1):
            w, c = time.perf_counter(), time.process_time()
            await asyncio.gather(*(one(t) for t in sidecar.targets))
            await asyncio.to_thread(generate_latest, sidecar.registry)  # as Sidecar.tick does
            if i:
                out.append((time.perf_counter() - w, time.process_time() - c))
    return out


async def per_target(sidecar: Sidecar, ticks: int) -> list[tuple[float, float]]:
    ctx = ssl.create_default_context()
    clients = [httpx.AsyncClient(limits=httpx.Limits(max_connections=2), verify=ctx) for _ in sidecar.targets]
    out = []
    try:
        for i in range(ticks + 1):
            w, c = time.perf_counter(), time.process_time()
            await asyncio.gather(*(t.scrape(cl) for t, cl in zip(sidecar.targets, clients, strict=True)))
            await asyncio.to_thread(generate_latest, sidecar.registry)  # as Sidecar.tick does
            if i:
                out.append((time.perf_counter() - w, time.process_time() - c))
    finally:
        await asyncio.gather(*(cl.aclose() for cl in clients))
    return out


def fresh(urls: list[str]) -> Sidecar:
    return Sidecar([Target(Settings(u, vllm_args=VLLM_ARGS.split(), discover_cmdline=False, timeout=30.0))
                    for u in urls], 15.0)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    ticks = 2
    load_before = loadavg()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        urls_file = Path(tmp) / "urls"
        argv = [sys.executable, "-m", "bench.fastreplay", "--port", str(port), "--count", str(n),
                "--urls-file", str(urls_file)]
        with spawn(argv):
            wait_http(f"http://127.0.0.1:{port}/health")
            while not urls_file.exists():
                time.sleep(0.1)
            urls = urls_file.read_text().split()
            results = {"current": asyncio.run(current(fresh(urls), ticks))}
            for k in (32, 128):
                results[f"bounded {k}"] = asyncio.run(bounded(fresh(urls), ticks, k))
            results["per-target client"] = asyncio.run(per_target(fresh(urls), ticks))
    summary = {}
    for name, rows in results.items():
        cpu = sum(c for _, c in rows) / len(rows)
        wall = sum(w for w, _ in rows) / len(rows)
        summary[name] = {"cpu_s_per_tick": cpu, "wall_s_per_tick": wall, "cpu_ms_per_target": 1000 * cpu / n}
        print(f"{n} targets, {name:12s}: CPU {cpu:6.2f} s per tick ({1000 * cpu / n:5.2f} ms per target), "
              f"wall {wall:6.2f} s")
    save("fleet_variants", {"targets": n, "ticks": ticks, "variants": summary, "load_before": load_before,
                            "load_after": loadavg()})


if __name__ == "__main__":
    main()
