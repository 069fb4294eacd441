"""The engine-neutral interface: what the pipeline, planning and the generator need from a serving engine.

An engine (a sub-package of `exporter.engines`) provides one object satisfying `Engine`: its metric names by
role (`MetricNames`), a reader that turns a parsed exposition into one `EngineSample` per (model_name,
engine) plus its capacity facts and release rules (`Snapshot`), its command-line grammar, its start-up log
parser and its derived max_model_len. Everything after the reader speaks these shapes only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.records import quick_init

Labels = dict[str, str]


class Samples(Protocol):
    """A parsed exposition (`exporter.pipeline.exposition.Exposition`): samples of one sample name."""

    def series(self, name: str) -> list[tuple[Labels, float]]: ...


# How much of the queue head's prompt must fit in free blocks to be admitted (see pipeline/derive.py
# `admission_blocks` for the formulas, each engine's release rules for which one applies).
FULL_PROMPT = "full_prompt"  # the whole uncached prompt (vLLM >= 0.19 and V0)
FIRST_CHUNK = "first_chunk"  # only the step's first prefill chunk (vLLM V1 < 0.19)



@dataclass(frozen=True)
class AdmissionRule:
    """What the queue head must pass to be admitted, per release (each engine's releases name the upstream
    lines; `pipeline/derive.py` `admission_need` applies it).

    `gate`: FULL_PROMPT (the whole uncached prompt, then the step's chunk) or FIRST_CHUNK (the step's chunk
    only); `watermark`: a `--watermark` share of the blocks stays free when admitting; `active_cap`: a cap on
    admissions below max_num_seqs exists (`--max-num-active-seqs`); `lookahead`: the per-step gate adds the
    drafter's lookahead tokens; `local_cadence`: `--prefill-schedule-interval` holds prefills without data
    parallelism too; `skips_unschedulable_head`: a head with no schedulable token is skipped, not a stop.
    """

    gate: str
    watermark: bool = False
    active_cap: bool = False
    lookahead: bool = True
    local_cadence: bool = False
    skips_unschedulable_head: bool = False
    era: str = ""


# The request-length histograms, by role (the keys of `EngineSample.histograms`).
PROMPT_LENGTHS = "prompt"
MAX_TOKENS_LENGTHS = "max_tokens"
GENERATION_LENGTHS = "generation"
E2E_LATENCY = "e2e_latency"  # seconds from a request's arrival to its end, observed when it finishes


@dataclass(frozen=True)
class MetricNames:
    """An engine's metric names by the role they play for us (sample names; histograms by family)."""

    prefix: str  # every series of the engine starts with it
    running: str
    waiting: str
    waiting_by_reason: str
    kv_usage: str
    kv_usage_legacy: str  # the older name of the usage gauge
    sleep_state: str
    cache_config: str
    preemptions_family: str
    preemptions: str
    steps: str
    generation_tokens: str
    prompt_tokens: str
    prefix_queries: str
    prefix_hits: str
    request_success: str
    prompt_hist: str
    max_tokens_hist: str
    generation_hist: str
    queue_time_hist: str
    ttft_hist: str


@quick_init
@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts `(upper_bound, count)` in ascending order, the last one +Inf."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float


@quick_init
@dataclass(frozen=True)
class EngineSample:
    """One engine's scheduler state as exported at one scrape."""

    model_name: str
    engine: str
    running: float | None = None
    waiting: float | None = None
    waiting_by_reason: dict[str, float] = field(default_factory=dict)
    swapped: float | None = None
    usage: float | None = None
    usage_metric: str | None = None
    preemptions_total: float | None = None
    steps_total: float | None = None
    generation_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    prefix_queries_total: float | None = None  # tokens looked up in the prefix cache
    prefix_hits_total: float | None = None  # tokens found there
    awake: bool | None = None
    histograms: dict[str, Histogram] = field(default_factory=dict)  # by role: PROMPT_LENGTHS, ...
    # Why requests are deferred: LoRA adapters (None: no LoRA info exported) and remote-KV loads by stage.
    lora: LoraState | None = None
    kv_fetch_by_stage: dict[str, float] = field(default_factory=dict)
    # KV connectors: counters by (connector, role), e.g. ("nixl", "kv_expired_requests"); transfers completed.
    connector_counters: dict[tuple[str, str], float] = field(default_factory=dict)
    connector_transfers: dict[str, float] = field(default_factory=dict)
    offload_tiers: tuple[OffloadTier, ...] = ()  # KV offloading tiers of this engine (never free GPU blocks)
    offload_usage: float | None = None  # the CPU tier's usage fraction


