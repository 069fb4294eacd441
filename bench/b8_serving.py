"""Benchmark 8 (issues 21 and 25): the serving path, every figure of issue 25 beside its goal, in one run.

Phases, one after the other on the same machine (the load averages are recorded around each):

- steady: two sidecars side by side at the default 5 s interval for `STEADY` seconds, one watching 1 target and
  one watching 100 (bench/fastreplay.py, one loopback port per target), each read by a Prometheus-like client
  every 15 s: whole-process CPU per scrape (the idle floor included) and RSS;
- metrics: `hey` at 200 requests per second on the 100-target sidecar's /metrics while it scrapes on (p50/p99);
- crowd: 1,000 concurrent clients asking for /, /api/v1/history and /api/v1/diagnosis of the 100-target
  sidecar, then 1,000 half-open (slowloris) connections, while a probe asks /healthz every 20 ms (p50/p99/max);
- huge: a target sending a 15 MiB exposition (tests/hostile.py) beside a healthy one at a 2 s interval: /healthz
  p99 and the sidecar's RSS;
- fleet: 1,000 targets at 5 s with the sidecar pinned to one core (achieved interval, share of the core);
- one-shot: whole-process CPU of `diagnose FILE`, `estimate` and `import exporter.cli`, next to `python -c pass`.

`BENCH_QUICK=1` shortens the steady phase to 60 s, `B8_STEADY_SECONDS=N` sets it. `B8_BEFORE=REV` (a git revision)
also runs that revision's sidecar (`git archive` into a temporary tree) beside this tree's, in every phase: its
steady pair at the same time as ours, the load phases and the one-shot commands one tree after the other; the
figures of both and their ratios (after / before) go into the result (`before`, `ratios`).

`B8_ONLY=metrics` runs the /metrics phase alone (`metrics_only`, ~7 minutes with `B8_BEFORE`): each tree's
100-target sidecar side by side, then rounds of hey (gzip, then as is) on each in turn with the floor in every
round; `B8_ROUNDS` (default 2), `B8_HEY_SECONDS` (default 30); `B8_SITE_BEFORE` / `B8_SITE_AFTER`: a folder put
first on that tree's PYTHONPATH (a `pip install --target` of a dependency on trial, e.g. uvloop); `B8_OUT`: where
its JSON goes (else only printed; bench/results is left alone); `B8_AFTER_TREE`: a tree to run as "after" instead
of this one (e.g. a `git archive` of HEAD with one change applied, when others edit this tree at the same time).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from .b4_load import hey
from .common import (
    FIXTURES,
    REPO,
    VLLM_ARGS,
    cpu_seconds,
    free_port,
    loadavg,
    percentile,
    quick,
    rss_mb,
    save,
    sidecar_argv,
    spawn,
    wait_http,
)

INTERVAL = 5.0  # the default --scrape.interval
GOALS = {"oneshot_cpu_s": 0.25, "metrics_p99_ms": 10.0, "cpu_ms_per_scrape": 2.0, "rss_1_mb": 45.0,
         "rss_100_mb": 80.0, "healthz_p99_ms": 100.0}


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def replay(count: int, tmp: Path) -> Iterator[tuple[int, Path]]:
    """bench/fastreplay.py on `count` loopback ports; (its /stats port, the targets file)."""
    port, urls = free_port(), tmp / f"targets-{count}"
    with spawn([sys.executable, "-m", "bench.fastreplay", "--port", str(port), "--count", str(count),
                "--urls-file", str(urls)]):
        wait_http(f"http://127.0.0.1:{port}/health")
        while not urls.exists():
            time.sleep(0.1)
        yield port, urls


def _stats(rport: int) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"http://127.0.0.1:{rport}/stats", timeout=60.0).json()
    return doc


def steady(tmp: Path, seconds: float, trees: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """For each tree the 1- and 100-target sidecars, all side by side; each 100-target one is then read by the
    load phases, one tree after the other (hey twice, in both orders, when there are two trees)."""
    outs: dict[str, dict[str, Any]] = {k: {"load_before": loadavg(), "seconds": seconds} for k in trees}
    with contextlib.ExitStack() as stack:
        run: dict[str, dict[str, Any]] = {}
        for k, tree in trees.items():
            (_r1, urls1), (r100, urls100) = stack.enter_context(replay(1, tmp)), stack.enter_context(replay(100, tmp))
            p1, p100, h100 = free_port(), free_port(), free_port()
            health = (tree / "exporter" / "expose" / "health.py").exists()  # a tree with the probes' own listener
            s1 = stack.enter_context(spawn(sidecar_argv(None, p1, "5s", targets_file=urls1), cwd=tree))
            s100 = stack.enter_context(spawn(sidecar_argv(
                None, p100, "5s", ["--web.health-address", f"127.0.0.1:{h100}"] if health else (),
                targets_file=urls100), cwd=tree))
            run[k] = {"p1": p1, "p100": p100, "h100": h100 if health else None, "s1": s1, "s100": s100,
                      "r100": r100}
        for r in run.values():
            for p in (r["p1"], r["p100"]):
                wait_http(f"http://127.0.0.1:{p}/healthz", timeout=60.0)
        time.sleep(2 * INTERVAL)  # the first scrape of every target also reads /v1/models and /version
        procs = [r[x] for r in run.values() for x in ("s1", "s100")]
        t0 = time.monotonic()
        cpu0 = {proc.pid: cpu_seconds(proc.pid) for proc in procs}
        series: dict[int, list[tuple[float, float, int]]] = {proc.pid: [] for proc in procs}
        next_read = t0
        with httpx.Client() as client:
            while (now := time.monotonic()) - t0 < seconds:
                for pid in series:
                    series[pid].append((now - t0, rss_mb(pid), _fds(pid)))
                if now >= next_read:  # Prometheus at its default 15 s
                    next_read += 15.0
                    for r in run.values():
                        for p in (r["p1"], r["p100"]):
                            client.get(f"http://127.0.0.1:{p}/metrics", timeout=30.0).raise_for_status()
                time.sleep(5.0)
        elapsed = time.monotonic() - t0
        for k, r in run.items():
            out = outs[k]
            for name, proc, n in (("one", r["s1"], 1), ("hundred", r["s100"], 100)):
                cpu = cpu_seconds(proc.pid) - cpu0[proc.pid]
                rss = [x for _, x, _ in series[proc.pid]]
                out[name] = {"targets": n, "cpu_ms_per_scrape": 1000 * cpu / (elapsed / INTERVAL * n),
                             "cpu_share": cpu / elapsed, "rss_mb_first": rss[0], "rss_mb_max": max(rss),
                             "rss_mb_last": rss[-1], "fds_last": series[proc.pid][-1][2],
                             "rss_series": [(round(t), round(x, 1)) for t, x, _ in series[proc.pid][::6]]}
            out["load_after_steady"] = loadavg()
        seconds_hey = 10 if quick() else 30
        order = list(run)
        for rnd in range(2 if len(run) > 1 else 1):
            for k in order if rnd % 2 == 0 else order[::-1]:
                out, s100 = outs[k], run[k]["s100"]
                base = f"http://127.0.0.1:{run[k]['p100']}"
                time.sleep(1.0)
                out["metrics_bytes"] = len(httpx.get(base + "/metrics", timeout=30.0,
                                                     headers={"accept-encoding": "identity"}).content)
                for key, extra in (("metrics_hey", ()), ("metrics_hey_identity", ("-disable-compression",))):
                    cpu_hey = cpu_seconds(s100.pid)
                    figures: dict[str, Any] = dict(hey(base + "/metrics", seconds_hey, extra))
                    figures["sidecar_cpu_share"] = (cpu_seconds(s100.pid) - cpu_hey) / seconds_hey
                    figures["load"] = loadavg()
                    out.setdefault(key + "_rounds", []).append(figures)
                    if key not in out or figures["p99_ms"] > out[key]["p99_ms"]:
                        out[key] = figures  # the worse of the rounds stands for the tree
                out["load_after_metrics"] = loadavg()
        for k, r in run.items():  # the floor: the same body from a minimal server, the same hey (`floor_server`)
            outs[k]["floor"] = floor(r["p100"], tmp, seconds_hey)
        for k, r in run.items():
            out, s100, p100 = outs[k], r["s100"], r["p100"]
            base = f"http://127.0.0.1:{p100}"
            out["crowd"] = asyncio.run(crowd(p100, 1000, 20.0, r["h100"]))
            out["slowloris"] = asyncio.run(slowloris(p100, 1000, 15.0, r["h100"]))
            out["after_crowd"] = {"rss_mb": rss_mb(s100.pid), "fds": _fds(s100.pid),
                                  "alive": s100.poll() is None}
            up = [ln for ln in httpx.get(base + "/metrics", timeout=30.0).text.splitlines()
                  if ln.startswith("vllm_headroom_up{")]
            out["after_crowd"]["up"] = sum(ln.endswith(" 1.0") for ln in up)
            stats = _stats(r["r100"])
            out["after_crowd"]["interval_max_s"] = stats["interval_max_s"]
            out["load_after"] = loadavg()
    return outs


def floor(port: int, tmp: Path, seconds: int) -> dict[str, Any]:
    """hey on bench/floor_server.py serving the body the sidecar on `port` serves now, gzipped and as is: what any
    asyncio server reaches on this machine with this load generator (hey decompresses and reads every body)."""
    body = tmp / f"body-{port}.prom"
    body.write_bytes(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30.0,
                               headers={"accept-encoding": "identity"}).content)
    out: dict[str, Any] = {"bytes": body.stat().st_size}
    for key, mode, extra in (("gzip", ["gzip"], ()), ("identity", [], ("-disable-compression",))):
        fport = free_port()
        with spawn([sys.executable, "-m", "bench.floor_server", str(fport), str(body), *mode]):
            wait_http(f"http://127.0.0.1:{fport}/")
            time.sleep(1.0)
            out[key] = {**hey(f"http://127.0.0.1:{fport}/", seconds, extra), "load": loadavg()}
    return out


def idle_memory(seconds: float = 5.0, rounds: int = 3) -> dict[str, Any]:
    """What this machine charges for memory a process has not touched lately: µs of CPU per 4 KiB page written
    once per page over 1 MiB already in use, back to back and after `seconds` asleep (median of `rounds`). On a
    host that reclaims an idle guest's memory (a nested microVM here), an idle sidecar pays this on every scrape
    (`cpu_ms_per_scrape` at 1 target counts it); the in-process scrape below shows the same."""
    block = bytearray(1 << 20)
    pages = range(0, len(block), 4096)
    for i in pages:
        block[i] = 1
    out: dict[str, Any] = {"seconds": seconds}
    for key, sleep in (("us_per_page_warm", 0.0), ("us_per_page_after_idle", seconds)):
        times = []
        for _ in range(rounds):
            time.sleep(sleep)
            started = time.process_time()
            for i in pages:
                block[i] = 2
            times.append(1e6 * (time.process_time() - started) / len(pages))
        out[key] = statistics.median(times)
    return out


def scrape_cost(seconds: float = 5.0, rounds: int = 4) -> dict[str, Any]:
    """ms of CPU of one `Target.scrape` of a recorded 0.32.0 timeline (bench/fastreplay.py), in process: back to
    back, and `seconds` after the last one (the sidecar's default interval), median of `rounds`."""
    from exporter.pipeline.target import Settings, Target

    with tempfile.TemporaryDirectory() as tmpdir, replay(1, Path(tmpdir)) as (_r, urls):
        url = urls.read_text().split()[0]
        target = Target(Settings(url, vllm_args=VLLM_ARGS.split(), discover_cmdline=False, timeout=30.0))

        async def run() -> dict[str, Any]:
            out: dict[str, Any] = {"seconds": seconds}
            async with httpx.AsyncClient() as client:
                await target.scrape(client)  # the first also reads /v1/models and /version
                for key, sleep in (("cpu_ms_back_to_back", 0.0), ("cpu_ms_after_interval", seconds)):
                    times = []
                    for _ in range(rounds):
                        await asyncio.sleep(sleep)
                        started = time.process_time()
                        await target.scrape(client)
                        times.append(1000 * (time.process_time() - started))
                    out[key] = statistics.median(times)
            return out

        return asyncio.run(run())


async def _get(port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        line = await reader.readline()
        while await reader.read(65536):
            pass
        return int(line.split()[1]) if line else 0
    finally:
        writer.close()


def probe(port: int, seconds: float) -> dict[str, Any]:
    """/healthz every 20 ms on a new connection each time for `seconds`, with blocking sockets. Run as its own
    process (`python -m bench.b8_serving --probe PORT SECONDS`), so the crowd's event loop in this one never
    delays the probe's own reading."""
    import socket

    times: list[float] = []
    failed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10.0) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            failed += not data.startswith(b"HTTP/1.1 200")
        except OSError:
            failed += 1
        times.append(time.perf_counter() - started)
        time.sleep(0.02)
    return {"probes": len(times), "failed": failed, "p50_ms": 1000 * percentile(times, 0.5),
            "p99_ms": 1000 * percentile(times, 0.99), "max_ms": 1000 * max(times)}


async def _probe(port: int, seconds: float) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.b8_serving", "--probe", str(port),
                                                str(seconds), stdout=asyncio.subprocess.PIPE, cwd=REPO)
    out, _ = await proc.communicate()
    doc: dict[str, Any] = json.loads(out)
    return doc


