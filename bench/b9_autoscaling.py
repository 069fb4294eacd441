"""Benchmark 9 (issue 24 item 5): three autoscaling signals in a closed loop over real vLLM replicas.

    python -m bench.b9_autoscaling            # both shapes, ~35 min on 2 cores (2 x 4 vLLM start-ups included)
    BENCH_QUICK=1 python -m bench.b9_autoscaling   # a shorter schedule, less settled

Four vLLM 0.32.0 CPU servers of the tiny model (tests/e2e) are started up front; "a replica" is one of them in the
router's worker list, "adding a replica" is `POST /add_worker` on a real router (PyPI vllm-router 0.1.17, the vLLM
project's Rust router, round robin). Each engine step is paced to at least BASE + PER_TOKEN x tokens
(bench/pace: on 2 cores an unpaced engine with work steps flat out on 1.5 cores, so replicas would add no capacity);
max_num_seqs 4 and 80 KV blocks per replica make the decode-heavy shape slot-bound and the prefill-heavy shape
KV-bound, with the same flags.

A seeded open-loop load (Poisson arrivals) ramps up, holds, takes a burst, and falls; identical for every signal of
a shape. A controller applies Kubernetes' HPA algorithm (pkg/controller/podautoscaler @v1.31: per metric
ceil(current x value / (target x current)) unless within the 0.1 tolerance, the max over metrics, stabilization
windows 0 s up and 300 s down, the default rate policies, min 1, max 4) every KEDA polling interval (30 s) to:

  ours        Σ vllm_headroom_replicas_needed (the sidecar, one per replica), AverageValue 1
  waiting>5   Σ vllm:num_requests_waiting, AverageValue 5 (production-stack's KEDA example)
  queue|kv    max over Σ vllm:num_requests_waiting / 5 and Σ vllm:kv_cache_usage_perc / 0.8 (per replica)

Time is scaled down uniformly by SCALE (6): the polling interval, the stabilization window and the load schedule
are divided by it; a request's time in the engine is what the paced vLLM takes (~2.5 s decode-heavy), which at
full scale stands for a request SCALE times as long. Written to bench/results/b9_autoscaling.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common import REPO, free_port, loadavg, quick, save, spawn, wait_http
from exporter.core import defaults
from tests.e2e.load import prompt_ids
from tests.e2e.vllm_server import VllmServer

SCALE = 6.0  # real seconds per bench second
POLL = 30.0 / SCALE  # KEDA's default pollingInterval
DOWN_WINDOW = 300.0 / SCALE  # HPA's default scale-down stabilization window
UP_WINDOW = 0.0
TOLERANCE = 0.1
POLICY_PERIOD = 15.0 / SCALE  # HPA's default policies: up max(4 pods, 100 %) per 15 s, down 100 % per 15 s
MIN_REPLICAS, MAX_REPLICAS = 1, 4
# The sidecar's, at its default; B9_TARGET_UTILIZATION runs the same loop at another (one value for both shapes).
TARGET_UTILIZATION = float(os.environ.get("B9_TARGET_UTILIZATION", defaults.TARGET_UTILIZATION))
LOAD_WINDOW = defaults.LOAD_WINDOW / SCALE  # the sidecar's offered-load window, scaled like every other duration

MAX_NUM_SEQS = 4
NUM_GPU_BLOCKS = 80  # 79 usable (block 0 is the null block)
BLOCK_SIZE = 32
MAX_MODEL_LEN = 1024
STEP_BASE_MS, STEP_PER_TOKEN_MS = 25.0, 0.1  # a paced step: 25 ms + 0.1 ms per scheduled token
ROUTER_VENV = Path.home() / ".cache" / "vllm-headroom" / "bench-vllm-router-0.1.17"
PACE_DIR = REPO / "bench" / "pace"


@dataclass(frozen=True)
class Shape:
    name: str
    prompt: int
    max_tokens: int


SHAPES = (Shape("decode-heavy", 32, 96), Shape("prefill-heavy", 768, 16))


@dataclass(frozen=True)
class Signal:
    name: str
    describe: str


SIGNALS = (Signal("ours", "Σ vllm_headroom_replicas_needed, AverageValue 1"),
           Signal("ours-D", "Σ (running + waiting) / (C × u) per replica: the signal before the offered load (the "
                  "sidecar's replica_demand_requests / replica_capacity_requests / 0.8), AverageValue 1"),
           Signal("waiting>5", "Σ vllm:num_requests_waiting, AverageValue 5"),
           Signal("queue|kv", "max(Σ waiting / 5, Σ kv_cache_usage_perc / 0.8), AverageValue"))


def schedule(short: bool) -> tuple[list[tuple[float, float]], float]:
    """Breakpoints (s, load in replicas' worth of capacity) of a piecewise-linear load, and when the burst comes:
    0.5 replica, a ramp to 2.3, a hold with a burst of 3 x max_num_seqs requests at once in its middle, a fall to
    0.7 and a long enough low for the scale-down window to pass."""
    k = 0.6 if short else 1.0
    points = [(0.0, 0.5), (15.0, 0.5), (75.0, 2.3), (150.0, 2.3), (160.0, 0.7), (250.0, 0.7)]
    return [(t * k, level) for t, level in points], 110.0 * k


def load_at(t: float, points: Sequence[tuple[float, float]]) -> float:
    for (a, la), (b, lb) in itertools.pairwise(points):
        if a <= t < b:
            return la + (lb - la) * (t - a) / (b - a)
    return points[-1][1]


def arrivals(rate_per_replica: float, short: bool, seed: int) -> tuple[list[float], float, float]:
    """Seeded Poisson arrival times (s) following the schedule (thinning), the burst's time, and the duration."""
    points, burst_at = schedule(short)
    duration = points[-1][0]
    peak = max(level for _t, level in points)
    rnd = random.Random(seed)
    times: list[float] = []
    t = 0.0
    while True:
        t += rnd.expovariate(peak * rate_per_replica)
        if t >= duration:
            break
        if rnd.random() < load_at(t, points) / peak:
            times.append(t)
    times += [burst_at] * (3 * MAX_NUM_SEQS)
    return sorted(times), burst_at, duration


# -- parts -----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def pace_env() -> Iterator[dict[str, str]]:
    """PYTHONPATH for vLLM holding the pace plugin and an entry point for it (nothing installed into vLLM's venv)."""
    with tempfile.TemporaryDirectory(prefix="bench-pace-") as tmp:
        info = Path(tmp) / "vllm_headroom_bench_pace-0.0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-headroom-bench-pace\nVersion: 0.0.0\n")
        (info / "entry_points.txt").write_text("[vllm.general_plugins]\npace = vllm_headroom_bench_pace:register\n")
        yield {"PYTHONPATH": f"{tmp}:{PACE_DIR}", "VLLM_HEADROOM_BENCH_STEP": f"{STEP_BASE_MS},{STEP_PER_TOKEN_MS}"}


