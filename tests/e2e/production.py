"""Production-shaped scenarios on a real vLLM CPU build, recorded with the engine's own per-step truth.

    python -m tests.e2e.production [scenario ...] [--version X] [--out DIR]      (make prod-fixtures)
    python -m tests.e2e.production --sweep SEED [SEED ...] --out DIR              (the randomized sweep)

The tiny model keeps KV at 512 bytes per token, so a CPU vLLM here holds production pool sizes: 20,001 blocks
(20,000 usable) of 32 tokens under max_model_len 32,768, max_num_seqs 256, a token budget of 8,192, chunked
prefill and prefix caching on (vLLM's defaults), `--disable-uvicorn-access-log`, and the lean keep-alive driver
of tests/e2e/workload.py. Each scenario is one line of workload (`Workload.parse`) and reaches one limit; every
recording writes into tests/fixtures/vllm-X/<scenario>/:

* meta.json (flags, workload, clock, what the engine did: `engine_truth`), timeline.jsonl.gz (one /metrics frame
  per second), snapshot.prom, startup.log;
* engine-steps.jsonl.gz: the truth recorder's lines (tests/e2e/truth_plugin) for the recording's window;
* requests.jsonl.gz: what the driver sent and when each answer came (timeline clock).

Scenarios sharing a server shape share one server (start-up ~100 s on 2 cores): record a shape's scenarios in
one call. Under `flock /tmp/vllm-heavy.lock` (the team's rule for a real vLLM).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .engine_truth import STATE, Steps, align, parse_lines
from .load import MetricsTimeline, engine_state
from .record import _scrub, _wait_idle, fixture_dir, log
from .vllm_server import PINNED_VERSION, VllmServer, engine_generation
from .workload import Driver, Workload

INTERVAL_S = 1.0  # one frame a second: production scrapes are 1-30 s apart, and fixtures stay small
BLOCKS = 20_001  # usable: 20,000 (block 0 is vLLM's null block)
MAX_MODEL_LEN = 32_768
PROD: dict[str, Any] = {
    "max_model_len": MAX_MODEL_LEN, "block_size": 32, "num_gpu_blocks_override": BLOCKS, "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "extra_args": ("--hf-overrides", json.dumps({"max_position_embeddings": MAX_MODEL_LEN}),
                   "--disable-uvicorn-access-log"),
}
ADAPTERS = ("adapter-a", "adapter-b")
LORA_RANK = 8


def lora_flags(folder: Path) -> dict[str, Any]:
    """PROD with two LoRA adapters (folder/<name>) and room for one at a time (--max-loras 1): the other adapter's
    requests are deferred while the first runs."""
    mods = [f"{name}={folder / name}" for name in ADAPTERS]
    return {**PROD, "extra_args": (*PROD["extra_args"], "--enable-lora", "--max-loras", "1", "--max-lora-rank",
                                    str(LORA_RANK), "--lora-modules", *mods)}


def write_adapter(folder: Path, seed: int) -> None:
    """A PEFT LoRA adapter for the tiny Llama (q_proj and v_proj of both layers, rank 8) written by hand:
    adapter_config.json and a safetensors file (8-byte header length, JSON header, little-endian float32)."""
    cfg = json.loads((Path(__file__).parent / "tiny-llama" / "config.json").read_text())
    hidden, head_dim = cfg["hidden_size"], cfg["head_dim"]
    outs = {"q_proj": cfg["num_attention_heads"] * head_dim, "v_proj": cfg["num_key_value_heads"] * head_dim}
    rng = random.Random(seed)
    tensors: dict[str, tuple[list[int], list[float]]] = {}
    for layer in range(cfg["num_hidden_layers"]):
        for mod, out in outs.items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{mod}"
            a = [rng.gauss(0, 0.02) for _ in range(LORA_RANK * hidden)]
            b = [rng.gauss(0, 0.02) for _ in range(out * LORA_RANK)]
            tensors[f"{key}.lora_A.weight"] = ([LORA_RANK, hidden], a)
            tensors[f"{key}.lora_B.weight"] = ([out, LORA_RANK], b)
    header: dict[str, Any] = {}
    blobs = []
    offset = 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": LORA_RANK, "lora_alpha": 16, "lora_dropout": 0.0,
        "target_modules": sorted(outs), "bias": "none", "fan_in_fan_out": False,
        "base_model_name_or_path": "tiny-llama",
    }, indent=2))


@dataclass(frozen=True)
class ProdScenario:
    name: str
    shape: str  # "prod" or "lora"
    workload: str  # Workload.parse
    limit: str  # the limit it reaches: the engine's stop reason (engine_truth) that must appear while requests wait
    description: str
    actions: tuple[tuple[float, str], ...] = ()  # (seconds after the load starts, "sleep" | "wake")
    versions: tuple[str, ...] = ("0.32.0", "0.10.2")
    deadline_s: float = 240.0
    notes: dict[str, str] = field(default_factory=dict)


SCENARIOS: dict[str, ProdScenario] = {s.name: s for s in [
    ProdScenario("prod-slots", "prod", "seed=1 | closed clients=320 for=25 mix=short", "max_num_seqs",
                 "320 closed-loop clients of short requests (prompt 16-64, max_tokens 256-512): 256 run, the rest "
                 "wait while the pool stays near 10 %."),
    ProdScenario("prod-budget", "prod", "seed=2 | closed clients=64 for=30 mix=prefill", "token_budget",
                 "64 closed-loop clients of long prompts (6,000-8,000 tokens, max_tokens 32-128): running prefills "
                 "take the whole 8,192-token budget, so the rest stay queued beside ~240 free slots and a pool "
                 "mostly free."),
    ProdScenario("prod-kv", "prod", "seed=3 | closed clients=24 for=50 mix=bigdoc", "kv",
                 "24 closed-loop clients of 28,000-29,000-token prompts (875-907 blocks), max_tokens 300-400: ~21 "
                 "fill the 20,000 blocks; the head's whole prompt must fit (vLLM >= 0.19) and waits for free blocks "
                 "beside 235 free slots while the running ones decode."),
    ProdScenario("prod-preempt", "prod", "seed=4 | closed clients=256 for=30 mix=grow", "preempted",
                 "256 closed-loop clients, prompt 1,800-2,200 tokens, max_tokens 1,200-1,600: admission reserves "
                 "only the prompt, and 256 growing requests outgrow the pool: a preemption storm.", deadline_s=300),
    ProdScenario("prod-burst", "prod", "seed=5 | burst n=1200 at=1 mix=chat | poisson rate=5 for=20 at=1 mix=chat",
                 "max_num_seqs", "A burst of 1,200 chat requests (one of 4 shared 512-token system prompts + 64-1,024 "
                 "own tokens, max_tokens 32-256) over a light Poisson stream: the queue builds and drains."),
    ProdScenario("prod-mixed", "prod", "seed=6 | poisson rate=8 for=30 mix=chat:6,rag:3,doc:1", "token_budget",
                 "Poisson arrivals (8/s) of chat, RAG (1,024-token shared prefix + 2,048-8,192) and long documents "
                 "(12,000-30,000): prompts across vLLM's 1-2-5 histogram buckets up to 20,000 at max_model_len "
                 "32,768, quantiles at scale."),
    ProdScenario("prod-sleep", "prod", "seed=7 | closed clients=64 for=22 mix=chat", "paused",
                 "64 closed-loop chat clients; at 6 s POST /sleep?level=1&mode=keep (the CPU worker keeps its "
                 "memory, the scheduler pauses with requests kept), at 14 s POST /wake_up.",
                 actions=((6.0, "sleep"), (14.0, "wake")), versions=("0.32.0",),
                 notes={"0.10.2": "no sleep on the CPU build: 0.10.2 sleeps only the executor (CUDA) and has no "
                                  "scheduler pause"}),
    ProdScenario("prod-lora", "lora", "seed=8 | closed clients=200 for=25 mix=lora", "deferred",
                 "--enable-lora --max-loras 1 with two adapters, 200 closed-loop clients choosing either: while one "
                 "adapter's requests run, the other's are deferred (skipped: no head-of-line)."),
    ProdScenario("prod-never-fits", "toolong", "seed=9 | burst n=1 at=1 mix=huge | poisson rate=2 for=30 at=2 mix=tiny",
                 "kv", "max_model_len 700,000 over the 20,000-block pool (640,000 tokens): vLLM 0.32.0 refuses to "
                 "start; a release that starts gets one 660,000-token prompt, which can never fit, and short "
                 "requests behind it.", deadline_s=60),
]}
TOO_LONG_LEN = 700_000


def workload_of(sc: ProdScenario) -> Workload:
    return Workload.parse(sc.workload)


def _post(url: str, path: str) -> dict[str, Any]:
    with httpx.Client(timeout=60.0) as client:
        resp = client.post(f"{url}{path}")
        return {"path": path, "status": resp.status_code, "body": resp.text[:200]}


def truth_summary(steps: Steps, frames: list[tuple[float, str]], t0: float) -> dict[str, Any]:
    """What the engine did during a recording, from its own steps: counts for meta.json and the report."""
    aligned = align(steps, frames, t0)
    waiting = [a for a in aligned if a.step is not None and (a.step["w0"] or 0) > 0]
    stops: Counter[str] = Counter()
    for a in waiting:
        nxt = a.after[0] if a.after else a.step
        if nxt is not None:
            stops[str(nxt["stop"])] += 1
    return {
        "steps_recorded": len(steps.steps),
        "engine_steps": (steps.steps[-1].k - steps.steps[0].k + 1) if steps.steps else 0,
        "admitted": sum(len(s.adm) for s in steps.steps),
        "resumed": sum(len(s.res) for s in steps.steps),
        "preempted": sum(len(s.pre) for s in steps.steps),
        "refusals": sum(1 for s in steps.steps if s.ref),
        "deferrals": dict(sum((Counter(s.dfr) for s in steps.steps), Counter())),
        "step_stops": dict(Counter(str(s["stop"]) for s in steps.steps)),
        "frames": len(aligned), "frames_aligned": sum(a.matched for a in aligned),
        "frames_with_waiting": len(waiting), "frame_stops": dict(stops),
        "pauses": steps.pauses, "max_running": max((s["r"] or 0 for s in steps.steps), default=0),
        "max_waiting": max((s["w"] or 0 for s in steps.steps), default=0),
        "min_free_blocks": min((s["free"] for s in steps.steps if s["free"] is not None), default=None),
        "recorder_cost": steps.costs, "recorder_errors": steps.errors,
    }


def annotate(records: list[dict[str, Any]], steps: Steps, t0: float) -> None:
    """Beside what the driver saw, when the engine admitted each request (first time, timeline clock) and how
    often it preempted it, from the recorder's steps (engine ids are `<X-Request-Id>-<n>[-suffix]`)."""
    admitted: dict[str, float] = {}
    preempted: Counter[str] = Counter()
    for st in steps.steps:
        for rid in st.adm:
            admitted.setdefault(rid.split("-")[0], round(st.t - t0, 4))
        for rid in st.pre:
            preempted[rid.split("-")[0]] += 1
    for r in records:
        if r["id"] in admitted:
            r["admitted"] = admitted[r["id"]]
        if preempted[r["id"]]:
            r["preempted"] = preempted[r["id"]]


