"""Record /metrics fixtures from a real vLLM (CPU build), the pinned 0.32.0 or any older release.

    python -m tests.e2e.record [scenario ...] [--version X] [--v0] [--frontend rust] [--no-pin] [--resume] [--out DIR]

For each scenario (default: all, see scenarios.py) it writes into
tests/fixtures/vllm-X/<scenario>/ (vllm-X-v0 with --v0, i.e. VLLM_USE_V1=0; vllm-X-rust with --frontend rust,
the Rust frontend vllm-rs, VLLM_USE_RUST_FRONTEND=1, on the pinned release only): meta.json,
timeline.jsonl.gz (one /metrics frame per 0.5 s), snapshot.prom (the frame that shows the state
best) and startup.log. Scenarios with the same server flags share one server, started once, in the
order given (idle first, so its counters are zero). --resume skips scenarios that already have a
meta.json. Runs under the system python; vLLM runs in its own venv (vllm_server.vllm_python).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from .load import Load, MetricsTimeline, engine_state, held_seconds
from .scenarios import SCENARIOS, Scenario, State
from .vllm_server import (
    FRONTENDS,
    PINNED_VERSION,
    REPO,
    VllmServer,
    engine_generation,
    rust_frontend_runtime,
    venv_runtime,
    vllm_python,
)

FIXTURES = REPO / "tests" / "fixtures"
INTERVAL_S = 0.5
LOAD_DEADLINE_S = 180.0  # beyond the longest closed-loop wave plus its drain
IDLE_DEADLINE_S = 60.0


def log(msg: str) -> None:
    print(f"[record {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _scrub(value: Any, server: VllmServer) -> Any:
    """Replace machine-specific paths (temp model dir, venv python, the Rust frontend's add-on) by stable names."""
    if isinstance(value, str):
        value = value.replace(server.model_path, "tiny-llama")
        addon = server.runtime.get("entry") if server.frontend == "rust" else None
        return value.replace(str(Path(addon).parent), "vllm-rs") if addon else value
    if isinstance(value, list):
        return [_scrub(v, server) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v, server) for k, v in value.items()}
    return value


def _wait_idle(timeline: MetricsTimeline, deadline_s: float) -> bool:
    """Wait until a frame newer than now shows no running and no waiting request."""
    since = timeline.now()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        frames = [f for f in timeline.frames if f[0] > since]
        if frames:
            st = engine_state(frames[-1][1])
            if not st["running"] and not st["waiting"]:
                return True
        time.sleep(INTERVAL_S)
    return False


def _before(version: str, limit: tuple[int, int]) -> bool:
    parts = [int(re.sub(r"\D.*", "", p) or 0) for p in version.split(".")[:2]]
    return (parts[0], parts[1]) < limit


def fixture_dir(version: str, v0: bool = False, frontend: str = "python") -> Path:
    return FIXTURES / (f"vllm-{version}-v0" if v0 else f"vllm-{version}-rust" if frontend == "rust"
                       else f"vllm-{version}")


def gauges_while_progressing(states: list[tuple[float, State]], start_t: float, end_t: float) -> dict[str, Any]:
    """How the scheduler gauges read in the frames of [start_t, end_t] where the engine made progress
    (vllm:generation_tokens_total rose since the frame before): all of running, waiting and usage 0 in how many.

    The Python frontend's gauges are the engine's last published stats, so they read running > 0 whenever tokens
    are generated; the Rust frontend's (0.32.0) read 0 on many such frames.
    """
    progressing = zero = running_zero = 0
    for (t, st), (_t0, prev) in zip(states[1:], states[:-1], strict=True):
        tokens, before = st.get("generation_tokens_total"), prev.get("generation_tokens_total")
        if not start_t <= t <= end_t or tokens is None or before is None or tokens <= before:
            continue
        progressing += 1
        running_zero += not st.get("running")
        zero += not st.get("running") and not st.get("waiting") and not st.get("kv_cache_usage_perc")
    return {"frames_with_progress": progressing, "of_which_running_waiting_usage_all_0": zero,
            "of_which_running_0": running_zero}