# One process per engine: the model runs in the EngineCore (UniProcExecutor) on one OpenMP thread. Without
# VLLM_ENABLE_V1_MULTIPROCESSING=0 vLLM 0.32's CPU platform turns "--distributed-executor-backend uni" into "mp":
# each engine then has a Worker process that busy-polls its shm queue (sched_yield, shm_broadcast.SpinCondition)
# through the whole paced sleep, ~1 core per busy replica, and VLLM_CPU_OMP_THREADS_BIND=auto pins every server's
# Worker (and its 9 gloo threads, the load average's 30-40) to CPU 0. bench/replica_capacity.py, decode-heavy with
# every slot full (2026-12-03): mp 1.60 requests/s for one replica, 2.67 for four (1.67x; step 26 -> 63 ms, 44
# runnable threads); mp with Workers bound to CPUs 0/1 alternately 3.32 (2.07x); mp paced at 100 ms 0.40 and 0.64
# (1.60x: the spin lasts as long as the paced step); OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=0 leave the Worker at
# 0.98 core (the spin is Python's, not OpenMP's); uni 1.60 and 6.40 (4.00x; step 26.1 ms for both, 0.19 core per
# busy server, 1.5 runnable threads). The caller's env wins (the experiment's mp runs).
ONE_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}


def start_servers(n: int, env: dict[str, str]) -> list[VllmServer]:
    servers = [VllmServer(max_num_seqs=MAX_NUM_SEQS, max_model_len=MAX_MODEL_LEN, block_size=BLOCK_SIZE,
                          num_gpu_blocks_override=NUM_GPU_BLOCKS, pin_cpus=False, env={**ONE_PROCESS_ENV, **env},
                          extra_args=["--distributed-executor-backend", "uni"]) for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        errors = [f.exception() for f in [pool.submit(s.start) for s in servers]]
    if any(errors):
        for s in servers:
            s.stop()
        raise RuntimeError(f"a vLLM server did not start: {next(e for e in errors if e)}")
    return servers


class Router:
    """vllm-router (Rust) with a mutable worker list."""

    def __init__(self, first: str) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [str(ROUTER_VENV / "bin" / "vllm-router"), "--host", "127.0.0.1", "--port", str(self.port),
                     "--worker-urls", first, "--policy", "round_robin", "--prometheus-port", str(self.metrics_port),
                     "--request-timeout-secs", "600", "--disable-retries", "--disable-circuit-breaker",
                     "--log-level", "warning"]
        self.workers = [first]

    def add(self, url: str) -> None:
        r = httpx.post(f"{self.url}/add_worker", params={"url": url}, timeout=30)
        r.raise_for_status()
        self.workers.append(url)

    def remove(self, url: str) -> None:
        r = httpx.post(f"{self.url}/remove_worker", params={"url": url}, timeout=30)
        r.raise_for_status()
        self.workers.remove(url)


def metrics(url: str, client: httpx.Client) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of `url`/metrics. One retry on a transport error: the poll period (5 s) equals uvicorn's
    keep-alive timeout, so a pooled connection is sometimes closed by the server just as it is reused."""
    try:
        text = client.get(f"{url}/metrics", timeout=5).text
    except httpx.TransportError:
        text = client.get(f"{url}/metrics", timeout=10).text
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(fams: dict[str, list[tuple[dict[str, str], float]]], name: str,
          where: Callable[[dict[str, str]], bool] = lambda _l: True) -> float:
    return sum(v for lb, v in fams.get(name, []) if where(lb))


# -- HPA -------------------------------------------------------------------------------------------------------


@dataclass
class Hpa:
    """Kubernetes' HPA decision for one scale target (pkg/controller/podautoscaler/horizontal.go, replica_calculator.go
    @v1.31): External metrics with AverageValue targets, default behavior, min/max replicas."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    events: list[tuple[float, int]] = field(default_factory=list)  # (time, replicas) of each change

    @staticmethod
    def for_metric(current: int, value: float, target: float) -> int:
        ratio = value / (target * current)
        if abs(1.0 - ratio) <= TOLERANCE:
            return current
        return math.ceil(ratio * current)

    def decide(self, now: float, current: int, metrics_: Sequence[tuple[float, float]]) -> int:
        desired = max(self.for_metric(current, v, t) for v, t in metrics_)
        # Stabilization: the lowest recommendation within the up window and the highest within the down window.
        up = min([r for ts, r in self.recommendations if ts > now - UP_WINDOW] + [desired])
        down = max([r for ts, r in self.recommendations if ts > now - DOWN_WINDOW] + [desired])
        self.recommendations.append((now, desired))
        self.recommendations = [(ts, r) for ts, r in self.recommendations if ts > now - max(DOWN_WINDOW, UP_WINDOW)]
        stable = current
        if stable < up:
            stable = up
        if stable > down:
            stable = down
        # Default policies: up by max(4 pods, 100 %) per period, down by 100 % per period (never binds below 0).
        if stable > current:
            stable = min(stable, max(current + 4, 2 * current))
        return max(MIN_REPLICAS, min(MAX_REPLICAS, stable))


