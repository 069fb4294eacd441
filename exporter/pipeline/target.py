"""One watched vLLM server: scrape → parse → derive → judge, keeping the history verdicts need.

`Target.observe()` is the synchronous core (text in, report out) used by the sidecar loop, by one-shot
diagnosis of a saved exposition and by the tests; `Target.scrape()` adds the HTTP side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx

from ..core import defaults
from ..engines.base import (
    GENERATION_LENGTHS,
    MAX_TOKENS_LENGTHS,
    PROMPT_LENGTHS,
    CapacityInfo,
    Engine,
    EngineSample,
    Histogram,
    InvalidValue,
    ReleaseRules,
    Snapshot,
)
from ..engines.vllm import VLLM
from ..model.kv_layout import bytes_per_block, served_kv_bytes_per_token
from ..model.shape import ModelShape
from . import derive, exposition
from .config import (
    FoundCmdline,
    Known,
    Overrides,
    ServingConfig,
    Source,
    contradictions,
    find_vllm_cmdline,
    resolve,
    value,
)
from .derive import Headroom
from .profile import Quantile, Window, histogram_quantile, profile_value
from .scrape import ModelsInfo, ScrapeError, describe, fetch, parse_models, parse_version
from .verdict import Observation, Thresholds, Tracker, Verdict

log = logging.getLogger("vllm_headroom")


@dataclass(frozen=True)
class Settings:
    """How to watch one target."""

    url: str
    overrides: Overrides = field(default_factory=Overrides)
    vllm_args: list[str] | None = None  # the vLLM command line as given with --vllm-args
    discover_cmdline: bool = defaults.CMDLINE_DISCOVERY
    api_key: str | None = None
    quantile: float = defaults.PROFILE_QUANTILE
    window: float = defaults.PROFILE_WINDOW  # s
    thresholds: Thresholds = field(default_factory=Thresholds)
    timeout: float = defaults.SCRAPE_TIMEOUT  # s
    max_bytes: int = defaults.SCRAPE_MAX_BYTES
    models_interval: float = defaults.MODELS_INTERVAL  # s
    model_shape: ModelShape | None = None  # from --model-config: adds absolute bytes
    engine: Engine = VLLM  # the serving engine behind the URL: its metric names, readers and flags


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
    busy_frames: int = 0  # scrapes with requests waiting behind that ceiling


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


@dataclass(frozen=True)
class BudgetUse:
    """The step's token budget (max_num_batched_tokens), its source, and how much of it prompts took."""

    max_num_batched_tokens: int
    source: str  # a config Source, "default" when assumed
    prefill_tokens: float | None  # one typical prefill: the profile's prompt (uncached tokens)

    @property
    def used(self) -> float | None:
        """Share of a step one typical prefill takes (1 when it spans whole steps)."""
        if self.prefill_tokens is None:
            return None
        return min(1.0, self.prefill_tokens / self.max_num_batched_tokens)


@dataclass(frozen=True)
class EngineGap:
    """An engine whose capacity cannot be derived, and why: values missing (e.g. num_gpu_blocks="None" on
    V1 0.8) or a config that makes no sense (`config_error`, one sentence)."""

    model_name: str
    engine: str
    missing: str
    config_error: str | None = None

    @property
    def explanation(self) -> str:
        if self.config_error:
            return f"cannot derive capacity: {self.config_error}"
        return f"cannot derive capacity: {self.missing} unknown"


def requests_grow(h: Headroom, prompt: Quantile | None, max_tokens: Quantile | None, hit_share: float) -> bool:
    """Running requests will need more blocks than they hold on average: the profile's blocks per request
    (beyond a shared cached prefix: uncached prompt + max_tokens) exceed blocks in use / running."""
    held = h.held_blocks_per_running
    if held is None or prompt is None or max_tokens is None:
        return True
    if held > h.worst_case_blocks_profile_only:
        return True  # a new workload the profile has not seen: nothing says its requests stop growing
    bs = h.block_size_tokens
    own = derive.blocks_for_tokens(derive.uncached_prompt(prompt.tokens, hit_share) + max_tokens.tokens, bs)
    return (own if hit_share > 0 else h.worst_case_blocks_profile) > held


def under_pressure(h: Headroom) -> bool:
    """Memory binds soon although usage is low: oversubscribed, or requests in flight beyond the profile."""
    held = h.held_blocks_per_running
    return h.safe_headroom_requests < 0 or (held is not None and held > h.worst_case_blocks_profile_only)