async def _probes(port: int, health: int | None, seconds: float) -> dict[str, Any]:
    """The probe on the port the kubelet asks (the health listener's where there is one), and with a health
    listener also on the main port at the same time (`main_port`)."""
    if health is None:
        return {"probed": "main port", **await _probe(port, seconds)}
    kubelet, main = await asyncio.gather(_probe(health, seconds), _probe(port, seconds))
    return {"probed": "health listener", **kubelet, "main_port": main}


async def crowd(port: int, clients: int, seconds: float, health: int | None = None) -> dict[str, Any]:
    """`clients` connections asking for the expensive bodies over and over while the probe runs (`_probes`)."""
    stop = asyncio.Event()
    codes: dict[int, int] = {}
    paths = ["/", "/api/v1/history", "/api/v1/diagnosis"]

    async def client(i: int) -> None:
        while not stop.is_set():
            try:
                status = await _get(port, paths[i % len(paths)])
            except OSError:
                status = 0
            codes[status] = codes.get(status, 0) + 1
            if status != 200:
                await asyncio.sleep(0.1)

    load = loadavg()
    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    await asyncio.sleep(1.0)  # the crowd is there before the probe starts
    result = await _probes(port, health, seconds)
    stop.set()
    await asyncio.wait(tasks, timeout=120.0)
    return {"clients": clients, "seconds": seconds, "answers": codes, **result, "load_before": load,
            "load_after": loadavg()}


