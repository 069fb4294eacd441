"""Where one fleet tick spends its CPU: an in-process Sidecar over N fastreplay targets, under cProfile.

`python -m bench.profile_fleet 1000` prints the tick's wall and CPU time, the time to render our /metrics
(generate_latest over the sidecar's registry) and the top functions by cumulative time. A diagnostic for
benchmark 3, not part of `make bench`.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
import time

import httpx
from prometheus_client import generate_latest

from exporter.expose.server import Sidecar
from exporter.pipeline.target import Settings, Target

from .common import VLLM_ARGS, free_port, spawn, wait_http


async def ticks(sidecar: Sidecar, n: int) -> list[tuple[float, float]]:
    limits = httpx.Limits(max_connections=max(10, 2 * len(sidecar.targets)))
    out = []
    async with httpx.AsyncClient(limits=limits) as client:
        for _ in range(n):
            w, c = time.perf_counter(), time.process_time()
            await sidecar.tick(client)
            out.append((time.perf_counter() - w, time.process_time() - c))
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    port = free_port()
    with spawn([sys.executable, "-m", "bench.fastreplay", "--port", str(port)]):
        wait_http(f"http://127.0.0.1:{port}/health")
        targets = [Target(Settings(f"http://127.0.0.1:{port}/t/{i}", vllm_args=VLLM_ARGS.split(),
                                   discover_cmdline=False, timeout=30.0)) for i in range(n)]
        sidecar = Sidecar(targets, 15.0)
        first = asyncio.run(ticks(sidecar, 1))  # also reads /v1/models and /version
        prof = cProfile.Profile()
        prof.enable()
        steady = asyncio.run(ticks(sidecar, 2))
        prof.disable()
        w, c = time.perf_counter(), time.process_time()
        body = generate_latest(sidecar.registry)
        render = (time.perf_counter() - w, time.process_time() - c)
    print(f"{n} targets: first tick wall {first[0][0]:.2f} s CPU {first[0][1]:.2f} s; steady ticks "
          + ", ".join(f"wall {a:.2f} s CPU {b:.2f} s" for a, b in steady)
          + f"; /metrics render {len(body) / 1e6:.1f} MB in wall {render[0]:.2f} s CPU {render[1]:.2f} s")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
