"""The replica signal: how many replicas of one vLLM server the requests it holds need, from admission capacity.

A pure function of one target's engine reports (`EngineReport`, the one judgement) and the target utilisation u.
One target is one vLLM API server, i.e. one replica of a Deployment (its data-parallel engines are one replica).
Per model served by the target:

  D = Σ (running + waiting) over the target's engines: the requests the replica holds now.
  L = the offered load in requests, what the replicas' demand is: the busy slots the arrivals need, λ × T (arrival
      rate, time in the engine; Little's law), over the last `window` seconds of the sidecar's scrapes:
          L = max(r̄ × max(1, A / N), A − N)
      r̄ = the time-average of running over the window (the busy slots, = admissions × T), A = the requests that
      arrived (finished + the rise of running + waiting), N = the requests admitted (finished + the rise of
      running). Unsaturated, every arrival is admitted (A = N) and L = r̄; saturated, arrivals outrun admissions
      and L grows with them without bound (A / N), while r̄ alone would stop at the slots. A queue that stands or
      drains keeps L at the busy slots (never below: the backlog is work). A − N, the window's arrivals still
      waiting, floors it: each needs a slot, even where the slots sat idle at the scrapes (requests shorter than
      a scrape interval, or admission bound by something else than slots). Without a window (one observation, the
      first scrape, a counter reset, vLLM exporting no finished count) or with nothing admitted in it (a stuck
      engine, requests longer than the window), L = max(r̄, D): the requests held.
      Why not D itself (the signal before issue 24's closed loop): D counts each queued request as a slot needed
      now, so HPA sized for queueing on top of load (utilisation settled below u: more replica-seconds), and a
      burst the replicas absorb in one service time, or 3 running of 4 slots at one scrape, moved the count, which
      HPA's scale-down window then holds at the peak for 5 minutes. L's noise falls with the window's arrivals.
  K = Σ floor(B / W) over the engines: the requests each engine's KV pool holds at once if every request reaches
      the profile's worst case W (the judgement's W, floored by the blocks requests in flight already hold when
      the profile is stale). While the profile is thin (fewer than 20 finished requests) W is not known: it lies
      between the blocks the requests in flight hold on average (they only grow) and max_model_len, so R lies
      between R_low (K at the range's upper end, floor(B / ceil(used / running))) and R_high (K at max_model_len).
      The count moves only where the whole range agrees (`worst_case="in_flight_thin"`): R = R_low when R_low ≥ 1
      (even the most the pool may hold needs more replicas: a 32k-context server running 256 short requests with
      a queue of 952 asks for 5.9 on D, not the 80 a max_model_len W would), R = R_high when R_high ≤ 1 (even at
      max_model_len one replica is enough), else R = 1, held (`conservative`). Nothing in flight and a thin
      profile: K is unknown and R is held (below).
  S = max_num_seqs of the answer: stated (our flag, --vllm-args, vLLM's command line) or inferred by the
      judgement from the running plateau while requests waited beside room, which is a lower bound of the real
      cap (running never exceeds it), so a capacity on it is never above the real one.
  C = Σ min(S, floor(B / W)): the requests one replica runs at once without queueing or preemption.
  replicas needed R = L / (C × u)    (u = the target utilisation, 1 − u the headroom kept)

Summed over a model's replicas, R is the replica count the offered load needs at utilisation u. An HPA (or KEDA)
target of AverageValue 1 on Σ R gives `desired = ceil(current × (Σ R / current) / 1) = ceil(Σ R)`: the current
count cancels, so the fixed point is the demand's, not the controller's: ceil(λ × T / (C × u)), which does not
depend on how many replicas share the load. While the replicas cannot keep up, a saturated replica reads at least
1 / u (> 1 + HPA's tolerance 0.1 for u < 0.9) and A / N > 1 adds the arrivals it could not admit: the count rises
until they are admitted; it falls when λ does.

Unknown capacity (max_num_seqs neither stated nor inferred, W unknown (thin profile, nothing in flight), or a pool
that cannot hold one worst-case request):
the cap could be anything from the running count to K, so no scale-down can be justified and R is held at one
replica per replica that holds requests, raised only by the KV bound that holds whatever the cap:
R = max(1 if D > 0 else 0, L / (K × u)). It never divides by an unknown and never moves the count on a guess;
requests that queue behind the cap make the judgement infer it, and the signal then scales on it. The basis says
which case holds (`limit`, `max_num_seqs_source`, `worst_case`, `conservative`).

Undetermined engines (an `EngineGap`: blocks or block size unknown, so neither B nor W exists): their requests
count in D, and the model's signal on this replica is held as above (K from the engines that have one), never
dropped: a replica missing from the sum would read as demand gone and let the count fall. An undetermined engine
whose running or waiting gauge is absent holds its replica at 1 even when nothing else shows demand.

Idle: L = 0 gives R = 0 (never NaN: no division by D or A, N ≥ 1 and C ≥ 1 where they divide). A target that is
down exports no signal; with no replica at all (scaled to zero) nothing here can see demand: activation needs a
signal from in front of the engines (the router's or gateway's request count; deploy/autoscaling).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.records import quick_init
from ..engines.base import E2E_LATENCY, PROMPT_LENGTHS
from .report import EngineReport, ReplicaSignal

# The signal in one line, for every text that states it (the series' HELP, the dashboard panel, the docs).
FORMULA = ("the offered load L (the running count's time-average over the load window x max(1, arrived / admitted), "
           "at least the window's arrivals still waiting) / (min(max_num_seqs, floor(blocks / worst-case blocks per "
           "request)) x the target utilization)")

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


@quick_init
@dataclass(frozen=True)
class _Sample:
    t: float  # s, the scrape's time
    finished: float  # requests the engines finished, lifetime (vLLM's e2e latency histogram count)
    running: int
    waiting: int


def finished_requests(e: EngineReport) -> float | None:
    """Requests the engine finished in its lifetime: the count of vLLM's e2e latency histogram (observed when a
    request finishes; vllm/v1/metrics/loggers.py), else of its prompt-length histogram; None without either."""
    for role in (E2E_LATENCY, PROMPT_LENGTHS):
        hist = e.histograms.get(role)
        if hist is not None:
            return hist.count
    return None


class LoadWindow:
    """One target's recent scrapes per model, from which the offered load L is read (module docstring). Owned by the
    sidecar's `Target`; `observe` is called once per scrape with that scrape's engine reports."""

    __slots__ = ("_samples", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._samples: dict[str, deque[_Sample]] = {}

    def observe(self, now: float, engines: Sequence[EngineReport]) -> dict[str, float]:
        """Offered load L (requests) per model of this scrape's engine reports; a model whose engines do not all
        export a finished count, or whose count fell (a restart), starts its window again (L = max(r̄, D))."""
        by_model: dict[str, list[EngineReport]] = {}
        for e in engines:
            by_model.setdefault(e.model_name, []).append(e)
        out: dict[str, float] = {}
        for model, group in by_model.items():
            counts = [finished_requests(e) for e in group]
            running, waiting = sum(e.running for e in group), sum(e.waiting for e in group)
            if any(c is None for c in counts):
                self._samples.pop(model, None)
                out[model] = float(running + waiting)
                continue
            sample = _Sample(now, sum(c for c in counts if c is not None), running, waiting)
            kept = self._samples.setdefault(model, deque())
            if kept and (sample.finished < kept[-1].finished or now <= kept[-1].t):
                kept.clear()
            kept.append(sample)
            while len(kept) > 2 and kept[1].t <= now - self.seconds:  # the oldest kept is the window's start
                kept.popleft()
            out[model] = offered_load(list(kept))
        for model in [m for m in self._samples if m not in by_model]:
            del self._samples[model]
        return out


def offered_load(samples: Sequence[_Sample]) -> float:
    """L = max(r̄ × max(1, A / N), A − N) over `samples` (oldest first), or max(r̄, D) of the last when nothing
    was admitted between the first and the last (or there is one sample)."""
    last = samples[-1]
    held = float(last.running + last.waiting)
    if len(samples) < 2:
        return held
    first = samples[0]
    span = last.t - first.t
    busy = sum((a.running + b.running) / 2 * (b.t - a.t) for a, b in itertools.pairwise(samples)) / span
    done = last.finished - first.finished
    arrived = done + (last.running + last.waiting) - (first.running + first.waiting)
    admitted = done + last.running - first.running
    if admitted <= 0:
        return max(busy, held)
    return max(busy * max(1.0, arrived / admitted), arrived - admitted)


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


def _thin(group: Sequence[EngineReport], demand: float, u: float, low: float, limit: str) -> tuple[float, str, bool]:
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
                   undetermined: Sequence[tuple[str, float | None]] = (),
                   load: dict[str, float] | None = None) -> list[ReplicaSignal]:
    """One `ReplicaSignal` per model of one target's engine reports (sorted by model name); [] for no engine.

    `undetermined`: (model_name, running + waiting or None when vLLM did not export both) of each engine whose
    capacity cannot be derived (an `EngineGap`); a model with one is held (see the module docstring).
    `load`: the offered load L per model (`LoadWindow.observe`); a model without one (one observation) is read at
    L = D, the requests it holds. Raises ValueError for a target utilisation outside (0, 1].
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
        held_gap = sum(int(d) for d in gap if d is not None)
        demand = sum(e.running + e.waiting for e in group) + held_gap
        offered = demand if load is None or model not in load else load[model] + held_gap
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
            needed = offered / (capacity * u)
            limit, conservative = (LIMIT_SLOTS if slots_bind else LIMIT_KV), False
            if worst_case == WORST_THIN:
                needed, limit, conservative = _thin(group, offered, u, needed, limit)
        else:
            # Unknown cap, or a pool that holds no worst-case request: hold, raised by the KV bound alone.
            held = 1.0 if demand > 0 or None in gap else 0.0
            needed = max(held, offered / (kv * u)) if kv > 0 else held
            limit, conservative = LIMIT_UNKNOWN, True
        out.append(ReplicaSignal(
            model_name=model, engines=len(group) + len(gap), demand_requests=demand, load_requests=offered,
            capacity_requests=capacity if capacity else None, kv_capacity_requests=kv, replicas_needed=needed,
            target_utilization=u, limit=limit, max_num_seqs_source=source, worst_case=worst_case,
            conservative=conservative))
    return out
