"""What one scrape found, as presenters read it: per engine the judgement and its numbers (`EngineReport`), the
engines whose capacity cannot be derived (`EngineGap`), per target the scrape's outcome (`TargetReport`) and the
target's scrape bookkeeping (`TargetStatus`).

The collector, the JSON/text diagnosis, the status page, the history and the advice read these only, never the
`Target` that produced them.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from ..core import defaults
from ..core.records import quick_init
from ..engines.base import AttentionFacts, Candidate, Histogram, OffloadTier, ReleaseRules
from . import derive
from .config import Known, ServingConfig
from .derive import Headroom
from .inputs import Input
from .profile import Quantile
from .verdict import Case, Limit, Verdict


@quick_init
@dataclass(frozen=True)
class Advice:
    """One piece of advice: the setting, its current value and where that came from, the direction, the target,
    the margin it keeps and the reason (pipeline/advice.py gives them).

    Directions: `raise`, `lower`, `add` change a value and are given only for a value someone stated (our flag,
    vLLM's command line, or what vLLM exports); `keep`; `state` asks for a value nobody stated (an inferred or
    assumed one) and says what it would decide; `check` asks to look at something we cannot see."""

    setting: str  # the vLLM setting (or "kv_capacity", "replicas")
    direction: str  # "raise" | "lower" | "keep" | "add" | "state" | "check"
    current: int | str | None
    current_source: str | None
    target: list[int] | int | str | None  # a [low, high] range, a bound, or a value
    margin: str
    reason: str
    condition: str = ""  # what keeps a raise safe when the evidence behind its size is young (said, never hidden)

    def text(self) -> str:
        cur = "unknown" if self.current is None else str(self.current)
        if self.current_source:
            cur += f" ({self.current_source})"
        if isinstance(self.target, list):
            tgt = f"{self.target[0]}-{self.target[1]}" if self.target[0] != self.target[1] else str(self.target[0])
        else:
            tgt = "" if self.target is None else str(self.target)
        if self.direction == "keep":
            head = f"keep {self.setting} at {cur}"
        elif self.direction == "add":
            head = f"add {self.setting}: {tgt}"
        elif self.direction == "check":
            head = f"check {self.setting} (now {cur})"
        elif self.direction == "state":
            head = f"state {self.setting} (now {cur})"
        else:
            head = f"{self.direction} {self.setting} from {cur} to {tgt}"
        return (f"{head}: {self.reason}" + (f" ({self.margin})" if self.margin else "")
                + (f"; {self.condition}" if self.condition else ""))

    def as_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "direction": self.direction, "current": self.current,
                "current_source": self.current_source, "target": self.target, "margin": self.margin,
                "reason": self.reason, "condition": self.condition, "text": self.text()}


@dataclass(frozen=True)
class Risk:
    """What may bind later, with its basis; never what binds now (it does not change the verdict, the false-full
    flag, the binding limit or a KV-full page).

    `kind`: `oversubscription` (the running requests, grown to the worst case, need more blocks than the pool),
    `beyond_profile` (requests in flight already hold more blocks than any finished request did: a new workload),
    `max_model_len_over_pool` (one request of max_model_len needs more blocks than the pool). `basis`: `profile`
    (finished requests), `max_model_len` (a thin profile: the worst case any request can reach), `in_flight`
    (blocks held now per running request)."""

    kind: str
    basis: str
    detail: str  # one sentence with the numbers

    def as_json(self) -> dict[str, str]:
        return {"risk": self.kind, "basis": self.basis, "detail": self.detail}


@quick_init
@dataclass(frozen=True)
class EngineReport:
    """Everything known about one (model_name, engine) after one scrape."""

    model_name: str
    engine: str
    verdict: Verdict
    false_full: bool
    slots_inferred: bool
    running: int
    waiting: int
    waiting_by_reason: dict[str, float]
    headroom: Headroom
    config: ServingConfig
    prompt: Quantile | None
    max_tokens: Quantile | None
    preemptions_per_second: float | None
    preemptions_total: float | None
    max_num_seqs: int | None
    gauges_only: bool
    kv_bytes: derive.KvBytes | None = None  # absolute bytes per device, with --model-config
    seconds_without_progress: float = 0.0  # since the engine's step and generation counters last moved
    histograms: dict[str, Histogram] = field(default_factory=dict)  # by role (PROMPT_LENGTHS, ...), lifetime
    preemption_inferred: bool = False  # preempting judged from the gauges; vLLM's counter has not risen yet
    suspected: bool = False  # a one-shot verdict one observation cannot confirm (leak, never_fits, preemption)
    profile: ProfileQuality | None = None
    budget: BudgetUse | None = None
    cmdline_pid: int | None = None  # the vLLM process whose /proc/<pid>/cmdline gave the `cmdline` values
    cmdline_found_by: str | None = None
    busy_ceiling: int | None = None  # highest running seen while requests waited, lately (sidecar only)
    # A stated admission cap (max_num_seqs or max_num_active_seqs) below the running count: refuted by what vLLM
    # reads, so the answer is judged with the cap unknown.
    max_num_seqs_refuted: Known[int] | None = None
    busy_frames: int = 0  # scrapes with requests waiting behind that ceiling
    # The one judgement (issue 19): what binds now, what an unknown input would change, the risks, the advice.
    binding_limit: Limit = Limit.NONE
    decided_by: tuple[Case, ...] = ()  # undecided: what binds for each value an unknown input may have
    risks: tuple[Risk, ...] = ()
    advice: tuple[Advice, ...] = ()  # what to change for what binds now (pipeline/advice.py), set by the judgement
    inputs: dict[str, Input] = field(default_factory=dict)  # the judgement's inputs with provenance and range
    admits: int | None = None  # requests the next engine step can admit (free slots and free blocks)
    gauges_reliable: bool = True  # False: this scrape's gauges contradict the counters (see `judged_from`)
    gauges_doubt: str | None = None  # undecided idle gauges: why they may come from a loaded server (a clause)
    judged_from: float | None = None  # seconds since the consistent scrape whose judgement this repeats
    unreliable_scrapes: int = 0  # scrapes of this engine whose gauges contradicted its counters, since start
    producer_holding: bool = False  # a P/D producer keeps finished prefills' blocks for its decode side
    asleep_or_stuck: bool = False  # no step, nothing runs, and the release exports no sleep state: asleep or stuck
    consistent: EngineReport | None = None  # gauges unreliable: the report of the consistent scrape judged from
    block_waste: derive.Waste | None = None  # token slots of used blocks holding no token (None: nothing runs)
    prefix_cache_hit_ratio: float | None = None  # prompt tokens found in the prefix cache lately (None: no counters)
    prefix_boundary_loss: derive.Waste | None = None  # prompt tokens of shared prefixes not cached (partial blocks)
    capacity_decides: str | None = None  # the capacity is a range and the answer differs across it (one sentence)
    admission_notes: tuple[str, ...] = ()  # what the admission headroom cannot show (cadence, active cap, ...)
    kv_transfer: KvTransfer | None = None  # P/D connector, role, lease, transfer counters, offload tiers
    deferred_causes: tuple[str, ...] = ()  # what the exposition shows behind waiting requests counted "deferred"
    # The vLLM setting `max_num_seqs` stands for: max_num_active_seqs where it caps admission below max_num_seqs.
    cap_setting: str = "max_num_seqs"
    # Nobody stated --watermark where the release applies one, and the admission headroom (read at vLLM's default
    # 0.0) holds only below this share: from it on the watermark keeps the head out beside running requests.
    watermark_decides: float | None = None


@dataclass(frozen=True)
class KvTransfer:
    """Disaggregated prefill and KV offloading as one engine shows them: the connector and role from
    --kv-transfer-config, the producer's hold lease (stated, or the connector's default), the connector's own
    counters (lifetime), remote-KV loads by stage (a consumer's waiting requests), and offload tiers, whose
    capacity is never free GPU blocks."""

    connector: str | None
    role: str | None  # kv_producer | kv_consumer | kv_both
    lease_seconds: int | None
    lease_source: str | None
    counters: dict[tuple[str, str], float]  # (connector, role) -> lifetime count, e.g. ("nixl", "kv_expired_requests")
    transfers: dict[str, float]  # connector -> completed transfers (lifetime)
    loads_by_stage: dict[str, float]  # waiting_to_start | in_progress | completed_waiting
    offload: tuple[OffloadTier, ...]
    offload_usage: float | None

    @property
    def offload_tokens(self) -> int | None:
        """Tokens the offload tiers hold at max_model_len, None when no tier exports its size."""
        sizes = [t.size_tokens for t in self.offload if t.size_tokens is not None]
        return sum(sizes) if sizes else None


@quick_init
@dataclass(frozen=True)
class ProfileQuality:
    """How far the request profile can be trusted for worst-case math and advice.

    `samples` finished requests over `span` seconds (None: lifetime histograms of unknown age) back it; it is
    `thin` below `defaults.PROFILE_MIN_REQUESTS` (worst case then at max_model_len) and `stale` when the
    requests in flight already hold more blocks each than the profile's worst case (a new workload).
    """

    samples: int
    basis: str  # "window" | "lifetime" | "none"
    span: float | None
    thin: bool
    stale: bool
    held_blocks_per_running: int | None  # in-flight floor: blocks in use / running requests
    window: float | None = None  # the profile window the sidecar keeps; None for one observation (lifetime)

    @property
    def covers_window(self) -> bool:
        """The sidecar has watched a whole window. A one-shot's lifetime histograms never do: of unknown age,
        they cannot show that the workload now is the one they describe (issue 11: a raise before a storm)."""
        return self.window is not None and self.span is not None and self.span >= 0.9 * self.window

    @property
    def advisable(self) -> bool:
        """Enough current evidence to advise raising max_num_seqs: >= RECOMMEND_MIN_REQUESTS finished requests
        over a whole profile window, and requests in flight no larger than the profile's worst case."""
        return (not self.thin and not self.stale and self.samples >= defaults.RECOMMEND_MIN_REQUESTS
                and self.covers_window)


@quick_init
@dataclass(frozen=True)
class BudgetUse:
    """The step's token budget (max_num_batched_tokens), its source, and how much of it prompts took.

    Stated (or on vLLM's command line): `max_num_batched_tokens` is the value. Assumed: it is None and
    `candidates` holds vLLM's default for each device class the server may run on (the exposition does not name
    the device), ascending."""

    max_num_batched_tokens: int | None
    source: str  # a config Source, "default" when assumed
    prefill_tokens: float | None  # one typical prefill: the profile's prompt (uncached tokens)
    candidates: tuple[Candidate, ...] = ()

    @property
    def smallest(self) -> int:
        """The stated budget, or the smallest default it may be."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return min(c.value for c in self.candidates)

    @property
    def used(self) -> float | None:
        """Share of a step one typical prefill takes (1 when it spans whole steps), of the stated budget or of the
        smallest default it may be."""
        if self.prefill_tokens is None:
            return None
        return min(1.0, self.prefill_tokens / self.smallest)


@quick_init
@dataclass(frozen=True)
class ReplicaSignal:
    """The replica signal of one model on one target (one replica), and what it rests on (pipeline/replicas.py)."""

    model_name: str
    engines: int
    demand_requests: int  # D: running + waiting
    load_requests: float  # L: the offered load, busy slots the arrivals need over the window (D without one)
    capacity_requests: int | None  # C: Σ min(max_num_seqs, floor(B / W)); None when max_num_seqs is unknown
    kv_capacity_requests: int  # K: Σ floor(B / W), the KV pool's worst-case capacity alone
    replicas_needed: float  # R
    target_utilization: float  # u
    limit: str  # LIMIT_SLOTS | LIMIT_KV | LIMIT_UNKNOWN: what bounds C
    max_num_seqs_source: str  # a config Source ("flag", "vllm_args", "cmdline", "inferred") or "unknown"
    worst_case: str  # WORST_PROFILE | WORST_MAX_MODEL_LEN | WORST_IN_FLIGHT | UNKNOWN (an undetermined engine)
    conservative: bool  # R holds the replica count instead of resting on an unknown capacity

    @property
    def demand_ratio(self) -> float:
        """L / C: the replica's offered load in its own capacity (R × u)."""
        return self.replicas_needed * self.target_utilization


@dataclass(frozen=True)
class EngineGap:
    """An engine whose capacity cannot be derived, and why: values missing (e.g. num_gpu_blocks="None" on
    V1 0.8), a config that makes no sense (`config_error`, one sentence), or a series of the engine holding a
    value it cannot hold (`bad_value`, one sentence: NaN, out of range, a duplicate series)."""

    model_name: str
    engine: str
    missing: str
    config_error: str | None = None
    bad_value: str | None = None
    hint: str | None = None  # where the missing values can come from

    @property
    def reason(self) -> str:
        """The `reason` label of vllm_headroom_capacity_undetermined: bad_value, config_error or missing."""
        return "bad_value" if self.bad_value else "config_error" if self.config_error else "missing"

    @property
    def explanation(self) -> str:
        if self.bad_value:
            return f"cannot judge this engine: {self.bad_value}"
        if self.config_error:
            return f"cannot derive capacity: {self.config_error}"
        text = f"cannot derive capacity: {self.missing} unknown"
        return f"{text}: {self.hint}" if self.hint else text


@dataclass
class TargetReport:
    url: str
    up: bool
    error_reason: str | None = None
    error: str | None = None
    version: str | None = None
    frontend: str | None = None  # "rust X" when vLLM's Rust frontend serves the API (/version), else None
    engines: list[EngineReport] = field(default_factory=list)
    gaps: list[EngineGap] = field(default_factory=list)
    scrape_duration_seconds: float | None = None
    observed_at: float = 0.0
    # The sidecar's scrape that produced this report: unix time it began, and its number since the sidecar started
    # (1, 2, ..., failed scrapes included). None before the first scrape ends and for a one-shot diagnosis of a file
    # or standard input. How fresh an answer is, and "within N scrapes" checks.
    scraped_at: float | None = None
    scrape_number: int | None = None
    known_engines: list[tuple[str, str]] = field(default_factory=list)  # when down: the engines last seen up
    notes: list[str] = field(default_factory=list)  # values ignored or contradicted (said once in the log)
    models_error: str | None = None  # why the last /v1/models read failed, one sentence (None: it answered)
    rules: ReleaseRules | None = None  # the release's rules the numbers were derived with, and how we know
    attention: AttentionFacts | None = None  # from --vllm-startup-log: the attention backend and block size in effect
    replicas: list[ReplicaSignal] = field(default_factory=list)  # the replica signal per model (pipeline/replicas.py)


@dataclass(frozen=True)
class TargetStatus:
    """A target's latest report and its scrape bookkeeping, read-only: what `/metrics` says about the target."""

    url: str
    last: TargetReport
    errors: Mapping[str, int]  # failed scrapes by reason since start (vllm_headroom_scrape_errors_total)
    known_engines: Set[tuple[str, str]]  # (model_name, engine) of the last successful scrape
    down_since: float | None  # unix time of the first failed scrape of the current outage; None while up
    seen_up: bool  # a scrape has succeeded since start (the alerts' start-up grace)