@dataclass(frozen=True)
class LoraState:
    """LoRA adapters as the engine exports them: the cap and the adapter names waiting and running."""

    max_lora: int | None
    waiting: tuple[str, ...]
    running: tuple[str, ...]


@dataclass(frozen=True)
class OffloadTier:
    """One KV offloading tier of one engine (host memory, disk): its size as exported; None where not."""

    kind: str  # "cpu"
    size_bytes: int | None
    size_tokens: int | None
    chunks: int | None
    blocks_per_chunk: int | None


class CapacityInfo(Protocol):
    """The capacity facts an engine exports about one engine's KV cache (vLLM: `cache_config_info`)."""

    @property
    def block_size(self) -> int | None: ...
    @property
    def num_gpu_blocks(self) -> int | None: ...
    @property
    def kv_cache_size_tokens(self) -> int | None: ...
    @property
    def kv_cache_max_concurrency(self) -> float | None: ...
    @property
    def enable_prefix_caching(self) -> bool | None: ...
    @property
    def cache_dtype(self) -> str | None: ...
    @property
    def gpu_memory_utilization(self) -> str | None: ...
    def unreadable(self) -> str | None:
        """One sentence naming an exported capacity value (blocks, block size) that is no number or not possible,
        else None."""
    def rejected(self) -> list[str]:
        """One sentence per exported value that is not possible (not finite, out of its range): not used."""


