"""Do N paced vLLM replicas deliver N x one replica's capacity on this machine? (b9's premise, tested.)

    flock /tmp/vllm-heavy.lock python3.11 -m bench.replica_capacity --n 4 [--env K=V ...] [--step 25,0.1]

Starts N vLLM 0.32.0 CPU servers of the tiny model exactly as bench/b9_autoscaling.py does (its start_servers and
pace_env: same model, flags, pacing plugin and environment), then runs three phases and prints, per phase, the
completed requests/s, the engine step time (vLLM's own vllm:iteration_tokens_total histogram: one observation per
engine step), each server's process CPU (/proc, every process of its group) and the machine's load:

  idle     no load: what N idle servers burn
  one      server 0 kept full (2 x max_num_seqs clients in a closed loop), the others idle: b9's calibration
  all      every server kept full the same way

The load is b9's decode-heavy shape (prompt 32, max_tokens 96, ignore_eos). Besides /proc/loadavg (a 1-minute
average, so it lags a short phase) a sampler counts every runnable (R) or uninterruptible (D) thread of the
machine 5 times a second, by process and thread name: the instantaneous figure the load average averages, and
where it comes from.

--env K=V adds to the servers' environment; a value "alt:A,B" gives server i the i-th of the values in turn (e.g.
VLLM_CPU_OMP_THREADS_BIND=alt:0,1). --step BASE,PER_TOKEN overrides the pacing (ms). Results are appended as one
JSON line per run to bench/results/replica_capacity.jsonl.

start_servers now adds b9's ONE_PROCESS_ENV (VLLM_ENABLE_V1_MULTIPROCESSING=0, OMP_NUM_THREADS=1) under the
caller's env: `--env VLLM_ENABLE_V1_MULTIPROCESSING=1` gives back the Worker-process engine b9 ran before.
Measured 2026-12-03 (load 25 ms + 0.1 ms/token; other sessions' unlocked work took up to ~1-2 cores meanwhile):

  engine                               one replica   four replicas    step (four)   busy server   runnable (four)
  mp (b9 before), auto bind            1.60 req/s    2.67 (1.67x)     63 ms         ~1.1 / 0.3 c   44
  mp, Workers bound to CPUs 0/1        1.60          3.32 (2.07x)     33-100 ms     ~1.2 / 0.2-0.8 33
  mp, OMP_WAIT_POLICY=PASSIVE etc.     1.60, Worker still 0.98 core (the spin is Python's sched_yield, not OpenMP)
  mp, --step 100,0.1                   0.40          0.64 (1.60x)     216 ms        ~1.0 / 0.3 c   46
  uni (ONE_PROCESS_ENV)                1.60          6.40 (4.00x)     26.2 ms       0.19 c         1.5
  uni, N=2                             1.57          3.02 (1.93x)     26.2 ms       0.22 c         0.6
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.b9_autoscaling import MAX_NUM_SEQS, SHAPES, completion, metrics, pace_env, start_servers, total, warm
from bench.common import RESULTS, TICK, loadavg
from tests.e2e.vllm_server import VllmServer

SHAPE = next(s for s in SHAPES if s.name == "decode-heavy")
CLIENTS_PER_SERVER = 2 * MAX_NUM_SEQS  # every slot full, with a request ready to take each freed one


# -- /proc -----------------------------------------------------------------------------------------------------


def group_pids(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ProcessLookupError):
                if os.getpgid(int(entry.name)) == pgid:
                    out.append(int(entry.name))
    return out


def _stat(path: Path) -> tuple[str, str, float]:
    """(comm, state, cpu seconds) of /proc/<pid>[/task/<tid>]/stat."""
    text = path.read_text()
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    return comm, fields[0], (int(fields[11]) + int(fields[12])) / TICK


def proc_cpu(pids: Sequence[int]) -> dict[int, tuple[str, float, dict[str, float]]]:
    """pid -> (comm, cpu s, {thread name: cpu s summed over threads of that name})."""
    out: dict[int, tuple[str, float, dict[str, float]]] = {}
    for pid in pids:
        with contextlib.suppress(OSError, ProcessLookupError, ValueError):
            comm, _state, cpu = _stat(Path(f"/proc/{pid}/stat"))
            threads: dict[str, float] = {}
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, ValueError):
                    tcomm, _s, tcpu = _stat(task / "stat")
                    threads[tcomm] = threads.get(tcomm, 0.0) + tcpu
            out[pid] = (comm, cpu, threads)
    return out


def busy_cores() -> tuple[float, float]:
    """(busy jiffies, all jiffies) of the machine, /proc/stat."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = vals[3] + vals[4]
    return float(sum(vals) - idle), float(sum(vals))


