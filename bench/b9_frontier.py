"""What §9's goal asks: the wait each replica schedule leaves, and the best schedule HPA could make at each cost.

    python -m bench.b9_frontier      # minutes; B9_FRONTIER_MOVES search moves (600; BENCH_QUICK=1: 150)
                                     # reads bench/results/b9_autoscaling.json, writes b9_frontier.json
                                     # (no vLLM, no network)

Issue 24's goal for the closed loop is the best queue-time p95 of three signals at no more replica-seconds than
the cheapest. Whether it can be met depends on what the cheapest spends: a signal that provisions below the
offered load is cheap because requests queue. This tells, from the same run:

- the same seeded arrivals as §9 (`b9_autoscaling.arrivals`, seed 24, the run's measured requests/s of one
  replica kept full), each request holding one of a replica's MAX_NUM_SEQS slots for S = MAX_NUM_SEQS /
  (those requests/s), the service time §9's calibration measured;
- a queue model: slots freed and taken every 10 ms, requests assigned round robin over the replicas in the router
  at arrival (as vllm-router's round_robin does; a replica taken out finishes what it holds, and the time it
  spends so is reported, since no replica-second counts it) and, for comparison, one central queue;
- each measured signal's schedule replayed through the model: its modelled wait p95 beside the vLLM queue-time p95
  the run measured (the check that the model tells what the engines did);
- the least modelled wait p95 a local search finds among schedules HPA can make (one recommendation per poll,
  up at once, down after the 50 s window, 1-4 replicas) at no more replica-seconds than each signal spent. The
  search knows the load to come, which no signal does: what it finds is what a schedule could reach at that cost,
  an upper bound on the best one, never a bound on what a signal reaches.

The step time also grows ~1 % with a fuller batch (25 ms + 0.1 ms per token), which the model leaves out.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Sequence
from typing import Any

from bench import b9_autoscaling as b9
from bench.common import RESULTS, quick, save

DT = 0.01  # s: the queue model's tick


def replicas_at(events: Sequence[tuple[float, int]], t: float) -> int:
    n = events[0][1]
    for at, count in events:
        if at <= t:
            n = count
    return n


def waits(times: Sequence[float], service: float, events: Sequence[tuple[float, int]], duration: float,
          round_robin: bool) -> list[float]:
    """Each request's wait (s) for a slot under the replica schedule `events` ((time, replicas) steps)."""
    return simulate(times, service, events, duration, round_robin)[0]


def simulate(times: Sequence[float], service: float, events: Sequence[tuple[float, int]], duration: float,
             round_robin: bool) -> tuple[list[float], float]:
    """Each request's wait (s) for a slot under the replica schedule `events` ((time, replicas) steps), and the
    replica-seconds that replicas out of the router spent finishing what they held (requests in their slots and,
    round robin, in their queues): work no replica-seconds count."""
    slots = b9.MAX_NUM_SEQS
    horizon = duration + 20 * service + len(times) * service  # every request ends; a bound, never reached
    queues: dict[int, list[int]] = {}  # replica -> waiting request indices (FCFS); -1: the central queue
    busy: dict[int, list[float]] = {}  # replica -> end times of requests in its slots
    start: list[float | None] = [None] * len(times)
    nxt, counter, t, draining = 0, 0, 0.0, 0.0
    while t < horizon and (nxt < len(times) or any(queues.values()) or any(busy.values())):
        n = replicas_at(events, t)
        draining += DT * sum(1 for r in set(busy) | set(queues) if r >= n and (busy.get(r) or queues.get(r)))
        while nxt < len(times) and times[nxt] <= t:
            where = -1 if not round_robin else counter % n
            counter += 1
            queues.setdefault(where, []).append(nxt)
            nxt += 1
        for r in list(busy):
            busy[r] = [e for e in busy[r] if e > t]
        if round_robin:
            for r, q in queues.items():
                held = busy.setdefault(r, [])
                while q and len(held) < slots:
                    i = q.pop(0)
                    start[i] = t
                    held.append(t + service)
        else:
            q = queues.get(-1, [])
            for r in range(n):
                held = busy.setdefault(r, [])
                while q and len(held) < slots:
                    i = q.pop(0)
                    start[i] = t
                    held.append(t + service)
        t = round(t + DT, 6)
    return [(s if s is not None else horizon) - a for s, a in zip(start, times, strict=True)], draining


def polls_of(duration: float) -> list[float]:
    """The times (s) HPA decides at over a run: every poll interval after the start, before `duration`."""
    return [k * b9.POLL for k in range(1, math.ceil(duration / b9.POLL)) if k * b9.POLL < duration]


WINDOW = round(b9.DOWN_WINDOW / b9.POLL)  # polls a recommendation holds the replica count up for (HPA's down window)


def reachable(wanted: Sequence[int]) -> list[int]:
    """The recommendations (one per poll) whose HPA schedule is the highest one at or below `wanted` (replicas
    per poll): under the down window a poll's replicas are the highest recommendation of the last WINDOW polls,
    so each poll recommends the least that its window's polls want."""
    return [min(wanted[j:j + WINDOW]) for j in range(len(wanted))]