async def slowloris(port: int, connections: int, seconds: float, health: int | None = None) -> dict[str, Any]:
    """`connections` requests that never finish their headers, reopened when the sidecar closes one."""
    stop = asyncio.Event()
    closed = 0

    async def hold() -> None:
        nonlocal closed
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET / HTTP/1.1\r\nHost: sidecar\r\nX-Slow: ")
                while not stop.is_set():
                    try:
                        async with asyncio.timeout(1.0):
                            if not await reader.read(1024):
                                break
                    except TimeoutError:
                        writer.write(b"x")  # one byte now and then, as slowloris does
                writer.close()
                closed += 1
            except OSError:
                await asyncio.sleep(0.1)

    load = loadavg()
    tasks = [asyncio.create_task(hold()) for _ in range(connections)]
    await asyncio.sleep(1.0)
    result = await _probes(port, health, seconds)
    stop.set()
    await asyncio.wait(tasks, timeout=60.0)
    return {"connections": connections, "seconds": seconds, "closed_by_sidecar": closed, **result,
            "load_before": load, "load_after": loadavg()}


def huge(seconds: float, tree: Path = REPO) -> dict[str, Any]:
    """A 15 MiB exposition beside a healthy target, both scraped every 2 s."""
    sys.path.insert(0, str(REPO))
    from tests import hostile

    ready, state = threading.Event(), {}

    def run() -> None:
        async def main() -> None:
            state["huge"] = await hostile.Target("huge").start()
            state["ok"] = await hostile.Target("ok").start()
            state["loop"], state["stop"] = asyncio.get_running_loop(), asyncio.Event()
            ready.set()
            await state["stop"].wait()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(60.0)
    port = free_port()
    load = loadavg()
    argv = sidecar_argv([state["huge"].url, state["ok"].url], port, "2s")  # the timeout: 80 % of it, 1.6 s
    try:
        with spawn(argv, cwd=tree) as sc:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60.0)
            before = len(state["huge"].metrics_at)
            rss: list[float] = []

            async def watch() -> dict[str, Any]:
                probing = asyncio.create_task(_probe(port, seconds))
                while not probing.done():
                    await asyncio.sleep(1.0)
                    rss.append(rss_mb(sc.pid))
                return await probing

            result = asyncio.run(watch())
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30.0).text
            up = {ln.split("}")[0]: ln.rsplit(" ", 1)[1] for ln in text.splitlines()
                  if ln.startswith("vllm_headroom_up{")}
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30.0)
    return {"exposition_mib": 15, "seconds": seconds, "huge_requests": len(state["huge"].metrics_at) - before,
            **result, "rss_mb_max": max(rss), "rss_mb_last": rss[-1], "up": up, "load_before": load,
            "load_after": loadavg()}