class ReleaseRules(Protocol):
    """Which release's rules apply to a server, and how we know (see each engine's `releases`)."""

    @property
    def source(self) -> str: ...  # "version" | "exposition" | "unknown"
    @property
    def release(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def has_null_block(self) -> bool: ...
    @property
    def usage_counts_null_block(self) -> bool: ...
    @property
    def admission(self) -> str: ...  # FULL_PROMPT or FIRST_CHUNK
    @property
    def conservative(self) -> tuple[str, ...]: ...
    @property
    def admission_rule(self) -> AdmissionRule: ...
    def describe(self) -> str: ...


@dataclass(frozen=True)
class Snapshot:
    """All engines of one server at one scrape, and what the exposition tells about the release."""

    engines: list[EngineSample]
    cache_info: dict[str, CapacityInfo]
    data_parallel_engines: int
    usage_counts_null_block: bool | None  # None: the exposition alone cannot tell
    has_engine_label: bool  # a per-engine label (V1's `engine`): the engine keeps a null block
    rules: ReleaseRules | None = None  # the release's rules the numbers should be derived with
    # (model_name, engine) -> one sentence: a series of that engine holds a value it cannot hold (not finite, out of
    # its range, a histogram that is not one, a duplicate series). Such an engine is not judged; the others are.
    bad_values: dict[tuple[str, str], str] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate:
    """One value an unknown input may have, and the rule that gives it (an engine default for a device class)."""

    value: int
    rule: str


@dataclass(frozen=True)
class BatchDefaults:
    """The engine's defaults for the slot cap and the step's token budget when nobody sets them, one candidate per
    device class (the exposition does not say which device it runs on), ascending."""

    max_num_seqs: tuple[Candidate, ...]
    max_num_batched_tokens: tuple[Candidate, ...]
    source: str = ""  # where the table is read from (release and upstream file)


class InvalidValue(ValueError):
    """A gauge the verdict depends on is NaN, infinite or negative (readers now name such values per engine in
    `Snapshot.bad_values` instead of raising; kept for callers that catch it)."""


@dataclass(frozen=True)
class AttentionFacts:
    """What an engine's start-up log (or command line) says about its attention backend, block size and KV dtype:
    what was asked beside what took effect, each None when the log does not say; `notes` say where they differ."""

    backend: str | None = None  # the backend the engine selected, as it names it (FLASH_ATTN, CPU_ATTN, ...)
    backend_line: str | None = None  # the line that names it
    candidates: tuple[str, ...] = ()  # the backends it could have used ("out of potential backends")
    backend_asked: str | None = None  # --attention-backend / VLLM_ATTENTION_BACKEND, when stated
    block_size_asked: int | None = None  # --block-size, when stated
    block_size: int | None = None  # the block size in effect
    block_size_source: str | None = None  # the line or rule it comes from
    kv_cache_dtype_asked: str | None = None  # --kv-cache-dtype, when stated
    kv_cache_dtype: str | None = None  # the KV cache dtype in effect ("auto" resolved to the model dtype)
    notes: tuple[str, ...] = ()  # one sentence per difference between what was asked and what took effect


@dataclass(frozen=True)
class LogFacts:
    """What an engine's start-up log states about capacity; None where it says nothing."""

    version: str | None = None
    model: str | None = None
    kv_memory_gib: tuple[float, ...] = ()  # "Available KV cache memory", one per pipeline stage (first worker's)
    num_gpu_blocks: int | None = None  # before an override
    override: int | None = None
    kv_tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    attention_block_size: int | None = None
    estimated_max_model_len: int | None = None
    flags: tuple[tuple[str, str], ...] = ()
    backend_block_size: int | None = None  # "Setting kv cache block size to N for <backend>"
    backend: str | None = None
    unread: tuple[str, ...] = ()  # capacity lines the log has that could not be read
    attention: AttentionFacts | None = None  # backend, block size and KV dtype: asked and in effect

    def flag(self, name: str) -> str | None:
        return dict(self.flags).get(name)


class Engine(Protocol):
    """One serving engine, as everything outside its own sub-package sees it."""

    @property
    def name(self) -> str: ...  # as operators write it: "vLLM"
    @property
    def names(self) -> MetricNames: ...
    @property
    def wanted(self) -> frozenset[str]: ...  # the sample names its reader needs parsed
    @property
    def renames(self) -> tuple[tuple[str, str], ...]: ...  # sample-name prefixes folded into `names.prefix`
    @property
    def default_port(self) -> int: ...
    def read(self, expo: Samples, version: str | None = None) -> Snapshot:
        """Group the wanted series by engine; a value an engine's series cannot hold is named in
        `Snapshot.bad_values` for that engine only."""
    def no_metrics(self, url: str) -> str:
        """The sentence for an exposition with none of the engine's series."""
    def parse_args(self, argv: list[str], where: str = ...) -> tuple[dict[str, Any], list[str]]:
        """The flags we understand from the engine's command line, and one note per value it would refuse."""
    def is_server(self, argv: list[str]) -> bool:
        """`argv` starts the engine's API server."""
    def derived_max_model_len(self, cfg: dict[str, Any], model_type: str) -> tuple[int, str, int]:
        """(derived max_model_len, the config key it came from, the default max_model_len) of a model config."""
    def parse_startup_log(self, text: str) -> LogFacts:
        """The capacity facts of a pasted start-up log; ValueError when it has none."""
    def batch_defaults(self, version: str | None, world_size: int | None,
                       performance_mode: str | None) -> BatchDefaults:
        """The slot cap's and the token budget's defaults when nobody sets them (see `BatchDefaults`)."""

    def attention_facts(self, text: str) -> AttentionFacts:
        """The attention backend, block size and KV dtype a start-up log states (asked and in effect)."""
    def idle_gauges_doubt(self, frontend: str | None, frontend_read: bool, snap: Snapshot) -> str | None:
        """Why one reading of idle gauges (nothing running, waiting or held) may come from a loaded server, as a
        clause ("this server is ..."), or None when such a reading means an idle server. `frontend`: the API
        server its /version names (None: the engine's own); `frontend_read`: whether /version answered."""
    def blocks_from_log_figures(self, facts: LogFacts, block_size: int, per_request: int) -> tuple[int, int] | None:
        """(lowest, highest) block counts the log's printed capacity figures allow, R = `per_request` blocks per
        request of the log's max_model_len; None when they allow none or the log prints none."""