def schedule_of(recommended: Sequence[int], polls: Sequence[float]) -> list[tuple[float, int]]:
    """(time, replicas) steps of §9's `Hpa` given one recommendation (replicas wanted) per poll: up at once, down
    after WINDOW polls."""
    hpa, current = b9.Hpa(), b9.MIN_REPLICAS
    events = [(0.0, current)]
    for want, at in zip(recommended, polls, strict=True):
        current = hpa.decide(at, current, [(float(want), 1.0)])
        if current != events[-1][1]:
            events.append((at, current))
    return events


def best_within(times: Sequence[float], service: float, duration: float, budget: float,
                starts: Sequence[Sequence[int]], iterations: int, seed: int) -> tuple[float, float, list[Any]]:
    """The least modelled wait p95 (round robin) found over HPA-reachable schedules of at most `budget`
    replica-seconds: a seeded local search (change one poll's recommendation, or a run of them) from each start.
    A found schedule is an upper bound on the best one; it knows the load to come, which no signal does."""
    polls = polls_of(duration)
    rnd = random.Random(seed)
    seen: dict[tuple[int, ...], tuple[float, float]] = {}

    def score(rec: Sequence[int]) -> tuple[float, float]:
        key = tuple(rec)
        if key not in seen:
            events = schedule_of(rec, polls)
            cost = b9.held_replica_seconds(events, duration)
            seen[key] = (b9.p95(waits(times, service, events, duration, round_robin=True)) if cost <= budget + 1e-9
                         else math.inf, cost)
        return seen[key]

    best: tuple[float, float, list[int]] = (math.inf, math.inf, [])
    for start in starts:
        rec = list(start)[:len(polls)]
        while score(rec)[0] == math.inf and max(rec) > b9.MIN_REPLICAS:  # over the budget: lower the latest peak
            k = max(range(len(rec)), key=lambda i: (rec[i], i))
            rec[k] -= 1
        here = score(rec)
        for _ in range(iterations):
            trial = list(rec)
            k = rnd.randrange(len(trial))
            span = 1 + (rnd.randint(1, 4) if rnd.random() < 0.3 else 0)
            value = rnd.randint(b9.MIN_REPLICAS, b9.MAX_REPLICAS)
            trial[k:k + span] = [value] * len(trial[k:k + span])
            got = score(trial)
            if got <= here:
                rec, here = trial, got
        if here < best[:2]:
            best = (*here, rec)
    return best[0], best[1], schedule_of(best[2], polls)


def shape_frontier(run: dict[str, Any], name: str, iterations: int) -> dict[str, Any]:
    shape = run["shapes"][name]
    times, _burst, duration = b9.arrivals(shape["completions_per_s"], run["quick"], seed=24)
    service = b9.MAX_NUM_SEQS / shape["completions_per_s"]
    polls = polls_of(duration)
    measured, starts = [], [[b9.MIN_REPLICAS] * len(polls)]
    for r in (r for r in run["runs"] if r["shape"] == name):
        events = [(float(t), int(n)) for t, n in r["events"]]
        starts.append(reachable([replicas_at(events, t) for t in polls]))
        model, drained = simulate(times, service, events, duration, round_robin=True)
        measured.append({
            "signal": r["signal"], "replica_seconds": r["replica_seconds"], "ttft_p95_s": r["ttft_p95_s"],
            "queue_time_p95_s": r["queue_time_p95_s"], "model_wait_p95_s": b9.p95(model),
            "model_wait_p95_central_s": b9.p95(waits(times, service, events, duration, round_robin=False)),
            "drained_replica_seconds": drained, "events": events})
    for m in measured:
        wait, cost, events = best_within(times, service, duration, m["replica_seconds"], starts, iterations, seed=9)
        m["best_found"] = {"wait_p95_s": wait, "replica_seconds": cost, "events": events}
    return {"requests": len(times), "service_s": service, "duration_s": duration,
            "work_replica_seconds": len(times) * service / b9.MAX_NUM_SEQS, "measured": measured}


def main() -> int:
    run = json.loads((RESULTS / "b9_autoscaling.json").read_text())
    iterations = int(os.environ.get("B9_FRONTIER_MOVES", 150 if quick() else 600))
    out: dict[str, Any] = {"source_date": run["date"], "source_quick": run["quick"], "dt_s": DT,
                           "iterations": iterations, "shapes": {}}
    for name in run["shapes"]:
        f = shape_frontier(run, name, iterations)
        out["shapes"][name] = f
        print(f"{name}: {f['requests']} requests, S {f['service_s']:.2f} s, work {f['work_replica_seconds']:.0f} "
              "replica-s")
        for m in f["measured"]:
            b = m["best_found"]
            print(f"  {m['signal']:10} {m['replica_seconds']:5.0f} replica-s  TTFT p95 {m['ttft_p95_s']:.2f} s  "
                  f"vLLM queue p95 {m['queue_time_p95_s']:.2f} s  model {m['model_wait_p95_s']:.2f} s (one queue "
                  f"{m['model_wait_p95_central_s']:.2f} s)  best found at <= its replica-s {b['wait_p95_s']:.2f} s "
                  f"at {b['replica_seconds']:.0f}: {b['events']}", flush=True)
    save("b9_frontier", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