def fleet(tmp: Path, n: int, intervals: int, tree: Path = REPO) -> dict[str, Any]:
    """`n` targets at 5 s, the sidecar pinned to one core."""
    load = loadavg()
    with replay(n, tmp) as (rport, urls):
        port = free_port()
        argv = ["taskset", "-c", "1", *sidecar_argv(None, port, "5s", targets_file=urls)]
        with spawn(argv, cwd=tree) as sc:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120.0)
            deadline = time.monotonic() + 300.0
            while _stats(rport)["scrapes"] < 2 * n and time.monotonic() < deadline:
                time.sleep(1.0)
            httpx.get(f"http://127.0.0.1:{rport}/stats/reset", timeout=30.0)
            t0, cpu0 = time.monotonic(), cpu_seconds(sc.pid)
            next_read = t0 + 15.0
            latencies = []
            while True:
                time.sleep(1.0)
                now = time.monotonic()
                if now >= next_read:
                    next_read += 15.0
                    started = time.perf_counter()
                    httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=60.0)
                    latencies.append(time.perf_counter() - started)
                stats = _stats(rport)
                if (now - t0 >= intervals * INTERVAL and stats["gaps"] >= n) or now > deadline:
                    break
            elapsed = time.monotonic() - t0
            cpu = cpu_seconds(sc.pid) - cpu0
            rss = rss_mb(sc.pid)
    return {"targets": n, "window_s": round(elapsed, 1), "interval_median_s": stats["interval_median_s"],
            "interval_p95_s": stats["interval_p95_s"], "interval_max_s": stats["interval_max_s"],
            "core_share": cpu / elapsed, "rss_mb": rss,
            "metrics_read_ms_max": 1000 * max(latencies) if latencies else None, "load_before": load,
            "load_after": loadavg()}