class Runnable(threading.Thread):
    """Counts runnable (R) and uninterruptible (D) threads of the whole machine, 5 times a second."""

    def __init__(self, names: dict[int, str]) -> None:
        super().__init__(daemon=True)
        self.names = names  # pid -> label (e.g. "s0 VLLM::EngineCore"); others by their comm
        self.samples: list[int] = []
        self.by: Counter[str] = Counter()
        self.halt = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self.halt.wait(0.2):
            n = 0
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                with contextlib.suppress(OSError, ValueError):
                    for task in (entry / "task").iterdir():
                        with contextlib.suppress(OSError, ValueError):
                            tcomm, state, _cpu = _stat(task / "stat")
                            if state in "RD" and not (pid == me and int(task.name) == threading.get_native_id()):
                                n += 1
                                pname = self.names.get(pid) or (
                                    "me" if pid == me else "other " + (entry / "comm").read_text().strip())
                                self.by[f"{pname} / {tcomm} [{state}]"] += 1
            self.samples.append(n)

    def report(self) -> dict[str, Any]:
        k = max(1, len(self.samples))
        return {"mean": round(statistics.fmean(self.samples), 2) if self.samples else None,
                "max": max(self.samples, default=None),
                "top": [(name, round(c / k, 2)) for name, c in self.by.most_common(12)]}


# -- load ------------------------------------------------------------------------------------------------------


def saturate(urls: Sequence[str], seconds: float, settle: float = 8.0) -> dict[str, Any]:
    """A closed loop of CLIENTS_PER_SERVER clients per url for settle + seconds; counts what completes inside the
    last `seconds` (each url's slots are full by then)."""
    done: dict[str, list[float]] = {u: [] for u in urls}
    t_start = time.monotonic() + settle
    t_end = t_start + seconds

    async def client(c: httpx.AsyncClient, url: str, k: int) -> None:
        i = 0
        while time.monotonic() < t_end:
            i += 1
            t = time.monotonic()
            (await c.post(f"{url}/v1/completions", json=completion(SHAPE, 10_000 * k + i))).raise_for_status()
            now = time.monotonic()
            if t_start <= now <= t_end:
                done[url].append(now - t)

    async def main() -> None:
        limits = httpx.Limits(max_connections=len(urls) * CLIENTS_PER_SERVER + 8)
        async with httpx.AsyncClient(timeout=600, limits=limits) as c:
            tasks = [asyncio.create_task(client(c, u, 100 * j + k))
                     for j, u in enumerate(urls) for k in range(CLIENTS_PER_SERVER)]
            await asyncio.sleep(max(0.0, t_end - time.monotonic()))
            for t in tasks:  # requests still in flight at the end are not waited for
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    return {u: {"completed": len(v), "rps": len(v) / seconds,
                "latency_p50_s": statistics.median(v) if v else None} for u, v in done.items()}


def engine_counters(urls: Sequence[str], client: httpx.Client) -> list[dict[str, float]]:
    out = []
    for u in urls:
        f = metrics(u, client)
        out.append({"steps": total(f, "vllm:iteration_tokens_total_count"),
                    "tokens": total(f, "vllm:iteration_tokens_total_sum"),
                    "itl_sum": total(f, "vllm:inter_token_latency_seconds_sum"),
                    "itl_count": total(f, "vllm:inter_token_latency_seconds_count"),
                    "gen": total(f, "vllm:generation_tokens_total")})
    return out


