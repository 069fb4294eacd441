"""§9's closed loop inside §9b's queue model: each signal computed from the model's own state, HPA deciding on it.

    python -m bench.b9_model_loop            # validation against §9's run, then diagnosis and variants (~30 s)
    B9_MODEL_SEEDS=24,1,2,3 B9_MODEL_JSON=/tmp/out.json python -m bench.b9_model_loop
                                             # reads bench/results/b9_autoscaling.json; no vLLM, no network;
                                             # writes bench/results/b9_model_loop.json (§9c of RESULTS.md)
                                             # unless B9_MODEL_JSON names another file

§9b replays §9's measured schedules through a queue model (`b9_frontier.simulate`: MAX_NUM_SEQS slots a replica,
each request holding one for S = MAX_NUM_SEQS / (one full replica's requests/s), round robin at arrival over the
replicas in the router, a replica taken out finishing what it holds). Here the schedule is not replayed but made:
`Fleet` is that model one 10 ms tick at a time (checked identical to `simulate` on every measured schedule), and
every POLL the run's `Hpa` decides on a signal read from the model's state the way §9 read it from vLLM:

  waiting>5   Σ queued requests of the replicas in the router (vllm:num_requests_waiting), AverageValue 5
  queue|kv    max(Σ waiting / 5, Σ kv / 0.8); kv, the KV proxy of a replica (vllm:kv_cache_usage_perc): the blocks
              its requests in slots hold, ceil((prompt + max_tokens × elapsed / S) / BLOCK_SIZE) each, over the
              NUM_GPU_BLOCKS − 1 usable, × (the requests the real pool holds at once, min(MAX_NUM_SEQS,
              floor(usable / blocks of a whole request))) / MAX_NUM_SEQS: the model's slots stand for that many
              real requests (prefill-heavy: 3 of 25 blocks; a full replica reads 0.95 as vLLM did)
  ours        Σ vllm_headroom_replicas_needed of the replicas in the router as the sidecar last exported it: a
              scrape of every replica every SCRAPE s (b9's sidecar: --scrape.interval 2s), each replica's running,
              waiting and finished count fed to exporter/pipeline/replicas.py's own `LoadWindow` (b9.LOAD_WINDOW,
              the 30 s default / SCALE), R = L / (C × u) with C = MAX_NUM_SEQS, the model's slots (the real C is 4
              decode-heavy, 3 prefill-heavy; L / C is λ / μ either way) and u = b9.TARGET_UTILIZATION, 0.8
  ours-D      Σ (running + waiting) / (C × u) at the same scrape (the signal before the offered load)

The arrivals are §9's (`b9.arrivals`, the measured requests/s of one replica, seed 24 unless said); TTFT is the
model's wait plus one prefill step, so the wait p95 is set beside vLLM's queue-time p95. Variants of ours (a longer
load window, L smoothed, another u, the burst's backlog spread over a horizon) and of the load (a longer plateau)
then run the same loop over several seeds.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

from bench import b9_autoscaling as b9
from bench import b9_frontier as frontier
from bench.common import RESULTS, save
from exporter.engines.base import E2E_LATENCY
from exporter.pipeline.replicas import LoadWindow, _Sample, check_utilization, offered_load

SCRAPE = 2.0  # s: b9's sidecar --scrape.interval
SCRAPE_PHASE = 1.0  # s: the first scrape after the start (the sidecar's phase against the polls is not recorded)


class Fleet:
    """`b9_frontier.simulate`'s round-robin model, one tick per `step`, its state readable between ticks."""

    def __init__(self, times: Sequence[float], service: float, shape: b9.Shape) -> None:
        self.times, self.service, self.shape = times, service, shape
        self.queues: dict[int, list[int]] = {}
        self.busy: dict[int, list[float]] = {}  # replica -> end times of the requests in its slots
        self.finished = [0] * b9.MAX_REPLICAS
        self.start: list[float | None] = [None] * len(times)
        self.nxt, self.counter, self.t = 0, 0, 0.0
        usable = b9.NUM_GPU_BLOCKS - 1
        whole = math.ceil((shape.prompt + shape.max_tokens) / b9.BLOCK_SIZE)
        self.kv_scale = min(b9.MAX_NUM_SEQS, usable // whole) / b9.MAX_NUM_SEQS / usable

    def step(self, n: int) -> None:
        t, slots = self.t, b9.MAX_NUM_SEQS
        while self.nxt < len(self.times) and self.times[self.nxt] <= t:
            self.queues.setdefault(self.counter % n, []).append(self.nxt)
            self.counter += 1
            self.nxt += 1
        for r in list(self.busy):
            kept = [e for e in self.busy[r] if e > t]
            self.finished[r] += len(self.busy[r]) - len(kept)
            self.busy[r] = kept
        for r, q in self.queues.items():
            held = self.busy.setdefault(r, [])
            while q and len(held) < slots:
                i = q.pop(0)
                self.start[i] = t
                held.append(t + self.service)
        self.t = round(t + frontier.DT, 6)

    def busy_left(self) -> bool:
        return self.nxt < len(self.times) or any(self.queues.values()) or any(self.busy.values())

    def running(self, r: int) -> int:
        return len(self.busy.get(r, []))

    def waiting(self, r: int) -> int:
        return len(self.queues.get(r, []))

    def kv(self, r: int) -> float:
        s = self.shape
        blocks = sum(math.ceil((s.prompt + s.max_tokens * min(1.0, (self.t - (e - self.service)) / self.service))
                               / b9.BLOCK_SIZE) for e in self.busy.get(r, []))
        return blocks * self.kv_scale

    def waits(self) -> list[float]:
        return [(s if s is not None else math.inf) - a for s, a in zip(self.start, self.times, strict=True)]


@dataclass(frozen=True)
class Ours:
    """How ours reads L. The defaults are the sidecar's as §9 ran it; the rest are the variants tried here."""

    window: float = b9.LOAD_WINDOW  # s (scaled), the LoadWindow's
    u: float = b9.TARGET_UTILIZATION
    smooth: float = 0.0  # s: L through an exponential average of this time constant (0: none)
    horizon: float = 0.0  # s: the window's unadmitted arrivals count as their work spread over this (0: as is)
    terms: str = "all"  # "all": L as the sidecar reads it; "rbar": r̄ alone; "no-floor": r̄ × max(1, A / N) only

    def label(self) -> str:
        parts = [f"w{self.window * b9.SCALE:g}s", f"u{self.u:g}"]
        if self.smooth:
            parts.append(f"ewma{self.smooth * b9.SCALE:g}s")
        if self.horizon:
            parts.append(f"backlog/{self.horizon * b9.SCALE:g}s")
        if self.terms != "all":
            parts.append(f"L={self.terms}")
        return "ours " + " ".join(parts)


def backlog_load(samples: Sequence[_Sample], horizon: float) -> float:
    """L with the window's unadmitted arrivals A − N counted as their work (each T̂ = r̄ × span / N slot-seconds)
    spread over `horizon` instead of over the window: r̄ + (A − N)⁺ × T̂ / horizon. With horizon = the window's span
    this is `offered_load`'s r̄ × A / N; `offered_load` itself wherever nothing was admitted or one sample."""
    first, last = samples[0], samples[-1]
    span = last.t - first.t
    admitted = last.finished - first.finished + last.running - first.running
    if len(samples) < 2 or admitted <= 0:
        return offered_load(samples)
    busy = sum((a.running + b.running) / 2 * (b.t - a.t) for a, b in itertools.pairwise(samples)) / span
    arrived = admitted + last.waiting - first.waiting
    return busy + max(0.0, arrived - admitted) * busy * span / admitted / max(horizon, span)


def partial_load(samples: Sequence[_Sample], terms: str) -> float:
    """`offered_load` with a term left out, to tell which one moves the count: "rbar" (r̄ alone) or "no-floor"
    (r̄ × max(1, A / N) without the A − N floor); as `offered_load` where it reads max(r̄, D)."""
    first, last = samples[0], samples[-1]
    admitted = last.finished - first.finished + last.running - first.running
    if len(samples) < 2 or admitted <= 0:
        return offered_load(samples)
    span = last.t - first.t
    busy = sum((a.running + b.running) / 2 * (b.t - a.t) for a, b in itertools.pairwise(samples)) / span
    arrived = admitted + last.waiting - first.waiting
    return busy if terms == "rbar" else busy * max(1.0, arrived / admitted)


class Sidecar:
    """The sidecar's scrapes of every replica: one `LoadWindow` each (pipeline/replicas.py), R = L / (C × u)."""

    def __init__(self, ours: Ours) -> None:
        self.ours = ours
        self.u = ours.u if ours.u > 1.0 else check_utilization(ours.u)  # above 1: hypothetical, the sidecar refuses
        self.windows = [LoadWindow(ours.window) for _ in range(b9.MAX_REPLICAS)]
        self.smoothed: list[float | None] = [None] * b9.MAX_REPLICAS
        self.last_t: list[float] = [0.0] * b9.MAX_REPLICAS
        self.needed = [0.0] * b9.MAX_REPLICAS
        self.demand = [0.0] * b9.MAX_REPLICAS

    def scrape(self, fleet: Fleet) -> None:
        for r, window in enumerate(self.windows):
            engine = SimpleNamespace(model_name="tiny-llama", running=fleet.running(r), waiting=fleet.waiting(r),
                                     histograms={E2E_LATENCY: SimpleNamespace(count=float(fleet.finished[r]))})
            load = window.observe(fleet.t, [cast(Any, engine)])["tiny-llama"]
            kept = list(window._samples["tiny-llama"])  # the same samples, read another way
            if self.ours.horizon:
                load = backlog_load(kept, self.ours.horizon)
            elif self.ours.terms != "all":
                load = partial_load(kept, self.ours.terms)
            if self.ours.smooth:
                prev = self.smoothed[r]
                a = 1.0 - math.exp(-(fleet.t - self.last_t[r]) / self.ours.smooth)
                load = load if prev is None else prev + a * (load - prev)
                self.smoothed[r], self.last_t[r] = load, fleet.t
            self.needed[r] = load / (b9.MAX_NUM_SEQS * self.u)
            self.demand[r] = (engine.running + engine.waiting) / (b9.MAX_NUM_SEQS * self.u)


SIGNALS = ("ours", "ours-D", "waiting>5", "queue|kv")


def inputs_of(signal: str, fleet: Fleet, side: Sidecar, n: int) -> list[tuple[float, float]]:
    active = range(n)
    if signal == "ours":
        return [(sum(side.needed[r] for r in active), 1.0)]
    if signal == "ours-D":
        return [(sum(side.demand[r] for r in active), 1.0)]
    waiting = float(sum(fleet.waiting(r) for r in active))
    if signal == "waiting>5":
        return [(waiting, 5.0)]
    return [(waiting, 5.0), (sum(fleet.kv(r) for r in active), 0.8)]


def direction_changes(events: Sequence[tuple[float, int]]) -> int:
    """Up-then-down or down-then-up turns of the replica count (as §9 counts them)."""
    signs = [1 if b[1] > a[1] else -1 for a, b in itertools.pairwise(events) if b[1] != a[1]]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def run_loop(signal: str, shape: b9.Shape, times: Sequence[float], service: float, duration: float,
             ours: Ours = Ours(), fixed: Sequence[tuple[float, int]] | None = None,
             phase: float = SCRAPE_PHASE) -> dict[str, Any]:
    """One closed loop in the model (or, with `fixed`, one replayed schedule): its schedule, waits and cost."""
    fleet, side, hpa = Fleet(times, service, shape), Sidecar(ours), b9.Hpa()
    polls = frontier.polls_of(duration)
    n, events, k, next_scrape = b9.MIN_REPLICAS, [(0.0, b9.MIN_REPLICAS)], 0, phase
    trace: list[tuple[float, int, float]] = []
    horizon = duration + 20 * service + len(times) * service
    while fleet.t < horizon and (fleet.t < duration or fleet.busy_left()):
        t = fleet.t
        if t >= next_scrape - 1e-9:
            side.scrape(fleet)
            next_scrape += SCRAPE
        if fixed is not None:
            n = frontier.replicas_at(fixed, t)
        elif k < len(polls) and t >= polls[k] - 1e-9:
            got = inputs_of(signal, fleet, side, n)
            new = hpa.decide(polls[k], n, got)
            trace.append((polls[k], n, round(max(v / target for v, target in got), 3)))
            if new != n:
                n = new
                events.append((polls[k], n))
            k += 1
        fleet.step(n)
    waits = fleet.waits()
    events = list(fixed) if fixed is not None else events
    cost = b9.held_replica_seconds(events, duration)
    return {"signal": signal if fixed is None else "fixed", "events": events, "replica_seconds": cost,
            "wait_p95_s": b9.p95(waits), "wait_p50_s": sorted(waits)[len(waits) // 2],
            "direction_changes": direction_changes(events), "max_replicas": max(c for _t, c in events),
            "trace": trace, "waits": waits}


@contextmanager
def plateau(extra: float) -> Any:
    """b9.schedule with the hold at the peak `extra` s longer (the fall and the low after it move later)."""
    original = b9.schedule

    def longer(short: bool) -> tuple[list[tuple[float, float]], float]:
        points, burst_at = original(short)
        peak_end = max(i for i, (_t, level) in enumerate(points) if level == max(lv for _t, lv in points))
        return [(t + (extra if i >= peak_end else 0.0), lv) for i, (t, lv) in enumerate(points)], burst_at

    with mock.patch.object(b9, "schedule", longer):
        yield


def load_of(run: dict[str, Any], name: str, seed: int, extra: float = 0.0,
            burst: bool = True) -> tuple[list[float], float, float]:
    """§9's arrivals of shape `name` (seeded; the peak held `extra` s longer; without the burst if not `burst`),
    the model's service time S and the run's duration."""
    cps = run["shapes"][name]["completions_per_s"]
    with plateau(extra):
        times, burst_at, duration = b9.arrivals(cps, run["quick"], seed=seed)
    if not burst:
        for _ in range(3 * b9.MAX_NUM_SEQS):
            times.remove(burst_at)
    return times, b9.MAX_NUM_SEQS / cps, duration


def fluid(run: dict[str, Any], name: str, seed: int, u: float, extra: float = 0.0) -> dict[str, Any]:
    """The schedule of a signal that knew the offered load (b9.load_at, no noise, no burst) and asked for
    ceil(load / u) at every poll, through HPA (its down window holds it): what tracking at u costs at the least."""
    times, service, duration = load_of(run, name, seed, extra)
    with plateau(extra):
        points, _burst_at = b9.schedule(run["quick"])
    polls = frontier.polls_of(duration)
    want = [max(b9.MIN_REPLICAS, min(b9.MAX_REPLICAS, math.ceil(b9.load_at(t, points) / u - 1e-9))) for t in polls]
    events = frontier.schedule_of(want, polls)
    return run_loop("fixed", shape_of(name), times, service, duration, fixed=events)


def shape_of(name: str) -> b9.Shape:
    return next(s for s in b9.SHAPES if s.name == name)


def fmt_events(events: Sequence[tuple[float, int]]) -> str:
    return " → ".join(f"{c}@{t:g}" for t, c in events)


def validate(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Each signal's model loop beside §9's measured run (seed 24); and the stepped model against `simulate`."""
    rows = []
    for name in run["shapes"]:
        times, service, duration = load_of(run, name, 24)
        shape = shape_of(name)
        for measured in (r for r in run["runs"] if r["shape"] == name):
            events = [(float(t), int(c)) for t, c in measured["events"]]
            replay = run_loop("fixed", shape, times, service, duration, fixed=events)
            reference = frontier.waits(times, service, events, duration, round_robin=True)
            assert replay["waits"] == reference, f"Fleet differs from b9_frontier.simulate on {name} {events}"
            loop = run_loop(measured["signal"], shape, times, service, duration)
            phases = [run_loop(measured["signal"], shape, times, service, duration, phase=p)["replica_seconds"]
                      for p in (0.0, 0.5, 1.5)]
            rows.append({
                "shape": name, "signal": measured["signal"], "measured_events": events,
                "measured_replica_seconds": round(measured["replica_seconds"]),
                "measured_queue_p95_s": measured["queue_time_p95_s"], "measured_ttft_p95_s": measured["ttft_p95_s"],
                "measured_changes": measured["direction_changes"], "replay_wait_p95_s": replay["wait_p95_s"],
                "model_events": loop["events"], "model_replica_seconds": loop["replica_seconds"],
                "model_wait_p95_s": loop["wait_p95_s"], "model_changes": loop["direction_changes"],
                "model_replica_seconds_other_phases": phases,
                "measured_values": [round(max(v[0] / v[1] for v in _measured_inputs(measured["signal"], x)), 3)
                                    for x in measured["trace"]],
                "model_values": [v for _t, _n, v in loop["trace"]]})
    return rows


def _measured_inputs(signal: str, x: dict[str, Any]) -> list[tuple[float, float]]:
    if signal == "ours":
        return [(x["replicas_needed"], 1.0)]
    if signal == "ours-D":
        return [(x["replicas_needed_d"], 1.0)]
    if signal == "waiting>5":
        return [(x["waiting"], 5.0)]
    return [(x["waiting"], 5.0), (x["kv_sum"], 0.8)]


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"wait_p95_s": [round(r["wait_p95_s"], 2) for r in runs],
            "replica_seconds": [round(r["replica_seconds"]) for r in runs],
            "direction_changes": [r["direction_changes"] for r in runs],
            "mean_wait_p95_s": sum(r["wait_p95_s"] for r in runs) / len(runs),
            "mean_replica_seconds": sum(r["replica_seconds"] for r in runs) / len(runs),
            "events": [fmt_events(r["events"]) for r in runs]}


def over_seeds(run: dict[str, Any], name: str, seeds: Sequence[int], signal: str, ours: Ours = Ours(),
               extra: float = 0.0, burst: bool = True) -> dict[str, Any]:
    """One signal's model loop on shape `name` for each seed, summarised."""
    shape = shape_of(name)
    return summary([run_loop(signal, shape, *load_of(run, name, seed, extra, burst), ours=ours) for seed in seeds])


def sweep(run: dict[str, Any], seeds: Sequence[int], variants: Sequence[Ours], extra: float = 0.0,
          signals: Sequence[str] = ("waiting>5", "queue|kv")) -> dict[str, dict[str, Any]]:
    """Per shape, per signal (the thresholds and each variant of ours): the model loop over `seeds`."""
    out: dict[str, dict[str, Any]] = {}
    for name in run["shapes"]:
        per = {sig: over_seeds(run, name, seeds, sig, extra=extra) for sig in signals}
        per.update({v.label(): over_seeds(run, name, seeds, "ours", v, extra) for v in variants})
        out[name] = per
    return out


def goal(per: dict[str, Any], label: str, seed_index: int) -> bool:
    """Issue 24's goal for `label` on one seed: the least wait p95 of it and the two thresholds, at no more
    replica-seconds than the cheaper threshold, with at most one direction change."""
    me = per[label]
    others = [per[s] for s in ("waiting>5", "queue|kv")]
    wait = me["wait_p95_s"][seed_index]
    return (all(wait <= o["wait_p95_s"][seed_index] for o in others)
            and me["replica_seconds"][seed_index] <= min(o["replica_seconds"][seed_index] for o in others)
            and me["direction_changes"][seed_index] <= 1)


def print_sweep(title: str, result: dict[str, dict[str, Any]], seeds: Sequence[int]) -> None:
    print(f"\n{title} (seeds {', '.join(map(str, seeds))}: wait p95 s / replica-s / direction changes per seed)")
    for name, per in result.items():
        print(f"  {name}")
        for label, s in per.items():
            thresholds = ("waiting>5", "queue|kv")
            met = "" if label in thresholds or any(t not in per for t in thresholds) else \
                f"  goal met on {sum(goal(per, label, i) for i in range(len(seeds)))}/{len(seeds)}"
            print(f"    {label:34} wait p95 {' '.join(f'{w:5.2f}' for w in s['wait_p95_s'])}  (mean "
                  f"{s['mean_wait_p95_s']:.2f})  replica-s {' '.join(f'{c:4d}' for c in s['replica_seconds'])} "
                  f"(mean {s['mean_replica_seconds']:.0f})  changes {s['direction_changes']}{met}")


def diagnose(run: dict[str, Any], seeds: Sequence[int]) -> dict[str, dict[str, Any]]:
    """What ours' replica-seconds come from: each term of L, the burst, HPA's down window, u (above 1: what it takes
    to be as cheap as the thresholds); beside the same counterfactuals for waiting>5 and the fluid bound."""
    out: dict[str, dict[str, Any]] = {}
    base = Ours()
    for name in run["shapes"]:
        per: dict[str, Any] = {}
        for sig in ("waiting>5", "ours"):
            per[sig] = over_seeds(run, name, seeds, sig)
            per[f"{sig}, no burst"] = over_seeds(run, name, seeds, sig, burst=False)
            with mock.patch.object(b9, "DOWN_WINDOW", b9.POLL):
                per[f"{sig}, down window one poll"] = over_seeds(run, name, seeds, sig)
        for v in (replace(base, terms="rbar"), replace(base, terms="no-floor"), replace(base, u=1.0),
                  replace(base, u=1.2), replace(base, u=1.4)):
            per[v.label()] = over_seeds(run, name, seeds, "ours", v)
        for u in (0.8, 1.0):
            per[f"fluid ceil(load / {u:g})"] = summary([fluid(run, name, seed, u) for seed in seeds])
        out[name] = per
    return out


def main() -> int:
    started = time.monotonic()
    run = json.loads((RESULTS / "b9_autoscaling.json").read_text())
    seeds = [int(s) for s in os.environ.get("B9_MODEL_SEEDS", "24,1,2,3,4").split(",")]
    out: dict[str, Any] = {"source_date": run["date"], "scrape_s": SCRAPE, "scrape_phase_s": SCRAPE_PHASE,
                           "seeds": seeds}
    rows = validate(run)
    out["validation"] = rows
    print("validation: the model loop (seed 24) beside §9's measured run; replay = the measured schedule in the model")
    for v in rows:
        print(f"  {v['shape']:13} {v['signal']:9}  measured {v['measured_replica_seconds']:4d} replica-s, queue p95 "
              f"{v['measured_queue_p95_s']:.2f} s (replay {v['replay_wait_p95_s']:.2f}), changes "
              f"{v['measured_changes']}: {fmt_events(v['measured_events'])}")
        print(f"  {'':13} {'':9}  model    {v['model_replica_seconds']:4.0f} replica-s, wait  p95 "
              f"{v['model_wait_p95_s']:.2f} s, changes {v['model_changes']}: {fmt_events(v['model_events'])}"
              f"  (other scrape phases {[round(c) for c in v['model_replica_seconds_other_phases']]})")
    out["diagnosis"] = diagnose(run, seeds)
    print_sweep("where ours' replica-seconds come from", out["diagnosis"], seeds)
    base = Ours()
    variants = [base, replace(base, window=2 * base.window), replace(base, window=4 * base.window),
                replace(base, smooth=base.window), replace(base, smooth=2 * base.window),
                replace(base, horizon=b9.DOWN_WINDOW), replace(base, u=0.9), replace(base, u=1.0),
                replace(base, window=4 * base.window, u=0.9)]
    signals = ("waiting>5", "queue|kv", "ours-D")
    out["variants"] = sweep(run, seeds, variants, signals=signals)
    print_sweep("load as §9", out["variants"], seeds)
    extra = 60.0
    out["longer_plateau_s"] = extra
    out["longer_plateau"] = sweep(run, seeds, [base], extra=extra, signals=signals)
    for name, per in out["longer_plateau"].items():
        per["fluid ceil(load / 0.8)"] = summary([fluid(run, name, seed, 0.8, extra) for seed in seeds])
    print_sweep(f"the peak held {extra:g} s longer", out["longer_plateau"], seeds)
    out["wall_s"] = round(time.monotonic() - started)
    if os.environ.get("B9_MODEL_JSON"):
        Path(os.environ["B9_MODEL_JSON"]).write_text(json.dumps(out, indent=1, default=float) + "\n")
    else:
        save("b9_model_loop", out)  # bench/results/b9_model_loop.json: §9c of bench/RESULTS.md
    print(f"\n{out['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