# -- load ------------------------------------------------------------------------------------------------------


@dataclass
class Result:
    sent: float
    first_token: float | None = None
    done: float | None = None
    error: str | None = None


def completion(shape: Shape, seed: int) -> dict[str, Any]:
    """The body of one request of `shape` (its own prompt per seed: no prefix-cache hits between requests)."""
    return {"model": "tiny-llama", "prompt": prompt_ids(shape.prompt, seed), "max_tokens": shape.max_tokens,
            "ignore_eos": True, "temperature": 0}


async def _one(client: httpx.AsyncClient, url: str, shape: Shape, seed: int, at: float, t0: float,
               res: Result) -> None:
    await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
    res.sent = time.monotonic() - t0
    body = {**completion(shape, seed), "stream": True}
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
            resp.raise_for_status()
            async for line in resp.aiter_lines():
                if line.startswith("data: ") and res.first_token is None and line != "data: [DONE]":
                    res.first_token = time.monotonic() - t0
        res.done = time.monotonic() - t0
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"


def run_load(url: str, shape: Shape, times: Sequence[float], t0: float, seed0: int) -> tuple[list[Result],
                                                                                              threading.Thread]:
    results = [Result(sent=t) for t in times]

    async def main() -> None:
        limits = httpx.Limits(max_connections=len(times) + 8, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            await asyncio.gather(*(_one(client, url, shape, seed0 + i, t, t0, r)
                                   for i, (t, r) in enumerate(zip(times, results, strict=True))))

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    return results, thread


def held_replica_seconds(events: Sequence[tuple[float, int]], end: float) -> float:
    """Replica-seconds of a schedule of (time, replicas) steps from its first step to `end`."""
    return sum((b_t - a_t) * n for (a_t, n), (b_t, _m) in zip(events, [*events[1:], (end, 0)], strict=True))


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)] if ordered else float("nan")