def server_flags(flags: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """A scenario's flags for a release whose CPU backend needs another block size (V0 0.8.x: 16).

    The pool keeps its size in tokens: the block count scales by old / new block size.
    """
    bs = runtime.get("block_size")
    if not bs or bs == flags["block_size"]:
        return dict(flags)
    out = dict(flags, block_size=bs)
    if flags.get("num_gpu_blocks_override"):
        out["num_gpu_blocks_override"] = flags["num_gpu_blocks_override"] * flags["block_size"] // bs
    return out


def record(scenario: Scenario, server: VllmServer, out_root: Path, suffix: str = "") -> dict[str, Any]:
    log(f"{scenario.name}: recording ({scenario.description})")
    with httpx.Client(timeout=10.0) as client:
        v1_models = client.get(f"{server.url}/v1/models").json()
        version = client.get(f"{server.url}/version").json()

    timeline = MetricsTimeline(server.url, INTERVAL_S).start()
    time.sleep(scenario.lead_s)
    load_window: dict[str, Any] = {"start_t": round(timeline.now(), 3)}
    load = Load(server.url, server.served_model_name, scenario.waves)
    finished = True
    if scenario.waves:
        load.start()
        finished = load.wait(LOAD_DEADLINE_S)
        if not finished:
            load.cancel()
        load_window["end_t"] = round(timeline.now(), 3)
        idle_again = _wait_idle(timeline, IDLE_DEADLINE_S)
    else:
        load_window["end_t"] = load_window["start_t"]
        idle_again = True
    time.sleep(scenario.tail_s)
    timeline.stop()

    frames = timeline.frames
    states: list[tuple[float, State]] = [(t, engine_state(text)) for t, text in frames]
    prevs: list[State | None] = [None] + [st for _, st in states[:-1]]
    # Only frames inside the load window (plus the drain) may be chosen for the snapshot.
    marks = [(t, scenario.shows(st, prev)) for (t, st), prev in zip(states, prevs, strict=True)]
    showing = [
        (i, t, states[i][1])
        for i, (t, ok) in enumerate(marks)
        if ok and (not scenario.waves or t >= load_window["start_t"])
    ]
    held = held_seconds(marks)
    held_bridged = held_seconds(marks, max_gap_frames=1)
    snapshot_index = len(frames) - 1
    if showing:
        best = max(scenario.score(st, prevs[i]) for i, _, st in showing)
        ties = [i for i, _, st in showing if scenario.score(st, prevs[i]) == best]
        snapshot_index = ties[len(ties) // 2]  # the middle of equally good frames
    snap_t, snap_text = frames[snapshot_index]
    snap_state = states[snapshot_index][1]

    problems = []
    if not finished:
        problems.append(f"load did not finish within {LOAD_DEADLINE_S} s (cancelled)")
    if not idle_again:
        problems.append(f"engine not idle within {IDLE_DEADLINE_S} s after the load")
    if load.errors:
        problems.append(f"{len(load.errors)} request errors, first: {load.errors[0]!r}")
    if not showing:
        problems.append("no frame showed the state")
    elif held_bridged < scenario.min_hold_s:
        problems.append(f"state held {held_bridged:.1f} s < {scenario.min_hold_s} s")
    if timeline.failures:
        problems.append(f"{timeline.failures} failed scrapes")

    capacity = server.startup_capacity()
    first_pre = states[0][1]["num_preemptions_total"] or 0.0
    last_pre = states[-1][1]["num_preemptions_total"] or 0.0
    argv = _scrub(list(server.argv), server)
    argv[0] = "python"  # the venv interpreter's path is machine-specific
    durations = sorted(timeline.durations)
    meta: dict[str, Any] = {
        "scenario": scenario.name + suffix,
        "vllm_version": server.version,
        "frontend": server.frontend,
        "engine_generation": engine_generation(server.log_text()),
        "server_argv": argv,
        "env": server.env_used,
        "cpu_affinity": {
            "engine": sorted(server.engine_cpus),
            "api_server_and_clients": sorted(server.front_cpus),
        },
        "flags": {
            k: server.flags()[k]
            for k in ("max_model_len", "block_size", "num_gpu_blocks_override", "max_num_seqs", "served_model_name")
        },
        "startup_capacity_line": capacity.get("line"),
        "startup_capacity": {k: v for k, v in capacity.items() if k not in ("line", "lines")},
        "startup_capacity_lines": capacity.get("lines", []),
        "v1_models": _scrub(v1_models, server),
        "version": version,
        "metrics_content_types": timeline.content_types,
        "scrape_seconds": {"median": round(durations[len(durations) // 2], 4), "max": round(durations[-1], 4)}
        if durations else {},
        "gauges_while_progressing": gauges_while_progressing(states, load_window["start_t"], load_window["end_t"]),
        "load": {
            "description": scenario.description,
            "waves": load.describe(),
            "requests_completed": len(load.results),
            "request_errors": len(load.errors),
            "window": load_window,
        },
        "snapshot_t": snap_t,
        "observed": snap_state,
        # Longest run of consecutive frames showing the state, and the same allowing single
        # off frames (a scrape that lands between one request finishing and the next
        # admission); the recorder requires the latter to reach the scenario's minimum.
        "state_held_s": round(held, 3),
        "state_held_s_single_frame_gaps_bridged": round(held_bridged, 3),
        "state_min_hold_s": scenario.min_hold_s,
        "frames_showing_state": len(showing),
        "preemptions_during_recording": last_pre - first_pre,
        "problems": problems,
    }
    d = out_root / (scenario.name + suffix)
    timeline.save(d, meta)  # adds interval and frames
    (d / "snapshot.prom").write_text(snap_text)
    (d / "startup.log").write_text(_scrub(server.startup_log(), server))
    log(
        f"{scenario.name}: {len(frames)} frames, held {held:.1f} s ({held_bridged:.1f} s "
        f"bridging single off frames), snapshot t={snap_t} "
        f"{snap_state}, {len(load.results)} requests" + (f"; PROBLEMS: {problems}" if problems else "")
    )
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help=f"default: all of {list(SCENARIOS)}")
    ap.add_argument("--version", default=PINNED_VERSION, help=f"vLLM release (default {PINNED_VERSION})")
    ap.add_argument("--v0", action="store_true", help="the V0 engine (VLLM_USE_V1=0), into vllm-X-v0/")
    ap.add_argument("--frontend", choices=FRONTENDS, default="python",
                    help="rust: vLLM's Rust frontend (vllm-rs, VLLM_USE_RUST_FRONTEND=1), into vllm-X-rust/")
    ap.add_argument("--resume", action="store_true", help="skip scenarios already recorded (meta.json exists)")
    ap.add_argument("--out", type=Path, help="default: tests/fixtures/vllm-X[-v0]")
    ap.add_argument("--no-pin", action="store_true",
                    help="leave CPU placement to the kernel (engine, API server and clients share every CPU); "
                         "recorded as <scenario>-unpinned")
    ap.add_argument("--retries", type=int, default=1, help="re-record a scenario whose state held too briefly")
    args = ap.parse_args(argv)
    if args.frontend == "rust" and (args.v0 or args.version != PINNED_VERSION):
        ap.error(f"the Rust frontend is recorded on vLLM {PINNED_VERSION}'s V1 engine only")
    out = args.out or fixture_dir(args.version, args.v0, args.frontend)
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")

    suffix = "-unpinned" if args.no_pin else ""
    if args.resume:
        done = [n for n in names if (out / (n + suffix) / "meta.json").exists()]
        if done:
            log(f"already recorded in {out}, skipped: {done}")
        names = [n for n in names if n not in done]
    runtime = (rust_frontend_runtime() if args.frontend == "rust" else venv_runtime(vllm_python(args.version))) \
        if names else {}
    # Releases that still have V0 (< 0.11) may fall back to it silently: name the engine explicitly.
    env = {"VLLM_USE_V1": "0"} if args.v0 else {"VLLM_USE_V1": "1"} if _before(args.version, (0, 11)) else {}
    (out / "start-failure.log").unlink(missing_ok=True)
    if not args.resume:  # resuming keeps the evidence of an engine that died in an earlier scenario
        (out / "server-failure.log").unlink(missing_ok=True)

    # Group by server flags, keeping the requested order within and across groups.
    groups: dict[str, list[Scenario]] = {}
    for n in names:
        key = json.dumps(SCENARIOS[n].flags, sort_keys=True)
        groups.setdefault(key, []).append(SCENARIOS[n])

    failed = []
    for scenarios in groups.values():
        t0 = time.monotonic()
        flags = server_flags(scenarios[0].flags, runtime)
        log(f"starting vLLM {args.version} ({args.frontend} frontend) with {flags} {env or ''} for "
            f"{[s.name for s in scenarios]}")
        server = VllmServer(**flags, version=args.version, env=env, frontend=args.frontend, pin_cpus=not args.no_pin)
        try:
            server.start()
        except RuntimeError as exc:  # could not start: keep vLLM's words for the support table
            out.mkdir(parents=True, exist_ok=True)
            (out / "start-failure.log").write_text(_scrub(str(exc), server) + "\n")
            log(f"vLLM {args.version} did not start: {str(exc).splitlines()[-1] if str(exc) else exc!r}")
            return 2
        wanted = {"0": "V0", "1": "V1"}.get(env.get("VLLM_USE_V1", ""))
        got = engine_generation(server.log_text())
        if wanted and got and wanted != got:  # e.g. 0.8.5 on CPU: "Falling back to V0"
            why = next((ln for ln in server.log_text().splitlines() if "Falling back" in ln or "not supported" in ln),
                       f"started the {got} engine")
            server.stop()
            (out / "start-failure.log").parent.mkdir(parents=True, exist_ok=True)
            (out / "start-failure.log").write_text(
                f"RuntimeError: VLLM_USE_V1={env['VLLM_USE_V1']} asked for {wanted}, vLLM {args.version} ran {got}: "
                f"{why.strip()[-200:]}\n")
            log(f"vLLM {args.version}: asked for {wanted}, got {got}")
            return 2
        with server:
            server.pin_self()  # load and scrape threads run beside the API server, not the engine
            log(f"ready in {time.monotonic() - t0:.0f} s at {server.url}: {server.startup_capacity().get('line')}")
            for sc in scenarios:
                t1 = time.monotonic()
                meta = record(sc, server, out, suffix)
                if server.exited():  # the engine died under this load: keep its words, record nothing more
                    (out / "server-failure.log").write_text(_scrub(server.log_tail(80), server) + "\n")
                    log(f"{sc.name}: vLLM {args.version} exited during the scenario (server-failure.log)")
                    VllmServer.unpin_self()
                    return 3
                for _ in range(args.retries):
                    # The state appeared but did not hold long enough: on a shared 2-core box the clients and
                    # the API server (one CPU) sometimes cannot keep a fast release's queue full. Try again.
                    if not any(p.startswith("state held") for p in meta["problems"]):
                        break
                    log(f"{sc.name}: again ({meta['problems']})")
                    meta = record(sc, server, out, suffix)
                log(f"{sc.name}: took {time.monotonic() - t1:.0f} s")
                if meta["problems"]:
                    failed.append(sc.name)
        VllmServer.unpin_self()
        log(f"server stopped; group took {time.monotonic() - t0:.0f} s")
    if failed:
        log(f"scenarios with problems: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