def oneshot(rounds: int = 7, tree: Path = REPO) -> dict[str, Any]:
    """Whole-process CPU (user + system, children's rusage) of each command, interleaved rounds, median."""
    py = sys.executable
    commands = {
        "python -c pass": [py, "-c", "pass"],
        "import exporter.cli": [py, "-c", "import exporter.cli"],
        "diagnose FILE": [py, "-m", "exporter", "diagnose", str(FIXTURES / "false-full" / "snapshot.prom"),
                          "--vllm-args", VLLM_ARGS],
        "diagnose FILE --json": [py, "-m", "exporter", "diagnose", str(FIXTURES / "false-full" / "snapshot.prom"),
                                 "--vllm-args", VLLM_ARGS, "--json"],
        "estimate": [py, "-m", "exporter", "estimate", str(REPO / "tests" / "fixtures" / "estimate-configs" /
                                                            "llama31-70b.json"),
                     "--tensor-parallel-size", "8", "--gpu-memory", "80GiB", "--params", "70e9"],
    }
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    codes: dict[str, int] = {}
    # With the bytecode an installed package has (pip compiles it at install): compiled once into a private cache,
    # whatever PYTHONDONTWRITEBYTECODE says, so that no round pays for compiling the tree's sources.
    pycache = tempfile.mkdtemp(prefix="b8-pycache-")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(tree),
           "PYTHONPYCACHEPREFIX": pycache}
    subprocess.run([py, "-m", "compileall", "-q", str(tree / "exporter")], env=env, stdout=subprocess.DEVNULL,
                   check=True)
    for argv in commands.values():  # the prefix holds the dependencies' bytecode only once each has been imported
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tree, check=False)
    for _ in range(rounds):
        for name, argv in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            codes[name] = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                         cwd=tree, check=False).returncode
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    shutil.rmtree(pycache, ignore_errors=True)
    return {"rounds": rounds, "cpu_s_median": {k: statistics.median(v) for k, v in cpu.items()},
            "cpu_s_max": {k: max(v) for k, v in cpu.items()}, "exit_codes": codes, "load": loadavg()}


def _maps(pid: int, word: str) -> bool:
    """`word` is in a file the process has mapped (e.g. uvloop's extension module: which event loop runs)."""
    return word in Path(f"/proc/{pid}/maps").read_text()


