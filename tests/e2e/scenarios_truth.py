"""Scenarios of issue 11 on a real vLLM 0.32.0, and their recorder with the load driver's own truth.

    python -m tests.e2e.scenarios_truth [scenario ...]      # record into tests/fixtures/vllm-0.32.0/<name>/

Besides what `tests.e2e.record` writes (meta.json, timeline.jsonl.gz, snapshot.prom, startup.log), each
recording gets `requests.jsonl`: one line per request the load driver sent, with its wave, prompt and
max_tokens, and when it was sent and finished (or failed/cancelled) on the timeline's clock. The scorer
(tests/truth.py) takes ground truth from these and from the engine's own counters and gauges.

Servers (tiny model, block_size 32):
* SLOTS4: the shared pool (40 blocks, 39 usable, max_model_len 512) with max_num_seqs 4;
* BUDGET: 321 blocks, max_model_len 8192, max_num_seqs 8, --max-num-batched-tokens 256;
* TOO_LONG: 40 blocks (1,248 usable tokens) under max_model_len 8192. vLLM 0.32.0 refuses to start: its
  admission check plans against the overridden pool (vllm/v1/core/kv_cache_utils.py, "If
  `num_gpu_blocks_override` is set ... auto-fit, the admission check ... plan against the same effective
  capacity"), so the refusal is what is recorded (never-fits/start-failure.log);
* SMALL_POOL: the closest shape it starts, max_model_len 1,248 = the 39 usable blocks exactly (maximum
  concurrency 1.0x: one request of max_model_len takes the whole pool), max_num_seqs 24.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .load import Load, MetricsTimeline, Wave, engine_state, held_seconds, prompt_ids
from .record import _scrub, _wait_idle, fixture_dir, log
from .scenarios import Scenario, State
from .vllm_server import PINNED_VERSION, VllmServer, engine_generation

HF_8192 = ("--hf-overrides", '{"max_position_embeddings": 8192}')
SLOTS4: dict[str, Any] = {"max_model_len": 512, "block_size": 32, "num_gpu_blocks_override": 40, "max_num_seqs": 4}
BUDGET: dict[str, Any] = {"max_model_len": 8192, "block_size": 32, "num_gpu_blocks_override": 321,
                          "max_num_seqs": 8, "max_num_batched_tokens": 256, "extra_args": HF_8192}
TOO_LONG: dict[str, Any] = {"max_model_len": 8192, "block_size": 32, "num_gpu_blocks_override": 40,
                            "max_num_seqs": 24, "extra_args": HF_8192}
SMALL_POOL: dict[str, Any] = {"max_model_len": 1248, "block_size": 32, "num_gpu_blocks_override": 40,
                              "max_num_seqs": 24}
SHARED_PREFIX = 640  # tokens = 20 full blocks, cached after the first request


@dataclass(frozen=True)
class TruthWave(Wave):
    """A Wave whose prompts may start with a prefix shared by every request (prefix caching hits)."""

    shared_prefix: int = 0
    give_up_after: float | None = None  # cancel the whole load this many seconds after it started


def prompt_for(wave: Wave, seed: int) -> list[int]:
    shared = wave.shared_prefix if isinstance(wave, TruthWave) else 0
    if not shared:
        return prompt_ids(wave.prompt_len, seed)
    return prompt_ids(shared, 0) + prompt_ids(wave.prompt_len - shared, seed)


class TruthLoad(Load):
    """The load driver, keeping for every request when it was sent and when it ended (timeline clock)."""

    def __init__(self, url: str, model: str, waves: list[Wave], t0: float) -> None:
        super().__init__(url, model, waves)
        self.t0 = t0
        self.requests: list[dict[str, Any]] = []

    async def _request(self, client: httpx.AsyncClient, wave: Wave, index: int, seed: int) -> None:
        """One request, its send and end times kept in `requests` (Load's client loop retries and collects)."""
        rec: dict[str, Any] = {"wave": index, "seed": seed, "prompt_len": wave.prompt_len,
                               "max_tokens": wave.max_tokens,
                               "shared_prefix": wave.shared_prefix if isinstance(wave, TruthWave) else 0,
                               "sent": round(time.monotonic() - self.t0, 3)}
        self.requests.append(rec)
        body = {"model": self.model, "prompt": prompt_for(wave, seed), "max_tokens": wave.max_tokens,
                "ignore_eos": True, "temperature": 0,
                # n engine requests per HTTP request (vLLM rejects n > 1 with greedy sampling).
                **({"n": wave.n, "temperature": 1.0} if wave.n != 1 else {})}
        try:
            resp = await client.post(f"{self.url}/v1/completions", json=body)
        except asyncio.CancelledError:
            rec["cancelled"] = round(time.monotonic() - self.t0, 3)
            raise
        except Exception as exc:
            rec["error"] = repr(exc)[:300]
            raise
        rec["finished"] = round(time.monotonic() - self.t0, 3)
        rec["status"] = resp.status_code
        if resp.status_code != 200:
            rec["error"] = resp.text[:300]
            raise RuntimeError(resp.text[:300])
        self.results.append({"_wave": index})


@dataclass(frozen=True)
class TruthScenario(Scenario):
    give_up_s: float = 90.0  # cancel the load after this (a request that can never be admitted)
    notes: dict[str, Any] = field(default_factory=dict)
    expect_refusal: bool = False  # vLLM is expected not to start with these flags: record its words


def _n(st: State, key: str) -> float:
    v = st.get(key)
    return 0.0 if v is None else v


def _preempt(st: State, prev: State | None) -> bool:
    return prev is not None and _n(st, "num_preemptions_total") > _n(prev, "num_preemptions_total")


SCENARIOS: dict[str, TruthScenario] = {
    s.name: s
    for s in [
        TruthScenario(
            name="false-full-inferred",
            flags=SLOTS4,
            # 16 + 64 tokens: at most 3 blocks each, 4 running use <= 12 of 39 blocks: max_num_seqs (4) binds.
            waves=[Wave(24, 16, 64, duration=12.0)],
            description=("max_num_seqs 4, 24 closed-loop clients for 12 s, prompt 16, max_tokens 64: every slot "
                         "taken, ~20 wait, usage <= 31 %. Replayed without max_num_seqs, the cap must be inferred "
                         "as 4."),
            shows=lambda st, prev: _n(st, "waiting") > 0 and _n(st, "running") == 4,
            score=lambda st, prev: _n(st, "waiting"),
            min_hold_s=8.0,
        ),
        TruthScenario(
            name="workload-switch",
            flags=SLOTS4,
            waves=[
                # Short requests: slots bind (4 of 4) with 1-2 blocks each.
                Wave(8, 16, 32, duration=8.0),
                # Then long generations: 4 running grow to 16 blocks each = 64 > 39: preemption.
                Wave(8, 16, 480, delay=8.0, duration=10.0),
            ],
            description=("max_num_seqs 4. t=0: 8 closed-loop clients for 8 s, prompt 16, max_tokens 32 (slots "
                         "bind). t=8 s: 8 closed-loop clients for 10 s, prompt 16, max_tokens 480: 4 running "
                         "requests grow to 16 blocks each (64 > 39) and vLLM preempts."),
            shows=_preempt,
            score=lambda st, prev: _n(st, "num_preemptions_total") - (_n(prev, "num_preemptions_total") if prev else 0),
            min_hold_s=2.0,
        ),
        TruthScenario(
            name="budget-bound",
            flags=BUDGET,
            # 3,072-token prompts (96 blocks) prefill in 12 steps of 256 tokens: the running prefill takes the
            # whole budget, so waiting requests stay queued with 7 slots and >= 224 blocks free.
            waves=[Wave(8, 3072, 8, duration=12.0)],
            description=("--max-num-batched-tokens 256, 321 blocks, max_num_seqs 8. 8 closed-loop clients for "
                         "12 s, prompt 3072 tokens (96 blocks), max_tokens 8: each prefill needs 12 steps of the "
                         "whole 256-token budget; the rest wait with free slots and free blocks."),
            shows=lambda st, prev: (_n(st, "waiting") > 0 and _n(st, "running") < 8
                                    and _n(st, "kv_cache_usage_perc") < 0.7),
            score=lambda st, prev: _n(st, "waiting"),
            min_hold_s=5.0,
        ),
        TruthScenario(
            name="never-fits",
            flags=TOO_LONG,
            waves=[],
            description=("max_model_len 8192 over a pool of 39 usable blocks (1,248 tokens) with "
                         "--num-gpu-blocks-override 40: vLLM 0.32.0 refuses to start (a request of max_model_len "
                         "could never be admitted); its start-up log is the recording."),
            shows=lambda st, prev: False,
            expect_refusal=True,
        ),
        TruthScenario(
            name="pool-sized-head",
            flags=SMALL_POOL,
            waves=[
                Wave(2, 16, 32, duration=6.0),
                # 1,232 + 16 tokens = 39 blocks: the whole pool. Admitted only when nothing else holds a block;
                # vLLM admits in order, so the short requests behind it wait too.
                Wave(1, 1232, 16, delay=2.0),
                Wave(4, 16, 16, delay=2.5),
            ],
            description=("The closest runtime shape to never-fits that vLLM 0.32.0 starts: max_model_len 1248 = "
                         "the pool (39 blocks, maximum concurrency 1.0x). t=0: 2 closed-loop clients for 6 s, "
                         "prompt 16, max_tokens 32. t=2 s: one prompt of 1232 tokens, max_tokens 16 (the whole "
                         "pool). t=2.5 s: 4 short requests behind it."),
            shows=lambda st, prev: _n(st, "waiting") > 0 and _n(st, "running") == 0,
            score=lambda st, prev: _n(st, "waiting"),
            give_up_s=30.0,
        ),
        TruthScenario(
            name="prefix-shared",
            flags=SMALL_POOL,
            waves=[
                # Warm the cache: 20 full blocks of the shared prefix stay cached (evictable) afterwards.
                TruthWave(1, SHARED_PREFIX + 16, 16, shared_prefix=SHARED_PREFIX),
                # 24 clients, each prompt = shared 640 + 16 own tokens (21 blocks, 1 of them new), max_tokens 16
                # (672 tokens: still 21 blocks). 20 shared + 1 per request <= 39: the engine runs 19 at most.
                TruthWave(24, SHARED_PREFIX + 16, 16, delay=3.0, duration=8.0, shared_prefix=SHARED_PREFIX),
            ],
            description=("Prefix caching (vLLM's default). t=0: one request warms a 640-token (20-block) prefix. "
                         "t=3 s: 24 closed-loop clients for 8 s, prompt = the shared 640 tokens + 16 own tokens, "
                         "max_tokens 16: each needs one new block beside the 20 shared, so 19 fit in 39 blocks."),
            shows=lambda st, prev: _n(st, "waiting") > 0 and _n(st, "running") > 0,
            score=lambda st, prev: _n(st, "running"),
            min_hold_s=3.0,
        ),
    ]
}


def record(scenario: TruthScenario, server: VllmServer, out_root: Path) -> dict[str, Any]:
    log(f"{scenario.name}: recording ({scenario.description})")
    with httpx.Client(timeout=10.0) as client:
        v1_models = client.get(f"{server.url}/v1/models").json()
        version = client.get(f"{server.url}/version").json()
    timeline = MetricsTimeline(server.url, 0.5).start()
    time.sleep(scenario.lead_s)
    window: dict[str, Any] = {"start_t": round(timeline.now(), 3)}
    load = TruthLoad(server.url, server.served_model_name, scenario.waves, timeline._t0)
    load.start()
    finished = load.wait(scenario.give_up_s)
    if not finished:
        load.cancel()
    window["end_t"] = round(timeline.now(), 3)
    idle_again = _wait_idle(timeline, 60.0)
    time.sleep(scenario.tail_s)
    timeline.stop()
    states = [(t, engine_state(text)) for t, text in timeline.frames]
    prevs: list[State | None] = [None] + [st for _, st in states[:-1]]
    marks = [(t, scenario.shows(st, prev)) for (t, st), prev in zip(states, prevs, strict=True)]
    showing = [i for i, (t, ok) in enumerate(marks) if ok and t >= window["start_t"]]
    snap = len(states) - 1
    if showing:
        best = max(scenario.score(states[i][1], prevs[i]) for i in showing)
        ties = [i for i in showing if scenario.score(states[i][1], prevs[i]) == best]
        snap = ties[len(ties) // 2]
    held = held_seconds(marks, max_gap_frames=1)
    problems = []
    if not finished and scenario.give_up_s >= 60:
        problems.append("load did not finish (cancelled)")
    if not idle_again:
        problems.append("engine not idle within 60 s after the load")
    if not showing:
        problems.append("no frame showed the state")
    elif held < scenario.min_hold_s:
        problems.append(f"state held {held:.1f} s < {scenario.min_hold_s} s")
    argv = _scrub(list(server.argv), server)
    argv[0] = "python"
    capacity = server.startup_capacity()
    meta: dict[str, Any] = {
        "scenario": scenario.name,
        "vllm_version": server.version,
        "engine_generation": engine_generation(server.log_text()),
        "server_argv": argv,
        "env": server.env_used,
        "flags": {k: v for k, v in server.flags().items()},
        "startup_capacity_line": capacity.get("line"),
        "startup_capacity": {k: v for k, v in capacity.items() if k not in ("line", "lines")},
        "v1_models": _scrub(v1_models, server),
        "version": version,
        "load": {"description": scenario.description, "waves": load.describe(),
                 "requests_sent": len(load.requests), "requests_completed": len(load.results),
                 "request_errors": len(load.errors), "cancelled": not finished, "window": window},
        "snapshot_t": states[snap][0],
        "observed": states[snap][1],
        "state_held_s_single_frame_gaps_bridged": round(held, 3),
        "frames_showing_state": len(showing),
        "problems": problems,
    }
    d = out_root / scenario.name
    timeline.save(d, meta)
    (d / "snapshot.prom").write_text(timeline.frames[snap][1])
    (d / "startup.log").write_text(_scrub(server.startup_log(), server))
    with (d / "requests.jsonl").open("w") as f:
        for rec in sorted(load.requests, key=lambda r: (r["sent"], r["seed"])):
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    log(f"{scenario.name}: {len(timeline.frames)} frames, held {held:.1f} s, {len(load.requests)} sent, "
        f"{len(load.results)} done" + (f"; PROBLEMS {problems}" if problems else ""))
    return meta


def record_refusal(scenario: TruthScenario, server: VllmServer, out_root: Path) -> bool:
    """Start vLLM with flags it should refuse; keep its words. True when it refused."""
    try:
        server.start()
    except RuntimeError:
        text = _scrub(server.log_text(), server)
        d = out_root / scenario.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "start-failure.log").write_text(text)
        reason = next((ln for ln in reversed(text.splitlines()) if "ValueError" in ln or "larger than" in ln), "")
        argv = _scrub(list(server.argv), server)
        argv[0] = "python"
        meta = {"scenario": scenario.name, "vllm_version": server.version, "server_argv": argv,
                "env": server.env_used, "refused": True, "reason": reason.strip(),
                "description": scenario.description}
        (d / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        log(f"{scenario.name}: vLLM refused as expected: {reason.strip()[:200]}")
        return True
    server.stop()
    log(f"{scenario.name}: vLLM started although a refusal was expected")
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help=f"default: all of {list(SCENARIOS)}")
    args = ap.parse_args(argv)
    names = args.scenarios or list(SCENARIOS)
    out = fixture_dir(PINNED_VERSION)
    groups: dict[str, list[TruthScenario]] = {}
    for n in names:
        groups.setdefault(json.dumps(SCENARIOS[n].flags, sort_keys=True), []).append(SCENARIOS[n])
    failed = []
    for scenarios in groups.values():
        flags = dict(scenarios[0].flags)
        log(f"starting vLLM {PINNED_VERSION} with {flags} for {[s.name for s in scenarios]}")
        server = VllmServer(**flags)
        if scenarios[0].expect_refusal:
            if not record_refusal(scenarios[0], server, out):
                failed.append(scenarios[0].name)
            continue
        server.start()
        with server:
            server.pin_self()
            for sc in scenarios:
                if record(sc, server, out)["problems"]:
                    failed.append(sc.name)
        VllmServer.unpin_self()
    if failed:
        log(f"scenarios with problems: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