def phase(name: str, servers: Sequence[VllmServer], loaded: Sequence[str], seconds: float,
          labels: dict[int, str]) -> dict[str, Any]:
    client = httpx.Client(timeout=10)
    urls = [s.url for s in servers]
    pids = {s.url: group_pids(s.pid) for s in servers}
    sampler = Runnable(labels)
    settle = 8.0 if loaded else 0.0
    if loaded:
        # The counters are read after the settle period: saturate() runs in a thread and counts from t_start.
        box: dict[str, Any] = {}
        th = threading.Thread(target=lambda: box.update(saturate(loaded, seconds, settle)), daemon=True)
        th.start()
        time.sleep(settle)
    c0 = engine_counters(urls, client)
    cpu0 = {u: proc_cpu(p) for u, p in pids.items()}
    me0 = _stat(Path(f"/proc/{os.getpid()}/stat"))[2]
    b0, a0 = busy_cores()
    t0 = time.monotonic()
    sampler.start()
    if loaded:
        th.join()
    else:
        time.sleep(seconds)
    sampler.halt.set()
    wall = time.monotonic() - t0
    c1 = engine_counters(urls, client)
    cpu1 = {u: proc_cpu(p) for u, p in pids.items()}
    me1 = _stat(Path(f"/proc/{os.getpid()}/stat"))[2]
    b1, a1 = busy_cores()
    sampler.join()
    per_server = []
    for i, u in enumerate(urls):
        d = {k: c1[i][k] - c0[i][k] for k in c0[i]}
        procs: list[dict[str, Any]] = []
        for pid, (comm, cpu, threads) in cpu1[u].items():
            if pid in cpu0[u]:
                _comm0, cpu_0, threads0 = cpu0[u][pid]
                hot = sorted(((t, (v - threads0.get(t, 0.0)) / wall) for t, v in threads.items()),
                             key=lambda x: -x[1])[:4]
                procs.append({"pid": pid, "comm": comm, "cores": round((cpu - cpu_0) / wall, 3),
                              "threads": [(t, round(v, 3)) for t, v in hot if v > 0.005]})
        row: dict[str, Any] = {
            "url": u, "loaded": u in loaded, "cores": round(sum(p["cores"] for p in procs), 3),
            "procs": sorted(procs, key=lambda p: -p["cores"]),
            "steps": d["steps"], "steps_per_s": round(d["steps"] / wall, 2),
            "step_ms": round(1000 * wall / d["steps"], 1) if d["steps"] else None,
            "tokens_per_step": round(d["tokens"] / d["steps"], 2) if d["steps"] else None,
            "itl_ms": round(1000 * d["itl_sum"] / d["itl_count"], 1) if d["itl_count"] else None
        }
        if loaded and u in box:
            row.update({k: box[u][k] for k in ("completed", "latency_p50_s")}, rps=round(box[u]["rps"], 3))
        per_server.append(row)
    rps = sum(r.get("rps", 0.0) for r in per_server)
    return {"phase": name, "seconds": round(wall, 1), "rps": round(rps, 3),
            "machine_busy_cores": round((b1 - b0) / (a1 - a0) * (os.cpu_count() or 1), 2),
            "client_cores": round((me1 - me0) / wall, 3), "loadavg_end": loadavg(),
            "runnable": sampler.report(), "servers": per_server}