def in_flight_prompt(prompt_tokens_total: float | None, finished: float | None, running: int,
                     max_model_len: int | None) -> Quantile | None:
    """The prompt size when no request has finished: prompt tokens computed so far per request started
    (finished + running), from vLLM's `prompt_tokens_total` counter; basis "in_flight". Without that evidence
    a prompt may be as long as max_model_len (never assume one block); None when that is unknown too."""
    started = (finished or 0.0) + running
    if prompt_tokens_total is not None and prompt_tokens_total > 0 and started > 0:
        tokens = math.ceil(prompt_tokens_total / started)
        return Quantile(min(tokens, max_model_len) if max_model_len else tokens, "in_flight", int(started))
    if max_model_len is not None:
        return Quantile(max_model_len, "max_model_len", 0)
    return None


def config_problem(cfg: ServingConfig) -> str | None:
    """One sentence when the resolved config makes no sense for block arithmetic, else None."""
    n = value(cfg.num_gpu_blocks)
    bs = value(cfg.block_size)
    if n is not None and n < 2:
        src = cfg.num_gpu_blocks.source if cfg.num_gpu_blocks else ""
        return (f"num_gpu_blocks={n} (from {src}) leaves no usable block: vLLM keeps one null block, "
                "so at least 2 are needed")
    if bs is not None and bs < 1:
        return f"block_size={bs} is not a positive number of tokens"
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        v = value(getattr(cfg, name))
        if v is not None and v < 1:
            return f"{name}={v} is not a positive number"
    return None


@dataclass
class TargetReport:
    url: str
    up: bool
    error_reason: str | None = None
    error: str | None = None
    version: str | None = None
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
    rules: ReleaseRules | None = None  # the release's rules the numbers were derived with, and how we know