def metrics_only(tmp: Path, trees: dict[str, Path], rounds: int, seconds: int) -> dict[str, Any]:
    """The /metrics phase alone, for a quick side-by-side experiment: each tree's 100-target sidecar scraping at
    5 s, all running at once; then `rounds` rounds, each hey on the floor server (the after tree's body) and on
    each tree's /metrics in turn (the trees' order reversed every other round), gzipped then as is."""
    out: dict[str, Any] = {"rounds": rounds, "hey_seconds": seconds, "load_start": loadavg()}
    with contextlib.ExitStack() as stack:
        run: dict[str, dict[str, Any]] = {}
        for k, tree in trees.items():
            _r, urls = stack.enter_context(replay(100, tmp))
            port = free_port()
            site = os.environ.get(f"B8_SITE_{k.upper()}")
            path = os.pathsep.join(x for x in (site, str(tree)) if x)
            proc = stack.enter_context(spawn(["env", f"PYTHONPATH={path}",
                                              *sidecar_argv(None, port, "5s", targets_file=urls)], cwd=tree))
            run[k] = {"port": port, "proc": proc}
        for r in run.values():
            wait_http(f"http://127.0.0.1:{r['port']}/healthz", timeout=60.0)
        time.sleep(2 * INTERVAL)  # the first scrape of every target also reads /v1/models and /version
        for k, r in run.items():
            out[k] = {"uvloop": _maps(r["proc"].pid, "uvloop"), "rss_mb": rss_mb(r["proc"].pid),
                      "gzip": [], "identity": []}
        body = tmp / "body-floor.prom"
        body.write_bytes(httpx.get(f"http://127.0.0.1:{run[list(run)[-1]]['port']}/metrics", timeout=30.0,
                                   headers={"accept-encoding": "identity"}).content)
        out["bytes"] = body.stat().st_size
        out["floor"] = {"gzip": [], "identity": []}
        order = list(run)
        for rnd in range(rounds):
            for k in ["floor", *(order if rnd % 2 == 0 else order[::-1])]:
                for key, extra in (("gzip", ()), ("identity", ("-disable-compression",))):
                    load = loadavg()
                    if k == "floor":
                        fport = free_port()
                        with spawn([sys.executable, "-m", "bench.floor_server", str(fport), str(body),
                                    *(["gzip"] if key == "gzip" else [])]):
                            wait_http(f"http://127.0.0.1:{fport}/")
                            time.sleep(1.0)
                            figures: dict[str, Any] = dict(hey(f"http://127.0.0.1:{fport}/", seconds, extra))
                    else:
                        pid = run[k]["proc"].pid
                        time.sleep(1.0)
                        cpu = cpu_seconds(pid)
                        figures = dict(hey(f"http://127.0.0.1:{run[k]['port']}/metrics", seconds, extra))
                        figures["sidecar_cpu_share"] = (cpu_seconds(pid) - cpu) / seconds
                    figures["load"] = f"{load} -> {loadavg()}"
                    out[k][key].append(figures)
                    print(f"round {rnd} {k:6} {key:8} p50 {figures['p50_ms']:6.1f} p99 {figures['p99_ms']:6.1f} ms"
                          f"  non-200 {figures['non_200']}  load {figures['load']}", flush=True)
        for k, r in run.items():
            out[k]["rss_mb_end"] = rss_mb(r["proc"].pid)
            out[k]["alive"] = r["proc"].poll() is None
    out["load_end"] = loadavg()
    return out


def before_tree(rev: str, tmp: Path) -> Path:
    """The tree of git revision `rev`, unpacked under `tmp`."""
    tree = tmp / "before"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


RATIOS: dict[str, tuple[str, ...]] = {  # after / before of the figures the goals name (below 1: better now)
    "metrics_p99_ms": ("steady", "metrics_hey", "p99_ms"),
    "metrics_identity_p99_ms": ("steady", "metrics_hey_identity", "p99_ms"),
    "floor_p99_ms": ("steady", "floor", "gzip", "p99_ms"),
    "metrics_sidecar_cpu_share": ("steady", "metrics_hey", "sidecar_cpu_share"),
    "cpu_ms_per_scrape_1": ("steady", "one", "cpu_ms_per_scrape"),
    "cpu_ms_per_scrape_100": ("steady", "hundred", "cpu_ms_per_scrape"),
    "rss_1_mb": ("steady", "one", "rss_mb_max"),
    "rss_100_mb": ("steady", "hundred", "rss_mb_max"),
    "healthz_crowd_p99_ms": ("steady", "crowd", "p99_ms"),
    "healthz_slowloris_p99_ms": ("steady", "slowloris", "p99_ms"),
    "healthz_huge_p99_ms": ("huge", "p99_ms"),
    "fleet_interval_p95_s": ("fleet", "interval_p95_s"),
    "fleet_core_share": ("fleet", "core_share"),
    "diagnose_cpu_s": ("oneshot", "cpu_s_median", "diagnose FILE"),
    "estimate_cpu_s": ("oneshot", "cpu_s_median", "estimate"),
}


