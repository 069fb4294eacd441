"""The replica signal: how many replicas of one vLLM server the requests it holds need, from admission capacity.

A pure function of one target's engine reports (`EngineReport`, the one judgement) and the target utilisation u.
One target is one vLLM API server, i.e. one replica of a Deployment (its data-parallel engines are one replica).
Per model served by the target:

  D = Σ (running + waiting) over the target's engines: the requests the replica holds now. It grows with load
      without bound while the replicas cannot keep up (the queue grows), unlike headroom, which falls to 0.
  K = Σ floor(B / W) over the engines: the requests each engine's KV pool holds at once if every request reaches
      the profile's worst case W (the judgement's W, floored by the blocks requests in flight already hold when
      the profile is stale). While the profile is thin (fewer than 20 finished requests) W is not known: it lies
      between the blocks the requests in flight hold on average (they only grow) and max_model_len, so R lies
      between R_low (K at the range's upper end, floor(B / ceil(used / running))) and R_high (K at max_model_len).
      The count moves only where the whole range agrees (`worst_case="in_flight_thin"`): R = R_low when R_low ≥ 1
      (even the most the pool may hold needs more replicas: a 32k-context server running 256 short requests with
      a queue of 952 asks for 5.9, not the 80 a max_model_len W would), R = R_high when R_high ≤ 1 (even at
      max_model_len one replica is enough), else R = 1, held (`conservative`). Nothing in flight and a thin
      profile: K is unknown and R is held (below).
  S = max_num_seqs of the answer: stated (our flag, --vllm-args, vLLM's command line) or inferred by the
      judgement from the running plateau while requests waited beside room, which is a lower bound of the real
      cap (running never exceeds it), so a capacity on it is never above the real one.
  C = Σ min(S, floor(B / W)): the requests one replica runs at once without queueing or preemption.
  replicas needed R = D / (C × u)    (u = the target utilisation, 1 − u the headroom kept free)

Summed over a model's replicas, R is the replica count the observed demand needs at utilisation u. An HPA (or KEDA)
target of AverageValue 1 on Σ R gives `desired = ceil(current × (Σ R / current) / 1) = ceil(Σ R)`: the current
count cancels, so the fixed point is the demand's, not the controller's. While the replicas cannot keep up the
queue grows, Σ R grows and the count rises; once nothing waits, Σ R = λ × T / (C × u) by Little's law (arrival
rate λ, time in the engine T), which does not depend on how many replicas share the load: the count settles there
and falls when λ does.

Unknown capacity (max_num_seqs neither stated nor inferred, W unknown (thin profile, nothing in flight), or a pool
that cannot hold one worst-case request):
the cap could be anything from the running count to K, so no scale-down can be justified and R is held at one
replica per replica that holds requests, raised only by the KV bound that holds whatever the cap:
R = max(1 if D > 0 else 0, D / (K × u)). It never divides by an unknown and never moves the count on a guess;
requests that queue behind the cap make the judgement infer it, and the signal then scales on it. The basis says
which case holds (`limit`, `max_num_seqs_source`, `worst_case`, `conservative`).

Undetermined engines (an `EngineGap`: blocks or block size unknown, so neither B nor W exists): their requests
count in D, and the model's signal on this replica is held as above (K from the engines that have one), never
dropped: a replica missing from the sum would read as demand gone and let the count fall. An undetermined engine
whose running or waiting gauge is absent holds its replica at 1 even when nothing else shows demand.

Idle: D = 0 gives R = 0 (never NaN: no division by D, C ≥ 1 where it divides). A target that is down exports no
signal; with no replica at all (scaled to zero) nothing here can see demand: activation needs a signal from in
front of the engines (the router's or gateway's request count; deploy/autoscaling).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .report import EngineReport, ReplicaSignal

# What bounds C, on the basis series.
LIMIT_SLOTS = "max_num_seqs"
LIMIT_KV = "kv_cache"
LIMIT_UNKNOWN = "unknown"
# Where W comes from.
WORST_PROFILE = "profile"
WORST_MAX_MODEL_LEN = "max_model_len"  # thin profile (or none) and nothing in flight: K unknown, R held
WORST_THIN = "in_flight_thin"  # thin profile: K at the upper end of its range, from the blocks in flight
WORST_IN_FLIGHT = "in_flight"  # stale profile: requests in flight already hold more than it says
UNKNOWN = "unknown"


def worst_case_basis(e: EngineReport) -> str:
    """Where the engine's worst case W comes from: the profile, the blocks requests in flight hold (stale profile:
    `in_flight`; thin profile: `in_flight_thin`), or max_model_len (thin or no profile, nothing in flight)."""
    p = e.profile
    if p is None or p.thin or e.max_tokens is None:
        return WORST_THIN if e.running > 0 and e.headroom.kv_used_blocks > 0 else WORST_MAX_MODEL_LEN
    if p.stale:
        return WORST_IN_FLIGHT
    return WORST_PROFILE


def kv_capacity_requests(e: EngineReport) -> int | None:
    """K of one engine (requests its pool holds at once at W), or None when a thin profile and nothing in flight
    leave W unknown. Thin profile with requests in flight: floor(B / ceil(used blocks / running)), the upper end
    of K's range (a request's blocks only grow), never below the max_model_len bound."""
    basis = worst_case_basis(e)
    h = e.headroom
    if basis == WORST_MAX_MODEL_LEN:
        return None
    if basis == WORST_THIN:
        per_request = -(-h.kv_used_blocks // e.running)
        return max(h.max_concurrency_profile, h.kv_capacity_blocks // per_request)
    return h.max_concurrency_profile


def _thin(group: Sequence[EngineReport], demand: int, u: float, low: float, limit: str) -> tuple[float, str, bool]:
    """(R, limit, conservative) while a thin profile leaves W between the blocks in flight and max_model_len: R
    lies between `low` (K at its upper end) and the R of K at max_model_len. A count the whole range agrees on
    moves it: out to `low` when even the upper K needs more than this replica (low >= 1), in when even K at
    max_model_len needs less (high <= 1); otherwise R is held at 1 (this replica stays, `conservative`)."""
    caps = [0 if e.max_num_seqs is None else min(e.max_num_seqs, e.headroom.max_concurrency_profile) for e in group]
    cap_low = sum(caps)
    high = demand / (cap_low * u) if cap_low > 0 else math.inf
    if low >= 1.0:
        return low, limit, False
    if high <= 1.0:
        slots = all(e.max_num_seqs is not None and e.max_num_seqs <= e.headroom.max_concurrency_profile for e in group)
        return high, (LIMIT_SLOTS if slots else LIMIT_KV), False
    return 1.0, LIMIT_UNKNOWN, True


def _source(e: EngineReport) -> str:
    """Where the cap of the answer comes from (the judgement marks an inferred cap Source.INFERRED)."""
    known = e.config.max_num_seqs
    return UNKNOWN if e.max_num_seqs is None or known is None else str(known.source)


def check_utilization(u: float) -> float:
    """`u` if it is a target utilisation (0 < u ≤ 1), else ValueError with one sentence."""
    if not 0.0 < u <= 1.0:
        raise ValueError(f"target utilization {u:g} is not in (0, 1]: it is the share of a replica's capacity to "
                         "fill, e.g. 0.8 keeps 20 % headroom")
    return u


def replica_signal(engines: Sequence[EngineReport], target_utilization: float,
                   undetermined: Sequence[tuple[str, float | None]] = ()) -> list[ReplicaSignal]:
    """One `ReplicaSignal` per model of one target's engine reports (sorted by model name); [] for no engine.

    `undetermined`: (model_name, running + waiting or None when vLLM did not export both) of each engine whose
    capacity cannot be derived (an `EngineGap`); a model with one is held (see the module docstring).
    Raises ValueError for a target utilisation outside (0, 1].
    """
    u = check_utilization(target_utilization)
    by_model: dict[str, list[EngineReport]] = {}
    for e in engines:
        by_model.setdefault(e.model_name, []).append(e)
    gaps: dict[str, list[float | None]] = {}
    for model, held_demand in undetermined:
        gaps.setdefault(model, []).append(held_demand)
        by_model.setdefault(model, [])
    out = []
    for model, group in sorted(by_model.items()):
        gap = gaps.get(model, [])
        demand = sum(e.running + e.waiting for e in group) + sum(int(d) for d in gap if d is not None)
        kvs = [kv_capacity_requests(e) for e in group]
        kv = sum(k for k in kvs if k is not None) if all(k is not None for k in kvs) else 0
        caps = [None if e.max_num_seqs is None or k is None else min(e.max_num_seqs, k)
                for e, k in zip(group, kvs, strict=True)]
        if gap:
            caps.append(None)
        sources = {_source(e) for e in group} | ({UNKNOWN} if gap else set())
        source = UNKNOWN if UNKNOWN in sources else min(sources)  # every engine of a server has one cap
        worst = {worst_case_basis(e) for e in group} | ({UNKNOWN} if gap else set())
        worst_case = next(b for b in (UNKNOWN, WORST_MAX_MODEL_LEN, WORST_THIN, WORST_IN_FLIGHT, WORST_PROFILE)
                          if b in worst)
        capacity = None if any(c is None for c in caps) else sum(c for c in caps if c is not None)
        if capacity is not None and capacity > 0 and all(c for c in caps):
            slots_bind = all(e.max_num_seqs is not None and k is not None and e.max_num_seqs <= k
                             for e, k in zip(group, kvs, strict=True))
            needed = demand / (capacity * u)
            limit, conservative = (LIMIT_SLOTS if slots_bind else LIMIT_KV), False
            if worst_case == WORST_THIN:
                needed, limit, conservative = _thin(group, demand, u, needed, limit)
        else:
            # Unknown cap, or a pool that holds no worst-case request: hold, raised by the KV bound alone.
            held = 1.0 if demand > 0 or None in gap else 0.0
            needed = max(held, demand / (kv * u)) if kv > 0 else held
            limit, conservative = LIMIT_UNKNOWN, True
        out.append(ReplicaSignal(
            model_name=model, engines=len(group) + len(gap), demand_requests=demand,
            capacity_requests=capacity if capacity else None, kv_capacity_requests=kv, replicas_needed=needed,
            target_utilization=u, limit=limit, max_num_seqs_source=source, worst_case=worst_case,
            conservative=conservative))
    return out