def _window_lines(path: Path, t_from: float, t_to: float) -> list[str]:
    """The recorder's header and every line with t in [t_from, t_to]; the first step line in the window carries
    the whole state (the recorder writes only changes, so a cut would otherwise lose what had not changed)."""
    out = []
    state: dict[str, Any] = {}
    first = True
    for line in path.read_text().splitlines():
        if not line:
            continue
        d = json.loads(line)
        if "hdr" in d or "error" in d:
            out.append(line)
            continue
        is_step = not ({"cost", "pause_set"} & d.keys())
        if is_step:
            state.update({k: d[k] for k in STATE if k in d})
        if t_from <= d.get("t", 0.0) <= t_to:
            if is_step and first:
                d = {"t": d["t"], "k": d["k"], **state, **{k: v for k, v in d.items() if k not in STATE}}
                line = json.dumps(d, separators=(",", ":"))
                first = False
            out.append(line)
    return out


def _gz(path: Path, lines: list[str]) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for line in lines:
            gz.write((line + "\n").encode())


def record(sc: ProdScenario, server: VllmServer, out_root: Path, workload: Workload | None = None,
           name: str | None = None) -> dict[str, Any]:
    """One scenario on a running server with the truth recorder on; writes its fixture folder."""
    assert server.truth is not None
    workload = workload or workload_of(sc)
    name = name or sc.name
    log(f"{name}: {workload.describe()}")
    with httpx.Client(timeout=10.0) as client:
        v1_models = client.get(f"{server.url}/v1/models").json()
        version = client.get(f"{server.url}/version").json()
    timeline = MetricsTimeline(server.url, INTERVAL_S).start()
    t0 = timeline._t0
    time.sleep(2.0)
    window: dict[str, Any] = {"start_t": round(timeline.now(), 3)}
    load_t = time.monotonic()
    driver = Driver(server.url, server.served_model_name, workload, t0).start()
    actions = []
    for at, what in sc.actions:
        time.sleep(max(0.0, load_t + at - time.monotonic()))
        actions.append({"t": round(timeline.now(), 3), "action": what,
                        **_post(server.url, "/sleep?level=1&mode=keep" if what == "sleep" else "/wake_up")})
    finished = driver.wait(sc.deadline_s)
    if not finished:
        driver.cancel()
    window["end_t"] = round(timeline.now(), 3)
    idle = _wait_idle(timeline, 120.0)
    time.sleep(2.0)
    timeline.stop()
    end = time.monotonic()
    frames = timeline.frames
    lines = _window_lines(server.truth, t0 - 0.5, end)
    steps = parse_lines(lines)
    summary = truth_summary(steps, frames, t0)
    states = [engine_state(text) for _t, text in frames]
    snap = max(range(len(frames)), key=lambda i: (states[i]["waiting"] or 0, states[i]["running"] or 0))
    problems = []
    if not finished:
        problems.append(f"load did not finish within {sc.deadline_s:.0f} s (cancelled)")
    if not idle:
        problems.append("engine not idle within 120 s after the load")
    if driver.errors:
        problems.append(f"{len(driver.errors)} request errors, first: {driver.errors[0][:120]}")
    reached = set(summary["frame_stops"]) | set(summary["step_stops"]) | ({"paused"} if summary["pauses"] else set())
    if sc.limit != "any" and sc.limit not in reached:
        problems.append(f"the engine never stopped admitting for {sc.limit!r} (stops: {summary['step_stops']})")
    if steps.errors:
        problems.append(f"recorder errors: {steps.errors[:2]}")
    if timeline.failures:
        problems.append(f"{timeline.failures} failed scrapes")
    argv = _scrub(list(server.argv), server)
    argv[0] = "python"
    lora_root = getattr(server, "lora_root", None)
    if lora_root is not None:  # the adapters' temp folder: a stable name
        argv = [a.replace(str(lora_root), "lora") for a in argv]
    capacity = server.startup_capacity()
    meta: dict[str, Any] = {
        "scenario": name, "vllm_version": server.version, "engine_generation": engine_generation(server.log_text()),
        "server_argv": argv, "env": server.env_used, "flags": server.flags(),
        "startup_capacity_line": capacity.get("line"),
        "startup_capacity": {k: v for k, v in capacity.items() if k not in ("line", "lines")},
        "v1_models": _scrub(v1_models, server), "version": version,
        "load": {"description": sc.description, "workload": workload.describe(), "requests_sent": len(driver.records),
                 "requests_completed": sum(1 for r in driver.records if r.get("status") == 200),
                 "request_errors": len(driver.errors), "cancelled": not finished, "window": window,
                 "actions": actions},
        "limit": sc.limit,
        # The timeline's t are seconds after this engine monotonic time (the recorder's and the driver's clock).
        "clock": {"t0_monotonic": round(t0, 4)},
        "engine_truth": summary,
        "snapshot_t": frames[snap][0], "observed": states[snap], "problems": problems,
    }
    d = out_root / name
    d.mkdir(parents=True, exist_ok=True)
    timeline.save(d, meta)
    (d / "snapshot.prom").write_text(frames[snap][1])
    (d / "startup.log").write_text(_scrub(server.startup_log(), server))
    _gz(d / "engine-steps.jsonl.gz", lines)
    annotate(driver.records, steps, t0)
    sent = sorted(driver.records, key=lambda r: (r.get("sent", 0), r["id"]))
    _gz(d / "requests.jsonl.gz", [json.dumps(r, sort_keys=True) for r in sent])
    log(f"{name}: {len(frames)} frames, {len(driver.records)} sent, engine: admitted {summary['admitted']}, "
        f"preempted {summary['preempted']}, max running {summary['max_running']}, max waiting "
        f"{summary['max_waiting']}, frame stops {summary['frame_stops']}"
        + (f"; PROBLEMS {problems}" if problems else ""))
    return meta