def queue_time_p95(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> float | None:
    """p95 of vLLM's own request_queue_time_seconds over the run, from the bucket rises summed over every server
    (linear inside the bucket, as histogram_quantile does)."""
    rise: dict[float, float] = {}
    for b, a in zip(before, after, strict=True):
        for (lb, v) in a.get("vllm:request_queue_time_seconds_bucket", []):
            le = float(lb["le"])
            old = next((v0 for lb0, v0 in b.get("vllm:request_queue_time_seconds_bucket", []) if lb0["le"] == lb["le"]),
                       0.0)
            rise[le] = rise.get(le, 0.0) + v - old
    if not rise or rise[math.inf] <= 0:
        return None
    bounds = sorted(rise)
    rank = 0.95 * rise[math.inf]
    lo, below = 0.0, 0.0
    for le in bounds:
        if rise[le] >= rank:
            if math.isinf(le):
                return lo
            return lo + (le - lo) * (rank - below) / max(rise[le] - below, 1e-9)
        lo, below = le, rise[le]
    return None


# -- one closed-loop run ---------------------------------------------------------------------------------------


def wait_idle(servers: Sequence[VllmServer], client: httpx.Client, limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        busy = sum(total(metrics(s.url, client), "vllm:num_requests_running")
                   + total(metrics(s.url, client), "vllm:num_requests_waiting") for s in servers)
        if busy == 0:
            return
        time.sleep(1.0)
    raise RuntimeError("the servers did not drain")


def closed_loop(signal: Signal, shape: Shape, servers: Sequence[VllmServer], router: Router, sidecar: str,
                times: Sequence[float], duration: float, seed: int) -> dict[str, Any]:
    client = httpx.Client()
    for url in list(router.workers[1:]):
        router.remove(url)
    wait_idle(servers, client)
    urls = [s.url for s in servers]
    before = [metrics(u, client) for u in urls]
    hpa = Hpa()
    replicas = 1
    trace: list[dict[str, Any]] = []
    t0 = time.monotonic()
    results, thread = run_load(router.url, shape, times, t0, seed)
    hpa.events.append((0.0, replicas))
    next_poll = POLL
    while True:
        now = time.monotonic() - t0
        if now >= duration:
            break
        if now < next_poll:
            time.sleep(min(0.2, next_poll - now))
            continue
        next_poll += POLL
        active = urls[:replicas]
        vllm = [metrics(u, client) for u in active]
        waiting = sum(total(f, "vllm:num_requests_waiting") for f in vllm)
        running = sum(total(f, "vllm:num_requests_running") for f in vllm)
        kv = sum(total(f, "vllm:kv_cache_usage_perc") for f in vllm)
        side = metrics(sidecar, client)
        needed = total(side, "vllm_headroom_replicas_needed", lambda lb: lb.get("target") in active)  # noqa: B023
        # The signal before the offered load (issue 24's closed loop): D / (C × u) per replica, from the same
        # sidecar's demand and capacity series; a replica whose capacity is unknown counts as the sidecar holds it.
        capacities = {lb["target"]: v for lb, v in side.get("vllm_headroom_replica_capacity_requests", [])}
        held = {lb["target"]: v for lb, v in side.get("vllm_headroom_replicas_needed", [])}
        needed_d = sum(v / (capacities[lb["target"]] * TARGET_UTILIZATION) if capacities.get(lb["target"])
                       else held.get(lb["target"], 0.0)
                       for lb, v in side.get("vllm_headroom_replica_demand_requests", [])
                       if lb.get("target") in active)
        basis = sorted({lb["limit"] + ("/held" if lb["conservative"] == "true" else "")
                        for lb, _v in side.get("vllm_headroom_replicas_needed_basis", [])
                        if lb.get("target") in active})
        if signal.name == "ours":
            inputs = [(needed, 1.0)]
        elif signal.name == "ours-D":
            inputs = [(needed_d, 1.0)]
        elif signal.name == "waiting>5":
            inputs = [(waiting, 5.0)]
        else:
            inputs = [(waiting, 5.0), (kv, 0.8)]
        new = hpa.decide(now, replicas, inputs)
        trace.append({"t": round(now, 2), "replicas": replicas, "decided": new, "running": running,
                      "waiting": waiting, "kv_sum": round(kv, 3), "replicas_needed": round(needed, 3),
                      "replicas_needed_d": round(needed_d, 3), "basis": basis})
        while new > replicas:
            router.add(urls[replicas])
            replicas += 1
        while new < replicas:
            replicas -= 1
            router.remove(urls[replicas])  # the newest replica goes first, as a ReplicaSet picks
        if hpa.events[-1][1] != replicas:
            hpa.events.append((now, replicas))
    thread.join(900)
    after = [metrics(u, client) for u in urls]
    end = duration
    replica_seconds = held_replica_seconds(hpa.events, end)
    steps = [b[1] - a[1] for a, b in zip(hpa.events, hpa.events[1:], strict=False)]
    signs = [1 if s > 0 else -1 for s in steps if s]
    changes = sum(1 for a, b in itertools.pairwise(signs) if a != b)
    ok = [r for r in results if r.error is None and r.first_token is not None]
    ttft = [r.first_token - r.sent for r in ok if r.first_token is not None]
    return {
        "signal": signal.name, "shape": shape.name, "requests": len(results), "errors": len(results) - len(ok),
        "ttft_p95_s": p95(ttft), "ttft_p50_s": statistics.median(ttft) if ttft else None,
        "queue_time_p95_s": queue_time_p95(before, after),
        "replica_seconds": replica_seconds, "replica_seconds_full_scale": replica_seconds * SCALE,
        "mean_replicas": replica_seconds / end, "max_replicas": max(n for _t, n in hpa.events),
        "scale_events": len(signs), "direction_changes": changes,
        "events": [(round(t, 1), n) for t, n in hpa.events], "trace": trace,
        "error_sample": next((r.error for r in results if r.error), None),
    }


# -- calibration and warm-up -----------------------------------------------------------------------------------


def capacity_per_replica(server: VllmServer, shape: Shape, seconds: float) -> dict[str, float]:
    """Completions per second of one replica kept full (closed loop, 3 x max_num_seqs clients)."""
    results: list[float] = []
    stop = time.monotonic() + seconds

    async def worker(client: httpx.AsyncClient, k: int) -> None:
        i = 0
        while time.monotonic() < stop:
            i += 1
            t = time.monotonic()
            answer = await client.post(f"{server.url}/v1/completions", json=completion(shape, 10_000 * k + i))
            answer.raise_for_status()
            if i > 1 and time.monotonic() < stop:  # each client's first request found no queue: not steady
                results.append(time.monotonic() - t)

    async def main() -> None:
        async with httpx.AsyncClient(timeout=600) as client:
            await asyncio.gather(*(worker(client, k) for k in range(3 * MAX_NUM_SEQS)))

    asyncio.run(main())
    # Little's law on the closed loop once it is full: clients = completions/s x mean latency of the requests sent
    # after each client's first. Counting completions over the run counted the first requests' ramp and lost those
    # still in flight at the stop: 0.99 requests/s for a replica that completes 1.60 steady
    # (bench/replica_capacity.py, decode-heavy, 2026-12-03), so "2.3 replicas' worth" of load was 1.4.
    return {"completions_per_s": 3 * MAX_NUM_SEQS / statistics.fmean(results) if results else float("nan"),
            "latency_p50_s": statistics.median(results) if results else float("nan")}


def warm(servers: Sequence[VllmServer], shape: Shape) -> None:
    """30 requests of the shape on every server, so each profile holds more than the 20 finished requests the
    sidecar needs before it trusts it (a replica that joins later is not judged at max_model_len)."""

    async def main() -> None:
        async with httpx.AsyncClient(timeout=600) as client:
            async def one(url: str, i: int) -> None:
                (await client.post(f"{url}/v1/completions", json=completion(shape, 900_000 + i))).raise_for_status()
            await asyncio.gather(*(one(s.url, 1000 * j + i) for j, s in enumerate(servers) for i in range(30)))

    asyncio.run(main())


def main() -> int:
    short = quick()
    if not (ROUTER_VENV / "bin" / "vllm-router").exists():
        print(f"vllm-router is not installed in {ROUTER_VENV}: run bench/install", file=sys.stderr)
        return 2
    load_before = loadavg()
    started = time.monotonic()
    out: dict[str, Any] = {
        "scale": SCALE, "poll_s": POLL, "down_window_s": DOWN_WINDOW, "tolerance": TOLERANCE,
        "replicas": [MIN_REPLICAS, MAX_REPLICAS], "step": [STEP_BASE_MS, STEP_PER_TOKEN_MS],
        "target_utilization": TARGET_UTILIZATION, "engine_env": ONE_PROCESS_ENV,
        "vllm": {"max_num_seqs": MAX_NUM_SEQS, "num_gpu_blocks": NUM_GPU_BLOCKS, "block_size": BLOCK_SIZE,
                 "max_model_len": MAX_MODEL_LEN},
        "router": "vllm-router 0.1.17 (PyPI; vllm-project/router, Rust), round_robin",
        "signals": {s.name: s.describe for s in SIGNALS}, "runs": [], "shapes": {}, "loadavg": [],
    }
    with pace_env() as env:
        for shape in SHAPES:
            # Fresh servers, router and sidecar per shape: vLLM's lifetime histograms (which the profile falls back
            # to when a replica finished nothing lately) then hold this shape only.
            up_from = time.monotonic()
            servers = start_servers(MAX_REPLICAS, env)
            out["startup_s"] = round(time.monotonic() - up_from, 1)
            out["memory_mb_per_server"] = round(_group_rss_mb(servers[0].pid))
            router = Router(servers[0].url)
            port = free_port()
            sidecar = f"http://127.0.0.1:{port}"
            logs = Path(tempfile.gettempdir())
            try:
                with (spawn(sidecar_argv(servers, port), log=logs / f"b9-sidecar-{shape.name}.log"),
                      spawn(router.argv, log=logs / f"b9-router-{shape.name}.log")):
                    wait_http(f"{router.url}/health", 60)
                    wait_http(f"{sidecar}/healthz", 60)
                    warm(servers, shape)
                    cal = capacity_per_replica(servers[0], shape, 15 if short else 30)
                    out["shapes"][shape.name] = {**asdict(shape), **cal}
                    times, burst_at, duration = arrivals(cal["completions_per_s"], short, seed=24)
                    out["shapes"][shape.name].update(requests=len(times), burst_at_s=burst_at, duration_s=duration)
                    for signal in SIGNALS:
                        load = loadavg()
                        run = closed_loop(signal, shape, servers, router, sidecar, times, duration, seed=7)
                        run["loadavg_before"], run["loadavg_after"] = load, loadavg()
                        out["runs"].append(run)
                        save("b9_autoscaling", {**out, "partial": True})  # a later failure keeps what was measured
                        print(f"{shape.name:14} {signal.name:10} ttft p95 {run['ttft_p95_s']:.2f} s, queue p95 "
                              f"{run['queue_time_p95_s']}, replica-s {run['replica_seconds']:.0f}, changes "
                              f"{run['direction_changes']}, errors {run['errors']}, load {run['loadavg_after']}",
                              flush=True)
            finally:
                for s in servers:
                    s.stop()
    out["loadavg"] = [load_before, loadavg()]
    out["wall_s"] = round(time.monotonic() - started)
    out["partial"] = False
    save("b9_autoscaling", out)
    return 0


def sidecar_argv(servers: Sequence[VllmServer], port: int) -> list[str]:
    """The real sidecar watching every replica, told max_num_seqs (stated), scraping every 2 s, its offered-load
    window scaled (30 s / SCALE: each poll reads the load since the last), at `TARGET_UTILIZATION`; its other
    settings are the defaults (profile window 300 s)."""
    argv = [sys.executable, "-m", "exporter", "serve", "--web.listen-address", f"127.0.0.1:{port}",
            "--scrape.interval", "2s", "--max-num-seqs", str(MAX_NUM_SEQS), "--no-vllm-cmdline-discovery",
            "--autoscaling.load-window", f"{LOAD_WINDOW:g}s", "--autoscaling.target-utilization",
            f"{TARGET_UTILIZATION:g}", "--log.level", "warning"]
    for s in servers:
        argv += ["--target", s.url]
    return argv


def _group_rss_mb(pgid: int) -> float:
    rss = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ProcessLookupError):
                if os.getpgid(int(entry.name)) == pgid:
                    for line in (entry / "status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            rss += int(line.split()[1])
    return rss / 1024


if __name__ == "__main__":
    raise SystemExit(main())