def ratios(after: dict[str, Any], before: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, path in RATIOS.items():
        a: Any = after
        b: Any = before
        with contextlib.suppress(KeyError, TypeError, ZeroDivisionError):
            for key in path:
                a, b = a[key], b[key]
            out[name] = float(a) / float(b)
    return out


def main() -> None:
    if sys.argv[1:2] == ["--probe"]:
        print(json.dumps(probe(int(sys.argv[2]), float(sys.argv[3]))))
        return
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,000 clients in this process
    result: dict[str, Any] = {"goals": GOALS, "interval_s": INTERVAL}
    rev = os.environ.get("B8_BEFORE")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        trees = {"before": before_tree(rev, tmp), "after": REPO} if rev else {"after": REPO}
        if os.environ.get("B8_ONLY") == "metrics":
            if os.environ.get("B8_AFTER_TREE"):
                trees["after"] = Path(os.environ["B8_AFTER_TREE"])
            only = metrics_only(tmp, trees, int(os.environ.get("B8_ROUNDS", 2)),
                                int(os.environ.get("B8_HEY_SECONDS", 30)))
            only["before_rev"] = rev
            text = json.dumps(only, indent=2, default=float)
            if os.environ.get("B8_OUT"):
                Path(os.environ["B8_OUT"]).write_text(text + "\n")
            print(text, flush=True)
            return
        runs: dict[str, dict[str, Any]] = {k: {} for k in trees}
        print(f"== one-shot ({time.strftime('%T')}, load {loadavg()})", flush=True)
        for k, tree in trees.items():
            runs[k]["oneshot"] = oneshot(tree=tree)
            print(k, runs[k]["oneshot"]["cpu_s_median"], flush=True)
        print(f"== steady, /metrics, crowd, slowloris ({time.strftime('%T')}, load {loadavg()})", flush=True)
        steadies = steady(tmp, float(os.environ.get("B8_STEADY_SECONDS", 60 if quick() else 300)), trees)
        for k, s in steadies.items():
            runs[k]["steady"] = s
            print(k, {x: s[x] for x in ("one", "hundred")}, s["metrics_hey"], s["metrics_hey_identity"], s["floor"],
                  s["crowd"],
                  s["slowloris"], s["after_crowd"], sep="\n", flush=True)
        print(f"== this machine's idle memory, one scrape in process ({time.strftime('%T')}, load {loadavg()})",
              flush=True)
        result["machine_memory"] = {**idle_memory(), "load": loadavg()}
        result["scrape_in_process"] = {**scrape_cost(), "load": loadavg()}
        print(result["machine_memory"], result["scrape_in_process"], flush=True)
        print(f"== huge ({time.strftime('%T')}, load {loadavg()})", flush=True)
        for k, tree in trees.items():
            runs[k]["huge"] = huge(30.0, tree)
            print(k, runs[k]["huge"], flush=True)
        print(f"== fleet 1000 at 5 s, one core ({time.strftime('%T')}, load {loadavg()})", flush=True)
        for k, tree in trees.items():
            runs[k]["fleet"] = fleet(tmp, 1000, 4, tree)
            print(k, runs[k]["fleet"], flush=True)
    result.update(runs["after"])
    if rev:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True,
                                text=True, check=False).stdout.strip()
        result["before"] = {"rev": rev, "commit": commit, **runs["before"]}
        result["ratios"] = ratios(runs["after"], runs["before"])
        print("after / before:", {k: round(v, 3) for k, v in result["ratios"].items()}, flush=True)
    if os.environ.get("B8_NOTE"):  # what the run was (trees, lock, load), for bench/RESULTS.md
        result["note"] = os.environ["B8_NOTE"]
    save("b8_serving", result)


if __name__ == "__main__":
    main()