def print_phase(p: dict[str, Any]) -> None:
    loaded = [s for s in p["servers"] if s["loaded"]] or p["servers"]
    steps = [s["step_ms"] for s in loaded if s["step_ms"]]
    print(f"  {p['phase']:5} {p['rps']:6.2f} req/s | step {statistics.fmean(steps) if steps else float('nan'):6.1f} ms"
          f" (itl {', '.join(str(s['itl_ms']) for s in loaded)}) | cores/server "
          f"{', '.join(str(s['cores']) for s in p['servers'])} | machine {p['machine_busy_cores']} cores, client "
          f"{p['client_cores']} | runnable mean {p['runnable']['mean']} max {p['runnable']['max']} | "
          f"loadavg {p['loadavg_end']}", flush=True)
    for name, k in p["runnable"]["top"][:6]:
        print(f"        runnable {k:5.2f}  {name}")
    for s in p["servers"][:2]:
        for proc in s["procs"][:2]:
            print(f"        {s['url'][-5:]} {proc['comm']:20} {proc['cores']:.3f} cores  {proc['threads']}")


def parse_env(items: Sequence[str], n: int) -> list[dict[str, str]]:
    envs: list[dict[str, str]] = [{} for _ in range(n)]
    for item in items:
        key, value = item.split("=", 1)
        values = value[4:].split(",") if value.startswith("alt:") else [value]
        for i in range(n):
            envs[i][key] = values[i % len(values)]
    return envs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--env", action="append", default=[], help="K=V, or K=alt:A,B (server i gets the i-th)")
    ap.add_argument("--step", default=None, help="BASE_MS,PER_TOKEN_MS pacing (default b9's)")
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--one", type=float, default=40.0, help="seconds with server 0 alone loaded (0: skip)")
    ap.add_argument("--all", type=float, default=60.0, help="seconds with every server loaded")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    extra = parse_env(args.env, args.n)
    started = time.monotonic()
    with pace_env() as env:
        if args.step:
            env = {**env, "VLLM_HEADROOM_BENCH_STEP": args.step}
        if all(e == extra[0] for e in extra):
            servers = start_servers(args.n, {**env, **extra[0]})
        else:  # per-server environments: b9's start_servers once per server, in parallel
            with ThreadPoolExecutor(args.n) as pool:
                futures = [pool.submit(start_servers, 1, {**env, **e}) for e in extra]
                got = [f.result() if f.exception() is None else None for f in futures]
            servers = [s for g in got if g for s in g]
            if len(servers) != args.n:
                for s in servers:
                    s.stop()
                raise RuntimeError("a vLLM server did not start")
        startup = time.monotonic() - started
        try:
            labels: dict[int, str] = {}
            for i, s in enumerate(servers):
                for pid in group_pids(s.pid):
                    with contextlib.suppress(OSError):
                        labels[pid] = f"s{i} " + Path(f"/proc/{pid}/comm").read_text().strip()
            warm(servers, SHAPE)
            print(f"{args.label or 'run'}: n={args.n} env={args.env} step={env['VLLM_HEADROOM_BENCH_STEP']} "
                  f"(started in {startup:.0f} s, load {loadavg()})", flush=True)
            phases = [phase("idle", servers, [], args.idle, labels)]
            print_phase(phases[-1])
            if args.one > 0:
                phases.append(phase("one", servers, [servers[0].url], args.one, labels))
                print_phase(phases[-1])
            if args.n > 1 or args.one <= 0:
                phases.append(phase("all", servers, [s.url for s in servers], args.all, labels))
                print_phase(phases[-1])
            one = next((p["rps"] for p in phases if p["phase"] == "one"), None)
            every = next((p["rps"] for p in phases if p["phase"] == "all"), None)
            if one and every:
                print(f"  all / one = {every / one:.2f} (ideal {args.n})", flush=True)
            RESULTS.mkdir(parents=True, exist_ok=True)
            with open(RESULTS / "replica_capacity.jsonl", "a") as fh:
                fh.write(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "label": args.label,
                                     "n": args.n, "env": args.env, "step": env["VLLM_HEADROOM_BENCH_STEP"],
                                     "startup_s": round(startup, 1), "phases": phases}) + "\n")
        finally:
            for s in servers:
                s.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