def record_refusal(name: str, server: VllmServer, out_root: Path, error: str) -> None:
    """vLLM would not start with these flags: its words are the recording."""
    text = _scrub(server.log_text() or error, server)
    d = out_root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "start-failure.log").write_text(text)
    reason = next((ln for ln in reversed(text.splitlines()) if "ValueError" in ln or "larger than" in ln), "")
    argv = _scrub(list(server.argv), server)
    argv[0] = "python"
    meta = {"scenario": name, "vllm_version": server.version, "server_argv": argv, "env": server.env_used,
            "refused": True, "reason": reason.strip()[:500], "description": SCENARIOS[name].description}
    (d / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    log(f"{name}: vLLM refused to start: {reason.strip()[:200]}")


def server_for(shape: str, version: str, tmp: Path, truth: Path) -> VllmServer:
    env = {"VLLM_SERVER_DEV_MODE": "1"}  # /sleep and /wake_up (prod-sleep)
    if version != PINNED_VERSION:
        env["VLLM_USE_V1"] = "1"
    flags = dict(PROD)
    if shape == "toolong":
        flags = {**PROD, "max_model_len": TOO_LONG_LEN,
                 "extra_args": ("--hf-overrides", json.dumps({"max_position_embeddings": TOO_LONG_LEN}),
                                "--disable-uvicorn-access-log")}
    if shape == "lora":
        for i, name in enumerate(ADAPTERS):
            write_adapter(tmp / "lora" / name, 100 + i)
        flags = lora_flags(tmp / "lora")
    server = VllmServer(**flags, version=version, env=env, truth=truth)
    server.lora_root = tmp / "lora"  # type: ignore[attr-defined]
    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help=f"default: all of {list(SCENARIOS)}")
    ap.add_argument("--version", default=PINNED_VERSION)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sweep", type=int, nargs="*", help="record random_workload(SEED) for each seed instead")
    args = ap.parse_args(argv)
    out = args.out or fixture_dir(args.version)
    if args.sweep:
        from .workload import random_workload

        sweep = ProdScenario("sweep", "prod", "", "any", "A workload drawn from the seed (workload.random_workload).",
                             deadline_s=300)
        jobs = [(sweep, random_workload(seed), f"sweep-{seed}") for seed in args.sweep]
        shapes = {"prod": jobs}
    else:
        names = args.scenarios or [n for n, s in SCENARIOS.items() if args.version in s.versions]
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown:
            ap.error(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")
        shapes = {}
        for n in names:
            shapes.setdefault(SCENARIOS[n].shape, []).append((SCENARIOS[n], None, n))
    failed = []
    for shape, jobs in shapes.items():
        with tempfile.TemporaryDirectory(prefix="vllm-prod-") as tmp:
            truth = Path(tmp) / "truth.jsonl"
            t_start = time.monotonic()
            server = server_for(shape, args.version, Path(tmp), truth)
            log(f"starting vLLM {args.version} ({shape}) for {[j[2] for j in jobs]}")
            try:
                server.start()
            except RuntimeError as exc:
                if shape != "toolong":
                    raise
                record_refusal(jobs[0][2], server, out, str(exc))
                continue
            with server:
                server.pin_self()
                log(f"ready in {time.monotonic() - t_start:.0f} s: {server.startup_capacity().get('line')}")
                for sc, workload, name in jobs:
                    meta = record(sc, server, out, workload, name)
                    if server.exited():
                        (out / name / "server-failure.log").write_text(_scrub(server.log_tail(80), server) + "\n")
                        failed.append(name)
                        break
                    if meta["problems"]:
                        failed.append(name)
            VllmServer.unpin_self()
            log(f"{shape}: server stopped after {time.monotonic() - t_start:.0f} s")
    if failed:
        log(f"scenarios with problems: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
