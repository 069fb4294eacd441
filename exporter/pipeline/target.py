"""One watched server: its scrape (HTTP, `scrape.py`), its configuration sources, and one judgement per engine
(`judge.py`) into the report presenters read (`report.py`).

`Target.observe()` is the synchronous core (text in, report out) used by the sidecar loop, by one-shot
diagnosis of a saved exposition and by the tests; `Target.scrape()` adds the HTTP side and the scrape
bookkeeping; `Target.status()` is what the collector reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx

from ..core import defaults
from ..engines.base import CapacityInfo, Engine, InvalidValue, LogFacts
from ..engines.vllm import VLLM
from ..model.shape import ModelShape
from . import exposition
from .capacity import KvPool, with_capacity
from .config import FoundCmdline, Overrides, ServingConfig, Source, contradictions, find_vllm_cmdline, resolve
from .judge import EngineHistory, Judging, judge
from .report import BudgetUse as BudgetUse
from .report import EngineGap as EngineGap
from .report import EngineReport as EngineReport
from .report import ProfileQuality as ProfileQuality
from .report import TargetReport as TargetReport
from .report import TargetStatus
from .scrape import ModelsInfo, ScrapeError, describe, fetch, server_info
from .verdict import Thresholds

log = logging.getLogger("vllm_headroom")
STARTUP_LOG_MAX_BYTES = 64 * 1024 * 1024  # a start-up log is a few hundred KB; a whole day's log is read in part


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
    draft_shape: ModelShape | None = None  # from --draft-model-config: a speculative drafter's layers
    engine: Engine = VLLM  # the serving engine behind the URL: its metric names, readers and flags
    startup_log: str | None = None  # vLLM's start-up log (a file): capacity when vLLM exports none
    kv_pool: KvPool | None = None  # the KV pool per device we were told (--kv-cache-memory, --gpu-memory)


class Target:
    """State of one watched server across scrapes: what it answered (/v1/models, /version, its command line), each
    engine's history, and the scrape bookkeeping."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.judging = Judging(settings.thresholds, settings.quantile, settings.window, settings.model_shape,
                               draft_shape=settings.draft_shape, engine=settings.engine)
        self.histories: dict[tuple[str, str], EngineHistory] = {}  # per (model_name, engine)
        self.models: ModelsInfo | None = None
        self.version: str | None = None
        self.frontend: str | None = None  # "rust X" behind vLLM's Rust frontend (its /version says so)
        self._models_at: float | None = None
        self._cmdline: FoundCmdline | None = None
        self._cmdline_at: float | None = None
        self._cmdline_args: dict[str, object] | None = None
        self._given_args: dict[str, object] | None = None
        self._args_notes: list[str] = []  # values of the vLLM command line that vLLM would not take
        self._log: LogFacts | None = None  # what the start-up log states, re-read every --models.interval
        self._log_at: float | None = None
        self._log_note: str | None = None  # why the start-up log gave nothing (unreadable, no capacity line yet)
        self.errors: dict[str, int] = {}
        self.scrapes = 0  # scrapes begun by `scrape()` since start
        self.known_engines: set[tuple[str, str]] = set()
        # Per engine: the inputs of its resolved config, the notes on contradicting flags, and the config.
        self._configs: dict[str, tuple[tuple[object, ...], list[str], ServingConfig]] = {}
        self.seen_up = False  # a report with the target up has been kept since start (see `last`)
        self._last = TargetReport(settings.url, up=False, error="not scraped yet", error_reason="not_scraped")
        # Unix time of the first failed scrape of the current outage (None while up): how long vLLM has been down
        # or loading, for a pod's first start and every later reload alike (the alerts' start-up grace).
        self.down_since: float | None = None

    @property
    def last(self) -> TargetReport:
        """The latest report; keeping one with the target up marks it seen up."""
        return self._last

    @last.setter
    def last(self, report: TargetReport) -> None:
        self._last = report
        if report.up:
            self.seen_up = True

    def status(self) -> TargetStatus:
        """The latest report and the scrape bookkeeping, read-only (what the collector exports)."""
        return TargetStatus(self.settings.url, self._last, self.errors, self.known_engines, self.down_since,
                            self.seen_up)

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

    def _startup_log(self, now: float) -> LogFacts | None:
        """The start-up log's facts, read again every --models.interval (vLLM writes it while it starts; a log
        shipped into a volume appears late). A log that cannot be read or states no capacity is a note, never
        a failed scrape."""
        path = self.settings.startup_log
        if path is None:
            return None
        if self._log_at is not None and now - self._log_at < self.settings.models_interval:
            return self._log
        self._log_at = now
        try:
            with open(path, errors="replace") as f:
                text = f.read(STARTUP_LOG_MAX_BYTES)
        except OSError as exc:
            self._log, self._log_note = None, f"--vllm-startup-log {path} cannot be read: {exc.strerror}"
            return None
        try:
            self._log, self._log_note = self.settings.engine.parse_startup_log(text), None
        except ValueError as exc:
            self._log, self._log_note = None, f"--vllm-startup-log {path}: {exc}"
        return self._log

    def _config(self, engine: str, args: dict[str, object] | None, args_source: Source, cache: CapacityInfo | None,
                data_parallel_engines: int, models_len: int | None,
                log: LogFacts | None = None) -> tuple[list[str], ServingConfig]:
        """The engine's resolved config and the notes on flags that contradict vLLM, kept while their inputs
        stay equal: between two scrapes they seldom change, and resolving them anew for every engine of every
        scrape was a sizeable share of a data-parallel server's scrape."""
        inputs = (args, args_source, cache, data_parallel_engines, models_len, log)
        kept = self._configs.get(engine)
        if kept is not None and kept[0] == inputs:
            return kept[1], kept[2]
        overrides = self.settings.overrides
        notes = contradictions(overrides, cache, data_parallel_engines)
        cfg = resolve(overrides, args, args_source, cache, data_parallel_engines, models_len, log)
        cfg, problem = with_capacity(cfg, log, self.settings.model_shape, self.settings.kv_pool,
                                     self.settings.engine, self.settings.draft_shape)
        if problem:
            notes.append(problem)
        self._configs[engine] = (inputs, notes, cfg)
        return notes, cfg

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
        log = self._startup_log(now)
        report = TargetReport(self.settings.url, up=True, version=self.version, frontend=self.frontend,
                              observed_at=now,
                              notes=list(self._args_notes) + ([self._log_note] if self._log_note else []),
                              rules=snap.rules)
        models_len = self.models.max_model_len if self.models else None
        found = self._cmdline if self.settings.vllm_args is None and self.settings.discover_cmdline else None
        for e in snap.engines:
            cache = snap.cache_info.get(e.engine) or (next(iter(snap.cache_info.values()), None))
            notes, cfg = self._config(e.engine, args, args_source, cache, snap.data_parallel_engines, models_len, log)
            report.notes += [n for n in notes if n not in report.notes]
            key = (e.model_name, e.engine)
            history = self.histories.get(key) or self.histories.setdefault(
                key, EngineHistory(self.settings.thresholds, one_shot=gauges_only))
            item = judge(now, e, cfg, snap, history, self.judging, gauges_only, found)
            if isinstance(item, EngineGap):
                if not snap.cache_info and ("num_gpu_blocks" in item.missing or "block_size" in item.missing):
                    item = replace(item, hint=(
                        f"the server exports no {engine.names.cache_config} (the Rust frontend exports none); "
                        f"give {engine.name}'s --num-gpu-blocks-override and --block-size (--vllm-args, or its "
                        "command line), its start-up log (--vllm-startup-log), or --model-config with "
                        "--kv-cache-memory or --gpu-memory"))
                report.gaps.append(item)
            else:
                report.engines.append(item)
        # Forget engines that are gone (a restart under another name), so history cannot grow without bound.
        live = {(e.model_name, e.engine) for e in snap.engines}
        self.histories = {k: v for k, v in self.histories.items() if k in live}
        live_engines = {engine for _model, engine in live}
        self._configs = {k: v for k, v in self._configs.items() if k in live_engines}
        return report

    # -- the HTTP side ----------------------------------------------------------------------------
    async def _refresh_models(self, client: httpx.AsyncClient, now: float) -> None:
        """/v1/models and /version, at most once per --models.interval whether they answered or not; their
        failures count under the reason `models` (never as a failed scrape of /metrics)."""
        if self._models_at is not None and now - self._models_at < self.settings.models_interval:
            return
        self._models_at = now
        info = await server_info(client, self.settings.url, self.settings.timeout, self.settings.api_key)
        if info.models_failed:
            self.errors["models"] = self.errors.get("models", 0) + 1
        else:
            self.models = info.models
        if info.version_answered:
            self.version = info.version
            self.frontend = info.frontend

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