class Target:
    """State of one watched server across scrapes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.trackers: dict[tuple[str, str], Tracker] = {}
        self.windows: dict[tuple[str, str, str], Window] = {}
        self.models: ModelsInfo | None = None
        self.version: str | None = None
        self._models_at: float | None = None
        self._cmdline: FoundCmdline | None = None
        self._cmdline_at: float | None = None
        self._cmdline_args: dict[str, object] | None = None
        self._given_args: dict[str, object] | None = None
        self._args_notes: list[str] = []  # values of the vLLM command line that vLLM would not take
        self.errors: dict[str, int] = {}
        self.scrapes = 0  # scrapes begun by `scrape()` since start
        self.known_engines: set[tuple[str, str]] = set()
        self._prompt_tokens: dict[tuple[str, str], float] = {}  # the prompt-token counter at the last scrape
        self._prefix: dict[tuple[str, str], tuple[float, float, float]] = {}  # queries, hits, last hit share
        # Per engine: the inputs of its resolved config, the notes on contradicting flags, and the config.
        self._configs: dict[str, tuple[tuple[object, ...], list[str], ServingConfig]] = {}
        self.last: TargetReport = TargetReport(settings.url, up=False, error="not scraped yet",
                                               error_reason="not_scraped")
        # Unix time of the first failed scrape of the current outage (None while up): how long vLLM has been down
        # or loading, for a pod's first start and every later reload alike (the alerts' start-up grace).
        self.down_since: float | None = None

    # -- configuration sources ------------------------------------------------------------------
    def _vllm_args(self, now: float) -> tuple[dict[str, object] | None, Source]:
        engine = self.settings.engine
        if self.settings.vllm_args is not None:
            if self._given_args is None:
                self._given_args, self._args_notes = engine.parse_args(self.settings.vllm_args)
            return self._given_args, Source.VLLM_ARGS
        if not self.settings.discover_cmdline:
            return None, Source.CMDLINE
        if self._cmdline_at is None or now - self._cmdline_at >= self.settings.models_interval:
            self._cmdline_at = now
            parts = urlsplit(self.settings.url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            self._cmdline = find_vllm_cmdline(port, engine=engine)
            self._cmdline_args, self._args_notes = (
                engine.parse_args(self._cmdline.argv, f"{engine.name}'s command line (/proc/{self._cmdline.pid})")
                if self._cmdline else (None, []))
        return self._cmdline_args, Source.CMDLINE

    # -- the synchronous core ------------------------------------------------------------------
    def observe(self, now: float, text: str, gauges_only: bool = False) -> TargetReport:
        """Turn one /metrics body into a report; raises ScrapeError for unusable bodies.

        `gauges_only` marks a one-shot diagnosis (see `one_shot`): a single observation, no rates.
        """
        engine = self.settings.engine
        try:
            expo = exposition.parse(text, engine.wanted, engine.names.prefix, engine.renames)
        except exposition.ExpositionError as exc:
            raise ScrapeError(exc.reason, f"{self.settings.url}: {exc}") from None
        if expo.family_lines == 0 and (empty := exposition.blank(text)) is not None:
            raise ScrapeError("malformed", f"{self.settings.url}: {empty}")
        if expo.family_lines == 0:
            raise ScrapeError("no_vllm_metrics", engine.no_metrics(self.settings.url))
        try:
            snap = engine.read(expo, self.version)
        except InvalidValue as exc:
            raise ScrapeError("invalid_value", f"{self.settings.url}: {exc}") from None
        args, args_source = self._vllm_args(now)
        report = TargetReport(self.settings.url, up=True, version=self.version, observed_at=now,
                              notes=list(self._args_notes), rules=snap.rules)
        models_len = self.models.max_model_len if self.models else None
        for e in snap.engines:
            cache = snap.cache_info.get(e.engine) or (next(iter(snap.cache_info.values()), None))
            notes, cfg = self._config(e.engine, args, args_source, cache, snap.data_parallel_engines, models_len)
            report.notes += [n for n in notes if n not in report.notes]
            item = self._engine(now, e, cfg, snap, gauges_only)
            if isinstance(item, EngineGap):
                report.gaps.append(item)
            else:
                report.engines.append(item)
        # Forget engines that are gone (a restart under another name), so history cannot grow without bound.
        live = {(e.model_name, e.engine) for e in snap.engines}
        self.trackers = {k: v for k, v in self.trackers.items() if k in live}
        self.windows = {k: v for k, v in self.windows.items() if k[:2] in live}
        live_engines = {engine for _model, engine in live}
        self._configs = {k: v for k, v in self._configs.items() if k in live_engines}
        return report

    def _config(self, engine: str, args: dict[str, object] | None, args_source: Source, cache: CapacityInfo | None,
                data_parallel_engines: int, models_len: int | None) -> tuple[list[str], ServingConfig]:
        """The engine's resolved config and the notes on flags that contradict vLLM, kept while their inputs
        stay equal: between two scrapes they seldom change, and resolving them anew for every engine of every
        scrape was a sizeable share of a data-parallel server's scrape."""
        inputs = (args, args_source, cache, data_parallel_engines, models_len)
        kept = self._configs.get(engine)
        if kept is not None and kept[0] == inputs:
            return kept[1], kept[2]
        overrides = self.settings.overrides
        notes = contradictions(overrides, cache, data_parallel_engines)
        cfg = resolve(overrides, args, args_source, cache, data_parallel_engines, models_len)
        self._configs[engine] = (inputs, notes, cfg)
        return notes, cfg

    def _window(self, now: float, e: EngineSample, name: str) -> Window | None:
        """The engine's window of histogram `name`, fed this scrape's snapshot; None when vLLM exports none."""
        hist = e.histograms.get(name)
        if hist is None:
            return None
        key = (e.model_name, e.engine, name)
        window = self.windows.get(key) or self.windows.setdefault(key, Window(self.settings.window))
        window.observe(now, hist)
        return window

    def _quantile(self, window: Window | None, max_model_len: int | None) -> Quantile | None:
        return None if window is None else window.quantile(self.settings.quantile, max_model_len)

    @staticmethod
    def _largest_prompt_blocks(e: EngineSample, max_model_len: int | None, block_size: int) -> int | None:
        hist = e.histograms.get(PROMPT_LENGTHS)
        largest = None if hist is None else histogram_quantile(hist, 1.0, max_model_len, "lifetime")
        if largest is None:
            return None
        return derive.blocks_for_tokens(largest.upper or largest.tokens, block_size)

    def _hit_share(self, key: tuple[str, str], e: EngineSample, gauges_only: bool) -> float:
        """Share of prompt tokens found in the prefix cache: over the last interval that looked any up (the
        sidecar), or since start (one-shot). vLLM >= 0.28 records the lookups at admission
        (`record_prefix_cache_stats`, vllm/v1/core/kv_cache_manager.py @0.32.0)."""
        q, h = e.prefix_queries_total, e.prefix_hits_total
        if q is None or h is None:
            return 0.0
        if gauges_only:
            return h / q if q > 0 else 0.0
        before = self._prefix.get(key)
        share = before[2] if before is not None else 0.0
        if before is not None and q > before[0] and h >= before[1]:
            share = (h - before[1]) / (q - before[0])
        elif before is not None and q < before[0]:
            share = 0.0  # counters reset: vLLM restarted with an empty cache
        self._prefix[key] = (q, h, share)
        return share

    @staticmethod
    def _budget(cfg: ServingConfig, snap: Snapshot, prompt: Quantile | None) -> BudgetUse | None:
        """The token budget and how much of a step one typical prefill takes.

        V1 schedules running requests first, a prefill taking min(remaining prompt, budget left) tokens per
        step, and admits waiting requests only while budget is left (`while token_budget > 0`,
        vllm/v1/core/sched/scheduler.py @0.32.0). A prompt at least as long as the budget therefore fills
        whole steps until its last chunk. vLLM 0.32.0 exports no per-step prefill count: `prompt_tokens_total`
        and `iteration_tokens_total` are counted when a prefill completes (the request's first output,
        vllm/v1/metrics/stats.py `IterationStats.update_from_output`), so one 3,072-token prefill chunked over
        12 steps of 256 shows as one iteration of 3,072 tokens. The prompt profile is the evidence.
        """
        stated = cfg.max_num_batched_tokens
        if stated is not None:
            budget, source = stated.value, str(stated.source)
        elif snap.rules is not None and snap.rules.engine == "V1":
            budget, source = defaults.VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS, str(Source.DEFAULT)
        else:
            return None
        return BudgetUse(budget, source, None if prompt is None else float(prompt.tokens))

    def _engine(self, now: float, e: EngineSample, cfg: ServingConfig, snap: Snapshot,
                gauges_only: bool) -> EngineReport | EngineGap:
        n_blocks = value(cfg.num_gpu_blocks)
        block_size = value(cfg.block_size)
        missing = [k for k, v in (("num_gpu_blocks", n_blocks), ("block_size", block_size),
                                  ("usage", e.usage), ("running", e.running), ("waiting", e.waiting)) if v is None]
        if missing:
            info = snap.cache_info.get(e.engine) or next(iter(snap.cache_info.values()), None)
            bad = None if info is None else info.unreadable()
            return EngineGap(e.model_name, e.engine, ", ".join(missing), config_error=bad)
        assert n_blocks is not None and block_size is not None and e.usage is not None
        problem = config_problem(cfg)
        if problem is not None:
            return EngineGap(e.model_name, e.engine, "", config_error=problem)
        max_model_len = value(cfg.max_model_len)
        prompt = self._quantile(self._window(now, e, PROMPT_LENGTHS), max_model_len)
        # Every window follows every scrape; the generated lengths are read only when max_tokens is not exported.
        stated = self._quantile(self._window(now, e, MAX_TOKENS_LENGTHS), max_model_len)
        generated = self._window(now, e, GENERATION_LENGTHS)
        max_tokens = profile_value(stated, self._quantile(generated, max_model_len) if stated is None else None,
                                   max_model_len)
        running = int(e.running or 0)
        waiting = int(e.waiting or 0)
        samples = 0 if prompt is None else prompt.samples
        thin = samples < defaults.PROFILE_MIN_REQUESTS
        finished = e.histograms[PROMPT_LENGTHS].count if PROMPT_LENGTHS in e.histograms else None
        if prompt is None:
            prompt = in_flight_prompt(e.prompt_tokens_total, finished, running, max_model_len)
        rules = snap.rules

        hit_share = self._hit_share((e.model_name, e.engine), e, gauges_only)

        def headroom_with(max_num_seqs: int | None) -> Headroom:
            return derive.derive(derive.Inputs(
                num_gpu_blocks=n_blocks,
                block_size=block_size,
                has_null_block=snap.has_engine_label,  # V1 (>= 0.8, engine label) keeps a null block; V0 has none
                usage_counts_null_block=bool(snap.usage_counts_null_block),
                usage=e.usage or 0.0,
                running=running,
                waiting=waiting,
                max_model_len=max_model_len,
                max_num_seqs=max_num_seqs,
                prompt_tokens=prompt.tokens if prompt else max_model_len,
                # A thin profile says little about the longest request: worst case at max_model_len.
                max_tokens=max_tokens.tokens if max_tokens and not (thin and max_model_len) else None,
                kv_cache_max_concurrency=value(cfg.kv_cache_max_concurrency),
                kv_cache_size_tokens=value(cfg.kv_cache_size_tokens),
                admission_rule=rules.admission if rules is not None else derive.FULL_PROMPT,
                max_num_batched_tokens=value(cfg.max_num_batched_tokens),
                prefix_hit_share=hit_share,
            ))

        max_num_seqs = value(cfg.max_num_seqs)
        headroom = headroom_with(max_num_seqs)
        key = (e.model_name, e.engine)
        tracker = self.trackers.get(key) or self.trackers.setdefault(key, Tracker(self.settings.thresholds,
                                                                                   one_shot=gauges_only))
        budget = self._budget(cfg, snap, prompt)
        # Prefills completed since the last scrape: the engine is busy prefilling (a one-shot cannot tell).
        before = self._prompt_tokens.get(key)
        if e.prompt_tokens_total is not None:
            self._prompt_tokens[key] = e.prompt_tokens_total
        prefilling = (not gauges_only and before is not None and e.prompt_tokens_total is not None
                      and e.prompt_tokens_total > before)
        w_max = headroom.worst_case_blocks_max_model_len
        obs = Observation(
            running, waiting, None if (d := e.waiting_by_reason.get("deferred")) is None else int(d), e.usage,
            max_num_seqs, e.awake, headroom, self._largest_prompt_blocks(e, max_model_len, block_size),
            finished_total=finished, budget_used=budget.used if budget is not None and prefilling else None,
            max_model_len_exceeds_pool=w_max is not None and w_max > headroom.kv_capacity_blocks,
            memory_pressure=under_pressure(headroom),
            requests_grow=requests_grow(headroom, prompt, max_tokens, hit_share), thin_profile=thin)
        progress = (e.steps_total, e.generation_tokens_total)
        if tracker.restart_if_reset(obs, e.preemptions_total, progress):
            # vLLM restarted: its counters began again at 0; the prefix-hit and prefill baselines go too.
            self._prefix.pop(key, None)
            self._prompt_tokens.pop(key, None)
            obs = replace(obs, budget_used=None)
        inferred_cap = None
        if max_num_seqs is None and not gauges_only:
            inferred_cap = tracker.infer_max_num_seqs(now, obs, e.preemptions_total)
            if inferred_cap is not None:
                # One cap for the whole answer: slot and admission headroom, the verdict and the advice.
                max_num_seqs = inferred_cap
                headroom = headroom_with(inferred_cap)
                cfg = replace(cfg, max_num_seqs=Known(inferred_cap, Source.INFERRED))
                obs = replace(obs, max_num_seqs=inferred_cap, headroom=headroom, max_num_seqs_inferred=True,
                              memory_pressure=under_pressure(headroom),
            requests_grow=requests_grow(headroom, prompt, max_tokens, hit_share))
        judgement, false_full = tracker.update(now, obs, e.preemptions_total, progress)
        if judgement.slots_inferred and max_num_seqs is None and running > 0:
            # slots_full judged with the cap unknown: the running count is the cap this answer uses throughout.
            max_num_seqs = running
            headroom = headroom_with(running)
            cfg = replace(cfg, max_num_seqs=Known(running, Source.INFERRED))
        held = headroom.held_blocks_per_running
        quality = ProfileQuality(
            samples=samples, basis="none" if prompt is None else prompt.basis,
            span=None if prompt is None else prompt.span, thin=thin,
            stale=held is not None and held > headroom.worst_case_blocks_profile_only,
            held_blocks_per_running=held, window=None if gauges_only else self.settings.window)
        found = self._cmdline if self.settings.vllm_args is None and self.settings.discover_cmdline else None
        # Built once, with every field (no dataclasses.replace): it is the per-engine hot path of each scrape.
        return EngineReport(
            model_name=e.model_name,
            engine=e.engine,
            verdict=judgement.verdict,
            false_full=false_full,
            slots_inferred=judgement.slots_inferred,
            running=running,
            waiting=waiting,
            waiting_by_reason=dict(e.waiting_by_reason),
            headroom=headroom,
            config=cfg,
            prompt=prompt,
            max_tokens=max_tokens,
            preemptions_per_second=tracker.preemptions_per_second,
            preemptions_total=e.preemptions_total,
            max_num_seqs=max_num_seqs,
            gauges_only=gauges_only,
            kv_bytes=self._kv_bytes(cfg, headroom, block_size),
            seconds_without_progress=tracker.seconds_without_progress,
            histograms=dict(e.histograms),
            preemption_inferred=judgement.preemption_inferred,
            suspected=judgement.suspected,
            profile=quality,
            budget=budget,
            cmdline_pid=found.pid if found else None,
            cmdline_found_by=found.found_by if found else None,
            busy_ceiling=None if gauges_only else tracker.busy_ceiling,
            busy_frames=0 if gauges_only else tracker.busy_frames,
        )

    def _kv_bytes(self, cfg: ServingConfig, headroom: Headroom, block_size: int) -> derive.KvBytes | None:
        """Absolute bytes per device, with --model-config; None without it."""
        shape = self.settings.model_shape
        if shape is None:
            return None
        cache_dtype = value(cfg.kv_cache_dtype) or value(cfg.cache_dtype)
        tp = value(cfg.tensor_parallel_size) or 1
        per_block = bytes_per_block(shape, cache_dtype, tp, block_size)
        return derive.kv_bytes(headroom, served_kv_bytes_per_token(shape, cache_dtype, tp), per_block)

    # -- the HTTP side ----------------------------------------------------------------------------
    def _headers(self) -> dict[str, str] | None:
        key = self.settings.api_key
        return {"Authorization": f"Bearer {key}"} if key else None

    async def _refresh_models(self, client: httpx.AsyncClient, now: float) -> None:
        """/v1/models and /version, at most once per --models.interval whether they answered or not; their
        failures count under the reason `models` (never as a failed scrape of /metrics)."""
        if self._models_at is not None and now - self._models_at < self.settings.models_interval:
            return
        self._models_at = now
        base = self.settings.url.rstrip("/")
        try:
            self.models = parse_models(await fetch(client, base + "/v1/models", self.settings.timeout,
                                                   1024 * 1024, self._headers()))
        except ScrapeError:  # /v1/models is needed only for max_model_len; /metrics still counts
            self.errors["models"] = self.errors.get("models", 0) + 1
        with contextlib.suppress(ScrapeError):  # /version is optional: older or proxied servers lack it
            self.version = parse_version(await fetch(client, base + "/version", self.settings.timeout, 65536))

    async def fetch_metrics(self, client: httpx.AsyncClient, now: float) -> str:
        """GET /metrics (raises ScrapeError), refreshing /v1/models and /version when they are due."""
        body = await fetch(client, self.settings.url.rstrip("/") + "/metrics", self.settings.timeout,
                           self.settings.max_bytes)
        await self._refresh_models(client, now)
        return body

    def fetch_once(self) -> str:
        """One synchronous fetch for the one-shot commands (diagnose, recommend)."""

        async def run() -> str:
            async with httpx.AsyncClient() as client:
                return await self.fetch_metrics(client, time.monotonic())

        return asyncio.run(run())

    async def scrape(self, client: httpx.AsyncClient, now: float | None = None,
                     wall: float | None = None) -> TargetReport:
        """One scrape of the target; never raises, failures become a down report. `wall`: unix time (tests)."""
        now = time.monotonic() if now is None else now
        wall = time.time() if wall is None else wall
        started = time.perf_counter()
        self.scrapes += 1
        number = self.scrapes
        try:
            report = self.observe(now, await self.fetch_metrics(client, now))
        except ScrapeError as exc:
            self.errors[exc.reason] = self.errors.get(exc.reason, 0) + 1
            report = TargetReport(self.settings.url, up=False, error_reason=exc.reason, error=str(exc),
                                  version=self.version, observed_at=now)
        except Exception as exc:  # a bug on one target's input must not stop the tick or other targets
            # One clean line, logged by the sidecar when the error changes; the traceback only at debug level.
            log.debug("%s: internal error while judging the scrape", self.settings.url, exc_info=True)
            self.errors["internal_error"] = self.errors.get("internal_error", 0) + 1
            report = TargetReport(self.settings.url, up=False, error_reason="internal_error",
                                  error=f"{self.settings.url}: internal error: {describe(exc)}",
                                  version=self.version, observed_at=now)
        report.scrape_duration_seconds = time.perf_counter() - started
        report.scraped_at, report.scrape_number = wall, number
        if report.up:
            self.known_engines = {(e.model_name, e.engine) for e in report.engines}
            self.down_since = None
        else:
            report.known_engines = sorted(self.known_engines)
            if self.down_since is None:
                self.down_since = wall
        self.last = report
        return report


def one_shot(settings: Settings) -> Target:
    """A fresh target for judging a single observation: nothing can be held, so holds are zero."""
    t = settings.thresholds
    return Target(replace(settings, thresholds=replace(t, false_full_hold=0.0)))
